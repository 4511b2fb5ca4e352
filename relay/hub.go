package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/relay/ledger"
)

// hub is one tenant's share of the relay: its ledger (entries, connections
// attached for inbound, session owners), the platform of each chat it
// received inbound from, this instance's connections of the tenant, and
// the role through which the hub reaches the ledger.
type hub struct {
	srv    *Server
	id     string
	ledger *ledger.Ledger
	// created is the tenant's Tenant.Created, guarded by regMu: the
	// generation of the id the hub serves (SetTenants).
	created time.Time
	// storedAt is the last non-zero created SetTenants gave, guarded by
	// regMu: the stored tenant's creation, kept while the YAML declares
	// the tenant (created zero), so its return tells the same tenant
	// from one created again meanwhile.
	storedAt time.Time

	// queued counts a delivery of each configured platform stored for
	// the tenant (TenantMetrics.QueuedOf); nil when the Metrics is not a
	// TenantMetrics. Read-only after newHub.
	queued map[string]func()

	// chats maps chat id -> platform, from deliveries; profiles maps
	// platform+"\x00"+chat id -> the Hermes profile the tenant's gateway
	// last named in an outbound action's metadata for that chat. Both are
	// guarded by chatsMu, which is never held together with another lock.
	chatsMu  sync.Mutex
	chats    *simplelru.LRU[string, string]
	profiles *simplelru.LRU[string, string]
	// profiled is set once a profile was noted: until then, as for a
	// single-profile gateway's tenant, stampProfile takes no lock.
	profiled atomic.Bool
	// drops counts the tenant's state dropped (drop), added to under
	// chatsMu: an outbound op begun before one notes no profile.
	drops atomic.Uint64

	// role is how this instance reaches the tenant's ledger: the one
	// choice serve, idle, detach, ack, interrupt and enqueue make. Alone it
	// is local for good; among several instances (fleet.go) it is driver
	// while this instance holds the tenant's lease, else remote.
	role atomic.Pointer[roleRef]

	// mu guards seats and orders role changes with them; it is taken before
	// the ledger's mutex.
	mu    sync.Mutex
	seats map[*conn]*seat

	// fleet is the tenant's state among several instances; nil alone.
	fleet *tenantFleet
}

// seat is what one of this instance's connections asked of its tenant:
// the platforms it serves and whether it went idle, so that a new role
// can attach it again; and, while another instance drives the tenant, its
// link to that instance.
type seat struct {
	platforms []string
	idle      bool
	link      *edgeLink // fleet.go; nil alone or while this instance drives
	gen       uint64    // fleet.go: the generation of the last link, never repeated
}

// role is how a hub reaches its tenant's ledger. serve, idle and detach run
// under hub.mu.
type role interface {
	// store takes a delivery in: stored durably before it returns.
	store(ctx context.Context, d ledger.Delivery) error
	// storeAll is store for several deliveries: one store write for all.
	storeAll(ctx context.Context, ds []ledger.Delivery) error
	serve(c *conn, s *seat, platform string)
	idle(c *conn, s *seat)
	detach(c *conn, s *seat)
	ack(c *conn, id []byte) bool
	// interrupt delivers in to its session's owner, or sends it on to
	// one, and reports whether it did.
	interrupt(ctx context.Context, in interrupt) bool
}

// roleRef boxes a role for hub.role.
type roleRef struct{ role }

// local is the role of a hub whose tenant no other instance serves: the
// ledger is here, and every call goes straight to it.
type local struct{ h *hub }

func (r local) store(ctx context.Context, d ledger.Delivery) error {
	_, err := r.h.ledger.Append(ctx, d)
	return err
}

func (r local) storeAll(ctx context.Context, ds []ledger.Delivery) error {
	_, err := r.h.ledger.AppendAll(ctx, ds)
	return err
}

func (r local) serve(c *conn, _ *seat, platform string) { r.h.ledger.Serve(c, platform) }
func (r local) idle(c *conn, _ *seat)                   { r.h.ledger.Idle(c) }
func (r local) detach(c *conn, _ *seat)                 { r.h.ledger.Detach(c) }
func (r local) ack(_ *conn, id []byte) bool             { return r.h.ledger.Ack(id) }

// interrupt delivers in to the owner this instance's ledger knows.
func (r local) interrupt(_ context.Context, in interrupt) bool {
	c, chatID, ok := r.h.ledger.Owner(in.sessionKey)
	if !ok {
		return false
	}
	c.(pusher).push(in.frame(chatID))
	return true
}

// interrupt is one interrupt on its way to a session's owner.
type interrupt struct {
	sessionKey, chatID string
	gatewayID          string // the sender; empty for a platform-side /stop
	// ownerRead is set once the owner stored for the session was looked
	// up (fleet.go), so no instance looks it up again for this interrupt.
	ownerRead bool
	// forwarded is set on the instance another one sent the interrupt to:
	// it is not sent on again.
	forwarded bool
}

