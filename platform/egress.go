package platform

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/netcause"
	"connector/platform/fairshare"
	"connector/vault"
)

// Op performs one outbound op of platform P for tenant on chat: what the
// platform's Egress.Chat made of the action's chat_id (a Discord channel
// id, a Telegram chat id, a nexscope room), already authorized for the
// tenant; the zero T for an op addressed to no chat (follow_up).
type Op[P, T any] func(p P, ctx context.Context, tenant string, chat T, a *contract.Action) contract.Result

// Ops is a platform's egress table; its keys are the descriptor's
// supported_ops.
type Ops[P, T any] map[string]Op[P, T]

// Names lists the table's ops, sorted.
func (o Ops[P, T]) Names() []string { return slices.Sorted(maps.Keys(o)) }

// DefaultTimeout bounds an action whose ctx has no deadline and whose
// Egress sets no Timeout: the 30 s a gateway waits for a result.
const DefaultTimeout = 30 * time.Second

// Egress is how a platform executes the gateway's outbound actions: its op
// table, how a chat_id names one of its chats, and the bound of an action
// called without a deadline. Execute runs every platform's actions through
// the same checks, in the same order, so one situation gets one answer on
// every platform (docs/contract.md, "Checks, in order").
type Egress[P Platform, T any] struct {
	// Ops is the op table.
	Ops Ops[P, T]
	// Chat makes a chat_id into the chat the platform's ops act on; ok is
	// false when chatID is not a chat id of the platform at all (for
	// example a Discord chat_id that is not a snowflake). A well-formed id
	// of a chat nobody claims is ok: Authorize declines it before any op
	// runs.
	Chat func(p P, chatID string) (chat T, ok bool)
	// Timeout bounds an action whose ctx has no deadline (a platform called
	// directly, not by the relay); zero means DefaultTimeout.
	Timeout time.Duration
	// Grants are a ChatGranter's grants, which remember the messages a
	// tenant posts in a chat it holds (Grants.Posted), its own to edit and
	// delete there and, once another tenant holds the chat, not that
	// one's; nil declines every edit and delete in a chat held by grant.
	Grants *Grants
	// Vault knows each tenant's creation (vault.Creation): an action
	// dispatched under another (WithCreation) is declined, and what an op
	// records keeps the creation it was authorized under. nil: neither.
	Vault vault.Store
	// PromptsAsked is set when a press of a prompt names no tenant
	// (Telegram's callback data has no room): then a prompt's poster is
	// recorded (Grants.Prompted) also outside a chat held by grant when
	// it is true for the tenant and the chat, where presses may ask for
	// it (one whose date cannot tell an earlier tenant's of the id, one
	// after the chat came to be held by grant).
	PromptsAsked func(tenant, chatID string) bool
	// ThreadChats is set when a thread a thread_create answers (its
	// thread_id) is a chat of the platform, which actions name as their
	// chat_id (a Discord thread is a channel), not a thread inside the
	// chat (a Telegram forum topic, a Slack thread's ts): then a thread
	// made in a chat held by grant is granted to its creator.
	ThreadChats bool
	// Clock is the clock the platform's calls wait on: a call made more
	// than recheckAfter after Authorize is asked about again (StillMayAct);
	// nil: clock.System.
	Clock clock.Clock
}

