// Package registry is the connector's runtime registry: the tenants, their
// gateways and secrets, per-tenant session settings and the bindings of
// platform chats to tenants. Entries made through the admin API live in the
// store (store.Registry), so every instance sharing the store sees every
// change; the YAML's tenants and routing are the declared layer, applied
// at start and on SIGHUP and never written to the store.
//
// # Precedence
//
// Effective merges the two layers: an id the YAML declares (a tenant, a
// gateway, a binding's platform, kind and id) is the YAML's, whatever the
// store holds under it; the API refuses to create, change or delete it
// (ErrDeclared). Everything else is the store's. A stored gateway or
// binding whose tenant is in neither layer is left out.
//
// # Secrets
//
// A gateway has up to contract.MaxSecretsPerGateway secrets, each valid until its optional
// expiry: Rotate adds a new secret and gives the others Grace (or the
// grace asked for) before they lapse. Secrets are stored as they are,
// because the relay verifies HMAC tokens with them; they never appear in
// logs, errors or listings, and the API shows a new one once.
package registry

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/session"
	"connector/store"
)

// Store namespaces and the change notification channel.
const (
	nsTenants  = "registry/tenants"
	nsGateways = "registry/gateways"
	nsBindings = "registry/bindings"
	nsPolicies = "registry/policies"
	// nsCreated holds the latest creation (UnixMicro) of a tenant deleted
	// under each id, kept after it: a tenant made again under the id is
	// created later (CreateTenant) whatever the clock of the instance
	// making it, so the vault, which refuses an earlier creation's write
	// over a later one's (store.Capabilities.PutUnlessLater), takes its.
	nsCreated = "registry/created"
	// ChangeChannel carries "look again" to every instance after a write.
	ChangeChannel = "registry/changed"
)

// DefaultGrace is how long a rotated-out secret stays valid when Rotate is
// not given a grace.
const DefaultGrace = time.Hour

// Errors. Test them with errors.Is; the admin API maps each to a status.
var (
	// ErrInvalid is a malformed id, platform, kind or setting.
	ErrInvalid = errors.New("registry: invalid")
	// ErrNotFound is an unknown tenant, gateway or binding.
	ErrNotFound = errors.New("registry: not found")
	// ErrExists is a create of an id that exists.
	ErrExists = errors.New("registry: already exists")
	// ErrDeclared is a change to an entry the YAML declares.
	ErrDeclared = errors.New("registry: declared in the YAML config; edit the file and send SIGHUP")
	// ErrConflict is a binding of a scope another tenant holds.
	ErrConflict = errors.New("registry: bound to another tenant")
)

// Tenant is one tenant and the session settings of its gateways.
type Tenant struct {
	ID      string   `json:"id"`
	Session *Session `json:"session,omitempty"`
	// MaxGateways bounds the tenant's gateways, declared and stored
	// together: creating one more (admin API, enrollment, provision) is
	// ErrLimit. Zero is DefaultMaxGateways; at most GatewayLimitCeiling.
	MaxGateways int `json:"max_gateways,omitempty"`
	// Created is when CreateTenant stored the tenant (zero for a declared
	// tenant, and for one stored before creation times were kept): what
	// the capability vault holds for the id from before then was stored
	// for an earlier tenant of the id, deleted since, and is not its
	// (vault.Config.Since).
	Created time.Time `json:"created,omitzero"`
}

// storedTenant is a tenant as the store holds it, with its generation:
// random, given by CreateTenant ("" in a record stored before generations
// were kept, and for a declared tenant), and tombstone from the moment
// DeleteTenant begins. A write for a tenant checks after it that the
// generation is still the one it read before (keptFor), so one racing a
// deletion, on any instance, is either seen by its sweep or taken back,
// and never inherited by a tenant made again under the id.
type storedTenant struct {
	Tenant
	Gen string `json:"gen,omitempty"`
}

// tombstone is the generation of a tenant being deleted: it is not found,
// and DeleteTenant run again finishes it.
const tombstone = "deleted"

// Bounds of a tenant's gateways (Tenant.MaxGateways). Every gateway may
// register a wake URL and is a socket the tenant may hold open, so one
// identity token must not be able to make them without end.
const (
	DefaultMaxGateways  = 100
	GatewayLimitCeiling = 10_000
)

// checkLimits validates the tenant's limits.
func (t Tenant) checkLimits() error {
	if t.MaxGateways < 0 || t.MaxGateways > GatewayLimitCeiling {
		return fmt.Errorf("%w: tenant %q max_gateways %d: want 0 (the default, %d) to %d", ErrInvalid, t.ID, t.MaxGateways, DefaultMaxGateways, GatewayLimitCeiling)
	}
	return nil
}

// Session holds the knobs of a tenant's gateways that change session
// keys: the YAML's tenants[].session, and the admin API's. Nil fields are
// the gateway defaults.
type Session struct {
	// GroupSessionsPerUser isolates users outside threads. Default true.
	GroupSessionsPerUser *bool `json:"group_sessions_per_user,omitempty" yaml:"group_sessions_per_user"`
	// ThreadSessionsPerUser isolates users inside threads. Default false.
	ThreadSessionsPerUser *bool `json:"thread_sessions_per_user,omitempty" yaml:"thread_sessions_per_user"`
	// Profile is the namespace under gateway multiplex_profiles. Default none.
	Profile string `json:"profile,omitempty" yaml:"profile"`
	// NexscopeKeyPlatform is the platform in the session keys of nexscope
	// rooms, which must be the one the tenant's gateways use: relay (the
	// default) for stock gateways, which know no nexscope platform and read
	// it as relay (agent:main:relay:group:<room>:<thread>); nexscope for
	// gateways with a nexscope platform plugin. Inbound events say nexscope
	// either way.
	NexscopeKeyPlatform string `json:"nexscope_key_platform,omitempty" yaml:"nexscope_key_platform"`
}

// Options returns the session-key options the knobs describe; nil is the
// defaults.
func (s *Session) Options() session.Options {
	o := session.DefaultOptions
	if s == nil {
		return o
	}
	if s.GroupSessionsPerUser != nil {
		o.GroupSessionsPerUser = *s.GroupSessionsPerUser
	}
	if s.ThreadSessionsPerUser != nil {
		o.ThreadSessionsPerUser = *s.ThreadSessionsPerUser
	}
	o.Profile = s.Profile
	o.NexscopeKeyPlatform = s.NexscopeKeyPlatform
	return o
}

// Gateway is one gateway identity of a tenant.
type Gateway struct {
	ID      string   `json:"id"`
	Tenant  string   `json:"tenant"`
	Secrets []Secret `json:"secrets"`
	// Origin is what made the stored gateway: OriginAdmin, OriginEnroll or
	// OriginProvision; empty for one stored before origins were kept
	// (provision treats it as its own).
	Origin string `json:"origin,omitempty"`
}

// Origins of a stored gateway. Provision manages only the gateways it
// made: an admin-made or enrolled gateway's secret is pinned where the
// gateway runs, and no identity token may rotate or learn it.
const (
	OriginAdmin     = "admin"
	OriginEnroll    = "enroll"
	OriginProvision = "provision"
)

// Secret is one accepted GATEWAY_RELAY_SECRET.
type Secret struct {
	Value string `json:"value"`
	// Expires ends the secret's validity; zero never.
	Expires time.Time `json:"expires,omitzero"`
	// Minter is the SHA-256 (hex) of the identity token a provision minted
	// the secret for; Provision answers the secret again to that token
	// only.
	Minter string `json:"minter,omitempty"`
}

// Binding gives a platform's chat scope to a tenant.
type Binding struct {
	Platform string `json:"platform"`
	Kind     string `json:"kind"`
	ID       string `json:"id"`
	Tenant   string `json:"tenant"`
	// Space is, for a scope claim, the space the claimed chat was in (a
	// Discord guild), as the management plane found it
	// (platform.Binding.Space); empty otherwise.
	Space string `json:"space,omitempty"`
	// Since is when the binding was written (swapBinding, on the writing
	// instance's clock; platform.Binding.Since); zero for a declared one
	// and one an earlier version wrote.
	Since time.Time `json:"since,omitzero"`
}

// key names the scope a binding claims: one tenant per key. A user may be
// linked to, and allowed by, several tenants; a principal is one per
// tenant.
func (b Binding) key() string {
	switch b.Kind {
	case platform.BindUser, platform.BindAllow:
		return b.Platform + "/" + b.Kind + "/" + b.ID + "/" + b.Tenant
	case platform.BindPrincipal:
		return b.Platform + "/" + b.Kind + "/" + b.Tenant
	}
	return b.Platform + "/" + b.Kind + "/" + b.ID
}

// Policy is a tenant's relevance policy on one platform, as a gateway of
// the tenant declared it (POST /relay/policy): a full replace at every
// gateway boot. Only the stored layer has policies.
type Policy struct {
	Tenant   string `json:"tenant"`
	Platform string `json:"platform"`
	// Gateway is the gateway that declared it.
	Gateway            string   `json:"gateway"`
	RequireAddress     bool     `json:"requireAddress"`
	FreeResponseScopes []string `json:"freeResponseScopes"`
	AllowOtherBots     bool     `json:"allowOtherBots"`
}

// Bounds of a declared policy.
const (
	MaxPolicyScopes     = 1000
	MaxPolicyScopeBytes = 128
)

func (p Policy) key() string { return p.Tenant + "/" + p.Platform }

// State is a set of registry entries: one layer, or their merge. One read
// from the store (Stored, Effective) shares its entries' slices and
// pointers with the registry's other reads: read them, do not modify them.
type State struct {
	Tenants  []Tenant
	Gateways []Gateway
	Bindings []Binding
	Policies []Policy
	// Corrupt names the stored entries passed over as they do not decode
	// (another program's value, a damaged one), each as "namespace key":
	// one bad value stops no tenant's apply (the apply logs and counts
	// them), and no claim is judged without what it would have said.
	Corrupt []string
}

