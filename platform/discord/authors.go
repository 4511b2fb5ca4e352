package discord

import (
	"context"
	"errors"

	"github.com/bwmarrin/discordgo"

	"connector/platform"
)

// This file applies author-first routing (platform.Authors, Hermes
// contract §3 "Author-first resolution", §7.1) to Discord messages and
// interactions (slash commands, buttons, modals), and consumes the
// "/link <code>" DMs that link an account. An event the author table says
// nothing about falls back to the guild's tenant (or dm_tenant). A tenant
// may act in the channel where an event routed to it by author was posted
// (platform.Grants, shared by every instance on the store).

// route resolves the tenant of an event by author (its user id; empty
// when it has none) in channelID of guildID (empty: a DM), author first,
// else by the guild (or dm_tenant): the one rule for messages and
// interactions alike. owner is set when the author is linked to the tenant
// (the owner floor); drop is why no tenant takes the event
// (platform.DropPrincipal, or dropUnclaimed). A tenant reached by author
// is granted the channel.
func (p *Platform) route(ctx context.Context, author, guildID, channelID string) (tenant string, owner bool, drop string) {
	if author != "" {
		scopes := []string{channelID}
		if ci, ok := p.cache.cachedChannel(channelID); ok && ci.ParentID != "" {
			scopes = append(scopes, ci.ParentID)
		}
		if r, ok := (*p.authors.Load()).Route(author, guildID == "", scopes...); ok {
			if r.Drop != "" {
				return "", false, r.Drop
			}
			p.spoke.Add(ctx, channelID, r.Tenant)
			return r.Tenant, r.Owner, ""
		}
	}
	tenant, ok := p.guildTenant(guildID)
	if !ok {
		return "", false, dropUnclaimed
	}
	return tenant, false, ""
}

// dropUnclaimed is route's drop for an event no tenant claims.
const dropUnclaimed = "unclaimed"

// messageNormalizer resolves m's tenant (route) and returns the normalizer
// to read it with: under the owner floor, without the tenant's mention
// gates.
func (p *Platform) messageNormalizer(ctx context.Context, m *wireMessage) (n *normalizer, tenant, drop string) {
	author := ""
	if m.Author != nil {
		author = m.Author.ID
	}
	tenant, owner, drop := p.route(ctx, author, m.GuildID, m.ChannelID)
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

// consumeLink handles m when it is a "/link <code>" DM: it redeems the
// code for the DM's author and answers in the DM (an edit into one is
// only dropped). It reports whether m was one (and must not be routed).
func (p *Platform) consumeLink(ctx context.Context, m *wireMessage, edit bool) bool {
	linker := p.deps.Linker
	if linker == nil || m.GuildID != "" || m.Author == nil || m.Author.Bot || m.WebhookID != "" {
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
	tenant, err := linker.Link(ctx, platformName, m.Author.ID, code)
	reply, reason := platform.LinkAnswer(err)
	p.metrics.Dropped(platformName, reason)
	switch {
	case err == nil:
		p.spoke.Add(ctx, m.ChannelID, tenant)
	case !errors.Is(err, platform.ErrLinkRefused):
		p.log.Warn("discord /link not redeemed", "user_id", m.Author.ID, "err", err)
	}
	// The reply spends the linked tenant's share of the bot's budget (an
	// unknown tenant's when the code was refused).
	if err := p.rest(platform.WithTenant(ctx, tenant), "POST", discordgo.EndpointChannelMessages(m.ChannelID), &discordgo.MessageSend{Content: reply}, nil); err != nil {
		p.log.Warn("discord /link reply not sent", "channel_id", m.ChannelID, "err", describe(err).msg)
	}
	return true
}

// ChatGranted implements platform.ChatGranter: tenant may act in chatID
// when it claimed the channel, or a message routed to it by author was
// posted there (and it is still remembered).
func (p *Platform) ChatGranted(ctx context.Context, chatID, tenant string) bool {
	return (*p.authors.Load()).Claimed(chatID, tenant) || p.spoke.Has(ctx, chatID, tenant)
}