// Execute performs action a for tenant on p through e, after the checks
// of docs/contract.md ("Checks, in order", 2 and 4 to 8): the target named
// (MissingTarget), the op in e.Ops (Unsupported), the chat_id a chat of p
// (e.Chat), tenant allowed there (Authorize), an edit or delete of a
// message, a thread_rename of a topic, that is tenant's there
// (MayChange: in a chat held by grant, one posted there for tenant;
// else one not posted there for another tenant), and tenant one e.Vault
// knows (vault.Known), whose creation there, unless zero (declared), is
// the one ctx carries (WithCreation) when it carries one.
//
// The op then runs charged to tenant (WithTenant), its calls asking again
// as their turn comes (StillMayAct). The message an op that names none
// answers is remembered as tenant's (Grants.Posted; in a chat held by
// grant a prompt's also by the message alone, Grants.Prompted, elsewhere
// too when PromptsAsked), and in a chat held by grant a thread a thread_create made there, when
// threads are chats (ThreadChats), is granted to tenant (Grants.AddThread);
// such a thread started from a message, whose id is that message's (and
// not tenant's to edit), is remembered as tenant's in itself, in the
// thread as chat;
// each part of a message the op sends in several is remembered too
// (MarkParts).
// An op that names a message (namingOps) acts on one that exists, whatever
// id it answers, so it marks nothing. Everything from Authorize on runs
// under ctx's deadline, or e.Timeout when ctx has none, but the mark,
// stored even when ctx ended as the op returned.
func Execute[P Platform, T any](ctx context.Context, e *Egress[P, T], p P, tenant string, a *contract.Action) contract.Result {
	if r, missing := a.MissingTarget(); missing {
		return r
	}
	op, ok := e.Ops[a.Op]
	if !ok {
		return Unsupported(p.Name())
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmp.Or(e.Timeout, DefaultTimeout))
		defer cancel()
	}
	ctx = WithTenant(ctx, tenant)
	var chat T
	var hold Hold
	chatID, message := string(a.ChatID), string(a.MessageID)
	if contract.AddressesChat(a.Op) {
		if chat, ok = e.Chat(p, chatID); !ok {
			return contract.Failed(contract.CodeBadRequest, "chat_id is not a "+p.Name()+" chat id")
		}
		var err error
		if hold, err = authorize(ctx, p, tenant, chatID); err != nil {
			return refusal(p.Name(), err)
		}
		ctx = actingIn(ctx, p, tenant, chatID, e.Clock)
		// A thread that is a chat of its own (ThreadChats) is checked as a chat by its op;
		// react and thread_create name users' messages too, unmarked (docs/security.md, rule 3).
		ownOnly := a.Op == contract.OpEdit || a.Op == contract.OpDelete || (a.Op == contract.OpThreadRename && !e.ThreadChats)
		if ownOnly {
			if r, ok := MayChange(ctx, e.Grants, p, hold, chatID, message, tenant); !ok {
				return r
			}
		}
	}
	// The tenant's creation as the action was dispatched (WithCreation),
	// else as the op was authorized: an action of a tenant since deleted,
	// or deleted and made again (the relay revokes its connections as it
	// applies the change, after the vault, and the platforms let its chats
	// go after that), is declined, and one that returns after that marks
	// nothing of the new one. The creation is read before whether the
	// tenant is known, so an apply between the two is seen.
	created, dispatched := ctx.Value(creationKey{}).(time.Time)
	if e.Vault != nil {
		now := vault.Creation(e.Vault, tenant)
		if !vault.Known(e.Vault, tenant) || dispatched && !now.IsZero() && !now.Equal(created) {
			return contract.Declined(p.Name())
		}
		created = now
		ctx = context.WithValue(ctx, creationKey{}, created) // AuthorizedCreation
	}
	if hold != HoldNone && e.Grants != nil {
		ctx = MarkParts(ctx, e.Grants, chatID, tenant, created)
	}
	r := op(p, ctx, tenant, chat, a)
	posted := r.MessageID != "" && (message == "" || !slices.Contains(namingOps, a.Op))
	if hold != HoldNone && e.Grants != nil && posted {
		e.Grants.Posted(ctx, chatID, r.MessageID, tenant, created)
	}
	if (hold == HoldGrant || e.PromptsAsked != nil && e.PromptsAsked(tenant, chatID)) && e.Grants != nil && a.Op == contract.OpPrompt && posted {
		e.Grants.Prompted(ctx, chatID, r.MessageID, tenant, created)
	}
	if e.ThreadChats && e.Grants != nil && a.Op == contract.OpThreadCreate && r.Success && r.ThreadID != "" {
		if hold == HoldGrant {
			e.Grants.AddThread(ctx, chatID, r.ThreadID, tenant)
		}
		if hold != HoldNone && message != "" {
			e.Grants.Posted(ctx, r.ThreadID, r.ThreadID, tenant, created)
		}
	}
	return r
}

// MayChange reports whether tenant, holding chatID on p so (hold), may
// edit, delete or rename message there (Execute's check; Discord's
// thread_rename makes it of the thread's channel), else the result to
// answer: by grant, one posted there for it (Grants.PostedBy; none with no
// grants); by binding or claim, one not posted there for another tenant,
// or an earlier tenant of its id, while that one held the chat (the
// record Grants.Posted keeps), nor, with no record, one posted before
// tenant came to hold the chat (handedOver), unavailable when the store
// could not tell.
func MayChange(ctx context.Context, g *Grants, p Platform, hold Hold, chatID, message, tenant string) (contract.Result, bool) {
	if hold == HoldGrant {
		return contract.Declined(p.Name()), g != nil && g.PostedBy(ctx, chatID, message, tenant)
	}
	if g == nil {
		return contract.Result{}, true
	}
	switch rec, err := g.poster(ctx, chatID, message, tenant); {
	case err != nil:
		return OwnerUnknown(p.Name(), err), false
	case rec.tenant != "" && (rec.tenant != tenant || g.earlier(rec)),
		rec.tenant == "" && handedOver(p, g.clock.Now(), chatID, message):
		return contract.Declined(p.Name()), false
	}
	return contract.Result{}, true
}