// Registry reads and writes the stored layer and merges it with the
// declared one. Its methods are safe for concurrent use.
type Registry struct {
	kv    store.Registry
	ps    store.PubSub
	clock clock.Clock
	// mu serializes this instance's changes of tenants (their creation,
	// settings and end) and the admin API's Bind. Instances
	// sharing a store do not lock each other: a binding is written with
	// the store's CompareAndSwap, with its platform's ownership guard
	// (swapBinding), so of concurrent writers one wins and the others
	// judge again, and a tenant's own bindings (BindOwn, Claim, a link)
	// do not take mu (bindMu, one binding at a time), nor do a tenant's
	// gateways (their creation, rotation, removal, enrollment and
	// provision), principal, link codes, enrollment tokens, DM defaults,
	// binding removals, policies and wake URLs (tenantTurn); a gateway is created only while its
	// id is free; a write for a tenant is taken back when the tenant's
	// deletion began meanwhile (keptFor); for other entries the last write
	// wins.
	mu sync.Mutex
	// bindMu serializes this instance's binding writes (swapBinding's
	// rounds, from reading the platform's ownership guard to swapping it):
	// writers on one instance racing for one guard would otherwise starve
	// each other (a writer that lost the guard puts its binding back and
	// is late for the next round), and a provision fail with a binding
	// that "changed 16 times". Held across one binding's store calls, not
	// a request's: another tenant's bind waits for one write at most (its
	// rounds and their backoff). Instances sharing a store still race,
	// each losing writer backing off between rounds.
	bindMu sync.Mutex
	// reserveMu serializes this instance's swaps of binding reservations
	// (reserve, unreserve), for the same reason: a tenant's requests
	// racing for its one reservation entry would otherwise starve each
	// other (32 at once on one instance: some failed, the reservations
	// "changed 16 times"). Held across one reservation's store calls.
	reserveMu sync.Mutex
	// turnMu guards turns: the tenants whose turn (tenantTurn) is under
	// way on the instance, each with a channel closed when it ends. Held
	// across no store call.
	turnMu   sync.Mutex
	turns    map[string]chan struct{}
	declared atomic.Pointer[State]
	// wakesMu guards wakes, every wake URL by tenant then gateway as of
	// nsWake's revision wakesRev or later (wakesOf). Held across its read.
	wakesMu  sync.Mutex
	wakes    map[string]map[string]string
	wakesRev uint64
	// listMu guards listed: by namespace then key, each entry as the last
	// list of the namespace decoded it, so the next decodes only the
	// entries whose bytes changed; it keeps the keys that list read, no
	// other. Held across no store call.
	listMu sync.Mutex
	listed map[string]map[string]decoded
	// grantedIn is SetGrantedIn's; nil: BindOwn asks about no grants.
	grantedIn func(ctx context.Context, platformName, id, tenant string) (bool, error)
}

// SetGrantedIn sets how BindOwn asks whether tenant holds a live grant
// (platform.GrantedIn) of a chat id names, or of a chat in the space id
// names, on platformName. Call it before the registry serves requests.
func (r *Registry) SetGrantedIn(f func(ctx context.Context, platformName, id, tenant string) (bool, error)) {
	r.grantedIn = f
}

// decoded is a stored value and what it decodes to.
type decoded struct {
	raw []byte
	v   any
}

// New returns the registry kept in st; now is its clock (secret expiry).
func New(st store.Store, c clock.Clock) *Registry {
	c = cmp.Or(c, clock.System)
	r := &Registry{kv: st.Registry(), ps: st.PubSub(), clock: c, turns: map[string]chan struct{}{}, listed: map[string]map[string]decoded{}}
	r.declared.Store(&State{})
	return r
}

// SetDeclared replaces the declared (YAML) layer after checking it.
func (r *Registry) SetDeclared(s State) error {
	for _, t := range s.Tenants {
		if err := cmp.Or(CheckID("tenant", t.ID), t.Session.check(), t.checkLimits()); err != nil {
			return err
		}
	}
	for i, b := range s.Bindings {
		canon, err := CanonicalBinding(b)
		if err != nil {
			return err
		}
		s.Bindings[i] = canon
	}
	r.declared.Store(&s)
	return nil
}

// Clock is the registry's clock (New's), which its expiries are on.
func (r *Registry) Clock() clock.Clock { return r.clock }

// Declared returns the declared layer.
func (r *Registry) Declared() State { return *r.declared.Load() }

// Stored returns the stored layer.
func (r *Registry) Stored(ctx context.Context) (State, error) {
	var s State
	var tenants []storedTenant
	err := cmp.Or(list(ctx, r, nsTenants, &tenants, &s.Corrupt), list(ctx, r, nsGateways, &s.Gateways, &s.Corrupt),
		list(ctx, r, nsBindings, &s.Bindings, &s.Corrupt), list(ctx, r, nsPolicies, &s.Policies, &s.Corrupt))
	if err != nil {
		return State{}, err
	}
	for _, t := range tenants {
		if t.Gen != tombstone {
			s.Tenants = append(s.Tenants, t.Tenant)
		}
	}
	s.Bindings = slices.DeleteFunc(s.Bindings, isDropMark)
	return s, nil
}

// Revision identifies a version of the stored layer: it changes with every
// write to it, on any instance.
type Revision [4]uint64

// Revision returns the stored layer's revision without reading its
// entries, so a periodic look at an unchanged registry costs four small
// reads however many tenants and gateways it holds.
func (r *Registry) Revision(ctx context.Context) (Revision, error) {
	var rev Revision
	for i, ns := range [...]string{nsTenants, nsGateways, nsBindings, nsPolicies} {
		n, err := r.kv.Revision(ctx, ns)
		if err != nil {
			return Revision{}, fmt.Errorf("registry: read the revision of %s: %w", ns, err)
		}
		rev[i] = n
	}
	return rev, nil
}

// list reads every entry of namespace into out, passing over one that
// does not decode: it is named in corrupt (State.Corrupt) when that is
// not nil. It decodes only the entries whose bytes differ from what the
// last list of the namespace decoded (r.listed), handing out the others
// as decoded then (State: read, not modified).
func list[T any](ctx context.Context, r *Registry, namespace string, out *[]T, corrupt *[]string) error {
	entries, _, err := r.kv.List(ctx, namespace)
	if err != nil {
		return fmt.Errorf("registry: read %s: %w", namespace, err)
	}
	r.listMu.Lock()
	defer r.listMu.Unlock()
	listed := r.listed[namespace]
	if listed == nil {
		listed = make(map[string]decoded, len(entries))
		r.listed[namespace] = listed
	}
	start := len(*out)
	for _, e := range entries {
		d := listed[e.Key]
		v, ok := d.v.(T)
		if !ok || !bytes.Equal(d.raw, e.Value) {
			var fresh T
			if err := json.Unmarshal(e.Value, &fresh); err != nil {
				delete(listed, e.Key)
				if corrupt != nil {
					*corrupt = append(*corrupt, namespace+" "+e.Key)
				}
				continue
			}
			v, listed[e.Key] = fresh, decoded{slices.Clone(e.Value), fresh}
		}
		*out = append(*out, v)
	}
	if len(listed) > len(*out)-start { // some left the store
		for k := range listed {
			if _, found := slices.BinarySearchFunc(entries, k, func(e store.Entry, k string) int { return strings.Compare(e.Key, k) }); !found {
				delete(listed, k)
			}
		}
	}
	return nil
}

// Judgeable is nil unless an entry the ownership of platformName's chats
// depends on (a tenant, a binding of the platform) was passed over as
// corrupt: a claim judged, or a routing table applied, without it might
// give another tenant a chat it holds (a claim it set aside).
func (s State) Judgeable(platformName string) error {
	return s.corrupt(nsTenants+" ", nsBindings+" "+platformName+"/")
}

// TenantsWhole is nil unless a tenant record was passed over as corrupt:
// a state without it must not be applied, which would take the tenant
// for deleted and drop its buffered inbound and media with it.
func (s State) TenantsWhole() error { return s.corrupt(nsTenants + " ") }

// corrupt names the first entry of Corrupt starting with one of prefixes.
func (s State) corrupt(prefixes ...string) error {
	for _, c := range s.Corrupt {
		for _, p := range prefixes {
			if strings.HasPrefix(c, p) {
				return fmt.Errorf("registry: %s does not decode; an operator must fix or remove it", c)
			}
		}
	}
	return nil
}

// Effective is the merge of the declared and stored layers (see the
// package doc for the precedence), with expired secrets left out, and the
// earliest expiry of a secret still in it (zero when none expires): the
// moment the merge changes on its own.
func (r *Registry) Effective(ctx context.Context) (State, time.Time, error) {
	stored, err := r.Stored(ctx)
	if err != nil {
		return State{}, time.Time{}, err
	}
	decl := r.Declared()
	now := r.clock.Now()
	var out State
	tenants := make(map[string]bool)
	for _, t := range slices.Concat(decl.Tenants, stored.Tenants) { // the YAML's first: it wins
		if !tenants[t.ID] {
			tenants[t.ID] = true
			out.Tenants = append(out.Tenants, t)
		}
	}
	gateways := make(map[string]bool)
	for _, g := range decl.Gateways {
		gateways[g.ID] = true
	}
	out.Gateways = append(out.Gateways, decl.Gateways...)
	out.Corrupt = stored.Corrupt
	var next time.Time
	for _, g := range stored.Gateways {
		if gateways[g.ID] || !tenants[g.Tenant] {
			continue
		}
		live := g.liveSecrets(now)
		if len(live) == 0 {
			continue
		}
		for _, s := range live {
			if !s.Expires.IsZero() && (next.IsZero() || s.Expires.Before(next)) {
				next = s.Expires
			}
		}
		g.Secrets = live
		out.Gateways = append(out.Gateways, g)
	}
	scopes := make(map[string]bool)
	for _, b := range decl.Bindings {
		scopes[b.key()] = true
		out.Bindings = append(out.Bindings, b)
	}
	for _, b := range stored.Bindings {
		if !scopes[b.key()] && tenants[b.Tenant] {
			out.Bindings = append(out.Bindings, b)
		}
	}
	for _, p := range stored.Policies {
		if tenants[p.Tenant] {
			out.Policies = append(out.Policies, p)
		}
	}
	return out, next, nil
}

// liveSecrets are g's secrets not expired at now.
func (g Gateway) liveSecrets(now time.Time) []Secret {
	return slices.DeleteFunc(slices.Clone(g.Secrets), func(s Secret) bool { return !s.Expires.IsZero() && !now.Before(s.Expires) })
}

// PlatformBindings returns, for each platform, its bindings in s in the
// form platform.Binder takes.
func (s State) PlatformBindings() map[string][]platform.Binding {
	out := make(map[string][]platform.Binding)
	for _, b := range s.Bindings {
		out[b.Platform] = append(out[b.Platform], platform.Binding{Kind: b.Kind, ID: b.ID, Tenant: b.Tenant, Space: b.Space, Since: b.Since})
	}
	return out
}

// declaredTenant, declaredGateway and declaredBinding report whether the
// YAML declares the id.
func (r *Registry) declaredTenant(id string) bool {
	return slices.ContainsFunc(r.declared.Load().Tenants, func(t Tenant) bool { return t.ID == id })
}

func (r *Registry) declaredGateway(id string) bool {
	return slices.ContainsFunc(r.declared.Load().Gateways, func(g Gateway) bool { return g.ID == id })
}

func (r *Registry) declaredBinding(b Binding) (Binding, bool) {
	for _, d := range r.declared.Load().Bindings {
		if d.key() == b.key() {
			return d, true
		}
	}
	return Binding{}, false
}

