// Package chatcontext keeps the recent group messages a platform saw but did
// not deliver (held back by a mention requirement, for example), so they
// ride the next delivered message of their chat as its reference-only
// context (the contract's supports_context, "Model B": a passive buffer,
// never an extra platform API call).
//
// Memory is bounded: per chat the latest PerChat messages within
// BytesPerChat bytes of text, for at most Chats chats (the least recently
// used is forgotten first). A chat's messages are kept for a tenant, as
// created (Tenant), under the platform's key of the chat, so a chat that
// changes tenants never shows one tenant's messages to another, nor a
// tenant deleted and made again under its id the messages kept for the
// earlier one.
package chatcontext

import (
	"slices"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"connector/contract"
)

// Tenant names a tenant as created at a time: a Log keeps a chat's
// messages under its id, for one creation at a time, so a tenant deleted
// and made again under its id, or a declared one (creation zero) after a
// stored one or before it, never gets the messages kept for another
// (docs/operations.md): they are forgotten as the chat keeps its first
// message for it.
type Tenant struct {
	id      string
	created int64 // Unix nanoseconds; 0 for the zero time
}

// TenantOf is tenant id as created at created: registry.Tenant.Created as
// the platform knows it (platform.TenantKeeper, vault.Creation), zero when
// the tenant is declared or its creation not known.
func TenantOf(id string, created time.Time) Tenant {
	t := Tenant{id: id}
	if !created.IsZero() { // the zero time has no Unix nanoseconds
		t.created = created.UnixNano()
	}
	return t
}

// Default bounds.
const (
	DefaultChats        = 1024
	DefaultPerChat      = 20
	DefaultBytesPerChat = 32 << 10
)

// Bounds limits a Log; zero fields take the defaults.
type Bounds struct {
	Chats        int // chats remembered
	PerChat      int // messages per chat
	BytesPerChat int // bytes of text per chat
}

// Log holds kept messages by tenant and chat key. It is safe for
// concurrent use; a platform serializes the changes of one chat (its
// ingest order).
type Log[K comparable] struct {
	perChat, bytesPerChat int
	byChat                *lru.Cache[chatKey[K], held]
}

// chatKey is a chat k of tenant id.
type chatKey[K comparable] struct {
	id string
	k  K
}

// held is a chat's kept messages, for a tenant created at created (Tenant).
type held struct {
	created int64
	msgs    []contract.ContextMessage
}

// New returns an empty Log with bounds b.
func New[K comparable](b Bounds) *Log[K] {
	l := &Log[K]{perChat: b.PerChat, bytesPerChat: b.BytesPerChat}
	chats := b.Chats
	if chats <= 0 {
		chats = DefaultChats
	}
	if l.perChat <= 0 {
		l.perChat = DefaultPerChat
	}
	if l.bytesPerChat <= 0 {
		l.bytesPerChat = DefaultBytesPerChat
	}
	l.byChat, _ = lru.New[chatKey[K], held](chats) // size > 0: cannot fail
	return l
}

// Keep adds a message to t's chat k, dropping the oldest beyond the bounds
// and any kept for another creation of t's id. A message without text is
// not kept: the gateway skips context without text.
func (l *Log[K]) Keep(t Tenant, k K, msg contract.ContextMessage) {
	if msg.Text == "" {
		return
	}
	key := chatKey[K]{t.id, k}
	var old []contract.ContextMessage
	if h, ok := l.byChat.Get(key); ok && h.created == t.created {
		old = h.msgs
	}
	kept := append(make([]contract.ContextMessage, 0, len(old)+1), old...)
	kept = append(kept, msg)
	size := 0
	for i := len(kept) - 1; i >= 0; i-- {
		size += len(kept[i].Text)
		if len(kept)-i > l.perChat || size > l.bytesPerChat {
			kept = kept[i+1:]
			break
		}
	}
	if len(kept) == 0 {
		l.byChat.Remove(key)
		return
	}
	l.byChat.Add(key, held{t.created, kept})
}

// Take returns the messages kept for t's chat k, oldest first, and forgets
// them, for a delivery to carry; Restore gives them back when it fails.
// Messages kept after Take are the next delivery's.
func (l *Log[K]) Take(t Tenant, k K) []contract.ContextMessage {
	kept := l.Pending(t, k)
	l.byChat.Remove(chatKey[K]{t.id, k})
	return kept
}

// Restore puts msgs, which Take returned for a delivery that failed, back
// before the messages t's chat k kept since, within the bounds.
func (l *Log[K]) Restore(t Tenant, k K, msgs []contract.ContextMessage) {
	for _, msg := range append(slices.Clip(msgs), l.Take(t, k)...) {
		l.Keep(t, k, msg)
	}
}

// Pending returns the messages kept for t's chat k, oldest first. The
// slice is the Log's: read it, never change it.
func (l *Log[K]) Pending(t Tenant, k K) []contract.ContextMessage {
	if h, ok := l.byChat.Peek(chatKey[K]{t.id, k}); ok && h.created == t.created {
		return h.msgs
	}
	return nil
}

// Delivered forgets t's chat k's messages once a delivery carried them.
func (l *Log[K]) Delivered(t Tenant, k K) { l.byChat.Remove(chatKey[K]{t.id, k}) }

// Len is the number of chats with kept messages.
func (l *Log[K]) Len() int { return l.byChat.Len() }
