package telegram

import (
	"time"

	"github.com/go-telegram/bot/models"

	"connector/contract"
	"connector/platform/chatcontext"
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

// The held-back messages live in memory only, bounded as package
// chatcontext bounds them (per chat topic the latest 20 within 32 KiB, for
// at most 1,024 chat topics), keyed by tenant, and its creation, as well
// as chat topic.

// observedKey names the chat topic of a message (thread 0: none) for the
// tenant it was routed to, as created when it was routed (route): a tenant
// deleted and made again under its id, even as the message was on its way,
// never gets the messages held back for the earlier one; they are
// forgotten as the registry's change reaches the platform (SetTenants).
type observedKey struct {
	tenant chatcontext.Tenant
	topic  topicKey
}

// observedKeyOf is the key of msg for tenant, created at created.
func observedKeyOf(tenant string, created time.Time, msg *models.Message) observedKey {
	return observedKey{tenant: chatcontext.TenantOf(tenant, created), topic: topicKey{chat: msg.Chat.ID, thread: threadID(&msg.Chat, msg)}}
}

// contextMessage is a held-back event as context: its text and sender.
func contextMessage(ev *contract.Event) contract.ContextMessage {
	return contract.ContextMessage{Text: ev.Text, Source: contract.ContextAuthor{
		UserName: ev.Source.UserName.Value, UserID: ev.Source.UserID.Value,
	}}
}

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
