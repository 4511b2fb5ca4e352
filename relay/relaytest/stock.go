package relaytest

import (
	"strings"
	"unicode/utf8"
)

// The actions below are built as the stock gateway's relay adapter
// (gateway/relay/adapter.py of hermes-agent) and its stream consumer
// (gateway/stream_consumer.py) build them: the same fields, the same
// clean-up of names, and none of the fields they leave out. metadata is
// what the adapter would attach (_with_scope: the chat's scope_id or
// user_id from its inbound); nil sends an empty object.

// StockThreadCreate is create_handoff_thread's thread_create: the name
// trimmed ("handoff" when blank) and cut to 100 characters.
func StockThreadCreate(parent, name string, metadata map[string]any) map[string]any {
	name = strings.TrimSpace(name)
	if name == "" {
		name = "handoff"
	}
	return map[string]any{"op": "thread_create", "chat_id": parent, "thread_name": cutRunes(name, 100), "metadata": orEmpty(metadata)}
}

// StockThreadRename is rename_thread's thread_rename of thread in chat
// (Telegram callers pass the forum as parent_chat_id): the name's
// whitespace collapsed and cut to 100 characters, and
// only_if_connector_created when connectorCreated (prefer_connector_created),
// else only_if_current_name when currentName is not nil.
func StockThreadRename(chat, thread, name string, connectorCreated bool, currentName *string, metadata map[string]any) map[string]any {
	a := map[string]any{"op": "thread_rename", "chat_id": chat, "message_id": thread,
		"thread_name": cutRunes(strings.Join(strings.Fields(name), " "), 100), "metadata": orEmpty(metadata)}
	switch {
	case connectorCreated:
		a["only_if_connector_created"] = true
	case currentName != nil:
		a["only_if_current_name"] = *currentName
	}
	return a
}

// StockDraft is a draft frame of send_draft (final false) or the seal of
// _seal_open_draft (final true); the stream consumer passes its metadata
// to every frame of a stream and to the reply that ends it.
func StockDraft(chat string, draftID int64, content string, final bool, metadata map[string]any) map[string]any {
	return map[string]any{"op": "draft", "chat_id": chat, "draft_id": draftID, "content": content, "final": final, "metadata": orEmpty(metadata)}
}

// StockSend is send: reply_to is always present, null when replyTo is "".
func StockSend(chat, content, replyTo string, metadata map[string]any) map[string]any {
	var reply any
	if replyTo != "" {
		reply = replyTo
	}
	return map[string]any{"op": "send", "chat_id": chat, "content": content, "reply_to": reply, "metadata": orEmpty(metadata)}
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// cutRunes is Python's s[:n].
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}
