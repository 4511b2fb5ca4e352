// Package relay is the gateway-facing side of the connector: the /relay
// WebSocket server that Hermes gateways dial out to, and the platforms'
// platform.Sink. A connection is upgraded once its bearer token is good
// (its tenant is the one its gateway id is configured under; no frame can
// change it), is answered a descriptor per hello, receives its tenant's
// inbound from the tenant's ledger (package relay/ledger: stored before a
// platform's Deliver returns, sent until acknowledged), runs outbound
// actions each on its own goroutine, and reaches a session's owner with
// interrupts. docs/contract.md holds the frames, close codes and their
// promises, docs/security.md the bounds, docs/architecture.md the design.
//
// Locks are taken in the order docs/locks.md gives (TestLockOrder holds the
// code to it); no lock is held across socket I/O or a platform call.
package relay

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/descriptor"
	"connector/internal/clock"
	"connector/internal/cluster"
	"connector/internal/connlimit"
	"connector/internal/loglimit"
	"connector/internal/wsconn"
	"connector/platform"
	"connector/relay/ledger"
	"connector/session"
	"connector/store"
	"connector/wake"
)

// Tenant is one customer of the connector: its gateways and the session-key
// knobs those gateways run with.
type Tenant struct {
	ID       string
	Gateways []Gateway
	// Session holds the tenant's gateway knobs that change session keys
	// (group/thread per-user, profile). Nil means the gateway defaults.
	Session *session.Options
	// Created is when the tenant was created (registry.Tenant.Created);
	// zero for always. When it changes for an id, the tenant was deleted
	// and created again: SetTenants closes the earlier tenant's
	// connections and drops its buffered inbound, session owners and chat
	// profiles, none of which the new tenant inherits.
	Created time.Time
	// Weight is the tenant's share of the relay's session-owner writes
	// relative to the other tenants' (fairshare); under 1 counts as 1.
	Weight int
}

// Gateway is one gateway identity allowed to dial /relay.
type Gateway struct {
	ID string
	// Secrets are the HMAC secrets the gateway may sign with; several while a
	// secret is rotated, at most contract.MaxSecretsPerGateway (8).
	Secrets []string
}

