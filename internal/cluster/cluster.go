// Package cluster is how the connector's instances that share one store (a
// Redis) work together: the one layer under the relay's tenants
// (relay/fleet.go) and nexscope's rooms (platform/nexscope/cluster.go),
// drawn in docs/architecture.md. A Node gives them an outbox (one
// publisher, in order, never waiting), an inbox and shared channels
// dispatched by message type, a beat on the injected clock, peer liveness
// (Gone), Links and Calls. A user that carries messages on a transport of
// its own (nexscope's direct streams) encodes them with Gather, without
// copying large fields, and hands them in with DispatchHeld.
//
// The one rule for lost messages, which every user keeps: pub/sub may lose
// any message, and a full outbox loses one the same way. State is announced
// again every beat (or a digest of it, as the relay's rosters, with the
// state itself sent again when the digest does not match). A stream that
// must arrive in order is a Link: each message carries its sequence number
// and each beat the last one sent (or a digest of many links' counts), so
// the receiver sees a gap at the next message or beat, the link is broken,
// and its owner restarts it from what it keeps (the relay sends the
// unacknowledged inbound again, in order; nexscope, whose room state is
// live, closes the member with 1011). A request is a Call, which fails at
// its deadline. An instance silent for LostBeats beats is gone.
package cluster

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"connector/internal/clock"
	"connector/store"
)

// DefaultLeaseTTL is the default lease TTL of every lease the instances
// take (tenants, ingest, nexscope rooms): store.lease_ttl's default. A
// dead instance's leases move about that long after its death (they are
// held with store.Tenure); docs/durability.md.
const DefaultLeaseTTL = 2 * time.Second

// LostBeats is how many beats without a message from an instance make it
// gone.
const LostBeats = 3

// forgetBeats is how many beats without a message from an instance make the
// node forget it (an instance's name may change on restart).
const forgetBeats = 100

// OutboxSize bounds the messages waiting to be published.
const OutboxSize = 8192

// TenantShare bounds the messages for one tenant waiting to be published
// (SendFor), and the messages of every tenant together leave NoTenantShare
// to the messages of none, which take no more: one tenant's burst, or a
// burst of no tenant, fills only its own share.
const TenantShare = OutboxSize / 8

// NoTenantShare bounds the messages of no tenant waiting to be published
// (Send, SendWait, Call, Reply).
const NoTenantShare = OutboxSize / 4

// BulkShare bounds, within NoTenantShare, the messages of no tenant that
// SendWait queued (bulk data: a nexscope member's frames): a flood of them
// holds its senders back, and leaves NoTenantShare - BulkShare to the
// messages of no tenant that do not wait (Send: the beats), which it
// would have refused. Those SendWait and CallAgain queued for tenants (a
// bound room's, its forwarded actions) take at most BulkShare together
// too, and a quarter of each one's share.
const BulkShare = OutboxSize / 8

// tenantsRoom bounds the messages for any tenant waiting to be published.
const tenantsRoom = OutboxSize - NoTenantShare

// inboxPrefix starts every instance's own channel (the store prefixes it).
const inboxPrefix = "cluster:inbox:"

// Config configures a Node.
type Config struct {
	// Instance names this instance; unique among the instances sharing
	// PubSub.
	Instance string
	// PubSub carries the messages between instances (at most once).
	PubSub store.PubSub
	// LeaseTTL is how long the instances' leases last unless renewed; a
	// beat is a third of it. Zero means DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Clock times beats and liveness; nil means clock.System.
	Clock clock.Clock
	// ResendWindow is how long after its first send PubSub may deliver a
	// message again (store.ResendWindow); zero: never.
	ResendWindow time.Duration
	// Log receives the node's lines; nil discards.
	Log *slog.Logger
	// Refused, when set, counts each message Send or SendFor refused, by
	// its reason (RefusalReasons).
	Refused func(reason string)
}

// The reasons Send and SendFor refuse a message for (Config.Refused).
const (
	RefusedTenantShare = "tenant_share"    // its tenant's share (TenantShare) is full
	RefusedTenants     = "tenants_share"   // the part all tenants share is full
	RefusedNoTenant    = "no_tenant_share" // of no tenant, NoTenantShare is full
)

// RefusalReasons are every reason Config.Refused is given.
var RefusalReasons = []string{RefusedTenantShare, RefusedTenants, RefusedNoTenant}

