package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"regexp"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/ttlcache"
	"connector/platform"
	"connector/store"
)

// Command registration (docs/contract.md, "Discord command manifests";
// with several instances docs/durability.md). Each tenant's latest
// command_manifest is registered as the guild commands of the guilds it
// owns in Config.Guilds; only DMTenant's goes global, with contexts
// [BOT_DM]. A guild is reconciled (GET, compare, bulk PUT when it differs)
// only once the Gateway delivered it in the current session, so a guild
// the bot is not in draws no 403. It is best effort: a failure is logged
// per scope and retried on the next manifest or GUILD_CREATE, and never
// touches a handshake.
//
// With several instances the manifests live in the store (Registry
// namespace discord/commands, one entry per tenant with the creation time
// of the tenant it was sent for), announced on the pub/sub channel
// discord/commands and looked at again every commandPoll, so the instance
// running the Gateway session registers a manifest whichever instance the
// hello reached. A manifest ends with its tenant: one of another creation
// is ignored, and deleted by the instances that saw the tenant configured
// and then not (forget), or that started since (forgetAll); an instance
// whose registry apply lags never deletes or replaces the manifest of a
// creation newer than it knows. Beyond the creations an instance saw end,
// creations are ordered by their times (docs/durability.md).

// commandName is what the contract lets through; invalid entries are
// dropped one by one.
var commandName = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// Discord's limits on chat-input commands, per guild and globally.
const (
	maxCommands           = 100
	maxCommandDescription = 100
)

// serverOnlyKeys are fields Discord adds to a registered command.
var serverOnlyKeys = []string{"id", "application_id", "version", "guild_id"}

// globalOnlyKeys are fields Discord honours on global commands only; they
// are left out of guild commands (Discord would drop them, and the registry
// would never compare equal).
var globalOnlyKeys = []string{"contexts", "integration_types", "dm_permission"}

// Where the global DM commands may be used: contexts [BOT_DM], for the app
// installed to guilds (integration_types [GUILD_INSTALL]).
var (
	dmContexts   = []any{1}
	guildInstall = []any{0}
)

// globalScope names the global registry among the scopes to reconcile;
// every other scope is a guild id.
const globalScope = ""

// Where the manifests are shared with several instances: the Registry
// namespace and the notice channel, and how often the namespace is looked
// at in case a notice was lost.
const (
	manifestsNamespace = "discord/commands"
	manifestsChannel   = "discord/commands"
	commandPoll        = 30 * time.Second
	storeTimeout       = 5 * time.Second
	// manifestGets is how many tenants' entries a reconcile reads one by
	// one; for more it lists the namespace once.
	manifestGets = 16
	// forgetFor and maxForget bound the ended creations kept
	// (commandSync.forget).
	forgetFor = 24 * time.Hour
	maxForget = 10_000
)

// manifest is a tenant's manifest as kept and stored: its entries, and the
// creation time of the tenant it was sent for (zero for a declared tenant).
type manifest struct {
	Created  time.Time        `json:"created,omitzero"`
	Commands []map[string]any `json:"commands"`
}

// commandSync holds the tenants' manifests and reconciles the registries
// they decide (see above) on its loop.
type commandSync struct {
	p     *Platform
	dirty chan struct{}
	// shared is where the manifests live with several instances; nil with
	// one (manifests then).
	shared store.Registry
	ps     store.PubSub
	poke   chan struct{} // a look at the shared manifests is due

	mu        sync.Mutex
	manifests map[string]manifest  // one instance: tenant -> its latest manifest
	unsaved   map[string]manifest  // several: the latest manifests not stored yet
	revs      map[string]uint64    // several: the stored entries' revisions a look or a save saw
	lastRev   uint64               // several: the namespace's revision the last look read
	tenants   map[string]time.Time // the configured tenants and their creation; nil until SetTenants
	// forget are, with several instances, the tenants this instance saw
	// configured and then not (deleted), or made again, with the creation
	// it saw end: their stored manifests of that creation (or, of a tenant
	// not configured, an earlier one) are deleted by a look, and replaced
	// by a save, whatever the clocks that made the creations. Each is kept
	// forgetFor, the most recent maxForget: a late manifest comes from an
	// instance whose apply lags (seconds), which deletes it itself once it
	// applies the end. A tenant it never saw may be newer than its last
	// registry apply (one that failed, or has not come yet): its manifest
	// stays. forgetAll, from the first SetTenants to the first look that
	// lists the namespace, deletes every tenant's not configured (deleted
	// while this instance was not running); one whose delete failed is
	// kept in forget, with its creation, for the next look.
	forget    *ttlcache.Cache[string, time.Time]
	forgetAll bool
	present   map[string]bool // guilds the Gateway delivered
	// pending are the scopes to reconcile, each with whether to empty its
	// registry when its tenant has no manifest (a guild rebound).
	pending map[string]bool
}

