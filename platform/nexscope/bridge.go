package nexscope

import (
	"strconv"
	"strings"

	"connector/contract"
	"connector/platform"
	"connector/session"
)

// bridge turns a message addressed to the room's bot into a delivery for the
// room's tenant: an inbound MessageEvent, or an interrupt for "/stop". note,
// when set, is appended to the text (a file's description). Messages at or
// over the hop limit, or without a string msgId, are dropped and counted.
func (r *room) bridge(f *clientFrame, note string) {
	p := r.p
	hop := 0
	if len(f.hopCount) > 0 && string(f.hopCount) != "null" {
		n, ok := intValue(f.hopCount)
		if !ok || n > 1<<30 {
			p.metrics.Dropped(platformName, "malformed")
			return
		}
		hop = int(n)
	}
	if p.cfg.HopLimit >= 0 && hop >= p.cfg.HopLimit {
		p.metrics.Dropped(platformName, "hop_limit")
		return
	}
	msgID, okID := stringValue(f.msgID)
	from, _ := stringValue(f.from)
	thread, okThread := optionalString(f.threadID)
	text, okText := optionalString(f.text)
	role, _ := stringValue(f.role)
	if !okID || len(msgID) == 0 || !okThread || !okText {
		p.metrics.Dropped(platformName, "malformed")
		return
	}
	src := session.Source{
		Platform:  platformName,
		ChatID:    r.name,
		ChatName:  session.Str(r.name),
		ChatType:  session.ChatTypeGroup,
		UserID:    session.Str(string(from)),
		UserName:  session.Str(string(from)),
		ThreadID:  session.StrOrNull(thread),
		MessageID: string(msgID),
		IsBot:     string(role) == "userAgent",
	}
	key := p.key(r.tenant, &src)
	ref := msgRef{from: src.UserID.Value, thread: thread, hop: hop, valid: true}
	r.mu.Lock()
	r.msgs.Add(src.MessageID, ref)
	if thread != "" {
		r.threads.Add(thread, ref)
	}
	r.last = ref
	r.mu.Unlock()

	d := platform.Delivery{
		Kind:       platform.KindInbound,
		Tenant:     r.tenant,
		Platform:   platformName,
		SessionKey: key,
		ChatID:     r.name,
		Received:   p.clock.Now(),
	}
	if note == "" && strings.TrimSpace(text) == "/stop" {
		d.Kind = platform.KindInterrupt
	} else {
		ev := &contract.Event{Text: text + note, MessageID: src.MessageID, Source: src}
		if strings.HasPrefix(text, "/") && note == "" {
			ev.MessageType = contract.MessageCommand
		}
		d.Event = ev
	}
	p.deliver(d)
}

// optionalString reads a raw JSON string that may be absent or null.
func optionalString(raw []byte) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", true
	}
	s, ok := stringValue(raw)
	return string(s), ok
}

// fileNote describes a file sent to the bot; its bytes are not forwarded.
func fileNote(attachment []byte, size int64) string {
	var name []byte
	eachMember(attachment, 0, func(key, val []byte) {
		if keyIs(key, "name") {
			name, _ = stringValue(val)
		}
	})
	return "\n[file " + strconv.Quote(string(name)) + ", " + strconv.FormatInt(size, 10) +
		" bytes; the relay does not forward file contents to agents]"
}
