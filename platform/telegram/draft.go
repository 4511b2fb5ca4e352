package telegram

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"connector/contract"
	"connector/internal/loglimit"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/platform/fairshare"
	"connector/vault"
)

// sealedDrafts bounds Platform.sealed, this instance's record of the
// message each sealed draft stream became, so a repeated seal (the gateway
// retries an ambiguous one once) answers the same message id and sends
// nothing; the least recently sealed stream is forgotten first. The
// gateway keeps the same number of sealed streams per process. It also
// bounds Platform.previews, the open streams of group chats, and
// Platform.drafts, the draft ids sent to private chats (wireDraftID).
const sealedDrafts = 512

// sealRetryWindow is how long a sealed stream answers a repeated seal
// (sealedDraft). The gateway retries an ambiguous seal once, after its 30 s
// wait for the result (or a reconnect, backed off up to 30 s); but it
// numbers its streams from 1 in each process, so after a restart it names
// draft ids it sealed before in the same chat, and such a seal must become
// a message of its own. It is also how long the store keeps a seal's
// record (Platform.seals).
const sealRetryWindow = 5 * time.Minute

// sealedDraft is the message a draft stream was sealed as (Platform.sealed,
// and JSON in Platform.seals). Only a seal of the same content within
// sealRetryWindow, of the same turn, is its repeat; any other starts the
// stream anew. Only a frame of the same turn is a late one (sealedStream).
// One an earlier tenant of the id made is none (vault.Outdated: the
// creations are compared, not clocks; a tenant declared in the YAML over
// its stored one is the same tenant, also on an instance that has not
// applied the declaration yet, where a seal made without a creation is
// judged by its time).
type sealedDraft struct {
	ID      string    `json:"id"`             // the message (its first part)
	At      time.Time `json:"at"`             // when it was sealed
	Sum     uint64    `json:"sum"`            // contentSum of the sealed content
	Turn    string    `json:"turn,omitempty"` // contract.Metadata.Turn of the seal
	Created time.Time `json:"c,omitzero"`     // the tenant's creation as the seal was authorized (platform.AuthorizedCreation)
}

// contentSum is the digest of a seal's content that tells a repeated seal
// from a new stream under a reused draft_id.
func contentSum(content string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(content))
	return h.Sum64()
}

// recent reports whether s, a seal of stream k, was sealed within
// sealRetryWindow, by the tenant as it is now.
func (p *Platform) recent(k draftKey, s sealedDraft) bool {
	return p.deps.Clock.Now().Sub(s.At) < sealRetryWindow && !vault.Outdated(p.deps.Vault, k.tenant, s.At, s.Created)
}

// recentSeal is stream k's seal on this instance, when it was sealed
// within sealRetryWindow (recent).
func (p *Platform) recentSeal(k draftKey) (sealedDraft, bool) {
	s, ok := p.sealed.Get(k)
	return s, ok && p.recent(k, s)
}

// resealedHere is the message a repeated seal a of stream k answers, if it
// repeats a seal made on this instance.
func (p *Platform) resealedHere(k draftKey, a *contract.Action) (string, bool) {
	s, ok := p.recentSeal(k)
	return s.ID, ok && s.repeatedBy(a)
}

// repeatedBy reports whether seal a repeats s: the same content, of the
// same turn (a new stream reusing the draft_id may say the same).
func (s sealedDraft) repeatedBy(a *contract.Action) bool {
	return s.Sum == contentSum(a.Content) && s.Turn == a.Metadata.Turn()
}

// storedSeal is stream k's seal within sealRetryWindow as the store holds
// it, made on any instance; one found is remembered here too. A record the
// store cannot give is logged and taken as none: the seal is sent, as it
// was before any instance shared it.
func (p *Platform) storedSeal(ctx context.Context, k draftKey) (s sealedDraft, ok bool) {
	if ok, _ := p.storedRecord(ctx, k.sealKey(), "seal", &s, "chat_id", k.chat, "draft_id", k.draft); !ok || !p.recent(k, s) {
		return sealedDraft{}, false
	}
	p.sealed.Add(k, s)
	return s, true
}

