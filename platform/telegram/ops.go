package telegram

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
)

// send posts content, split into 4,096-character messages, rendered as
// MarkdownV2 (plain text if Telegram rejects the entities), into the topic
// of metadata.thread_id, the first part replying to reply_to. The result
// carries the first message's id. If a later part cannot be sent, it is
// still a success (platform.SendParts) whose error says how many parts
// went out. In a
// group chat the reply replaces the previews of the draft streams it ends
// (replacePreviews).
func (p *Platform) send(ctx context.Context, tenant string, chat int64, a *contract.Action) contract.Result {
	if strings.TrimSpace(a.Content) == "" {
		return contract.Failed(contract.CodeBadRequest, "telegram send: content is empty")
	}
	_, _, r := p.sendParts(ctx, tenant, chat, a, textsplit.Split(a.Content, splitRules), nil, "")
	if r.Success {
		p.replacePreviews(ctx, tenant, chat, a)
	}
	return r
}

// sendParts sends parts in order into the topic of a's metadata.thread_id,
// the first replying to a's reply_to and the last carrying markup (when
// not nil). It returns the first and last messages' ids with
// platform.SendParts' result. A seal's first part is its preview, edited
// to it: edited, its id ("" for none).
func (p *Platform) sendParts(ctx context.Context, tenant string, chat int64, a *contract.Action, parts []string, markup models.ReplyMarkup, edited string) (first, last string, r contract.Result) {
	thread := topicThread(a.Metadata.ThreadID)
	reply := messageRef(a.ReplyTo)
	return platform.SendParts(ctx, parts, func(i int, part string) (string, error) {
		if i == 0 && edited != "" {
			return edited, nil
		}
		params := &bot.SendMessageParams{
			ChatID:          chat,
			MessageThreadID: thread,
			Text:            renderMarkdownV2(part),
			ParseMode:       models.ParseModeMarkdown,
		}
		if i == 0 && reply != 0 {
			params.ReplyParameters = &models.ReplyParameters{MessageID: reply, AllowSendingWithoutReply: true}
		}
		if i == len(parts)-1 && markup != nil {
			params.ReplyMarkup = markup
		}
		var msg *models.Message
		err := p.paced(ctx, tenant, chat, true, func(ctx context.Context) (err error) {
			msg, err = p.sendMessage(ctx, params, part)
			return err
		})
		if err != nil {
			return "", err
		}
		return strconv.Itoa(msg.ID), nil
	}, func(err error) contract.Result { return p.failure(a.Op, err) })
}

// sendMessage calls sendMessage once, and once more without what Telegram
// refused: the entities (resent as the plain part) or a topic that no longer
// exists (resent without message_thread_id).
func (p *Platform) sendMessage(ctx context.Context, params *bot.SendMessageParams, plain string) (*models.Message, error) {
	msg, err := p.bot.SendMessage(ctx, params)
	switch {
	case err == nil:
		return msg, nil
	case params.ParseMode != "" && isBadRequest(err, "can't parse entities"):
		p.log.Debug("telegram rejected the MarkdownV2 entities; sending plain text", "err", p.errorText(err))
		params.Text, params.ParseMode = plain, ""
	case params.MessageThreadID != 0 && isBadRequest(err, "thread not found"):
		p.log.Info("telegram topic not found; sending without message_thread_id", "chat_id", params.ChatID)
		params.MessageThreadID = 0
	default:
		return nil, err
	}
	return p.bot.SendMessage(ctx, params)
}

// edit replaces a message's text (editMessageText). Content must fit one
// message. "message is not modified" counts as success.
func (p *Platform) edit(ctx context.Context, tenant string, chat int64, a *contract.Action) contract.Result {
	id := messageRef(a.MessageID)
	switch {
	case id == 0:
		return contract.Failed(contract.CodeBadRequest, "telegram edit: message_id is not a Telegram message id")
	case strings.TrimSpace(a.Content) == "":
		return contract.Failed(contract.CodeBadRequest, "telegram edit: content is empty")
	case utf8.RuneCountInString(a.Content) > maxMessageRunes:
		return contract.Failed(contract.CodeBadRequest, "telegram edit: content exceeds 4096 characters")
	}
	if _, err := p.editText(ctx, tenant, chat, id, a.Content); err != nil {
		return p.failure(contract.OpEdit, err)
	}
	return contract.OK(strconv.Itoa(id))
}

// typing shows "typing…" in the chat (and topic) via sendChatAction. It is
// not paced: a chat under a 429 flood wait is skipped instead.
func (p *Platform) typing(ctx context.Context, _ string, chat int64, a *contract.Action) contract.Result {
	now := p.deps.Clock.Now()
	if until := p.limits.blockedUntil(chat); until.After(now) {
		return p.failure(contract.OpTyping, &platform.RateLimitedError{Wait: until.Sub(now)})
	}
	params := &bot.SendChatActionParams{ChatID: chat, MessageThreadID: topicThread(a.Metadata.ThreadID), Action: models.ChatActionTyping}
	_, err := p.bot.SendChatAction(ctx, params)
	if err != nil && params.MessageThreadID != 0 && isBadRequest(err, "thread not found") {
		params.MessageThreadID = 0
		_, err = p.bot.SendChatAction(ctx, params)
	}
	var tooMany *bot.TooManyRequestsError
	if errors.As(err, &tooMany) {
		p.deps.Metrics.RateLimited(platformName)
		p.limits.block(chat, now.Add(time.Duration(max(tooMany.RetryAfter, 1))*time.Second), now)
	}
	if err != nil {
		return p.failure(contract.OpTyping, err)
	}
	return contract.OK("")
}

// getChatInfo answers get_chat_info from getChat: the title (or a private
// chat's full name) and the chat type as sources name it.
func (p *Platform) getChatInfo(ctx context.Context, _ string, chat int64, _ *contract.Action) contract.Result {
	info, err := p.bot.GetChat(ctx, &bot.GetChatParams{ChatID: chat})
	if err != nil {
		return p.failure(contract.OpGetChatInfo, err)
	}
	r := contract.OK("")
	r.ChatInfo = &contract.ChatInfo{Name: cmp.Or(info.Title, fullName(info.FirstName, info.LastName)), Type: chatType(info.Type)}
	return r
}
