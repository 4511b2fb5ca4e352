package discord

import (
	"context"
	"errors"
	"fmt"

	"github.com/bwmarrin/discordgo"

	"connector/platform"
)

// This file places Discord events and actions in the ownership order
// (platform.Ownership: guild bindings, then scope claims, then author
// links; Hermes contract §3 "Author-first resolution", §7.1) and consumes
// the "/link <code>" DMs that link an account. An event no rule places
// goes to dm_tenant when it is a DM, else nowhere. A tenant may act in
// the channel where an event routed to it by claim or author link was
// posted (platform.Grants, shared by every instance on the store), and in
// the thread auto-threading made of it (ingestMessage), as long as no
// binding or claim of another tenant covers it.

// chatOf places a channel of guildID ("" for a DM) for the ownership
// order: a thread's parent channel comes from the channel cache.
func (p *Platform) chatOf(guildID, channelID string) platform.Chat {
	c := platform.Chat{ID: channelID, Space: guildID, DM: guildID == ""}
	if ci, ok := p.cache.cachedChannel(channelID); ok {
		c.Parent = ci.threadParent()
	}
	return c
}

// chatOfInfo places a cached or looked-up channel for the ownership order.
func chatOfInfo(ci chanInfo) platform.Chat {
	return platform.Chat{ID: ci.ID, Parent: ci.threadParent(), Space: ci.GuildID, DM: ci.Type == discordgo.ChannelTypeDM || ci.Type == discordgo.ChannelTypeGroupDM}
}

// route resolves the tenant of an event by the ownership order, from its
// author (their user id; empty when it has none) in chat c (chatOf): the
// one rule for messages and interactions alike. owner is set when the
// author is linked to the tenant (the owner floor); drop is why no tenant
// takes the event (platform.DropPrincipal, or dropUnclaimed). A tenant
// reached by claim or author link is granted the channel. pressed is the
// prompt message a button press answers ("" for any other event): in a
// chat reached by grant, the press goes to the tenant that posted it
// while it may act there (platform.Grants.PromptPoster), which it renews
// the grant of only while the author is linked to it: a user whose link
// moved does not keep the earlier tenant in the chat by pressing its
// prompts.
func (p *Platform) route(ctx context.Context, author string, c platform.Chat, pressed string) (tenant string, owner bool, drop string) {
	own := p.owners.Load()
	r, ok := own.Route(author, c)
	switch {
	case ok && r.Drop != "":
		return "", false, r.Drop
	case ok:
		routed := r.Tenant
		if r.Grant && pressed != "" {
			if t, ok, _ := p.spoke.PromptPoster(ctx, own, author, c, pressed, routed); ok {
				r.Tenant = t
			}
		}
		if r.Grant && (r.Tenant == routed || own.Linked(author, r.Tenant)) {
			p.spoke.Add(ctx, c.ID, c.Space, r.Tenant)
		}
		return r.Tenant, r.Owner, ""
	case c.Space == "" && p.cfg.DMTenant != "":
		return p.cfg.DMTenant, false, ""
	}
	return "", false, dropUnclaimed
}

// dropUnclaimed is route's drop for an event no tenant claims.
const dropUnclaimed = "unclaimed"

// messageNormalizer resolves m's tenant (route) and returns the normalizer
// to read it with: under the owner floor, without the tenant's mention
// gates. A guild channel the cache lacks is looked up first, as
// normalization would, so a thread is placed by its parent.
func (p *Platform) messageNormalizer(ctx context.Context, m *wireMessage) (n *normalizer, tenant, drop string) {
	author := ""
	if m.Author != nil {
		author = m.Author.ID
	}
	chat := p.chatOf(m.GuildID, m.ChannelID)
	if chat.Parent == "" && m.GuildID != "" {
		// Not cached (or no parent): a thread's channel decides its claim.
		if ci, err := p.cache.channel(ctx, m.ChannelID); err == nil {
			chat.Parent = ci.threadParent()
		}
	}
	tenant, owner, drop := p.route(ctx, author, chat, "")
	if drop != "" {
		return nil, "", drop
	}
	n = p.normalizer(tenant)
	if owner {
		floor := *n.pol
		floor.requireMention, floor.threadRequireMention, floor.ignoreNoMention = false, false, false
		n.pol = &floor
	}
	return n, tenant, ""
}

// consumeLink handles m when it is a "/link <code>" DM: it hands the DM
// to the link desk (platform.LinkDesk), which redeems the code for the
// DM's author and answers in the DM on its own workers, so the ingest
// worker goes on at once (an edit into one is only dropped). It reports
// whether m was one (and must not be routed).
func (p *Platform) consumeLink(m *wireMessage, edit bool) bool {
	if p.deps.Linker == nil || m.GuildID != "" || m.Author == nil || m.Author.Bot || m.WebhookID != "" {
		return false
	}
	code, ok := platform.ParseLinkCommand(m.Content)
	if !ok {
		return false
	}
	if edit {
		p.metrics.Dropped(platformName, "link_edit")
		return true
	}
	user, channel := m.Author.ID, m.ChannelID
	if reason := p.links.Submit(user, func(ctx context.Context) { p.redeemLink(ctx, user, channel, code) }); reason != "" {
		p.metrics.Dropped(platformName, reason)
	}
	return true
}

