package slack

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"weak"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/platform"
	"connector/vault"
)

// This file places Slack events and actions in the ownership order
// (platform.Ownership: bindings of the channel or of its workspace, then
// scope claims, then author links), and consumes the "/link <code>" DMs
// that link an account. The workspace of an event is the one whose
// installation got it (slack.teams and team bindings bind it). A tenant
// reached by claim or author link is granted the channel
// (platform.Grants, shared by every instance on the store).

// chatOf places conversation channel of workspace team ("" when not
// known) for the ownership order: a D conversation is a 1:1 DM.
func chatOf(channel, team string) platform.Chat {
	return platform.Chat{ID: channel, Space: team, DM: strings.HasPrefix(channel, "D")}
}

// route resolves the tenant of an event by user (empty when it has none)
// in channel of workspace team (dm: a 1:1 DM). owner is set when the
// author is linked to the tenant (the owner floor: no mention gates);
// drop is why no tenant takes the event. created is the tenant's creation
// (vault.Creation) as the ownership was read, before the grant's store
// calls: a tenant deleted and made again under its id while they wait does
// not take the event.
func (p *Platform) route(ctx context.Context, user, channel, team string, dm bool) (tenant string, created time.Time, owner bool, drop string) {
	chat := chatOf(channel, team)
	chat.DM = dm
	r, ok := p.owners.Load().Route(user, chat)
	if !ok || r.Drop != "" {
		return "", time.Time{}, false, cmp.Or(r.Drop, dropUnclaimed) // Route is zero when !ok
	}
	created = vault.Creation(p.deps.Vault, r.Tenant)
	if r.Grant {
		p.grants.Add(ctx, channel, team, r.Tenant, created)
	}
	return r.Tenant, created, r.Owner, ""
}

// ChatGranted implements platform.ChatGranter: tenant may act in chatID
// (on a grant, platform.HoldGrant, when a grant lets it in any of the
// channel's workspaces; else alone, platform.HoldOwn) when it claimed the
// channel, or an event routed to it by claim or author
// link was posted there (and it is still remembered, platform.Grants), as
// long as the ownership order lets that stand in every workspace the
// channel is in (platform.Ownership.MayAct: no binding of the channel or of
// one of its workspaces, and no claim of another tenant). The channel is
// placed first (place), on any instance, whether this one saw it or not; a
// channel that cannot be placed grants nothing. A chat the tenant has
// neither claim nor grant of costs no lookup, but on one bot_token
// (sharedOnOneToken). The grant of a chat the tenant claimed is not read
// from the store, unless the claim recorded no space to place the chat by.
// A grant the store could not look up (platform.Grants.Granted) answers
// unavailable where nothing else lets tenant in.
func (p *Platform) ChatGranted(ctx context.Context, chatID, tenant string) (platform.Hold, error) {
	if !channelIDPattern.MatchString(chatID) {
		return platform.HoldNone, nil
	}
	own := p.owners.Load()
	claimSpace, claimed := own.ClaimedIn(chatID, tenant)
	var grantSpace string
	var granted bool
	if !claimed || claimSpace == "" { // a claim is held (or set aside) whatever the grants say
		var grantErr error
		if grantSpace, granted, grantErr = p.grants.Granted(ctx, chatID, tenant); !claimed && !granted {
			hold, err := p.sharedOnOneToken(ctx, chatID, tenant)
			if hold == platform.HoldNone && err == nil {
				err = grantErr
			}
			return hold, err
		}
	}
	teams, err := p.place(ctx, tenant, chatID, claimSpace, grantSpace)
	if err != nil || len(teams) == 0 {
		return platform.HoldNone, err
	}
	hold := platform.HoldOwn
	for _, team := range teams {
		h := own.Hold(tenant, chatOf(chatID, team), func() bool { return granted || claimed && p.grants.Has(ctx, chatID, tenant) })
		if h == platform.HoldNone {
			return platform.HoldNone, nil
		}
		hold = max(hold, h)
	}
	return hold, nil
}

