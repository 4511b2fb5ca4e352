package telegram

import (
	"context"
	"strconv"
	"strings"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"connector/contract"
)

// maxEmojiBytes bounds a react emoji (a Unicode emoji with modifiers).
const maxEmojiBytes = 64

// react sets the bot's reaction on message_id to emoji (setMessageReaction;
// a bot holds one reaction per message, so a new one replaces the last),
// or, with remove, clears it. Telegram accepts only its curated emoji set
// and answers REACTION_INVALID for others: a platform_error result, which
// the gateway treats as cosmetic.
func (p *Platform) react(ctx context.Context, _ string, chat int64, a *contract.Action) contract.Result {
	id := messageRef(a.MessageID)
	switch {
	case id == 0:
		return contract.Failed(contract.CodeBadRequest, "telegram react: message_id is not a Telegram message id")
	case !a.Remove && (strings.TrimSpace(a.Emoji) == "" || len(a.Emoji) > maxEmojiBytes):
		return contract.Failed(contract.CodeBadRequest, "telegram react: emoji must be a Unicode emoji")
	}
	params := &bot.SetMessageReactionParams{ChatID: chat, MessageID: id}
	if !a.Remove {
		params.Reaction = []models.ReactionType{{
			Type: models.ReactionTypeTypeEmoji, ReactionTypeEmoji: &models.ReactionTypeEmoji{Emoji: a.Emoji},
		}}
	}
	if _, err := p.bot.SetMessageReaction(ctx, params); err != nil {
		return p.failure(contract.OpReact, err)
	}
	return contract.OK("")
}

// deleteMessage deletes message_id (deleteMessage). A message that is
// already gone counts as deleted, so a retried delete is idempotent.
func (p *Platform) deleteMessage(ctx context.Context, _ string, chat int64, a *contract.Action) contract.Result {
	id := messageRef(a.MessageID)
	if id == 0 {
		return contract.Failed(contract.CodeBadRequest, "telegram delete: message_id is not a Telegram message id")
	}
	_, err := p.bot.DeleteMessage(ctx, &bot.DeleteMessageParams{ChatID: chat, MessageID: id})
	if err != nil && !isBadRequest(err, "message to delete not found") {
		return p.failure(contract.OpDelete, err)
	}
	return contract.OK(strconv.Itoa(id))
}
