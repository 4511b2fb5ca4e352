package telegram

import (
	"github.com/go-telegram/bot/models"
	lru "github.com/hashicorp/golang-lru/v2"

	"connector/contract"
	"connector/session"
)

// This file owns observe mode (observe_unmentioned_group_messages) after
// the gate: the native adapter appends the group messages require_mention
// holds back to the transcript of the chat's (or topic's) shared session,
// and delivers triggered messages into that session with the sender named
// in the text. The relay wire cannot append to a gateway's transcript; its
// reference-only event context can carry recent messages, so the held-back
// messages ride along with the next delivered message of their chat and
// topic.

// Bounds of the held-back messages: per chat topic the latest
// observedPerTopic messages within observedBytesPerTopic bytes of text, for
// at most observedTopics chat topics (the least recently used is
// forgotten). They live in memory only.
const (
	observedTopics        = 1024
	observedPerTopic      = 20
	observedBytesPerTopic = 32 << 10
)

// observedLog holds the messages observe mode kept, by chat and topic.
// Entries of one chat are only changed under that chat's delivery stripe.
type observedLog struct {
	byTopic *lru.Cache[topicKey, []contract.ContextMessage]
}

func newObservedLog() *observedLog {
	c, _ := lru.New[topicKey, []contract.ContextMessage](observedTopics) // size > 0: cannot fail
	return &observedLog{byTopic: c}
}

// observedKey is the chat topic of a message (thread 0: none).
func observedKey(msg *models.Message) topicKey {
	return topicKey{chat: msg.Chat.ID, thread: threadID(&msg.Chat, msg)}
}

// keep adds a held-back message to its chat topic, dropping the oldest
// beyond the bounds. A message without text is not kept: the gateway
// skips context without text.
func (o *observedLog) keep(k topicKey, ev *contract.Event) {
	if ev.Text == "" {
		return
	}
	msg := contract.ContextMessage{Text: ev.Text, Source: contract.ContextAuthor{
		UserName: ev.Source.UserName.Value, UserID: ev.Source.UserID.Value,
	}}
	old, _ := o.byTopic.Get(k)
	kept := append(make([]contract.ContextMessage, 0, len(old)+1), old...)
	kept = append(kept, msg)
	size := 0
	for i := len(kept) - 1; i >= 0; i-- {
		size += len(kept[i].Text)
		if len(kept)-i > observedPerTopic || size > observedBytesPerTopic {
			kept = kept[i+1:]
			break
		}
	}
	if len(kept) == 0 {
		o.byTopic.Remove(k)
		return
	}
	o.byTopic.Add(k, kept)
}

// pending returns the messages held back in a chat topic, oldest first.
func (o *observedLog) pending(k topicKey) []contract.ContextMessage {
	kept, _ := o.byTopic.Peek(k)
	return kept
}

// delivered forgets a chat topic's held-back messages once a delivery
// carried them.
func (o *observedLog) delivered(k topicKey) { o.byTopic.Remove(k) }

// shareSession re-sources a delivered group message as observe mode does:
// the sender moves into the text ("[name|id]\n", name falling back to the
// id) and out of the source, so the chat or topic is one session.
func shareSession(ev *contract.Event) {
	src := &ev.Source
	id := "unknown"
	if src.UserID.Valid && src.UserID.Value != "" {
		id = src.UserID.Value
	}
	name := id
	if src.UserName.Valid && src.UserName.Value != "" {
		name = src.UserName.Value
	}
	ev.Text = "[" + name + "|" + id + "]\n" + ev.Text
	src.UserID = session.Nullable{}
	src.UserName = session.Nullable{}
	src.UserIDAlt = ""
}