// Config configures a Server. The zero value of every field but Tenants and
// Platforms is a working default. The fields with a YAML key are the
// connector's relay section (docs/configuration.md); their comments are
// its operators' documentation.
type Config struct {
	Tenants   []Tenant            `yaml:"-"`
	Platforms []platform.Platform `yaml:"-"`
	// Log receives connection lifecycle lines; nil discards.
	Log *slog.Logger `yaml:"-"`
	// Metrics receives measurements; nil discards.
	Metrics Metrics `yaml:"-"`
	// Clock is the time source of token checks, latencies, the write
	// watchdog and pings; nil is clock.System.
	Clock clock.Clock `yaml:"-"`

	// ClockSkew is how long past its expiry a gateway's token is still
	// accepted, for clocks that disagree. Zero means 30s.
	ClockSkew time.Duration `yaml:"clock_skew"`
	// MaxTokenLifetime is how far ahead of now (plus ClockSkew) a token's
	// exp may lie (docs/security.md). Zero means
	// contract.DefaultMaxTokenLifetime; New refuses less than
	// contract.TokenTTL.
	MaxTokenLifetime time.Duration `yaml:"-"`
	// PingInterval is how often the server pings each gateway; a ping not
	// answered within the same interval closes the connection. Zero means
	// 30s.
	PingInterval time.Duration `yaml:"ping_interval"`
	// WriteTimeout bounds each socket write; a gateway whose write takes
	// longer is a slow consumer and is closed. It also bounds, in all, the
	// flush of what was queued to a connection being closed (4409, 1001),
	// after which its socket is dropped. Zero means 10s.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// OutboundTimeout bounds each outbound op (a send, an edit...); the
	// gateway itself gives up after 30s. Zero means 30s.
	OutboundTimeout time.Duration `yaml:"outbound_timeout"`
	// SendQueueBytes bounds the frames waiting to be written to one
	// connection; beyond it the connection is closed 4408. Inbound waits in
	// the buffer while half of it is queued, so it must hold twice the
	// largest frame: at least 2097152 (2 MiB). Zero means 8388608 (8 MiB).
	SendQueueBytes int `yaml:"send_queue_bytes"`
	// MaxOutboundInFlight bounds concurrent outbound ops per connection;
	// beyond it an op fails at once with code "rate_limited". Zero means 1024.
	MaxOutboundInFlight int `yaml:"-"`
	// AckWindow bounds unacknowledged inbound per connection. Zero means 256.
	AckWindow int `yaml:"ack_window"`
	// Store keeps every tenant's inbound until it is acknowledged, and the
	// relay recovers it from there in New. Nil means a new in-memory store,
	// closed by Shutdown (nothing survives the process).
	Store store.Store `yaml:"-"`
	// BufferEntries bounds a tenant's buffered inbound, entries in flight
	// included; the oldest are dropped first, logged and counted. Zero means
	// 10000.
	BufferEntries int `yaml:"buffer_entries"`
	// BufferBytes bounds a tenant's buffered inbound in payload bytes,
	// entries in flight included, and each read of its stored records (at a
	// start, and with several instances its driver's reads of what the
	// others stored), to this and the record that passes it. Zero means
	// 67108864 (64 MiB).
	BufferBytes int64 `yaml:"buffer_bytes"`
	// BufferBytesTotal bounds the buffered inbound of all tenants together,
	// in payload bytes; the largest tenant's oldest entries go first. It
	// also bounds the memory buffered frames take. Zero means 268435456
	// (256 MiB).
	BufferBytesTotal int64 `yaml:"buffer_bytes_total"`
	// BufferMaxAge drops buffered inbound received longer ago than this,
	// checked every minute, logged and counted. Zero means 168h (7 days).
	BufferMaxAge time.Duration `yaml:"buffer_max_age"`
	// MaxConnsPerGateway bounds the connections of one gateway id, counting
	// each from before its upgrade until its socket is fully closed. The
	// newest win: a new one beyond the limit closes the oldest with 4409 and
	// is upgraded once that one is gone (after at most WriteTimeout to flush
	// its queue and up to 2s (CloseTimeout) for the close handshake); a
	// newcomer still waiting when a newer one arrives beyond the limit is
	// refused with 4409. Zero means 16.
	MaxConnsPerGateway int `yaml:"max_conns_per_gateway"`
	// CloseTimeout bounds a close handshake: after sending its close frame
	// the connector waits this long for the gateway's before closing the
	// socket anyway, so a gateway that never reads cannot hold a closing
	// connection open. Zero means 2 s.
	CloseTimeout time.Duration `yaml:"-"`
	// SessionOwners bounds the remembered session owners per tenant (least
	// recently used are forgotten). Zero means 100,000.
	SessionOwners int `yaml:"-"`
	// Cluster is set when several instances share Store (a Redis): each
	// tenant is then driven by one instance at a time, under a lease, and
	// the others reach it through the cluster (fleet.go). Nil means this
	// instance is the store's only user.
	Cluster *cluster.Node `yaml:"-"`
	// Away, when set, is called when an inbound is buffered for a tenant
	// none of whose connections can take it (none is live, or every one
	// went idle): the wake poke (package wake). On the instance driving
	// the tenant, not once Shutdown began; with the ledger's mutex held,
	// so it must not block.
	Away func(tenant string) `yaml:"-"`
	// CatchUp, when set, applies the registry (SetTenants) when it changed
	// since the last apply, and returns once it did (or the apply under
	// way ended), or with an error when it could not tell or apply, or ctx
	// ended first: Deliver calls it, for at most 30 s (catchUpTimeout), for a
	// delivery to a tenant it does not know, which another instance may
	// have provisioned first. A delivery whose tenant is still not known is
	// dropped; one whose CatchUp failed is refused (docs/durability.md).
	CatchUp func(ctx context.Context) error `yaml:"-"`
	// WakeCooldown is the least time between two wake pokes of one wake
	// URL: the GET the connector sends to a gateway's registered wake URL
	// when inbound is buffered for its tenant and none of the tenant's
	// gateways is connected (docs/operations.md); gateways sharing a URL
	// share its poke. It holds across every instance sharing the store.
	// Zero means 60s.
	WakeCooldown time.Duration `yaml:"wake_cooldown"`
	// WakePerHost is the most wake URLs of one tenant on one host (its
	// name, whatever the scheme and port) poked per wake_cooldown, across
	// the instances; the others wait for a later cooldown. Zero means 8.
	WakePerHost int `yaml:"wake_per_host"`
}