func newCommandSync(p *Platform) *commandSync {
	c := &commandSync{
		p: p, dirty: make(chan struct{}, 1), poke: make(chan struct{}, 1),
		manifests: map[string]manifest{}, unsaved: map[string]manifest{}, revs: map[string]uint64{},
		present: map[string]bool{}, pending: map[string]bool{},
		forget: ttlcache.New[string, time.Time](maxForget, forgetFor, p.clock),
	}
	if p.deps.Cluster != nil && p.deps.Store != nil {
		c.shared, c.ps = p.deps.Store.Registry(), p.deps.Store.PubSub()
	}
	return c
}

// ObserveHello implements platform.HelloObserver: a discord hello's
// command_manifest is validated and scheduled for reconciliation. It never
// blocks and never fails the handshake. The manifest is kept as sent for
// created, the relay's view of the tenant: the platform's (SetTenants)
// follows it, so a hello between the two of a tenant made again belongs to
// the new tenant.
func (p *Platform) ObserveHello(tenant string, created time.Time, gatewayID string, hello *contract.GatewayFrame) {
	if hello == nil || hello.Platform != platformName || len(hello.CommandManifest) == 0 {
		return
	}
	entries, dropped, err := parseManifest(hello.CommandManifest)
	if err != nil {
		p.log.Warn("discord command_manifest ignored", "tenant", tenant, "gateway_id", gatewayID, "err", err)
		return
	}
	if dropped > 0 {
		p.log.Warn("discord command_manifest entries dropped", "tenant", tenant, "gateway_id", gatewayID, "dropped", dropped, "kept", len(entries))
	}
	p.cmds.set(tenant, created, entries)
}

// SetTenants implements platform.TenantKeeper: the manifests of tenants
// not in created, or sent for an earlier creation, are ignored and
// forgotten, as is the channel context kept for them.
func (p *Platform) SetTenants(created map[string]time.Time) {
	p.cmds.setTenants(created)
	p.channelContext.SetTenants(created)
}

// parseManifest validates a command_manifest array entry by entry.
func parseManifest(raw json.RawMessage) (entries []map[string]any, dropped int, err error) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, 0, errors.New("command_manifest is not an array")
	}
	seen := map[string]bool{}
	for _, item := range list {
		var e map[string]any
		if json.Unmarshal(item, &e) != nil || e == nil {
			dropped++
			continue
		}
		name, _ := e["name"].(string)
		desc, _ := e["description"].(string)
		n := utf8.RuneCountInString(desc)
		if !commandName.MatchString(name) || n == 0 || n > maxCommandDescription || seen[name] || len(entries) == maxCommands {
			dropped++
			continue
		}
		if opts, ok := e["options"]; ok && opts != nil {
			if _, isList := opts.([]any); !isList {
				dropped++
				continue
			}
		}
		for _, k := range serverOnlyKeys {
			delete(e, k)
		}
		seen[name] = true
		entries = append(entries, e)
	}
	return entries, dropped, nil
}

// set records tenant's manifest, sent for its creation at created (in
// memory, or to be stored by the loop), and queues the scopes it decides: the tenant's guilds, and the global
// registry (DMTenant's manifest, or kept empty when there is no DMTenant).
func (c *commandSync) set(tenant string, created time.Time, entries []map[string]any) {
	c.mu.Lock()
	m := manifest{Created: created, Commands: entries}
	if c.shared != nil {
		c.unsaved[tenant] = m
	} else {
		c.manifests[tenant] = m
	}
	c.queueManifestLocked(tenant)
	c.mu.Unlock()
	c.signal()
}

