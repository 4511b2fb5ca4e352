package slack

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connector/internal/clock"
	"connector/platform"
	"connector/platform/fairshare"
	"connector/store"
	"connector/vault"
)

// This file keeps the durable intake (docs/durability.md says what it
// promises): a request of the HTTP routes whose handling may outlast
// Slack's 3 s (a slow message: envelopeJob), and every request of a chat
// while an entry of that chat is pending here, is stored and answered 200
// at once, then handled off the request in its chat's turn. An entry lives
// in the store's Registry, namespace slack/intake, under
// "<team>/<channel>/<received ns>/<hash of the body>" (a chat's entries
// list in arrival order). The instance that stores or sweeps it claims it
// (slack/intake/<key>) and renews the claim while it holds it; it is
// deleted once delivered (delivered), expired (intakeRetryFor) or
// unreadable, and kept when a shutdown cut it short. The message dedupe
// (dedupe.go) and the ledger (deliveredBefore) keep an entry two instances
// or a kill handled from being delivered twice.

// intakeNamespace is the store Registry namespace of the entries.
const intakeNamespace = "slack/intake"

// Timings of the intake.
const (
	// intakeClaimTTL is how long a claim on an entry lasts unrenewed: a
	// killed instance's entries are taken over this long after its last
	// renewal at most, plus intakeSweepEvery.
	intakeClaimTTL = 2 * time.Minute
	// intakeRenewEvery is how often the claims held are renewed.
	intakeRenewEvery = intakeClaimTTL / 4
	// intakeSweepEvery is how often the entries nobody holds are looked
	// for.
	intakeSweepEvery = time.Minute
	// intakeBackoffMin and intakeBackoffMax bound the wait between two
	// tries of an entry whose delivery failed.
	intakeBackoffMin = time.Second
	intakeBackoffMax = time.Minute
	// intakeRetryFor is how long after it was received an entry whose
	// delivery fails is tried again, holding its chat's turn: about as
	// long as Slack retries a request it got no 200 for (three retries
	// over some 5 minutes).
	intakeRetryFor = 5 * time.Minute
	// intakeStoreTimeout bounds an entry's deletion and its claim's
	// release, which do not end with Run.
	intakeStoreTimeout = 5 * time.Second
)

// dropIntakeExpired counts an entry not delivered within intakeRetryFor.
const dropIntakeExpired = "intake_expired"

// The routes an entry came to.
const (
	routeEvents       = "events"
	routeInteractions = "interactions"
	routeCommands     = "commands"
)

// intakeRecord is an entry's value.
type intakeRecord struct {
	Route    string `json:"route"`
	Body     []byte `json:"body"`
	Received int64  `json:"received"` // unix nanoseconds
	// Tenant is the tenant the entry is charged to: the one its request
	// routes to (a message by the ownership order alone, envelopeJob; a
	// slash command; a press by its presser's, ingestPress), else its
	// chat's holder when it was stored (chatTenant), else "" (the chats no
	// tenant holds together). An entry an older instance stored without its
	// chat's holder (one of the fifteenth sitting's or older, or one routed
	// to none of the sixteenth's, a rolling deploy's too) is charged as "":
	// it is handled, or expires (intakeRetryFor), once a sweep takes it.
	Tenant string `json:"tenant,omitempty"`
	// Created is Tenant's creation when it was stored (charge.created):
	// an entry swept after its tenant was made again under its id stays
	// charged to the earlier one. An older instance's is charged as 0.
	Created int64 `json:"created,omitempty"`
	// To is the channel the entry's delivery goes to when that is not its
	// chat's (a reaction turn its tenant's reaction_trigger_target sends
	// elsewhere), recorded before that delivery (deliveringTo): a sweep
	// looks for the delivery in the ledger there (deliveredBefore).
	To string `json:"to,omitempty"`
}

// intakeRequest is the HTTP request being ingested, which inChatOrder
// may store in the intake.
type intakeRequest struct {
	rec intakeRecord
	// once is the dedupe key of a message whose handling may be slow (its
	// files, its thread); "" for any other request, which is stored only
	// behind a pending entry of its chat.
	once string
	// dup is the dedupe key of a press (ingestPress): one whose copy was
	// delivered (the store's done mark, whichever instance delivered it)
	// is dropped before an entry is taken.
	dup string
}