// storedRecord reads a draft stream's JSON record under key into v,
// written by any instance; ok is false when the store has none (or there
// is no store) or it is unreadable. A record the store cannot give is
// logged, naming what, with the fields in named (those that name the
// record), and answers err.
func (p *Platform) storedRecord(ctx context.Context, key, what string, v any, named ...any) (ok bool, err error) {
	if p.seals == nil {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	raw, ok, err := p.seals.Get(ctx, key)
	if err != nil {
		p.storeWarn("telegram draft "+what+" not read from the store", append(named, "err", err)...)
		return false, err
	}
	return ok && json.Unmarshal(raw, v) == nil, nil
}

// sealedStream reports whether frame a is a late one of stream k: the
// stream was sealed within sealRetryWindow, for a's turn, on this instance
// or on any sharing the store. A late frame shows nothing; a frame of
// another turn is of a new stream reusing the draft_id (the gateway
// restarted).
func (p *Platform) sealedStream(ctx context.Context, k draftKey, a *contract.Action) bool {
	if s, ok := p.recentSeal(k); ok && s.Turn == a.Metadata.Turn() {
		return true
	}
	s, ok := p.storedSeal(ctx, k)
	return ok && s.Turn == a.Metadata.Turn()
}

// seal records that stream k, sealing a, became message id: on this
// instance, and for sealRetryWindow in the store when there is one (a
// failure is logged: only a retry reaching another instance sends again).
func (p *Platform) seal(ctx context.Context, k draftKey, a *contract.Action, id string) (stored bool) {
	s := sealedDraft{ID: id, At: p.deps.Clock.Now(), Sum: contentSum(a.Content), Turn: a.Metadata.Turn(), Created: platform.AuthorizedCreation(ctx, p.deps.Vault, k.tenant)}
	p.sealed.Add(k, s)
	if p.seals == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RequestTimeout)
	defer cancel()
	raw, _ := json.Marshal(s) // plain fields: cannot fail
	if err := p.seals.Put(ctx, k.sealKey(), raw, s.At.Add(sealRetryWindow)); err != nil {
		p.storeWarn("telegram draft seal not stored", "chat_id", k.chat, "draft_id", k.draft, "err", err)
		return false
	}
	return true
}

// sealPoll is how often a seal waiting for another instance's send of it
// (claimSeal) looks for its record.
const sealPoll = 250 * time.Millisecond

// sealingKey is the store claim of seal a of stream k being sent: the
// same content and turn, as a repeat has (repeatedBy), by the tenant as
// created (in Unix nanoseconds, 0 for a declared tenant), so the seal of
// a tenant made again under its id waits for none of the earlier one's.
func (p *Platform) sealingKey(k draftKey, a *contract.Action) string {
	var created int64
	if c := vault.Creation(p.deps.Vault, k.tenant); !c.IsZero() {
		created = c.UnixNano()
	}
	return "telegram/sealing/" + k.tenant + "/" + strconv.FormatInt(created, 10) + "/" + strconv.FormatInt(k.chat, 10) + "/" + strconv.FormatInt(k.draft, 10) +
		"/" + strconv.FormatUint(contentSum(a.Content), 16) + "/" + a.Metadata.Turn()
}

// claimSeal takes seal a of stream k for this instance while it is sent
// (platform.AwaitClaim), when several instances share the store
// (Platform.claims): a retry of it that reaches another instance
// meanwhile (the gateway reconnected there) waits for the seal's record
// and answers its message (id), and sends it itself only once the claim
// is released (the send failed) or lapsed (the instance died); one still
// waiting at its deadline fails, retryable. The claim (nil when none was
// taken) is for releaseSeal. A claim the store cannot give is logged and
// the seal sent, as without one.
func (p *Platform) claimSeal(ctx context.Context, k draftKey, a *contract.Action) (c *platform.Claim, id string, err error) {
	if p.claims == nil {
		return nil, "", nil
	}
	key := p.sealingKey(k, a)
	if !p.awaitRelease(ctx, key) {
		return nil, "", platform.ErrClaimHeld
	}
	// The send, until the request's deadline (wall-clock time, here on the
	// platform's clock, which the store's claims are judged on), then the
	// record (seal).
	c, err = platform.AwaitClaim(ctx, p.claims, p.deps.Clock, key, func() time.Time {
		return platform.LatestStart(ctx, p.deps.Clock, p.cfg.RequestTimeout, 0).Add(p.cfg.RequestTimeout)
	}, sealPoll, func() bool {
		s, ok := p.storedSeal(ctx, k)
		if ok && s.repeatedBy(a) {
			id = s.ID
		}
		return id != ""
	})
	if err != nil && !errors.Is(err, platform.ErrClaimHeld) {
		p.storeWarn("telegram draft seal not claimed", "chat_id", k.chat, "draft_id", k.draft, "err", err)
		return nil, "", nil
	}
	return c, id, err
}

// releaseSeal gives up claim c of seal a of stream k (claimSeal) whose
// record is not stored (a waiting retry would find it): a retry then
// sends the seal. sealDraft does so after its answer (afterAnswer); a
// retry on this instance waits for it (awaitRelease), not for its next
// look, from before the answer.
func (p *Platform) releaseSeal(k draftKey, a *contract.Action, c *platform.Claim) {
	key, ch := p.sealingKey(k, a), make(chan struct{})
	p.releasesMu.Lock()
	p.releases[key] = ch // one of a claim that lapsed meanwhile wakes its own waiters
	p.releasesMu.Unlock()
	release := func() {
		if err := c.Release(p.cfg.RequestTimeout); err != nil {
			p.storeWarn("telegram draft seal claim not released", "chat_id", k.chat, "draft_id", k.draft, "err", err)
		}
		p.releasesMu.Lock()
		if p.releases[key] == ch {
			delete(p.releases, key)
		}
		p.releasesMu.Unlock()
		close(ch)
	}
	if !p.afterAnswer(k.tenant, release) {
		release()
	}
}

