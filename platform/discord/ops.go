package discord

import (
	"context"
	"fmt"
	"strings"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/textsplit"
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
	first, err := p.postPieces(ctx, discordgo.EndpointChannelMessages(chatID), textsplit.Split(a.Content, splitRules), ref)
	if err != nil {
		return p.failed("send", err, first)
	}
	if ci, ok := p.cache.cachedChannel(chatID); ok && ci.isThread() {
		p.cache.join(chatID)
	}
	r := contract.OK(first)
	// The first send into a thread auto-threading just created says so,
	// as a connector that routes the reply into a new thread does.
	if name, ok := p.created.announce(chatID); ok {
		r.ThreadID, r.AutoThreadName = chatID, name
	}
	return r
}

// postPieces posts each piece in order to endpoint (a channel's messages or
// an interaction webhook) and returns the first one's id.
func (p *Platform) postPieces(ctx context.Context, endpoint string, pieces []string, ref *discordgo.MessageReference) (string, error) {
	first := ""
	for i, piece := range pieces {
		body := discordgo.MessageSend{Content: piece, AllowedMentions: allowedMentions}
		if i == 0 {
			body.Reference = ref
		}
		var m messageAnswer
		if err := p.rest(ctx, "POST", endpoint, &body, &m); err != nil {
			if i > 0 {
				err = fmt.Errorf("piece %d of %d: %w", i+1, len(pieces), err)
			}
			return first, err
		}
		if i == 0 {
			first = m.ID
		}
	}
	return first, nil
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
	pieces := textsplit.Split(a.Content, splitRules)
	edit := &discordgo.MessageEdit{Content: &pieces[0], AllowedMentions: allowedMentions}
	if err := p.rest(ctx, "PATCH", discordgo.EndpointChannelMessage(chatID, msgID), edit, nil); err != nil {
		return p.failed("edit", err, "")
	}
	if len(pieces) > 1 {
		if _, err := p.postPieces(ctx, discordgo.EndpointChannelMessages(chatID), pieces[1:], nil); err != nil {
			return p.failed("edit", err, msgID)
		}
	}
	return contract.OK(msgID)
}

// opTyping shows the typing indicator (10 s).
func (p *Platform) opTyping(ctx context.Context, _, _ string, a *contract.Action) contract.Result {
	if err := p.rest(ctx, "POST", discordgo.EndpointChannelTyping(string(a.ChatID)), nil, nil); err != nil {
		return p.failed("typing", err, "")
	}
	return contract.OK("")
}

// opGetChatInfo answers {name, type} with the names and chat types ingest
// puts in sources.
func (p *Platform) opGetChatInfo(ctx context.Context, _, _ string, a *contract.Action) contract.Result {
	ch, err := p.cache.channel(ctx, string(a.ChatID))
	if err != nil {
		return p.failed("get_chat_info", err, "")
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
// found. Absent or expired: capability_missing.
func (p *Platform) opFollowUp(ctx context.Context, tenant, _ string, a *contract.Action) contract.Result {
	if a.Kind != string(vault.KindDiscordInteractionToken) {
		return contract.Failed(contract.CodeBadRequest, "discord follow_up supports kind "+string(vault.KindDiscordInteractionToken))
	}
	if strings.TrimSpace(a.Content) == "" {
		return contract.Failed(contract.CodeBadRequest, "follow_up needs content")
	}
	e, ok := p.vault.Get(ctx, vault.Key{Tenant: tenant, SessionKey: a.SessionKey, Kind: vault.KindDiscordInteractionToken})
	if !ok || !isSnowflake(e.Ref) {
		return contract.Failed(contract.CodeCapabilityMissing, "no live discord.interaction_token for this session (absent or expired)")
	}
	endpoint := discordgo.EndpointWebhookToken(e.Ref, e.Value.Reveal()) + "?wait=true"
	first, err := p.postPieces(ctx, endpoint, textsplit.Split(a.Content, splitRules), nil)
	if err != nil {
		return p.failed("follow_up", err, first)
	}
	return contract.OK(first)
}

// failed turns a REST error into a result (with the id of whatever part was
// already done) and logs it, never quoting a URL.
func (p *Platform) failed(op string, err error, done string) contract.Result {
	f := describe(err)
	p.log.Warn("discord egress failed", "op", op, "code", f.code, "err", f.msg)
	r := contract.Failed(f.code, f.msg)
	r.RetryAfterMS, r.MessageID = f.retryAfter, done
	return r
}