// Context keys: the HTTP request an ingest path handles, and the mark of
// an entry being handled in its chat's turn.
type (
	intakeRequestKey struct{}
	inTurnKey        struct{}
)

// withIntake is ctx carrying the request r of route, received at
// received, that inChatOrder may store in the intake; once is as in
// intakeRequest.
func withIntake(ctx context.Context, route string, body []byte, received time.Time, once string) context.Context {
	r := &intakeRequest{rec: intakeRecord{Route: route, Body: body, Received: received.UnixNano()}, once: once}
	return context.WithValue(ctx, intakeRequestKey{}, r)
}

// intake is the entries this instance holds.
type intake struct {
	// queueMu is held while entries are taken and queued (admit,
	// sweepIntake), so a chat's entries are queued in key order. It is
	// taken before mu.
	queueMu sync.Mutex
	mu      sync.Mutex           // guards what follows; a leaf
	ctx     context.Context      // Run's; nil while Run is not running
	pending map[string]int       // chat -> entries held
	held    map[string]heldEntry // entry key -> its chat and tenant
	// until is, of an entry held, the latest expiry this instance gave
	// its claim (claimed, renewed), or may have given it (mayHaveClaimed):
	// what its renewal and its release compare.
	until map[string]time.Time
	// sure is, of an entry held, the latest expiry its claim surely got
	// (claimed).
	sure map[string]time.Time
	// charged counts, by the charge of each (the tenant as created), the
	// entries held and those being stored or claimed (reserve); total is
	// their sum.
	charged map[charge]int
	total   int
	// bound is the most entries a tenant may be charged
	// (Platform.intakeBound).
	bound   func(tenant string) int
	resumed atomic.Uint64 // entries taken by sweepIntake
}

// heldEntry is an entry held: its chat, and its charge.
type heldEntry struct {
	chat   string
	charge charge
}

// charge is whom an entry is charged to: a tenant as created (a tenant
// made again under its id starts with none of the earlier one's entries).
type charge struct {
	tenant  string
	created int64 // the tenant's creation in Unix nanoseconds, 0 for none
}

// chargeOf is tenant's charge as it is created now (vault.Creation).
func (p *Platform) chargeOf(tenant string) charge {
	c := charge{tenant: tenant}
	if t := vault.Creation(p.deps.Vault, tenant); tenant != "" && !t.IsZero() {
		c.created = t.UnixNano()
	}
	return c
}

// intakeMaxHeld bounds the entries an instance holds (their bodies, and
// the renewals of a round), and intakeTenantShare the events charged to
// one tenant once the intake is half full, so that one tenant's slow chats
// leave the others room (docs/durability.md). An entry is charged to the
// tenant its request routes to, else to its chat's holder (chatTenant; the
// chats no tenant holds together, as ""); a tenant is charged at most
// its intakeBound's part of what the others leave (reserve). A slash command or a press, which Slack does not send
// again, is refused not at the share but only past that bound, or past
// intakeMaxHeld.
const (
	intakeMaxHeld     = 512
	intakeTenantShare = intakeMaxHeld / 8
)

// reserve charges tenant one more entry, until unreserve or, once the
// entry is taken (take), done; false when the intake is full, or the
// tenant holds its bound's part of what the other tenants leave
// (fairshare.Admits), or, when share, the intake is half full and the
// tenant's intakeTenantShare is.
func (in *intake) reserve(c charge, share bool) bool {
	bound := in.bound(c.tenant) // before the lock: it reads the Platform's
	in.mu.Lock()
	defer in.mu.Unlock()
	own := in.charged[c]
	if !fairshare.Admits(own, in.total, intakeMaxHeld, bound) || share && in.total >= intakeMaxHeld/2 && own >= intakeTenantShare {
		return false
	}
	in.charged[c]++
	in.total++
	return true
}

// unreserve gives back a reservation of c's no entry was taken for.
func (in *intake) unreserve(c charge) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.uncharge(c)
}

// uncharge takes one entry off c. in.mu is held.
func (in *intake) uncharge(c charge) {
	in.total--
	if in.charged[c]--; in.charged[c] <= 0 {
		delete(in.charged, c)
	}
}

// IntakeStats reports the entries of the durable intake this instance
// holds, and how many it resumed since it started: left by a restart, or
// taken over from a stopped or killed instance.
func (p *Platform) IntakeStats() (pending int, resumed uint64) {
	if p.intake == nil {
		return 0, 0
	}
	p.intake.mu.Lock()
	defer p.intake.mu.Unlock()
	return len(p.intake.held), p.intake.resumed.Load()
}