// frame is the interrupt_inbound frame of in, in chatID when in names none.
func (in interrupt) frame(chatID string) []byte {
	if in.chatID != "" {
		chatID = in.chatID
	}
	return contract.AppendInterruptInbound(nil, in.sessionKey, chatID)
}

// newHub makes tenant t's hub, with its ledger and its role, under regMu.
func (s *Server) newHub(t *Tenant) *hub {
	h := &hub{srv: s, id: t.ID, ledger: s.ledgers.Ledger(t.ID), created: t.Created, storedAt: t.Created, seats: make(map[*conn]*seat)}
	h.ledger.SetSince(t.Created)
	if m, ok := s.cfg.Metrics.(TenantMetrics); ok {
		h.queued = make(map[string]func(), len(s.order))
		for _, name := range s.order {
			h.queued[name] = m.QueuedOf(name, t.ID)
		}
	}
	h.chats, _ = simplelru.NewLRU[string, string](s.cfg.SessionOwners, nil)
	h.profiles, _ = simplelru.NewLRU[string, string](s.cfg.SessionOwners, nil)
	h.role.Store(&roleRef{local{h}})
	if s.fleet != nil {
		s.fleet.join(h)
	}
	return h
}

// serve attaches c for platform. A repeated hello changes nothing, and
// the role is not told of it: among several instances each change costs a
// message to the tenant's driver, and a gateway can repeat hellos without
// end.
func (h *hub) serve(c *conn, platform string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seatLocked(c)
	if slices.Contains(s.platforms, platform) {
		return
	}
	s.platforms = append(s.platforms, platform)
	h.role.Load().serve(c, s, platform)
}

// idle switches c to buffered-only delivery; a repeated going_idle changes
// nothing (see serve).
func (h *hub) idle(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seatLocked(c)
	if s.idle {
		return
	}
	s.idle = true
	h.role.Load().idle(c, s)
}

// seatLocked returns c's seat, making it, under mu.
func (h *hub) seatLocked(c *conn) *seat {
	s := h.seats[c]
	if s == nil {
		s = &seat{}
		h.seats[c] = s
	}
	return s
}

// detach forgets c, which closed.
func (h *hub) detach(c *conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seats[c]
	delete(h.seats, c)
	h.role.Load().detach(c, s)
}

// ack removes an acknowledged entry; false when the bufferId is unknown.
func (h *hub) ack(c *conn, id []byte) bool { return h.role.Load().ack(c, id) }

// interrupt delivers interrupt_inbound to the connection owning in's
// session: the owner this instance knows, or, among several instances, the
// owner stored or known to the tenant's driver. With no live owner there
// is no turn to stop, and it is dropped (logged within the tenant's
// allowance).
func (h *hub) interrupt(ctx context.Context, in interrupt) {
	if h.role.Load().interrupt(ctx, in) {
		return
	}
	// A gateway-sent key is bounded, but well above real keys' length.
	h.srv.logs.tenants.Log(h.srv.log, slog.LevelInfo, h.id, "interrupt dropped: no live connection owns the session",
		"session_key", textsplit.Truncate(in.sessionKey, 256), "gateway_id", in.gatewayID, "tenant", h.id)
}

// maxProfileBytes bounds the profile remembered for a chat (noteProfile):
// a Hermes profile name is far shorter.
const maxProfileBytes = 256

// pusher is a ledger.Consumer of the relay (a connection here, or a socket
// on another instance) that also takes frames past the ledger's flow
// control: interrupt_inbound, which must not wait behind inbound.
type pusher interface {
	ledger.Consumer
	push(frame []byte)
}

// noteProfile remembers the profile a gateway's outbound action named for
// a chat (metadata.profile), so the next inbound of that chat carries it
// back (contract §4: the multiplex round trip). An empty profile is a
// single-profile gateway: nothing is stamped for it; nor is one longer
// than maxProfileBytes, which no profile name is, and which would have the
// tenant's gateway make the relay keep up to a frame per chat; nor one of
// an op begun when drops was other than now (an earlier tenant's of the
// id, deleted and created again since).
func (h *hub) noteProfile(drops uint64, platformName, chatID, profile string) {
	if profile == "" || chatID == "" || len(profile) > maxProfileBytes {
		return
	}
	h.chatsMu.Lock()
	defer h.chatsMu.Unlock()
	if h.drops.Load() != drops {
		return
	}
	h.profiles.Add(platformName+"\x00"+chatID, profile)
	h.profiled.Store(true)
}

