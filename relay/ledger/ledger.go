// Package ledger is the relay's inbound ledger: for each tenant, the
// deliveries its gateways have not acknowledged yet, which connection each
// is in flight on, and which connection owns each session; with a durable
// store.Ledger behind it. It knows nothing of WebSockets: a gateway
// connection appears as a Consumer that takes complete frames without
// blocking.
//
// The rules it keeps (each method's doc has the details):
//
//   - Append returns only once the delivery is durable, so a platform
//     confirms an event to its source only after that, but dispatches it
//     as soon as the store numbered it (store.Ledger.Stage); a removal of
//     an entry whose commit is under way reaches the store after the
//     commit. Its bufferId, Config.IDPrefix (the store's epoch) and the
//     record's sequence number, stays the same across redeliveries and
//     restarts.
//
//   - Waiting entries are dispatched in sequence order: to the session's
//     owner while it is attached and serves the entry's platform, else to
//     the attached consumer serving it with the fewest entries in flight,
//     which becomes the owner. When an entry has to wait, so does every
//     later entry of its session, and so does a session while another of
//     its Appends is being stored: a session's entries reach gateways in
//     order.
//
//   - A consumer holds at most Config.AckWindow windowed entries in flight,
//     a ByteWindow at most WindowBytes of their frames (one entry whatever
//     its size) and as many again of unwindowed ones until it reports each
//     Written; it takes nothing while Full, and one Closing is offered
//     nothing more. An Idle one gets nothing new; a detached one's entries
//     are dispatched again in their original order.
//
//   - An acknowledged entry leaves memory at once and the store shortly
//     after, in batches (Pool.Flush): a removal lost in a crash means a
//     redelivery after the restart, which at-least-once delivery allows.
//
//   - Bounds are absolute, entries in flight included: Config.MaxEntries
//     and MaxBytes per tenant, MaxTotalBytes across tenants (the largest
//     gives way) and MaxAge; the oldest entries go first, each logged and
//     counted.
//
// Memory holds each entry's frame (its payload framed once) until it is
// acknowledged or dropped, so it is bounded by MaxTotalBytes plus the
// frames' envelopes. Session owners are kept in memory (OnOwned reports
// each dispatch so the caller can keep them elsewhere too); after a
// restart or a Reset a session's next entry picks a new owner.
//
// # Locking
//
// Each Ledger's state is guarded by its own mutex, which is never held
// across I/O: store calls happen before it is taken or after it is
// released, and no two Ledger mutexes are ever held together. A consumer
// must never call into the Ledger from Offer, nor while it holds a lock it
// takes in it. The order of these locks among the relay's is in
// docs/locks.md.
package ledger

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/internal/clock"
	"connector/store"
)

// Consumer is a gateway connection as the ledger sees it. The ledger calls
// Offer with its mutex held: it must not block nor call back into the
// Ledger.
type Consumer interface {
	// Offer hands the consumer one complete frame, without blocking.
	Offer(frame []byte) Offered
	// Owner names the consumer among the consumers of every instance
	// sharing the store (its instance and its connection): a session's
	// owner as it is stored (OnOwned).
	Owner() (instance, conn string)
}

// ByteWindow is a Consumer whose entries in flight are bounded in frame
// bytes too: one that cannot tell when it has room, as a socket on another
// instance, whose queue fills as fast as the frames reach it.
type ByteWindow interface {
	Consumer
	// WindowBytes is the most frame bytes of windowed entries it holds in
	// flight, and apart from those of unwindowed ones it has not reported
	// written (Ledger.Written), one entry whatever its size.
	WindowBytes() int64
}

// Offered is what a Consumer did with a frame it was offered.
type Offered uint8

// Offer's results.
const (
	// Taken: the consumer took the frame.
	Taken Offered = iota
	// Full: the consumer has no room now; it calls Ledger.Pump once it
	// has. The frame waits in the ledger.
	Full
	// Closing: the consumer is closing and will detach; it gets nothing
	// more, and the frame goes to another consumer.
	Closing
)

// Framer turns a stored payload into the frame a consumer is offered.
type Framer interface {
	// Frame builds the complete frame for a delivery of kind around its
	// encoded payload, under the bufferId AppendBufferID(nil, idPrefix,
	// seq).
	Frame(kind uint8, idPrefix string, seq uint64, payload []byte) []byte
	// Windowed reports whether entries of kind count against a consumer's
	// ack window.
	Windowed(kind uint8) bool
}

// AllPlatforms, passed to Serve, attaches a consumer for every platform's
// inbound (a gateway's hello for platform "relay").
const AllPlatforms = "*"

// Outcomes the ledger reports to Metrics.Inbound for entries it drops.
const (
	DroppedOverflow = "dropped_overflow" // over the tenant's entries or bytes bound
	DroppedTotal    = "dropped_total"    // over the bytes bound across tenants
	DroppedExpired  = "dropped_expired"  // older than MaxAge
	// DroppedMalformed is a stored record that does not decode.
	DroppedMalformed = "dropped_malformed"
	// DroppedOversized is a stored record whose payload is over
	// Config.MaxPayloadBytes.
	DroppedOversized = "dropped_oversized"
)

// Metrics receives the ledger's measurements; relay.Metrics satisfies it.
type Metrics interface {
	// Inbound counts a delivery by outcome; the ledger reports the Dropped
	// outcomes.
	Inbound(platform, tenant, outcome string)
	// Delivered records the time from platform receipt to a first delivery.
	Delivered(platform string, d time.Duration)
	// Buffered reports the number of entries a tenant's ledger holds.
	Buffered(tenant string, n int)
}

// TenantMetrics is a Metrics that resolves a tenant's series once: a
// ledger made for tenant then reports its count (with its mutex held, after
// every append, acknowledgement and removal) to what BufferedOf(tenant)
// returned, with no lookup by tenant per report. A Metrics that does not
// implement it gets Buffered calls.
type TenantMetrics interface {
	BufferedOf(tenant string) func(n int)
}

// Config configures a Pool and every Ledger in it. Every field but
// MaxTotalBytes, MaxAge, SweepEvery and MaxPayloadBytes must be set.
type Config struct {
	// Store is where entries are kept until acknowledged.
	Store store.Ledger
	// IDPrefix starts every bufferId (the store's epoch and "-"); the
	// record's sequence number follows.
	IDPrefix string
	Framer   Framer
	// AckWindow bounds windowed entries in flight per consumer.
	AckWindow int
	// MaxEntries and MaxBytes bound each tenant's ledger, entries in flight
	// included; bytes are payload bytes.
	MaxEntries int
	MaxBytes   int64
	// MaxTotalBytes bounds the payload bytes of all tenants together; zero
	// means no bound beyond the tenants' own.
	MaxTotalBytes int64
	// MaxAge drops entries received longer ago than this; zero means no
	// age bound.
	MaxAge time.Duration
	// SweepEvery is how often MaxAge is enforced. Zero means a minute.
	SweepEvery time.Duration
	// MaxPayloadBytes drops, as it is read (Tail), a stored record whose
	// payload is larger (written by another program or version): its frame
	// would exceed what a gateway takes, at every delivery. Zero means no
	// bound.
	MaxPayloadBytes int
	// SessionOwners bounds the remembered session owners per tenant (least
	// recently used are forgotten).
	SessionOwners int
	// Unserved, when set, is called when an entry comes into the ledger
	// (Append, or Tail), or is left waiting by a consumer going idle or
	// detaching, that no attached consumer serves: it is buffered until a
	// gateway connects (the wake poke). It is called with the
	// ledger's mutex held: it must not block nor call into the Ledger.
	Unserved func(tenant string)
	// Clock is the time of entries' ages and of the sweep.
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics Metrics
}

