package discord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bwmarrin/discordgo"

	"connector/platform"
	"connector/vault"
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
// prompts; a press whose poster the store could not tell is dropped
// (dropPosterUnknown), its user told to try again. created is the tenant's creation (vault.Creation) as the
// ownership was read, before any store call: a tenant deleted and made
// again under its id while one waits does not take the event, nor the
// grant.
func (p *Platform) route(ctx context.Context, author string, c platform.Chat, pressed string) (tenant string, created time.Time, owner bool, drop string) {
	own := p.owners.Load()
	r, ok := own.Route(author, c)
	switch {
	case ok && r.Drop != "":
		return "", time.Time{}, false, r.Drop
	case ok:
		routed := r.Tenant
		created = vault.Creation(p.vault, routed)
		if r.Grant && pressed != "" {
			switch t, posted, ok, err := p.spoke.PromptPoster(ctx, own, author, c, pressed, routed); {
			case err != nil:
				return "", time.Time{}, false, dropPosterUnknown
			case ok && t != routed:
				r.Tenant, created = t, posted // as its record keeps it
			}
		}
		if r.Grant && (r.Tenant == routed || own.Linked(author, r.Tenant)) && !vault.Earlier(p.vault, r.Tenant, created) {
			p.spoke.Add(ctx, c.ID, c.Space, r.Tenant, created) // not for one made again while PromptPoster read the store
		}
		return r.Tenant, created, r.Owner, ""
	case c.Space == "" && p.cfg.DMTenant != "":
		return p.cfg.DMTenant, vault.Creation(p.vault, p.cfg.DMTenant), false, ""
	}
	return "", time.Time{}, false, dropUnclaimed
}

// Route's drops of its own: an event no tenant claims, and a press whose
// prompt's poster the store could not tell.
const (
	dropUnclaimed     = "unclaimed"
	dropPosterUnknown = "poster_unknown"
)

// messageNormalizer resolves m's tenant (route) and returns the normalizer
// to read it with: under the owner floor, without the tenant's mention
// gates, and the chat m was routed in. A guild channel the cache lacks is
// looked up first, as normalization would, so a thread is placed by its
// parent.
func (p *Platform) messageNormalizer(ctx context.Context, m *wireMessage) (n *normalizer, tenant string, created time.Time, chat platform.Chat, drop string) {
	author := ""
	if m.Author != nil {
		author = m.Author.ID
	}
	chat = p.chatOf(m.GuildID, m.ChannelID)
	if chat.Parent == "" && m.GuildID != "" {
		// Not cached (or no parent): a thread's channel decides its claim.
		if ci, err := p.cache.channel(ctx, m.ChannelID); err == nil {
			chat.Parent = ci.threadParent()
		}
	}
	tenant, created, owner, drop := p.route(ctx, author, chat, "")
	if drop != "" {
		return nil, "", created, chat, drop
	}
	n = p.normalizer(tenant)
	if owner {
		floor := *n.pol
		floor.requireMention, floor.threadRequireMention, floor.ignoreNoMention = false, false, false
		n.pol = &floor
	}
	return n, tenant, created, chat, ""
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
	reply := p.deps.RedeemLink(ctx, platformName, user, code, func(tenant string, created time.Time) { p.spoke.Add(ctx, channel, "", tenant, created) })
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

// ChatGranted implements platform.ChatGranter: tenant holds chatID when
// it claimed the channel (or, as the cache knows it, the thread's channel)
// or holds a grant of it (a message routed to it by claim or author link
// was posted there), as far as the ownership order lets that stand where
// the channel is (platform.Ownership.Hold: no binding or claim of another
// tenant), or as a grant when it is a cached DM channel of dm_tenant's
// (dmFallback). The grant is looked up only when no binding of a cached
// chat to tenant (as ChatTenant answers it: once the guilds have loaded,
// not on a standby), no dm_tenant DM and no claim settles it; a grant the store
// could not look up answers unavailable. The channel is placed (from the
// cache, else looked up for the tenant) only for a claim or a grant, or on
// a standby, whose cache lacks the threads the Gateway tells of, for a
// chat it has not cached (standbyLookup, the call ChatTenant would make),
// so that a thread of a channel the tenant claimed is placed by its parent.
func (p *Platform) ChatGranted(ctx context.Context, chatID, tenant string) (platform.Hold, error) {
	gen, own := p.ownersGen.Load(), p.owners.Load()
	ci, cached := p.cache.cachedChannel(chatID)
	if owner, bound := own.Owner(chatOfInfo(ci)); cached && bound && owner == tenant && !p.standby() && p.ownersKnown() {
		return platform.HoldOwn, nil // rule 1 settles it, as ChatTenant would: no store read
	}
	if cached && p.dmFallback(ci, tenant) {
		return platform.HoldGrant, nil
	}
	claimed := own.Claimed(chatID, tenant)
	if parent := ci.threadParent(); cached && parent != "" {
		claimed = claimed || own.Claimed(parent, tenant)
	}
	spoke := false
	if !claimed { // a claim is held (or set aside) whatever the grants say
		var err error
		if _, spoke, err = p.spoke.Granted(ctx, chatID, tenant); err != nil {
			return platform.HoldNone, err
		}
	}
	if !spoke && !claimed {
		if cached || !p.standby() {
			return platform.HoldNone, nil
		}
		// The chat is looked up as standbyTenant would (one call on a first
		// ask whatever the chat is, decline memory), so a thread is placed
		// by its parent (rule 2). A chat found that is neither granted here
		// nor the tenant's own is remembered declined, so ChatTenant asks
		// no second time.
		ci, found, err := p.standbyLookup(ctx, chatID, tenant)
		switch {
		case err != nil || !found:
			return platform.HoldNone, err
		case ci.threadParent() != "" && own.Claimed(ci.threadParent(), tenant) && own.Hold(tenant, chatOfInfo(ci), func() bool { return false }) == platform.HoldOwn:
			return platform.HoldOwn, nil
		case p.dmFallback(ci, tenant):
			return platform.HoldGrant, nil
		}
		if owner, ok := p.channelTenant(ci); !ok || owner != tenant {
			p.decline(gen, tenant, chatID)
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
	return own.Hold(tenant, chatOfInfo(ci), func() bool { return spoke || claimed && p.spoke.Has(ctx, chatID, tenant) }), nil
}