// sharedOnOneToken is how tenant holds chat when bot_token alone serves
// every workspace (no slack.client_id) and another tenant's workspace is
// bound: a channel bound to no tenant itself, placed (place) in a
// workspace bound to tenant and in one bound to another tenant (Slack
// Connect), is held by grant (platform.HoldGrant): the bot posts there for
// both as one bot user, which Slack lets edit and delete either's
// messages, so each edits and deletes only its own (platform.Execute).
// A channel that cannot be placed (Slack not answering) but was seen in a
// workspace bound to tenant is held by grant too. Else HoldNone, and
// ChatTenant decides; with OAuth installs each workspace has a bot of its
// own, and Slack keeps each to its messages.
func (p *Platform) sharedOnOneToken(ctx context.Context, chat, tenant string) (platform.Hold, error) {
	teams := *p.teams.Load()
	others := false
	for _, t := range teams {
		others = others || t != tenant
	}
	if owner, _ := p.owners.Load().Owner(platform.Chat{ID: chat}); p.cfg.ClientID != "" || p.cfg.BotToken == "" || !others || owner != "" {
		return platform.HoldNone, nil
	}
	placed, err := p.place(ctx, tenant, chat)
	if err != nil {
		// Seen in a workspace of tenant's, the channel is tenant's, alone
		// or beside another tenant's: held by grant, the stricter.
		if seen := p.channelTeams(chat); slices.ContainsFunc(seen, func(t string) bool { return teams[t] == tenant }) {
			return platform.HoldGrant, nil
		}
		return platform.HoldNone, err
	}
	mine, other := false, false
	for _, team := range placed {
		t := teams[team]
		mine, other = mine || t == tenant, other || (t != "" && t != tenant)
	}
	if mine && other {
		return platform.HoldGrant, nil
	}
	return platform.HoldNone, nil
}

// heldAlone reports whether tenant holds channel alone (a binding or a
// claim: Ownership.Holder) in every workspace it is in (place: a Slack
// Connect channel's others too), so that no other tenant holds, or may be
// granted, any workspace's view of it (docs/security.md, rule 3). Else,
// and when the channel cannot be placed, several tenants may act there,
// each on its own: the bot posts for each (on one token as one bot user,
// with OAuth installs as each workspace's), and every workspace's token
// reads every workspace's messages. So it is, too, when the placement
// does not name team (the event's workspace): a channel conversations.info
// finds nowhere, or team not recorded past maxUnboundTeams. The channel
// is placed within placeDeadline (past it, it is not held alone): the
// chat's ingest waits on it.
func (p *Platform) heldAlone(ctx context.Context, channel, team, tenant string) bool {
	own := p.owners.Load()
	if holder, held := own.Holder(chatOf(channel, team)); !held || holder != tenant {
		return false
	}
	if owner, _ := own.Owner(platform.Chat{ID: channel}); owner == tenant {
		return true // bound as a channel, whatever its workspaces
	}
	ctx, cancel := within(ctx, p.clock, placeDeadline)
	defer cancel()
	teams, err := p.place(ctx, tenant, channel, team)
	if err != nil || !slices.Contains(teams, team) {
		return false
	}
	for _, t := range teams {
		if holder, held := own.Holder(chatOf(channel, t)); !held || holder != tenant {
			return false
		}
	}
	return true
}

// placeDeadline bounds heldAlone's placement of a channel, within the
// chat's ingest.
const placeDeadline = 2 * time.Second

// place returns the workspaces channel chat is in: those this instance
// saw it in, and those conversations.info names for it (a Slack Connect
// channel's other workspaces too), asked once per placementTTL with the
// token of a workspace that should have it (one it was seen in, the
// claim's or the grant's, hints), else of the asking tenant's. nil when
// none has it; an error wrapping platform.ErrUnavailable when Slack could
// not be asked. A channel evicted from chanTeams is asked again.
func (p *Platform) place(ctx context.Context, tenant, chat string, hints ...string) ([]string, error) {
	bound := weak.Make(p.teams.Load())
	p.chanMu.Lock() // not evicted between the two reads (seenIn)
	at, ok := p.placed.Get(chat)
	seen := p.channelTeams(chat)
	p.chanMu.Unlock()
	if ok && at == bound {
		return seen, nil
	}
	var unreachable error
	found := false
	for _, team := range slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(seen), hints...)))) {
		if team == "" {
			continue
		}
		ok, err := p.channelIn(ctx, team, chat)
		if err != nil {
			unreachable = err
			continue
		}
		if found = ok; found {
			break
		}
	}
	if !found {
		team, err := p.probeChannel(ctx, tenant, chat)
		switch {
		case err != nil:
			unreachable = err
		case team != "":
			found = true
		}
	}
	if !found && unreachable != nil {
		return nil, unreachable
	}
	p.placed.Add(chat, bound)
	return p.channelTeams(chat), nil
}

