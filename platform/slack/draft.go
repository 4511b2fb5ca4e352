package slack

import (
	"context"
	"strings"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/slack-go/slack"

	"connector/contract"
)

// This file streams drafts with Slack's native message streaming
// (chat.startStream, chat.appendStream, chat.stopStream; the Agents & AI
// Apps feature), as the native adapter's send_draft does. Unlike a
// Telegram draft, a Slack stream is the reply itself: its first frame
// starts a message in the thread, later frames append what they add, and
// the seal (final: true, or a send whose content extends the stream)
// stops it with the rest. One stream is open per tenant and chat; a frame
// of another draft_id seals the open one first. The streams are this
// instance's: the frames of one stream come from one gateway connection.

// sealedStreams bounds the sealed streams remembered, so a repeated seal
// (the gateway retries an ambiguous one once) answers the same message.
const sealedStreams = 512

// openStreams bounds the streams open at once; the least recently used is
// abandoned past it (its message stays as streamed, and its next frame
// starts another).
const openStreams = 10_000

// streamCursors are the cursor glyphs a streaming consumer may end a
// frame with; the API appends only, so they are cut.
var streamCursors = []string{"\u2589", "▍", "▌", "…"}

type streamKey struct {
	tenant, channel string
}

type sealKey struct {
	streamKey
	draft int64
}

// stream is one open native stream.
type stream struct {
	mu    sync.Mutex // held across its API calls: one frame at a time
	draft int64
	team  string
	ts    string // the message's ts, "" until started
	sent  string // the text streamed so far
	done  bool   // sealed or abandoned: a new frame starts another
}

type streams struct {
	mu     sync.Mutex
	open   *lru.Cache[streamKey, *stream]
	sealed *lru.Cache[sealKey, string]
}

func newStreams() *streams {
	sealed, _ := lru.New[sealKey, string](sealedStreams) // size > 0: cannot fail
	open, _ := lru.New[streamKey, *stream](openStreams)
	return &streams{open: open, sealed: sealed}
}

// cutCursor removes a trailing cursor glyph.
func cutCursor(text string) string {
	trimmed := strings.TrimRight(text, " \t\n")
	for _, g := range streamCursors {
		if strings.HasSuffix(trimmed, g) {
			return strings.TrimRight(strings.TrimSuffix(trimmed, g), " \t\n")
		}
	}
	return text
}

// current returns the open stream of k, nil when none.
func (s *streams) current(k streamKey) *stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, _ := s.open.Get(k)
	return st
}

// put makes st k's open stream.
func (s *streams) put(k streamKey, st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open.Add(k, st)
}

// end forgets st as k's open stream.
func (s *streams) end(k streamKey, st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, _ := s.open.Peek(k); cur == st {
		s.open.Remove(k)
	}
}

// draft streams one frame, or seals the stream with final.
func (p *Platform) draft(ctx context.Context, tenant string, t target, a *contract.Action) contract.Result {
	switch {
	case a.DraftID == 0:
		return contract.Failed(contract.CodeBadRequest, "slack draft: draft_id must be a non-zero integer")
	case strings.TrimSpace(a.Content) == "":
		return contract.Failed(contract.CodeBadRequest, "slack draft: content is empty")
	}
	k := streamKey{tenant, t.channel}
	sk := sealKey{k, a.DraftID}
	if id, ok := p.streams.sealed.Get(sk); ok && a.Final {
		return contract.OK(id)
	}
	text := cutCursor(a.Content)
	st := p.streams.current(k)
	if st != nil && st.draft != a.DraftID {
		p.seal(ctx, k, st, "")
		st = nil
	}
	if st == nil {
		if a.Final {
			// Nothing was streamed: the content is sent as the reply.
			first, _, r := p.postParts(ctx, tenant, t, a, mrkdwnParts(a.Content), nil)
			if first != "" {
				p.streams.sealed.Add(sk, first)
			}
			if !r.Success {
				return r
			}
			return contract.OK(first)
		}
		return p.startStream(ctx, tenant, t, a, k, text)
	}
	if a.Final {
		ts, err := p.seal(ctx, k, st, text)
		if err != nil {
			return p.failure(contract.OpDraft, err)
		}
		return contract.OK(ts)
	}
	return p.appendStream(ctx, t, k, st, text)
}

