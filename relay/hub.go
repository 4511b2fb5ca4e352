package relay

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// hub is one tenant's share of the relay: its attached connections, its
// ledger of inbound entries not yet acknowledged, and which connection owns
// which session. Every field is guarded by mu; methods ending in Locked
// expect it held. Nothing here blocks: sockets are only ever enqueued to.
type hub struct {
	srv *Server
	id  string

	mu      sync.Mutex
	conns   []*conn           // attached: hello'd, open, not idle
	pending []*entry          // waiting for a connection, in seq order
	byID    map[string]*entry // every entry in the ledger, pending or in flight
	bytes   int               // encoded size of the ledger
	seq     uint64
	owners  *simplelru.LRU[string, owner]  // session key -> owning connection
	chats   *simplelru.LRU[string, string] // chat id -> platform, from deliveries
}

// entry is one inbound or passthrough delivery in a tenant's ledger.
type entry struct {
	id         string // bufferId, stable across redeliveries
	seq        uint64
	platform   string
	sessionKey string
	chatID     string
	frame      []byte // the complete frame, bufferId included; immutable
	received   time.Time
	conn       *conn // in flight on this connection; nil while pending
	sent       bool  // delivered at least once
	windowed   bool  // counts against the connection's AckWindow
}

// owner is the connection a session's inbound went to last.
type owner struct {
	conn   *conn
	chatID string
}

func newHub(s *Server, id string) *hub {
	owners, _ := simplelru.NewLRU[string, owner](s.cfg.SessionOwners, nil)
	chats, _ := simplelru.NewLRU[string, string](s.cfg.SessionOwners, nil)
	return &hub{srv: s, id: id, byID: make(map[string]*entry), owners: owners, chats: chats}
}

// enqueue takes a platform delivery into the ledger and dispatches it.
func (h *hub) enqueue(d platform.Delivery) {
	m := h.srv.cfg.Metrics
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	id := h.srv.bufferPrefix + strconv.FormatUint(h.seq, 10)
	var frame []byte
	windowed := true
	switch {
	case d.Kind == platform.KindInbound && d.Event != nil:
		var truncated bool
		frame, truncated = encodeInbound(id, d.Event)
		if truncated {
			m.Inbound(d.Platform, h.id, "truncated")
			h.srv.log.Warn("inbound truncated to fit the gateway's frame limit",
				"tenant", h.id, "platform", d.Platform, "buffer_id", id)
		}
	case d.Kind == platform.KindPassthrough && d.Forward != nil:
		frame = encodePassthrough(id, d.Forward)
		// Older gateways never acknowledge passthrough frames; they must not
		// stall the connection's inbound window.
		windowed = false
	default:
		h.srv.log.Warn("delivery dropped: no payload", "tenant", h.id, "platform", d.Platform)
		return
	}
	if len(frame) > contract.MaxFrameBytes {
		m.Inbound(d.Platform, h.id, "dropped_oversized")
		h.srv.log.Warn("delivery dropped: larger than the gateway's frame limit",
			"tenant", h.id, "platform", d.Platform, "bytes", len(frame))
		return
	}
	h.makeRoomLocked(len(frame))
	e := &entry{
		id: id, seq: h.seq, platform: d.Platform, sessionKey: d.SessionKey, chatID: d.ChatID,
		frame: frame, received: d.Received, windowed: windowed,
	}
	if e.received.IsZero() {
		e.received = h.srv.cfg.Now()
	}
	h.byID[id] = e
	h.bytes += len(frame)
	h.pending = append(h.pending, e)
	if d.ChatID != "" {
		h.chats.Add(d.ChatID, d.Platform)
	}
	if d.SessionKey != "" {
		h.srv.noteSession(d.SessionKey, h.id)
	}
	m.Inbound(d.Platform, h.id, "queued")
	h.dispatchLocked()
	m.Buffered(h.id, len(h.byID))
}

// makeRoomLocked drops the oldest waiting entries until an entry of size n
// fits the ledger's bounds. Entries in flight are never dropped: the window
// bounds them.
func (h *hub) makeRoomLocked(n int) {
	cfg := &h.srv.cfg
	for len(h.pending) > 0 && (len(h.byID) >= cfg.BufferEntries || h.bytes+n > cfg.BufferBytes) {
		old := h.pending[0]
		h.pending[0] = nil
		h.pending = h.pending[1:]
		delete(h.byID, old.id)
		h.bytes -= len(old.frame)
		cfg.Metrics.Inbound(old.platform, h.id, "dropped_overflow")
		h.srv.log.Warn("buffered inbound dropped: tenant buffer full",
			"tenant", h.id, "platform", old.platform, "buffer_id", old.id,
			"buffer_entries", cfg.BufferEntries, "buffer_bytes", cfg.BufferBytes)
	}
}

