package telegram

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-telegram/bot/models"

	"connector/platform"
	"connector/vault"
)

// errNotRunning answers updates that arrive while Run is not running.
var errNotRunning = errors.New("telegram: not running")

// errPosterUnknown answers a press whose prompt's poster the store could
// not look up: it is retried, not dropped, for posterWait.
var errPosterUnknown = errors.New("telegram: the pressed prompt's poster could not be looked up")

// posterWait bounds how long after it was first received a press whose
// prompt's poster the store could not look up is retried (route, ready):
// longer than a Redis failover. Its chat's later updates wait for it
// (Telegram sends a webhook the next once it is answered), and when
// polling the next long poll, every chat's; so a store that cannot read
// that one record (a foreign value) holds them that long, not for good.
// Then the press is dropped (poster_unknown).
const posterWait = time.Minute

// handle ingests one update (a webhook's) in its chat's turn and returns
// once it is delivered or dropped (prepare, then ingest). Updates of one
// chat are ingested one at a time in arrival order; those of other chats
// meanwhile go on (chatorder). It returns an error only when the sink
// refused the delivery, so the caller can have the update redelivered; a
// dropped update is not an error.
//
// With several instances behind one webhook URL, Telegram's retry of an
// update (its answer lost or late, the instance killed after storing it)
// may reach another instance than the first copy, which the per-instance
// seen does not know: the update_id is claimed in the store first
// (platform.Dedupe), so a copy handled elsewhere is dropped, and one still
// being handled elsewhere is platform.ErrBusy (503: Telegram retries).
// Long polling needs no claim: one instance polls, under the lease
// telegram/poll.
func (p *Platform) handle(ctx context.Context, u *models.Update, received time.Time) error {
	once := func() error {
		if p.sink.Load() == nil {
			return errNotRunning
		}
		in, ok := p.prepare(ctx, u)
		if !ok {
			return nil
		}
		return p.turns.Do(ctx, in.chatID, func() error { return p.ingest(ctx, u, &in, received) })
	}
	if p.dedupe == nil || u.ID == 0 {
		return once()
	}
	dup, err := p.dedupe.Once(ctx, strconv.FormatInt(u.ID, 10), once)
	if dup {
		p.drop(dropDuplicate, u.ID, 0)
	}
	return err
}

// prepare normalizes u; ok is false when it is dropped at once (counted).
func (p *Platform) prepare(ctx context.Context, u *models.Update) (in inbound, ok bool) {
	m := p.mapping.Load()
	if u.Message != nil && u.Message.ForumTopicEdited != nil {
		p.observeEdit(ctx, u.Message, m.botID)
	}
	in, drop := normalize(u, m)
	if drop != "" {
		if drop == dropForeignCallback {
			p.queueCallbackAnswer(in.callbackID)
		}
		p.drop(drop, u.ID, 0)
		return in, false
	}
	return in, true
}

// ingest ingests u, normalized as in, in its chat's turn: ready it, then
// deliver it.
func (p *Platform) ingest(ctx context.Context, u *models.Update, in *inbound, received time.Time) error {
	sink := p.sink.Load()
	if sink == nil {
		return errNotRunning
	}
	r := p.ready(ctx, u, in, received)
	if !r.deliver {
		return r.err
	}
	if err := (*sink).Deliver(ctx, r.d); err != nil {
		p.observed.Restore(r.observed.tenant, r.observed.topic, in.event.Context)
		return fmt.Errorf("telegram: deliver update %d: %w", u.ID, err)
	}
	p.delivered(u, in, r.d.Tenant)
	return nil
}

// datelessPressWindow is how long after its creation a tenant gets no
// press of a prompt whose message Telegram no longer shows the bot (an
// inaccessible message, no date: hours or days old), which may be an
// earlier tenant's of the id (earlierPrompt), but of one the record of its
// poster names it the poster of as it is now (route). The record lasts as
// long (vault.PromptPosterTTL), so a prompt the tenant posted is one.
const datelessPressWindow = 30 * 24 * time.Hour

// earlierPrompt reports whether a press of tenant's prompt posted at
// prompted (its message's date, Unix seconds; 0 when Telegram did not send
// the message) may answer an earlier tenant's of the id, deleted since,
// which the tenant made again must not get: its whole second went before
// the creation, or, undated, the tenant was made within
// datelessPressWindow (young). route asks the record of the prompt's
// poster then.
func (p *Platform) earlierPrompt(tenant string, prompted int64) bool {
	if prompted != 0 {
		return vault.Predates(p.deps.Vault, tenant, time.Unix(prompted+1, 0).Add(-time.Microsecond))
	}
	return p.young(tenant)
}

// promptsAsked reports whether a prompt tenant posts in chatID, which it
// holds by binding or claim, records its poster (platform.Egress.
// PromptsAsked): in a claimed chat, which may come to be held by grant
// once the claim goes, where a press asks for it (route); in a bound one
// while tenant is young, or came to hold it within datelessPressWindow
// (an undated press asks for it then: pressedBefore).
func (p *Platform) promptsAsked(tenant, chatID string) bool {
	own := p.owners.Load()
	_, bound := own.Owner(chatOf(chatID))
	return !bound || p.young(tenant) || p.pressedBefore(own, chatOf(chatID), 0)
}