// Pool is the ledgers of one process's tenants: the bound they share, the
// goroutines that write removals (acknowledged and dropped entries) to the
// store in batches and sweep old entries, and recovery after a restart.
type Pool struct {
	cfg   Config
	bytes atomic.Int64 // payload bytes of every ledger

	mu      sync.Mutex // guards ledgers
	ledgers map[string]*Ledger

	rmMu  sync.Mutex // guards dirty and spare
	dirty []*Ledger  // ledgers with removals to write
	spare []*Ledger  // a drained dirty slice, for reuse
	wake  chan struct{}

	flushMu sync.Mutex          // one flush at a time
	acks    map[string][]uint64 // a small flush's removals by tenant; guarded by flushMu

	closeOnce sync.Once
	ctx       context.Context // ended by Close: the goroutines stop, a sweep under way too
	stop      context.CancelFunc
	stopped   chan struct{}  // closed once run and the sweeping goroutine ended
	sweeping  sync.WaitGroup // the age sweep's goroutine

	removed, removeErrors atomic.Uint64

	// unknownMu guards unknown: the stored tenants the last Sweep found
	// without a ledger here (Sweep).
	unknownMu sync.Mutex
	unknown   map[string]bool
}

// NewPool returns an empty pool and starts its goroutines; Close stops them.
func NewPool(cfg Config) *Pool {
	cfg.SweepEvery = cmp.Or(max(cfg.SweepEvery, 0), time.Minute)
	p := &Pool{
		cfg:     cfg,
		ledgers: make(map[string]*Ledger),
		acks:    make(map[string][]uint64, smallFlush),
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
	}
	p.ctx, p.stop = context.WithCancel(context.Background())
	p.sweeping.Go(func() { clock.Every(p.ctx, p.cfg.Clock, p.cfg.SweepEvery, p.sweep) })
	go p.run()
	return p
}

// Ledger is one tenant's ledger. Its methods are safe for concurrent use.
type Ledger struct {
	pool   *Pool
	tenant string
	// buffered reports the number of entries the ledger holds
	// (Metrics.Buffered, or TenantMetrics.BufferedOf resolved once).
	buffered func(n int)

	mu            sync.Mutex
	seats         map[Consumer]*seat
	attached      []*seat // receive new entries: served a platform, not idle, not detached
	oldest        *entry  // every entry, in seq order, through next
	newest        *entry
	pending       []*entry          // waiting for a consumer, in seq order
	bySeq         map[uint64]*entry // every entry, waiting or in flight
	bytes         int64             // payload bytes of every entry
	owners        *simplelru.LRU[string, owner]
	appending     map[string]int // session key -> Appends being stored; 0s kept (countAppendingLocked)
	appendingLive int            // keys of appending counting above 0
	removals      []uint64       // seqs to remove from the store
	drained       []uint64       // the removals the last flush wrote, for reuse; guarded by the pool's flushMu
	dirty         bool           // queued in the pool's dirty list
	size          atomic.Int64   // bytes, for the pool to read without the lock

	owned func(c Consumer, sessionKey, chatID string) // OnOwned's

	// since is when the ledger's tenant began, in Unix microseconds (0:
	// always): a record received before then was an earlier tenant's of
	// the id (SetSince).
	since atomic.Int64

	// resets counts Resets, under mu: a Tail whose store read began before
	// one takes nothing in, and the next Tail reads from the start.
	resets uint64
	// forgotten is set, under mu, once the pool forgot the ledger
	// (Forget): it takes nothing in from then on.
	forgotten bool
	// tailed is the highest seq a Tail read, under mu: an Append's record
	// at or below it was read by a Tail while it was staged, which took it
	// in (its gateway may have acknowledged it since) or passed it over.
	tailed uint64
	// held is set by Hold, under mu: nothing is offered until a Tail of
	// the ledger's generation ends.
	held bool

	// tailMu serializes Tails; it is taken before mu, and held across the
	// store's Read. Reset does not take it, so it never waits for a read.
	tailMu     sync.Mutex
	readPos    uint64 // the highest seq Tail took in; guarded by tailMu
	readResets uint64 // resets as of readPos; guarded by tailMu
	readSince  int64  // since as of readPos; guarded by tailMu
}

// seat is the ledger's state of one consumer.
type seat struct {
	c         Consumer
	all       bool     // serves every platform
	platforms []string // served platforms, unless all
	attached  bool
	idle      bool
	detached  bool
	inflight  int // windowed entries sent and not acknowledged
	// inflightBytes are their frames' bytes, and looseBytes those of the
	// unwindowed entries in flight; each is bounded by maxBytes when it
	// is set (ByteWindow).
	inflightBytes, looseBytes, maxBytes int64
}

// full reports whether s has no room for e: a windowed entry past the ack
// window, or, on a ByteWindow, past its bytes (one entry whatever its
// size), the unwindowed entries apart from the windowed ones.
func (s *seat) full(e *entry, window int) bool {
	if !e.windowed {
		return s.maxBytes > 0 && s.looseBytes > 0 && s.looseBytes+int64(len(e.frame)) > s.maxBytes
	}
	return s.inflight >= window || (s.maxBytes > 0 && s.inflight > 0 && s.inflightBytes+int64(len(e.frame)) > s.maxBytes)
}

func (s *seat) serves(platform string) bool { return s.all || slices.Contains(s.platforms, platform) }

// entry is one delivery in the ledger.
type entry struct {
	seq        uint64
	platform   string
	sessionKey string
	chatID     string
	frame      []byte // immutable
	size       int64  // payload bytes
	received   time.Time
	// gen is the generation of the tenant the entry was stored for
	// (store.Record.Generation): zero for none known.
	gen        int64
	prev, next *entry // neighbours in seq order
	seat       *seat  // in flight on this consumer; nil while waiting
	sent       bool   // delivered at least once
	windowed   bool
	// written is set when the consumer an unwindowed entry is in flight on
	// reported its frame written: its bytes left the consumer's window.
	written bool
	// staged is set while the entry's commit is under way: it may be
	// dispatched, but its removal from the store waits for the commit.
	staged bool
	// removeStored is set when the entry left the ledger while staged: the
	// removal is queued once the commit is done.
	removeStored bool
	// later is set on an Append's entry left in the store, while staged,
	// for a later generation than the ledger's: taken in once committed
	// if the ledger has begun it meanwhile and no Tail read it.
	later bool
}

