package nexscope

import (
	"cmp"
	"context"
	"maps"
	"slices"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// egress is the op table; the descriptor's supported_ops are its keys.
// Every op is addressed to a chat (a room). edit is absent: a relayed msg
// cannot be changed.
var egress = platform.Ops[*Platform, *room]{
	contract.OpSend:        (*Platform).send,
	contract.OpTyping:      (*Platform).typing,
	contract.OpGetChatInfo: (*Platform).chatInfo,
	contract.OpPrompt:      (*Platform).prompt,
	contract.OpSendMedia:   (*Platform).sendMedia,
}

// roomOf makes a chat_id into the room ops act on: a room name (one that
// names no room gives nil, which platform.Authorize declines before any op
// runs; a room dropped meanwhile too).
func roomOf(p *Platform, chatID string) (*room, bool) {
	if !validName(chatID) {
		return nil, false
	}
	return p.room(chatID), true
}

// newEgress returns the egress of a room homed here (here), and of the
// instance a gateway reached (edge). With several instances, the edge's
// send, prompt and send_media to a room homed on another instance are
// executed there (forwarded), and the home runs them through here (a
// prompt is answered at the room's home, a file is sent under its lock).
// Both check the action (platform.Execute): the edge before it forwards
// anything, the home before it acts.
func newEgress() (edge, here platform.Egress[*Platform, *room]) {
	here = platform.Egress[*Platform, *room]{Ops: egress, Chat: roomOf}
	edge = here
	edge.Ops = maps.Clone(egress)
	for _, op := range []string{contract.OpSend, contract.OpPrompt, contract.OpSendMedia} {
		edge.Ops[op] = forwarded(egress[op])
	}
	return edge, here
}

// forwarded runs op here when the room is homed here (and its lease still
// held: room.homeHeld), also when it became so as forwarded looked, else
// has its home execute the action. The home opens send_media's source_url itself: a
// public URL it downloads, a re-host it finds when the gateway uploaded it
// there. A re-host stored on this instance cannot reach the home (the media
// store is per instance): that send_media fails with unavailable.
func forwarded(op platform.Op[*Platform, *room]) platform.Op[*Platform, *room] {
	return func(p *Platform, ctx context.Context, tenant string, r *room, a *contract.Action) contract.Result {
		if r.homeHeld() {
			return op(p, ctx, tenant, r, a)
		}
		if a.Op == contract.OpSendMedia && p.storedHere(tenant, a.SourceURL) {
			return contract.Failed(contract.CodeUnavailable,
				"nexscope send_media: the media is stored on this instance and the room is served by another; "+
					"route a gateway's /relay/media and /relay to one instance")
		}
		r.mu.Lock()
		away := r.away // read after homeHeld: it ends when this instance becomes the home
		r.mu.Unlock()
		if away.Err() != nil && r.homeHeld() {
			return op(p, ctx, tenant, r, a)
		}
		return p.cluster.forwardExec(ctx, away, r, tenant, a)
	}
}

// Execute performs a gateway's outbound action for tenant through
// platform.Execute. chat_id is a room name; a room that is not bound to
// tenant is declined.
func (p *Platform) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	return platform.Execute(ctx, &p.edge, p, tenant, a)
}

// storedHere reports whether sourceURL names an object of tenant in this
// instance's media store.
func (p *Platform) storedHere(tenant, sourceURL string) bool {
	if p.deps.Media == nil {
		return false
	}
	id, ok := p.deps.Media.ParseRef(sourceURL)
	if !ok {
		return false
	}
	obj, err := p.deps.Media.Open(tenant, id)
	if err != nil {
		return false
	}
	_ = obj.Close()
	return true
}

// send posts content as the bot's msg (role userAgent), addressed by
// addressLocked as the package doc says; content longer than MaxText bytes
// goes out as several msgs split on rune boundaries, and message_id is the
// first one's msgId. No recipient online is unavailable (the relay keeps no
// queue).
func (p *Platform) send(ctx context.Context, tenant string, r *room, a *contract.Action) contract.Result {
	r.mu.Lock()
	defer r.unlock()
	return p.sendLocked(ctx, tenant, r, a)
}

// sendLocked is send under r.mu.
func (p *Platform) sendLocked(ctx context.Context, tenant string, r *room, a *contract.Action) contract.Result {
	if a.Content == "" {
		return contract.Failed(contract.CodeBadRequest, "nexscope: send needs content")
	}
	if res, ok := r.actsForLocked(ctx, tenant); !ok {
		return res
	}
	m, online := r.addressLocked(a)
	if len(online) == 0 {
		return contract.Failed(contract.CodeUnavailable, "nexscope: the recipient is not online (messages are not queued)")
	}
	var first string
	for _, piece := range textsplit.SplitBytes(a.Content, p.cfg.MaxText) {
		m.msgID, m.text = p.newMsgID(), piece
		first = cmp.Or(first, m.msgID)
		frame := appendBotMsg(make([]byte, 0, 160+len(piece)), "msg", &m, `,"attachments":[]`, p.nowMs())
		for _, mem := range online {
			r.pushLocked(mem, frame)
		}
	}
	return contract.OK(first)
}

// addressLocked addresses a bot message answering a (see the package
// doc's send): its from, to, threadId and hopCount, and the members online
// to get it. Called under mu.
func (r *room) addressLocked(a *contract.Action) (botMsg, []*member) {
	ref := r.replyTarget(a)
	m := botMsg{from: r.bot(), threadID: cmp.Or(string(a.Metadata.ThreadID), ref.thread, DefaultThread)}
	var online []*member
	switch {
	case ref.valid:
		m.to, m.hopCount = []string{ref.from}, ref.hop+1
	case a.Metadata.UserID != "":
		m.to = []string{string(a.Metadata.UserID)}
	}
	if m.to == nil {
		online = slices.Collect(maps.Values(r.members))
	} else if mem, ok := r.members[m.to[0]]; ok {
		online = append(online, mem)
	}
	return m, online
}

// replyTarget finds the inbound a send answers. Called under mu.
func (r *room) replyTarget(a *contract.Action) msgRef {
	answers := false
	for _, id := range []contract.ID{a.ReplyTo, a.Metadata.ReplyToMessageID} {
		if id == "" {
			continue
		}
		answers = true
		if ref, ok := r.msgs.Get(string(id)); ok {
			return ref
		}
	}
	if a.Metadata.ThreadID != "" {
		ref, _ := r.threads.Get(string(a.Metadata.ThreadID))
		return ref
	}
	if answers {
		// A message the bridge no longer remembers: guessing the room's
		// last inbound could address another member.
		return msgRef{}
	}
	return r.last
}

// typing is a documented no-op: the protocol has no typing indicator, and an
// invented frame type would earn unknown-type handling in clients.
func (p *Platform) typing(context.Context, string, *room, *contract.Action) contract.Result {
	return contract.OK("")
}

// chatInfo answers get_chat_info: the room's name, type "group".
func (p *Platform) chatInfo(_ context.Context, _ string, r *room, _ *contract.Action) contract.Result {
	return contract.Result{Success: true, ChatInfo: &contract.ChatInfo{Name: r.name, Type: "group"}}
}
