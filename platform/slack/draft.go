package slack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/loglimit"
	"connector/platform"
	"connector/platform/chatorder"
	"connector/store"
	"connector/vault"
)

// This file streams drafts with Slack's native message streaming
// (chat.startStream, chat.appendStream, chat.stopStream), as the native
// adapter's send_draft does; docs/contract.md says what a gateway sees. A
// stream is the reply itself, and not this instance's: a gateway that
// reconnects goes on with its draft on any instance, so a stream's state
// is kept in the store (platform.Deps.Store), written at every frame and
// read at the next. Frames of one stream on one instance run one at a
// time; a first frame and a seal hold a claim while they are sent
// (claimFrame), so a copy reaching another instance meanwhile waits for
// it, never opening a second message; later frames hold none, so two
// instances racing on one may append it twice or fail it. A record
// written for an earlier tenant of its tenant's id (earlierRecord) is
// none.

// streamTTL is how long a stream's record lasts after its last frame, and
// a seal's (so a repeated seal answers the same message). Slack ends a
// stream left open by itself.
const streamTTL = 10 * time.Minute

// localStreams bounds the stream records kept in process memory without a
// store.
const localStreams = 10_000

// streamCursors are the cursor glyphs a streaming consumer may end a
// frame with; the API appends only, so they are cut.
var streamCursors = []string{"\u2589", "▍", "▌", "…"}

// streamKey is one tenant's stream in one chat.
type streamKey struct {
	tenant, channel string
}

// stream is the record of one native stream.
type stream struct {
	Draft int64 `json:"draft"`
	// Turn is the turn the stream answers (contract.Metadata.Turn of its
	// first frame); "" in records written before it was kept.
	Turn string `json:"turn,omitempty"`
	Team string `json:"team"`
	TS   string `json:"ts"`   // the message
	Sent int    `json:"sent"` // bytes of text streamed so far
	// Digest is the hex SHA-256 of the text streamed so far.
	Digest string `json:"digest"`
	// Done is set once the stream is sealed (or abandoned): a new frame
	// starts another.
	Done bool `json:"done,omitempty"`
	// At is when the record was written, in Unix microseconds (zero in
	// records written before it was kept, which count).
	At int64 `json:"at,omitempty"`
	// Created is the tenant's creation then (creation; 0: none, or not kept).
	Created int64 `json:"c,omitempty"`
}

// sealRecord is the record of a sealed draft.
type sealRecord struct {
	TS string `json:"ts"` // the message ("" for a reply that has none)
	// At is when the draft was sealed, in Unix microseconds. A record
	// stored before it was kept is the message's ts alone, and counts.
	At int64 `json:"at"`
	// Created is the tenant's creation then (creation; 0: none, or not kept).
	Created int64 `json:"c,omitempty"`
	// Turn is the turn of the seal (contract.Metadata.Turn); "" in records
	// stored before it was kept.
	Turn string `json:"turn,omitempty"`
}

// repeatedBy reports whether seal a repeats the seal rec records: only a
// seal of the same turn does. A gateway that restarts numbers its streams
// from 1 again, so a new stream of another turn names the draft_id of one
// sealed a moment before in the chat; it is a stream of its own. A record
// stored before the turn was kept is repeated only by a seal naming none.
func (rec sealRecord) repeatedBy(a *contract.Action) bool {
	return rec.Turn == a.Metadata.Turn()
}

// otherTurn reports whether frame a is of another turn than the stream,
// both naming one: a new stream reusing the draft_id of one the gateway
// left open when it restarted (it numbers its streams from 1 again).
func (st *stream) otherTurn(a *contract.Action) bool {
	turn := a.Metadata.Turn()
	return st.Turn != "" && turn != "" && st.Turn != turn
}

// extendedBy reports whether text begins with what was streamed.
func (st *stream) extendedBy(text string) bool {
	return len(text) >= st.Sent && digest(text[:st.Sent]) == st.Digest
}

// digest is the hex SHA-256 of text.
func digest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

// streams are the stream records, in the store (or process memory), and
// the turns of each tenant's chat on this instance.
type streams struct {
	state store.Capabilities
	clock clock.Clock
	// turns orders each tenant's chat's frames and sends on this
	// instance, a frame's waits for a claim included (draft).
	turns *chatorder.Queue[streamKey]
	// vault judges whether a record was written for an earlier tenant of
	// its tenant's id (vault.Predates); nil judges none so.
	vault vault.Store
}