// mayAct reports whether tenant may act in chat (platform.Authorize, the
// check every action passes), for what an event makes of a chat other
// than its own (a reaction turn's target) or of a routing it outlived (a
// press of a prompt); err is set when that could not be told.
func (p *Platform) mayAct(ctx context.Context, tenant, chat string) (bool, error) {
	r, ok := platform.Authorize(ctx, p, tenant, chat)
	if !ok && r.Code == contract.CodeUnavailable {
		return false, fmt.Errorf("slack: the chat's owner could not be looked up: %s", r.Error)
	}
	return ok, nil
}

// LocateChat implements platform.ScopeLocator: a channel is placed in the
// workspace this instance saw it in, else looked up in the asking
// tenant's workspaces (conversations.info, on its share); one in none of
// them is unknown. Its space is its workspace, which a claim names as its
// guildId.
func (p *Platform) LocateChat(ctx context.Context, chatID string) (platform.Chat, error) {
	if !channelIDPattern.MatchString(chatID) {
		return platform.Chat{}, platform.ErrUnknownChat
	}
	if teams := p.channelTeams(chatID); len(teams) > 0 {
		return chatOf(chatID, teams[0]), nil
	}
	team, err := p.probeChannel(ctx, platform.TenantOf(ctx), chatID)
	switch {
	case err != nil:
		return platform.Chat{}, err // wraps platform.ErrUnavailable
	case team == "":
		return platform.Chat{}, platform.ErrUnknownChat
	}
	return chatOf(chatID, team), nil
}

// linkCommand reports whether a DM's text is the account-link command:
// "/link <code>", or "!link <code>" (Slack's client takes a leading "/"
// for a slash command, so the native adapter reads "!" as "/").
func linkCommand(text string) (string, bool) {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "!") {
		t = "/" + t[1:]
	}
	return platform.ParseLinkCommand(t)
}

// submitLink hands a "/link <code>" of user to the link desk
// (platform.LinkDesk), which redeems it and answers with reply on its own
// workers: the event's delivery, and the events behind it in the chat,
// never wait for them. A tenant the user is then linked to is granted the
// DM channel (of workspace team). A DM the desk does not take is consumed
// unanswered.
func (p *Platform) submitLink(team, user, channel, code string, reply func(context.Context, string)) {
	reason := p.links.Submit(user, func(ctx context.Context) {
		reply(ctx, p.deps.RedeemLink(ctx, platformName, user, code, func(tenant string, created time.Time) { p.grants.Add(ctx, channel, team, tenant, created) }))
	})
	if reason != "" {
		p.drop(reason, "")
	}
}

// replyLink answers a /link DM in the DM, on the link replies' own share
// of the workspace's budget (platform.LinkBudget).
func (p *Platform) replyLink(ctx context.Context, team, channel, reply string) {
	ctx, cancel := context.WithTimeout(platform.WithTenant(ctx, platform.LinkBudget), p.cfg.RequestTimeout)
	defer cancel()
	err := p.callIn(ctx, team, channel, "chat.postMessage", func(ctx context.Context, c *slack.Client) error {
		_, _, err := c.PostMessageContext(ctx, channel, slack.MsgOptionText(reply, false))
		return err
	})
	if err != nil {
		p.log.Warn("slack /link reply not sent", "channel_id", channel, "err", p.errorText(err))
	}
}

// replyLinkCommand answers a /link slash command ephemerally through its
// response_url.
func (p *Platform) replyLinkCommand(ctx context.Context, responseURL, reply string) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	if err := p.postResponseURL(ctx, responseURL, &slack.WebhookMessage{ResponseType: "ephemeral", Text: reply}); err != nil {
		p.log.Warn("slack /link answer not sent", "err", p.errorText(err))
	}
}

// HeldSince is when chatID's holder came to hold it
// (platform.Handover): by its own binding or claim, or the binding of a
// workspace it was seen in lately, the latest of them.
func (p *Platform) HeldSince(chatID string) time.Time {
	own := p.owners.Load()
	since := own.HeldSince(platform.Chat{ID: chatID})
	for _, team := range p.channelTeams(chatID) {
		if s := own.HeldSince(chatOf(chatID, team)); s.After(since) {
			since = s
		}
	}
	return since
}

// PostedAt is when message was posted, as its ts says (its seconds;
// platform.Handover).
func (p *Platform) PostedAt(message string) (at time.Time, dated, spelt bool) {
	if !messageTS.MatchString(message) {
		return time.Time{}, false, false
	}
	secs, _, _ := strings.Cut(message, ".")
	n, _ := strconv.ParseInt(secs, 10, 64)
	return time.Unix(n, 0), true, true
}