// stampProfile sets the profile of d's chat on its event's source or its
// forward, unless the platform already set one. The memory is this
// instance's: in a cluster, an inbound stored by another instance than the
// one that ran the outbound carries no profile (single-profile routing),
// nor does one routed under another creation of the tenant's id than its
// ledger's (the profiles are dropped before the ledger takes a creation, drop).
func (h *hub) stampProfile(d *platform.Delivery) {
	if d.ChatID == "" || !h.profiled.Load() || (d.Event != nil && d.Event.Source.Profile != "") || (d.Forward != nil && d.Forward.Profile != nil) {
		return
	}
	if h.ledger.Other(d.Created) {
		return // the profiles are this tenant's, not another of its id
	}
	h.chatsMu.Lock()
	profile, ok := h.profiles.Get(d.Platform + "\x00" + d.ChatID)
	h.chatsMu.Unlock()
	if !ok {
		return
	}
	// Copies: the platform owns what d points to.
	switch {
	case d.Event != nil:
		ev := *d.Event
		ev.Source.Profile = profile
		d.Event = &ev
	case d.Forward != nil:
		fw := *d.Forward
		fw.Profile = new(profile) // not &profile: that moves profile to the heap on every call
		d.Forward = &fw
	}
}

// enqueue encodes a platform delivery and stores it through the hub's
// role. It returns once the delivery is durable; an error means it was not
// taken.
func (h *hub) enqueue(ctx context.Context, d platform.Delivery) error {
	buf := getEncodeBuf()
	defer putEncodeBuf(buf)
	ld, ok := h.encode(&d, buf)
	if !ok {
		return nil
	}
	return h.stored(&d, h.role.Load().store(ctx, ld), 1)
}

// enqueueAll is enqueue for several deliveries of this tenant from one
// source: one store write for all of them, in their order. Either every
// one is taken or, with an error, none (the dropped ones aside).
func (h *hub) enqueueAll(ctx context.Context, ds []platform.Delivery) error {
	lds := make([]ledger.Delivery, 0, len(ds))
	bufs := make([]*[]byte, 0, len(ds))
	defer func() {
		for _, b := range bufs {
			putEncodeBuf(b)
		}
	}()
	for i := range ds {
		buf := getEncodeBuf()
		bufs = append(bufs, buf)
		if ld, ok := h.encode(&ds[i], buf); ok {
			lds = append(lds, ld)
		}
	}
	if len(lds) == 0 {
		return nil
	}
	return h.stored(&ds[0], h.role.Load().storeAll(ctx, lds), len(lds))
}

// encode encodes d into buf for the ledger; ok is false when d is dropped
// instead (logged; counted when oversized): of no kind the ledger takes,
// without its payload, or too large.
func (h *hub) encode(d *platform.Delivery, buf *[]byte) (ld ledger.Delivery, ok bool) {
	m := h.srv.cfg.Metrics
	var payload []byte
	h.stampProfile(d)
	switch {
	case d.Kind == platform.KindInbound && d.Event != nil:
		var truncated bool
		payload, truncated = appendEvent((*buf)[:0], d.Event)
		if truncated {
			m.Inbound(d.Platform, h.id, "truncated")
			h.srv.log.Warn("inbound truncated to fit the gateway's frame limit",
				"tenant", h.id, "platform", d.Platform)
		}
	case d.Kind == platform.KindPassthrough && d.Forward != nil:
		body, _ := json.Marshal(d.Forward) // plain strings and slices: cannot fail
		payload = append((*buf)[:0], body...)
	default:
		h.srv.log.Warn("delivery dropped: unknown kind or no payload", "tenant", h.id, "platform", d.Platform, "kind", d.Kind)
		return ld, false
	}
	*buf = payload
	if len(payload) > maxPayloadBytes {
		m.Inbound(d.Platform, h.id, ledger.DroppedOversized)
		h.srv.log.Warn("delivery dropped: larger than the gateway's frame limit",
			"tenant", h.id, "platform", d.Platform, "bytes", len(payload))
		return ld, false
	}
	if d.ChatID != "" {
		h.chatsMu.Lock()
		h.chats.Add(d.ChatID, d.Platform)
		h.chatsMu.Unlock()
	}
	ld = ledger.Delivery{
		Kind: uint8(d.Kind), Platform: d.Platform, SessionKey: d.SessionKey, ChatID: d.ChatID,
		Payload: payload, Received: d.Received,
	}
	if !d.Created.IsZero() {
		ld.Generation = d.Created.UnixMicro() // else the ledger's (SetSince)
	}
	return ld, true
}

// stored counts n deliveries (of d's platform) stored, or refused with err.
func (h *hub) stored(d *platform.Delivery, err error, n int) error {
	m := h.srv.cfg.Metrics
	if err != nil {
		for range n {
			m.Inbound(d.Platform, h.id, "store_failed")
		}
		h.srv.log.Warn("delivery refused: not stored", "tenant", h.id, "platform", d.Platform, "deliveries", n, "err", err)
		return fmt.Errorf("relay: store inbound: %w", err)
	}
	if queued := h.queued[d.Platform]; queued != nil {
		for range n {
			queued()
		}
		return nil
	}
	for range n {
		m.Inbound(d.Platform, h.id, "queued")
	}
	return nil
}

// chatPlatform returns the platform of a chat this tenant received inbound from.
func (h *hub) chatPlatform(chatID string) (string, bool) {
	h.chatsMu.Lock()
	defer h.chatsMu.Unlock()
	return h.chats.Get(chatID)
}