// WithDefaults returns c with every unset field at its default: the
// configuration New runs with.
func (c Config) WithDefaults() Config {
	c.Log = cmp.Or(c.Log, slog.New(slog.DiscardHandler))
	c.Metrics = cmp.Or[Metrics](c.Metrics, nopMetrics{})
	c.Clock = cmp.Or(c.Clock, clock.System)
	c.ClockSkew = cmp.Or(max(c.ClockSkew, 0), 30*time.Second)
	c.MaxTokenLifetime = cmp.Or(max(c.MaxTokenLifetime, 0), contract.DefaultMaxTokenLifetime)
	c.PingInterval = cmp.Or(max(c.PingInterval, 0), 30*time.Second)
	c.WriteTimeout = cmp.Or(max(c.WriteTimeout, 0), 10*time.Second)
	c.OutboundTimeout = cmp.Or(max(c.OutboundTimeout, 0), 30*time.Second)
	c.SendQueueBytes = cmp.Or(max(c.SendQueueBytes, 0), 8<<20)
	c.MaxOutboundInFlight = cmp.Or(max(c.MaxOutboundInFlight, 0), 1024)
	c.AckWindow = cmp.Or(max(c.AckWindow, 0), 256)
	c.BufferEntries = cmp.Or(max(c.BufferEntries, 0), 10_000)
	c.BufferBytes = cmp.Or(max(c.BufferBytes, 0), 64<<20)
	c.BufferBytesTotal = cmp.Or(max(c.BufferBytesTotal, 0), 256<<20)
	c.BufferMaxAge = cmp.Or(max(c.BufferMaxAge, 0), 7*24*time.Hour)
	c.MaxConnsPerGateway = cmp.Or(max(c.MaxConnsPerGateway, 0), 16)
	c.CloseTimeout = cmp.Or(max(c.CloseTimeout, 0), 2*time.Second)
	c.SessionOwners = cmp.Or(max(c.SessionOwners, 0), 100_000)
	c.WakeCooldown = cmp.Or(max(c.WakeCooldown, 0), wake.DefaultCooldown)
	c.WakePerHost = cmp.Or(max(c.WakePerHost, 0), wake.DefaultPerHost)
	return c
}

// Server is the /relay WebSocket endpoint. Create it with New and mount it
// with http.Handle("/relay", s).
type Server struct {
	cfg Config
	log *slog.Logger
	// regMu guards gateways and tenants (tenants.go); it is a leaf.
	regMu     sync.RWMutex
	gateways  map[string]*gatewayRecord
	tenants   map[string]*hub
	platforms map[string]platform.Platform
	// descriptorFrames holds the encoded descriptor frame answered to a
	// hello for each platform, "relay" included.
	descriptorFrames map[string][]byte
	order            []string // platform names in configured order
	// writerLinger is every connection's wsconn.Queue.Linger.
	writerLinger wsconn.Linger
	// stopping is set, under mu, when Shutdown begins: Deliver, ServeHTTP
	// and track take nothing more.
	stopping atomic.Bool
	// ledgers are the tenants' ledgers, on cfg.Store.
	ledgers *ledger.Pool
	// ownStore is set when New made cfg.Store, so Shutdown closes it.
	ownStore bool
	// recovered is set once New read the stored inbound of every tenant
	// (alone; among several instances each tenant's driver reads it), so
	// SetTenants reads a tenant's it adds from then on.
	recovered atomic.Bool
	// fleet is set when cfg.Cluster is: several instances share the store.
	fleet *fleet
	// instance names this instance among those sharing the store ("" when
	// alone); incarnation tells this process's connection ids from those
	// of an earlier process with the same instance name (ids restart at 1).
	instance, incarnation string

	logs serverLogs

	connID   atomic.Uint64
	mu       sync.Mutex
	conns    map[string]*conn         // by key
	ops      map[*outboundOp]struct{} // in-flight outbound ops of every connection
	outbound sync.WaitGroup           // counts ops
	connsWG  sync.WaitGroup
}