// Node is this instance among the instances sharing one store. Its methods
// are safe for concurrent use.
type Node struct {
	cfg  Config
	beat time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	out chan queued

	// roomyHook, set only by tests, runs in Roomy once it found the outbox
	// holding at least half a TenantShare.
	roomyHook func()

	mu            sync.Mutex // guards what follows; a leaf
	handlers      map[byte]handler
	onRoom        []func(due []string)
	wantRoom      map[string]bool      // the tenants Roomy said no to whose OnRoom is owed
	queuedFor     map[string]int       // tenant ("": none) -> its messages in out
	tenantsQueued int                  // the messages of every tenant in out
	bulkQueued    [2]int               // the messages SendWait put in out, of no tenant and of tenants (BulkShare each)
	drained       chan struct{}        // closed (and made anew) as the publisher takes messages out
	heard         map[string]time.Time // instance -> when its last message arrived
	calls         map[string]chan []byte
	nextReq       uint64

	beatMu sync.Mutex // one beat at a time; guards timer, beats and stopped
	timer  clock.Timer
	beats  []*func() // in registration order
	closed bool
}

type handler struct {
	fields int
	call   bool
	fn     func(Msg)
}

// Msg is one message from another instance, as its handler gets it.
type Msg struct {
	// Type is the message's type byte.
	Type byte
	// From names the sending instance.
	From string
	// Fields are the message's fields. They alias the message, which
	// nothing else changes, so a handler may keep them; it must not change
	// them (on the memory and embedded backends every subscriber shares
	// one copy).
	Fields [][]byte
	// Held, when not nil, is the reusable memory Fields alias
	// (DispatchHeld): a handler that keeps Fields may Retain it instead of
	// keeping the memory from reuse for good, and then must not use them
	// after its Release.
	Held Buffer
	// req names the request a Call's message answers.
	req []byte
}

// ResendWindow is Config.ResendWindow: how long a handler that takes each
// message once must remember it.
func (n *Node) ResendWindow() time.Duration { return n.cfg.ResendWindow }

// New starts a Node: it subscribes to the instance's inbox and starts the
// outbox and the beat. Close stops it.
func New(cfg Config) (*Node, error) {
	if cfg.Instance == "" || cfg.PubSub == nil {
		return nil, errors.New("cluster: an instance name and a pub/sub are required")
	}
	cfg.LeaseTTL = cmp.Or(max(cfg.LeaseTTL, 0), DefaultLeaseTTL)
	cfg.Clock = cmp.Or(cfg.Clock, clock.System)
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	if cfg.Refused == nil {
		cfg.Refused = func(string) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg: cfg, beat: cfg.LeaseTTL / 3, ctx: ctx, cancel: cancel,
		out:       make(chan queued, OutboxSize),
		queuedFor: make(map[string]int),
		drained:   make(chan struct{}),
		wantRoom:  make(map[string]bool),
		handlers:  make(map[byte]handler),
		heard:     make(map[string]time.Time),
		calls:     make(map[string]chan []byte),
	}
	n.handlers[typeResult] = handler{fields: 2, fn: n.answered}
	if _, err := n.Subscribe(ctx, Inbox(cfg.Instance)); err != nil {
		cancel()
		return nil, err
	}
	n.wg.Go(n.publishLoop)
	n.beatMu.Lock()
	n.timer = cfg.Clock.AfterFunc(n.beat, n.tick)
	n.beatMu.Unlock()
	return n, nil
}

// Instance is this instance's name.
func (n *Node) Instance() string { return n.cfg.Instance }

// Beat is the time between two beats: a third of the lease TTL.
func (n *Node) Beat() time.Duration { return n.beat }

// LeaseTTL is how long the instances' leases last unless renewed.
func (n *Node) LeaseTTL() time.Duration { return n.cfg.LeaseTTL }

// Clock is the node's clock.
func (n *Node) Clock() clock.Clock { return n.cfg.Clock }

// Inbox is the channel of instance's inbox.
func Inbox(instance string) string { return inboxPrefix + instance }

// Close stops the beat, ends the subscriptions, publishes what the outbox
// still holds (each within the lease TTL) and returns once every goroutine
// of the node has finished.
func (n *Node) Close() {
	n.beatMu.Lock()
	n.closed = true
	n.timer.Stop()
	n.beatMu.Unlock()
	n.cancel()
	n.wg.Wait()
}

