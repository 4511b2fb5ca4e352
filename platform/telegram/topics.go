package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

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
// metadata.thread_id. The topic's name is remembered (Platform.topics).
func (p *Platform) threadCreate(ctx context.Context, _ string, chat int64, a *contract.Action) contract.Result {
	name, ok := actionTopicName(a)
	if !ok {
		return contract.Failed(contract.CodeBadRequest, "telegram thread_create needs a thread_name")
	}
	topic, err := p.bot.CreateForumTopic(ctx, &bot.CreateForumTopicParams{ChatID: chat, Name: name})
	if err != nil {
		return p.failure(contract.OpThreadCreate, err)
	}
	p.rememberTopic(ctx, chat, topic.MessageThreadID, topicRecord{Name: name, Given: name, Created: true})
	id := strconv.Itoa(topic.MessageThreadID)
	r := contract.OK(id)
	r.ThreadID = id
	return r
}

// threadRename renames forum topic message_id of chat (editForumTopic).
// Telegram has no way to read a topic's name, so the guards are checked
// against what the connector remembers of the topics it created or renamed
// (Platform.topics): only_if_current_name needs the remembered name to be the
// one given, only_if_connector_created needs the connector to have created
// the topic and nobody to have renamed it since. A topic whose name is not
// remembered fails a guard safe with name_changed, leaving a human's name
// alone; unguarded renames proceed (one the store cannot give the record
// for is not remembered).
func (p *Platform) threadRename(ctx context.Context, _ string, chat int64, a *contract.Action) contract.Result {
	name, ok := actionTopicName(a)
	topic := topicThread(a.MessageID)
	switch {
	case !ok:
		return contract.Failed(contract.CodeBadRequest, "telegram thread_rename needs a thread_name")
	case topic == 0:
		return contract.Failed(contract.CodeBadRequest, "telegram thread_rename: message_id is not a forum topic id")
	}
	rec, known, readErr := p.topicRecord(ctx, chat, topic)
	if a.OnlyIfCurrentName != nil || a.OnlyIfConnectorCreated {
		if readErr != nil {
			p.log.Warn("telegram topic name not read from the store", "chat_id", chat, "topic", topic, "err", readErr)
			return contract.Failed(contract.CodeUnavailable, "telegram thread_rename: the topic's remembered name could not be read; not renamed")
		}
		if r, ok := rec.guard(known, a); !ok {
			return r
		}
	}
	_, err := p.bot.EditForumTopic(ctx, &bot.EditForumTopicParams{ChatID: chat, MessageThreadID: topic, Name: name})
	if err != nil && !isBadRequest(err, "topic_not_modified") {
		return p.failure(contract.OpThreadRename, err)
	}
	if readErr != nil { // written over, the record would lose Created
		p.log.Warn("telegram topic name not read from the store; the rename is not remembered", "chat_id", chat, "topic", topic, "err", readErr)
		return contract.OK("")
	}
	rec.Name, rec.Given = name, name
	p.rememberTopic(ctx, chat, topic, rec)
	return contract.OK("")
}

// topicNameTTL is how long the name of a topic is remembered after the
// connector last named it or saw it renamed.
const topicNameTTL = 90 * 24 * time.Hour

// localTopics bounds the topic names kept in process memory when the
// platform has no store (platform.Deps.Store).
const localTopics = 4096

// topicRecord is what the connector remembers of a forum topic it created
// or renamed.
type topicRecord struct {
	// Name is the topic's current name as far as the connector saw it:
	// the one it gave, or a later one from a forum_topic_edited update.
	Name string `json:"name"`
	// Given is the name the connector last gave the topic.
	Given string `json:"given"`
	// Created says the connector created the topic.
	Created bool `json:"created,omitempty"`
}

// guard checks a's rename guards against the record (known false: there is
// none); the result says why not when ok is false.
func (r topicRecord) guard(known bool, a *contract.Action) (contract.Result, bool) {
	switch {
	case !known:
		return contract.Failed(contract.CodeNameChanged, "telegram thread_rename: the connector did not create or rename this topic, so its current name is unknown; not renamed"), false
	case a.OnlyIfConnectorCreated && !r.Created:
		return contract.Failed(contract.CodeNameChanged, "telegram thread_rename: the topic was not created by the connector; not renamed"), false
	case a.OnlyIfConnectorCreated && r.Name != r.Given:
		return contract.Failed(contract.CodeNameChanged, "telegram thread_rename: the topic was renamed by someone else; not renamed"), false
	case a.OnlyIfCurrentName != nil && r.Name != *a.OnlyIfCurrentName:
		return contract.Failed(contract.CodeNameChanged, "telegram thread_rename: the topic's name is not only_if_current_name; not renamed"), false
	}
	return contract.Result{}, true
}

// topicStateKey is the store key of a topic's record.
func topicStateKey(chat int64, topic int) string {
	return "telegram/topic/" + strconv.FormatInt(chat, 10) + "/" + strconv.Itoa(topic)
}

// topicRecord returns the record of topic in chat; known is false when there is
// none (or it expired).
func (p *Platform) topicRecord(ctx context.Context, chat int64, topic int) (rec topicRecord, known bool, err error) {
	raw, ok, err := p.topics.Get(ctx, topicStateKey(chat, topic))
	if err != nil || !ok {
		return topicRecord{}, false, err
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return topicRecord{}, false, errors.New("unreadable topic record")
	}
	return rec, true, nil
}

// observeEdit updates the remembered name of a topic someone other than
// the bot renamed (a forum_topic_edited service message). Topics the
// connector never named are not recorded.
func (p *Platform) observeEdit(ctx context.Context, msg *models.Message, botID int64) {
	edit := msg.ForumTopicEdited
	if edit == nil || edit.Name == "" || msg.MessageThreadID == 0 || (msg.From != nil && msg.From.ID == botID) {
		return
	}
	chat, topic := msg.Chat.ID, msg.MessageThreadID
	rec, known, err := p.topicRecord(ctx, chat, topic)
	switch {
	case err != nil:
		p.log.Warn("telegram topic name not read from the store", "chat_id", chat, "topic", topic, "err", err)
	case known && rec.Name != edit.Name:
		rec.Name = edit.Name
		p.rememberTopic(ctx, chat, topic, rec)
	}
}

// rememberTopic stores rec for topicNameTTL, logging a failure: the op
// that named the topic has succeeded anyway, and a later guarded rename
// fails safe.
func (p *Platform) rememberTopic(ctx context.Context, chat int64, topic int, rec topicRecord) {
	raw, _ := json.Marshal(rec) // plain fields: cannot fail
	if err := p.topics.Put(ctx, topicStateKey(chat, topic), raw, p.deps.Clock.Now().Add(topicNameTTL)); err != nil {
		p.log.Warn("telegram topic name not remembered", "chat_id", chat, "topic", topic, "err", err)
	}
}