// awaitRelease waits for this instance's release of seal claim key
// (releaseSeal), if one is under way; false when ctx ended first.
func (p *Platform) awaitRelease(ctx context.Context, key string) bool {
	p.releasesMu.Lock()
	ch := p.releases[key]
	p.releasesMu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// storeLogRate bounds the warnings of a store that cannot be read or
// written (storeWarn): while it is down every frame would log one.
var storeLogRate = loglimit.Rate{Burst: 3, Every: time.Minute}

// storeWarn logs a store failure of a draft stream, within storeLogRate.
func (p *Platform) storeWarn(msg string, args ...any) {
	p.storeLogs.Log(p.log, slog.LevelWarn, msg, args...)
}

// draftKey names one draft stream of a tenant's chat. Its seals and
// previews keep the tenant's creation, so a tenant made again under its
// id, even by an instance whose clock disagrees, never takes up those of
// the earlier one (vault.Outdated).
type draftKey struct {
	tenant string
	chat   int64
	draft  int64
}

// stream is k as the store keys name it: tenant, chat, draft_id.
func (k draftKey) stream() string {
	return k.tenant + "/" + strconv.FormatInt(k.chat, 10) + "/" + strconv.FormatInt(k.draft, 10)
}

// sealKey is the store key of stream k's seal record.
func (k draftKey) sealKey() string { return "telegram/seal/" + k.stream() }

// previewWindow is how long the store keeps the record of a group
// stream's preview (storedPreview): longer than a stream lasts, so the
// instance a gateway reconnects to mid-stream finds it, and one that
// showed the preview finds it sealed when it would replace it.
const previewWindow = 24 * time.Hour

// previewRecord is the store's record of a group stream's preview message
// (JSON under previewKey), shared by the instances so the stream's frames
// and seal edit it whichever instance they reach.
type previewRecord struct {
	ID      int       `json:"id"`               // the message
	Sealed  bool      `json:"sealed,omitempty"` // it became the stream's reply
	Created time.Time `json:"c,omitzero"`       // the tenant's creation when it was shown (vault.Outdated)
	At      time.Time `json:"at,omitzero"`      // when it was stored, which judges a record without a creation
}

// previewKey is the store key of the preview record of stream k's turn:
// the gateway reuses draft ids after a restart, never within a turn.
func (k draftKey) previewKey(turn string) string {
	return "telegram/preview/" + k.stream() + "/" + turn
}

// turnPreviewKey is the store key naming the draft stream that shows a
// preview for tenant's turn in a group chat's topic (thread), so a send of
// the turn finds the preview on any instance (replacePreviews): the
// gateway keys a stream by its turn, and a send carries no draft_id.
func turnPreviewKey(tenant string, chat int64, thread int, turn string) string {
	return "telegram/preview-turn/" + tenant + "/" + strconv.FormatInt(chat, 10) + "/" + strconv.Itoa(thread) + "/" + turn
}

// topicPreviewsKey is the store key listing the turns of tenant's open
// previews in a group chat's topic (topicTurns, the latest topicTurns
// kept), so a send naming no turn, which ends every open stream of the
// topic, finds their previews on any instance (replacePreviews). The
// previews an earlier tenant of the id listed stay as they are: their
// records are not the tenant's (storedPreview).
func topicPreviewsKey(tenant string, chat int64, thread int) string {
	return "telegram/preview-topic/" + tenant + "/" + strconv.FormatInt(chat, 10) + "/" + strconv.Itoa(thread)
}

// topicTurns bounds the turns topicPreviewsKey lists: the gateway streams
// a few replies of a topic at once, not more.
const topicTurns = 16

// storedPreview is the preview record of stream k's turn as the store
// holds it, written by any instance; ok is false when there is none (or no
// store). A record the store cannot give is logged and answers err.
func (p *Platform) storedPreview(ctx context.Context, k draftKey, turn string) (r previewRecord, ok bool, err error) {
	if ok, err = p.storedRecord(ctx, k.previewKey(turn), "preview", &r, "chat_id", k.chat, "draft_id", k.draft, "turn", turn); !ok || r.ID == 0 || vault.Outdated(p.deps.Vault, k.tenant, r.At, r.Created) {
		return previewRecord{}, false, err
	}
	return r, true, nil
}

// storePreview records pv, stream k's preview (locked), in the store for
// previewWindow when there is one; sealed marks it the stream's reply, and
// an open one of a turn is named for the turn (turnPreviewKey). A failure
// is logged: only an instance without the record misses it. A preview of
// an earlier tenant of the id (a frame that outlived it) is not recorded:
// no one reads its record, and it would replace the new tenant's.
func (p *Platform) storePreview(ctx context.Context, k draftKey, pv *preview, sealed bool) {
	if p.seals == nil || vault.Outdated(p.deps.Vault, k.tenant, pv.at, pv.created) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RequestTimeout)
	defer cancel()
	raw, _ := json.Marshal(previewRecord{ID: pv.id, Sealed: sealed, Created: pv.created, At: p.deps.Clock.Now()}) // plain fields: cannot fail
	expires := p.deps.Clock.Now().Add(previewWindow)
	err := p.seals.Put(ctx, k.previewKey(pv.turn), raw, expires)
	if err == nil && !sealed && pv.turn != "" {
		err = p.seals.Put(ctx, turnPreviewKey(k.tenant, k.chat, pv.thread, pv.turn), strconv.AppendInt(nil, k.draft, 10), expires)
	}
	if err != nil {
		p.storeWarn("telegram draft preview not stored", "chat_id", k.chat, "draft_id", k.draft, "err", err)
		return
	}
	if !sealed && pv.turn != "" {
		if err := p.listTopicTurn(ctx, topicPreviewsKey(k.tenant, k.chat, pv.thread), pv.turn, expires); err != nil {
			p.storeWarn("telegram topic's preview list not stored", "chat_id", k.chat, "draft_id", k.draft, "err", err)
		}
	}
}