// predates reports whether a record of k written at at under created
// (Unix microseconds; zero: not known) was written for an earlier tenant
// of k's tenant id, deleted since (earlierRecord).
func (s *streams) predates(k streamKey, at, created int64) bool {
	return at != 0 && earlierRecord(s.vault, k.tenant, at, created)
}

func (k streamKey) stateKey() string { return "slack/stream/" + k.tenant + "/" + k.channel }

func (k streamKey) sealKey(draft int64) string {
	return k.stateKey() + "/sealed/" + strconv.FormatInt(draft, 10)
}

// load returns k's stream record; ok is false when there is none (or it
// is an earlier tenant's of the id).
func (s *streams) load(ctx context.Context, k streamKey) (st stream, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	raw, ok, err := s.state.Get(ctx, k.stateKey())
	if err != nil || !ok {
		return stream{}, false, err
	}
	if err := json.Unmarshal(raw, &st); err != nil || st.Sent < 0 {
		return stream{}, false, errors.New("slack: unreadable stream record")
	}
	if s.predates(k, st.At, st.Created) {
		return stream{}, false, nil
	}
	return st, true, nil
}

// save stores k's stream record for streamTTL.
func (s *streams) save(ctx context.Context, k streamKey, st *stream) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	now := s.clock.Now()
	st.At, st.Created = now.UnixMicro(), creation(ctx, s.vault, k.tenant)
	raw, _ := json.Marshal(st) // plain fields: cannot fail
	return s.state.Put(ctx, k.stateKey(), raw, now.Add(streamTTL))
}

// sealed returns the record of k's sealed draft; ok is false when it was
// not sealed lately (or by an earlier tenant of the id).
func (s *streams) sealed(ctx context.Context, k streamKey, draft int64) (sealRecord, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	raw, ok, err := s.state.Get(ctx, k.sealKey(draft))
	if err != nil || !ok {
		return sealRecord{}, false, err
	}
	var rec sealRecord
	if !strings.HasPrefix(string(raw), "{") || json.Unmarshal(raw, &rec) != nil {
		return sealRecord{TS: string(raw)}, true, nil // stored before records were stamped: the ts alone
	}
	if s.predates(k, rec.At, rec.Created) {
		return sealRecord{}, false, nil
	}
	return rec, true, nil
}