// queueManifestLocked queues the scopes tenant's manifest decides: its
// guilds, and the global registry when it is DMTenant's (or there is no
// DMTenant). Called under mu.
func (c *commandSync) queueManifestLocked(tenant string) {
	c.queueTenantLocked(tenant, false)
	if dm := c.p.cfg.DMTenant; dm == "" || dm == tenant {
		c.queueLocked(globalScope, false)
	}
}

// queueLocked queues scope, to be emptied when its tenant has no manifest
// if empty (or if queued so before). Called under mu.
func (c *commandSync) queueLocked(scope string, empty bool) {
	c.pending[scope] = c.pending[scope] || empty
}

// queueTenantLocked queues tenant's guilds, as queueLocked. Called under
// mu.
func (c *commandSync) queueTenantLocked(tenant string, empty bool) {
	for guild, owner := range c.p.guildOwners() {
		if owner == tenant {
			c.queueLocked(guild, empty)
		}
	}
}

// currentLocked reports whether a manifest of tenant sent for its creation
// at created is to be used: the tenant is configured (or SetTenants not
// called yet) and this is its creation (whichever clock made it), or it
// has none (declared). Called under mu.
func (c *commandSync) currentLocked(tenant string, created time.Time) bool {
	if c.tenants == nil {
		return true
	}
	t, ok := c.tenants[tenant]
	return ok && (t.IsZero() || created.Equal(t))
}

// earlierLocked reports whether a manifest of tenant, configured, sent for
// its creation at created is of an earlier creation than the configured
// one: before it by the clocks, or one this instance saw end (forget),
// whichever clock made it. Called under mu.
func (c *commandSync) earlierLocked(tenant string, created time.Time) bool {
	now, ok := c.tenants[tenant]
	ended, saw := c.forget.Get(tenant)
	return ok && !created.Equal(now) && (created.Before(now) || saw && created.Equal(ended))
}

// setTenants records the configured tenants and their creation: the
// manifests of any other, or of an earlier creation, are ignored from now
// on, and forgotten (deleted from the store by the next look). The guilds
// of a tenant made again since the last call are emptied.
func (c *commandSync) setTenants(created map[string]time.Time) {
	c.mu.Lock()
	before := c.tenants
	c.tenants = make(map[string]time.Time, len(created))
	maps.Copy(c.tenants, created)
	left, remade := before == nil, false
	c.forgetAll = c.forgetAll || before == nil
	for tenant, was := range before {
		now, ok := c.tenants[tenant]
		switch {
		case !ok:
			left = true
		case !now.Equal(was): // deleted and made again, by any clock
			left, remade = true, true
			c.queueTenantLocked(tenant, true)
		default:
			continue
		}
		if c.shared != nil { // one instance: no manifest of an ended creation is stored, nor kept past here
			c.forget.Add(tenant, was)
		}
	}
	for tenant, now := range c.tenants {
		if ended, _ := c.forget.Get(tenant); now.IsZero() || ended.Equal(now) { // declared, or back as it was
			c.forget.Remove(tenant)
		}
	}
	for _, kept := range []map[string]manifest{c.manifests, c.unsaved} {
		for tenant, m := range kept {
			if _, known := before[tenant]; !known && m.Created.IsZero() {
				// Its hello came before this instance's apply of the tenant.
				m.Created = c.tenants[tenant]
				kept[tenant] = m
			}
			if left && !c.currentLocked(tenant, m.Created) {
				delete(kept, tenant)
			}
		}
	}
	if !left {
		c.mu.Unlock()
		return
	}
	c.lastRev = 0 // the next look lists the namespace
	c.mu.Unlock()
	select {
	case c.poke <- struct{}{}:
	default:
	}
	if remade {
		c.signal()
	}
}

// guildDelivered records that the Gateway delivered guild (GUILD_CREATE),
// bound or not (one bound later is queued then: rebound), and queues it
// when it is bound; it is reconciled when its tenant has a manifest then.
func (c *commandSync) guildDelivered(guild string) {
	_, bound := c.p.guildOwners()[guild]
	c.mu.Lock()
	c.present[guild] = true
	if bound {
		c.queueLocked(guild, false)
	}
	c.mu.Unlock()
	if bound {
		c.signal()
	}
}

// guildLeft records that the bot was removed from guild (GUILD_DELETE):
// it is no longer reconciled until a GUILD_CREATE delivers it again.
func (c *commandSync) guildLeft(guild string) {
	c.mu.Lock()
	delete(c.present, guild)
	c.mu.Unlock()
}