// listTopicTurn adds turn to the turns the store lists under key
// (topicPreviewsKey), dropping the oldest past topicTurns. Instances adding
// to one topic's list at once may lose a turn: its preview then stays when
// a send naming no turn reaches an instance none of its frames reached.
func (p *Platform) listTopicTurn(ctx context.Context, key, turn string, expires time.Time) error {
	raw, _, err := p.seals.Get(ctx, key)
	if err != nil {
		return err
	}
	var turns []string
	_ = json.Unmarshal(raw, &turns) // none, or unreadable: a new list
	turns = append(slices.DeleteFunc(turns, func(t string) bool { return t == turn }), turn)
	raw, _ = json.Marshal(turns[max(0, len(turns)-topicTurns):]) // strings: cannot fail
	return p.seals.Put(ctx, key, raw, expires)
}

// adoptPreview takes up the preview another instance showed for stream
// k's turn (its record in the store, not sealed) as pv's, locked, so the
// stream goes on editing it after the gateway reconnected here, unless
// it was shown under another creation of the tenant than pv's (a frame
// that outlived its tenant finds the new one's). The store is asked once
// per preview this instance remembers.
func (p *Platform) adoptPreview(ctx context.Context, k draftKey, pv *preview) {
	if pv.asked {
		return
	}
	pv.asked = true
	if r, ok, _ := p.storedPreview(ctx, k, pv.turn); ok && !r.Sealed && (r.Created.IsZero() || pv.created.IsZero() || r.Created.UnixMicro() == pv.created.UnixMicro()) {
		pv.id = r.ID
	}
}

// wireDraft names a draft id Telegram was sent in a private chat.
type wireDraft struct {
	chat int64
	id   int64
}

// wireDraftID is the draft_id sendMessageDraft carries for stream k of a
// private chat. Telegram keys a native draft by chat and draft_id, and the
// DM of a user linked to several tenants is every one's (platform.Grants),
// whose gateways all pick small ids, on any instance: the DM's home tenant
// (the one its user's messages reach, platform.Ownership.Route) sends its
// ids unchanged, every other tenant an id hashed from its tenant and id
// into [2^30, 2^31), so two instances, each knowing only its own streams,
// pick distinct ids with no shared state. The hash is keyed by the bot
// token, which every instance holds and no tenant does: the home, whose
// ids go out as it names them, cannot compute another tenant's and stream
// into that tenant's draft. Platform.drafts remembers the
// holder of each id (the latest sealedDrafts, per instance): a stream
// naming an id another holds there takes the next hashed one.
func (p *Platform) wireDraftID(k draftKey) int64 {
	chat := strconv.FormatInt(k.chat, 10)
	r, _ := p.owners.Load().Route(chat, chatOf(chat))
	hashed := func(try uint64) int64 {
		h := hmac.New(sha256.New, []byte("connector telegram draft id\x00"+p.cfg.BotToken))
		h.Write([]byte(k.tenant))
		h.Write(binary.AppendVarint(binary.AppendUvarint([]byte{0}, try), k.draft))
		return 1<<30 + int64(binary.BigEndian.Uint64(h.Sum(nil))%(1<<30))
	}
	id, try := k.draft, uint64(0)
	if r.Tenant != k.tenant {
		id, try = hashed(0), 1
	}
	for ; ; try++ {
		w := wireDraft{chat: k.chat, id: id}
		holder, held, _ := p.drafts.PeekOrAdd(w, k)
		if !held || holder == k {
			p.drafts.Get(w) // the latest used is forgotten last
			return id
		}
		id = hashed(try)
	}
}