// Handle registers fn for the messages of type typ, which carry fields
// fields; a message of that type with another count is dropped as
// malformed. fn runs on the goroutine reading the channel the message came
// on, so it must not wait for long. Each user owns its type bytes: a type
// registered twice panics.
func (n *Node) Handle(typ byte, fields int, fn func(Msg)) {
	n.register(typ, handler{fields: fields, fn: fn})
}

// HandleCall registers fn for the requests of type typ (sent with Call),
// which fn answers with Reply.
func (n *Node) HandleCall(typ byte, fields int, fn func(Msg)) {
	n.register(typ, handler{fields: fields, call: true, fn: fn})
}

func (n *Node) register(typ byte, h handler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, dup := n.handlers[typ]; dup {
		panic("cluster: message type " + strconv.QuoteRune(rune(typ)) + " registered twice")
	}
	n.handlers[typ] = h
}

// Subscribe reads channel, a channel shared by several instances (or the
// one instance holding a lease on it), until ctx ends or cancel is called,
// dispatching its messages as the inbox's.
func (n *Node) Subscribe(ctx context.Context, channel string) (cancel func(), err error) {
	msgs, cancel, err := n.cfg.PubSub.Subscribe(ctx, channel)
	if err != nil {
		return nil, err
	}
	n.wg.Go(func() {
		for m := range msgs {
			n.Dispatch(m)
		}
	})
	return cancel, nil
}

// Buffer is reusable memory a message was read into (DispatchHeld).
type Buffer interface {
	// Retain keeps the memory from reuse until the matching Release.
	Retain()
	// Release ends one Retain; once each ended, the memory may be reused.
	Release()
}

// Dispatch hands one received message, or each message of a bundle in
// order, to its handler: what the inbox and every subscription do with
// each message, exported for fuzzing. Malformed messages (a bundle inside
// a bundle among them) and messages of types nobody handles are dropped.
func (n *Node) Dispatch(msg []byte) { n.DispatchHeld(msg, nil) }

// DispatchHeld is Dispatch of a message read into held: its handler gets
// held as Msg.Held. A bundle's messages get none (several handlers would
// share it). Without a Retain, held is never reused.
func (n *Node) DispatchHeld(msg []byte, held Buffer) {
	if len(msg) > 0 && msg[0] == typeBundle {
		_, _, msgs, ok := decode(msg)
		if !ok {
			n.cfg.Log.Warn("malformed cluster message dropped", "bytes", len(msg))
			return
		}
		for _, m := range msgs {
			n.dispatchOne(m, nil)
		}
		return
	}
	n.dispatchOne(msg, held)
}

// dispatchOne is Dispatch of one message, not a bundle.
func (n *Node) dispatchOne(msg []byte, held Buffer) {
	typ, from, fields, ok := decode(msg)
	if !ok || typ == typeBundle {
		n.cfg.Log.Warn("malformed cluster message dropped", "bytes", len(msg))
		return
	}
	now := n.cfg.Clock.Now()
	n.mu.Lock()
	n.heard[from] = now
	h, ok := n.handlers[typ]
	n.mu.Unlock()
	if !ok {
		return
	}
	m := Msg{Type: typ, From: from, Fields: fields, Held: held}
	if h.call {
		if len(fields) == 0 {
			return
		}
		m.req, m.Fields = fields[0], fields[1:]
	}
	if len(m.Fields) != h.fields {
		n.cfg.Log.Warn("malformed cluster message dropped", "type", string(rune(typ)), "fields", len(m.Fields))
		return
	}
	h.fn(m)
}

// queued is a message in the outbox, with the tenant it is for ("" for
// none), and whether SendWait queued it (counted in a BulkShare).
type queued struct {
	store.Message
	tenant string
	bulk   bool
}

// Send queues a message of type typ with fields for channel (an instance's
// Inbox, or a shared channel). It never waits: false means the outbox is
// full (NoTenantShare), and the message is lost as pub/sub may lose any.
func (n *Node) Send(channel string, typ byte, fields ...[]byte) bool {
	return n.SendFor("", channel, typ, fields...)
}

// SendFor is Send of a message for tenant ("": none), which is lost also
// when the tenant's share of the outbox (TenantShare) is full, or the part
// all tenants share.
func (n *Node) SendFor(tenant, channel string, typ byte, fields ...[]byte) bool {
	refused, _ := n.reserve(tenant, false)
	if refused != "" {
		n.cfg.Refused(refused)
		return false
	}
	n.out <- queued{Message: store.Message{Channel: channel, Msg: encode(typ, n.cfg.Instance, nil, fields)}, tenant: tenant} // reserved: never waits
	return true
}

