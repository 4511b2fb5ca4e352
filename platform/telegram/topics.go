package telegram

import (
	"context"
	"strconv"
	"strings"

	"github.com/go-telegram/bot"

	"connector/contract"
	"connector/internal/textsplit"
)

// maxTopicName is Telegram's forum topic name limit.
const maxTopicName = 128

// actionTopicName checks and cuts a thread_name for Telegram.
func actionTopicName(a *contract.Action) (string, bool) {
	name := strings.TrimSpace(a.ThreadName)
	return textsplit.TruncateRunes(name, maxTopicName), name != ""
}

// threadCreate creates a forum topic in chat (createForumTopic; the chat
// must be a forum and the bot allowed to manage topics, else Telegram's
// refusal is a platform_error). The topic's message_thread_id is the
// result's thread_id (and message_id); sends name it in
// metadata.thread_id.
func (p *Platform) threadCreate(ctx context.Context, _ string, chat int64, a *contract.Action) contract.Result {
	name, ok := actionTopicName(a)
	if !ok {
		return contract.Failed(contract.CodeBadRequest, "telegram thread_create needs a thread_name")
	}
	topic, err := p.bot.CreateForumTopic(ctx, &bot.CreateForumTopicParams{ChatID: chat, Name: name})
	if err != nil {
		return p.failure(contract.OpThreadCreate, err)
	}
	id := strconv.Itoa(topic.MessageThreadID)
	r := contract.OK(id)
	r.ThreadID = id
	return r
}

// threadRename renames forum topic message_id of chat (editForumTopic).
// Telegram has no way to read a topic's name, so a guarded rename
// (only_if_current_name, only_if_connector_created) cannot be checked and
// fails safe with name_changed, leaving a human's name alone; unguarded
// renames proceed.
func (p *Platform) threadRename(ctx context.Context, _ string, chat int64, a *contract.Action) contract.Result {
	name, ok := actionTopicName(a)
	topic := topicThread(a.MessageID)
	switch {
	case !ok:
		return contract.Failed(contract.CodeBadRequest, "telegram thread_rename needs a thread_name")
	case topic == 0:
		return contract.Failed(contract.CodeBadRequest, "telegram thread_rename: message_id is not a forum topic id")
	case a.OnlyIfCurrentName != nil || a.OnlyIfConnectorCreated:
		return contract.Failed(contract.CodeNameChanged, "telegram thread_rename: a topic's current name cannot be read, so a guarded rename is not made")
	}
	_, err := p.bot.EditForumTopic(ctx, &bot.EditForumTopicParams{ChatID: chat, MessageThreadID: topic, Name: name})
	if err != nil && !isBadRequest(err, "topic_not_modified") {
		return p.failure(contract.OpThreadRename, err)
	}
	return contract.OK("")
}