// CreateTenant stores a new tenant, created now or, if a tenant deleted
// under the id was created as late (nsCreated), just after it. A write
// the replicas did not acknowledge (store.ErrNotReplicated) is taken back
// (takeBackTenant), and is that error; so is one that a deletion under
// the id finishing meanwhile made no later than the deleted tenant
// (ErrConflict).
func (r *Registry) CreateTenant(ctx context.Context, t Tenant) error {
	if err := cmp.Or(CheckID("tenant", t.ID), t.Session.check(), t.checkLimits()); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.declaredTenant(t.ID) {
		return ErrDeclared
	}
	_, last, err := r.lastCreation(ctx, t.ID)
	if err != nil {
		return err
	}
	if t.Created = r.clock.Now(); t.Created.UnixMicro() <= last {
		t.Created = time.UnixMicro(last + 1).UTC()
	}
	data, err := json.Marshal(storedTenant{t, newSecret()})
	if err != nil {
		return err
	}
	if created, err := r.kv.CompareAndSwap(ctx, nsTenants, t.ID, nil, data); err != nil || !created {
		if errors.Is(err, store.ErrNotReplicated) { // applied on the primary: taken back, so a retry creates it
			r.takeBackTenant(ctx, t.ID, t.Created, data)
		}
		return cmp.Or(err, fmt.Errorf("%w: tenant %q exists, or its deletion did not finish (delete it again)", ErrExists, t.ID))
	}
	// A deletion under the id that finished between the read and the write
	// kept a creation this one may not be later than: taken back.
	if _, again, err := r.lastCreation(ctx, t.ID); err == nil && again >= t.Created.UnixMicro() {
		r.takeBackTenant(ctx, t.ID, t.Created, data)
		return fmt.Errorf("%w: tenant %q was being deleted meanwhile; create it again", ErrConflict, t.ID)
	}
	r.notify(ctx)
	return nil
}

// lastCreation is nsCreated's entry for id, as stored, and the creation
// it holds (0 for none, and for one that does not decode).
func (r *Registry) lastCreation(ctx context.Context, id string) ([]byte, int64, error) {
	e, ok, err := r.kv.Get(ctx, nsCreated, id)
	if err != nil || !ok {
		return nil, 0, err
	}
	last, _ := strconv.ParseInt(string(e.Value), 10, 64)
	return e.Value, last, nil
}

// keepCreation records the creation of tenant id, being deleted as raw
// (its tombstone keeps it), in nsCreated unless a later one is recorded.
func (r *Registry) keepCreation(ctx context.Context, id string, raw []byte) error {
	var t storedTenant
	if json.Unmarshal(raw, &t) != nil || t.Created.IsZero() {
		return nil // ended by an earlier version, or corrupt
	}
	for range maxSwaps {
		old, last, err := r.lastCreation(ctx, id)
		if err != nil || last >= t.Created.UnixMicro() {
			return err
		}
		kept, err := r.kv.CompareAndSwap(ctx, nsCreated, id, old, strconv.AppendInt(nil, t.Created.UnixMicro(), 10))
		if errors.Is(err, store.ErrNotReplicated) {
			return nil // kept on the primary, as the tenant's removal after it is
		} else if err != nil || kept {
			return err
		}
	}
	return fmt.Errorf("%w: tenant %q's creation changed meanwhile; delete it again", ErrConflict, id)
}

// takeBackTenant deletes tenant id, stored as data by a creation the
// replicas did not acknowledge, as DeleteTenant does: another instance may
// have written for it meanwhile (a gateway, a binding), which must not
// outlive it. Failing that, it stays being deleted (DeleteTenant finishes
// it), or created when even its tombstone could not be written; one
// changed meanwhile stays.
func (r *Registry) takeBackTenant(ctx context.Context, id string, created time.Time, data []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	tomb, err := json.Marshal(storedTenant{Tenant{ID: id, Created: created}, tombstone})
	if err != nil {
		return
	}
	if ended, err := r.kv.CompareAndSwap(ctx, nsTenants, id, data, tomb); ended || errors.Is(err, store.ErrNotReplicated) {
		_ = r.sweepTenant(ctx, id, tomb)
	}
}

// SetSession replaces a stored tenant's session settings.
func (r *Registry) SetSession(ctx context.Context, tenant string, s *Session) error {
	if err := s.check(); err != nil {
		return err
	}
	return r.updateTenant(ctx, tenant, func(t *Tenant) { t.Session = s })
}

// SetMaxGateways replaces a stored tenant's bound on its gateways (zero:
// DefaultMaxGateways). Gateways beyond a lowered bound stay; no new one is
// made until the tenant is below it.
func (r *Registry) SetMaxGateways(ctx context.Context, tenant string, maxGateways int) error {
	if err := (Tenant{ID: tenant, MaxGateways: maxGateways}).checkLimits(); err != nil {
		return err
	}
	return r.updateTenant(ctx, tenant, func(t *Tenant) { t.MaxGateways = maxGateways })
}

// updateTenant applies change to stored tenant id: ErrDeclared for a
// tenant the YAML declares, ErrNotFound for none.
func (r *Registry) updateTenant(ctx context.Context, id string, change func(*Tenant)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.declaredTenant(id) {
		return ErrDeclared
	}
	var t storedTenant
	raw, ok, err := r.getRaw(ctx, nsTenants, id, &t)
	if err != nil {
		return err
	} else if !ok || t.Gen == tombstone {
		return ErrNotFound
	}
	change(&t.Tenant)
	_, err = r.swapTenant(ctx, id, raw, t)
	return err
}

// swapTenant stores t as tenant id if it is still raw, and returns it as
// stored (stamped): a tenant another instance changed or began deleting
// meanwhile is ErrConflict, not written over. A write the replicas did
// not acknowledge (store.ErrNotReplicated) is that error, and taken back
// unless it ends the tenant (its generation tombstone): a deletion on
// another instance may have read the end and swept entries since, which
// a tenant taken back would miss; it stays ended, and DeleteTenant run
// again finishes it.
func (r *Registry) swapTenant(ctx context.Context, id string, raw []byte, t storedTenant) ([]byte, error) {
	data, err := stamped(t)
	if err != nil {
		return nil, err
	}
	swap := r.swap
	if t.Gen == tombstone {
		swap = r.kv.CompareAndSwap
	}
	swapped, err := swap(ctx, nsTenants, id, raw, data)
	r.notify(ctx)
	if err != nil || !swapped {
		return nil, cmp.Or(err, fmt.Errorf("%w: tenant %q changed meanwhile; try again", ErrConflict, id))
	}
	return data, nil
}

// DeleteTenant removes a stored tenant with its stored gateways,
// bindings, wake URLs, policies, enrollment tokens, link codes and binding
// reservations (reserve); its creation stays (nsCreated). The tenant ends
// first (its generation becomes tombstone, which keeps its creation), so
// a write for it on any instance that the sweep after
// cannot see takes itself back (keptFor); run again after a failure, it
// finishes the sweep. Of deletions racing on several instances, the first
// to finish removes the tenant and the others stop (nil): each removes
// only entries it listed, each only after reading the tenant still being
// deleted (sweepEntry), so a tenant made again under the id meanwhile
// keeps what it made, the same bytes as the old tenant's too
// (removeMarked). It holds mu until the tenant has ended, not across the
// sweep: another tenant's changes go on meanwhile.
func (r *Registry) DeleteTenant(ctx context.Context, id string) error {
	raw, err := r.endTenant(ctx, id)
	if err != nil {
		return err
	}
	return r.sweepTenant(ctx, id, raw)
}

// endTenant makes stored tenant id's generation tombstone, under mu, and
// returns it as stored.
func (r *Registry) endTenant(ctx context.Context, id string) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.declaredTenant(id) {
		return nil, ErrDeclared
	}
	e, ok, err := r.kv.Get(ctx, nsTenants, id)
	if err != nil || !ok {
		return nil, cmp.Or(err, ErrNotFound)
	}
	var t storedTenant
	if json.Unmarshal(e.Value, &t) == nil && t.Gen == tombstone {
		return e.Value, nil
	}
	// One that does not decode (State.Corrupt) ends too: the operator's
	// way to remove it. The tombstone keeps the creation (keepCreation).
	return r.swapTenant(ctx, id, e.Value, storedTenant{Tenant{ID: id, Created: t.Created}, tombstone})
}

// sweepTenant is DeleteTenant's sweep of tenant id, being deleted as raw,
// and its removal.
func (r *Registry) sweepTenant(ctx context.Context, id string, raw []byte) error {
	// Its unredeemed enrollment tokens and link codes end with it (a
	// tenant made again under the id must not redeem them), and so do the
	// reservations of its requests whose instance stopped (it must not
	// count them).
	namespaces := []string{nsGateways, nsWake, nsBindings, nsPolicies, nsEnroll, nsLinkCodes, nsReserved, "registry/dropped" /* earlier versions' drop marks */}
	listed := make([][]store.Entry, len(namespaces))
	for i, ns := range namespaces {
		var err error
		if listed[i], _, err = r.kv.List(ctx, ns); err != nil {
			return fmt.Errorf("registry: read %s: %w", ns, err)
		}
	}
	deleting := func() (bool, error) {
		e, ok, err := r.kv.Get(ctx, nsTenants, id)
		return ok && bytes.Equal(e.Value, raw), err
	}
	for i, ns := range namespaces {
		for _, e := range listed[i] {
			if err := r.sweepEntry(ctx, ns, e, id, deleting); err != nil {
				return err
			}
		}
	}
	if err := r.keepCreation(ctx, id, raw); err != nil {
		return err
	}
	_, err := r.kv.CompareAndSwap(ctx, nsTenants, id, raw, nil) // not swapped: another deletion finished it
	r.notify(ctx)
	return err
}

// sweepEntry removes e, listed in namespace by DeleteTenant, when it is
// tenant's: a reservation or guard under the tenant's key, any other entry naming
// it (an enrollment token or link code that does not decode goes too, as
// sweep has it, and a binding whose key names the tenant, keyOf; another
// entry that does not decode stays: State.Corrupt), and only while deleting reports the tenant still being
// deleted (nil once it is not: another instance's deletion finished it,
// and an entry of the same bytes may be a tenant's made again under the
// id, a route key bound again). An entry changed since it was listed (a
// rotation on another instance) is read again and removed as it is now.
func (r *Registry) sweepEntry(ctx context.Context, namespace string, e store.Entry, tenant string, deleting func() (bool, error)) error {
	for range maxSwaps {
		var of struct{ Tenant string }
		if err := json.Unmarshal(e.Value, &of); namespace == nsReserved {
			of.Tenant, _, _ = strings.Cut(e.Key, "/") // a guard's too
		} else if err != nil && (namespace == nsEnroll || namespace == nsLinkCodes || namespace == nsBindings && keyOf(e.Key, tenant)) {
			of.Tenant = tenant
		} else if err != nil {
			return nil // corrupt: no tenant's (State.Corrupt)
		}
		if of.Tenant != tenant {
			return nil
		}
		if still, err := deleting(); err != nil || !still {
			return err
		}
		if done, err := r.removeMarked(ctx, namespace, e, deleting); err != nil || done {
			return err
		}
		now, ok, err := r.kv.Get(ctx, namespace, e.Key)
		if err != nil || !ok {
			return err
		}
		e.Value = now.Value
	}
	return fmt.Errorf("%w: %s entry %q kept changing while tenant %q was deleted; delete it again", ErrConflict, namespace, e.Key, tenant)
}

// keyOf reports whether the binding key is tenant's whatever its value:
// a link's, an allow-list entry's or a principal's key ends with its
// tenant (Binding.key), a drop mark's is dropKey.
func keyOf(key, tenant string) bool {
	p := strings.Split(key, "/")
	switch len(p) {
	case 2:
		return key == dropKey(tenant)
	case 3:
		return p[1] == platform.BindPrincipal && p[2] == tenant
	case 4:
		return (p[1] == platform.BindUser || p[1] == platform.BindAllow) && p[3] == tenant
	}
	return false
}

