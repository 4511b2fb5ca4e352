package telegram

import (
	"context"
	"time"

	"github.com/go-telegram/bot"

	"connector/contract"
	"connector/platform"
	"connector/session"
	"connector/vault"
)

// This file places Telegram updates and actions in the ownership order
// (platform.Ownership: chat bindings, then scope claims, then author
// links; Hermes contract §3 "Author-first resolution", §7.1), and consumes
// the "/link <code>" DMs that link an account. An update no rule places
// reaches nobody. A tenant may act in the chat where an update routed to
// it by author link was posted (platform.Grants): a linked user's DM chat,
// a group no binding or claim covers.

// route resolves the tenant of in by the ownership order. owner is set
// when the author is linked to it (the owner floor: the group gate is
// skipped); drop is why no tenant takes it.
//
// A button press in a chat no binding or claim covers, which several
// tenants may hold by grant, answers the tenant that posted the prompt
// only while the record Egress keeps of that (platform.Grants.PromptPoster:
// 30 days, under the tenant's creation; for a prompt posted by an earlier
// version, which kept none in a group, the day-long mark of the tenant the
// press routes to, platform.Grants.PostedBy) says so; else it is dropped
// (prompt_not_owned): the prompt is another tenant's, or too old to tell
// (the callback data has no room to name its tenant). A press elsewhere is
// its chat's tenant's, unless earlierPrompt suspects an earlier tenant's
// of the id and the record does not name the tenant as it is now, or,
// dated since a young tenant's creation, the record names an earlier
// tenant of the id (its op outlived it), or the day-long mark of the
// prompt's message names another tenant, which posted it while it held
// the chat (platform.Grants.PostedByAnother: prompt_not_owned, as a
// Discord or Slack press of a prompt whose chat moved), or, with no mark
// of the tenant's, the prompt may predate the binding or claim that gave
// the chat its holder (pressedBefore).
// A press whose poster the store could not look up is retried for a
// while (dropPosterUnknown, posterWait).
// A press answered by its poster renews the poster's grant only while the
// presser is linked to it, as Discord's route does. A reply quoting the
// bot's message says it is the tenant's own only when it is
// (platform.Grants.OwnQuote). created is the
// tenant's creation (vault.Creation) as the ownership was read (or as the
// prompt's record keeps it), before the grant's store calls: a tenant deleted and
// made again under its id while they wait does not take the update, nor the
// grant.
func (p *Platform) route(ctx context.Context, in *inbound) (tenant string, created time.Time, owner bool, drop string) {
	src := &in.event.Source
	chat := chatOf(src.ChatID)
	chat.DM = src.ChatType == session.ChatTypeDM
	own := p.owners.Load()
	r, ok := own.Route(src.UserID.Value, chat)
	switch {
	case !ok:
		return "", time.Time{}, false, dropUnclaimed
	case r.Drop != "":
		return "", time.Time{}, false, r.Drop
	}
	routed := r.Tenant
	created = vault.Creation(p.deps.Vault, routed)
	press := in.event.PromptResponse
	held := press != nil && own.Hold(r.Tenant, chat, func() bool { return true }) != platform.HoldGrant // by binding or claim
	switch {
	case press == nil:
	case !held:
		t, posted, ok, err := p.grants.PromptPoster(ctx, own, src.UserID.Value, chat, press.PromptMessageID, r.Tenant)
		switch {
		case ok && t != routed:
			r.Tenant, created = t, posted // as its record keeps it
		case ok || p.grants.PostedBy(ctx, src.ChatID, press.PromptMessageID, r.Tenant):
		case err != nil:
			return "", time.Time{}, false, dropPosterUnknown
		default:
			return "", time.Time{}, false, dropPromptNotOwned
		}
	case p.earlierPrompt(r.Tenant, in.prompted):
		switch t, _, ok, err := p.grants.PromptPoster(ctx, own, src.UserID.Value, chat, press.PromptMessageID, r.Tenant); {
		case err != nil:
			return "", time.Time{}, false, dropPosterUnknown
		case !ok || t != r.Tenant:
			return "", time.Time{}, false, dropEarlierTenantPrompt
		}
	case in.prompted != 0 && p.young(r.Tenant): // dated since the creation, maybe by an op that outlived an earlier tenant
		switch earlier, err := p.grants.PromptedByEarlier(ctx, src.ChatID, press.PromptMessageID, r.Tenant); {
		case err != nil:
			return "", time.Time{}, false, dropPosterUnknown
		case earlier:
			return "", time.Time{}, false, dropEarlierTenantPrompt
		}
	}
	if held { // a prompt remembered as posted there for another tenant (a day), or posted before the holder came, is not the holder's
		switch another, err := p.grants.PostedByAnother(ctx, src.ChatID, press.PromptMessageID, r.Tenant); {
		case err != nil:
			return "", time.Time{}, false, dropPosterUnknown
		case another:
			return "", time.Time{}, false, dropPromptNotOwned
		case p.pressedBefore(own, chat, in.prompted):
			if reason := p.notOwnPrompt(ctx, own, src.UserID.Value, chat, press.PromptMessageID, r.Tenant); reason != "" {
				return "", time.Time{}, false, reason
			}
		}
	}
	if r.Grant && (r.Tenant == routed || own.Linked(src.UserID.Value, r.Tenant)) && !vault.Earlier(p.deps.Vault, r.Tenant, created) {
		p.grants.Add(ctx, src.ChatID, "", r.Tenant, created) // not for one made again while PromptPoster read the store
	}
	if q := in.event.ReplyTo; q != nil && q.IsOwn { // its whole second, as earlierPrompt judges a date
		q.IsOwn = p.grants.OwnQuote(ctx, own, chat, src.ChatID, in.event.ReplyToMessageID, r.Tenant, time.Unix(int64(in.msg.ReplyToMessage.Date)+1, 0).Add(-time.Microsecond))
	}
	return r.Tenant, created, r.Owner, ""
}

