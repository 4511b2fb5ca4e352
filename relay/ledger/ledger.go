// Package ledger is one tenant's inbound ledger: the deliveries its gateways
// have not acknowledged yet, which connection each is in flight on, and
// which connection owns each session. It knows nothing of WebSockets: a
// gateway connection appears as a Consumer that takes complete frames
// without blocking.
//
// The rules it keeps:
//
//   - Every delivery gets a bufferId (Config.IDPrefix and a per-tenant
//     sequence number) that stays the same across redeliveries, and stays
//     in the ledger until it is acknowledged (Ack) or pushed out by a bound.
//   - Waiting entries are dispatched in sequence order. An entry goes to its
//     session's owner while the owner is attached and serves the entry's
//     platform, otherwise to the attached consumer serving the platform with
//     the fewest entries in flight, which becomes the session's owner. When
//     an entry has to wait, every later entry of its session waits too, so a
//     session's entries reach gateways in order.
//   - A consumer holds at most Config.AckWindow windowed entries in flight
//     (sent, not acknowledged), and takes nothing while it reports no room.
//   - An idle consumer (Idle) gets nothing new but keeps what it holds; a
//     detached one (Detach) gives its unacknowledged entries back, and they
//     are dispatched again in their original order.
//   - The ledger holds at most Config.MaxEntries entries and Config.MaxBytes
//     frame bytes; to take a new entry the oldest waiting ones are dropped,
//     logged and counted. Entries in flight are bounded by the ack window.
//
// # Locking
//
// A Ledger's state is guarded by its one mutex, which is never held across
// I/O. The ledger calls Consumer.HasRoom and Consumer.Offer with it held, so
// the lock order is: Ledger mutex, then the consumer's own locks (the
// relay's send-queue lock). A consumer must therefore never call into the
// Ledger from HasRoom or Offer, nor while it holds a lock it takes in them.
package ledger

import (
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Consumer is a gateway connection as the ledger sees it. The ledger calls
// both methods with its mutex held: they must not block nor call back into
// the Ledger.
type Consumer interface {
	// HasRoom reports whether the consumer can take another frame now. A
	// consumer that says no calls Ledger.Pump once it has room again.
	HasRoom() bool
	// Offer hands the consumer one complete frame, without blocking. False
	// means the consumer did not take it (it is closing) and will detach.
	Offer(frame []byte) bool
}

// AllPlatforms, passed to Serve, attaches a consumer for every platform's
// inbound (a gateway's hello for platform "relay").
const AllPlatforms = "*"

// Metrics receives the ledger's measurements; relay.Metrics satisfies it.
type Metrics interface {
	// Inbound counts a delivery by outcome; the ledger reports
	// "dropped_overflow".
	Inbound(platform, tenant, outcome string)
	// Delivered records the time from platform receipt to a first delivery.
	Delivered(platform string, d time.Duration)
	// Buffered reports the number of entries the ledger holds.
	Buffered(tenant string, n int)
}

// Config configures a Ledger. Every field must be set.
type Config struct {
	// Tenant names the ledger's tenant in logs and metrics.
	Tenant string
	// IDPrefix starts every bufferId; the sequence number follows.
	IDPrefix string
	// Frame builds the complete frame sent for a delivery of kind under
	// bufferID, around its encoded payload.
	Frame func(kind uint8, bufferID string, payload []byte) []byte
	// AckWindow bounds windowed entries in flight per consumer.
	AckWindow int
	// MaxEntries and MaxBytes bound the ledger.
	MaxEntries int
	MaxBytes   int
	// SessionOwners bounds the remembered session owners (least recently
	// used are forgotten).
	SessionOwners int
	Now           func() time.Time
	Log           *slog.Logger
	Metrics       Metrics
}

// Delivery is one platform delivery to take into the ledger.
type Delivery struct {
	// Kind is the caller's kind of delivery, passed back to Config.Frame.
	Kind     uint8
	Platform string
	// SessionKey routes the delivery to its session's owner; empty for
	// none.
	SessionKey string
	// ChatID is the chat the delivery came from.
	ChatID string
	// Payload is the encoded delivery, framed by Config.Frame. The ledger
	// does not keep it.
	Payload []byte
	// Windowed deliveries count against a consumer's ack window.
	Windowed bool
	// Received is when the platform event reached the connector; zero
	// means now.
	Received time.Time
}

// Ledger is one tenant's ledger. Its methods are safe for concurrent use.
type Ledger struct {
	cfg Config

	mu       sync.Mutex
	seats    map[Consumer]*seat
	attached []*seat           // receive new entries: served a platform, not idle, not detached
	pending  []*entry          // waiting for a consumer, in seq order
	byID     map[string]*entry // every entry, waiting or in flight
	bytes    int               // frame bytes of every entry
	seq      uint64
	owners   *simplelru.LRU[string, owner] // session key -> owning consumer
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
}

func (s *seat) serves(platform string) bool { return s.all || slices.Contains(s.platforms, platform) }

// entry is one delivery in the ledger.
type entry struct {
	id         string
	seq        uint64
	platform   string
	sessionKey string
	chatID     string
	frame      []byte // immutable
	received   time.Time
	seat       *seat // in flight on this consumer; nil while waiting
	sent       bool  // delivered at least once
	windowed   bool
}

// owner is the consumer a session's entries went to last.
type owner struct {
	seat   *seat
	chatID string
}

// New returns an empty ledger.
func New(cfg Config) *Ledger {
	owners, _ := simplelru.NewLRU[string, owner](cfg.SessionOwners, nil)
	return &Ledger{
		cfg:    cfg,
		seats:  make(map[Consumer]*seat),
		byID:   make(map[string]*entry),
		owners: owners,
	}
}

// Append takes d into the ledger, dispatches it if a consumer can take it,
// and returns its bufferId.
func (l *Ledger) Append(d Delivery) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	id := l.cfg.IDPrefix + strconv.FormatUint(l.seq, 10)
	frame := l.cfg.Frame(d.Kind, id, d.Payload)
	l.makeRoomLocked(len(frame))
	e := &entry{
		id: id, seq: l.seq, platform: d.Platform, sessionKey: d.SessionKey, chatID: d.ChatID,
		frame: frame, received: d.Received, windowed: d.Windowed,
	}
	if e.received.IsZero() {
		e.received = l.cfg.Now()
	}
	l.byID[id] = e
	l.bytes += len(frame)
	l.pending = append(l.pending, e)
	l.dispatchLocked()
	l.cfg.Metrics.Buffered(l.cfg.Tenant, len(l.byID))
	return id
}