type gatewayRecord struct {
	id     string
	tenant *hub
	// keys verify the gateway's tokens; SetTenants replaces them.
	keys      atomic.Pointer[contract.TokenKeys]
	admission *admission
}

// New validates cfg, recovers every tenant's stored inbound and returns a
// Server, ready for the platforms' deliveries. On an error it closes what
// it made: the ledgers, and the store unless cfg gave one.
func New(cfg Config) (_ *Server, err error) {
	cfg = cfg.WithDefaults()
	if cfg.MaxTokenLifetime < contract.TokenTTL {
		return nil, fmt.Errorf("relay: MaxTokenLifetime %v is below the gateway's %v token lifetime", cfg.MaxTokenLifetime, contract.TokenTTL)
	}
	if cfg.SendQueueBytes < 2*contract.MaxFrameBytes {
		// Else an inbound frame offered to a queue under half its bound
		// could overflow it, close the gateway 4408 and do so again at
		// every redelivery.
		return nil, fmt.Errorf("relay: SendQueueBytes %d is below %d, twice the largest frame", cfg.SendQueueBytes, 2*contract.MaxFrameBytes)
	}
	ownStore := cfg.Store == nil
	if ownStore {
		cfg.Store = store.NewMemory(cfg.Clock)
		defer func() {
			if err != nil {
				_ = cfg.Store.Close()
			}
		}()
	}
	s := &Server{
		cfg:          cfg,
		ownStore:     ownStore,
		writerLinger: wsconn.Linger{Clock: cfg.Clock, Idle: writerLinger},
		log:          cfg.Log,
		gateways:     make(map[string]*gatewayRecord),
		tenants:      make(map[string]*hub),
		platforms:    make(map[string]platform.Platform),
		conns:        make(map[string]*conn),
		ops:          make(map[*outboundOp]struct{}),
		logs: serverLogs{
			sources: loglimit.NewSources(cfg.Clock),
			tenants: loglimit.NewLimiter(tenantLogRate, allTenantsLogRate, tenantLogKeys, cfg.Clock),
		},

		descriptorFrames: make(map[string][]byte),
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails
	s.incarnation = hex.EncodeToString(nonce[:])
	if cfg.Cluster != nil {
		s.instance = cfg.Cluster.Instance()
	}
	if len(cfg.Store.Epoch()) > maxEpochBytes {
		return nil, fmt.Errorf("relay: store epoch longer than %d bytes", maxEpochBytes)
	}

	var all []descriptor.Descriptor
	for _, p := range cfg.Platforms {
		name := p.Name()
		if name == contract.PlatformRelay || name == "" {
			return nil, fmt.Errorf("relay: platform name %q is reserved", name)
		}
		if _, dup := s.platforms[name]; dup {
			return nil, fmt.Errorf("relay: platform %q configured twice", name)
		}
		d := p.Descriptor()
		s.platforms[name] = p
		s.descriptorFrames[name] = contract.EncodeDescriptor(d)
		s.order = append(s.order, name)
		all = append(all, d)
	}
	s.descriptorFrames[contract.PlatformRelay] = contract.EncodeDescriptor(descriptor.Merge(contract.PlatformRelay, all...))

	s.ledgers = ledger.NewPool(ledger.Config{
		Store:           cfg.Store.Ledger(),
		IDPrefix:        cfg.Store.Epoch() + "-",
		Framer:          framer{},
		AckWindow:       cfg.AckWindow,
		MaxEntries:      cfg.BufferEntries,
		MaxBytes:        cfg.BufferBytes,
		MaxTotalBytes:   cfg.BufferBytesTotal,
		MaxAge:          cfg.BufferMaxAge,
		SessionOwners:   cfg.SessionOwners,
		MaxPayloadBytes: maxPayloadBytes,
		Unserved:        s.away(),
		Clock:           cfg.Clock,
		Log:             cfg.Log,
		Metrics:         cfg.Metrics,
	})
	defer func() {
		if err != nil {
			s.ledgers.Close(context.Background())
		}
	}()
	if cfg.Cluster != nil {
		s.fleet = newFleet(s)
	}
	if err := s.SetTenants(cfg.Tenants); err != nil {
		return nil, err
	}
	if s.fleet != nil {
		// Each tenant's driver reads its stored ledger when it takes the
		// tenant's lease, not every instance at start.
		if err := s.fleet.start(); err != nil {
			return nil, fmt.Errorf("relay: join the instances: %w", err)
		}
		return s, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
	defer cancel()
	n, err := s.ledgers.Recover(ctx)
	if err != nil {
		return nil, fmt.Errorf("relay: recover buffered inbound: %w", err)
	}
	if n > 0 {
		s.log.Info("buffered inbound recovered from the store", "entries", n)
	}
	s.recovered.Store(true)
	return s, nil
}

// maxEpochBytes bounds the store epoch, which starts every bufferId; frames
// reserve room for it (maxEnvelopeBytes).
const maxEpochBytes = 64

// maxBufferIDBytes is the longest bufferId the relay gives: the epoch, "-"
// and a sequence number.
const maxBufferIDBytes = maxEpochBytes + 1 + 20

// recoverTimeout bounds reading the stored inbound in New.
const recoverTimeout = 5 * time.Minute

// conn returns this instance's open connection named key (conn.key).
func (s *Server) conn(key string) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[key]
}

// LedgerStats returns the counters of the tenants' ledgers.
func (s *Server) LedgerStats() ledger.Stats { return s.ledgers.Stats() }

// BufferBounds returns the bounds of the buffered inbound in force:
// entries and payload bytes per tenant, payload bytes of all tenants.
func (s *Server) BufferBounds() (entries int, bytes, totalBytes int64) {
	return s.cfg.BufferEntries, s.cfg.BufferBytes, s.cfg.BufferBytesTotal
}

// TenantBufferBytes returns the payload bytes of the inbound held for each
// tenant this instance has a ledger of.
func (s *Server) TenantBufferBytes() map[string]int64 { return s.ledgers.TenantBytes() }

// KeyFunc returns the session-key function for tenants: session.Key with each
// tenant's gateway knobs (the gateway defaults for an unknown tenant).
func KeyFunc(tenants []Tenant) platform.KeyFunc {
	opts := make(map[string]session.Options, len(tenants))
	for _, t := range tenants {
		if t.Session != nil {
			opts[t.ID] = *t.Session
		}
	}
	return func(tenant string, src *session.Source) string {
		o, ok := opts[tenant]
		if !ok {
			o = session.DefaultOptions
		}
		return session.Key(src, o)
	}
}

var _ platform.BatchSink = (*Server)(nil)

// ErrShuttingDown is returned by Deliver once Shutdown began: the delivery
// was not taken, and the platform leaves it unconfirmed at its source.
var ErrShuttingDown = errors.New("relay: shutting down: delivery not taken")

// Deliver implements platform.Sink: the platforms deliver to the relay. An
// inbound or passthrough delivery is stored before it returns; an error
// means it was not.
func (s *Server) Deliver(ctx context.Context, d platform.Delivery) error {
	h, err := s.hubOrCatchUp(ctx, d.Tenant)
	if h == nil {
		if err == nil {
			s.cfg.Metrics.Inbound(d.Platform, d.Tenant, "dropped_unknown_tenant")
			s.log.Warn("delivery dropped: unknown tenant", "tenant", d.Tenant, "platform", d.Platform)
		}
		return err
	}
	if d.Kind == platform.KindInterrupt {
		if h.ledger.Other(d.Created) {
			s.log.Debug("interrupt dropped: routed under another generation of the tenant", "tenant", d.Tenant, "platform", d.Platform)
			return nil
		}
		h.interrupt(ctx, interrupt{sessionKey: d.SessionKey, chatID: d.ChatID, gatewayID: d.GatewayID})
		return nil
	}
	return h.enqueue(ctx, d)
}

// DeliverAll implements platform.BatchSink: the deliveries of one source's
// batch (a Telegram getUpdates answer). Each tenant's inbound and
// passthrough deliveries between two interrupts are stored in one store
// write (enqueueAll), different tenants' side by side; an interrupt is
// handled, as Deliver handles it, once everything before it in ds is
// stored, so the batch keeps its order. Once a tenant's delivery is not
// taken, its later ones are not either (the same error): the source
// delivers them again after it, in order.
func (s *Server) DeliverAll(ctx context.Context, ds []platform.Delivery) []error {
	var errs []error
	failed := make(map[string]error) // by tenant: its first delivery not taken
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(ds))
		}
		errs[i] = err
		failed[ds[i].Tenant] = err
	}
	start := 0
	for i := range ds {
		if ds[i].Kind == platform.KindInterrupt {
			s.deliverRun(ctx, ds, start, i, failed, fail)
			err := failed[ds[i].Tenant]
			if err == nil {
				err = s.Deliver(ctx, ds[i])
			}
			if err != nil {
				fail(i, err)
			}
			start = i + 1
		}
	}
	s.deliverRun(ctx, ds, start, len(ds), failed, fail)
	return errs
}