// removeMarked removes e while deleting reports the tenant still being
// deleted, and reports whether it is done with e: removed, or the tenant
// no longer being deleted. It first swaps e for a marked copy
// (stamped: e as every reader decodes it, bytes no writer makes), and
// looks at the tenant after that: a tenant made again under the id
// meanwhile that wrote the same bytes as e had them marked, and gets
// them back; the marked copy goes only while nothing replaced it. An
// entry that is no JSON object is removed unmarked.
func (r *Registry) removeMarked(ctx context.Context, namespace string, e store.Entry, deleting func() (bool, error)) (bool, error) {
	marked, err := stamped(json.RawMessage(e.Value))
	if err != nil { // no JSON object
		return r.kv.CompareAndSwap(ctx, namespace, e.Key, e.Value, nil)
	}
	if swapped, err := r.kv.CompareAndSwap(ctx, namespace, e.Key, e.Value, marked); err != nil || !swapped {
		return false, err
	}
	if still, err := deleting(); err != nil || !still {
		back, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		_, uerr := r.kv.CompareAndSwap(back, namespace, e.Key, marked, e.Value)
		return !still && err == nil, cmp.Or(err, uerr)
	}
	return r.kv.CompareAndSwap(ctx, namespace, e.Key, marked, nil)
}

// keptFor follows a write for tenant made after reading it of generation
// gen: nil while the tenant is still of gen, and the gateway ctx is for
// (ForGateway), if any, still the tenant's, with its key. Else a DeleteTenant began
// after that read, or the gateway was removed (a deprovision), on some
// instance, and the sweep or drop that followed may have missed the
// write: undo takes it back, and it is ErrNotFound. It looks, and undo
// runs, on ctx without its cancellation (bounded by releaseTimeout): a
// request given up right after its write is judged all the same; undo
// must use the ctx it is given.
func (r *Registry) keptFor(ctx context.Context, tenant, gen string, undo func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	t, err := r.tenant(ctx, tenant)
	if err == nil && t.Gen == gen {
		ok := true
		if by, set := ctx.Value(gatewayKey{}).(caller); set && by.key != nil {
			ok, err = r.GatewayHolds(ctx, tenant, by.gateway, by.key)
		} else if set {
			ok, err = r.GatewayOf(ctx, tenant, by.gateway)
		}
		if ok && err == nil {
			return nil
		}
	}
	if uerr := undo(ctx); uerr != nil && (err == nil || errors.Is(err, ErrNotFound)) {
		err = uerr
	}
	r.notify(ctx)
	return cmp.Or(err, ErrNotFound)
}

// gatewayKey is the context key of ForGateway, whose caller it holds.
type gatewayKey struct{}

// caller is the gateway a write is for, and the key it authenticated
// with (nil: none).
type caller struct {
	gateway string
	key     []byte
}

// ForGateway returns ctx for the writes gateway asks for (the management
// plane's), authenticated with key (GatewayHolds; nil: an identity
// token's gateway, GatewayOf): one that lands once the gateway is no
// longer its tenant's, or with key no longer its (a deprovision, on any
// instance, which drops what the management plane made for the tenant
// once the gateway is gone; the gateway made again since), is taken back,
// as one that lands once its tenant's deletion began (keptFor).
func ForGateway(ctx context.Context, gateway string, key []byte) context.Context {
	return context.WithValue(ctx, gatewayKey{}, caller{gateway, key})
}

// CreateGateway stores a new gateway of tenant with a fresh secret, which
// it returns. A tenant at its MaxGateways is ErrLimit. A request given up
// (ctx done) during the write, whose caller would never see the secret,
// leaves no gateway: the write runs on a context the request does not
// cancel (the store may apply a write whose caller stopped waiting), and
// is taken back.
func (r *Registry) CreateGateway(ctx context.Context, tenant, id string) (string, error) {
	if err := CheckID("gateway", id); err != nil {
		return "", err
	}
	if r.declaredGateway(id) {
		return "", ErrDeclared
	}
	done, err := r.tenantTurn(ctx, tenant)
	if err != nil {
		return "", err
	}
	defer done()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	var secret string
	var data []byte
	err = againIfRaced(func() error {
		if _, ok, err := r.kv.Get(ctx, nsGateways, id); err != nil || ok {
			return cmp.Or(err, ErrExists)
		}
		gen, guard, err := r.roomForGateway(ctx, tenant, id)
		if err == nil {
			secret, data, err = r.storeGateway(wctx, Gateway{ID: id, Tenant: tenant, Origin: OriginAdmin}, "", gen, guard)
		}
		return err
	})
	if err == nil && ctx.Err() != nil {
		_ = r.takeBack(ctx, nsGateways, id, data, nil) // failing that, it stays, as written
		return "", ctx.Err()
	}
	return secret, err
}

// takeBack puts the entry under key back from data to was (nil: removes
// it) unless another writer changed it since, on ctx without its
// cancellation (bounded by releaseTimeout): a write that applied but is
// refused (its replicas did not acknowledge it, its request was given
// up). A put back the replicas did not acknowledge applied on the primary
// all the same.
func (r *Registry) takeBack(ctx context.Context, namespace, key string, data, was []byte) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if back, err := r.kv.CompareAndSwap(ctx, namespace, key, data, was); err != nil && !errors.Is(err, store.ErrNotReplicated) || err == nil && !back {
		return cmp.Or(err, errRaced)
	}
	r.notify(ctx)
	return nil
}

// swap is the store's CompareAndSwap of key from old to value; a swap the
// replicas did not acknowledge (store.ErrNotReplicated), applied on the
// primary, is taken back (takeBack), and is that error.
func (r *Registry) swap(ctx context.Context, namespace, key string, old, value []byte) (bool, error) {
	swapped, err := r.kv.CompareAndSwap(ctx, namespace, key, old, value)
	if errors.Is(err, store.ErrNotReplicated) {
		_ = r.takeBack(ctx, namespace, key, value, old)
	}
	return swapped, err
}

// storeGateway stores g with a fresh secret minted for minter (see
// Secret.Minter), and returns the secret and the gateway as stored. The caller has checked that g's
// id is free (not declared, not stored) and that its tenant exists, of
// generation gen, and has room for it as of guard, in the tenant's turn. The store's
// CompareAndSwap stores it only while the id is still free: one another
// instance stored meanwhile is errRaced (the caller decides again), never
// replaced. When another
// instance made a gateway of the tenant since guard, the tenant's
// gateways are counted again, g aside: g stays while there is room for it
// (a provision on another instance may have answered its secret
// meanwhile), else it is taken back: ErrLimit, or errRaced when the guard
// kept changing, and the caller counts again. A deletion of
// the tenant meanwhile removes it again (keptFor): ErrNotFound. A write
// the replicas did not acknowledge (store.ErrNotReplicated) is taken back
// (swap), and is that error.
func (r *Registry) storeGateway(ctx context.Context, g Gateway, minter, gen string, guard []byte) (string, []byte, error) {
	secret := newSecret()
	g.Secrets = []Secret{{Value: secret, Minter: minter}}
	data, err := json.Marshal(g)
	if err != nil {
		return "", nil, err
	}
	if created, err := r.swap(ctx, nsGateways, g.ID, nil, data); err != nil || !created {
		return "", nil, cmp.Or(err, errRaced)
	}
	kept := false
	for i := 0; err == nil && !kept && i < maxSwaps; i++ {
		if kept, err = r.swapGuard(ctx, g.Tenant, gatewaysGuard, guard); err == nil && !kept {
			// another instance's creation since the count
			_, guard, err = r.roomForGateway(ctx, g.Tenant, g.ID)
		}
	}
	if err != nil || !kept {
		return "", nil, cmp.Or(err, r.takeBack(ctx, nsGateways, g.ID, data, nil), errRaced)
	}
	if err := r.keptFor(ctx, g.Tenant, gen, func(ctx context.Context) error { return r.removeGateway(ctx, g.Tenant, g.ID) }); err != nil {
		return "", nil, err
	}
	r.notify(ctx)
	return secret, data, nil
}

// roomForGateway returns tenant's generation, and its gateways' guard as
// read before counting them (storeGateway swaps it), when it has fewer
// gateways, declared and stored (other than id, the one to be stored),
// than its bound, else ErrLimit. Its
// caller is in the tenant's turn (tenantTurn) until it has stored the
// gateway, so creations on one instance count one after another, and
// the guard decides between instances.
func (r *Registry) roomForGateway(ctx context.Context, tenant, id string) (string, []byte, error) {
	t, err := r.tenant(ctx, tenant)
	if err != nil {
		return "", nil, err
	}
	guard, err := r.guard(ctx, tenant, gatewaysGuard)
	if err != nil {
		return "", nil, err
	}
	decl := r.declared.Load()
	n := 0
	for _, g := range decl.Gateways {
		if g.Tenant == tenant {
			n++
		}
	}
	var stored []Gateway
	if err := list(ctx, r, nsGateways, &stored, nil); err != nil {
		return "", nil, err
	}
	for _, g := range stored {
		if g.Tenant == tenant && g.ID != id && !r.declaredGateway(g.ID) {
			n++
		}
	}
	if limit := cmp.Or(t.MaxGateways, DefaultMaxGateways); n >= limit {
		return "", nil, fmt.Errorf("%w: tenant %q has %d gateways, its max_gateways is %d: remove one or raise the bound (connector admin tenant max-gateways)", ErrLimit, tenant, n, limit)
	}
	return t.Gen, guard, nil
}

// tenant returns tenant id, declared or stored, with its generation;
// ErrNotFound when neither layer has it, or it is being deleted.
func (r *Registry) tenant(ctx context.Context, id string) (storedTenant, error) {
	for _, t := range r.declared.Load().Tenants {
		if t.ID == id {
			return storedTenant{Tenant: t}, nil
		}
	}
	var t storedTenant
	if _, ok, err := r.getRaw(ctx, nsTenants, id, &t); err != nil {
		return storedTenant{}, err
	} else if !ok || t.Gen == tombstone {
		return storedTenant{}, ErrNotFound
	}
	return t, nil
}

// Rotate gives gateway id of tenant a fresh secret, which it returns; the
// secrets it had stay valid for grace (DefaultGrace when zero; negative
// ends them now), or until their own earlier expiry. A request given up
// (ctx done) during the write leaves the gateway as it was (as
// CreateGateway).
func (r *Registry) Rotate(ctx context.Context, tenant, id string, grace time.Duration) (secret string, err error) {
	if r.declaredGateway(id) {
		return "", ErrDeclared
	}
	done, err := r.tenantTurn(ctx, tenant)
	if err != nil {
		return "", err
	}
	defer done()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	var raw, data []byte
	err = againIfRaced(func() error {
		g, was, err := r.gateway(ctx, tenant, id)
		if err == nil {
			raw = was
			secret, data, err = r.rotateSecret(wctx, g, raw, grace, "")
		}
		return err
	})
	if err == nil && ctx.Err() != nil {
		_ = r.takeBack(ctx, nsGateways, id, data, raw)
		return "", ctx.Err()
	}
	return secret, err
}