// sessionStarted forgets the guilds delivered so far: a new Gateway session
// (READY) delivers each guild the bot is in again, and the bot may have
// left others meanwhile, unseen.
func (c *commandSync) sessionStarted() {
	c.mu.Lock()
	clear(c.present)
	c.mu.Unlock()
}

// rebound queues guild, whose tenant changed or which is no longer bound,
// when the Gateway has delivered it: its registry now follows the new
// tenant's manifest, or is emptied.
func (c *commandSync) rebound(guild string) {
	c.mu.Lock()
	queue := c.present[guild]
	if queue {
		c.queueLocked(guild, true)
	}
	c.mu.Unlock()
	if queue {
		c.signal()
	}
}

func (c *commandSync) signal() {
	select {
	case c.dirty <- struct{}{}:
	default:
	}
}

// scopeSync is a queued scope; empty says to empty its registry when its
// tenant has no manifest.
type scopeSync struct {
	scope string
	empty bool
}

// take returns the queued scopes, sorted, leaving out guilds while the
// Gateway session does not run here or has not delivered them (GUILD_CREATE
// queues them again), and empties the queue.
func (c *commandSync) take() []scopeSync {
	gwHere := c.p.gwHere.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	scopes := make([]scopeSync, 0, len(c.pending))
	for _, scope := range slices.Sorted(maps.Keys(c.pending)) {
		if scope == globalScope || (gwHere && c.present[scope]) {
			scopes = append(scopes, scopeSync{scope, c.pending[scope]})
		}
	}
	clear(c.pending)
	return scopes
}

// load returns the manifests of the tenants of scopes that are configured:
// the stored ones with several instances.
func (c *commandSync) load(ctx context.Context, scopes []scopeSync) (map[string][]map[string]any, error) {
	tenants := map[string]bool{}
	for _, s := range scopes {
		tenant := c.p.cfg.DMTenant
		if s.scope != globalScope {
			tenant = c.p.guildOwners()[s.scope]
		}
		tenants[tenant] = tenant != ""
	}
	stored, err := c.read(ctx, tenants)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]map[string]any{}
	for tenant, ok := range tenants {
		if !ok {
			continue
		}
		if m, ok := c.manifests[tenant]; ok && c.currentLocked(tenant, m.Created) { // one instance
			out[tenant] = m.Commands
		}
		if value, ok := stored[tenant]; ok {
			var m manifest
			if err := json.Unmarshal(value, &m); err != nil {
				c.p.log.Warn("discord stored command_manifest unreadable", "tenant", tenant)
				continue
			}
			if c.currentLocked(tenant, m.Created) {
				out[tenant] = m.Commands
			}
		}
	}
	return out, nil
}

// read returns the stored values of the tenants marked true, with several
// instances: one read each for a few, one listing of the namespace for
// more (a new Gateway session delivers every guild at once), so the reads
// stay within storeTimeout however many tenants there are.
func (c *commandSync) read(ctx context.Context, tenants map[string]bool) (map[string][]byte, error) {
	stored := map[string][]byte{}
	if c.shared == nil {
		return stored, nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if len(tenants) > manifestGets {
		entries, _, err := c.shared.List(ctx, manifestsNamespace)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if tenants[e.Key] {
				stored[e.Key] = e.Value
			}
		}
		return stored, nil
	}
	for tenant, ok := range tenants {
		if !ok {
			continue
		}
		e, found, err := c.shared.Get(ctx, manifestsNamespace, tenant)
		if err != nil {
			return nil, err
		}
		if found {
			stored[tenant] = e.Value
		}
	}
	return stored, nil
}