// deliverRun stores ds[from:to], which holds no interrupt, with one
// enqueueAll per tenant not in failed, and reports each delivery not taken
// to fail.
func (s *Server) deliverRun(ctx context.Context, ds []platform.Delivery, from, to int, failed map[string]error, fail func(int, error)) {
	if from >= to {
		return
	}
	byTenant := make(map[string][]int)
	var order []string
	for i := from; i < to; i++ {
		t := ds[i].Tenant
		if _, ok := byTenant[t]; !ok {
			order = append(order, t)
		}
		byTenant[t] = append(byTenant[t], i)
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for n, t := range order {
		if errs[n] = failed[t]; errs[n] != nil {
			continue
		}
		store := func() { errs[n] = s.deliverTenant(ctx, t, ds, byTenant[t]) }
		if len(order) == 1 {
			store()
		} else {
			wg.Go(store)
		}
	}
	wg.Wait()
	for n, t := range order {
		if errs[n] != nil {
			for _, i := range byTenant[t] {
				fail(i, errs[n])
			}
		}
	}
}

// deliverTenant stores tenant's deliveries ds[idx...] as Deliver would,
// in one enqueueAll.
func (s *Server) deliverTenant(ctx context.Context, tenant string, ds []platform.Delivery, idx []int) error {
	h, err := s.hubOrCatchUp(ctx, tenant)
	if h == nil {
		if err == nil {
			for _, i := range idx {
				s.cfg.Metrics.Inbound(ds[i].Platform, tenant, "dropped_unknown_tenant")
			}
			s.log.Warn("deliveries dropped: unknown tenant", "tenant", tenant, "platform", ds[idx[0]].Platform, "deliveries", len(idx))
		}
		return err
	}
	batch := make([]platform.Delivery, 0, len(idx))
	for _, i := range idx {
		batch = append(batch, ds[i])
	}
	return h.enqueueAll(ctx, batch)
}

// catchUpTimeout bounds a delivery's wait for Config.CatchUp.
const catchUpTimeout = 30 * time.Second

// hubOrCatchUp returns the hub of tenant, to take a delivery for, after
// Config.CatchUp when the relay does not know the tenant: nil and no error
// for a tenant still unknown once the registry is applied, nil and an
// error (the delivery not taken) when CatchUp failed, ctx ended or
// Shutdown began.
func (s *Server) hubOrCatchUp(ctx context.Context, tenant string) (*hub, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.stopping.Load() {
		return nil, ErrShuttingDown
	}
	if h := s.hub(tenant); h != nil || s.cfg.CatchUp == nil {
		return h, nil
	}
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	if err := s.cfg.CatchUp(ctx); err != nil {
		s.logs.tenants.Log(s.log, slog.LevelWarn, tenant, "delivery not taken: its tenant is not known here and the registry was not applied", "tenant", tenant, "err", err)
		return nil, fmt.Errorf("relay: tenant %q not known here, the registry not applied: %w", tenant, err)
	}
	return s.hub(tenant), nil
}

// ServeHTTP upgrades a gateway's request and returns, serving the
// connection on a goroutine of its own until it closes; docs/contract.md
// ("Transport") and docs/security.md say how it authenticates, refuses and
// admits.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.stopping.Load() {
		http.Error(w, "connector is shutting down", http.StatusServiceUnavailable)
		return
	}
	if len(r.Header.Values("Authorization")) == 0 {
		s.cfg.Metrics.Refused(refusedNoCredentials)
		s.logSource(slog.LevelInfo, r.RemoteAddr, "gateway refused", "reason", refusedNoCredentials)
		w.Header().Set("WWW-Authenticate", "Bearer")
		w.Header().Set("Connection", "close")
		http.Error(w, "unauthorized: no Authorization header", http.StatusUnauthorized)
		return
	}
	gw, key, claimed, authErr := s.authenticate(r.Header.Get("Authorization"))
	var place *slot
	var admitErr error
	if authErr == nil {
		connlimit.Authenticated(r.Context())
		place, admitErr = gw.admission.admit(r.Context())
		if admitErr != nil && !errors.Is(admitErr, errReplaced) {
			return // the gateway went away while waiting
		}
	}
	hr := &hijackRecorder{ResponseWriter: w}
	ws, err := websocket.Accept(hr, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		if place != nil {
			gw.admission.release(place)
		}
		s.logSource(slog.LevelDebug, r.RemoteAddr, "websocket accept failed", "err", err)
		return
	}
	if authErr != nil {
		refusal := contract.Refusal(authErr)
		s.cfg.Metrics.Refused(refusal.Reason)
		s.logSource(slog.LevelInfo, r.RemoteAddr, "gateway refused", "gateway_id", truncateForLog(claimed), "reason", refusal.Reason, "err", authErr)
		s.refuse(ws, hr.conn, refusal)
		return
	}
	if admitErr != nil {
		s.cfg.Metrics.Refused(refusedTooManyConns)
		s.logSource(slog.LevelInfo, r.RemoteAddr, "gateway refused", "gateway_id", gw.id, "reason", refusedTooManyConns)
		s.closeSocket(ws, hr.conn, contract.EndTooManyConns)
		return
	}
	c := newConn(s, gw, ws, hr.conn, r.RemoteAddr)
	c.place, c.secret = place, key
	if !gw.admission.attach(place, c) {
		s.closeSocket(ws, hr.conn, contract.EndTooManyConns)
		gw.admission.release(place)
		return
	}
	if !track(s, s.conns, &s.connsWG, c.key, c) {
		s.closeSocket(ws, hr.conn, contract.EndShutdown)
		gw.admission.release(place)
		return
	}
	if s.gateway(gw.id) != gw || !gw.keys.Load().Holds(key) {
		// SetTenants removed the gateway or the secret while this upgrade
		// was under way (waiting for a slot, say) and closed only the
		// tracked connections: either it saw c, or c sees the removal here.
		s.logSource(slog.LevelInfo, r.RemoteAddr, "gateway refused", "gateway_id", gw.id, "reason", contract.ReasonRevoked)
		s.closeSocket(ws, hr.conn, contract.EndRevoked)
		untrack(s, s.conns, &s.connsWG, c.key)
		gw.admission.release(place)
		return
	}
	// On a goroutine of its own, so that net/http frees the request, its
	// headers and this handler's stack, which would otherwise live as long
	// as the connection.
	go c.serve()
}