// take records key of chat as held, charged to tenant under the
// reservation it made (reserve), which done gives back; false when key is
// held already (the reservation is still the caller's).
func (in *intake) take(key, chat string, c charge) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.held[key]; ok {
		return false
	}
	in.held[key] = heldEntry{chat: chat, charge: c}
	in.pending[chat]++
	return true
}

// holds reports whether key is held.
func (in *intake) holds(key string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.held[key]
	return ok
}

// claimed records that key's claim was given expires, unless it was
// given a later one already or key is not held.
func (in *intake) claimed(key string, expires time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.held[key]; !ok {
		return
	}
	if expires.After(in.until[key]) {
		in.until[key] = expires
	}
	if expires.After(in.sure[key]) {
		in.sure[key] = expires
	}
}

// mayHaveClaimed records that a renewal of key's claim, sent at at to
// give it expires, failed, and may have been made all the same (its reply
// lost): expires is taken for an expiry this instance gave the claim when
// the renewal was sent while the claim surely held (before its sure
// expiry). Another instance takes the claim only once it lapsed, after
// that, and gives it an expiry later than expires (intakeClaimTTL past its
// taking): a later renewal still finds such a claim lasting past the one
// recorded, and leaves it be.
func (in *intake) mayHaveClaimed(key string, at, expires time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.held[key]; ok && at.Before(in.sure[key]) && expires.After(in.until[key]) {
		in.until[key] = expires
	}
}

// claimUntil is the latest expiry key's claim was given (claimed).
func (in *intake) claimUntil(key string) time.Time {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.until[key]
}

// done forgets key of chat, and its charge.
func (in *intake) done(key, chat string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if e, ok := in.held[key]; ok {
		in.uncharge(e.charge)
	}
	delete(in.held, key)
	delete(in.until, key)
	delete(in.sure, key)
	if in.pending[chat]--; in.pending[chat] <= 0 {
		delete(in.pending, chat)
	}
}

// waiting reports whether an entry of chat is held.
func (in *intake) waiting(chat string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.pending[chat] > 0
}

// keys are the entries held.
func (in *intake) keys() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Collect(maps.Keys(in.held))
}

// runCtx is Run's context, nil while Run is not running.
func (in *intake) runCtx() context.Context {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.ctx
}

// setRunCtx sets Run's context.
func (in *intake) setRunCtx(ctx context.Context) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.ctx = ctx
}

// intakeKey is the key of rec, an entry of chat: in key order, a chat's
// entries are in the order received.
func intakeKey(chat string, rec intakeRecord) string {
	sum := sha256.Sum256(rec.Body)
	return fmt.Sprintf("%s/%020d/%s", chat, rec.Received, hex.EncodeToString(sum[:8]))
}

// intakeClaim is the claim key of entry key.
func intakeClaim(key string) string { return "slack/intake/" + key }

// errIntakeFull answers a request the full intake cannot take: busy
// (platform.ErrBusy) as any other, but a slash command, which Slack does
// not send again, is told so (command).
var errIntakeFull = fmt.Errorf("slack: intake full: %w", platform.ErrBusy)

