package discord

import (
	"context"
	"strings"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/session"
	"connector/vault"
)

// allowedMentions lets the bot ping users it names and the author it replies
// to, never @everyone, @here or roles, whatever the text says.
var allowedMentions = &discordgo.MessageAllowedMentions{
	Parse:       []discordgo.AllowedMentionType{discordgo.AllowedMentionTypeUsers},
	RepliedUser: true,
}

type messageAnswer struct {
	ID string `json:"id"`
}

// opSend posts content, split into pieces of at most 2,000 code points; the
// first piece replies to reply_to. The result carries the first piece's id.
func (p *Platform) opSend(ctx context.Context, _, chatID string, a *contract.Action) contract.Result {
	if strings.TrimSpace(a.Content) == "" {
		return contract.Failed(contract.CodeBadRequest, "send needs content")
	}
	ref, bad := replyRef(a)
	if bad != "" {
		return contract.Failed(contract.CodeBadRequest, bad)
	}
	pieces := textsplit.Split(a.Content, splitRules)
	_, _, r := p.postPieces(ctx, "send", pieces, p.poster(ctx, discordgo.EndpointChannelMessages(chatID), ref))
	if !r.Success {
		return r
	}
	if ci, ok := p.cache.cachedChannel(chatID); ok && ci.isThread() {
		p.cache.join(chatID)
	}
	// The first send into a thread auto-threading just created says so,
	// as a connector that routes the reply into a new thread does.
	if name, ok := p.created.announce(chatID); ok {
		r.ThreadID, r.AutoThreadName = chatID, name
	}
	return r
}

// postPieces sends a message's pieces in order, each with post, through
// platform.SendParts, as every platform does: it returns the first and last
// messages' ids with its result, op's failure for a first piece that
// failed.
func (p *Platform) postPieces(ctx context.Context, op string, pieces []string, post func(i int, piece string) (string, error)) (first, last string, r contract.Result) {
	return platform.SendParts(ctx, pieces, post, func(err error) contract.Result { return p.failed(op, err) })
}

// poster posts a piece to endpoint (a channel's messages or an interaction
// webhook), the first one replying to ref: postPieces' post for plain text.
func (p *Platform) poster(ctx context.Context, endpoint string, ref *discordgo.MessageReference) func(i int, piece string) (string, error) {
	return func(i int, piece string) (string, error) {
		body := discordgo.MessageSend{Content: piece, AllowedMentions: allowedMentions}
		if i == 0 {
			body.Reference = ref
		}
		var m messageAnswer
		err := p.rest(ctx, "POST", endpoint, &body, &m)
		return m.ID, err
	}
}

// opEdit replaces a message's content. Content over 2,000 code points keeps
// its first piece in the edited message and posts the rest after it.
func (p *Platform) opEdit(ctx context.Context, _, chatID string, a *contract.Action) contract.Result {
	msgID := string(a.MessageID)
	if !isSnowflake(msgID) {
		return contract.Failed(contract.CodeBadRequest, "message_id is not a Discord message id")
	}
	if strings.TrimSpace(a.Content) == "" {
		return contract.Failed(contract.CodeBadRequest, "edit needs content")
	}
	post := p.poster(ctx, discordgo.EndpointChannelMessages(chatID), nil)
	_, _, r := p.postPieces(ctx, "edit", textsplit.Split(a.Content, splitRules), func(i int, piece string) (string, error) {
		if i > 0 {
			return post(i, piece)
		}
		edit := &discordgo.MessageEdit{Content: &piece, AllowedMentions: allowedMentions}
		return msgID, p.rest(ctx, "PATCH", discordgo.EndpointChannelMessage(chatID, msgID), edit, nil)
	})
	return r
}

// opTyping shows the typing indicator (10 s).
func (p *Platform) opTyping(ctx context.Context, _, _ string, a *contract.Action) contract.Result {
	if err := p.rest(ctx, "POST", discordgo.EndpointChannelTyping(string(a.ChatID)), nil, nil); err != nil {
		return p.failed("typing", err)
	}
	return contract.OK("")
}

// opGetChatInfo answers {name, type} with the names and chat types ingest
// puts in sources.
func (p *Platform) opGetChatInfo(ctx context.Context, _, _ string, a *contract.Action) contract.Result {
	ch, err := p.cache.channel(ctx, string(a.ChatID))
	if err != nil {
		return p.failed("get_chat_info", err)
	}
	info := &contract.ChatInfo{Name: ch.Name, Type: session.ChatTypeGroup}
	switch {
	case ch.Type == discordgo.ChannelTypeDM:
		info.Type = session.ChatTypeDM
	case ch.isThread():
		info.Type = session.ChatTypeThread
		parent, _ := p.cache.channel(ctx, ch.ParentID)
		sep := " / #"
		if parent.isForum() {
			sep = " / "
		}
		info.Name = p.guildLabel(ctx, ch.GuildID) + sep + parent.Name + " / " + ch.Name
	default:
		info.Name = p.guildLabel(ctx, ch.GuildID) + " / #" + ch.Name
	}
	r := contract.OK("")
	r.ChatInfo = info
	return r
}