// preview is the message a draft stream of a group chat is shown in:
// Telegram streams drafts into private chats only, so elsewhere the first
// frame sends a message and later frames edit it. mu orders the frames of
// one stream and guards id, asked and done; thread, turn, created and at
// never change.
type preview struct {
	mu     sync.Mutex
	id     int    // the message; 0 until sent (or adopted), and after it was gone
	thread int    // the topic it is in
	turn   string // the turn it answers (contract.Metadata.Turn)
	// created is the tenant's creation as its frame was authorized
	// (platform.AuthorizedCreation), opened at at; one opened under
	// another is an earlier tenant's of the id (vault.Outdated).
	created, at time.Time
	asked       bool // the store was asked for the stream's preview (adoptPreview)
	// done is set once the preview left Platform.previews (sealed or
	// replaced): a frame that was waiting for it takes the stream's next
	// preview instead.
	done bool
}

// openPreview returns the preview of stream k, locked, adding one for a's
// topic and turn when there is none. An open preview of another turn, or
// of another tenant of the id than the frame's (an earlier one, or a later
// one when the frame outlived its tenant), is of a stream the gateway left
// (it restarted, or the tenant was deleted and made again under its id:
// either names draft ids from 1 again, never within a turn): it is left as
// it is, and a's stream gets a preview of its own, as the store keeps one
// per turn (previewKey).
func (p *Platform) openPreview(ctx context.Context, k draftKey, a *contract.Action) *preview {
	turn := a.Metadata.Turn()
	created := platform.AuthorizedCreation(ctx, p.deps.Vault, k.tenant)
	for {
		pv := &preview{thread: topicThread(a.Metadata.ThreadID), turn: turn, created: created, at: p.deps.Clock.Now()}
		old, found, _ := p.previews.PeekOrAdd(k, pv)
		if found {
			pv = old
		}
		pv.mu.Lock()
		if found && !pv.done && (pv.turn != turn && pv.turn != "" && turn != "" || vault.Outdated(p.deps.Vault, k.tenant, pv.at, pv.created) ||
			!pv.created.Equal(created) && !created.IsZero() && vault.Earlier(p.deps.Vault, k.tenant, created)) {
			p.closePreview(k, pv)
		}
		if !pv.done {
			return pv
		}
		pv.mu.Unlock()
	}
}

// closePreview takes pv, locked, out of Platform.previews.
func (p *Platform) closePreview(k draftKey, pv *preview) {
	pv.done = true
	p.previews.Remove(k)
}

// draft streams a preview of a reply being generated (docs/contract.md,
// "draft"): in a private chat through sendMessageDraft (showDraft, under
// wireDraftID), elsewhere in a preview message the reply replaces
// (showPreview, replacePreviews); final: true seals the stream once
// (sealDraft). A zero draft_id or blank content fails with bad_request and
// calls nothing.
func (p *Platform) draft(ctx context.Context, tenant string, chat int64, a *contract.Action) contract.Result {
	switch {
	case a.DraftID == 0:
		return contract.Failed(contract.CodeBadRequest, "telegram draft: draft_id must be a non-zero integer")
	case strings.TrimSpace(a.Content) == "":
		return contract.Failed(contract.CodeBadRequest, "telegram draft: content is empty")
	case a.Final:
		return p.inStream(ctx, tenant, chat, a, func() contract.Result { return p.sealDraft(ctx, tenant, chat, a) })
	case chat < 0:
		return p.showPreview(ctx, tenant, chat, a)
	}
	return p.inStream(ctx, tenant, chat, a, func() contract.Result { return p.showDraft(ctx, tenant, chat, a) })
}

// inStream runs op, a frame or seal of a's stream, in the stream's turn in
// a private chat (Platform.dmStreams): one at a time, so a frame or a
// repeated seal that came in behind a seal finds it. A group stream's
// preview orders its frames and seal (openPreview).
func (p *Platform) inStream(ctx context.Context, tenant string, chat int64, a *contract.Action, op func() contract.Result) contract.Result {
	if chat < 0 {
		return op()
	}
	var r contract.Result
	k := draftKey{tenant, chat, a.DraftID}
	if err := p.dmStreams.Do(ctx, k, func() error { r = op(); return nil }); err != nil {
		return p.failure(contract.OpDraft, err)
	}
	return r
}