// Handover is implemented by platforms whose chats held by binding or
// claim change holder (Binding.Since): a message there with no record of
// its poster (Grants.Posted keeps one for vault.ChatGrantTTL) is not the
// holder's when it was posted before the holder came to hold the chat.
type Handover interface {
	// HeldSince is when chatID's holder came to hold it
	// (Ownership.HeldSince, the chat placed as the platform knows it);
	// zero when not known.
	HeldSince(chatID string) time.Time
	// PostedAt is when message was posted, as its id says (a Discord
	// snowflake, a Slack ts); dated is false when the id does not say, and
	// spelt when it is not spelt as the platform spells its message ids
	// (the op then answers bad_request, whatever the holder).
	PostedAt(message string) (at time.Time, dated, spelt bool)
}

// handedOver reports whether message in chatID, which has no record of
// its poster, may be an earlier holder's: p (a Handover) knows when the
// holder came to hold the chat, and the message was posted before; or, its
// id carrying no time, the holder came less than vault.ChatGrantTTL
// before now, so a message it posted since would still have its record.
func handedOver(p Platform, now time.Time, chatID, message string) bool {
	h, ok := p.(Handover)
	if !ok {
		return false
	}
	since := h.HeldSince(chatID)
	if since.IsZero() {
		return false
	}
	switch at, dated, spelt := h.PostedAt(message); {
	case !spelt:
		return false // no message of p's: its op answers bad_request
	case dated:
		return at.Before(since)
	}
	return now.Before(since.Add(vault.ChatGrantTTL))
}

// namingOps are the ops that act on the message their action's message_id
// names, which they may answer (Execute marks nothing for them: a Discord
// thread started from a message has its id, which the action may have
// spelled otherwise); another op's message_id is stray, and its answer a
// message it posted.
var namingOps = []string{contract.OpEdit, contract.OpDelete, contract.OpReact, contract.OpThreadCreate, contract.OpThreadRename}

// Unsupported is the result of an op outside platform name's table.
func Unsupported(name string) contract.Result {
	return contract.Failed(contract.CodeUnsupportedOp, name+" does not support this op")
}

// Authorize is the one check that tenant may act in chatID on p, made by
// Execute before a chat-addressed op: p grants it the chat (ChatGranter) or
// ChatTenant, asked on its behalf (WithTenant), names it. Otherwise it
// returns false and the result to answer: OwnerUnknown when either's error
// wraps ErrUnavailable, else the uniform decline. A chat Locate found for
// the same tenant on p is not asked about again.
func Authorize(ctx context.Context, p Platform, tenant, chatID string) (contract.Result, bool) {
	_, err := authorize(ctx, p, tenant, chatID)
	return refusal(p.Name(), err), err == nil
}

// AuthorizeCalls is Authorize for the chat an op's calls act in when it is
// not the action's chat_id (a follow_up's channel, a Discord thread
// renamed): it returns how tenant holds chatID (HoldNone: refused, with
// the result to answer), and ctx marked, as Execute marks an action's, so
// that its calls ask again about chatID as their turn comes (StillMayAct,
// judged on clk; nil: clock.System).
func AuthorizeCalls(ctx context.Context, p Platform, tenant, chatID string, clk clock.Clock) (context.Context, Hold, contract.Result) {
	hold, err := authorize(ctx, p, tenant, chatID)
	if err != nil {
		return ctx, HoldNone, refusal(p.Name(), err)
	}
	return actingIn(ctx, p, tenant, chatID, clk), hold, contract.Result{}
}

// actingIn is ctx marked for calls tenant makes in chatID on p, authorized
// now on clk (nil: clock.System): they ask again (StillMayAct).
func actingIn(ctx context.Context, p Platform, tenant, chatID string, clk clock.Clock) context.Context {
	return AskAgain(ctx, p.Name(), clk, func(ctx context.Context) error {
		_, err := ask(ctx, p, tenant, chatID)
		return err
	})
}

