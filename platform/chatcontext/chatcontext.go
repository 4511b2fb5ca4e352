// Package chatcontext keeps the recent group messages a platform saw but did
// not deliver (held back by a mention requirement, for example), so they
// ride the next delivered message of their chat as its reference-only
// context (the contract's supports_context, "Model B": a passive buffer,
// never an extra platform API call).
//
// Memory is bounded: per chat the latest PerChat messages within
// BytesPerChat bytes of text, for at most Chats chats, shared between
// tenants by weight: a new chat in a full Log forgets the least recently
// used chat of the tenant holding the most for its weight, so one tenant's
// many chats never take a neighbour's within its share, and a lone tenant
// has all Chats. A chat's messages are kept for a tenant, as
// created (Tenant), under the platform's key of the chat, so a chat that
// changes tenants never shows one tenant's messages to another, nor a
// tenant deleted and made again under its id the messages kept for the
// earlier one.
package chatcontext

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"connector/contract"
	"connector/platform/fairshare"
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
	// Weights shares Chats between tenant ids as fairshare.Holdings does
	// (fairshare.Config.Weights); nil weighs each tenant 1.
	Weights map[string]int
}

// Log holds kept messages by tenant and chat key. It is safe for
// concurrent use; a platform serializes the changes of one chat (its
// ingest order).
type Log[K comparable] struct {
	chats, perChat, bytesPerChat int

	mu   sync.Mutex
	kept *fairshare.LRU[tenantChat[K], held] // held by the tenant id
}

// tenantChat is a tenant id's chat k.
type tenantChat[K comparable] struct {
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
	l := &Log[K]{
		chats:        cmp.Or(max(b.Chats, 0), DefaultChats),
		perChat:      cmp.Or(max(b.PerChat, 0), DefaultPerChat),
		bytesPerChat: cmp.Or(max(b.BytesPerChat, 0), DefaultBytesPerChat),
	}
	l.kept = fairshare.NewLRU[tenantChat[K], held](l.chats, b.Weights)
	return l
}

// Keep adds a message to t's chat k, dropping the oldest beyond the bounds
// and any kept for another creation of t's id. A message without text is
// not kept: the gateway skips context without text. A chat new to a full
// Log forgets the least recently used chat of the tenant id holding the
// most for its weight (fairshare.LRU).
func (l *Log[K]) Keep(t Tenant, k K, msg contract.ContextMessage) {
	if msg.Text == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var old []contract.ContextMessage
	if h, ok := l.kept.Get(tenantChat[K]{t.id, k}); ok && h.created == t.created {
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
		l.kept.Remove(tenantChat[K]{t.id, k})
		return
	}
	l.kept.Add(t.id, tenantChat[K]{t.id, k}, held{t.created, kept})
}

// Take returns the messages kept for t's chat k, oldest first, and forgets
// them, for a delivery to carry; Restore gives them back when it fails.
// Messages kept after Take are the next delivery's.
func (l *Log[K]) Take(t Tenant, k K) []contract.ContextMessage {
	kept := l.Pending(t, k)
	l.Delivered(t, k)
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
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.kept.Peek(tenantChat[K]{t.id, k}); ok && h.created == t.created {
		return h.msgs
	}
	return nil
}

// Delivered forgets t's chat k's messages once a delivery carried them.
func (l *Log[K]) Delivered(t Tenant, k K) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kept.Remove(tenantChat[K]{t.id, k})
}

// SetTenants forgets the chats kept for a tenant created (id -> its
// creation, zero for a declared tenant: platform.TenantKeeper's) does not
// name, or for another creation of one: a deleted tenant's chats, which no
// delivery takes any more, neither linger nor keep their part of Chats
// from the tenants that are.
func (l *Log[K]) SetTenants(created map[string]time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, keys := range l.kept.Keys() {
		at, ok := created[id]
		for _, k := range keys {
			if h, _ := l.kept.Peek(k); !ok || h.created != TenantOf(id, at).created {
				l.kept.Remove(k)
			}
		}
	}
}

// Len is the number of chats with kept messages.
func (l *Log[K]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kept.Len()
}