// admit stores r as an entry of chat, charged to tenant ("": the chat's
// holder), and queues it, or answers it without: a slow message or a
// press already handled is a duplicate (nil), a slow message another
// instance is handling is platform.ErrBusy (a press is taken: its turn
// waits for that copy's end), and one the full intake cannot take is
// errIntakeFull.
func (p *Platform) admit(ctx context.Context, chat, tenant string, r *intakeRequest) error {
	run := p.intake.runCtx()
	if run == nil || run.Err() != nil || p.sink.Load() == nil {
		return errNotRunning
	}
	// A press's before the reservation: a duplicate is answered as one
	// (200, its user not told to press again) however full the intake. A
	// slow message's after it: one the intake refuses asks nothing of the
	// store (Slack sends it again), so a flood of them, read in Socket
	// Mode's reader, costs no round trip once its tenant's part is taken.
	check := func(key string) (bool, error) {
		switch dup, err := p.dedupe.Check(ctx, key); {
		case err != nil && (key == r.once || !errors.Is(err, platform.ErrBusy)):
			return false, err
		case dup:
			p.drop(dropDuplicate, "")
			return true, nil
		}
		return false, nil
	}
	if r.dup != "" {
		if dup, err := check(r.dup); dup || err != nil {
			return err
		}
	}
	r.rec.Tenant = cmp.Or(tenant, p.chatTenant(chat))
	charged := p.chargeOf(r.rec.Tenant)
	r.rec.Created = charged.created
	if !p.intake.reserve(charged, r.rec.Route == routeEvents) {
		p.intakeLogs.Log(p.log, slog.LevelWarn, "slack intake full (of the tenant's share or in all); request not taken", "tenant", r.rec.Tenant)
		return errIntakeFull
	}
	taken := false
	defer func() {
		if !taken {
			p.intake.unreserve(charged)
		}
	}()
	if r.once != "" {
		if dup, err := check(r.once); dup || err != nil {
			return err
		}
	}
	key := intakeKey(chat, r.rec)
	value, _ := json.Marshal(r.rec) // plain fields: cannot fail
	until := p.clock.Now().Add(intakeClaimTTL)
	if took, err := p.claims.Claim(ctx, intakeClaim(key), until); err != nil || !took {
		return err // not taken: this very request is stored already
	}
	swapped, err := p.deps.Store.Registry().CompareAndSwap(ctx, intakeNamespace, key, nil, value)
	if err != nil || !swapped {
		p.releaseIntake(key, until)
		if err != nil {
			return fmt.Errorf("slack: store an intake entry: %w", err)
		}
		return nil
	}
	rec := r.rec
	rec.Body = bytes.Clone(rec.Body) // the request's buffer is reused once it is answered
	p.intake.queueMu.Lock()
	taken = p.intake.take(key, chat, charged)
	p.intake.claimed(key, until)
	queued := p.queueIntake(run, key, chat, rec)
	p.intake.queueMu.Unlock()
	if !queued {
		p.releaseIntake(key, until)
	}
	return nil
}

// queueIntake gives entry key, held, its turn in chat. When the queues
// refuse it (Run is ending) it is no longer held and false is returned:
// the caller releases its claim once it let queueMu go (a store call).
func (p *Platform) queueIntake(ctx context.Context, key, chat string, rec intakeRecord) bool {
	ok := p.queues.Go(ctx, chat, func() {
		p.handleIntake(ctx, key, rec)
		p.intake.done(key, chat)
	})
	if !ok {
		p.intake.done(key, chat)
	}
	return ok
}

// handleIntake handles entry key until it is delivered, deliberately
// dropped or expired (then deletes it), or until ctx ends (then keeps it);
// then it gives the entry's claim up.
func (p *Platform) handleIntake(ctx context.Context, key string, rec intakeRecord) {
	defer func() { p.releaseIntake(key, p.intake.claimUntil(key)) }() // as renewed by then
	received := time.Unix(0, rec.Received)
	backoff := intakeBackoffMin
	for {
		if ctx.Err() != nil {
			return
		}
		turn := &intakeTurn{key: key, rec: rec}
		err := p.replay(context.WithValue(ctx, inTurnKey{}, turn), rec, received)
		rec = turn.rec // as stored now: with where it is delivered
		if turn.deleted {
			return // delivered, and deleted then (delivered)
		}
		if err != nil && ctx.Err() != nil {
			return // its files may be missing: the next holder handles it
		}
		if err != nil && p.clock.Now().Before(received.Add(intakeRetryFor)) {
			p.log.Warn("slack intake entry not stored; retrying", "key", key, "err", p.errorText(err), "retry_in", backoff)
			_ = p.clock.Sleep(ctx, backoff)
			backoff = min(backoff*2, intakeBackoffMax)
			continue
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), intakeStoreTimeout)
		defer cancel()
		_, derr := p.deps.Store.Registry().Delete(sctx, intakeNamespace, key)
		switch {
		case err != nil && derr != nil:
			// Not dropped: the store that would not take it is out, most
			// likely; a later sweep takes it again.
			p.log.Warn("slack intake entry not stored within 5 minutes nor deleted; kept for a later sweep", "key", key, "err", p.errorText(err))
		case err != nil:
			p.drop(dropIntakeExpired, key)
			p.log.Warn("slack intake entry dropped: not stored within 5 minutes", "key", key, "err", p.errorText(err))
		case derr != nil:
			p.log.Warn("slack intake entry not deleted; it may be handled again", "key", key, "err", derr)
		}
		return
	}
}