// AskAgain is ctx marked, as Execute marks an action's, for calls platform
// name authorized now on clk (nil: clock.System) by a rule of its own
// rather than Authorize (Discord's dm_tenant of a DM follow_up): they ask
// still again as their turn comes (StillMayAct), which answers nil while
// the tenant may act, else ErrUnknownChat or an error wrapping
// ErrUnavailable.
func AskAgain(ctx context.Context, name string, clk clock.Clock, still func(context.Context) error) context.Context {
	clk = cmp.Or(clk, clock.System)
	return context.WithValue(ctx, authorizedKey{}, authorized{name, still, clk, clk.Now()})
}

// refusal is the answer of platform name to an action authorize refused
// with err (nil: none).
func refusal(name string, err error) contract.Result {
	switch {
	case err == nil:
		return contract.Result{}
	case errors.Is(err, ErrUnavailable):
		return OwnerUnknown(name, err)
	}
	return contract.Declined(name)
}

// authorize is Authorize's check: how tenant holds the chat, else
// ErrUnknownChat or an error wrapping ErrUnavailable.
func authorize(ctx context.Context, p Platform, tenant, chatID string) (Hold, error) {
	if found, ok := ctx.Value(locatedKey{}).(located); ok && found == (located{p.Name(), tenant, chatID, found.hold}) {
		return found.hold, nil
	}
	return ask(ctx, p, tenant, chatID)
}

// ask is authorize without Locate's answer: p asked afresh. A grant that
// could not be looked up (ChatGranted's ErrGrantUnknown) leaves the chat
// unavailable unless ChatTenant names tenant (a binding comes first), with
// ChatTenant's own error first (ErrWouldWait: Locate asks again, waiting);
// any other failure of ChatGranted (a lookup of the chat at the platform)
// answers at once, ChatTenant not asked to make it again.
func ask(ctx context.Context, p Platform, tenant, chatID string) (Hold, error) {
	ctx = WithTenant(ctx, tenant)
	var grantErr error
	if g, ok := p.(ChatGranter); ok {
		hold, err := g.ChatGranted(ctx, chatID, tenant)
		switch {
		case errors.Is(err, ErrGrantUnknown):
			grantErr = err
		case errors.Is(err, ErrUnavailable):
			return HoldNone, err
		case hold != HoldNone:
			return hold, nil
		}
	}
	owner, err := p.ChatTenant(ctx, chatID)
	switch {
	case err == nil && owner == tenant:
		return HoldOwn, nil
	case errors.Is(err, ErrUnavailable):
		return HoldNone, err
	case grantErr != nil:
		return HoldNone, grantErr
	}
	return HoldNone, ErrUnknownChat
}

// StillMayAct is Authorize asked again, afresh, as a platform call under
// ctx is about to be made: an action is authorized once (Execute), then
// its calls may wait for their pace and budgets up to its deadline, while
// the chat is bound or claimed by another tenant, or the tenant's grant or
// link there ends. It is nil while the tenant Execute authorized may still
// act in the action's chat, when the call is made within recheckAfter of
// Authorize (on Egress.Clock: a call that did not wait costs no second
// lookup), or when ctx carries no such chat (a link reply, a call outside
// Execute and AuthorizeCalls); else an error CommonFailure answers as
// Authorize would have: the uniform decline, or unavailable when the
// owner could not be looked up (or as AskAgain's still answers). A tenant deleted and created again meanwhile acts
// nowhere: the relay revokes its actions' ctx, and the vault holds none
// of the earlier tenant's grants for the new one. Discord, Slack and
// Telegram call it where their calls wait, after the wait and before the
// request (WhatsApp asks the same of the number a message goes out from).
func StillMayAct(ctx context.Context) error {
	a, ok := ctx.Value(authorizedKey{}).(authorized)
	if !ok || a.clock.Now().Sub(a.at) <= recheckAfter {
		return nil
	}
	// The platform's own calls while it asks (a Discord channel lookup) are not asked about.
	if err := a.still(context.WithValue(ctx, authorizedKey{}, nil)); err != nil {
		return &refusedError{a.name, err}
	}
	return nil
}

// recheckAfter is how long after Authorize a call goes out on its answer
// (StillMayAct): about as long as the call itself is in flight, while the
// chat may change hands all the same.
const recheckAfter = 100 * time.Millisecond

// authorizedKey is the context key of the chat Execute (or AuthorizeCalls)
// authorized.
type authorizedKey struct{}

