package slack

import (
	"context"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"connector/contract"
)

// This file gives a turn that enters a thread its history, as the native
// adapter's _fetch_thread_context does: when a reply in a thread starts
// a turn and this instance has delivered no turn of that thread yet (the
// native "no active session"), the thread's earlier messages are read
// with conversations.replies and ride the event as its context (the
// gateway shows them as channel_context, reference only, outside the
// text). The bot's own replies are left out (the parent stays even when
// a bot posted it), the bot's mention is cut, the parent is marked
// "[thread parent]", and an author the tenant's allowlist would not admit
// is marked "[unverified]", as natively.

// Thread context limits, as natively.
const (
	threadContextLimit    = 30               // earlier messages read
	threadContextTTL      = 60 * time.Second // a thread's history is read once a minute at most
	threadContextDeadline = 2 * time.Second  // the read, within the chat's ingest
	threadContextSize     = 1000             // threads whose history is cached
)

// threadHistory is a thread's messages as read, for threadContext.
type threadHistory struct {
	msgs []slack.Message
}

// threadContext returns the context of a turn of tenant that enters
// thread (in channel, read with workspace install's token), from the
// messages before current; nil when the thread was entered before on
// this instance, or cannot be read.
func (p *Platform) threadContext(ctx context.Context, tenant string, m *message, thread, bot string) []contract.ContextMessage {
	ev := m.ev
	if thread == "" || thread == ev.TS || p.memory.active(m.scope, ev.Channel, thread) {
		return nil
	}
	key := m.install + "/" + ev.Channel + "/" + thread
	h, ok := p.histories.Get(key)
	if !ok {
		cctx, cancel := context.WithTimeout(ctx, threadContextDeadline)
		defer cancel()
		var msgs []slack.Message
		err := p.call(cctx, m.install, "conversations.replies", func(ctx context.Context, c *slack.Client) (err error) {
			msgs, _, _, err = c.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
				ChannelID: ev.Channel, Timestamp: thread, Limit: threadContextLimit + 1, Inclusive: true,
			})
			return err
		})
		if err != nil {
			p.log.Debug("slack thread context unavailable", "team", m.install, "channel", ev.Channel, "err", p.errorText(err))
			return nil
		}
		h = threadHistory{msgs: msgs}
		p.histories.Add(key, h)
	}
	pol := p.policy(tenant)
	var out []contract.ContextMessage
	for i := range h.msgs {
		msg := &h.msgs[i]
		if !tsBefore(msg.Timestamp, ev.TS) {
			continue // the turn itself, and what came after it
		}
		parent := msg.Timestamp == thread
		isBot := msg.BotID != "" || msg.SubType == "bot_message"
		if isBot && !parent && bot != "" && msg.User == bot {
			continue // the bot's own replies
		}
		text := strings.TrimSpace(msg.Text)
		if bot != "" {
			text = strings.TrimSpace(strings.ReplaceAll(text, "<@"+bot+">", ""))
		}
		if text == "" {
			continue
		}
		author := msg.User
		name := ""
		switch {
		case author != "":
			name = p.names.user(ctx, m.scope, author).name
		case isBot:
			name = cmpOr(msg.Username, "bot")
		default:
			name = "unknown"
		}
		if parent {
			text = "[thread parent] " + text
		}
		if !isBot && author != "" && !pol.admits(author) {
			text = "[unverified] " + text
		}
		out = append(out, contract.ContextMessage{Text: text, Source: contract.ContextAuthor{UserName: name, UserID: author}})
	}
	return out
}

// tsBefore reports whether Slack ts a is earlier than b ("<seconds>.<micros>").
func tsBefore(a, b string) bool {
	as, af, _ := strings.Cut(a, ".")
	bs, bf, _ := strings.Cut(b, ".")
	if len(as) != len(bs) {
		return len(as) < len(bs)
	}
	if as != bs {
		return as < bs
	}
	for len(af) < len(bf) {
		af += "0"
	}
	for len(bf) < len(af) {
		bf += "0"
	}
	return af < bf
}
