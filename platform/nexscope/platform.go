package nexscope

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connector/descriptor"
	"connector/platform"
	"connector/session"
	"connector/vault"
)

// platformName is the platform value on the wire.
const platformName = session.PlatformNexscope

// Platform is the nexscope relay hosted by the connector. Create it with New.
type Platform struct {
	cfg Config
	// deps are New's Deps with their defaults: the log, the metrics, the
	// clock (ts values, every deadline), session keys, media, leases.
	deps      platform.Deps
	tokenHash [sha256.Size]byte
	// rooms are the rooms by name, guarded by roomsMu; Bind adds rooms.
	roomsMu sync.RWMutex
	rooms   map[string]*room
	// tenants are the tenants SetTenants last gave, under roomsMu
	// (tenantGone); nil before the first.
	tenants map[string]time.Time
	// wanted are the rooms the last Bind binds, by name, under roomsMu:
	// dropIdle keeps them (Bind may have looked one up and not bound it
	// yet).
	wanted map[string]string
	desc   descriptor.Descriptor
	// edge executes a gateway's actions; here those another instance
	// forwarded to a room homed here (egress.go).
	edge, here platform.Egress[*Platform, *room]

	// cluster is set when several instances share the rooms (cluster.go).
	cluster *fleet

	sink atomic.Pointer[sinkRef] // set while Run bridges

	mu      sync.Mutex
	members map[*member]struct{}
	// started is set once Run has started the cluster (its stream
	// listener listens, its rooms bid): Status is Ready only from then.
	started bool
	// closed is set, under mu, once Run is shutting down; room.join reads
	// it without mu.
	closed atomic.Bool
	wg     sync.WaitGroup // connection handlers
	nextID atomic.Uint64
}

// sinkRef is the Sink given to Run, with Run's context.
type sinkRef struct {
	platform.Sink
	ctx context.Context
}

var (
	_ platform.Platform     = (*Platform)(nil)
	_ platform.Routes       = (*Platform)(nil)
	_ platform.Binder       = (*Platform)(nil)
	_ platform.TenantKeeper = (*Platform)(nil)
)

// New validates cfg, applies its defaults and builds the relay. Rooms are
// served as soon as the Routes are mounted; the bridge delivers once Run has
// been called.
func New(cfg Config, deps platform.Deps) (*Platform, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	deps = deps.WithDefaults()
	p := &Platform{
		cfg:       cfg,
		deps:      deps,
		tokenHash: sha256.Sum256([]byte(cfg.Token)),
		rooms:     make(map[string]*room, len(cfg.Rooms)+1),
		members:   make(map[*member]struct{}),
	}
	if deps.Cluster != nil {
		p.cluster = newCluster(p, deps.Cluster)
	}
	for _, rc := range cfg.Rooms {
		p.rooms[rc.Name] = newRoom(p, rc, true)
	}
	if p.rooms[DefaultRoom] == nil {
		p.rooms[DefaultRoom] = newRoom(p, Room{Name: DefaultRoom}, true)
	}
	p.edge, p.here = newEgress()
	p.edge.Vault = deps.Vault // an earlier tenant's action is declined at the edge
	p.desc = descriptor.Nexscope(egress.Names(), cfg.MaxText)
	return p, nil
}

// Name implements platform.Platform.
func (p *Platform) Name() string { return platformName }

// Descriptor implements platform.Platform: plain text up to MaxText, no
// edit, no thread API, supported_ops from the egress table.
func (p *Platform) Descriptor() descriptor.Descriptor { return p.desc }

// Routes implements platform.Routes: the default room at /ws and named rooms
// at /ws/{room}.
func (p *Platform) Routes() map[string]http.Handler {
	h := http.HandlerFunc(p.serveWS)
	return map[string]http.Handler{"GET /ws": h, "GET /ws/{room}": h}
}

