package slack

import (
	"context"
	"regexp"
	"strings"
)

// This file is the native channel gate (_channel_gate_allows,
// _should_wake_on_unmentioned_message): it applies to every conversation
// but a 1:1 DM, group DMs included, in the native order.

// leadingMention matches a message whose first token mentions a user.
var leadingMention = regexp.MustCompile(`^\s*<@([^>|\s]+)(?:\|[^>]*)?>`)

// gate returns why a channel or group-DM message starts no turn, "" when
// it does. routing is the text mentions are detected in.
func (n *normalizer) gate(ctx context.Context, m *message, routing string, mentioned bool) string {
	ev, pol := m.ev, n.pol
	if pol.allowedChannels != nil && !pol.allowedChannels[ev.Channel] {
		return dropChannelNotAllow
	}
	if pol.ignoreOtherUserMentions && !mentioned && !mentionsUser(routing, n.bot) {
		if lm := leadingMention.FindStringSubmatch(routing); lm != nil && lm[1] != n.bot {
			return dropOtherUser
		}
	}
	if m.force {
		return "" // a reaction's turn: past the mention rules
	}
	reply := ev.ThreadTS != "" && ev.ThreadTS != ev.TS
	free := !pol.requireMentionIn[ev.Channel] && (pol.freeResponse[ev.Channel] || !pol.requireMention)
	switch {
	case !free && pol.strictMention && !mentioned:
		return dropStrictMention
	case pol.threadRequireMention && reply && !mentioned:
		return dropThreadMention
	case free || mentioned:
		return ""
	case n.wakes(ctx, m, reply):
		return ""
	}
	return dropMentionRequired
}

// mentionsUser reports whether text mentions user, with or without a
// label.
func mentionsUser(text, user string) bool {
	return user != "" && (strings.Contains(text, "<@"+user+">") || strings.Contains(text, "<@"+user+"|"))
}

// wakes is _should_wake_on_unmentioned_message: an unmentioned message
// starts a turn in a thread the bot posted into, a thread mentioned
// earlier, a thread with a turn already, under a root the bot posted, or
// under a root that mentions the bot. The markers are the store's
// (memory.go) and the roots are read from Slack, so every instance and a
// restart agree.
func (n *normalizer) wakes(ctx context.Context, m *message, reply bool) bool {
	ev := m.ev
	thread := ev.ThreadTS
	key := threadMark(n.tenant, m.scope, ev.Channel, thread)
	switch {
	case thread == "":
		return false
	case reply && n.ask(n.state.has(ctx, markPosted, key)):
		return true
	case n.ask(n.state.has(ctx, markMentioned, key)):
		return true
	case !reply:
		return false
	case n.ask(n.state.has(ctx, markActive, key)):
		return true
	case n.err != nil:
		return false
	}
	h, _ := n.look.history(ctx, m.install, ev.Channel, thread)
	root := rootIn(h, thread)
	switch {
	case root == nil:
		return false
	case root.User != "" && root.User == n.bot:
		return true
	case strings.Contains(root.Text, "<@"+n.bot+">"):
		if !n.pol.strictMention {
			n.remember(n.state.set(ctx, markMentioned, key))
		}
		return true
	}
	return false
}
