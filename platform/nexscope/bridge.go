package nexscope

import (
	"cmp"
	"strconv"
	"strings"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/session"
)

// Reasons the bridge drops a message addressed to the bot (metrics labels).
const (
	dropHopLimit    = "hop_limit"   // hopCount at or over HopLimit
	dropMalformed   = "malformed"   // msgId not a non-empty string; threadId, text or hopCount of the wrong type
	dropUnavailable = "unavailable" // Run is not bridging
	dropRebound     = "rebound"     // the room was bound to another tenant since the frame was addressed to the bot
	dropNoTenant    = "no_tenant"   // the room's tenant is not configured (deleted while a YAML binding names it)
)

// dropReason reports why the bridge would drop f, a msg or file-start
// addressed to the bot: one of the drop constants, or "" when it takes f.
// The sender's ack lists the bot as delivered only when it takes f. It only
// checks types (f is valid JSON), so it costs no allocation.
func (p *Platform) dropReason(f *clientFrame) string {
	hop, ok := hopCount(f)
	switch {
	case !ok:
		return dropMalformed
	case p.cfg.HopLimit >= 0 && hop >= p.cfg.HopLimit:
		return dropHopLimit
	case len(f.msgID) < 3 || f.msgID[0] != '"' || !stringOrNull(f.threadID) || !stringOrNull(f.text):
		return dropMalformed // msgId must be a non-empty string
	case p.sink.Load() == nil:
		return dropUnavailable
	}
	return ""
}

// hopCount reads f's hopCount: 0 when absent or null; ok is false when it is
// not a non-negative integer of at most 2^30.
func hopCount(f *clientFrame) (int, bool) {
	if len(f.hopCount) == 0 || string(f.hopCount) == "null" {
		return 0, true
	}
	n, ok := intValue(f.hopCount)
	if !ok || n > 1<<30 {
		return 0, false
	}
	return int(n), true
}

// stringOrNull reports whether a raw JSON value is absent, null or a string.
func stringOrNull(raw []byte) bool {
	return len(raw) == 0 || string(raw) == "null" || raw[0] == '"'
}

// bridge turns a message the bot takes (dropReason "") into a delivery for
// tenant, the room's tenant when the message was addressed to its bot,
// created at created (Platform.creation, read then): an
// inbound MessageEvent, or an interrupt for "/stop". note, when set, is
// appended to the text (a file's description); att, when set, is the
// re-hosted file the message carries (in tenant's store). It reports
// whether the sink took the delivery (for an inbound: stored it durably);
// a room bound to another tenant (or unbound) by now delivers nothing.
func (r *room) bridge(f *clientFrame, tenant string, created time.Time, note string, att *contract.Media) bool {
	p := r.p
	hop, _ := hopCount(f)
	msgID, _ := stringValue(f.msgID)
	from, _ := stringValue(f.from)
	thread, _ := optionalString(f.threadID)
	text, _ := optionalString(f.text)
	role, _ := stringValue(f.role)
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
	if tenant == "" || r.tenant() != tenant {
		p.deps.Metrics.Dropped(platformName, dropRebound)
		return false // rebound or unbound since the message was routed
	}
	if p.tenantGone(tenant) {
		p.deps.Metrics.Dropped(platformName, dropNoTenant)
		return false // the relay would drop it as an unknown tenant's, and the ack say delivered
	}
	key := p.deps.Key(tenant, &src)
	ref := msgRef{from: src.UserID.Value, thread: thread, hop: hop, valid: true}
	r.mu.Lock()
	r.refreshLocked()
	bound := r.bound.Load() // its memory; bindLocked replaces both
	if bound.tenant != tenant {
		r.unlock()
		p.deps.Metrics.Dropped(platformName, dropRebound)
		return false // rebound meanwhile: its memory and prompt are another tenant's
	}
	undo := r.rememberLocked(src.MessageID, ref)
	var answer *contract.PromptResponse
	if note == "" && string(role) != "userAgent" {
		answer = r.answerPrompt(text)
	}
	r.unlock()

	d := platform.Delivery{
		Kind:       platform.KindInbound,
		Tenant:     tenant,
		Platform:   platformName,
		SessionKey: key,
		ChatID:     r.name,
		Received:   p.deps.Clock.Now(),
		Created:    created,
	}
	if note == "" && att == nil && strings.TrimSpace(text) == "/stop" {
		d.Kind = platform.KindInterrupt
	} else {
		ev := &contract.Event{Text: text + note, MessageID: src.MessageID, Source: src, PromptResponse: answer}
		switch {
		case att != nil:
			ev.MessageType = cmp.Or(mediaTypes[att.Kind], contract.MessageDocument)
			ev.MediaURLs, ev.Media = []string{att.URL}, []contract.Media{*att}
		case strings.HasPrefix(text, "/") && note == "":
			ev.MessageType = contract.MessageCommand
		}
		if answer != nil {
			ev.Text, ev.MessageType = "/"+answer.OptionID, contract.MessageCommand
		}
		d.Event = ev
	}
	if p.deliver(d) {
		return true
	}
	r.mu.Lock()
	if r.bound.Load() == bound { // else the memory is another tenant's (or creation's, or tenure's) by now
		undo(answer)
	}
	r.mu.Unlock()
	return false
}

// rememberLocked remembers ref, the inbound msgID, as the room's last
// inbound and its thread's, and returns what forgets it again, under mu,
// when the sink refused it (the tenant never got it): each of those that
// still names it goes back to what it was, and a prompt it answered
// (answer, when not nil; answerPrompt closed it) opens again unless
// another replaced it. It is remembered before the delivery, so a reply
// the gateway sends as soon as the delivery is stored finds it.
func (r *room) rememberLocked(msgID string, ref msgRef) (undo func(answer *contract.PromptResponse)) {
	prev, prevLast, open := msgRef{}, r.last, r.prompt
	if ref.thread != "" {
		prev, _ = r.threads.Peek(ref.thread)
		r.threads.Add(ref.thread, ref)
	}
	r.msgs.Add(msgID, ref)
	r.last = ref
	return func(answer *contract.PromptResponse) {
		if got, ok := r.msgs.Peek(msgID); ok && got == ref {
			r.msgs.Remove(msgID)
		}
		if got, ok := r.threads.Peek(ref.thread); ok && got == ref {
			if prev.valid {
				r.threads.Add(ref.thread, prev)
			} else {
				r.threads.Remove(ref.thread)
			}
		}
		if r.last == ref {
			r.last = prevLast
		}
		if answer != nil && r.prompt == nil {
			r.prompt = open
		}
	}
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
	return "\n[file " + strconv.Quote(attachmentText(attachment, "name")) + ", " + strconv.FormatInt(size, 10) +
		" bytes; the relay does not forward file contents to agents]"
}