// desired is what scope should hold, and the tenant its calls count
// against: a guild's tenant's manifest without the global-only fields; for
// the global registry DMTenant's, usable in DMs with the bot only. ok is
// false when the tenant has no manifest and the registry is to be left as
// it is.
func (c *commandSync) desired(s scopeSync, manifests map[string][]map[string]any) (tenant string, want []map[string]any, ok bool) {
	if s.scope == globalScope {
		tenant = c.p.cfg.DMTenant
	} else {
		tenant = c.p.guildOwners()[s.scope]
	}
	entries, known := manifests[tenant]
	want = make([]map[string]any, 0, len(entries))
	if s.scope == globalScope && tenant == "" {
		return tenant, want, true
	}
	if !known && !s.empty {
		return tenant, nil, false
	}
	for _, e := range entries {
		cmd := maps.Clone(e)
		for _, k := range globalOnlyKeys {
			delete(cmd, k)
		}
		if s.scope == globalScope {
			cmd["contexts"] = dmContexts
			cmd["integration_types"] = guildInstall
		}
		want = append(want, cmd)
	}
	return tenant, want, true
}

// loop stores the new manifests at once and reconciles after each
// debounced burst of them until ctx ends; with several instances it also
// watches the stored ones.
func (c *commandSync) loop(ctx context.Context) {
	if c.shared != nil {
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { c.watch(ctx) })
	}
	debounce := c.p.cfg.CommandSyncDebounce
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.dirty:
		}
		c.save(ctx)
		for quiet := false; !quiet; { // until debounce passes without a signal
			fired := make(chan struct{})
			t := c.p.clock.AfterFunc(debounce, func() { close(fired) })
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-c.dirty:
				t.Stop()
				c.save(ctx)
			case <-fired:
				quiet = true
			}
		}
		scopes := c.take()
		if len(scopes) == 0 {
			continue
		}
		manifests, err := c.load(ctx, scopes)
		if err != nil {
			c.p.log.Warn("discord command registry sync failed: the manifests could not be read; trying again later", "err", err)
			c.mu.Lock()
			for _, s := range scopes { // tried again at the next look's tick
				c.queueLocked(s.scope, s.empty)
			}
			c.mu.Unlock()
			continue
		}
		for _, s := range scopes {
			c.reconcileScope(ctx, s, manifests)
		}
	}
}

// save stores the manifests set since the last save, with several
// instances, and notifies the others. One that could not be stored is
// tried again at the next save (a new manifest, or the next look).
func (c *commandSync) save(ctx context.Context) {
	if c.shared == nil {
		return
	}
	c.mu.Lock()
	unsaved := maps.Clone(c.unsaved)
	clear(c.unsaved)
	c.mu.Unlock()
	for _, tenant := range slices.Sorted(maps.Keys(unsaved)) {
		changed, err := c.store(ctx, tenant, unsaved[tenant])
		if errors.Is(err, errEarlierCreation) {
			c.p.log.Warn("discord command_manifest not stored: it was sent for an earlier creation of the tenant than the stored one", "tenant", tenant)
			continue
		}
		if err != nil {
			c.mu.Lock()
			if _, newer := c.unsaved[tenant]; !newer {
				c.unsaved[tenant] = unsaved[tenant]
			}
			c.mu.Unlock()
			c.p.log.Warn("discord command_manifest not stored; trying again later", "tenant", tenant, "err", err)
			continue
		}
		if !changed {
			continue
		}
		// A reconcile may have taken the tenant's scopes, queued by set,
		// between the hello and this save and found nothing stored yet (or
		// a store that failed before): queued again, the next take has
		// them read what is stored now.
		c.mu.Lock()
		c.queueManifestLocked(tenant)
		c.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, storeTimeout)
		err = c.ps.Publish(pctx, manifestsChannel, []byte(tenant))
		cancel()
		if err != nil {
			c.p.log.Warn("discord command_manifest notice not sent; the other instances see it within their poll", "tenant", tenant, "err", err)
		}
	}
}

// errEarlierCreation refuses to store a manifest sent for an earlier
// creation of its tenant than the stored one's.
var errEarlierCreation = errors.New("manifest of an earlier creation")