// seal records k's draft as sealed for turn as message ts ("" for a
// reply that has no message: a slash command's).
func (s *streams) seal(ctx context.Context, k streamKey, draft int64, turn, ts string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	now := s.clock.Now()
	raw, _ := json.Marshal(sealRecord{TS: ts, At: now.UnixMicro(), Created: creation(ctx, s.vault, k.tenant), Turn: turn}) // plain fields: cannot fail
	return s.state.Put(ctx, k.sealKey(draft), raw, now.Add(streamTTL))
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

// draft streams one frame, or seals the stream with final, in k's turn
// on this instance. A frame whose claim another copy of it holds
// (claimFrame) waits in its turn, so the tenant's later frames and sends
// into the chat wait behind it (a send that is the stream's final text
// then seals the stream its copy started: sealByContent), and looks
// again every sealPoll for the record that copy leaves, then runs again
// and finds it, or takes the claim once it is released (that copy sent
// nothing) or lapsed (its instance died). One still waiting at its
// deadline fails, retryable.
func (p *Platform) draft(ctx context.Context, tenant string, t target, a *contract.Action) contract.Result {
	switch {
	case a.DraftID == 0:
		return contract.Failed(contract.CodeBadRequest, "slack draft: draft_id must be a non-zero integer")
	case strings.TrimSpace(a.Content) == "":
		return contract.Failed(contract.CodeBadRequest, "slack draft: content is empty")
	}
	k := streamKey{tenant, t.channel}
	var r contract.Result
	err := p.streams.turns.Do(ctx, k, func() (err error) {
		for again := true; again && err == nil; {
			r, again, err = p.frame(ctx, tenant, t, a, k)
		}
		return err
	})
	if err != nil {
		return p.failure(contract.OpDraft, err)
	}
	return r
}

// frame is draft in k's turn; again when the record of another copy of
// it, whose claim it waited for, was found: run it again.
func (p *Platform) frame(ctx context.Context, tenant string, t target, a *contract.Action, k streamKey) (r contract.Result, again bool, err error) {
	kept := true // the record of a stream started here was stored
	if a.Final {
		if answer, done := p.resealed(ctx, k, a); done {
			return answer, false, nil
		}
		claim, again, err := p.claimFrame(ctx, "sealing", k, a)
		if again || err != nil {
			return r, again, err
		}
		defer func() { p.releaseSeal(ctx, k, a, claim, r) }()
	}
	text := cutCursor(a.Content)
	st, open, err := p.streams.load(ctx, k)
	switch {
	case err != nil:
		return p.streamUnreadable(err), false, nil
	case open && st.sealedBy(a):
		return contract.OK(st.TS), false, nil
	}
	open = open && !st.Done
	mine := open && st.Draft == a.DraftID && !st.otherTurn(a)
	if !mine && !a.Final { // a seal checked already
		if answer, done := p.resealed(ctx, k, a); done {
			return answer, false, nil
		}
	}
	if open && !mine {
		p.seal(ctx, k, &st, st.Turn, "")
		open = false
	}
	if !open {
		// The first frame holds the claim while it starts the stream (or,
		// a seal, sends the reply), so a copy of it that reaches another
		// instance meanwhile goes on with that stream once it is recorded.
		claim, again, err := p.claimFrame(ctx, "opening", k, a)
		if again || err != nil {
			return r, again, err
		}
		defer func() {
			if !r.Success && r.MessageID == "" || !kept { // nothing sent, or no record a resend finds: it sends
				p.releaseFrame(claim)
			}
		}()
	}
	switch {
	case !open && a.Final:
		// Nothing was streamed: the content is sent as the reply (to a
		// slash command, privately).
		r, ok := p.slashReply(ctx, tenant, t, a)
		if !ok {
			r = p.post(ctx, tenant, t, a)
		}
		if r.Success || r.MessageID != "" {
			p.streamNotKept(p.streams.seal(ctx, k, a.DraftID, a.Metadata.Turn(), r.MessageID))
		}
		return r, false, nil
	case !open:
		r, kept = p.startStream(ctx, tenant, t, a, k, text)
		return r, false, nil
	case a.Final:
		ts, err := p.seal(ctx, k, &st, a.Metadata.Turn(), text)
		if err != nil {
			return p.failure(contract.OpDraft, err), false, nil
		}
		return contract.OK(ts), false, nil
	}
	return p.appendStream(ctx, t, k, &st, text), false, nil
}

// sealPoll is how often a frame waiting for another copy's claim
// (claimFrame) looks for its record.
const sealPoll = 250 * time.Millisecond

// claimFrame takes the claim, named by kind ("sealing", "opening"), of
// seal or first frame a of k's stream for this instance while it is sent,
// until the request's deadline, then its record (nil: not taken, the
// store did not answer; logged, and the frame sent as without a claim).
// Its caller has found no record of another copy of the frame. While such
// a copy (the gateway reconnected, to any instance) holds the claim, it
// waits (platform.AwaitClaim), looking every sealPoll for the record that
// copy leaves (recorded): again once found, platform.ErrClaimHeld at the
// deadline. The key names the tenant as created, so no copy waits for an
// earlier tenant's of its id.
func (p *Platform) claimFrame(ctx context.Context, kind string, k streamKey, a *contract.Action) (c *platform.Claim, again bool, err error) {
	key := "slack/" + kind + "/" + k.tenant + "/" + strconv.FormatInt(creation(ctx, p.streams.vault, k.tenant), 10) + "/" + k.channel + "/" +
		strconv.FormatInt(a.DraftID, 10) + "/" + a.Metadata.Turn()
	c, err = platform.AwaitClaim(ctx, p.claims, p.clock, key, func() time.Time {
		return platform.LatestStart(ctx, p.clock, p.cfg.RequestTimeout, 0).Add(p.cfg.RequestTimeout)
	}, sealPoll, func() bool { again = p.recorded(ctx, kind, k, a); return again })
	switch {
	case errors.Is(err, platform.ErrClaimHeld):
		return nil, false, err
	case err != nil:
		p.storeWarn("slack draft frame not claimed", "err", err)
	}
	return c, again, nil
}

// recorded reports whether the record another copy of frame a left is
// stored: a's seal, or, for an opening frame, a's stream (a stream sealed
// without a seal record answers a seal only once it holds the claim).
func (p *Platform) recorded(ctx context.Context, kind string, k streamKey, a *contract.Action) bool {
	if kind == "opening" {
		if st, ok, _ := p.streams.load(ctx, k); ok && st.Draft == a.DraftID && !st.otherTurn(a) {
			return true
		}
	}
	rec, ok, _ := p.streams.sealed(ctx, k, a.DraftID)
	return ok && rec.repeatedBy(a)
}

// resealed answers frame a (done) when its draft and turn were sealed
// lately in k's chat (sealRecord.repeatedBy): a resent seal answers its
// message, and a frame straggling behind its seal shows nothing.
func (p *Platform) resealed(ctx context.Context, k streamKey, a *contract.Action) (contract.Result, bool) {
	switch rec, ok, err := p.streams.sealed(ctx, k, a.DraftID); {
	case err != nil:
		return p.streamUnreadable(err), true
	case ok && rec.repeatedBy(a):
		return contract.OK(rec.TS), true
	}
	return contract.Result{}, false
}

// sealedBy reports whether st is the record of frame a's stream, sealed:
// as resealed, when the seal's own record was not stored.
func (st *stream) sealedBy(a *contract.Action) bool {
	return st.Done && st.Draft == a.DraftID && st.Turn == a.Metadata.Turn()
}

// releaseFrame gives up claim c (claimFrame): a copy waiting for it sends.
func (p *Platform) releaseFrame(c *platform.Claim) {
	if err := c.Release(storeTimeout); err != nil {
		p.storeWarn("slack draft frame claim not released; a resend of the frame waits for it to lapse", "err", err)
	}
}

// releaseSeal gives up claim c of seal a of k's stream (claimFrame), when
// the seal failed with no record stored: a resend then seals. A claim
// whose seal has a record (or may have: it succeeded) is left to lapse,
// so no resend seals twice.
func (p *Platform) releaseSeal(ctx context.Context, k streamKey, a *contract.Action, c *platform.Claim, r contract.Result) {
	if c == nil || r.Success {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if rec, ok, err := p.streams.sealed(ctx, k, a.DraftID); err != nil || ok && rec.repeatedBy(a) {
		return
	}
	p.releaseFrame(c)
}

// startStream starts a stream in the action's thread with text; kept is
// false when the stream started but its record was not stored.
func (p *Platform) startStream(ctx context.Context, tenant string, t target, a *contract.Action, k streamKey, text string) (r contract.Result, kept bool) {
	thread := p.threadOf(tenant, a)
	if thread == "" {
		return contract.Failed(contract.CodeBadRequest, "slack draft: Slack streams only into a thread (metadata.thread_id)"), true
	}
	opts := []slack.MsgOption{slack.MsgOptionTS(thread), slack.MsgOptionMarkdownText(text), slack.MsgOptionRecipientTeamID(t.team)}
	if u := string(a.Metadata.UserID); u != "" {
		opts = append(opts, slack.MsgOptionRecipientUserID(u))
	}
	st := stream{Draft: a.DraftID, Turn: a.Metadata.Turn(), Team: t.team, Sent: len(text), Digest: digest(text)}
	err := p.callIn(ctx, t.team, t.channel, "chat.startStream", func(ctx context.Context, c *slack.Client) (err error) {
		_, st.TS, err = c.StartStreamContext(ctx, t.channel, opts...)
		return err
	})
	if err != nil {
		return p.failure(contract.OpDraft, err), true
	}
	err = p.streams.save(ctx, k, &st)
	p.streamNotKept(err)
	p.markerNotKept(p.memory.sent(context.WithoutCancel(ctx), tenant, t.team, t.channel, st.TS, thread))
	return contract.OK(st.TS), err == nil
}

// appendStream appends what text adds to the stream. A frame that does
// not extend what was streamed (the text was rewritten) seals the stream
// and fails, so the gateway streams by editing instead, as natively.
func (p *Platform) appendStream(ctx context.Context, t target, k streamKey, st *stream, text string) contract.Result {
	if !st.extendedBy(text) {
		p.seal(ctx, k, st, st.Turn, "")
		return contract.Failed(contract.CodeBadRequest, "slack draft: the frame does not extend the streamed text; the stream was sealed")
	}
	if len(text) == st.Sent {
		return contract.OK(st.TS)
	}
	delta := text[st.Sent:]
	err := p.callIn(ctx, t.team, t.channel, "chat.appendStream", func(ctx context.Context, c *slack.Client) error {
		_, _, err := c.AppendStreamContext(ctx, t.channel, st.TS, slack.MsgOptionMarkdownText(delta))
		return err
	})
	if err != nil {
		return p.failure(contract.OpDraft, err)
	}
	st.Sent, st.Digest = len(text), digest(text)
	p.streamNotKept(p.streams.save(ctx, k, st))
	return contract.OK(st.TS)
}

// seal stops st, with what final adds to the streamed text (nothing when
// it does not extend it), records it as sealed for turn (a retried seal of
// that turn answers the same: sealRecord.repeatedBy) and returns its
// message. A stop Slack did not take (rate limited past the deadline)
// leaves the stream open, for a retried seal to stop.
func (p *Platform) seal(ctx context.Context, k streamKey, st *stream, turn, final string) (string, error) {
	var opts []slack.MsgOption
	if final != "" && len(final) > st.Sent && st.extendedBy(final) {
		opts = append(opts, slack.MsgOptionMarkdownText(final[st.Sent:]))
	}
	err := p.callIn(ctx, st.Team, k.channel, "chat.stopStream", func(ctx context.Context, c *slack.Client) error {
		_, _, err := c.StopStreamContext(ctx, k.channel, st.TS, opts...)
		return err
	})
	if limited := (*platform.RateLimitedError)(nil); errors.As(err, &limited) {
		return st.TS, err
	}
	st.Done = true
	p.streamNotKept(p.streams.save(ctx, k, st))
	p.streamNotKept(p.streams.seal(ctx, k, st.Draft, turn, st.TS))
	if err != nil {
		p.log.Debug("slack chat.stopStream failed; Slack ends the stream by itself", "err", p.errorText(err))
		return st.TS, err
	}
	return st.TS, nil
}

// sealByContent seals the tenant's open stream in the chat when content
// is its final text (extends what was streamed) and the send answers no
// other turn (stream.otherTurn): the stream is the reply, so a send must
// not post it again. ok is false when there is no such stream.
func (p *Platform) sealByContent(ctx context.Context, tenant string, t target, a *contract.Action) (contract.Result, bool) {
	k := streamKey{tenant, t.channel}
	var r contract.Result
	// A send that waited out its turn is posted (and fails: its deadline passed).
	_ = p.streams.turns.Do(ctx, k, func() error {
		st, open, err := p.streams.load(ctx, k)
		if err != nil || !open || st.Done || st.Sent == 0 || st.otherTurn(a) {
			return nil
		}
		text := cutCursor(a.Content)
		if !st.extendedBy(text) {
			return nil
		}
		if ts, err := p.seal(ctx, k, &st, st.Turn, text); err == nil { // else posted normally; Slack ends the stream
			r = contract.OK(ts)
		}
		return nil
	})
	return r, r.Success
}

// storeLogRate bounds the warnings of a store that cannot be read or
// written (storeWarn): while it is down every frame would log one; and
// those of the full intake (admit), every request past it.
var storeLogRate = loglimit.Rate{Burst: 3, Every: time.Minute}

// storeWarn logs a store failure of a draft stream, within storeLogRate.
func (p *Platform) storeWarn(msg string, args ...any) {
	p.storeLogs.Log(p.log, slog.LevelWarn, msg, args...)
}

// streamUnreadable answers a frame whose stream record the store did not
// give: retryable, nothing was posted.
func (p *Platform) streamUnreadable(err error) contract.Result {
	p.storeWarn("slack stream record not read", "err", err)
	return contract.Failed(contract.CodeUnavailable, "slack draft: the stream's state could not be read; retry")
}

// streamNotKept logs a stream record the store did not keep: a frame that
// lands on another instance then starts another message.
func (p *Platform) streamNotKept(err error) {
	if err != nil {
		p.storeWarn("slack stream record not stored", "err", err)
	}
}