// Run bridges messages addressed to the bot into sink until ctx is done,
// then closes every member with 1001 after the frames queued for it and
// waits for their handlers. With
// several instances it also bids for the rooms' leases and talks to the
// other instances until then.
func (p *Platform) Run(ctx context.Context, sink platform.Sink) error {
	p.sink.Store(&sinkRef{sink, ctx})
	if p.cluster != nil {
		defer p.cluster.shutdown()
		p.cluster.start(ctx)
	}
	p.mu.Lock()
	p.started = true
	p.mu.Unlock()
	<-ctx.Done()
	p.sink.Store(nil)
	p.mu.Lock()
	p.closed.Store(true)
	members := slices.Collect(maps.Keys(p.members))
	p.mu.Unlock()
	// Every room ends its tenure here as a home that loses its lease does
	// (room.resign): its members are closed with 1001 after the frames
	// queued for them. The flushes run at once, each on its member's
	// writer and bounded by WriteTimeout from now, so they hold the
	// shutdown up WriteTimeout at most however many members there are.
	p.roomsMu.RLock()
	rooms := slices.Collect(maps.Values(p.rooms))
	p.roomsMu.RUnlock()
	for _, r := range rooms {
		r.resign(CloseGoingAway)
	}
	// The others: members here of rooms homed elsewhere, abandoned after
	// their queued frames too (unanswered.go), and members not joined yet,
	// whose join then refuses them with 1001. A member closed above is not
	// closed again (its queue's first close counts).
	for _, m := range members {
		m.kick(CloseGoingAway)
	}
	p.wg.Wait()
	return nil
}

// ChatTenant implements platform.Platform: a chat is a room, owned by the
// tenant it is bound to.
func (p *Platform) ChatTenant(_ context.Context, chatID string) (string, error) {
	if r := p.room(chatID); r != nil && r.tenant() != "" {
		return r.tenant(), nil
	}
	return "", platform.ErrUnknownChat
}

// Status implements platform.Platform: ready while Run is bridging, from
// when it has started the cluster (the stream listener listens, the rooms
// bid) on.
func (p *Platform) Status() platform.Status {
	p.mu.Lock()
	n, started, closed := len(p.members), p.started, p.closed.Load()
	p.mu.Unlock()
	p.roomsMu.RLock()
	rooms := len(p.rooms)
	p.roomsMu.RUnlock()
	if !started || closed || p.sink.Load() == nil {
		return platform.Status{Detail: "nexscope bridge not running"}
	}
	return platform.Status{Ready: true, Detail: fmt.Sprintf("%d rooms, %d members online", rooms, n)}
}

// deliver hands d to the sink given to Run and reports whether the sink
// took it; without a sink it is dropped.
func (p *Platform) deliver(d platform.Delivery) bool {
	s := p.sink.Load()
	if s == nil {
		p.deps.Metrics.Dropped(platformName, "unavailable")
		return false
	}
	if err := s.Deliver(s.ctx, d); err != nil {
		p.deps.Metrics.Dropped(platformName, "sink_error")
		p.deps.Log.Warn("nexscope delivery failed", "tenant", d.Tenant, "chat_id", d.ChatID, "err", err)
		return false
	}
	return true
}

// tokenOK compares a presented token with the configured one in constant
// time (over digests, so the length does not leak either).
func (p *Platform) tokenOK(token string) bool {
	sum := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(sum[:], p.tokenHash[:]) == 1
}

// nowMs is the relay timestamp of frames.
func (p *Platform) nowMs() int64 { return p.deps.Clock.Now().UnixMilli() }

// register tracks m for shutdown; it fails once Run has ended.
func (p *Platform) register(m *member) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return false
	}
	p.members[m] = struct{}{}
	return true
}

func (p *Platform) unregister(m *member) {
	p.mu.Lock()
	delete(p.members, m)
	p.mu.Unlock()
}

// track counts a handler for Run's shutdown wait; it fails once Run ended.
func (p *Platform) track() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		return false
	}
	p.wg.Add(1)
	return true
}

