package relay

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/relay/ledger"
)

// hub is one tenant's share of the relay: its ledger (entries, connections
// attached for inbound, session owners) and the platform of each chat it
// received inbound from.
type hub struct {
	srv    *Server
	id     string
	ledger *ledger.Ledger

	// chats maps chat id -> platform, from deliveries; profiles maps
	// platform+"\x00"+chat id -> the Hermes profile the tenant's gateway
	// last named in an outbound action's metadata for that chat. Both are
	// guarded by chatsMu, which is never held together with another lock.
	chatsMu  sync.Mutex
	chats    *simplelru.LRU[string, string]
	profiles *simplelru.LRU[string, string]

	// drive is the tenant's state among several instances (cluster.go);
	// nil for a single instance.
	drive *drive
}

// init gives h its ledger.
func (h *hub) init(l *ledger.Ledger) {
	h.ledger = l
	h.chats, _ = simplelru.NewLRU[string, string](h.srv.cfg.SessionOwners, nil)
	h.profiles, _ = simplelru.NewLRU[string, string](h.srv.cfg.SessionOwners, nil)
}

// noteProfile remembers the profile a gateway's outbound action named for
// a chat (metadata.profile), so the next inbound of that chat carries it
// back (contract §4: the multiplex round trip). An empty profile is a
// single-profile gateway: nothing is stamped for it.
func (h *hub) noteProfile(platformName, chatID, profile string) {
	if profile == "" || chatID == "" {
		return
	}
	h.chatsMu.Lock()
	defer h.chatsMu.Unlock()
	h.profiles.Add(platformName+"\x00"+chatID, profile)
}

// stampProfile sets the profile of d's chat on its event's source or its
// forward, unless the platform already set one. The memory is this
// instance's: in a cluster, an inbound stored by another instance than the
// one that ran the outbound carries no profile (single-profile routing).
func (h *hub) stampProfile(d *platform.Delivery) {
	if d.ChatID == "" || (d.Event != nil && d.Event.Source.Profile != "") || (d.Forward != nil && d.Forward.Profile != nil) {
		return
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

// enqueue encodes a platform delivery and stores it in the ledger. It
// returns once the delivery is durable; an error means it was not taken.
func (h *hub) enqueue(ctx context.Context, d platform.Delivery) error {
	m := h.srv.cfg.Metrics
	buf := getEncodeBuf()
	defer putEncodeBuf(buf)
	var payload []byte
	h.stampProfile(&d)
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
		payload = appendForward((*buf)[:0], d.Forward)
	default:
		h.srv.log.Warn("delivery dropped: no payload", "tenant", h.id, "platform", d.Platform)
		return nil
	}
	*buf = payload
	if len(payload) > maxPayloadBytes {
		m.Inbound(d.Platform, h.id, "dropped_oversized")
		h.srv.log.Warn("delivery dropped: larger than the gateway's frame limit",
			"tenant", h.id, "platform", d.Platform, "bytes", len(payload))
		return nil
	}
	if d.ChatID != "" {
		h.chatsMu.Lock()
		h.chats.Add(d.ChatID, d.Platform)
		h.chatsMu.Unlock()
	}
	_, err := h.ledger.Append(ctx, ledger.Delivery{
		Kind: uint8(d.Kind), Platform: d.Platform, SessionKey: d.SessionKey, ChatID: d.ChatID,
		Payload: payload, Received: d.Received,
	})
	if err != nil {
		m.Inbound(d.Platform, h.id, "store_failed")
		h.srv.log.Warn("delivery refused: not stored", "tenant", h.id, "platform", d.Platform, "err", err)
		return fmt.Errorf("relay: store inbound: %w", err)
	}
	m.Inbound(d.Platform, h.id, "queued")
	if h.drive != nil {
		h.appended()
	}
	return nil
}

// interrupt delivers interrupt_inbound to the connection owning sessionKey.
// Among several instances, one that does not drive the tenant sends it to
// the owner its driver stored, or else to the driver (cluster.go). With no
// live owner there is no turn to stop, and it is dropped. gatewayID is the
// sender, empty for a platform-side /stop.
func (h *hub) interrupt(ctx context.Context, sessionKey, chatID, gatewayID string) {
	if d := h.drive; d != nil && !d.driving.Load() {
		if h.interruptStored(ctx, sessionKey, chatID) || h.forwardInterrupt(ctx, sessionKey, chatID, gatewayID) {
			return
		}
	}
	h.interruptLocal(ctx, sessionKey, chatID, gatewayID)
}

// interruptLocal delivers an interrupt to the owner this instance's ledger
// knows; among several instances, else to the stored owner (after a
// takeover the ledger knows no owner until the session's next entry).
func (h *hub) interruptLocal(ctx context.Context, sessionKey, chatID, gatewayID string) {
	c, ownerChat, ok := h.ledger.Owner(sessionKey)
	if !ok {
		if h.drive == nil || !h.interruptStored(ctx, sessionKey, chatID) {
			h.logInterruptDropped(sessionKey, gatewayID)
		}
		return
	}
	if chatID == "" {
		chatID = ownerChat
	}
	c.Offer(contract.AppendInterruptInbound(nil, sessionKey, chatID))
}

// logInterruptDropped logs an interrupt no connection owns.
func (h *hub) logInterruptDropped(sessionKey, gatewayID string) {
	// A gateway-sent key is bounded, but well above real keys' length.
	h.srv.logTenant(h.id, "interrupt dropped: no live connection owns the session", "session_key", textsplit.Truncate(sessionKey, 256), "gateway_id", gatewayID)
}

// chatPlatform returns the platform of a chat this tenant received inbound from.
func (h *hub) chatPlatform(chatID string) (string, bool) {
	h.chatsMu.Lock()
	defer h.chatsMu.Unlock()
	return h.chats.Get(chatID)
}