// intakeTurn is the entry handled in its chat's turn (the value of
// inTurnKey).
type intakeTurn struct {
	key string
	// rec is the entry's value as stored.
	rec intakeRecord
	// deleted is set once the entry is deleted after its delivery.
	deleted bool
}

// delivered deletes the entry ctx handles in its turn, if any, once the
// relay stored its delivery: at once, before what follows the delivery
// (the thread's markers, the dedupe marker), so that a kill leaves an
// entry delivered already for as short a time as one store write
// (deliveredBefore finds it then). A deletion that fails is tried again
// when the entry's handling ends.
func (p *Platform) delivered(ctx context.Context) {
	turn, _ := ctx.Value(inTurnKey{}).(*intakeTurn)
	if turn == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), intakeStoreTimeout)
	defer cancel()
	if _, err := p.deps.Store.Registry().Delete(sctx, intakeNamespace, turn.key); err != nil {
		p.log.Warn("slack intake entry not deleted once delivered; retrying", "key", turn.key, "err", p.errorText(err))
		return
	}
	turn.deleted = true
}

// deliveringTo records channel in the entry ctx handles in its turn, if
// any, as where its delivery goes, when that is not its chat's (nor
// recorded already): before the delivery, so that a sweep after a kill
// looks for it in the ledger there (deliveredBefore) rather than in its
// chat's, where it is not. An error is the store's: the entry is tried
// again.
func (p *Platform) deliveringTo(ctx context.Context, channel string) error {
	turn, _ := ctx.Value(inTurnKey{}).(*intakeTurn)
	if turn == nil {
		return nil
	}
	chat, _ := entryChat(turn.key)
	if _, own, _ := strings.Cut(chat, "/"); cmp.Or(turn.rec.To, own) == channel {
		return nil
	}
	rec := turn.rec
	rec.To = channel
	old, _ := json.Marshal(turn.rec) // plain fields: cannot fail
	value, _ := json.Marshal(rec)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), intakeStoreTimeout)
	defer cancel()
	switch swapped, err := p.deps.Store.Registry().CompareAndSwap(sctx, intakeNamespace, turn.key, old, value); {
	case err != nil:
		return fmt.Errorf("slack: record where an intake entry is delivered: %w", err)
	case !swapped:
		p.log.Warn("slack intake entry not stored as read; where it is delivered not recorded, and a restart may deliver it again", "key", turn.key)
	default:
		turn.rec = rec
	}
	return nil
}

// releaseIntake gives up the claim on entry key, given until at the
// latest: one another instance took since it lapsed stays.
func (p *Platform) releaseIntake(key string, until time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), intakeStoreTimeout)
	defer cancel()
	if err := p.claims.Release(ctx, intakeClaim(key), until); err != nil {
		p.log.Warn("slack intake claim not released; the entry waits for it to expire", "key", key, "err", err)
	}
}

// replay handles an entry as its route would have, in its chat's turn.
func (p *Platform) replay(ctx context.Context, rec intakeRecord, received time.Time) error {
	switch rec.Route {
	case routeEvents:
		var env envelope
		if decodeEnvelope(rec.Body, &env) == nil {
			_, _, _, job := p.envelopeJob(&env, received, false)
			return job(ctx)
		}
	case routeInteractions:
		if ic, ok := interactionOf(rec.Body); ok {
			_, err := p.interaction(ctx, &ic, received)
			return err
		}
	case routeCommands:
		if c, ok := commandOf(rec.Body); ok {
			_, err := p.ingestCommand(ctx, &c, received)
			return err
		}
	}
	p.drop(dropMalformed, "")
	return nil
}