// showDraft shows a private chat's draft frame through sendMessageDraft,
// unless its stream was sealed (sealedStream).
func (p *Platform) showDraft(ctx context.Context, tenant string, chat int64, a *contract.Action) contract.Result {
	k := draftKey{tenant, chat, a.DraftID}
	if p.sealedStream(ctx, k, a) {
		return contract.OK("")
	}
	preview := textsplit.Split(a.Content, splitRules)[0]
	params := &bot.SendMessageDraftParams{
		ChatID:          chat,
		MessageThreadID: topicThread(a.Metadata.ThreadID),
		DraftID:         strconv.FormatInt(p.wireDraftID(k), 10),
		Text:            renderMarkdownV2(preview),
		ParseMode:       models.ParseModeMarkdown,
	}
	err := p.paced(ctx, tenant, chat, false, func(ctx context.Context) error {
		_, err := p.bot.SendMessageDraft(ctx, params)
		if err != nil && isBadRequest(err, "can't parse entities") {
			params.Text, params.ParseMode = preview, ""
			_, err = p.bot.SendMessageDraft(ctx, params)
		}
		return err
	})
	if err != nil {
		return p.failure(contract.OpDraft, err)
	}
	return contract.OK("")
}

// showPreview shows a group chat's draft frame in the stream's preview
// message: it edits the message (one another instance sharing the store
// showed, too: adoptPreview), or sends it when there is none yet (or it is
// gone) and records it in the store. A frame of a stream sealed within
// sealRetryWindow, on any instance sharing the store, shows nothing.
func (p *Platform) showPreview(ctx context.Context, tenant string, chat int64, a *contract.Action) contract.Result {
	k := draftKey{tenant, chat, a.DraftID}
	if p.sealedStream(ctx, k, a) {
		return contract.OK("")
	}
	pv := p.openPreview(ctx, k, a)
	defer pv.mu.Unlock()
	if s, ok := p.recentSeal(k); ok && s.Turn == a.Metadata.Turn() { // sealed here while this frame waited
		p.closePreview(k, pv)
		return contract.OK("")
	}
	p.adoptPreview(ctx, k, pv)
	text := textsplit.Split(a.Content, splitRules)[0]
	if pv.id != 0 {
		gone, err := p.editText(ctx, tenant, chat, pv.id, text)
		if !gone {
			if err != nil {
				return p.failure(contract.OpDraft, err)
			}
			return contract.OK("")
		}
		pv.id = 0
	}
	params := &bot.SendMessageParams{ChatID: chat, MessageThreadID: pv.thread, Text: renderMarkdownV2(text), ParseMode: models.ParseModeMarkdown}
	var msg *models.Message
	err := p.paced(ctx, tenant, chat, true, func(ctx context.Context) (err error) {
		msg, err = p.sendMessage(ctx, params, text)
		return err
	})
	if err != nil {
		return p.failure(contract.OpDraft, err)
	}
	pv.id = msg.ID
	p.storePreview(ctx, k, pv, false)
	return contract.OK("")
}

// editText replaces the text of message id (editMessageText, paced),
// rendered as MarkdownV2, plain if Telegram rejects the entities; "message
// is not modified" is success. gone reports that the message no longer
// exists (someone deleted it); err is then Telegram's answer.
func (p *Platform) editText(ctx context.Context, tenant string, chat int64, id int, text string) (gone bool, err error) {
	params := &bot.EditMessageTextParams{ChatID: chat, MessageID: id, Text: renderMarkdownV2(text), ParseMode: models.ParseModeMarkdown}
	err = p.paced(ctx, tenant, chat, false, func(ctx context.Context) error {
		_, err := p.bot.EditMessageText(ctx, params)
		if err != nil && isBadRequest(err, "can't parse entities") {
			params.Text, params.ParseMode = text, ""
			_, err = p.bot.EditMessageText(ctx, params)
		}
		return err
	})
	switch {
	case err != nil && isBadRequest(err, "message is not modified"):
		return false, nil
	case err != nil && isBadRequest(err, "message to edit not found"):
		return true, err
	}
	return false, err
}

