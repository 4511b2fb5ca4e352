package slack

import (
	"cmp"
	"context"
	"regexp"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"connector/contract"
)

// This file gives a turn that enters a thread its history, as the native
// adapter's _fetch_thread_context does (docs/contract.md, Context): when a
// reply in a thread starts a turn and no turn of that thread was delivered
// yet (memory.go's marker, the same on every instance), the thread's
// earlier messages ride the event as its context, and the root's images,
// up to four, as its first media (_collect_thread_root_images: the root is
// often what the mention is about).

// Thread context limits, as natively.
const (
	threadContextLimit    = 30               // earlier messages read
	threadContextTTL      = 60 * time.Second // a thread's history is read once a minute at most
	threadContextDeadline = 2 * time.Second  // the read, within the chat's ingest
	threadContextSize     = 1000             // threads whose history is cached
	threadRootImages      = 4                // the root's images a turn that enters its thread gets
)

// threadContext returns the context of a turn of tenant that enters
// thread (in channel, read with workspace install's token), from the
// messages before current, and the files of the thread's root; nothing
// when the thread was entered before, or cannot be read.
func (p *Platform) threadContext(ctx context.Context, tenant string, m *message, thread, bot string) ([]contract.ContextMessage, []wireFile) {
	ev := m.ev
	if thread == "" || thread == ev.TS {
		return nil, nil
	}
	switch active, err := p.memory.has(ctx, markActive, threadMark(tenant, m.scope, ev.Channel, thread)); {
	case err != nil:
		p.log.Debug("slack thread marker unreadable; the thread's context is read", "err", err)
	case active:
		return nil, nil
	}
	h, ok := p.names.history(ctx, m.install, ev.Channel, thread)
	if !ok {
		return nil, nil
	}
	// Where tenant does not hold the channel alone (heldAlone: a chat no
	// binding or claim holds, where each linked author's messages reach
	// their own tenant, rule 3, or a Slack Connect channel another tenant
	// holds a workspace's view of), the thread shows tenant no message
	// that reached another tenant, each placed in its author's workspace
	// (its team, as Slack names it in every workspace's view; the install's
	// when it names none), nor one the bot (any workspace's) posted there
	// that tenant did not (platform.Grants.PostedBy), nor, then, the root's
	// files.
	own := p.owners.Load()
	held := p.heldAlone(ctx, ev.Channel, m.install, tenant)
	elsewhere := func(msg *slack.Message) bool {
		if held {
			return false
		}
		if r, ok := own.Route(msg.User, chatOf(ev.Channel, cmp.Or(msg.Team, m.install))); ok && r.Tenant != "" && r.Tenant != tenant {
			return true
		}
		// The bot, or another workspace's install's bot (with OAuth installs;
		// one the store cannot tell is taken for it).
		ours := msg.User != "" && msg.User == bot
		if msg.User != "" && !ours && msg.Team != "" && msg.Team != m.install {
			other, err := p.works.botUser(ctx, msg.Team)
			ours = err != nil || msg.User == other
		}
		return ours && !p.grants.PostedBy(ctx, ev.Channel, msg.Timestamp, tenant)
	}
	var root []wireFile
	r := rootIn(h, thread)
	rootHidden := r != nil && elsewhere(r)
	if r != nil && !rootHidden {
		for i := range r.Files {
			root = append(root, fileOf(&r.Files[i]))
		}
	}
	pol := p.policy(tenant)
	// One deadline for the authors' names, as for a message's mentions: a
	// thread may have as many authors as messages, and the chat's turn is
	// held meanwhile.
	nctx, cancel := within(ctx, p.clock, mentionNamesDeadline)
	defer cancel()
	var out []contract.ContextMessage
	for i := range h {
		msg := &h[i]
		if !tsBefore(msg.Timestamp, ev.TS) {
			continue // the turn itself, and what came after it
		}
		parent := msg.Timestamp == thread
		isBot := msg.BotID != "" || msg.SubType == "bot_message"
		if isBot && !parent && bot != "" && msg.User == bot {
			continue // the bot's own replies
		}
		if parent && rootHidden || !parent && elsewhere(msg) {
			continue // another tenant's (rule 3), its workspace's bot's too
		}
		text := strings.TrimSpace(msg.Text)
		if bot != "" {
			text = strings.TrimSpace(strings.ReplaceAll(text, "<@"+bot+">", ""))
		}
		if markers := fileMarkers(msg.Files); markers != "" {
			text = strings.TrimSpace(text + "\n" + markers)
		}
		if text == "" {
			continue
		}
		author := msg.User
		name := ""
		switch {
		case author != "":
			name = p.names.user(nctx, m.install, author).name
		case isBot:
			name = cmp.Or(msg.Username, "bot")
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
	return out, root
}

// fileOf is a file of a message read with conversations.replies.
func fileOf(f *slack.File) wireFile {
	return wireFile{ID: f.ID, Name: f.Name, Mimetype: f.Mimetype, Size: int64(f.Size),
		URLPrivate: f.URLPrivate, URLPrivateDownload: f.URLPrivateDownload, FileAccess: f.FileAccess}
}

// markerName is what a file's name loses in its marker, so a hostile name
// cannot fake the context's structure.
var markerName = regexp.MustCompile(`[\r\n\[\]]+`)

// fileMarkers names a message's files for the text-only context
// (_slack_file_marker): "[image: name]" (video, audio likewise), else
// "[file: name (mimetype)]".
func fileMarkers(files []slack.File) string {
	markers := make([]string, 0, len(files))
	for i := range files {
		f := &files[i]
		name := strings.TrimSpace(markerName.ReplaceAllString(cmp.Or(cmp.Or(f.Name, f.Title), cmp.Or(f.ID, "file")), " "))
		name = cmp.Or(name, "file")
		marker := "[file: " + name + "]"
		if kind, _, _ := strings.Cut(f.Mimetype, "/"); strings.Contains(f.Mimetype, "/") && (kind == "image" || kind == "video" || kind == "audio") {
			marker = "[" + kind + ": " + name + "]"
		} else if f.Mimetype != "" {
			marker = "[file: " + name + " (" + f.Mimetype + ")]"
		}
		markers = append(markers, marker)
	}
	return strings.Join(markers, " ")
}

// history is thread ts of channel as conversations.replies reads it with
// workspace team's token (the thread's first threadContextLimit+1
// messages), cached for threadContextTTL; a failed read is not asked
// again for failedTTL. The wake check (a thread's root) and the context
// share it, as natively (_thread_context_cache).
func (n *names) history(ctx context.Context, team, channel, ts string) ([]slack.Message, bool) {
	return lookup(ctx, n.p, n.p.histories, team, channel+"/"+ts, "conversations.replies", threadContextDeadline, func(ctx context.Context, c *slack.Client) ([]slack.Message, error) {
		msgs, _, _, err := c.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
			ChannelID: channel, Timestamp: ts, Limit: threadContextLimit + 1, Inclusive: true,
		})
		return msgs, err
	})
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