// room returns the room named name, nil when there is none.
func (p *Platform) room(name string) *room {
	p.roomsMu.RLock()
	defer p.roomsMu.RUnlock()
	return p.rooms[name]
}

// Bind implements platform.Binder: bindings (kind room) name the rooms
// bound to a tenant; every other room becomes a plain relay room. A bound
// room that does not exist yet is created with the configured defaults;
// one a binding created is dropped once unbound with no member
// (dropIdle). Members stay connected: only the bot joins or leaves the
// presence list.
func (p *Platform) Bind(bindings []platform.Binding) error {
	want := make(map[string]string, len(bindings))
	for _, b := range bindings {
		if b.Kind != platform.BindRoom {
			return fmt.Errorf("nexscope: binding kind %q: want %s", b.Kind, platform.BindRoom)
		}
		if !validName(b.ID) {
			return fmt.Errorf("nexscope: room %q: name must match ^[a-zA-Z0-9_-]{1,32}$", b.ID)
		}
		want[b.ID] = b.Tenant
	}
	p.roomsMu.Lock()
	p.wanted = want
	for name := range want {
		if p.rooms[name] == nil {
			r := newRoom(p, Room{Name: name}, false)
			p.rooms[name] = r
			if p.cluster != nil && p.cluster.bid != nil {
				p.cluster.bid(r) // start ran, shutdown not: the room bids for its lease
			}
		}
	}
	rooms := slices.Collect(maps.Values(p.rooms))
	p.roomsMu.Unlock()
	for _, r := range rooms {
		r.mu.Lock()
		r.bindLocked(want[r.name], p.creation(want[r.name]))
		r.unlock()
		p.dropIdle(r)
	}
	return nil
}

// dropIdle drops r when it is a room a binding created, now unbound with
// no member: the instance forgets it and its bid for its lease ends (as
// home, it releases the lease), so an unbound room costs Redis nothing.
// A later Bind creates it afresh.
func (p *Platform) dropIdle(r *room) {
	if r.keep {
		return
	}
	p.roomsMu.Lock()
	defer p.roomsMu.Unlock()
	if p.rooms[r.name] != r {
		return // dropped already
	}
	if _, ok := p.wanted[r.name]; ok {
		return // a Bind binds it
	}
	r.mu.Lock()
	r.dropped = r.tenant() == "" && len(r.members) == 0
	dropped := r.dropped
	if dropped {
		r.arrive() // a forward to its home gives up (fleet.forwardExec)
	}
	r.mu.Unlock() // nothing queued: no member
	if dropped {
		delete(p.rooms, r.name)
		if r.unbid != nil {
			r.unbid()
		}
		p.deps.Log.Info("nexscope room dropped: unbound, with no member here", "room", r.name)
	}
}

// tenantGone reports whether tenant is not among the tenants SetTenants
// last gave (a YAML binding may name an API tenant deleted since); false
// before the first SetTenants.
func (p *Platform) tenantGone(tenant string) bool {
	p.roomsMu.RLock()
	defer p.roomsMu.RUnlock()
	_, ok := p.tenants[tenant]
	return p.tenants != nil && !ok
}

// creation is tenant's creation as the vault knows it (vault.Creation,
// which the registry's apply sets before it tells the relay or any
// platform): zero for a declared tenant, or none.
func (p *Platform) creation(tenant string) time.Time {
	return vault.Creation(p.deps.Vault, tenant)
}

// SetTenants implements platform.TenantKeeper: it keeps the tenants
// (tenantGone), and a room bound to a tenant created again since it was
// bound (deleted and made again under its id) is bound afresh to the new
// creation (room.refreshLocked), as the room's next bridged message or
// op finds it already when the relay, told first, serves the new tenant.
func (p *Platform) SetTenants(created map[string]time.Time) {
	p.roomsMu.Lock()
	p.tenants = created
	rooms := slices.Collect(maps.Values(p.rooms))
	p.roomsMu.Unlock()
	for _, r := range rooms {
		r.mu.Lock()
		r.refreshLocked()
		r.unlock()
	}
}