// sealDraft sends a stream's final content as a real message, once per
// stream (a repeated seal answers it; one that reaches another
// instance while this one sends it waits for it: claimSeal), and answers the first
// part's id. In a group chat the stream's preview (shown by any instance
// sharing the store: adoptPreview) becomes that first part, and its record
// says so; the seal holds the preview (one made if there is none) until it
// is recorded, so a frame racing it shows nothing (and, once it is, does
// not wait for the rest of the parts).
func (p *Platform) sealDraft(ctx context.Context, tenant string, chat int64, a *contract.Action) contract.Result {
	k := draftKey{tenant, chat, a.DraftID}
	if id, ok := p.resealedHere(k, a); ok {
		return contract.OK(id)
	}
	// A seal on another instance, which the gateway's retry reaches after
	// a reconnect.
	if s, ok := p.storedSeal(ctx, k); ok && s.repeatedBy(a) {
		return contract.OK(s.ID)
	}
	claimed, id, err := p.claimSeal(ctx, k, a)
	switch {
	case err != nil:
		return p.failure(contract.OpDraft, err)
	case id != "":
		return contract.OK(id)
	}
	stored := false
	defer func() { // after the answer: it need not wait for the store
		if claimed != nil && !stored {
			p.releaseSeal(k, a, claimed)
		}
	}()
	parts := textsplit.Split(a.Content, splitRules)
	if chat < 0 { // holding the preview: a frame waiting for it then finds the seal (showPreview)
		pv := p.openPreview(ctx, k, a)
		held := true
		defer func() {
			if held {
				pv.mu.Unlock()
			}
		}()
		if id, ok := p.resealedHere(k, a); ok { // sealed here while this seal waited
			p.closePreview(k, pv)
			return contract.OK(id)
		}
		p.adoptPreview(ctx, k, pv)
		if pv.id != 0 {
			gone, err := p.editText(ctx, tenant, chat, pv.id, parts[0])
			if err != nil && !gone {
				return p.failure(contract.OpDraft, err)
			}
			if !gone {
				first := strconv.Itoa(pv.id)
				p.storePreview(ctx, k, pv, true) // first, so no instance replaces it as a preview
				stored = p.seal(ctx, k, a, first)
				p.closePreview(k, pv)
				held = false
				pv.mu.Unlock()
				_, _, r := p.sendParts(ctx, tenant, chat, a, parts, nil, first)
				return r
			}
		}
		defer p.closePreview(k, pv) // once the seal below is recorded
	}
	first, _, r := p.sendParts(ctx, tenant, chat, a, parts, nil, "")
	if first != "" {
		// Even a partly sent seal is the stream's message: a retry must not
		// send the parts that went out again.
		stored = p.seal(ctx, k, a, first)
	}
	return r // contract.OK(first) when every part went out
}

// maxReplacing bounds the work running after its action was answered
// (afterAnswer): preview replacements, past it a send's previews stay,
// logged (replacePreviews), and seal claims' releases, past it released
// before the answer (releaseSeal). A tenant runs at most half of what the
// other tenants leave (fairshare.Slots), a lone tenant too, so one
// tenant's many streams leave the others room at once.
const maxReplacing = 64

// replacePreviews deletes the previews of tenant's open draft streams in a
// group chat's topic that a's reply replaces: those of a's turn, or every
// one of the topic when a names no turn, as Telegram's sendMessage replaces
// a native draft; never those of an earlier tenant under its id (deleted
// and made again since: vault.Outdated). A preview the store records as its stream's reply,
// sealed on another instance after the gateway reconnected there, is
// forgotten, not deleted; so is one whose record the store cannot give.
// The preview of a's turn that another instance showed is found in the
// store (replaceStoredPreview) unless one was deleted here: a preview of
// the turn this instance remembers may be a stream sealed elsewhere since;
// for a naming no turn, those of every turn the store lists for the topic
// (replaceTopicPreviews). Deleting is best effort: a preview that stays is
// logged. The streams are those open as the reply went out; their previews
// are deleted after the send is answered, so a slow Telegram or store never
// holds the answer past its deadline (the gateway would send the reply
// again), on a goroutine of its own (afterAnswer) within a
// request_timeout of its own.
func (p *Platform) replacePreviews(ctx context.Context, tenant string, chat int64, a *contract.Action) {
	if chat > 0 {
		return
	}
	thread, turn := topicThread(a.Metadata.ThreadID), a.Metadata.Turn()
	sent := p.deps.Clock.Now()
	ended := map[draftKey]*preview{}
	for _, k := range p.previews.Keys() {
		if k.tenant != tenant || k.chat != chat {
			continue
		}
		if pv, ok := p.previews.Peek(k); ok && pv.thread == thread && (turn == "" || pv.turn == "" || pv.turn == turn) && !vault.Outdated(p.deps.Vault, tenant, pv.at, pv.created) {
			ended[k] = pv
		}
	}
	if len(ended) == 0 && p.seals == nil {
		return
	}
	started := p.afterAnswer(tenant, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RequestTimeout)
		defer cancel()
		here := false // a preview of a's turn was deleted here
		for k, pv := range ended {
			pv.mu.Lock()
			id, open := pv.id, !pv.done
			if open {
				p.closePreview(k, pv)
			}
			pv.mu.Unlock()
			if !open || id == 0 {
				continue
			}
			if r, ok, err := p.storedPreview(ctx, k, pv.turn); err != nil || (ok && r.Sealed && r.ID == id) {
				continue
			}
			p.deletePreview(ctx, chat, id)
			here = here || pv.turn == turn
			if p.seals != nil && pv.turn != "" { // best effort, as replaceStoredPreview
				_ = p.seals.Delete(ctx, turnPreviewKey(tenant, chat, thread, pv.turn))
			}
		}
		switch {
		case p.seals == nil:
		case turn != "":
			if !here {
				p.replaceStoredPreview(ctx, tenant, chat, thread, turn, sent)
			}
		default:
			p.replaceTopicPreviews(ctx, tenant, chat, thread, sent)
		}
	})
	if !started {
		p.log.Info("telegram draft previews not replaced: too many replacements in flight (of the tenant's part or in all)", "tenant", tenant, "chat_id", chat)
	}
}