// linkCode returns the code of in when it is a "/link <code>" DM the
// platform must consume.
func (p *Platform) linkCode(in *inbound) (string, bool) {
	if p.deps.Linker == nil || in.msg == nil || in.event.Source.ChatType != session.ChatTypeDM || in.event.Source.IsBot {
		return "", false
	}
	return platform.ParseLinkCommand(in.msg.Text)
}

// submitLink hands the "/link <code>" DM in to the link desk
// (platform.LinkDesk), which redeems it on its own workers: the update's
// delivery, and the updates behind it, never wait for the redemption or
// the reply. A DM the desk does not take is consumed unanswered.
func (p *Platform) submitLink(in *inbound, code string) {
	dm := *in // the desk runs after handle returned
	if reason := p.links.Submit(in.event.Source.UserID.Value, func(ctx context.Context) { p.redeemLink(ctx, &dm, code) }); reason != "" {
		p.drop(reason, 0, in.chatID)
	}
}

// redeemLink redeems code for the DM's author and answers in the DM,
// paced like any message to the chat, on the link replies' own share of
// the bot's budget (platform.LinkBudget).
func (p *Platform) redeemLink(ctx context.Context, in *inbound, code string) {
	user := in.event.Source.UserID.Value
	reply := p.deps.RedeemLink(ctx, platformName, user, code, func(tenant string, created time.Time) { p.grants.Add(ctx, in.event.Source.ChatID, "", tenant, created) })
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	err := p.paced(ctx, platform.LinkBudget, in.chatID, false, func(ctx context.Context) error {
		_, err := p.sendMessage(ctx, &bot.SendMessageParams{ChatID: in.chatID, Text: reply}, reply)
		return err
	})
	if err != nil {
		p.log.Warn("telegram /link reply not sent", "chat_id", in.chatID, "err", p.errorText(err))
	}
}

// ChatGranted implements platform.ChatGranter: tenant may act in chatID
// when it claimed the chat (alone, platform.HoldOwn; else on a grant,
// platform.HoldGrant), when the chat is the DM of a user linked to
// it (a private chat's id is its user's), or when an update routed to it
// by author link was posted there (and it is still remembered), as long
// as the ownership order lets that stand (platform.Ownership.MayAct: no
// binding or claim of another tenant). The first two hold on every
// instance and across restarts. A grant the store could not look up
// (platform.Grants.Granted) answers unavailable where nothing else lets
// tenant in; it is looked up in another tenant's chat too, so that
// neither the answer nor its cost tells whose the chat is.
func (p *Platform) ChatGranted(ctx context.Context, chatID, tenant string) (platform.Hold, error) {
	if _, err := parseChatID(chatID); err != nil {
		return platform.HoldNone, nil
	}
	own, chat := p.owners.Load(), chatOf(chatID)
	var err error
	looked := false
	granted := func() bool {
		_, ok, lookupErr := p.grants.Granted(ctx, chatID, tenant)
		looked, err = true, lookupErr
		return ok
	}
	hold := own.Hold(tenant, chat, func() bool { return chat.DM && own.Linked(chatID, tenant) || granted() })
	if hold == platform.HoldNone && !looked {
		granted()
	}
	return hold, err
}

// HeldSince is when chatID's holder came to hold it by its binding or
// claim (platform.Handover).
func (p *Platform) HeldSince(chatID string) time.Time {
	return p.owners.Load().HeldSince(chatOf(chatID))
}

// PostedAt implements platform.Handover: a Telegram message id says no
// time.
func (p *Platform) PostedAt(message string) (at time.Time, dated, spelt bool) {
	return time.Time{}, false, messageRef(contract.ID(message)) != 0
}

// notOwnPrompt is why a press of the prompt message in chat is not
// tenant's, "" when a record names tenant its poster: the day-long posted
// record (Grants.PostedBy), or the prompt's own (Grants.PromptPoster, kept
// while the holder came lately: promptsAsked). A store that could not
// read the prompt's record is dropPosterUnknown (the press is retried).
func (p *Platform) notOwnPrompt(ctx context.Context, own *platform.Ownership, user string, chat platform.Chat, message, tenant string) string {
	if p.grants.PostedBy(ctx, chat.ID, message, tenant) {
		return ""
	}
	switch t, _, ok, err := p.grants.PromptPoster(ctx, own, user, chat, message, tenant); {
	case err != nil:
		return dropPosterUnknown
	case !ok || t != tenant:
		return dropPromptNotOwned
	}
	return ""
}

// pressedBefore reports whether the prompt a press in chat answers, posted
// at prompted (its message's date, Unix seconds; 0 when Telegram did not
// send the message), may have been posted before the chat's holder came
// to hold it (Ownership.HeldSince; zero: no change of holder known): dated
// before then, or undated while the holder has held it less than
// datelessPressWindow.
func (p *Platform) pressedBefore(own *platform.Ownership, chat platform.Chat, prompted int64) bool {
	since := own.HeldSince(chat)
	switch {
	case since.IsZero():
		return false
	case prompted != 0:
		return time.Unix(prompted, 0).Before(since)
	}
	return p.deps.Clock.Now().Before(since.Add(datelessPressWindow))
}