// startStream starts a stream in the action's thread with text.
func (p *Platform) startStream(ctx context.Context, tenant string, t target, a *contract.Action, k streamKey, text string) contract.Result {
	thread := p.threadOf(tenant, a)
	if thread == "" {
		return contract.Failed(contract.CodeBadRequest, "slack draft: Slack streams only into a thread (metadata.thread_id)")
	}
	st := &stream{draft: a.DraftID, team: t.team}
	st.mu.Lock()
	defer st.mu.Unlock()
	opts := []slack.MsgOption{slack.MsgOptionTS(thread), slack.MsgOptionMarkdownText(text), slack.MsgOptionRecipientTeamID(t.team)}
	if u := string(a.Metadata.UserID); u != "" {
		opts = append(opts, slack.MsgOptionRecipientUserID(u))
	}
	err := p.callIn(ctx, t.team, t.channel, "chat.startStream", func(ctx context.Context, c *slack.Client) (err error) {
		_, st.ts, err = c.StartStreamContext(ctx, t.channel, opts...)
		return err
	})
	if err != nil {
		return p.failure(contract.OpDraft, err)
	}
	st.sent = text
	p.streams.put(k, st)
	p.memory.sent(t.team, st.ts, thread)
	return contract.OK(st.ts)
}

// appendStream appends what text adds to the stream. A frame that does
// not extend what was streamed (the text was rewritten) seals the stream
// and fails, so the gateway streams by editing instead, as natively.
func (p *Platform) appendStream(ctx context.Context, t target, k streamKey, st *stream, text string) contract.Result {
	st.mu.Lock()
	if st.done {
		st.mu.Unlock()
		return contract.Failed(contract.CodeBadRequest, "slack draft: the stream was sealed")
	}
	if text == st.sent {
		st.mu.Unlock()
		return contract.OK(st.ts)
	}
	if !strings.HasPrefix(text, st.sent) {
		st.mu.Unlock()
		p.seal(ctx, k, st, "")
		return contract.Failed(contract.CodeBadRequest, "slack draft: the frame does not extend the streamed text; the stream was sealed")
	}
	defer st.mu.Unlock()
	delta := text[len(st.sent):]
	err := p.call(ctx, t.team, "chat.appendStream", func(ctx context.Context, c *slack.Client) error {
		_, _, err := c.AppendStreamContext(ctx, t.channel, st.ts, slack.MsgOptionMarkdownText(delta))
		return err
	})
	if err != nil {
		return p.failure(contract.OpDraft, err)
	}
	st.sent = text
	return contract.OK(st.ts)
}

// seal stops st, with what final adds to the streamed text (nothing when
// it does not extend it), records it as sealed and returns its message.
func (p *Platform) seal(ctx context.Context, k streamKey, st *stream, final string) (string, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p.streams.end(k, st)
	if st.done {
		return st.ts, nil
	}
	st.done = true
	var opts []slack.MsgOption
	if final != "" && strings.HasPrefix(final, st.sent) && len(final) > len(st.sent) {
		opts = append(opts, slack.MsgOptionMarkdownText(final[len(st.sent):]))
	}
	err := p.call(ctx, st.team, "chat.stopStream", func(ctx context.Context, c *slack.Client) error {
		_, _, err := c.StopStreamContext(ctx, k.channel, st.ts, opts...)
		return err
	})
	p.streams.sealed.Add(sealKey{k, st.draft}, st.ts)
	if err != nil {
		p.log.Debug("slack chat.stopStream failed; Slack ends the stream by itself", "err", p.errorText(err))
		return st.ts, err
	}
	return st.ts, nil
}

// sealByContent seals the tenant's open stream in the chat when content
// is its final text (extends what was streamed): the stream is the reply,
// so a send must not post it again. ok is false when there is no such
// stream.
func (p *Platform) sealByContent(ctx context.Context, tenant string, t target, a *contract.Action) (contract.Result, bool) {
	k := streamKey{tenant, t.channel}
	st := p.streams.current(k)
	if st == nil {
		return contract.Result{}, false
	}
	text := cutCursor(a.Content)
	st.mu.Lock()
	extends := st.sent != "" && strings.HasPrefix(text, st.sent)
	st.mu.Unlock()
	if !extends {
		return contract.Result{}, false
	}
	ts, err := p.seal(ctx, k, st, text)
	if err != nil {
		return contract.Result{}, false // post it normally; Slack ends the stream
	}
	return contract.OK(ts), true
}