// sweepIntake takes the entries no live claim holds and queues them in
// key order (each chat's in arrival order). taken, when set, runs once
// they are taken, before they are queued: a request of their chats that
// comes after it is queued behind them (Run takes deliveries there).
func (p *Platform) sweepIntake(ctx context.Context, taken func()) {
	// The entries nobody holds are claimed and read again, the relay's
	// ledger read (when one was claimed), and the entries it holds
	// deleted, before the queue lock is taken: every request the intake
	// takes waits for that lock before it is answered.
	queue := p.claimUnheld(ctx)
	to := make(map[string]bool) // the chats their deliveries went to
	for _, c := range queue {
		to[c.to()] = true
	}
	stored, err := p.ledgerHeld(ctx, to)
	if err != nil {
		p.log.Warn("slack intake: the relay's ledger not read; the entries it holds already may be delivered again", "err", p.errorText(err))
	}
	// Of a chat's entries only the first may have been delivered: they are
	// handled one at a time, in order, each deleted before the next.
	first := make(map[string]bool)
	queue = slices.DeleteFunc(queue, func(c claimedEntry) bool {
		if first[c.chat] {
			return false
		}
		first[c.chat] = true
		if p.deliveredBefore(ctx, c, stored) {
			p.intake.unreserve(c.charge)
			return true
		}
		return false
	})
	var held []claimedEntry // held here meanwhile, or refused: let go
	p.intake.queueMu.Lock()
	queue = slices.DeleteFunc(queue, func(c claimedEntry) bool {
		if !p.intake.take(c.key, c.chat, c.charge) {
			p.intake.unreserve(c.charge)
			held = append(held, c)
			return true
		}
		p.intake.claimed(c.key, c.until)
		return false
	})
	if taken != nil {
		taken()
	}
	for _, c := range queue {
		p.intake.resumed.Add(1)
		if !p.queueIntake(ctx, c.key, c.chat, c.rec) {
			held = append(held, c)
		}
	}
	p.intake.queueMu.Unlock()
	for _, c := range held {
		p.releaseIntake(c.key, c.until)
	}
	if len(queue) > 0 {
		p.log.Info("slack intake entries resumed", "entries", len(queue))
	}
}

// claimedEntry is an intake entry a sweep claimed, as stored once claimed.
type claimedEntry struct {
	key, chat string
	charge    charge // its intakeRecord.Tenant's
	rec       intakeRecord
	until     time.Time // its claim's expiry
}

// to is the chat id entry c is delivered to: its own, or the one it
// recorded (rec.To, deliveringTo).
func (c claimedEntry) to() string {
	_, channel, _ := strings.Cut(c.chat, "/")
	return cmp.Or(c.rec.To, channel)
}

// claimUnheld claims the entries the intake lists that no live claim
// holds and this instance does not, and reads each again once claimed:
// what a sweep takes, in key order, before its queue lock (sweepIntake).
// An entry that cannot be read (its value, or a key naming no chat) is
// deleted (deleteUnreadable). A listing that fails claims none (the next
// sweep lists again).
func (p *Platform) claimUnheld(ctx context.Context) []claimedEntry {
	entries, _, err := p.deps.Store.Registry().List(ctx, intakeNamespace)
	if err != nil {
		p.log.Warn("slack intake not listed; retrying later", "err", p.errorText(err))
		return nil
	}
	var claimed []claimedEntry
	// skip holds the chats an entry of which this sweep did not take (no
	// room, another instance's, or unread): it takes none behind it, which
	// would be delivered before it, or beside it on another instance.
	skip := make(map[string]bool)
	for _, e := range entries {
		chat, ok := entryChat(e.Key)
		var rec intakeRecord
		if !ok || json.Unmarshal(e.Value, &rec) != nil {
			p.deleteUnreadable(ctx, e.Key)
			continue
		}
		if p.intake.holds(e.Key) || skip[chat] {
			continue
		}
		charged := charge{rec.Tenant, rec.Created}
		if !p.intake.reserve(charged, rec.Route == routeEvents) {
			skip[chat] = true
			continue
		}
		until := p.clock.Now().Add(intakeClaimTTL)
		if took, err := p.claims.Claim(ctx, intakeClaim(e.Key), until); err != nil || !took {
			p.intake.unreserve(charged)
			skip[chat] = true
			continue
		}
		// The listing may be older than the entry's end: one this
		// instance held while it listed, handled and deleted since, is
		// let go (it is deleted before its claim is released, so it is
		// gone now). It is handled as stored now: its instance may have
		// recorded where its delivery goes since (deliveringTo).
		now, ok, err := p.deps.Store.Registry().Get(ctx, intakeNamespace, e.Key)
		rec = intakeRecord{}
		if err != nil || !ok || json.Unmarshal(now.Value, &rec) != nil {
			p.intake.unreserve(charged)
			p.releaseIntake(e.Key, until)
			skip[chat] = err != nil || ok // one deleted since is behind it no more
			continue
		}
		claimed = append(claimed, claimedEntry{key: e.Key, chat: chat, charge: charged, rec: rec, until: until})
	}
	return claimed
}