// store stores tenant's manifest m unless the store holds it already, and
// reports whether it changed. It never replaces the manifest of a later
// creation of the tenant (errEarlierCreation), by the clocks and not one
// it saw end (earlierLocked), nor one stored since it read
// (errManifestChanged): this instance has not applied that creation yet,
// and the others would delete the manifest it stored as of an earlier one.
func (c *commandSync) store(ctx context.Context, tenant string, m manifest) (bool, error) {
	value, _ := json.Marshal(m) // decoded JSON: cannot fail
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	e, found, err := c.shared.Get(ctx, manifestsNamespace, tenant)
	if err != nil {
		return false, err
	}
	if found && bytes.Equal(e.Value, value) {
		return false, nil
	}
	var have manifest
	if found && json.Unmarshal(e.Value, &have) == nil && have.Created.After(m.Created) {
		c.mu.Lock()
		ended := c.earlierLocked(tenant, have.Created)
		c.mu.Unlock()
		if !ended {
			return false, errEarlierCreation
		}
	}
	var old []byte // absent
	if found {
		old = e.Value
	}
	// Only over the value read: a manifest stored since (of a later
	// creation, maybe) is judged again at the next save.
	switch swapped, err := c.shared.CompareAndSwap(ctx, manifestsNamespace, tenant, old, value); {
	case err != nil:
		return false, err
	case !swapped:
		return false, errManifestChanged
	}
	if e, ok, err := c.shared.Get(ctx, manifestsNamespace, tenant); err == nil && ok && bytes.Equal(e.Value, value) {
		c.mu.Lock()
		c.revs[tenant] = max(c.revs[tenant], e.Rev) // save queues its scopes
		c.mu.Unlock()
	}
	return true, nil
}

// errManifestChanged is a manifest not stored because the stored one
// changed between its read and the write; the next save tries again.
var errManifestChanged = errors.New("the stored manifest changed meanwhile")

// watch looks at the stored manifests on every notice, every commandPoll
// and when the configured tenants change, until ctx ends.
func (c *commandSync) watch(ctx context.Context) {
	tick := clock.NewTicker(c.p.clock, commandPoll)
	defer tick.Stop()
	var msgs <-chan []byte
	unsubscribe := func() {}
	defer func() { unsubscribe() }()
	for {
		if msgs == nil { // not subscribed yet, or the subscription ended
			unsubscribe()
			m, cancel, err := c.ps.Subscribe(ctx, manifestsChannel)
			if err != nil {
				c.p.log.Warn("discord command_manifest notices not followed; looking every poll", "err", err)
				unsubscribe = func() {}
			} else {
				msgs, unsubscribe = m, cancel
			}
			c.look(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case tenant, ok := <-msgs:
			if !ok {
				if ctx.Err() != nil {
					return
				}
				msgs = nil
				continue
			}
			c.lookAt(ctx, string(tenant))
			continue
		case <-tick.C:
			c.mu.Lock()
			retry := len(c.unsaved) > 0 || len(c.pending) > 0
			c.mu.Unlock()
			if retry {
				c.signal()
			}
		case <-c.poke:
		}
		c.look(ctx)
	}
}

// lookAt reads tenant's stored manifest, named by a notice, and queues its
// guilds when it changed.
func (c *commandSync) lookAt(ctx context.Context, tenant string) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	e, found, err := c.shared.Get(ctx, manifestsNamespace, tenant)
	if err != nil || !found {
		return // the next look reads it
	}
	c.mu.Lock()
	changed := e.Rev > c.revs[tenant]
	if changed {
		c.revs[tenant] = e.Rev
		c.queueTenantLocked(tenant, false)
	}
	c.mu.Unlock()
	if changed {
		c.signal()
	}
}