func (p *Platform) guildLabel(ctx context.Context, guildID string) string {
	if name, err := p.cache.guildName(ctx, guildID); err == nil {
		return name
	}
	return guildID
}

// opFollowUp posts to the interaction webhook with the token the vault holds
// for (caller's tenant, session_key). The gateway names only the session; a
// token of another tenant's session is a different vault key and is never
// found. Absent or expired: capability_missing. A follow-up is a message of
// the interaction's channel (the token's Ref names it after the
// application): where tenant holds that channel, as followUpAllowed
// found before the post, the follow-up (each of its
// parts, platform.MarkParts) is remembered as tenant's
// (platform.Grants.Posted, under the creation its token was stored under,
// and even when ctx ended as the post returned), as Execute remembers a
// send there, so tenant may edit
// and delete it there and no other tenant may. The token outlives the interaction's routing by up to 15 minutes:
// tenant must still be allowed in that channel (followUpAllowed), or the
// follow-up is declined as a send there would be.
func (p *Platform) opFollowUp(ctx context.Context, tenant, _ string, a *contract.Action) contract.Result {
	if a.Kind != string(vault.KindDiscordInteractionToken) {
		return contract.Failed(contract.CodeBadRequest, "discord follow_up supports kind "+string(vault.KindDiscordInteractionToken))
	}
	if strings.TrimSpace(a.Content) == "" {
		return contract.Failed(contract.CodeBadRequest, "follow_up needs content")
	}
	e, ok := p.vault.Get(ctx, vault.Key{Tenant: tenant, SessionKey: a.SessionKey, Kind: vault.KindDiscordInteractionToken})
	app, rest, _ := strings.Cut(e.Ref, "/")
	channel, dmUser, _ := strings.Cut(rest, "/")
	if !ok || !isSnowflake(app) {
		return contract.Failed(contract.CodeCapabilityMissing, "no live discord.interaction_token for this session (absent or expired)")
	}
	ctx, hold, r := p.followUpAllowed(ctx, tenant, channel, dmUser)
	if hold == platform.HoldNone {
		return r
	}
	endpoint := discordgo.EndpointWebhookToken(app, e.Value.Reveal()) + "?wait=true"
	ctx = platform.MarkParts(ctx, p.spoke, channel, tenant, e.Created)
	_, _, r = p.postPieces(ctx, "follow_up", textsplit.Split(a.Content, splitRules), p.poster(ctx, endpoint, nil))
	return r
}

// followUpAllowed re-checks, before a follow-up is posted, that tenant may
// still act in the interaction's channel, as the interaction was routed
// (route): a DM interaction no rule above placed went to dm_tenant, with
// no grant recorded, so the DM's user, recorded with the token (dmUser),
// is placed again by rule 4 (dmTenant), needing no cached DM channel,
// and held as a grant (as dmFallback holds it); any other chat is authorized as a send there is (platform.Authorize), so
// a guild rebound to another tenant since, or a claim released, declines
// the follow-up with the uniform text. Either way its calls ask again as
// their turn comes (platform.AskAgain, platform.AuthorizeCalls). A token
// that names no channel is declined. hold is how tenant holds the channel
// (platform.HoldNone: declined, with the result to answer).
func (p *Platform) followUpAllowed(ctx context.Context, tenant, channel, dmUser string) (context.Context, platform.Hold, contract.Result) {
	if !isSnowflake(channel) {
		return ctx, platform.HoldNone, contract.Declined(platformName)
	}
	dmHeld := func(context.Context) error {
		if dm, ok := p.dmTenant(dmUser); ok && dm == tenant {
			return nil
		}
		return platform.ErrUnknownChat
	}
	if dmHeld(ctx) == nil {
		return platform.AskAgain(ctx, platformName, p.clock, dmHeld), platform.HoldGrant, contract.Result{}
	}
	return platform.AuthorizeCalls(ctx, p, tenant, channel, p.clock)
}

// failed turns a REST error into a result and logs it, never quoting a
// URL. (postPieces adds what was already sent.)
func (p *Platform) failed(op string, err error) contract.Result {
	r := describe(err)
	p.log.Warn("discord egress failed", "op", op, "code", r.Code, "err", r.Error)
	return r
}
