package slack

import (
	"context"
	"errors"
	"strings"

	"github.com/slack-go/slack"

	"connector/platform"
)

// This file routes a Slack event to its tenant and consumes the account
// links. The order is the one Discord and Telegram route by: the author
// (platform.Authors: links, scope claims, principals, DM defaults), then
// the conversation's own binding (a channel bound to a tenant), then its
// workspace's (slack.teams and team bindings; the workspace is the one
// whose installation got the event). A tenant reached by author is
// granted the channel (platform.Grants, shared by every instance on the
// store).

// route resolves the tenant of an event by user (empty when it has none)
// in channel of workspace team (dm: a 1:1 DM). owner is set when the
// author is linked to the tenant (the owner floor: no mention gates);
// drop is why no tenant takes the event.
func (p *Platform) route(user, channel, team string, dm bool) (tenant string, owner bool, drop string) {
	if user != "" {
		if r, ok := (*p.authors.Load()).Route(user, dm, channel); ok {
			if r.Drop != "" {
				return "", false, r.Drop
			}
			p.grants.Add(channel, r.Tenant)
			return r.Tenant, r.Owner, ""
		}
	}
	if t := (*p.channels.Load())[channel]; t != "" {
		return t, false, ""
	}
	if t := p.teamTenant(team); t != "" {
		return t, false, ""
	}
	return "", false, dropUnclaimed
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

// link redeems code for user of workspace team and returns the reply to
// show. A tenant the user is now linked to is granted the DM channel.
func (p *Platform) link(ctx context.Context, user, channel, code string) string {
	tenant, err := p.deps.Linker.Link(ctx, platformName, user, code)
	reply, reason := platform.LinkAnswer(err)
	p.metrics.Dropped(platformName, reason)
	switch {
	case err == nil:
		p.grants.Add(channel, tenant)
	case !errors.Is(err, platform.ErrLinkRefused):
		p.log.Warn("slack /link not redeemed", "user_id", user, "err", err)
	}
	return reply
}

// replyLink answers a /link DM in the DM, on the linked tenant's share.
func (p *Platform) replyLink(ctx context.Context, team, channel, reply string) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	err := p.callIn(ctx, team, channel, "chat.postMessage", func(ctx context.Context, c *slack.Client) error {
		_, _, err := c.PostMessageContext(ctx, channel, slack.MsgOptionText(reply, false))
		return err
	})
	if err != nil {
		p.log.Warn("slack /link reply not sent", "channel_id", channel, "err", p.errorText(err))
	}
}

// ChatGranted implements platform.ChatGranter: tenant may act in chatID
// when it claimed the channel, or an event routed to it by author was
// posted there (and it is still remembered).
func (p *Platform) ChatGranted(chatID, tenant string) bool {
	return (*p.authors.Load()).Claimed(chatID, tenant) || p.grants.Has(chatID, tenant)
}