// errRaced is the answer of rotateSecret and DeleteGateway's removal when
// the gateway changed in the store since it was read (another instance's
// rotation, or a delete and a re-create, perhaps by another tenant).
var errRaced = errors.New("registry: the gateway changed meanwhile")

// againIfRaced runs decide, which reads a gateway and rotates or removes
// it, again while its write is errRaced (so it decides anew from what the
// store holds now), a few times at most: past them ErrConflict.
func againIfRaced(decide func() error) error {
	for range 4 {
		if err := decide(); !errors.Is(err, errRaced) {
			return err
		}
	}
	return fmt.Errorf("%w: the gateway kept changing meanwhile; try again", ErrConflict)
}

// rotateSecret stores g, read as raw, with a fresh secret minted for
// minter first, which it returns with the gateway as stored, and its live secrets after it, each
// valid for grace at most (as Rotate), in the tenant's turn. The store's
// CompareAndSwap stores it only while the gateway is still raw: else
// errRaced, and nothing is written, so a secret another instance has
// handed out meanwhile is never dropped, nor another tenant's gateway of
// the id replaced. A write the replicas did not acknowledge
// (store.ErrNotReplicated) is taken back (swap), and is that error.
func (r *Registry) rotateSecret(ctx context.Context, g Gateway, raw []byte, grace time.Duration, minter string) (string, []byte, error) {
	grace = cmp.Or(grace, DefaultGrace)
	now := r.clock.Now()
	until := now.Add(max(grace, 0))
	secret := newSecret()
	keep := []Secret{{Value: secret, Minter: minter}}
	for _, s := range g.liveSecrets(now) {
		if grace < 0 {
			break
		}
		if s.Expires.IsZero() || s.Expires.After(until) {
			s.Expires = until
		}
		keep = append(keep, s)
	}
	if len(keep) > contract.MaxSecretsPerGateway {
		keep = keep[:contract.MaxSecretsPerGateway] // the newest first: the oldest go
	}
	g.Secrets = keep
	data, err := json.Marshal(g)
	if err != nil {
		return "", nil, err
	}
	if swapped, err := r.swap(ctx, nsGateways, g.ID, raw, data); err != nil || !swapped {
		return "", nil, cmp.Or(err, errRaced)
	}
	r.notify(ctx)
	return secret, data, nil
}

// DeleteGateway removes gateway id of tenant (removeGateway). One stored
// under id that does not decode (State.Corrupt: no tenant's, its secrets
// refused) goes whichever tenant is named: the operator's way to remove
// it (the management plane's deprovision finds its caller's gateway
// first, so it never gets here).
func (r *Registry) DeleteGateway(ctx context.Context, tenant, id string) error {
	if r.declaredGateway(id) {
		return ErrDeclared
	}
	done, err := r.tenantTurn(ctx, tenant)
	if err != nil {
		return err
	}
	defer done()
	var g Gateway
	if e, ok, err := r.kv.Get(ctx, nsGateways, id); err != nil || ok && json.Unmarshal(e.Value, &g) != nil {
		if err == nil {
			_, err = r.kv.CompareAndSwap(ctx, nsGateways, id, e.Value, nil)
			r.notify(ctx)
		}
		return err
	}
	return r.removeGateway(ctx, tenant, id)
}

// removeGateway removes gateway id of tenant and its wake URL (dropWake). The store's
// CompareAndSwap removes it only while it is the gateway read: one another
// tenant made of the id meanwhile, on any instance, stays (ErrNotFound).
func (r *Registry) removeGateway(ctx context.Context, tenant, id string) error {
	return againIfRaced(func() error {
		_, raw, err := r.gateway(ctx, tenant, id)
		if err != nil {
			return err
		}
		if deleted, err := r.kv.CompareAndSwap(ctx, nsGateways, id, raw, nil); err != nil || !deleted {
			return cmp.Or(err, errRaced)
		}
		err = r.dropWake(ctx, tenant, id)
		r.notify(ctx)
		return err
	})
}

// gateway reads stored gateway id, which must belong to tenant, and its
// value as stored (rotateSecret's raw).
func (r *Registry) gateway(ctx context.Context, tenant, id string) (Gateway, []byte, error) {
	var g Gateway
	raw, ok, err := r.getRaw(ctx, nsGateways, id, &g)
	if err != nil {
		return Gateway{}, nil, err
	}
	if !ok || g.Tenant != tenant {
		return Gateway{}, nil, ErrNotFound
	}
	return g, raw, nil
}

// Bind gives b's scope to b.Tenant. Binding a scope the same tenant holds
// is a no-op; one another tenant holds is ErrConflict (unbind it first).
// Of concurrent binds of one scope, on any instance, one wins: the others
// see its binding (the store's CompareAndSwap).
func (r *Registry) Bind(ctx context.Context, b Binding) error {
	b, err := CanonicalBinding(b)
	if err != nil {
		return err
	}
	r.mu.Lock()
	written, err := r.bind(ctx, b, nil)
	r.mu.Unlock()
	if written != nil || err != nil { // a refused write may stand (errBindingStays)
		r.uncount(ctx, b.Tenant)
	}
	return err
}

// BindOwn is Bind for bindings a tenant makes for itself (a provision's
// routeKeys), none of which may take a chat the ownership order gives
// another tenant by claim or author link (platform.Ownership.YieldsTo):
// that is ErrConflict too, as is one naming a chat or space where another
// tenant linked on the platform holds a live grant (SetGrantedIn: a chat
// its linked users spoke in) and the tenant does not hold it already
// (grantsYield), as is one the YAML gives another tenant (not
// ErrDeclared: the tenant is not told which layer holds the chat). Each is judged against the effective registry
// and written in one step with it (swapBinding's ownership guard), so a
// claim or link another instance stores meanwhile is never overridden.
// They are bound in order, judged against one read of the registry as
// long as no other write to the platform's bindings comes between; an
// error names the binding it stopped at. Bindings that would take a
// tenant past MaxTenantBindings are ErrLimit, and none of them is
// written. An operator's Bind overrides claims and links.
func (r *Registry) BindOwn(ctx context.Context, bs ...Binding) error {
	canon := make([]Binding, 0, len(bs))
	for _, b := range bs {
		c, err := CanonicalBinding(b)
		if err == nil && c.Tenant != bs[0].Tenant {
			err = fmt.Errorf("%w: BindOwn's bindings are of one tenant", ErrInvalid)
		}
		if err != nil {
			return fmt.Errorf("%s %q: %w", b.Kind, b.ID, err)
		}
		canon = append(canon, c)
	}
	if len(canon) == 0 {
		return nil
	}
	release, err := r.reserve(ctx, canon[0].Tenant, canon...)
	if err != nil {
		return err
	}
	defer release()
	yields, err := r.grantsYield(ctx, canon)
	if err != nil {
		return err
	}
	v := new(ownView)
	for _, b := range canon {
		if err := yields(ctx, b); err != nil {
			return err
		}
		if _, err := r.bind(ctx, b, v); err != nil {
			return fmt.Errorf("%s %q: %w", b.Kind, b.ID, err)
		}
	}
	return nil
}

// MaxTenantBindings bounds a tenant's stored bindings, whoever made them,
// as far as its provisions' routeKeys (BindOwn), its scope claims (Claim)
// and its author links (RedeemLinkCode) may take them: each adds
// bindings without another bound, and every apply on every instance reads
// every binding. A request that would take the tenant past it is ErrLimit
// and writes none of its bindings. Allow-lists (MaxAllowList a platform)
// and DM defaults (one a link) count, bounded otherwise.
const MaxTenantBindings = 10_000

// nsReserved holds, by tenant, the bindings requests on any instance
// counted against MaxTenantBindings and may not have written yet
// (reserve): each binding's key, and when its reservation lapses; and
// under countField, when known, at least as many as the tenant's stored
// bindings and reservations (reserve). Under the tenant's id and
// codesGuard or gatewaysGuard it holds the tenant's guards (swapGuard).
const nsReserved = "registry/reserved"

// countField is the field of a tenant's reservations entry (nsReserved)
// counting its bindings; no binding's key is spelt so (they hold "/").
const countField = "count"

// reserveFor is how long a reservation counts when its request never
// releases it (its instance stopped).
const reserveFor = time.Minute

// releaseTimeout bounds a release of reservations (reserve), which
// outlives its request's context.
const releaseTimeout = 10 * time.Second

// reserve counts tenant's stored bindings, its reserved ones and those of
// bs (all tenant's) held in neither way (under their key): past
// MaxTenantBindings it is ErrLimit. Else it reserves bs's new bindings
// until release, which the caller calls once it has written them or
// given up. The reservations are one store entry a tenant, swapped with
// CompareAndSwap, so racing requests on any instance count each other's.
// The entry keeps the count: each reservation adds to it and nothing
// takes from it (a binding removed, a reservation that was never
// written), so it stays at least the true count, and only a request it
// would take past the bound, or one finding no count (a binding written
// without a reservation drops it once written: uncount; one landing
// while a request is counted, or an earlier version's, counts from the
// next full count on), reads every binding to count them again; the
// others read none. It holds reserveMu across its store calls.
func (r *Registry) reserve(ctx context.Context, tenant string, bs ...Binding) (release func(), err error) {
	r.reserveMu.Lock()
	defer r.reserveMu.Unlock()
	for round := range maxSwaps {
		if err := backoff(ctx, round); err != nil {
			return nil, err
		}
		old, reserved, counted, err := r.reservations(ctx, tenant)
		if err != nil {
			return nil, err
		}
		now := r.clock.Now()
		for k, until := range reserved {
			if !now.Before(until) {
				delete(reserved, k) // lapsed
			}
		}
		held := make(map[string]bool)
		n := counted
		if n < 0 || n+len(bs) > MaxTenantBindings {
			var stored []Binding
			if err := list(ctx, r, nsBindings, &stored, nil); err != nil {
				return nil, err
			}
			n = 0
			for _, b := range slices.DeleteFunc(stored, isDropMark) {
				held[b.key()] = true
				if b.Tenant == tenant {
					n++
				}
			}
			for k := range reserved {
				if held[k] {
					delete(reserved, k) // written
				} else {
					n++
				}
			}
		}
		var mine []string
		for _, b := range bs {
			_, reserving := reserved[b.key()]
			if _, ok := r.declaredBinding(b); ok || held[b.key()] || reserving {
				continue // declared, bound or reserved already (counted), or another's (ErrConflict)
			}
			held[b.key()] = true
			mine = append(mine, b.key())
			reserved[b.key()] = now.Add(reserveFor)
			if n++; n > MaxTenantBindings {
				return nil, fmt.Errorf("%w: tenant %q would hold more than %d stored bindings; unbind some first", ErrLimit, tenant, MaxTenantBindings)
			}
		}
		if len(mine) == 0 && n == counted {
			return func() {}, nil
		}
		if swapped, err := r.swapReserved(ctx, tenant, old, reserved, n); len(mine) == 0 && (err != nil || swapped) {
			return func() {}, err // counted again
		} else if err != nil || swapped {
			return func() {
				// Not the request's context: a request given up (its
				// client gone) releases what it reserved all the same.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
				defer cancel()
				r.unreserve(ctx, tenant, mine, false)
			}, err
		}
	}
	return nil, fmt.Errorf("registry: tenant %q's binding reservations changed %d times while being counted; try again", tenant, maxSwaps)
}