// track adds v under k, a connection (to conns by its key, connsWG) or an
// outbound op (to ops, outbound), to what Shutdown closes and waits for;
// false when the server is shutting down and takes no more.
func track[K comparable, V any](s *Server, set map[K]V, wg *sync.WaitGroup, k K, v V) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping.Load() {
		return false
	}
	set[k] = v
	wg.Add(1)
	return true
}

// untrack removes k, which track added, once it is done.
func untrack[K comparable, V any](s *Server, set map[K]V, wg *sync.WaitGroup, k K) {
	s.mu.Lock()
	delete(set, k)
	s.mu.Unlock()
	wg.Done()
}

// closeSocket closes ws with e. Writing the close frame is
// bounded by coder/websocket (5 s, for a socket whose send buffer is full);
// the gateway then has Config.CloseTimeout to answer it, after which raw,
// the socket under ws, fails every read and ws closes it without waiting
// further. Only the wait for the answer carries the deadline, so a close
// frame is never lost to a short CloseTimeout on a busy machine.
func (s *Server) closeSocket(ws *websocket.Conn, raw net.Conn, e contract.Close) {
	_ = raw.SetReadDeadline(time.Now().Add(s.cfg.CloseTimeout))
	_ = ws.Close(websocket.StatusCode(e.Code), e.Reason)
}