// authorized is the chat Execute let a tenant act in on platform name, at
// (on clock), and still, which asks again (StillMayAct).
type authorized struct {
	name  string
	still func(context.Context) error
	clock clock.Clock
	at    time.Time
}

// refusedError is StillMayAct's refusal on platform name: err is ask's.
type refusedError struct {
	name string
	err  error
}

// Error implements error.
func (e *refusedError) Error() string { return e.name + ": the chat, asked again: " + e.err.Error() }

// Unwrap returns ask's error.
func (e *refusedError) Unwrap() error { return e.err }

// locatedKey is the context key of the chat Locate found.
type locatedKey struct{}

// located is a chat Locate found tenant may act in on a platform, and how
// tenant holds it.
type located struct {
	platform, tenant, chat string
	hold                   Hold
}

// Locate returns the first of ps on which tenant may act in chatID
// (Authorize), for an action that names no platform, and ctx marked so that
// this platform's Execute does not ask again for that chat. Each is asked
// first without waiting (MayWait false): one whose answer would wait
// (ErrWouldWait) is asked again, waiting, only when no other places the
// chat, so a chat of one platform never waits on another's. When none
// lets it, the error wraps ErrUnavailable if one of them could not be
// asked, else it is ErrUnknownChat.
func Locate(ctx context.Context, ps []Platform, tenant, chatID string) (Platform, context.Context, error) {
	failure := ErrUnknownChat
	quick := context.WithValue(ctx, noWaitKey{}, true)
	asks := slices.Clip(ps) // then those whose answer would wait, asked again
	for i := 0; i < len(asks); i++ {
		p, askCtx := asks[i], quick
		if i >= len(ps) {
			askCtx = ctx
		}
		hold, err := authorize(askCtx, p, tenant, chatID)
		switch {
		case err == nil:
			return p, context.WithValue(ctx, locatedKey{}, located{p.Name(), tenant, chatID, hold}), nil
		case i < len(ps) && errors.Is(err, ErrWouldWait):
			asks = append(asks, p)
		case errors.Is(err, ErrUnavailable):
			failure = err
		}
	}
	return nil, ctx, failure
}

// noWaitKey marks the ctx of Locate's first asks.
type noWaitKey struct{}

// MayWait reports whether a platform asked under ctx whose chat owner it
// cannot tell yet may wait until it can (for its state to load, or for a
// lookup over the network); when not (Locate's first asks), it answers
// ErrWouldWait at once instead, for every chat it would wait for alike.
func MayWait(ctx context.Context) bool { return ctx.Value(noWaitKey{}) == nil }

// ErrWouldWait is a platform's answer, under a ctx MayWait says no to, to
// an ask it would answer only after a wait. It wraps ErrUnavailable.
var ErrWouldWait = fmt.Errorf("the chat's owner is known only after a wait: %w", ErrUnavailable)

// UnavailableError is an error wrapping ErrUnavailable whose text is safe
// to show a gateway as it is (it names no address, token or transport
// detail): OwnerUnknown answers with it.
type UnavailableError string

// Error implements error.
func (e UnavailableError) Error() string { return string(e) }

// Unwrap makes the error wrap ErrUnavailable.
func (UnavailableError) Unwrap() error { return ErrUnavailable }

// OwnerUnknown answers an action on platform name whose chat owner (or
// message's poster, MayChange) could not be looked up (err wraps
// ErrUnavailable): the retryable unavailable, saying nothing about whose
// the chat is, in err's text when it is an UnavailableError and never in
// the transport error's.
func OwnerUnknown(name string, err error) contract.Result {
	var u UnavailableError
	if errors.As(err, &u) {
		return contract.Failed(contract.CodeUnavailable, string(u))
	}
	return contract.Failed(contract.CodeUnavailable, name+": the chat's owner could not be looked up; retry later")
}

// SendParts sends a message's parts in order, each with send (i is its
// index), and returns the first and last messages' ids with the result:
// OK(first), or failure's result when the first part failed. Past the
// first part a failure is OK(first) too, its Error saying how many parts
// went out and why the rest did not: the gateway must not send the
// message again, which would post the sent parts twice (Whole is the
// answer of an op that needs every part). Under ctx from MarkParts, each
// part is remembered as it goes out.
func SendParts(ctx context.Context, parts []string, send func(i int, part string) (string, error), failure func(error) contract.Result) (first, last string, r contract.Result) {
	mark, _ := ctx.Value(partsKey{}).(func(string))
	for i, part := range parts {
		id, err := send(i, part)
		if err != nil {
			r = failure(err)
			if i > 0 {
				r = contract.Result{Success: true, MessageID: first,
					Error: fmt.Sprintf("%s (sent %d of %d parts; the rest was not sent)", r.Error, i, len(parts))}
			}
			return first, last, r
		}
		if i == 0 {
			first = id
		}
		if mark != nil && id != "" { // an ephemeral post has no id
			mark(id)
		}
		last = id
	}
	return first, last, contract.OK(first)
}