// unreserve ends tenant's reservations of keys, and with uncount its
// count of bindings (after a write of one without a reservation: the
// next reserve counts them again). uncount always changes the entry, so
// a count another instance made before the write cannot be swapped in
// after it. On an error they lapse (reserveFor); a count stays.
func (r *Registry) unreserve(ctx context.Context, tenant string, keys []string, uncount bool) {
	r.reserveMu.Lock()
	defer r.reserveMu.Unlock()
	for round := range maxSwaps {
		if backoff(ctx, round) != nil {
			return
		}
		old, reserved, counted, err := r.reservations(ctx, tenant)
		if err != nil || old == nil && !uncount {
			return
		}
		if old == nil { // marked only for a tenant held: a Bind refused for no tenant leaves no entry
			if _, err := r.tenant(ctx, tenant); err != nil {
				return
			}
		}
		for _, k := range keys {
			delete(reserved, k)
		}
		if uncount {
			counted = -2 - mathrand.IntN(1<<30) // no count (reservations), unlike the entry read
		}
		if swapped, err := r.swapReserved(ctx, tenant, old, reserved, counted); err != nil || swapped {
			return
		}
	}
}

// uncount drops tenant's count of bindings (unreserve) after a write of
// one made without a reservation (an operator's Bind, a principal with
// its allow-list, a DM default), which the count does not hold.
func (r *Registry) uncount(ctx context.Context, tenant string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	r.unreserve(ctx, tenant, nil, true)
}

// reservations reads tenant's reservations, its count of bindings (-1:
// none) and the value they are stored as (nil: none). A field that is no
// time reserves nothing, the others all the same: the mark of a sweep
// (removeMarked) is such a field, and a marked entry may be put back as
// a tenant's made again under the id.
func (r *Registry) reservations(ctx context.Context, tenant string) (old []byte, reserved map[string]time.Time, counted int, err error) {
	e, _, err := r.kv.Get(ctx, nsReserved, tenant)
	reserved, counted = make(map[string]time.Time), -1
	var fields map[string]json.RawMessage
	if len(e.Value) > 0 && json.Unmarshal(e.Value, &fields) == nil { // a corrupt entry reserves nothing
		for k, v := range fields {
			var until time.Time
			if n := -1; k == countField && json.Unmarshal(v, &n) == nil {
				counted = max(n, -1)
			} else if json.Unmarshal(v, &until) == nil {
				reserved[k] = until
			}
		}
	}
	return e.Value, reserved, counted, err
}

// swapReserved stores reserved and the count (negative: none; below -1
// stored as uncount's mark) as tenant's reservations if they are still
// old (none: removed).
func (r *Registry) swapReserved(ctx context.Context, tenant string, old []byte, reserved map[string]time.Time, counted int) (bool, error) {
	fields := make(map[string]any, len(reserved)+1)
	for k, until := range reserved {
		fields[k] = until
	}
	if counted != -1 {
		fields[countField] = counted
	}
	var value []byte
	if len(fields) > 0 {
		var err error
		if value, err = json.Marshal(fields); err != nil {
			return false, err
		}
	}
	return r.kv.CompareAndSwap(ctx, nsReserved, tenant, old, value)
}

// MaxGrantAsks bounds the store reads of one BindOwn's grantsYield: the
// asks (grantedIn) of its bindings the tenant does not hold yet, one per
// other tenant linked on their platform; past it, ErrLimit and nothing
// asked, unless one binding is new (it cannot be asked for with fewer).
// A tenant binds more, against many linked tenants, a few at a time:
// those it holds are not asked.
const MaxGrantAsks = 1000

// grantsYield returns the check of a binding of bs (one tenant's), which
// BindOwn makes before it writes each: ErrConflict, naming the binding,
// when it names a chat or space where another tenant linked on its
// platform holds a live grant (grantedIn), unless the tenant holds it
// already. Judged key by key as they are written, a request refused at a
// key binds those before it (as a refusal by claim does) and costs the
// store the lookups of the keys it writes and of that one: sent again, it
// asks about that key alone, not about every key again; and one of several
// new keys that would ask more than MaxGrantAsks is ErrLimit before any.
// Grants are not under the ownership guard: one made on another instance
// after this read does not stop the binding, which then holds the chat
// (rule 1).
func (r *Registry) grantsYield(ctx context.Context, bs []Binding) (func(context.Context, Binding) error, error) {
	if r.grantedIn == nil || len(bs) == 0 {
		return func(context.Context, Binding) error { return nil }, nil
	}
	tenant := bs[0].Tenant
	s, _, err := r.Effective(ctx)
	if err != nil {
		return nil, err
	}
	held := make(map[string]bool)       // tenant's keys
	linked := make(map[string][]string) // platform -> tenants a user is linked to there
	for _, x := range s.Bindings {
		if x.Tenant == tenant {
			held[x.key()] = true
		}
		if x.Kind == platform.BindUser && x.Tenant != tenant && !slices.Contains(linked[x.Platform], x.Tenant) {
			linked[x.Platform] = append(linked[x.Platform], x.Tenant)
		}
	}
	asks, fresh := 0, 0
	for _, b := range bs {
		if !held[b.key()] {
			asks, fresh = asks+len(linked[b.Platform]), fresh+1
		}
	}
	if asks > MaxGrantAsks && fresh > 1 { // one key cannot be asked for fewer
		return nil, fmt.Errorf("%w: %d asks of other tenants' grants, over %d; bind fewer new route keys at once", ErrLimit, asks, MaxGrantAsks)
	}
	return func(ctx context.Context, b Binding) error {
		if held[b.key()] {
			return nil
		}
		for _, other := range linked[b.Platform] {
			granted, err := r.grantedIn(ctx, b.Platform, b.ID, other)
			if err != nil || granted {
				return fmt.Errorf("%s %q: %w", b.Kind, b.ID, cmp.Or(err, ErrConflict))
			}
		}
		return nil
	}, nil
}

// ownView is the view BindOwn judges by: one platform's effective
// bindings as of its ownership guard's value guard, with BindOwn's own
// writes since.
type ownView struct {
	platform string // "" until read: no binding's platform
	guard    []byte
	bindings []platform.Binding
	owners   *platform.Ownership // built from bindings when needed
}

// yieldsTo reports whether b must yield (Ownership.YieldsTo), judged by
// the view, read again unless it is of b's platform at guard.
func (v *ownView) yieldsTo(ctx context.Context, r *Registry, b Binding, guard []byte) (bool, error) {
	if v.platform != b.Platform || !bytes.Equal(v.guard, guard) {
		s, _, err := r.Effective(ctx)
		if err == nil {
			err = s.Judgeable(b.Platform)
		}
		if err != nil {
			return false, err
		}
		*v = ownView{platform: b.Platform, guard: guard, bindings: s.PlatformBindings()[b.Platform]}
	}
	if v.owners == nil {
		v.owners = platform.NewOwnership(v.bindings)
	}
	return v.owners.YieldsTo(b.Tenant, b.ID), nil
}

// wrote adds b, written with the platform's guard swapped to guard, to
// the view. Only a claim or a link can change what YieldsTo answers, so
// only those rebuild the ownership: a provision's keys do not, each time.
func (v *ownView) wrote(b Binding, guard []byte) {
	if v.platform != b.Platform {
		return
	}
	v.guard = guard
	v.bindings = append(v.bindings, platform.Binding{Kind: b.Kind, ID: b.ID, Tenant: b.Tenant, Space: b.Space, Since: b.Since})
	if platform.IsAuthorKind(b.Kind) {
		v.owners = nil
	}
}

// bind binds the canonical b, with own (not nil) BindOwn's judgement;
// it returns b as it wrote it (swapBinding; nil when b was bound
// already). It needs no lock of its caller's: swapBinding judges and
// writes in one step across instances.
func (r *Registry) bind(ctx context.Context, b Binding, own *ownView) ([]byte, error) {
	if d, ok := r.declaredBinding(b); ok {
		if d.Tenant == b.Tenant {
			return nil, nil
		}
		if own != nil { // a tenant is not told which layer holds another's chat
			return nil, ErrConflict
		}
		return nil, ErrDeclared
	}
	guard, written, err := r.swapBinding(ctx, b.key(), &b, func(cur *Binding, guard []byte) (bool, error) {
		switch {
		case cur == nil:
		case cur.Tenant != b.Tenant:
			return false, ErrConflict
		case cur.ID == b.ID:
			return false, nil // nothing to do
		}
		if own != nil {
			if taken, err := own.yieldsTo(ctx, r, b, guard); err != nil || taken {
				return false, cmp.Or(err, ErrConflict)
			}
		}
		return true, nil // new, or a tenant's principal replaced
	})
	if own != nil && written != nil {
		own.wrote(b, guard)
	}
	return written, err
}

// Claim stores tenant's scope claim of chat on platformName, as the
// platform placed it (platform.ScopeLocator), when the ownership order
// allows it (platform.Ownership.Claim over the effective bindings): else
// ErrConflict. Claiming a chat the tenant holds is a no-op; a claim the
// tenant's own binding of the chat sets aside is replaced. Of concurrent
// claims of one chat, on any instance, one wins. A claim that would take
// the tenant past MaxTenantBindings is ErrLimit.
func (r *Registry) Claim(ctx context.Context, tenant, platformName string, chat platform.Chat) error {
	b, err := CanonicalBinding(Binding{Platform: platformName, Kind: platform.BindScope, ID: chat.ID, Tenant: tenant, Space: chat.Space})
	if err != nil {
		return err
	}
	chat.ID, chat.Space = b.ID, b.Space
	if _, err := r.tenant(ctx, tenant); err != nil {
		return err
	}
	release, err := r.reserve(ctx, tenant, b)
	if err != nil {
		return err
	}
	defer release()
	_, _, err = r.swapBinding(ctx, b.key(), &b, func(cur *Binding, _ []byte) (bool, error) {
		s, _, err := r.Effective(ctx)
		if err == nil {
			err = s.Judgeable(platformName)
		}
		if err != nil {
			return false, err
		}
		holder := ""
		if cur != nil {
			holder = cur.Tenant
		}
		switch platform.NewOwnership(s.PlatformBindings()[platformName]).Claim(tenant, holder, chat) {
		case platform.ClaimStore, platform.ClaimReplace:
			return true, nil
		case platform.ClaimHeld:
			return false, nil
		}
		return false, ErrConflict
	})
	return err
}

// Unbind removes b's scope from b.Tenant. A scope the YAML gives
// b.Tenant is ErrDeclared; one it gives another tenant is ErrNotFound, as
// one nobody holds. A link (platform.BindUser) goes with the spent link
// codes that made it, first, so the user's resend of one links no more
// and a redemption linking meanwhile takes its link back (RedeemLinkCode).
func (r *Registry) Unbind(ctx context.Context, b Binding) error {
	b, err := CanonicalBinding(b)
	if err != nil {
		return err
	}
	done, err := r.tenantTurn(ctx, b.Tenant) // not mu: its sweep lists every tenant's link codes
	if err != nil {
		return err
	}
	defer done()
	if d, ok := r.declaredBinding(b); ok && d.Tenant == b.Tenant {
		return ErrDeclared
	}
	if b.Kind == platform.BindUser {
		if _, _, err := r.sweep(ctx, nsLinkCodes, b.Tenant, func(c expiring) bool { return c.Redeemed == b.key() }); err != nil {
			return err
		}
	}
	_, _, err = r.swapBinding(ctx, b.key(), nil, func(cur *Binding, _ []byte) (bool, error) {
		if cur == nil || cur.Tenant != b.Tenant {
			return false, ErrNotFound
		}
		return true, nil
	})
	return err
}