// dispatchLocked sends waiting entries, in order, to eligible connections
// with room. A session's entries all go to its owner, so when the first of
// them has to wait, the later ones wait too and order is kept.
func (h *hub) dispatchLocked() {
	if len(h.conns) == 0 || len(h.pending) == 0 {
		return
	}
	var blocked map[string]bool
	keep := h.pending[:0]
	for _, e := range h.pending {
		if e.sessionKey != "" && blocked[e.sessionKey] {
			keep = append(keep, e)
			continue
		}
		c := h.pickLocked(e)
		if c == nil || !c.hasRoom(e.windowed) || !c.enqueue(e.frame) {
			if e.sessionKey != "" {
				if blocked == nil {
					blocked = make(map[string]bool)
				}
				blocked[e.sessionKey] = true
			}
			keep = append(keep, e)
			continue
		}
		e.conn = c
		if e.windowed {
			c.inflight++
		}
		if !e.sent {
			e.sent = true
			h.srv.cfg.Metrics.Delivered(e.platform, h.srv.cfg.Now().Sub(e.received))
		}
		if e.sessionKey != "" {
			h.owners.Add(e.sessionKey, owner{conn: c, chatID: e.chatID})
		}
	}
	clear(h.pending[len(keep):])
	h.pending = keep
}

// pickLocked returns the connection for e: the session's owner while it is
// attached and serves e's platform, else the least loaded attached
// connection that does.
func (h *hub) pickLocked(e *entry) *conn {
	if e.sessionKey != "" {
		if o, ok := h.owners.Get(e.sessionKey); ok && o.conn.attached && o.conn.serves(e.platform) {
			return o.conn
		}
	}
	var best *conn
	for _, c := range h.conns {
		if c.serves(e.platform) && (best == nil || c.inflight < best.inflight) {
			best = c
		}
	}
	return best
}

// hello records that c fronts platform name and attaches it for inbound.
func (h *hub) hello(c *conn, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if name == contract.PlatformRelay {
		c.fronts.all = true
	} else {
		c.fronts.add(name)
	}
	if !c.attached && !c.idle && !c.detached {
		c.attached = true
		h.conns = append(h.conns, c)
	}
	h.dispatchLocked()
}

// goIdle switches c to buffered-only delivery: it gets no new inbound, and
// what it holds unacknowledged is redelivered elsewhere if it closes.
func (h *hub) goIdle(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.idle = true
	h.unattachLocked(c)
	h.dispatchLocked()
}

// detach removes a closed connection and puts its unacknowledged entries
// back in line, in their original order, for the next connection.
func (h *hub) detach(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c.detached = true
	h.unattachLocked(c)
	requeued := false
	for _, e := range h.byID {
		if e.conn == c {
			e.conn = nil
			h.pending = append(h.pending, e)
			requeued = true
		}
	}
	if requeued {
		slices.SortFunc(h.pending, func(a, b *entry) int { return cmpSeq(a.seq, b.seq) })
	}
	c.inflight = 0
	h.dispatchLocked()
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

func (h *hub) unattachLocked(c *conn) {
	if !c.attached {
		return
	}
	c.attached = false
	if i := slices.Index(h.conns, c); i >= 0 {
		h.conns = slices.Delete(h.conns, i, i+1)
	}
}

// ack removes an acknowledged entry. Unknown ids (a duplicate ack, an entry
// already dropped, another tenant's id) are ignored.
func (h *hub) ack(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.byID[id]
	if e == nil {
		return false
	}
	delete(h.byID, id)
	h.bytes -= len(e.frame)
	if e.conn != nil {
		if e.windowed {
			e.conn.inflight--
		}
	} else if i := slices.Index(h.pending, e); i >= 0 {
		h.pending = slices.Delete(h.pending, i, i+1)
	}
	h.dispatchLocked()
	h.srv.cfg.Metrics.Buffered(h.id, len(h.byID))
	return true
}

// pump retries dispatch after a connection's send queue drained.
func (h *hub) pump() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dispatchLocked()
}

// interrupt delivers interrupt_inbound to the connection owning sessionKey.
// With no live owner there is no turn to stop, and it is dropped. gatewayID
// is the sender, empty for a platform-side /stop.
func (h *hub) interrupt(sessionKey, chatID, gatewayID string) {
	h.mu.Lock()
	o, ok := h.owners.Get(sessionKey)
	live := ok && !o.conn.detached
	h.mu.Unlock()
	if !live {
		// A gateway-sent key is bounded, but well above real keys' length.
		h.srv.log.Info("interrupt dropped: no live connection owns the session", "tenant", h.id, "session_key", textsplit.Truncate(sessionKey, 256), "gateway_id", gatewayID)
		return
	}
	if chatID == "" {
		chatID = o.chatID
	}
	o.conn.enqueue(contract.AppendInterruptInbound(nil, sessionKey, chatID))
}

// chatPlatform returns the platform of a chat this tenant received inbound from.
func (h *hub) chatPlatform(chatID string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.chats.Get(chatID)
}