// Whole is r, SendParts' result, for an op whose message is of use only
// whole (a prompt, whose buttons ride its last part): a message sent in
// part is platform_error, still carrying its first part's id.
func Whole(r contract.Result) contract.Result {
	if r.Success && r.Error != "" {
		r.Success, r.Code = false, contract.CodePlatformError
	}
	return r
}

// partsKey is the context key of MarkParts' mark.
type partsKey struct{}

// MarkParts is ctx under which SendParts remembers each part of a message
// it sends as posted in chat for tenant as created (Grants.Posted), where
// tenant holds chat: also the parts that follow a message the op
// answers with (a sealed Telegram draft's, a caption's overflow), so a
// reply quoting any of them there is its own (Grants.OwnQuote). Execute
// remembers the op's answer again, which Posted does not store twice.
func MarkParts(ctx context.Context, g *Grants, chat, tenant string, created time.Time) context.Context {
	return context.WithValue(ctx, partsKey{}, func(id string) { g.Posted(ctx, chat, id, tenant, created) })
}

// RateLimitedError says an op could not be paced within its deadline:
// its next slot is Wait away.
type RateLimitedError struct{ Wait time.Duration }

// Error implements error.
func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited; next slot in %s, after the request's deadline", e.Wait.Round(time.Millisecond))
}

// CommonFailure is the result, its text after prefix ("slack send: "), of
// the op errors every platform answers alike: a call StillMayAct refused
// is answered as Authorize answers; ErrClaimHeld (another copy of the
// op kept its claim past the deadline) is unavailable, retry; a
// RateLimitedError is rate_limited with its wait as the hint; no answer before the deadline,
// or a network failure reaching peer (the remote API's name), is
// unavailable, the latter described without the URL or address its text
// holds. ok is false for any other error.
func CommonFailure(prefix, peer string, err error) (r contract.Result, ok bool) {
	var limited *RateLimitedError
	var refused *refusedError
	switch {
	case errors.As(err, &refused):
		return refusal(refused.name, refused.err), true
	case errors.Is(err, ErrClaimHeld):
		return contract.Failed(contract.CodeUnavailable, prefix+err.Error()), true
	case errors.As(err, &limited):
		r = contract.Failed(contract.CodeRateLimited, prefix+"rate limited; retry later")
		r.RetryAfterMS = max(limited.Wait.Milliseconds(), 1)
		return r, true
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return contract.Failed(contract.CodeUnavailable, prefix+"no answer from "+peer+" before the deadline"), true
	case netcause.IsNetwork(err):
		return contract.Failed(contract.CodeUnavailable, prefix+peer+" unreachable: "+netcause.Describe(err)), true
	}
	return r, false
}

// LatestStart is when, on clk (the clock rate limits wait on), a platform
// call under ctx must start at the latest: margin before ctx's deadline,
// which is real time, or before timeout from now when ctx has none.
func LatestStart(ctx context.Context, clk clock.Clock, timeout, margin time.Duration) time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(timeout)
	}
	return clk.Now().Add(time.Until(deadline) - margin)
}

// WaitShare waits until latest (on clk, the budget's clock) for one unit
// of tenant's fair share of budget: nil once granted, ctx's error when
// ctx ended first, else a RateLimitedError (no share came in time, or too
// many of tenant's requests wait already). With latest already past, no
// call can start in time: it takes no unit, even one at hand (as
// pace.Pacer.Reserve gives no slot past latest).
func WaitShare(ctx context.Context, budget *fairshare.Scheduler, tenant string, latest time.Time, clk clock.Clock) error {
	if clk.Now().After(latest) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return &RateLimitedError{Wait: time.Second}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bound := clk.AfterFunc(latest.Sub(clk.Now()), cancel)
	defer bound.Stop()
	if err := budget.Wait(wctx, tenant); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &RateLimitedError{Wait: time.Second}
	}
	return nil
}