// ledgerPage is how many ledger records ledgerHeld reads at a time.
const ledgerPage = 1000

// ledgerPageBytes bounds the payload bytes of a page of the ledger a sweep
// reads (past one record).
const ledgerPageBytes = 16 << 20

// ledgerHeld names the deliveries of this platform into chats the store's
// ledger (the relay's, every tenant's) holds, by ledgerName: a sweep
// decodes and keeps nothing of the ledger's other chats.
func (p *Platform) ledgerHeld(ctx context.Context, chats map[string]bool) (map[string]bool, error) {
	if len(chats) == 0 {
		return nil, nil
	}
	l := p.deps.Store.Ledger()
	tenants, err := l.Tenants(ctx)
	if err != nil {
		return nil, err
	}
	held := make(map[string]bool)
	for _, tenant := range tenants {
		for after := uint64(0); ; {
			recs, err := l.Read(ctx, tenant, after, ledgerPage, ledgerPageBytes)
			var bad *store.UnreadableRecord
			if err != nil && !errors.As(err, &bad) {
				return nil, err
			}
			size := int64(0)
			for _, r := range recs {
				size += int64(len(r.Payload))
				var ev struct {
					MessageID string `json:"message_id"`
					Text      string `json:"text"`
					Source    struct {
						UserID string `json:"user_id"`
					} `json:"source"`
				}
				if r.Platform == platformName && chats[r.ChatID] && json.Unmarshal(r.Payload, &ev) == nil {
					held[ledgerName(r.ChatID, r.Received, ev.MessageID)] = true
					if ev.MessageID == "" {
						held[ledgerName(r.ChatID, r.Received, commandMessage(ev.Source.UserID, ev.Text))] = true
					}
				}
				after = r.Seq
			}
			if bad != nil {
				// A record that does not decode tells no delivery (the
				// relay drops it: dropped_malformed); read on past it.
				after = bad.Seq
				continue
			}
			if len(recs) < ledgerPage && size < ledgerPageBytes { // not cut short by either bound: the last
				break
			}
		}
	}
	return held, nil
}

// ledgerName names a delivery of chat id chatID received at received,
// of message id message: an entry's delivery carries its chat's channel,
// the entry's received time, which the ledger keeps to the microsecond,
// and its message's id (entryMessage), which tells it from another
// delivery of its chat received in the same microsecond.
func ledgerName(chatID string, received time.Time, message string) string {
	return chatID + "/" + strconv.FormatInt(received.UnixMicro(), 10) + "/" + message
}

// commandMessage stands for the message id of a slash command's delivery,
// which carries none: its user and text (what tells it from another
// command of its chat received in the same microsecond).
func commandMessage(user, text string) string { return "/" + user + " " + text }

// entryMessage is the message id the delivery of entry rec carries: a
// message's ts (an edit's, the edited message's), a reaction turn's, a
// prompt press's action ts; a slash command's commandMessage; "" for a
// body that names none.
func entryMessage(rec intakeRecord) string {
	switch rec.Route {
	case routeCommands:
		if c, ok := commandOf(rec.Body); ok {
			return commandMessage(c.UserID, slashEvent(&c).Text)
		}
	case routeEvents:
		var env envelope
		var ev wireEvent
		if decodeEnvelope(rec.Body, &env) != nil || env.InnerEvent == nil || json.Unmarshal(*env.InnerEvent, &ev) != nil {
			return ""
		}
		if ev.Item != nil && (ev.Type == "reaction_added" || ev.Type == "reaction_removed") {
			return reactionTS(&ev)
		}
		if m, ok := newMessage(&env, &ev); ok {
			return m.ev.TS
		}
	case routeInteractions:
		if ic, ok := interactionOf(rec.Body); ok {
			if pr, ok := pressOf(&ic); ok {
				return pr.actionTS
			}
		}
	}
	return ""
}