// redeemLink redeems code for user and answers in the DM channel, on the
// link replies' own share of the bot's budget (platform.LinkBudget).
func (p *Platform) redeemLink(ctx context.Context, user, channel, code string) {
	reply := p.deps.RedeemLink(ctx, platformName, user, code, func(tenant string) { p.spoke.Add(ctx, channel, "", tenant) })
	if err := p.rest(platform.WithTenant(ctx, platform.LinkBudget), "POST", discordgo.EndpointChannelMessages(channel), &discordgo.MessageSend{Content: reply}, nil); err != nil {
		p.log.Warn("discord /link reply not sent", "channel_id", channel, "err", describe(err).Error)
	}
}

// dmFallback reports whether ci is a DM channel tenant holds by rule 4
// (dmTenant). The tenant its user was linked to until lately may still
// act there on its grant, so rule 4 holds the DM as a grant does
// (platform.HoldGrant): each edits and deletes only its own messages.
func (p *Platform) dmFallback(ci chanInfo, tenant string) bool {
	owner, ok := p.channelTenant(ci)
	return ok && owner == tenant && ci.Type == discordgo.ChannelTypeDM
}

// ChatGranted implements platform.ChatGranter: tenant may act in chatID
// (alone, platform.HoldOwn, or on a grant, platform.HoldGrant) when it claimed the channel (or, as the cache knows it, the thread's
// channel), or a message routed to it by claim or author link was posted
// there (and it is still remembered), and the ownership order lets that
// stand where the channel is (platform.Ownership.MayAct: no binding or
// claim of another tenant), or holds it as a grant does when it is a
// cached DM channel of dm_tenant's (dmFallback). Only then is the channel placed: from the
// cache, else looked up for the tenant; a chat the tenant has neither
// claim nor grant of costs no lookup, except on a standby (standby.go),
// whose cache lacks the threads the Gateway tells of: there a chat it has
// not cached is looked up (standbyLookup, the call ChatTenant would make)
// so that a thread of a channel the tenant claimed is placed by its parent.
// A grant the store could not look up (platform.Grants.Granted) answers
// unavailable, unless the tenant claimed the chat or it is dm_tenant's DM.
func (p *Platform) ChatGranted(ctx context.Context, chatID, tenant string) (platform.Hold, error) {
	own := p.owners.Load()
	_, spoke, grantErr := p.spoke.Granted(ctx, chatID, tenant)
	claimed := own.Claimed(chatID, tenant)
	ci, cached := p.cache.cachedChannel(chatID)
	if parent := ci.threadParent(); cached && parent != "" {
		claimed = claimed || own.Claimed(parent, tenant)
	}
	if grantErr != nil && !claimed {
		if cached && p.dmFallback(ci, tenant) {
			return platform.HoldGrant, nil
		}
		return platform.HoldNone, grantErr
	}
	if !spoke && !claimed && !cached && p.standby() {
		// A standby's cache lacks the threads the Gateway tells of: the
		// chat is looked up as standbyTenant would (one call on a first
		// ask whatever the chat is, decline memory), so a thread is placed
		// by its parent (rule 2). A chat found that is neither granted here
		// nor the tenant's own is remembered declined, so ChatTenant asks
		// no second time.
		ci, found, err := p.standbyLookup(ctx, chatID, tenant)
		switch {
		case err != nil:
			return platform.HoldNone, err
		case !found:
			return platform.HoldNone, nil
		}
		if parent := ci.threadParent(); parent != "" && own.Claimed(parent, tenant) && own.MayAct(tenant, chatOfInfo(ci), func() bool { return false }) {
			return platform.HoldOwn, nil
		}
		if p.dmFallback(ci, tenant) {
			return platform.HoldGrant, nil
		}
		if owner, ok := p.channelTenant(ci); !ok || owner != tenant {
			p.declined.Add([2]string{tenant, chatID}, struct{}{})
		}
		return platform.HoldNone, nil
	}
	if !spoke && !claimed {
		if cached && p.dmFallback(ci, tenant) {
			return platform.HoldGrant, nil
		}
		return platform.HoldNone, nil
	}
	ci, err := p.cache.channel(ctx, chatID)
	switch {
	case errors.Is(err, errNotFound):
		return platform.HoldNone, nil
	case err != nil:
		return platform.HoldNone, fmt.Errorf("discord: the channel could not be looked up (%s): %w", describe(err).Error, platform.ErrUnavailable)
	}
	return own.Hold(tenant, chatOfInfo(ci), func() bool { return spoke }), nil
}