// refusalLinger bounds how long a socket whose token was refused waits for
// the client's close frame after the connector's 4401: long enough for a
// gateway on loopback or a fast link to answer, so the socket ends with an
// orderly FIN rather than a reset, and short enough that a flood of refused
// upgrades, which never answer, holds few sockets. The gateway needs only
// the close frame, which goes out first.
const refusalLinger = 100 * time.Millisecond

// refuse closes ws, an upgrade whose token was refused, with e: the close
// frame is sent, and the client's answer waited for at most refusalLinger
// (or CloseTimeout when shorter) on the relay's clock, instead of the full
// close handshake of closeSocket.
func (s *Server) refuse(ws *websocket.Conn, raw net.Conn, e contract.Close) {
	t := s.cfg.Clock.AfterFunc(min(refusalLinger, s.cfg.CloseTimeout), func() { _ = raw.SetReadDeadline(time.Now()) })
	defer t.Stop()
	_ = ws.Close(websocket.StatusCode(e.Code), e.Reason)
}

// hijackRecorder keeps the socket websocket.Accept hijacks, so that
// closeSocket can bound a close handshake.
type hijackRecorder struct {
	http.ResponseWriter
	conn net.Conn
}

// Hijack implements http.Hijacker.
func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	h.conn = c
	return c, rw, err
}