// RemoveCorrupt removes the entry stored under b's key when it does not
// decode (State.Corrupt: it names no tenant, and holds back b's
// platform), whichever tenant b names, and reports whether it did: the
// operator's way to remove it (the admin API's unbind). A tenant's release
// must not come here: the entry may have been another tenant's.
func (r *Registry) RemoveCorrupt(ctx context.Context, b Binding) (bool, error) {
	b, err := CanonicalBinding(b)
	if err != nil {
		return false, err
	}
	e, ok, err := r.kv.Get(ctx, nsBindings, b.key())
	if err != nil || !ok || json.Unmarshal(e.Value, new(Binding)) == nil {
		return false, err
	}
	removed, err := r.kv.CompareAndSwap(ctx, nsBindings, b.key(), e.Value, nil)
	if removed {
		r.notify(ctx)
	}
	return removed, err
}

// maxSwaps bounds swapBinding's and reserve's rounds: each lost round
// means another writer changed the binding, the platform's bindings or
// the tenant's reservations meanwhile. With backoff between them they
// cover about a second: a fleet's instances all binding on one platform
// at once (16 rounds without backoff failed 1 in 100 of them).
const maxSwaps = 64

// backoff waits before round (0, 1, ...) of a write whose rounds before it
// lost to other writers (swapBinding's, reserve's): none before the first,
// then a random time up to 1 ms doubled each round, at most maxBackoff, so
// instances racing for one store entry spread out instead of colliding
// again in step.
// It waits on the real clock, which times no rule here (a fake clock would
// hold a test's losing writer for good), and ends early with ctx.
func backoff(ctx context.Context, round int) error {
	if round == 0 {
		return nil
	}
	return clock.System.Sleep(ctx, mathrand.N(min(time.Millisecond<<min(round, 10), maxBackoff)))
}

// maxBackoff bounds one wait of backoff.
const maxBackoff = 32 * time.Millisecond

// errBindingStays is swapBinding's error for a write it refused (not
// replicated, or judged on a stale guard) and could not put back: the
// write stands.
var errBindingStays = errors.New("registry: a refused binding write stays, its put-back failing")

// nsOwnership holds one guard entry per platform: a random value every
// binding written through swapBinding replaces (see there). The ownership
// order judges a binding by the platform's other bindings (claims, links),
// which the store's CompareAndSwap of one key cannot hold still; the guard
// is the one key every such write swaps.
const nsOwnership = "registry/ownership"

// swapBinding reads the stored binding under key and asks decide whether
// to replace it with next (nil: remove it); decide's cur is nil when the
// key is absent, and decide may judge by the effective registry, read
// after the guard it is given (nil without next, or none stored). It
// writes with the store's CompareAndSwap from the value it read, so a
// change another writer made in between (on any instance) is never
// overwritten: decide judges again with it. A write of next then swaps
// the guard of next's platform (nsOwnership) from the value it had before
// decide looked: when another write to the platform's bindings swapped it
// meanwhile, decide may have judged without that write, so the binding is
// put back as it was and decide judges again. Of concurrent writes that
// the ownership order judges against each other (a provision's BindOwn
// and another tenant's claim or link), on any instance, one stands. It
// tells every instance after a write, and returns the guard it wrote and
// next as written (nil when it wrote none): with a field of its own
// (written), so a take-back of it never removes the same binding another
// write made since. A write the replicas did not acknowledge
// (store.ErrNotReplicated) is put back, and is that error; one whose
// put-back failed stands (on the primary at least) and is
// errBindingStays. next's Since is set to
// the time of the write (the registry's clock). next's tenant
// must exist (else ErrNotFound), and a deletion of it meanwhile takes
// next back (keptFor), a write that stays so too, another tenant's
// binding it replaced (a claim set aside) back in place (giveBack). It needs no
// lock of its caller's, and takes bindMu for its rounds.
func (r *Registry) swapBinding(ctx context.Context, key string, next *Binding, decide func(cur *Binding, guard []byte) (bool, error)) (guard, written []byte, err error) {
	var value []byte
	var gen string
	if next != nil {
		t, err := r.tenant(ctx, next.Tenant)
		if err != nil {
			return nil, nil, err
		}
		gen = t.Gen
		next.Since = r.clock.Now()
		if value, err = stamped(*next); err != nil {
			return nil, nil, err
		}
	}
	r.bindMu.Lock()
	guard, was, wrote, err := r.swapBindingLocked(ctx, key, next, value, decide)
	r.bindMu.Unlock()
	if next != nil && (wrote || errors.Is(err, errBindingStays)) {
		if kerr := r.keptFor(ctx, next.Tenant, gen, func(ctx context.Context) error {
			return r.giveBack(ctx, nsBindings, key, value, was)
		}); kerr != nil {
			return nil, nil, kerr
		}
	}
	if err != nil || !wrote {
		return nil, nil, err
	}
	r.notify(ctx)
	return guard, value, nil
}

// stamped is v, a struct or a JSON object, as JSON with a field
// "written" of random value (last, so it is the one decoded): bytes no
// other write makes, so a take-back of them (a CompareAndSwap from them)
// never removes what another write made since, the same entry for a
// tenant made again under the id too.
func stamped(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil || len(data) < 2 || data[len(data)-1] != '}' {
		return nil, cmp.Or(err, fmt.Errorf("registry: %T is no JSON object", v))
	}
	sep := ","
	if len(data) == 2 {
		sep = ""
	}
	return fmt.Appendf(data[:len(data)-1], `%s"written":%q}`, sep, rand.Text()), nil
}

// swapBindingLocked is swapBinding's rounds, under bindMu: the guard it
// wrote, what it replaced (a refused write too, errBindingStays), and
// whether it wrote (value under key; nil: removed it).
func (r *Registry) swapBindingLocked(ctx context.Context, key string, next *Binding, value []byte, decide func(cur *Binding, guard []byte) (bool, error)) ([]byte, replaced, bool, error) {
	for round := range maxSwaps {
		if err := backoff(ctx, round); err != nil {
			return nil, replaced{}, false, err
		}
		var guard []byte
		if next != nil {
			e, _, err := r.kv.Get(ctx, nsOwnership, next.Platform)
			if err != nil {
				return nil, replaced{}, false, err
			}
			guard = e.Value // nil: none stored
		}
		var cur *Binding
		e, ok, err := r.kv.Get(ctx, nsBindings, key)
		if err != nil {
			return nil, replaced{}, false, err
		}
		var old []byte
		if ok {
			old = e.Value
			cur = new(Binding)
			if err := json.Unmarshal(e.Value, cur); err != nil {
				return nil, replaced{}, false, fmt.Errorf("registry: %s entry %q is corrupt: %w", nsBindings, key, err)
			}
		}
		write, err := decide(cur, guard)
		if err != nil || !write {
			return nil, replaced{}, false, err
		}
		var was replaced
		if next != nil {
			if was, err = r.replacing(ctx, old, next.Tenant); err != nil {
				return nil, replaced{}, false, err
			}
		}
		swapped, err := r.kv.CompareAndSwap(ctx, nsBindings, key, old, value)
		// A swap the replicas did not acknowledge (store.ErrNotReplicated)
		// applied on the primary: it is put back, as a refused write.
		unreplicated := errors.Is(err, store.ErrNotReplicated)
		if err != nil && !unreplicated {
			return nil, replaced{}, false, err
		}
		if !swapped && !unreplicated {
			continue
		}
		var wrote []byte
		held := !unreplicated
		if next != nil && held {
			wrote = []byte(newSecret())
			held, err = r.kv.CompareAndSwap(ctx, nsOwnership, next.Platform, guard, wrote)
		}
		if err != nil || !held {
			// Put the binding back as it was, unless another writer
			// changed it since; for a request given up meanwhile too. A
			// put-back that failed leaves it written: errBindingStays.
			back, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			if _, uerr := r.kv.CompareAndSwap(back, nsBindings, key, value, old); uerr != nil && !errors.Is(uerr, store.ErrNotReplicated) {
				err = fmt.Errorf("%w: %w", errBindingStays, uerr)
			} else if uerr != nil && err == nil {
				err = uerr
			}
			r.notify(back) // a look caught between the two swaps is made up for
			cancel()
			if err != nil {
				return nil, was, false, err
			}
			continue
		}
		return wrote, was, true, nil
	}
	return nil, replaced{}, false, fmt.Errorf("registry: binding %q changed %d times while being written; try again", key, maxSwaps)
}

// SetPolicy stores p, replacing the tenant's earlier policy on the
// platform.
func (r *Registry) SetPolicy(ctx context.Context, p Policy) error {
	if p.Tenant == "" || p.Platform == "" || len(p.Platform) > 64 {
		return fmt.Errorf("%w: policy needs a tenant and a platform name", ErrInvalid)
	}
	if len(p.FreeResponseScopes) > MaxPolicyScopes {
		return fmt.Errorf("%w: more than %d freeResponseScopes", ErrInvalid, MaxPolicyScopes)
	}
	for _, sc := range p.FreeResponseScopes {
		if sc == "" || len(sc) > MaxPolicyScopeBytes {
			return fmt.Errorf("%w: a freeResponseScopes entry is empty or longer than %d bytes", ErrInvalid, MaxPolicyScopeBytes)
		}
	}
	done, err := r.tenantTurn(ctx, p.Tenant)
	if err != nil {
		return err
	}
	defer done()
	t, err := r.tenant(ctx, p.Tenant)
	if err != nil {
		return err
	}
	return r.put(ctx, p.Tenant, t.Gen, nsPolicies, p.key(), p, false)
}

// Relevance returns, for each platform, the tenants' policies in s in the
// form platform.RelevanceTaker takes; a policy for platform "relay"
// applies to every platform without its own.
func (s State) Relevance(platforms []string) map[string]map[string]platform.Relevance {
	out := make(map[string]map[string]platform.Relevance, len(platforms))
	for _, name := range platforms {
		byTenant := map[string]platform.Relevance{}
		for _, pass := range []string{"relay", name} { // the platform's own wins
			for _, p := range s.Policies {
				if p.Platform == pass {
					byTenant[p.Tenant] = platform.Relevance{RequireAddress: p.RequireAddress, FreeResponseScopes: p.FreeResponseScopes, AllowOtherBots: p.AllowOtherBots}
				}
			}
		}
		out[name] = byTenant
	}
	return out
}