// look reads the stored manifests when the namespace changed since the
// last look, queues the guilds of each tenant whose entry changed, and
// deletes the entries of tenants no longer configured that it forgets
// (commandSync.forget), and those of an earlier creation of a configured
// tenant.
func (c *commandSync) look(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	rev, err := c.shared.Revision(ctx, manifestsNamespace)
	c.mu.Lock()
	same := err == nil && rev == c.lastRev
	if same { // listed already since the first SetTenants, or never written
		c.forgetAll = c.forgetAll && c.tenants == nil
	}
	c.mu.Unlock()
	if err != nil || same {
		return
	}
	stored, rev, err := c.shared.List(ctx, manifestsNamespace)
	if err != nil {
		return
	}
	var gone []store.Entry
	queued := false
	c.mu.Lock()
	c.lastRev = rev
	for _, e := range stored {
		if c.tenants != nil {
			var m manifest
			_ = json.Unmarshal(e.Value, &m) // unreadable: as of no creation
			_, ok := c.tenants[e.Key]
			left, saw := c.forget.Get(e.Key)
			if !ok && (c.forgetAll || saw && !m.Created.After(left)) || c.earlierLocked(e.Key, m.Created) {
				gone = append(gone, e)
			}
			if !c.currentLocked(e.Key, m.Created) {
				continue
			}
		}
		if e.Rev > c.revs[e.Key] {
			c.revs[e.Key] = e.Rev
			c.queueTenantLocked(e.Key, false)
			queued = true
		}
	}
	c.forgetAll = c.forgetAll && c.tenants == nil
	c.mu.Unlock()
	if queued {
		c.signal()
	}
	for _, e := range gone {
		// Only the value read: a manifest stored since stays.
		if _, err := c.shared.CompareAndSwap(ctx, manifestsNamespace, e.Key, e.Value, nil); err != nil {
			c.p.log.Warn("discord command_manifest of a removed tenant not forgotten; trying again at the next look", "tenant", e.Key, "err", err)
			var m manifest
			_ = json.Unmarshal(e.Value, &m)
			c.mu.Lock()
			c.lastRev = 0 // the next look lists the namespace again
			if _, ok := c.tenants[e.Key]; !ok {
				// Gone before this instance started (forgetAll, which this look ended): its creation ended.
				if left, saw := c.forget.Get(e.Key); !saw || m.Created.After(left) {
					c.forget.Add(e.Key, m.Created)
				}
			}
			c.mu.Unlock()
		}
	}
}

// reconcileScope reconciles one scope and logs the outcome.
func (c *commandSync) reconcileScope(ctx context.Context, s scopeSync, manifests map[string][]map[string]any) {
	scope, name := s.scope, "global"
	if scope != globalScope {
		name = "guild " + scope
	}
	tenant, want, ok := c.desired(s, manifests)
	if !ok {
		return
	}
	rctx, cancel := context.WithTimeout(platform.WithTenant(ctx, tenant), c.p.cfg.RequestTimeout)
	defer cancel()
	changed, err := c.reconcile(rctx, scope, want)
	switch {
	case err != nil:
		c.p.log.Warn("discord command registry sync failed", "scope", name, "tenant", tenant, "err", describe(err).Error)
	case changed:
		c.p.log.Info("discord commands updated", "scope", name, "tenant", tenant, "commands", len(want))
	default:
		c.p.log.Debug("discord commands already in sync", "scope", name, "tenant", tenant)
	}
}

// reconcile makes scope's registry equal want: GET, diff, and a bulk PUT
// only if they differ.
func (c *commandSync) reconcile(ctx context.Context, scope string, want []map[string]any) (bool, error) {
	endpoint := discordgo.EndpointApplicationGlobalCommands(c.p.cfg.ApplicationID)
	if scope != globalScope {
		endpoint = discordgo.EndpointApplicationGuildCommands(c.p.cfg.ApplicationID, scope)
	}
	var have []map[string]any
	if err := c.p.rest(ctx, "GET", endpoint, nil, &have); err != nil {
		return false, err
	}
	if sameCommands(want, have) {
		return false, nil
	}
	if err := c.p.rest(ctx, "PUT", endpoint, want, nil); err != nil {
		return false, err
	}
	return true, nil
}

// sameCommands compares the registry with the desired set on the fields the
// manifest sets, ignoring false, null and empty values Discord adds or drops.
func sameCommands(want, have []map[string]any) bool {
	if len(want) != len(have) {
		return false
	}
	byName := make(map[string]map[string]any, len(have))
	for _, h := range have {
		name, _ := h["name"].(string)
		byName[name] = h
	}
	for _, w := range want {
		h, ok := byName[w["name"].(string)]
		if !ok {
			return false
		}
		projected := make(map[string]any, len(w))
		for k := range w {
			projected[k] = h[k]
		}
		if !bytes.Equal(canonicalJSON(w), canonicalJSON(projected)) {
			return false
		}
	}
	return true
}

// canonicalJSON encodes v with sorted keys, leaving out false, null, "" and
// empty arrays and objects.
func canonicalJSON(v any) []byte {
	b, _ := json.Marshal(prune(v))
	return b
}

func prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, xv := range x {
			if pv := prune(xv); pv != nil {
				out[k] = pv
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			if pe := prune(e); pe != nil {
				out = append(out, pe)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return slices.Clip(out)
	case bool:
		if !x {
			return nil
		}
	case string:
		if x == "" {
			return nil
		}
	case nil:
		return nil
	}
	return v
}
