package discord

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
)

// maxEmojiBytes bounds a react emoji: a Unicode emoji (with modifiers) or
// a custom emoji's name:id.
const maxEmojiBytes = 128

// opReact adds (PUT) or, with remove, takes off (DELETE) the bot's own
// reaction emoji on message_id. Reactions are cosmetic to the gateway; a
// failure is a structured result like any other.
func (p *Platform) opReact(ctx context.Context, _, _ string, a *contract.Action) contract.Result {
	msgID := string(a.MessageID)
	switch {
	case !isSnowflake(msgID):
		return contract.Failed(contract.CodeBadRequest, "react: message_id is not a Discord message id")
	case strings.TrimSpace(a.Emoji) == "" || len(a.Emoji) > maxEmojiBytes || !pathSegment(a.Emoji):
		return contract.Failed(contract.CodeBadRequest, "react: emoji must be a Unicode emoji or name:id")
	}
	endpoint := discordgo.EndpointMessageReaction(string(a.ChatID), msgID, url.PathEscape(a.Emoji), "@me")
	method := "PUT"
	if a.Remove {
		method = "DELETE"
	}
	if err := p.rest(ctx, method, endpoint, nil, nil); err != nil {
		return p.failed("react", err)
	}
	return contract.OK("")
}

// opDelete deletes message_id. A message that is already gone counts as
// deleted, so a retried delete is idempotent.
func (p *Platform) opDelete(ctx context.Context, _, _ string, a *contract.Action) contract.Result {
	msgID := string(a.MessageID)
	if !isSnowflake(msgID) {
		return contract.Failed(contract.CodeBadRequest, "delete: message_id is not a Discord message id")
	}
	err := p.rest(ctx, "DELETE", discordgo.EndpointChannelMessage(string(a.ChatID), msgID), nil, nil)
	if err != nil && !isUnknownMessage(err) {
		return p.failed("delete", err)
	}
	return contract.OK(msgID)
}

// pathSegment reports whether s stays one segment of a path however it is
// sent: no slash, and not a dot segment, so no gateway steers a request
// to another route through it.
func pathSegment(s string) bool {
	return !strings.ContainsAny(s, `/\`) && s != "." && s != ".."
}

// isUnknownMessage reports Discord's 10008 Unknown Message.
func isUnknownMessage(err error) bool {
	var re *discordgo.RESTError
	return errors.As(err, &re) && re.Message != nil && re.Message.Code == discordgo.ErrCodeUnknownMessage
}