// Shutdown stops accepting gateways and waits, until ctx is done, for
// in-flight outbound ops to be answered. Every op still running then is
// answered at once with the retryable code unavailable, marked ambiguous
// (the platform may have applied it). Then every connection is closed with
// 1001, after the frames queued before it (those answers included), so the
// gateways reconnect, possibly to another instance; Shutdown waits up to
// closeWait more for them to close. Last it writes the acknowledgements
// still queued to the store, where unacknowledged inbound stays for the
// next start, and logs how many entries that is. It closes the store only
// if New made it (an in-memory one: then the entries are discarded).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopping.Store(true)
	s.mu.Unlock()

	var err error
	if waitCtx(ctx, &s.outbound) != nil {
		n := s.abandonOps()
		s.log.Warn("shutdown: outbound ops still running at the deadline answered unavailable (ambiguous)", "ops", n)
		err = fmt.Errorf("relay: %d outbound ops were still running at the shutdown deadline", n)
	}
	s.mu.Lock()
	conns := slices.Collect(maps.Values(s.conns))
	s.mu.Unlock()
	for _, c := range conns {
		c.closeWith(contract.EndShutdown)
	}
	cctx, cancel := context.WithTimeout(context.Background(), s.closeWait())
	defer cancel()
	if waitCtx(cctx, &s.connsWG) != nil && err == nil {
		err = errors.New("relay: gateway connections still open after their 1001 close")
	}
	if s.fleet != nil {
		s.fleet.stop(cctx)
	}
	s.ledgers.Close(cctx)
	if n := s.ledgers.Len(); n > 0 && s.ownStore {
		s.log.Warn("shutdown discards buffered inbound the gateways have not acknowledged: no store is configured", "entries", n)
	} else if n > 0 {
		s.log.Info("shutdown keeps buffered inbound the gateways have not acknowledged in the store for the next start", "entries", n)
	}
	if s.ownStore {
		_ = s.cfg.Store.Close()
	}
	return err
}

// away is the ledgers' Unserved hook: cfg.Away, but not once Shutdown
// began, whose closing of every connection leaves their inbound waiting:
// the next start, or the tenant's next driver, reports it as it reads the
// store, and a poke now would send the gateways to an instance going away
// and hold off that report's poke for a cooldown.
func (s *Server) away() func(tenant string) {
	if s.cfg.Away == nil {
		return nil
	}
	return func(tenant string) {
		if !s.stopping.Load() {
			s.cfg.Away(tenant)
		}
	}
}

// closeWait bounds how long Shutdown waits for connections to close after
// closing them (their queued frames' write, the close frame's, which
// coder/websocket bounds at 5 s, and the gateway's answer, CloseTimeout),
// and then for the cluster's and the store's last writes.
func (s *Server) closeWait() time.Duration {
	return s.cfg.WriteTimeout + 5*time.Second + s.cfg.CloseTimeout
}

// waitCtx waits for wg or ctx, whichever comes first.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
