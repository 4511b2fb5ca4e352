package telegram

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-telegram/bot"

	"connector/contract"
	"connector/platform"
)

// handlers is the egress table; the descriptor's supported_ops are its keys.
// Every op is addressed to a chat (a chat id).
var handlers = platform.Ops[*Platform, int64]{
	contract.OpSend:         (*Platform).send,
	contract.OpEdit:         (*Platform).edit,
	contract.OpTyping:       (*Platform).typing,
	contract.OpGetChatInfo:  (*Platform).getChatInfo,
	contract.OpSendMedia:    (*Platform).sendMedia,
	contract.OpPrompt:       (*Platform).prompt,
	contract.OpReact:        (*Platform).react,
	contract.OpDelete:       (*Platform).deleteMessage,
	contract.OpThreadCreate: (*Platform).threadCreate,
	contract.OpThreadRename: (*Platform).threadRename,
	contract.OpDraft:        (*Platform).draft,
}

// callMargin is kept free before a request's deadline for the API call that
// follows a rate-limit wait.
const callMargin = time.Second

// chatIDOf makes a chat_id into the chat id ops act on: a chat id in its
// canonical decimal spelling.
func chatIDOf(_ *Platform, chatID string) (int64, bool) {
	chat, err := parseChatID(chatID)
	return chat, err == nil
}

// Execute implements platform.Platform through platform.Execute: an op
// needs a Telegram chat id the tenant may act in, and runs under ctx
// (request_timeout when ctx has no deadline).
func (p *Platform) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	return platform.Execute(ctx, &p.egress, p, tenant, a)
}

// paced runs call for one message into chat: it waits for the chat's (and,
// when countGroup, the group's) window, then for tenant's fair share of the
// global budget, then calls. A 429 blocks the chat for retry_after and
// repeats, as long as the deadline allows: a 429 means Telegram did not
// take the message, so repeating never duplicates it. Errors other than a
// 429 are returned as they are (never retried: the call may have gone
// through). A ctx without a deadline is bounded by request_timeout, as on
// WhatsApp and Slack. Once its turn comes, the call is made only while
// the action's tenant may still act in its chat (platform.StillMayAct).
func (p *Platform) paced(ctx context.Context, tenant string, chat int64, countGroup bool, call func(context.Context) error) error {
	latest := platform.LatestStart(ctx, p.deps.Clock, p.cfg.RequestTimeout, callMargin)
	for {
		now := p.deps.Clock.Now()
		at, ok := p.limits.reserve(chat, countGroup, now, latest)
		if !ok {
			return &platform.RateLimitedError{Wait: at.Sub(now)}
		}
		if err := p.deps.Clock.Sleep(ctx, at.Sub(p.deps.Clock.Now())); err != nil {
			return err
		}
		if err := platform.WaitShare(ctx, p.budget, tenant, latest, p.deps.Clock); err != nil {
			return err
		}
		if d := p.deps.Clock.Now().Sub(now); d > 0 {
			p.deps.Metrics.RateLimitWait(platformName, d)
		}
		if err := platform.StillMayAct(ctx); err != nil {
			return err
		}
		err := call(ctx)
		var tooMany *bot.TooManyRequestsError
		if !errors.As(err, &tooMany) {
			return err
		}
		p.deps.Metrics.RateLimited(platformName)
		retry := time.Duration(max(tooMany.RetryAfter, 1)) * time.Second
		p.limits.block(chat, p.deps.Clock.Now().Add(retry), p.deps.Clock.Now())
		p.log.Info("telegram 429; waiting retry_after", "chat_id", chat, "retry_after", retry)
	}
}

// failure turns an egress error into a result whose text carries no secret.
func (p *Platform) failure(op string, err error) contract.Result {
	var migrated *bot.MigrateError
	if r, ok := platform.CommonFailure("telegram "+op+": ", "Telegram", err); ok {
		return r
	}
	if errors.As(err, &migrated) {
		return contract.Failed(contract.CodePlatformError,
			fmt.Sprintf("telegram %s: the group became supergroup %d", op, migrated.MigrateToChatID))
	}
	return contract.Failed(contract.CodePlatformError, "telegram "+op+": "+p.errorText(err))
}

// isBadRequest reports Telegram's 400 whose description contains phrase.
func isBadRequest(err error, phrase string) bool {
	return errors.Is(err, bot.ErrorBadRequest) && strings.Contains(strings.ToLower(err.Error()), phrase)
}

// messageRef parses a message id the gateway sent back; 0 when it is not one
// (for example the id of a callback event), nor spelt as Telegram's answer
// spells it: the posted record Execute reads before an edit, delete or
// rename (platform.MayChange) is keyed by that spelling, and "0…" or "+…"
// would name none while Telegram took it for the same message.
func messageRef(id contract.ID) int {
	n, err := strconv.Atoi(string(id))
	if err != nil || n <= 0 || strconv.Itoa(n) != string(id) {
		return 0
	}
	return n
}

// topicThread is the message_thread_id to send with for the source's
// thread_id: a forum topic or private-chat topic, never the General topic
// (Telegram answers "message thread not found" for 1).
func topicThread(thread contract.ID) int {
	n := messageRef(thread)
	if n == generalTopic {
		return 0
	}
	return n
}