// makeRoomLocked drops the oldest waiting entries until an entry of n frame
// bytes fits the bounds. Entries in flight are never dropped: the ack window
// bounds them.
func (l *Ledger) makeRoomLocked(n int) {
	for len(l.pending) > 0 && (len(l.byID) >= l.cfg.MaxEntries || l.bytes+n > l.cfg.MaxBytes) {
		old := l.pending[0]
		l.pending[0] = nil
		l.pending = l.pending[1:]
		delete(l.byID, old.id)
		l.bytes -= len(old.frame)
		l.cfg.Metrics.Inbound(old.platform, l.cfg.Tenant, "dropped_overflow")
		l.cfg.Log.Warn("buffered inbound dropped: tenant buffer full",
			"tenant", l.cfg.Tenant, "platform", old.platform, "buffer_id", old.id,
			"buffer_entries", l.cfg.MaxEntries, "buffer_bytes", l.cfg.MaxBytes)
	}
}

// dispatchLocked offers waiting entries, in order, to eligible consumers
// with room. A session's entries all go to its owner, so when the first of
// them has to wait, the later ones wait too and order is kept.
func (l *Ledger) dispatchLocked() {
	if len(l.attached) == 0 || len(l.pending) == 0 {
		return
	}
	var blocked map[string]bool
	keep := l.pending[:0]
	for _, e := range l.pending {
		if e.sessionKey != "" && blocked[e.sessionKey] {
			keep = append(keep, e)
			continue
		}
		s := l.pickLocked(e)
		if s == nil || (e.windowed && s.inflight >= l.cfg.AckWindow) || !s.c.HasRoom() || !s.c.Offer(e.frame) {
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
		}
		if !e.sent {
			e.sent = true
			l.cfg.Metrics.Delivered(e.platform, l.cfg.Now().Sub(e.received))
		}
		if e.sessionKey != "" {
			l.owners.Add(e.sessionKey, owner{seat: s, chatID: e.chatID})
		}
	}
	clear(l.pending[len(keep):])
	l.pending = keep
}

// pickLocked returns the consumer for e: the session's owner while it is
// attached and serves e's platform, else the least loaded attached consumer
// that does.
func (l *Ledger) pickLocked(e *entry) *seat {
	if e.sessionKey != "" {
		if o, ok := l.owners.Get(e.sessionKey); ok && o.seat.attached && o.seat.serves(e.platform) {
			return o.seat
		}
	}
	var best *seat
	for _, s := range l.attached {
		if s.serves(e.platform) && (best == nil || s.inflight < best.inflight) {
			best = s
		}
	}
	return best
}

// seatLocked returns c's seat, creating it.
func (l *Ledger) seatLocked(c Consumer) *seat {
	s := l.seats[c]
	if s == nil {
		s = &seat{c: c}
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
	requeued := false
	for _, e := range l.byID {
		if e.seat == s {
			e.seat = nil
			l.pending = append(l.pending, e)
			requeued = true
		}
	}
	if requeued {
		slices.SortFunc(l.pending, func(a, b *entry) int { return cmpSeq(a.seq, b.seq) })
	}
	s.inflight = 0
	l.dispatchLocked()
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (l *Ledger) unattachLocked(s *seat) {
	if !s.attached {
		return
	}
	s.attached = false
	if i := slices.Index(l.attached, s); i >= 0 {
		l.attached = slices.Delete(l.attached, i, i+1)
	}
}

// Ack removes an acknowledged entry and reports whether it was in the
// ledger. Unknown ids (a duplicate ack, an entry already dropped, another
// tenant's id) are ignored.
func (l *Ledger) Ack(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.byID[id]
	if e == nil {
		return false
	}
	delete(l.byID, id)
	l.bytes -= len(e.frame)
	if e.seat != nil {
		if e.windowed {
			e.seat.inflight--
		}
	} else if i := slices.Index(l.pending, e); i >= 0 {
		l.pending = slices.Delete(l.pending, i, i+1)
	}
	l.dispatchLocked()
	l.cfg.Metrics.Buffered(l.cfg.Tenant, len(l.byID))
	return true
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