// reserve counts a message for tenant ("": none; bulk: SendWait's) into
// the outbox, unless its share is full: refused is why
// (Config.Refused), and drained closes once the publisher takes messages
// out. The shares add up to the outbox's size, so a message reserved never
// waits for room in it.
func (n *Node) reserve(tenant string, bulk bool) (refused string, drained <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case tenant == "" && (n.queuedFor[""] >= NoTenantShare || bulk && n.bulkQueued[0] >= BulkShare):
		return RefusedNoTenant, n.drained
	case tenant == "":
	case n.queuedFor[tenant] >= TenantShare:
		return RefusedTenantShare, n.drained
	case bulk && (n.queuedFor[tenant] >= TenantShare/4 || n.bulkQueued[1] >= BulkShare):
		// Bulk of tenants, together, takes no more than bulk of none, so
		// rooms' floods never fill the outbox past half (Roomy's no to every
		// tenant); a tenant's keeps clear of the half its relay frames take.
		return RefusedTenantShare, n.drained
	case n.tenantsQueued >= tenantsRoom:
		return RefusedTenants, n.drained
	default:
		n.tenantsQueued++
	}
	if bulk {
		n.bulkQueued[min(len(tenant), 1)]++
	}
	n.queuedFor[tenant]++
	return "", n.drained
}

// dequeued counts messages for tenants ("": none), bulk of them
// SendWait's (of no tenant, of tenants), out of the outbox.
func (n *Node) dequeued(bulk [2]int, tenants ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.bulkQueued[0] -= bulk[0]
	n.bulkQueued[1] -= bulk[1]
	for _, t := range tenants {
		if t != "" {
			n.tenantsQueued--
		}
		if n.queuedFor[t]--; n.queuedFor[t] == 0 {
			delete(n.queuedFor, t)
		}
	}
	close(n.drained)
	n.drained = make(chan struct{})
}

// SendWait queues a message for tenant ("": none) as SendFor does, waiting
// while its share is full (a sender of bulk data): of a tenant a quarter
// of its share, or BulkShare for all tenants, or of no tenant BulkShare or
// NoTenantShare; false when ctx ended or the node closed first.
func (n *Node) SendWait(ctx context.Context, tenant, channel string, typ byte, fields ...[]byte) bool {
	return n.queueWait(ctx, queued{Message: store.Message{Channel: channel, Msg: encode(typ, n.cfg.Instance, nil, fields)}, tenant: tenant, bulk: true})
}

// queueWait queues q, waiting while its tenant's share is full; false
// when ctx ended or the node closed first.
func (n *Node) queueWait(ctx context.Context, q queued) bool {
	for {
		refused, drained := n.reserve(q.tenant, q.bulk)
		if refused == "" {
			n.out <- q // reserved: never waits
			return true
		}
		select {
		case <-drained:
		case <-ctx.Done():
			return false
		case <-n.ctx.Done():
			return false
		}
	}
}

// Roomy reports whether the outbox is less than half full, and tenant's
// share of it too. When it is not, the OnRoom callbacks run for tenant once
// both are again: a sender that must not fill the outbox (the relay's
// frames) holds back meanwhile, and asks again.
func (n *Node) Roomy(tenant string) bool {
	if len(n.out) < TenantShare/2 {
		return true
	}
	if n.roomyHook != nil {
		n.roomyHook()
	}
	// Looked at again and answered under mu, as the publisher looks after
	// each publication: either its look comes later and sees wantRoom, or
	// this one does and sees the messages it took out. A tenant stays in
	// wantRoom until a look finds both below half; until then messages
	// are queued (its own, or enough of the outbox), and the publisher
	// looks again once it took them out, so a no is never left without
	// its OnRoom.
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.out) < OutboxSize/2 && n.queuedFor[tenant] < TenantShare/2 {
		return true
	}
	n.wantRoom[tenant] = true
	return false
}

// OnRoom registers f to run (on the publishing goroutine, with no lock
// held) whenever the outbox is less than half full again, and the share of
// tenants Roomy said no to: due names them, each once per no. f must not
// keep due.
func (n *Node) OnRoom(f func(due []string)) {
	n.mu.Lock()
	n.onRoom = append(n.onRoom, f)
	n.mu.Unlock()
}