// getRaw decodes the stored entry under key into v, and returns the value
// as stored too (a CompareAndSwap's old).
func (r *Registry) getRaw(ctx context.Context, namespace, key string, v any) ([]byte, bool, error) {
	e, ok, err := r.kv.Get(ctx, namespace, key)
	if err != nil || !ok {
		return nil, false, err
	}
	if err := json.Unmarshal(e.Value, v); err != nil {
		return nil, false, fmt.Errorf("registry: %s entry %q is corrupt: %w", namespace, key, err)
	}
	return e.Value, true, nil
}

// put stores v, a struct, under key for tenant, read of generation gen,
// in place of what the key holds (a fresh entry, an enrollment token or a
// link code, only while the key is free), and tells every instance. A
// write the replicas did not acknowledge (store.ErrNotReplicated) is
// taken back, what it replaced back in place, and is that error: a
// refused code does not count as outstanding. A deletion of the tenant
// meanwhile takes it back too (keptFor), another tenant's entry it
// replaced (a user's DM default) back in place (giveBack). Neither take-back removes
// the same entry another write made since (stamped), for a tenant made
// again under the id either.
func (r *Registry) put(ctx context.Context, tenant, gen, namespace, key string, v any, fresh bool) error {
	data, was, err := r.write(ctx, tenant, namespace, key, v, fresh)
	if err != nil {
		return err
	}
	if err := r.keptFor(ctx, tenant, gen, func(ctx context.Context) error {
		return r.giveBack(ctx, namespace, key, data, was)
	}); err != nil {
		return err
	}
	r.notify(ctx)
	return nil
}

// giveBack swaps data, written under key, back for was, what it
// replaced, when was is another tenant's (a DM default, a claim set
// aside) and that tenant was not gone before the write; else it removes
// data. A look at that tenant after the swap that finds it gone or of
// another generation than before the write (a deletion whose sweep may
// have passed the key while it held data, a tenant made again under the
// id since), or its managed bindings dropped since or being dropped
// (DropManaged, whose drop may have passed the key too), takes the swap
// back: was neither outlives its tenant or a deprovision nor reaches one
// made again under the id. A look that fails otherwise (the store) keeps
// it in place, as losing a live tenant's entry is the worse mistake.
func (r *Registry) giveBack(ctx context.Context, namespace, key string, data []byte, was replaced) error {
	if was.tenant == "" || was.gen == tombstone {
		_, err := r.kv.CompareAndSwap(ctx, namespace, key, data, nil)
		return err
	}
	if swapped, err := r.kv.CompareAndSwap(ctx, namespace, key, data, was.value); err != nil || !swapped {
		return err
	}
	after, err := r.tenant(ctx, was.tenant)
	var drop store.Entry
	var mark dropMark
	if err == nil {
		drop, _, err = r.kv.Get(ctx, nsBindings, dropKey(was.tenant))
		_ = json.Unmarshal(drop.Value, &mark) // none, or corrupt: no drop under way
	}
	if err == nil && after.Gen == was.gen && bytes.Equal(drop.Value, was.drop) && !mark.dropping(r.clock.Now()) || err != nil && !errors.Is(err, ErrNotFound) {
		return nil
	}
	_, err = r.kv.CompareAndSwap(ctx, namespace, key, was.value, nil)
	return err
}

// replaced is an entry a write for a tenant replaced (value; nil: none)
// and, when it is another tenant's, that tenant, its generation
// (tombstone: gone already) and its last DropManaged's mark, as read
// before the write, which giveBack puts it back for only.
type replaced struct {
	value       []byte
	tenant, gen string
	drop        []byte
}

// replacing reads what replaced needs of old, the entry a write for
// tenant is about to replace.
func (r *Registry) replacing(ctx context.Context, old []byte, tenant string) (replaced, error) {
	was := replaced{value: old}
	var of struct{ Tenant string }
	if json.Unmarshal(old, &of) != nil || of.Tenant == tenant {
		return was, nil
	}
	was.tenant, was.gen = of.Tenant, tombstone
	t, err := r.tenant(ctx, of.Tenant)
	if err == nil {
		was.gen = t.Gen
		var drop store.Entry
		drop, _, err = r.kv.Get(ctx, nsBindings, dropKey(of.Tenant))
		was.drop = drop.Value
	}
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	return was, err
}

// write is put's write, without its look at the tenant nor its
// notification: it stores v, tenant's, stamped, and returns it as stored,
// and what it replaced.
func (r *Registry) write(ctx context.Context, tenant, namespace, key string, v any, fresh bool) (data []byte, was replaced, err error) {
	if data, err = stamped(v); err != nil {
		return nil, replaced{}, err
	}
	for range maxSwaps {
		var old store.Entry
		if !fresh {
			if old, _, err = r.kv.Get(ctx, namespace, key); err != nil {
				return nil, replaced{}, err
			}
		}
		if was, err = r.replacing(ctx, old.Value, tenant); err != nil {
			return nil, replaced{}, err
		}
		if swapped, err := r.swap(ctx, namespace, key, old.Value, data); err != nil || swapped {
			return data, was, err
		}
		if fresh {
			return nil, replaced{}, fmt.Errorf("registry: the key of a new %s entry is taken; try again", namespace)
		}
	}
	return nil, replaced{}, fmt.Errorf("%w: %s entry %q kept changing while being written; try again", ErrConflict, namespace, key)
}

// notify tells every instance to look again. A lost notification is made
// up by Watch's periodic look.
func (r *Registry) notify(ctx context.Context) { _ = r.ps.Publish(ctx, ChangeChannel, []byte("1")) }

// Watch calls changed after every change notification and every period,
// until ctx is done. It returns an error only when it cannot subscribe.
func (r *Registry) Watch(ctx context.Context, period time.Duration, changed func()) error {
	msgs, cancel, err := r.ps.Subscribe(ctx, ChangeChannel)
	if err != nil {
		return err
	}
	go func() {
		defer cancel()
		t := clock.NewTicker(r.clock, period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-msgs:
				if !ok {
					return
				}
			case <-t.C:
			}
			changed()
		}
	}()
	return nil
}

// idPattern is what tenant and gateway ids made through the API look like.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckID refuses an id (what names its kind: tenant, gateway) that does
// not match idPattern: ids are parts of store keys, vault keys and metrics
// labels, which take no '/' or ':'.
func CheckID(what, id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w: %s id %q: want 1 to 64 of A-Z a-z 0-9 . _ -, starting with a letter or digit", ErrInvalid, what, textsplit.Truncate(id, 80))
	}
	return nil
}

// Slack's id shapes: a workspace, a conversation, a user.
var (
	slackTeam    = regexp.MustCompile(`^T[A-Z0-9]{2,30}$`)
	slackChannel = regexp.MustCompile(`^[CGD][A-Z0-9]{2,30}$`)
	slackUser    = regexp.MustCompile(`^[UWB][A-Z0-9]{2,30}$`)
)

// roomPattern is a nexscope room name.
var roomPattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,32}$`)

// CanonicalBinding checks b and spells its id as the platform routes it:
// a Discord id or a Telegram chat or user id as the number it spells, a
// nexscope room name as it is, a principal as one of the policies.
func CanonicalBinding(b Binding) (Binding, error) {
	id := textsplit.Truncate(b.ID, 80) // a provision's route key is not bounded before
	bad := func(want string) (Binding, error) {
		return Binding{}, fmt.Errorf("%w: %s binding %s %q: want %s", ErrInvalid, b.Platform, b.Kind, id, want)
	}
	authorKind := b.Kind == platform.BindUser || b.Kind == platform.BindScope || b.Kind == platform.BindDMDefault || b.Kind == platform.BindAllow
	switch {
	case (b.Platform == "discord" || b.Platform == "telegram" || b.Platform == "slack") && b.Kind == platform.BindPrincipal:
		if b.ID != platform.PrincipalOwnerOnly && b.ID != platform.PrincipalAllowList && b.ID != platform.PrincipalAny {
			return bad("owner-only, allow-list or any")
		}
	case b.Platform == "discord" && (b.Kind == platform.BindGuild || authorKind):
		n, err := strconv.ParseUint(b.ID, 10, 64)
		if err != nil {
			return bad("a Discord id")
		}
		b.ID = strconv.FormatUint(n, 10)
	case b.Platform == "telegram" && (b.Kind == platform.BindChat || authorKind):
		n, err := strconv.ParseInt(b.ID, 10, 64)
		if err != nil || n == 0 {
			return bad("a non-zero chat or user id")
		}
		b.ID = strconv.FormatInt(n, 10)
	case b.Platform == "slack" && b.Kind == platform.BindTeam:
		if !slackTeam.MatchString(b.ID) {
			return bad("a Slack workspace id (T...)")
		}
	case b.Platform == "slack" && (b.Kind == platform.BindChannel || b.Kind == platform.BindScope):
		if !slackChannel.MatchString(b.ID) {
			return bad("a Slack conversation id (C..., G..., D...)")
		}
	case b.Platform == "slack" && authorKind:
		if !slackUser.MatchString(b.ID) {
			return bad("a Slack user id (U..., W...)")
		}
	case b.Platform == "whatsapp_cloud" && (b.Kind == platform.BindPhoneNumber || b.Kind == platform.BindUser || b.Kind == platform.BindDMDefault):
		if !platform.ValidWhatsAppID(b.ID) {
			return bad("a phone number id or wa_id (digits)")
		}
	case b.Platform == "nexscope" && b.Kind == platform.BindRoom:
		if !roomPattern.MatchString(b.ID) {
			return bad("a room name (^[a-zA-Z0-9_-]{1,32}$)")
		}
	default:
		return Binding{}, fmt.Errorf("%w: binding platform %q kind %q: want discord guild, telegram chat, slack team or channel, whatsapp_cloud phone_number or nexscope room, or on discord, telegram and slack user, scope, dm_default, principal or allow, on whatsapp_cloud user or dm_default", ErrInvalid, b.Platform, b.Kind)
	}
	switch {
	case b.Space == "":
	case b.Platform == "discord" && b.Kind == platform.BindScope:
		n, err := strconv.ParseUint(b.Space, 10, 64)
		if err != nil {
			return Binding{}, fmt.Errorf("%w: discord scope %q: space %q is not a Discord id", ErrInvalid, b.ID, b.Space)
		}
		b.Space = strconv.FormatUint(n, 10)
	case b.Platform == "slack" && b.Kind == platform.BindScope:
		if !slackTeam.MatchString(b.Space) {
			return Binding{}, fmt.Errorf("%w: slack scope %q: space %q is not a Slack workspace id", ErrInvalid, b.ID, b.Space)
		}
	default:
		return Binding{}, fmt.Errorf("%w: %s binding %s %q: only a Discord or Slack scope claim has a space", ErrInvalid, b.Platform, b.Kind, b.ID)
	}
	return b, nil
}

// check validates the settings; nil is valid.
func (s *Session) check() error {
	if s == nil {
		return nil
	}
	switch s.NexscopeKeyPlatform {
	case "", "relay", "nexscope":
	default:
		return fmt.Errorf("%w: session nexscope_key_platform %q: want relay or nexscope", ErrInvalid, s.NexscopeKeyPlatform)
	}
	if len(s.Profile) > 256 {
		return fmt.Errorf("%w: session profile longer than 256 bytes", ErrInvalid)
	}
	return nil
}

// newSecret returns a fresh random gateway secret.
func newSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