// deliveredBefore reports whether entry c, the first of its chat a sweep
// claimed, was delivered already: the ledger (stored, read before the
// sweep queues anything) holds a delivery of its message received when it
// was, in the chat it recorded as its delivery's (rec.To, deliveringTo),
// else in its own. An instance killed after the relay stored an entry's delivery,
// before it deleted the entry, leaves both; the entry is then deleted (its
// claim released) rather than delivered again. One whose deletion fails is
// let go too, for the next sweep.
//
// What it cannot tell: a delivery a gateway acknowledged (and the relay
// removed from the store) between the relay's commit and the kill, or
// after the restart before this sweep, is no longer in the ledger, and its
// entry is delivered again (at least once).
func (p *Platform) deliveredBefore(ctx context.Context, c claimedEntry, stored map[string]bool) bool {
	if !stored[ledgerName(c.to(), time.Unix(0, c.rec.Received), entryMessage(c.rec))] {
		return false
	}
	defer p.releaseIntake(c.key, c.until)
	if _, err := p.deps.Store.Registry().Delete(ctx, intakeNamespace, c.key); err != nil {
		p.log.Warn("slack intake entry delivered before a restart and not deleted; retrying at the next sweep", "key", c.key, "err", p.errorText(err))
		return true
	}
	p.log.Info("slack intake entry delivered before a restart: deleted", "key", c.key)
	return true
}

// deleteUnreadable deletes entry key, whose value cannot be parsed or
// whose key names no chat, and counts it dropped (malformed) if it was
// still there: no instance could ever handle it.
func (p *Platform) deleteUnreadable(ctx context.Context, key string) {
	switch deleted, err := p.deps.Store.Registry().Delete(ctx, intakeNamespace, key); {
	case err != nil:
		p.log.Warn("slack intake entry unreadable and not deleted; retrying at the next sweep", "key", key, "err", p.errorText(err))
	case deleted:
		p.drop(dropMalformed, "")
		p.log.Warn("slack intake entry unreadable: deleted", "key", key)
	}
}

// entryChat is the chat ("<team>/<channel>") of entry key.
func entryChat(key string) (string, bool) {
	team, rest, ok := strings.Cut(key, "/")
	channel, _, ok2 := strings.Cut(rest, "/")
	return team + "/" + channel, ok && ok2
}

// keepIntake renews the claims held (each tick of renew) and sweeps for
// entries nobody holds (each tick of sweep) until ctx ends, then stops
// both tickers.
func (p *Platform) keepIntake(ctx context.Context, renew, sweep *clock.Ticker) {
	defer renew.Stop()
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			p.renewIntake(ctx)
		case <-sweep.C:
			p.sweepIntake(ctx, nil)
		}
	}
}

// renewIntake renews the claims held, all at once (at most
// intakeMaxHeld: with store.redis_min_replicas each waits up to
// redis_replica_timeout for the replicas, and one after another, or 16 at
// a time, the renewals of enough entries outlasted intakeClaimTTL), and
// returns once each renewal answered.
func (p *Platform) renewIntake(ctx context.Context) {
	now := p.clock.Now()
	expires := now.Add(intakeClaimTTL)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, key := range p.intake.keys() {
		held := p.intake.claimUntil(key)
		if held.IsZero() {
			continue // being claimed (a sweep)
		}
		wg.Go(func() {
			switch renewed, err := p.claims.Renew(ctx, intakeClaim(key), held, expires); {
			case err != nil:
				// It may have been made: a later renewal must not
				// take it for another instance's claim.
				p.intake.mayHaveClaimed(key, now, expires)
				if ctx.Err() == nil {
					p.log.Warn("slack intake claim not renewed", "key", key, "err", err)
				}
			case !renewed:
				p.log.Warn("slack intake claim lapsed and taken by another instance; not renewed", "key", key)
			default:
				p.intake.claimed(key, expires)
			}
		})
	}
}

// startIntake takes the entries nobody holds, then runs takeDeliveries,
// then queues them (ahead of any later request of their chats), and keeps
// the claims and sweeps until ctx ends. One instance alone sweeps too: an
// entry its start could not list, or whose deletion failed, is taken at a
// later sweep rather than at the next restart.
func (p *Platform) startIntake(ctx context.Context, takeDeliveries func()) {
	if p.intake == nil {
		takeDeliveries()
		return
	}
	p.intake.setRunCtx(ctx)
	p.sweepIntake(ctx, takeDeliveries)
	// Armed here, before Run goes on to report ready, not on the
	// goroutine: an injected clock moved once Run is ready moves them.
	renew := clock.NewTicker(p.clock, intakeRenewEvery)
	sweep := clock.NewTicker(p.clock, intakeSweepEvery)
	p.bg.Go(func() { p.keepIntake(ctx, renew, sweep) })
}