// publishLoop publishes queued messages in order, what is queued at once
// together when the store can (store.BatchPublisher: one round trip, the
// messages for one channel bundled into one publication); once
// the node closes it publishes what is left and returns. A message that
// cannot be published is lost; the first of a streak is logged, and the
// streak's length when publishing works again.
func (n *Node) publishLoop() {
	batcher, _ := n.cfg.PubSub.(store.BatchPublisher)
	batch := make([]store.Message, 0, publishBatch)
	tenants := make([]string, 0, publishBatch)
	var due []string // the tenants whose OnRoom a publication's look found owed
	streak, bulk := 0, [2]int{}
	take := func(m queued) {
		batch, tenants = append(batch, m.Message), append(tenants, m.tenant)
		if m.bulk {
			bulk[min(len(m.tenant), 1)]++
		}
	}
	publish := func() {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaseTTL)
		defer cancel()
		failed, first := 0, error(nil)
		if batcher != nil {
			failed, first = batcher.PublishAll(ctx, bundle(n.cfg.Instance, batch))
		} else {
			for _, m := range batch {
				if err := n.cfg.PubSub.Publish(ctx, m.Channel, m.Msg); err != nil {
					failed++
					first = cmp.Or(first, err)
				}
			}
		}
		switch {
		case failed > 0 && streak == 0:
			n.cfg.Log.Warn("cluster messages not published", "messages", failed, "err", first)
			streak += failed
		case failed > 0:
			streak += failed
		case streak > 0:
			n.cfg.Log.Info("cluster messages published again", "lost", streak)
			streak = 0
		}
		clear(batch)
		batch = batch[:0]
		if len(n.out) < OutboxSize/2 {
			n.mu.Lock()
			fs := n.onRoom
			for t := range n.wantRoom {
				if n.queuedFor[t] < TenantShare/2 {
					due = append(due, t)
					delete(n.wantRoom, t)
				}
			}
			n.mu.Unlock()
			if len(due) > 0 {
				for _, f := range fs {
					f(due)
				}
				clear(due)
				due = due[:0]
			}
		}
	}
	for {
		closing := false
		select {
		case m := <-n.out:
			take(m)
		case <-n.ctx.Done():
			closing = true
		}
	gather:
		for len(batch) < publishBatch {
			select {
			case m := <-n.out:
				take(m)
			default:
				break gather
			}
		}
		n.dequeued(bulk, tenants...)
		tenants, bulk = tenants[:0], [2]int{}
		publish()
		if closing && len(n.out) == 0 {
			return
		}
	}
}

// publishBatch is the most messages published at once.
const publishBatch = 256

// OnBeat registers f to run every beat, after the beats registered before
// it, on the node's clock: on a clocktest.Fake inside the Advance that
// reaches the beat, so tests step the instances beat by beat. stop
// unregisters f, waiting for a beat under way.
func (n *Node) OnBeat(f func()) (stop func()) {
	p := &f
	n.beatMu.Lock()
	n.beats = append(n.beats, p)
	n.beatMu.Unlock()
	return func() {
		n.beatMu.Lock()
		n.beats = slices.DeleteFunc(n.beats, func(q *func()) bool { return q == p })
		n.beatMu.Unlock()
	}
}

// tick runs one beat, forgets the instances not heard from for forgetBeats
// beats, and arms the next.
func (n *Node) tick() {
	n.beatMu.Lock()
	defer n.beatMu.Unlock()
	if n.closed {
		return
	}
	for _, f := range n.beats {
		(*f)()
	}
	now := n.cfg.Clock.Now()
	n.mu.Lock()
	maps.DeleteFunc(n.heard, func(_ string, last time.Time) bool { return now.Sub(last) > forgetBeats*n.beat })
	n.mu.Unlock()
	n.timer.Reset(n.beat)
}

// Gone reports whether instance has been silent for LostBeats beats,
// counting from since when that is later than its last message (a link
// made since then has not had the time to hear from it).
func (n *Node) Gone(instance string, since time.Time) bool {
	now := n.cfg.Clock.Now()
	n.mu.Lock()
	last := n.heard[instance]
	n.mu.Unlock()
	if last.Before(since) {
		last = since
	}
	return now.Sub(last) > LostBeats*n.beat
}