// owner is the consumer a session's entries went to last.
type owner struct {
	seat   *seat
	chatID string
}

// Ledger returns tenant's ledger, creating it. Its metrics series is
// resolved (TenantMetrics) before the pool's mutex is taken, which stays a
// leaf.
func (p *Pool) Ledger(tenant string) *Ledger {
	buffered := func(n int) { p.cfg.Metrics.Buffered(tenant, n) }
	if m, ok := p.cfg.Metrics.(TenantMetrics); ok {
		buffered = m.BufferedOf(tenant)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.ledgers[tenant]; l != nil {
		return l
	}
	owners, _ := simplelru.NewLRU[string, owner](p.cfg.SessionOwners, nil)
	l := &Ledger{
		pool: p, tenant: tenant, buffered: buffered,
		seats:     make(map[Consumer]*seat),
		bySeq:     make(map[uint64]*entry),
		owners:    owners,
		appending: make(map[string]int),
	}
	p.ledgers[tenant] = l
	return l
}

// known returns tenant's ledger if the pool has one.
func (p *Pool) known(tenant string) *Ledger {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ledgers[tenant]
}

// Forget forgets l, the ledger of a tenant the process no longer
// serves: its entries leave memory (Reset: the store keeps them, to be
// read by the tenant's next ledger or aged out by Sweep) and the pool
// drops it, so Ledger makes a new one for the tenant. Removals already
// queued are still written. From then on l takes nothing in: an Append of
// a delivery that found l just before stores its record (for the tenant's
// next ledger) without holding it or counting its bytes in the pool's.
func (p *Pool) Forget(l *Ledger) {
	l.mu.Lock()
	l.forgotten = true
	l.mu.Unlock()
	l.Reset()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ledgers[l.tenant] == l {
		delete(p.ledgers, l.tenant)
	}
}

// all returns every ledger.
func (p *Pool) all() []*Ledger {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Collect(maps.Values(p.ledgers))
}

// Delivery is one platform delivery to take into a ledger: the record the
// store keeps of it, whose Seq the store sets. Kind is the caller's,
// passed back to the Framer; SessionKey routes it to its session's owner
// (empty for none); the ledger does not keep Payload; a zero Received
// means now.
type Delivery = store.Record

// Append stores d, takes it into the ledger, dispatches it if a consumer can
// take it, and returns its sequence number (its bufferId is Config.IDPrefix
// and that number). It dispatches d once the store has numbered it, and
// returns only once d is durable in the store; an error means it was not
// taken. The ledger's mutex is not held while the store writes, so
// concurrent Appends share its commits.
func (l *Ledger) Append(ctx context.Context, d Delivery) (uint64, error) {
	rec := records.Get().(*[1]store.Record)
	rec[0] = d
	l.stamp(&rec[0])
	var es [1]*entry
	err := l.appendRecords(ctx, rec[:], es[:])
	rec[0] = store.Record{}
	records.Put(rec)
	if err != nil {
		return 0, err
	}
	return es[0].seq, nil
}

// AppendAll is Append for several deliveries from one source: it stores ds
// in one store write (one commit of the embedded store, one round trip of
// redis), takes them into the ledger in their order, and returns their
// sequence numbers. Either all of ds are taken or, with an error, none.
func (l *Ledger) AppendAll(ctx context.Context, ds []Delivery) ([]uint64, error) {
	recs := slices.Clone(ds)
	for i := range recs {
		l.stamp(&recs[i])
	}
	es := make([]*entry, len(ds))
	if err := l.appendRecords(ctx, recs, es); err != nil {
		return nil, err
	}
	seqs := make([]uint64, len(es))
	for i, e := range es {
		seqs[i] = e.seq
	}
	return seqs, nil
}

// stamp sets r's Received to now when it is zero, and its Generation to
// the ledger's tenant's (SetSince) when it is zero.
func (l *Ledger) stamp(r *store.Record) {
	if r.Received.IsZero() {
		r.Received = l.pool.cfg.Clock.Now()
	}
	if r.Generation == 0 {
		r.Generation = l.since.Load()
	}
}

// appendRecords stages recs in one store call, takes the entries it builds
// (into es, in recs' order) into the ledger and dispatches them, then waits
// for their commit: Append and AppendAll.
func (l *Ledger) appendRecords(ctx context.Context, recs []store.Record, es []*entry) error {
	p := l.pool
	since := l.since.Load() // before the records are staged: what Begin changes meanwhile
	l.countAppending(recs, 1)
	seqs, commit, err := p.cfg.Store.Stage(ctx, l.tenant, recs)
	if err == nil && len(seqs) != len(recs) {
		err = errors.New("ledger: the store assigned no sequence number")
	}
	if err == nil {
		for i := range recs {
			es[i] = l.newEntry(seqs[i], &recs[i])
			es[i].staged = true
		}
	}
	l.mu.Lock()
	l.countAppendingLocked(recs, -1)
	take := err == nil && !l.forgotten
	if take {
		for _, e := range es {
			if e.seq <= l.tailed {
				continue // read by a Tail meanwhile
			}
			if earlier, later := l.earlierLocked(e), l.laterLocked(e); earlier || later {
				// Routed under an earlier tenant of the id, or stamped with
				// the generation Begin ended while it was staged: the
				// earlier tenant's, removed once committed. One routed
				// under a later generation than the ledger's before it was
				// staged is a tenant created again that this instance has
				// not applied yet: left in the store for its driver.
				e.removeStored = earlier || since == 0 || e.gen <= since
				e.later = !e.removeStored
				p.cfg.Log.Debug("delivery not taken in: routed under another generation of the tenant",
					"tenant", l.tenant, "generation", e.gen, "since", l.since.Load(), "stored", !e.removeStored)
				continue
			}
			l.insertLocked(e)
		}
		l.boundLocked()
	}
	l.dispatchLocked()
	if take {
		l.noteUnservedLocked(es...)
		l.buffered(len(l.bySeq))
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	err = commit()
	l.mu.Lock()
	changed := false
	for _, e := range es {
		e.staged = false
		switch {
		case err != nil && l.bySeq[e.seq] == e:
			// Not stored, so not confirmed: the source delivers it again.
			l.removeLocked(e)
			changed = true
		case err == nil && e.removeStored:
			// Acknowledged or dropped while its commit was under way.
			l.queueRemovalLocked(e.seq)
		case err == nil && e.later && !l.forgotten && e.seq > l.tailed && !l.earlierLocked(e) && !l.laterLocked(e):
			// Its generation begun (Begin) while it was committed, after
			// the Tail that followed read the store without it.
			l.insertLocked(e)
			changed = true
		}
	}
	if changed {
		l.boundLocked()
		l.dispatchLocked()
		l.buffered(len(l.bySeq))
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	p.boundTotal()
	return nil
}

// countAppending adds n to the count of Appends being stored for each
// record's session (appending), which holds back the session's later
// entries from dispatch until the earlier ones are numbered.
func (l *Ledger) countAppending(recs []store.Record, n int) {
	for i := range recs {
		if recs[i].SessionKey != "" {
			l.mu.Lock()
			l.countAppendingLocked(recs, n)
			l.mu.Unlock()
			return
		}
	}
}

// appendingSlack is how many sessions' counts of 0 appending keeps beyond
// twice its live ones before countAppendingLocked drops them.
const appendingSlack = 32

// countAppendingLocked is countAppending with l.mu held. A session's count
// that falls to 0 stays in appending, so its next Append finds its key
// instead of inserting it again (a delete and an insert per event
// otherwise); the 0s are dropped once they number more than the live
// counts twice over plus appendingSlack, which keeps the map's size
// bounded and the sweep's cost per Append constant.
func (l *Ledger) countAppendingLocked(recs []store.Record, n int) {
	for i := range recs {
		k := recs[i].SessionKey
		if k == "" {
			continue
		}
		old := l.appending[k]
		now := max(old+n, 0)
		l.appending[k] = now
		switch {
		case old <= 0 && now > 0:
			l.appendingLive++
		case old > 0 && now <= 0:
			l.appendingLive--
		}
	}
	if n < 0 && len(l.appending) > 2*l.appendingLive+appendingSlack {
		maps.DeleteFunc(l.appending, func(_ string, c int) bool { return c <= 0 })
	}
}

// StoreAll stores ds, deliveries from one source, durably and in one store
// write, without taking them into the ledger, and returns their sequence
// numbers in order: among several instances, the one driving the tenant
// takes them in with Tail.
func (l *Ledger) StoreAll(ctx context.Context, ds []Delivery) ([]uint64, error) {
	recs := slices.Clone(ds)
	for i := range recs {
		l.stamp(&recs[i])
	}
	seqs, err := l.pool.cfg.Store.Append(ctx, l.tenant, recs)
	if err == nil && len(seqs) != len(recs) {
		err = errors.New("ledger: the store assigned no sequence number")
	}
	if err != nil {
		return nil, err
	}
	return seqs, nil
}

// records holds the one-record slices Append hands the store, which copies
// them.
var records = sync.Pool{New: func() any { return new([1]store.Record) }}

// AppendBufferID appends to dst the bufferId of the record numbered seq in a
// ledger whose Config.IDPrefix is idPrefix.
func AppendBufferID(dst []byte, idPrefix string, seq uint64) []byte {
	return strconv.AppendUint(append(dst, idPrefix...), seq, 10)
}

// bufferID is the bufferId of the record numbered seq, for logs.
func (p *Pool) bufferID(seq uint64) string {
	return string(AppendBufferID(nil, p.cfg.IDPrefix, seq))
}

// seqOf returns the sequence number of the bufferId id, and false for an id
// AppendBufferID does not give with the pool's prefix (another prefix, a
// leading zero, a sign, an overflow): an entry is found by its number only
// under its own bufferId, spelled as it was sent.
func seqOf[ID ~string | ~[]byte](p *Pool, id ID) (seq uint64, ok bool) {
	prefix := p.cfg.IDPrefix
	if len(id) <= len(prefix) || string(id[:len(prefix)]) != prefix || id[len(prefix)] == '0' {
		return 0, false
	}
	for i := len(prefix); i < len(id); i++ {
		d := uint64(id[i] - '0')
		if d > 9 || seq > (math.MaxUint64-d)/10 {
			return 0, false
		}
		seq = seq*10 + d
	}
	return seq, true
}

// lookupLocked returns the entry whose bufferId is id, or nil.
func lookupLocked[ID ~string | ~[]byte](l *Ledger, id ID) *entry {
	seq, ok := seqOf(l.pool, id)
	if !ok {
		return nil
	}
	return l.bySeq[seq]
}

// newEntry builds the entry for a stored record: its frame.
func (l *Ledger) newEntry(seq uint64, r *store.Record) *entry {
	p := l.pool
	return &entry{
		seq: seq, platform: r.Platform, sessionKey: r.SessionKey, chatID: r.ChatID,
		frame: p.cfg.Framer.Frame(r.Kind, p.cfg.IDPrefix, seq, r.Payload), size: int64(len(r.Payload)),
		received: r.Received, gen: r.Generation, windowed: p.cfg.Framer.Windowed(r.Kind),
	}
}

// insertLocked adds e in seq order: at the end, unless a concurrent Append
// with a higher seq got there first.
func (l *Ledger) insertLocked(e *entry) {
	after := l.newest
	for after != nil && after.seq > e.seq {
		after = after.prev
	}
	e.prev = after
	if after == nil {
		e.next, l.oldest = l.oldest, e
	} else {
		e.next, after.next = after.next, e
	}
	if e.next == nil {
		l.newest = e
	} else {
		e.next.prev = e
	}
	i := len(l.pending)
	for i > 0 && l.pending[i-1].seq > e.seq {
		i--
	}
	l.pending = slices.Insert(l.pending, i, e)
	l.bySeq[e.seq] = e
	l.grow(e.size)
}

// grow adds n payload bytes to the ledger and the pool.
func (l *Ledger) grow(n int64) {
	l.bytes += n
	l.size.Store(l.bytes)
	l.pool.bytes.Add(n)
}

// removeLocked takes e out of the ledger: out of the seq list, the id
// index, the waiting line or its consumer's window.
func (l *Ledger) removeLocked(e *entry) {
	if e.prev == nil {
		l.oldest = e.next
	} else {
		e.prev.next = e.next
	}
	if e.next == nil {
		l.newest = e.prev
	} else {
		e.next.prev = e.prev
	}
	e.prev, e.next = nil, nil
	delete(l.bySeq, e.seq)
	l.grow(-e.size)
	switch {
	case e.seat != nil:
		if e.windowed {
			e.seat.inflight--
			e.seat.inflightBytes -= int64(len(e.frame))
		} else if !e.written {
			e.seat.looseBytes -= int64(len(e.frame))
		}
		e.seat, e.written = nil, false
	case len(l.pending) > 0 && l.pending[0] == e:
		l.pending[0] = nil
		l.pending = l.pending[1:]
	default:
		l.pending = slices.DeleteFunc(l.pending, func(x *entry) bool { return x == e })
	}
}

// boundLocked drops the oldest entries, in flight or not, while the ledger
// exceeds its tenant's bounds.
func (l *Ledger) boundLocked() {
	cfg := &l.pool.cfg
	for l.oldest != nil && (len(l.bySeq) > cfg.MaxEntries || l.bytes > cfg.MaxBytes) {
		l.dropLocked(l.oldest, DroppedOverflow, true)
	}
}

// dropLocked removes e for reason, logs and counts it, and queues its
// removal from the store unless the store dropped it itself.
func (l *Ledger) dropLocked(e *entry, reason string, removeStored bool) {
	cfg := &l.pool.cfg
	l.removeLocked(e)
	if removeStored {
		l.removeStoredLocked(e)
	}
	cfg.Metrics.Inbound(e.platform, l.tenant, reason)
	cfg.Log.Warn("buffered inbound dropped", "reason", reason,
		"tenant", l.tenant, "platform", e.platform, "buffer_id", l.pool.bufferID(e.seq), "bytes", e.size,
		"age", cfg.Clock.Now().Sub(e.received).Round(time.Millisecond), "in_flight", e.sent)
}

// removeStoredLocked has the pool remove e from the store, once e's commit
// is done: a removal must not reach the store before the record it
// removes.
func (l *Ledger) removeStoredLocked(e *entry) {
	if e.staged {
		e.removeStored = true
		return
	}
	l.queueRemovalLocked(e.seq)
}

// queueRemovalLocked has the pool remove seq from the store.
func (l *Ledger) queueRemovalLocked(seq uint64) {
	l.removals = append(l.removals, seq)
	if !l.dirty {
		l.dirty = true
		l.pool.markDirty(l)
	}
}

// dispatchLocked offers waiting entries, in order, to eligible consumers
// with room. A session's entries all go to its owner, so when the first of
// them has to wait, the later ones wait too and order is kept; so do the
// entries of a session with an Append still being stored, which may come
// before them.
func (l *Ledger) dispatchLocked() {
	if l.held || len(l.attached) == 0 || len(l.pending) == 0 {
		return
	}
	cfg := &l.pool.cfg
	var blocked map[string]bool
	// Read before any offer: what an offer sets off may read the clock
	// too, and must not find it earlier than the entry's offer time.
	now := cfg.Clock.Now()
	keep := l.pending[:0]
	for _, e := range l.pending {
		if e.sessionKey != "" && (blocked[e.sessionKey] || l.appendingLive > 0 && l.appending[e.sessionKey] > 0) {
			keep = append(keep, e)
			continue
		}
		s, remembered, offered := l.offerLocked(e)
		if offered != Taken {
			if e.sessionKey != "" {
				if blocked == nil {
					blocked = make(map[string]bool)
				}
				blocked[e.sessionKey] = true
			}
			keep = append(keep, e)
			continue
		}
		e.seat = s
		if e.windowed {
			s.inflight++
			s.inflightBytes += int64(len(e.frame))
		} else {
			s.looseBytes += int64(len(e.frame))
		}
		if !e.sent {
			e.sent = true
			cfg.Metrics.Delivered(e.platform, now.Sub(e.received))
		}
		if e.sessionKey != "" {
			if !remembered { // else pickLocked's Get made it the most recent
				l.owners.Add(e.sessionKey, owner{seat: s, chatID: e.chatID})
			}
			if l.owned != nil {
				l.owned(s.c, e.sessionKey, e.chatID)
			}
		}
	}
	clear(l.pending[len(keep):])
	l.pending = keep
}

// offerLocked offers e to the consumer pickLocked chooses, and on to the
// next while one says it is closing (it is offered nothing more). It
// returns the consumer that took e, or why nobody did (Full: none with room
// or window), and whether the consumer is the session's remembered owner
// for e's chat (pickLocked).
func (l *Ledger) offerLocked(e *entry) (*seat, bool, Offered) {
	for {
		s, remembered := l.pickLocked(e)
		if s == nil || s.full(e, l.pool.cfg.AckWindow) {
			return nil, false, Full
		}
		if offered := s.c.Offer(e.frame); offered != Closing {
			return s, remembered, offered
		}
		l.unattachLocked(s)
	}
}

// noteUnservedLocked calls Config.Unserved once if one of entries is still
// in the ledger, waiting, with no attached consumer serving its platform.
func (l *Ledger) noteUnservedLocked(entries ...*entry) {
	if l.pool.cfg.Unserved == nil {
		return
	}
	for _, e := range entries {
		if e.seat != nil || l.bySeq[e.seq] != e {
			continue
		}
		if s, _ := l.pickLocked(e); s == nil {
			l.pool.cfg.Unserved(l.tenant)
			return
		}
	}
}

// pickLocked returns the consumer for e: the session's owner while it is
// attached and serves e's platform, else the least loaded attached consumer
// that does, among those with room for e if any has. remembered reports
// that the owner was picked and is remembered with e's chat: the owners
// already hold what dispatching e would store, as their most recent.
func (l *Ledger) pickLocked(e *entry) (*seat, bool) {
	if e.sessionKey != "" {
		if o, ok := l.owners.Get(e.sessionKey); ok && o.seat.attached && o.seat.serves(e.platform) {
			return o.seat, o.chatID == e.chatID
		}
	}
	var best *seat
	bestFull := false
	for _, s := range l.attached {
		if !s.serves(e.platform) {
			continue
		}
		full := s.full(e, l.pool.cfg.AckWindow)
		if best == nil || (bestFull && !full) || (full == bestFull && s.inflight < best.inflight) {
			best, bestFull = s, full
		}
	}
	return best, false
}

// seatLocked returns c's seat, creating it.
func (l *Ledger) seatLocked(c Consumer) *seat {
	s := l.seats[c]
	if s == nil {
		s = &seat{c: c}
		if w, ok := c.(ByteWindow); ok {
			s.maxBytes = w.WindowBytes()
		}
		l.seats[c] = s
	}
	return s
}

// Serve records that c takes inbound of platform (AllPlatforms for every
// one) and, unless c went idle or detached, attaches it: it receives
// entries from now on.
func (l *Ledger) Serve(c Consumer, platform string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seatLocked(c)
	if platform == AllPlatforms {
		s.all = true
	} else if !slices.Contains(s.platforms, platform) {
		s.platforms = append(s.platforms, platform)
	}
	if !s.attached && !s.idle && !s.detached {
		s.attached = true
		l.attached = append(l.attached, s)
	}
	l.dispatchLocked()
}

// Idle switches c to buffered-only delivery: it gets no new entries, and
// what it holds unacknowledged goes to another consumer once it detaches.
func (l *Ledger) Idle(c Consumer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seatLocked(c)
	s.idle = true
	l.unattachLocked(s)
	l.dispatchLocked()
	l.noteUnservedLocked(l.pending...)
}

// Detach forgets c, which has closed, and puts its unacknowledged entries
// back in line, in their original order, for the next consumer.
func (l *Ledger) Detach(c Consumer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seats[c]
	if s == nil {
		return
	}
	delete(l.seats, c)
	s.detached = true
	l.unattachLocked(s)
	for e := l.oldest; e != nil; e = e.next {
		if e.seat == s {
			e.seat, e.written = nil, false
			l.pending = append(l.pending, e)
		}
	}
	slices.SortFunc(l.pending, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	s.inflight, s.inflightBytes, s.looseBytes = 0, 0, 0
	l.dispatchLocked()
	l.noteUnservedLocked(l.pending...)
}

func (l *Ledger) unattachLocked(s *seat) {
	if !s.attached {
		return
	}
	s.attached = false
	l.attached = slices.DeleteFunc(l.attached, func(x *seat) bool { return x == s })
}

// Ack removes an acknowledged entry and reports whether it was in the
// ledger. Unknown ids (a duplicate ack, an entry already dropped, another
// tenant's id) are ignored. The store forgets the entry shortly after
// (Pool.Flush).
func (l *Ledger) Ack(id []byte) bool {
	l.mu.Lock()
	e := lookupLocked(l, id)
	if e == nil {
		l.mu.Unlock()
		return false
	}
	l.removeLocked(e)
	l.removeStoredLocked(e)
	l.dispatchLocked()
	l.buffered(len(l.bySeq))
	l.mu.Unlock()
	return true
}

// Written reports that c, a ByteWindow, wrote the frame of the unwindowed
// entry id it holds in flight: its bytes leave c's window, so a gateway
// that never acknowledges such entries (older ones do not acknowledge
// passthrough) is not held back by them. The entry stays in flight until
// acknowledged, and goes out again if c detaches first. Any other id
// (another consumer's, waiting, windowed, reported already) is ignored.
func (l *Ledger) Written(c Consumer, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := lookupLocked(l, id)
	if e == nil || e.windowed || e.written || e.seat == nil || e.seat.c != c {
		return
	}
	e.written = true
	e.seat.looseBytes -= int64(len(e.frame))
	l.dispatchLocked()
}

// OnOwned has f called for every entry of a session dispatched, with the
// consumer it went to (the session's owner from now on) and the entry's
// chat. f is called with the ledger's mutex held: it must not block nor
// call into the Ledger.
func (l *Ledger) OnOwned(f func(c Consumer, sessionKey, chatID string)) {
	l.mu.Lock()
	l.owned = f
	l.mu.Unlock()
}

// Pump dispatches again: a consumer that reported no room calls it once it
// has room.
func (l *Ledger) Pump() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dispatchLocked()
}

// Owner returns the consumer that owns sessionKey (the one its last entry
// went to) and that entry's chat, while that consumer has not detached; an
// idle owner still counts.
func (l *Ledger) Owner(sessionKey string) (c Consumer, chatID string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.owners.Get(sessionKey)
	if !ok || o.seat.detached {
		return nil, "", false
	}
	return o.seat.c, o.chatID, true
}

// Len returns the number of entries the ledger holds, waiting or in flight.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.bySeq)
}

// shed drops the ledger's oldest entries until at least n payload bytes
// went, or it is empty, and reports how many bytes went.
func (l *Ledger) shed(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var freed int64
	for l.oldest != nil && freed < n {
		freed += l.oldest.size
		l.dropLocked(l.oldest, DroppedTotal, true)
	}
	l.dispatchLocked()
	l.buffered(len(l.bySeq))
	return freed
}

// forget drops the entries the store dropped (Trim), for reason.
func (l *Ledger) forget(dropped []store.Dropped, reason string) {
	l.mu.Lock()
	for _, d := range dropped {
		if e := l.bySeq[d.Seq]; e != nil {
			l.dropLocked(e, reason, false)
		}
	}
	l.dispatchLocked()
	l.buffered(len(l.bySeq))
	l.mu.Unlock()
}

// expire drops the entries received before cutoff.
func (l *Ledger) expire(cutoff time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.bySeq)
	for e := l.oldest; e != nil; {
		next := e.next
		if e.received.Before(cutoff) {
			l.dropLocked(e, DroppedExpired, true)
		}
		e = next
	}
	if len(l.bySeq) != n {
		l.dispatchLocked()
		l.buffered(len(l.bySeq))
	}
}

// boundTotal drops the oldest entries of the largest tenants while all
// tenants together exceed MaxTotalBytes.
func (p *Pool) boundTotal() {
	max := p.cfg.MaxTotalBytes
	if max <= 0 {
		return
	}
	for {
		over := p.bytes.Load() - max
		if over <= 0 {
			return
		}
		var largest *Ledger
		var size int64
		for _, l := range p.all() {
			if s := l.size.Load(); s > size {
				largest, size = l, s
			}
		}
		if largest == nil || largest.shed(over) == 0 {
			return
		}
	}
}

// Recover loads every configured tenant's stored records into its ledger,
// in order, applies the bounds, and returns how many entries it loaded.
// Call it before any consumer is served. Records of a tenant without a
// ledger stay in the store (until they age out) and are logged.
func (p *Pool) Recover(ctx context.Context) (int, error) {
	tenants, err := p.cfg.Store.Tenants(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, t := range tenants {
		l := p.known(t)
		if l == nil {
			st, _ := p.cfg.Store.Stats(ctx, t)
			p.cfg.Log.Warn("stored inbound of a tenant no longer configured kept until it ages out",
				"tenant", t, "entries", st.Entries, "bytes", st.Bytes)
			continue
		}
		n, err := l.Tail(ctx)
		total += n
		if err != nil {
			return total, err
		}
	}
	p.boundTotal()
	return total, nil
}

// recoverBatch bounds how many records Recover and Tail read at once; a
// read also stops once it holds Config.MaxBytes (store.Ledger.Read), so a
// buffer of large records is not held at once.
const recoverBatch = 1024

// firstRead is what a Tail's first read asks for: as many records as fit
// Config.MaxBytes at the largest payload (Config.MaxPayloadBytes), with no
// byte bound, since that count is one (a store counts records for less
// than it sums their bytes: on Redis a plain XRANGE against a script).
// Most Tails, an instance driving a tenant reading what the others just
// stored, end there; a read that finds more asks for recoverBatch records
// within Config.MaxBytes. Without MaxPayloadBytes every read is bounded by
// bytes.
func (p *Pool) firstRead() (int, int64) {
	if p.cfg.MaxPayloadBytes <= 0 {
		return recoverBatch, p.cfg.MaxBytes
	}
	return int(max(1, min(p.cfg.MaxBytes/int64(p.cfg.MaxPayloadBytes), recoverBatch))), 0
}

// Tail takes in, in order, the stored records after the last one it took
// in (all of them, on the first call or after Reset), applies the bounds
// and dispatches; it returns how many entries it took in. Among several
// instances it is how entries enter the ledger: the instance driving the
// tenant calls it whenever another instance may have stored one.
func (l *Ledger) Tail(ctx context.Context) (int, error) {
	p := l.pool
	l.tailMu.Lock()
	defer l.tailMu.Unlock()
	defer func() {
		l.mu.Lock()
		if l.held && l.readSince == l.since.Load() {
			l.held = false
			l.dispatchLocked()
		}
		l.mu.Unlock()
	}()
	l.mu.Lock()
	resets := l.resets
	l.mu.Unlock()
	if resets != l.readResets {
		l.readPos, l.readResets = 0, resets
	}
	if since := l.since.Load(); since != l.readSince {
		// A record Tail passed over as a later tenant's may be this one's
		// now: read from the start (what the ledger holds is not taken
		// twice).
		l.readPos, l.readSince = 0, since
	}
	if l.readPos == 0 {
		// Reading from the start: removals queued or being written (entries
		// acknowledged before a Reset) reach the store first, or what they
		// remove would be taken in and delivered again.
		p.Flush(context.WithoutCancel(ctx))
	}
	n := 0
	batch, bound := p.firstRead()
	for {
		recs, err := p.cfg.Store.Read(ctx, l.tenant, l.readPos, batch, bound)
		var bad *store.UnreadableRecord
		if err != nil && !errors.As(err, &bad) {
			return n, err
		}
		if len(recs) == 0 && bad == nil {
			break
		}
		entries, size := make([]*entry, len(recs)), int64(0)
		for i := range recs {
			entries[i] = l.newEntry(recs[i].Seq, &recs[i])
			size += entries[i].size
		}
		l.mu.Lock()
		if l.resets != resets || l.forgotten {
			// Reset since this Tail began, or forgotten: what it read is
			// not this ledger's to take in (its instance may have stopped
			// driving).
			l.mu.Unlock()
			return n, nil
		}
		for _, e := range entries {
			switch {
			case l.bySeq[e.seq] != nil:
			case l.earlierLocked(e):
				l.queueRemovalLocked(e.seq)
			case l.laterLocked(e):
				// Stored for a tenant of the id created since, by an instance
				// that applied it before this one: not this tenant's, and not
				// this ledger's to remove.
			case p.cfg.MaxPayloadBytes > 0 && e.size > int64(p.cfg.MaxPayloadBytes):
				p.cfg.Metrics.Inbound(e.platform, l.tenant, DroppedOversized)
				p.cfg.Log.Warn("buffered inbound dropped", "reason", DroppedOversized, "tenant", l.tenant,
					"platform", e.platform, "buffer_id", l.pool.bufferID(e.seq), "bytes", e.size)
				l.queueRemovalLocked(e.seq)
			default:
				l.insertLocked(e)
				n++
			}
		}
		if len(recs) > 0 {
			l.tailed = max(l.tailed, recs[len(recs)-1].Seq)
		}
		if bad != nil {
			l.dropUnreadableLocked(bad)
		}
		l.boundLocked()
		l.dispatchLocked()
		l.noteUnservedLocked(entries...) // it passes over those not inserted
		l.buffered(len(l.bySeq))
		l.mu.Unlock()
		if len(recs) > 0 {
			l.readPos = recs[len(recs)-1].Seq
		}
		if bad != nil {
			l.readPos = max(l.readPos, bad.Seq)
			continue
		}
		if len(recs) < batch && (bound <= 0 || size < bound) {
			break // the end of the log, not a read's bound
		}
		batch, bound = recoverBatch, p.cfg.MaxBytes
	}
	if n > 0 {
		p.boundTotal()
	}
	return n, nil
}

// dropUnreadableLocked logs and counts (DroppedMalformed) the stored
// record that does not decode, which no instance can deliver, and queues
// its removal from the store, under mu. An entry the connector did not
// write the store removed already.
func (l *Ledger) dropUnreadableLocked(bad *store.UnreadableRecord) {
	cfg := &l.pool.cfg
	cfg.Metrics.Inbound("", l.tenant, DroppedMalformed)
	if bad.ForeignID != "" {
		cfg.Log.Warn("buffered inbound dropped", "reason", DroppedMalformed, "tenant", l.tenant, "stream_id", bad.ForeignID)
		return
	}
	l.queueRemovalLocked(bad.Seq)
	cfg.Log.Warn("buffered inbound dropped", "reason", DroppedMalformed,
		"tenant", l.tenant, "buffer_id", l.pool.bufferID(bad.Seq))
}

// SetSince has the ledger's tenant begin at t (when the tenant was
// created; zero for always), its generation: from then on the records it
// stores carry it (store.Record.Generation), and Tail and Recover take in
// only this tenant's records. A record of another generation is never
// taken in: one of an earlier generation (deleted since), or, carrying
// none (stored by an older version, or by a declared tenant), received
// before t, is removed from the store as it is read; one of a later
// generation (a tenant created again under the id, which another instance
// applied first and this one not yet) is passed over and left in the
// store. A generation is compared with t as stored, to the microsecond,
// so no clock decides which tenant a record is for; only its ordering
// with t decides who removes it. A zero t takes in every record. It
// drops nothing the ledger holds: Begin does.
func (l *Ledger) SetSince(t time.Time) {
	var us int64
	if !t.IsZero() {
		us = t.UnixMicro()
	}
	l.since.Store(us)
}

// Other reports whether created, the creation a platform routed a
// delivery under, is another tenant of the id than the ledger's (SetSince):
// an earlier one, deleted since, or a later one not applied yet. Zero, or
// a ledger of no known creation, is the ledger's.
func (l *Ledger) Other(created time.Time) bool {
	since := l.since.Load()
	return since != 0 && !created.IsZero() && created.UnixMicro() != since
}

// earlierLocked reports whether e was an earlier tenant's of the id
// (SetSince), under mu: of an earlier generation, or, of none known,
// received before the tenant began.
func (l *Ledger) earlierLocked(e *entry) bool {
	since := l.since.Load()
	if since == 0 {
		return false
	}
	if e.gen != 0 {
		return e.gen < since
	}
	return e.received.UnixMicro() < since
}

// laterLocked reports whether e was stored for a later tenant of the id
// than the ledger's (SetSince), under mu.
func (l *Ledger) laterLocked(e *entry) bool {
	since := l.since.Load()
	return since != 0 && e.gen > since
}

// Hold has the ledger offer nothing until a Tail of the ledger's
// generation (SetSince) ends, done or not (bound its context): the Tail
// after a Begin then offers the stored records it takes in ahead of what
// Append took in meanwhile, in their sessions' order, and reads none that
// was acknowledged meanwhile (its removal not yet written) to offer it
// again.
func (l *Ledger) Hold() {
	l.mu.Lock()
	l.held = true
	l.mu.Unlock()
}

// Begin is SetSince for a ledger in use, whose tenant was deleted and
// created again under its id: it also drops, from memory and the store,
// the entries of another generation than t (or, carrying none, received
// before t): every one the earlier tenant stored, even where t is before
// its generation (created again on an instance whose clock is behind),
// and forgets every session owner (the earlier tenant's connections').
// It reports how many entries it dropped.
// Dropping is idempotent: any instance may do it, and those that read the
// records later (Tail) drop them too.
func (l *Ledger) Begin(t time.Time) int {
	l.SetSince(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for e := l.oldest; e != nil; {
		next := e.next
		if l.earlierLocked(e) || l.laterLocked(e) {
			l.removeLocked(e)
			l.removeStoredLocked(e)
			n++
		}
		e = next
	}
	l.owners.Purge()
	l.buffered(len(l.bySeq))
	return n
}

// Reset empties the ledger: every entry, consumer and session owner is
// forgotten (nothing is removed from the store) and the next Tail reads
// from the start; a Tail under way takes nothing more in, and Reset does
// not wait for its store read. An instance that stops driving a tenant
// resets its ledger; the removals already queued are still written.
func (l *Ledger) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.oldest != nil {
		l.removeLocked(l.oldest)
	}
	clear(l.seats)
	l.attached = l.attached[:0]
	l.pending = l.pending[:0]
	l.owners.Purge()
	l.resets++
	l.buffered(0)
}

// Sweep drops, from the store and memory, every entry older than MaxAge:
// what the store trims, and what a ledger holds that another instance
// sharing the store trimmed first. A tenant the store fails to trim does
// not keep it from the others; the first failure is returned. The pool
// runs it every SweepEvery; tests call it directly.
func (p *Pool) Sweep(ctx context.Context) (err error) {
	if p.cfg.MaxAge <= 0 {
		return nil
	}
	tenants, err := p.cfg.Store.Tenants(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cutoff := p.cfg.Clock.Now().Add(-p.cfg.MaxAge)
		for _, l := range p.all() {
			l.expire(cutoff)
		}
	}()
	for _, t := range tenants {
		dropped, terr := p.cfg.Store.Trim(ctx, t, store.Bounds{MaxAge: p.cfg.MaxAge})
		err = cmp.Or(err, terr)
		if len(dropped) == 0 {
			continue
		}
		if l := p.known(t); l != nil {
			l.forget(dropped, DroppedExpired)
			continue
		}
		for _, d := range dropped {
			p.cfg.Metrics.Inbound(d.Platform, t, DroppedExpired)
		}
		p.cfg.Log.Warn("stored inbound of a tenant no longer configured dropped: older than the age bound",
			"tenant", t, "entries", len(dropped), "max_age", p.cfg.MaxAge)
	}
	// A tenant no longer configured whose records are all gone leaves the
	// store's index of tenants (store.Ledger.Forget), once two sweeps in a
	// row found it without a ledger here: one SweepEvery is time enough for
	// this instance to apply a tenant another one just created.
	p.unknownMu.Lock()
	defer p.unknownMu.Unlock()
	unknown := make(map[string]bool)
	_, ferr := p.cfg.Store.Forget(ctx, func(t string) bool {
		if p.known(t) != nil {
			return true
		}
		unknown[t] = true
		return !p.unknown[t]
	})
	p.unknown = unknown
	return cmp.Or(err, ferr)
}

// markDirty queues l for the next removal flush and wakes the goroutine.
func (p *Pool) markDirty(l *Ledger) {
	p.rmMu.Lock()
	p.dirty = append(p.dirty, l)
	p.rmMu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Flush writes every queued removal to the store, every tenant's in one
// store.Ledger.AckAll: one commit (embedded) or one round trip (redis).
// The pool's goroutine flushes on its own as soon as removals are queued;
// Flush is for shutdown and tests. A failed removal is logged and counted,
// and not retried: the entry is redelivered after a restart.
func (p *Pool) Flush(ctx context.Context) {
	p.flushMu.Lock()
	defer p.flushMu.Unlock()
	p.rmMu.Lock()
	dirty := p.dirty
	p.dirty = p.spare[:0]
	p.rmMu.Unlock()
	// The kept map serves small flushes only: grown once, it would keep the
	// size of the largest flush, which every range over it (the store's)
	// and every clear pays for. A ledger is in dirty at most once.
	acks := p.acks
	if len(dirty) > smallFlush {
		acks = make(map[string][]uint64, len(dirty))
	}
	entries := 0
	for _, l := range dirty {
		l.mu.Lock()
		seqs := l.removals
		l.removals, l.drained = l.drained[:0], nil
		l.dirty = false
		l.mu.Unlock()
		if len(seqs) > 0 {
			entries += len(seqs)
			if prev := acks[l.tenant]; prev != nil {
				// A ledger the pool forgot and the tenant's next one: the
				// removals of both, in a slice of neither.
				seqs = append(slices.Clip(prev), seqs...)
			}
			acks[l.tenant] = seqs
		}
	}
	if len(acks) > 0 {
		p.remove(ctx, acks, entries)
	}
	// drained is flushMu's, not l.mu's: giving the slice back takes no
	// second lock of each ledger.
	for i, l := range dirty {
		dirty[i] = nil
		if seqs := acks[l.tenant]; seqs != nil {
			delete(acks, l.tenant) // the drained slice of one ledger only
			l.drained = seqs
		}
	}
	clear(p.acks)
	p.rmMu.Lock()
	p.spare = dirty
	p.rmMu.Unlock()
}

// smallFlush is the most tenants whose removals the pool's kept map takes:
// as many as a Go map holds in one group of slots, so it never grows.
const smallFlush = 8

// remove deletes acks (entries in all) from the tenants' stored ledgers;
// Removed counts the records the store removed, not the seqs queued: one
// gone already counts none.
func (p *Pool) remove(ctx context.Context, acks map[string][]uint64, entries int) {
	n, err := p.cfg.Store.AckAll(ctx, acks)
	if err != nil {
		p.removeErrors.Add(uint64(entries))
		p.cfg.Log.Warn("acknowledged inbound not removed from the store: it is redelivered after a restart",
			"tenants", len(acks), "entries", entries, "err", err)
		return
	}
	p.removed.Add(uint64(n))
}

// Len returns the number of entries every ledger holds.
func (p *Pool) Len() int {
	n := 0
	for _, l := range p.all() {
		n += l.Len()
	}
	return n
}

// Stats counts the pool's store removals.
type Stats struct {
	// Removed counts entries (acknowledged or dropped) removed from the
	// store.
	Removed uint64
	// RemoveErrors counts entries whose removal failed.
	RemoveErrors uint64
	// Bytes is the payload bytes every ledger holds.
	Bytes int64
}

// TenantBytes returns the payload bytes each tenant's ledger holds.
func (p *Pool) TenantBytes() map[string]int64 {
	ledgers := p.all()
	out := make(map[string]int64, len(ledgers))
	for _, l := range ledgers {
		out[l.tenant] = l.size.Load()
	}
	return out
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	return Stats{Removed: p.removed.Load(), RemoveErrors: p.removeErrors.Load(), Bytes: p.bytes.Load()}
}

// sweepTimeout bounds one age sweep.
const sweepTimeout = 30 * time.Second

// run writes the queued removals as they come, while a goroutine of its
// own (sweeping, started with run by NewPool) sweeps every SweepEvery: a
// slow sweep (a call per stored tenant) never holds them back.
func (p *Pool) run() {
	defer close(p.stopped)
	defer p.sweeping.Wait()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
			// No deadline: each store bounds its own calls, and a context
			// with a timer per flush would cost the hot path.
			p.Flush(context.Background())
		}
	}
}

// sweep is one Sweep of run's, within sweepTimeout.
func (p *Pool) sweep(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	if err := p.Sweep(ctx); err != nil && p.ctx.Err() == nil {
		p.cfg.Log.Warn("inbound age sweep failed", "err", err)
	}
}

// Close stops the pool's goroutines, ending a sweep under way, and writes
// the removals still queued. Ledgers keep working in memory, but their
// removals are written only by a Flush.
func (p *Pool) Close(ctx context.Context) {
	p.closeOnce.Do(func() {
		p.stop()
		<-p.stopped
	})
	p.Flush(ctx)
}
