package relay

import (
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/contract"
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

	// chats maps chat id -> platform, from deliveries; guarded by chatsMu,
	// which is never held together with another lock.
	chatsMu sync.Mutex
	chats   *simplelru.LRU[string, string]
}

func newHub(s *Server, id string) *hub {
	chats, _ := simplelru.NewLRU[string, string](s.cfg.SessionOwners, nil)
	h := &hub{srv: s, id: id, chats: chats}
	h.ledger = ledger.New(ledger.Config{
		Tenant:        id,
		IDPrefix:      s.bufferPrefix,
		Frame:         frameDelivery,
		AckWindow:     s.cfg.AckWindow,
		MaxEntries:    s.cfg.BufferEntries,
		MaxBytes:      s.cfg.BufferBytes,
		SessionOwners: s.cfg.SessionOwners,
		Now:           s.cfg.Now,
		Log:           s.log,
		Metrics:       s.cfg.Metrics,
	})
	return h
}

// enqueue encodes a platform delivery and takes it into the ledger.
func (h *hub) enqueue(d platform.Delivery) {
	m := h.srv.cfg.Metrics
	buf := getEncodeBuf()
	defer putEncodeBuf(buf)
	var payload []byte
	windowed := true
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
		// Older gateways never acknowledge passthrough frames; they must not
		// stall the connection's inbound window.
		windowed = false
	default:
		h.srv.log.Warn("delivery dropped: no payload", "tenant", h.id, "platform", d.Platform)
		return
	}
	*buf = payload
	if len(payload) > maxPayloadBytes {
		m.Inbound(d.Platform, h.id, "dropped_oversized")
		h.srv.log.Warn("delivery dropped: larger than the gateway's frame limit",
			"tenant", h.id, "platform", d.Platform, "bytes", len(payload))
		return
	}
	if d.ChatID != "" {
		h.chatsMu.Lock()
		h.chats.Add(d.ChatID, d.Platform)
		h.chatsMu.Unlock()
	}
	if d.SessionKey != "" {
		h.srv.noteSession(d.SessionKey, h.id)
	}
	m.Inbound(d.Platform, h.id, "queued")
	h.ledger.Append(ledger.Delivery{
		Kind: uint8(d.Kind), Platform: d.Platform, SessionKey: d.SessionKey, ChatID: d.ChatID,
		Payload: payload, Windowed: windowed, Received: d.Received,
	})
}

// interrupt delivers interrupt_inbound to the connection owning sessionKey.
// With no live owner there is no turn to stop, and it is dropped.
func (h *hub) interrupt(sessionKey, chatID string) {
	c, ownerChat, ok := h.ledger.Owner(sessionKey)
	if !ok {
		h.srv.log.Info("interrupt dropped: no live connection owns the session", "tenant", h.id)
		return
	}
	if chatID == "" {
		chatID = ownerChat
	}
	c.Offer(contract.AppendInterruptInbound(nil, sessionKey, chatID))
}

// chatPlatform returns the platform of a chat this tenant received inbound from.
func (h *hub) chatPlatform(chatID string) (string, bool) {
	h.chatsMu.Lock()
	defer h.chatsMu.Unlock()
	return h.chats.Get(chatID)
}