// afterWork is the work running after its action was answered
// (afterAnswer). Its zero value is not usable; call newAfterWork.
type afterWork struct {
	slots   chan struct{}    // one per work running (awaitReplacing takes them all)
	tenants *fairshare.Slots // the same, by tenant
}

// newAfterWork returns an afterWork with nothing running.
func newAfterWork() *afterWork {
	return &afterWork{slots: make(chan struct{}, maxReplacing), tenants: fairshare.NewSlots(maxReplacing)}
}

// afterAnswer runs f, work of tenant's that its action's answer must not
// wait for, on a goroutine of its own in a slot of maxReplacing; it
// reports false, running nothing, when every slot, or tenant's part of
// them (fairshare.Slots), is taken. Egress outlives Run (the relay
// answers the actions in flight as the connector drains, after the
// platforms stopped), and so does this work: Run waits for what runs as
// it returns; what starts later is bounded by its own request_timeout.
func (p *Platform) afterAnswer(tenant string, f func()) bool {
	w := p.replacing
	if !w.tenants.Take(tenant) {
		return false
	}
	select {
	case w.slots <- struct{}{}:
	default: // awaitReplacing holds them
		w.tenants.Give(tenant)
		return false
	}
	go func() {
		defer w.tenants.Give(tenant)
		defer func() { <-w.slots }()
		f()
	}()
	return true
}

// awaitReplacing returns once the work in flight after its answer ended
// (afterAnswer): it takes every slot, then gives them back. One caller at
// a time (Run: there is one).
func (p *Platform) awaitReplacing() {
	slots := p.replacing.slots
	for range cap(slots) {
		slots <- struct{}{}
	}
	for range cap(slots) {
		<-slots
	}
}

// replaceTopicPreviews deletes the open previews of every turn the store
// lists for tenant's topic (topicPreviewsKey), which other instances may
// have shown before sent, and forgets the list.
func (p *Platform) replaceTopicPreviews(ctx context.Context, tenant string, chat int64, thread int, sent time.Time) {
	key := topicPreviewsKey(tenant, chat, thread)
	var turns []string
	if ok, _ := p.storedRecord(ctx, key, "previews", &turns, "chat_id", chat); !ok {
		return
	}
	for _, turn := range turns {
		p.replaceStoredPreview(ctx, tenant, chat, thread, turn, sent)
	}
	_ = p.seals.Delete(ctx, key) // best effort, as replaceStoredPreview
}

// replaceStoredPreview deletes the open preview the store names for
// tenant's turn in chat's topic (turnPreviewKey: the stream's draft_id, a
// JSON number), which another instance showed before the gateway
// reconnected here, and forgets its name; one shown after sent, by a
// stream of the turn the gateway began once the send was answered, stays.
func (p *Platform) replaceStoredPreview(ctx context.Context, tenant string, chat int64, thread int, turn string, sent time.Time) {
	key := turnPreviewKey(tenant, chat, thread, turn)
	var draft int64
	if ok, _ := p.storedRecord(ctx, key, "preview", &draft, "chat_id", chat, "turn", turn); !ok || draft == 0 {
		return
	}
	r, ok, _ := p.storedPreview(ctx, draftKey{tenant, chat, draft}, turn)
	switch {
	case ok && r.At.After(sent):
		return
	case ok && !r.Sealed:
		p.deletePreview(ctx, chat, r.ID)
	}
	_ = p.seals.Delete(ctx, key) // best effort: a send of the turn then finds the preview gone
}

// deletePreview deletes preview message id from chat, logging a failure.
func (p *Platform) deletePreview(ctx context.Context, chat int64, id int) {
	_, err := p.bot.DeleteMessage(ctx, &bot.DeleteMessageParams{ChatID: chat, MessageID: id})
	if err != nil && !isBadRequest(err, "message to delete not found") {
		p.log.Info("telegram draft preview not deleted", "chat_id", chat, "message_id", id, "err", p.errorText(err))
	}
}