// young reports whether tenant was made within datelessPressWindow: its
// undated presses ask the record of their prompt's poster (earlierPrompt),
// so its prompts are recorded in every chat (promptsAsked), a dated press
// of one posted since its creation never asks.
func (p *Platform) young(tenant string) bool {
	c := vault.Creation(p.deps.Vault, tenant)
	return !c.IsZero() && p.deps.Clock.Now().Sub(c) < datelessPressWindow
}

// readied is an update made ready for the sink.
type readied struct {
	// deliver is false when the update was dropped or consumed instead,
	// or must be retried (err).
	deliver  bool
	err      error
	d        platform.Delivery
	observed observedKey
}

// ready does what comes before an update's delivery, in its chat's turn:
// drop redeliveries, consume a "/link <code>" DM (handed to the link desk,
// never waited for), resolve the tenant (author first, then the chat:
// authors.go), gate, re-host its media. Once the delivery is stored the
// caller calls delivered.
func (p *Platform) ready(ctx context.Context, u *models.Update, in *inbound, received time.Time) readied {
	m := p.mapping.Load()
	if u.ID != 0 && p.seen.Contains(u.ID) {
		p.drop(dropDuplicate, u.ID, in.chatID)
		return readied{}
	}
	if code, ok := p.linkCode(in); ok {
		p.submitLink(in, code)
		if u.ID != 0 {
			p.seen.Add(u.ID, struct{}{})
		}
		return readied{}
	}
	tenant, created, owner, drop := p.route(ctx, in)
	if drop == dropPosterUnknown {
		if first, held, _ := p.posterUnknown.PeekOrAdd(u.ID, received); !held || p.deps.Clock.Now().Sub(first) < posterWait {
			return readied{err: errPosterUnknown}
		}
	}
	if drop != "" {
		if in.callbackID != "" {
			p.queueCallbackAnswer(in.callbackID) // stop the presser's spinner
		}
		p.drop(drop, u.ID, in.chatID)
		return readied{}
	}
	var observed observedKey
	if in.msg != nil {
		pol := p.policy(tenant)
		// The owner floor: an author's own message is never gated.
		if reason := pol.admit(in.msg, m); reason != "" && !owner {
			if pol.observes(in.msg, m) {
				in.event.Text = m.heldBackText(in.msg)
				k := observedKeyOf(tenant, created, in.msg)
				p.observed.Keep(k.tenant, k.topic, contextMessage(&in.event))
				reason = dropObserved
			}
			if u.ID != 0 {
				p.seen.Add(u.ID, struct{}{})
			}
			p.drop(reason, u.ID, in.chatID)
			return readied{}
		}
		if pol.sharesSessions(in.msg) {
			shareSession(&in.event)
			observed = observedKeyOf(tenant, created, in.msg)
			in.event.Context = p.observed.Take(observed.tenant, observed.topic) // Restore when not delivered
		}
		p.attachMedia(ctx, tenant, in.msg, &in.event)
	}
	d := p.delivery(tenant, in, received)
	d.Created = created
	return readied{deliver: true, d: d, observed: observed}
}

// delivered does what follows an update's stored delivery to tenant.
func (p *Platform) delivered(u *models.Update, in *inbound, tenant string) {
	if u.ID != 0 {
		p.seen.Add(u.ID, struct{}{})
	}
	if in.msg != nil {
		p.rehostDelivered(tenant, in.msg)
	}
	if in.callbackID != "" {
		p.queueCallbackAnswer(in.callbackID)
	}
}

// delivery wraps a normalized update for tenant: a "/stop" becomes an
// interrupt of the session it was sent in, anything else an inbound event.
func (p *Platform) delivery(tenant string, in *inbound, received time.Time) platform.Delivery {
	src := &in.event.Source
	d := platform.Delivery{Kind: platform.KindInbound, Tenant: tenant, Platform: platformName,
		SessionKey: p.deps.Key(tenant, src), ChatID: src.ChatID, Received: received, Event: &in.event}
	if in.stop {
		d.Kind, d.Event = platform.KindInterrupt, nil
	}
	return d
}

// drop counts and logs an update that is not delivered. The first update
// of an unclaimed chat is logged at info level (an operator may have to add
// the chat to a tenant), later ones and the other reasons at debug.
func (p *Platform) drop(reason string, updateID, chatID int64) {
	p.deps.Metrics.Dropped(platformName, reason)
	if reason == dropUnclaimed {
		if logged, _ := p.unclaimed.ContainsOrAdd(chatID, struct{}{}); !logged {
			p.log.Info("telegram update from a chat no tenant claims dropped", "chat_id", chatID, "update_id", updateID)
			return
		}
	}
	p.log.Debug("telegram update dropped", "reason", reason, "chat_id", chatID, "update_id", updateID)
}
