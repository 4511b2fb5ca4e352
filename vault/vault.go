// Package vault is the connector's capability vault: credentials that act on
// the shared bot identity (a Discord interaction token, say) are stripped from
// inbound payloads at the edge and kept here, keyed by tenant, session key and
// kind. A gateway later names the session and kind (the follow_up op) and the
// connector resolves the value itself, so no capability ever reaches a
// gateway, and a lookup under another tenant finds nothing.
//
// Values are Secret: they print, marshal and log as "[redacted]".
package vault

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/internal/clock"
)

// Kind names a capability type. Its TTL is fixed per kind.
type Kind string

// KindDiscordInteractionToken is a Discord interaction token: valid for
// follow-ups and edits for 15 minutes after the interaction.
const KindDiscordInteractionToken Kind = "discord.interaction_token"

// KindSlackResponseURL is a Slack slash command's response_url: it posts
// up to five replies to the command for 30 minutes (follow_up).
const KindSlackResponseURL Kind = "slack.response_url"

// KindChatGrant is a posting grant: the tenant may act with the shared bot
// in the chat of one platform named by the key's SessionKey (the platform
// and the chat, platform.Grants), because an author bound to it spoke
// there. The value is empty: the key is the grant.
// It lasts ChatGrantTTL after the last message that renewed it.
const KindChatGrant Kind = "platform.chat_grant"

// ChatGrantTTL is how long a KindChatGrant lasts.
const ChatGrantTTL = 24 * time.Hour

// KindPostedMessage names (Ref) the tenant, and its creation (Created),
// a message the bot posted for in a chat of one platform it held by grant
// (the key's SessionKey names the platform, the chat and the message; its
// tenant is none's, as a later holder of the chat finds it by the message
// alone: platform.Grants.Posted): only that tenant may edit or delete it
// there, whoever holds the chat since. It lasts ChatGrantTTL, the life of
// the grant it was posted on. WhatsApp marks every message it sends a user
// so (the chat is the user's wa_id), whoever holds the conversation, so
// that an instance that did not send it tells whose it is
// (reply_to.is_own). (Releases before kept it under the tenant's own key,
// empty, which platform.Grants reads until those have expired.)
const KindPostedMessage Kind = "platform.posted_message"

// KindPromptPoster names (Ref) the tenant, and its creation (Created),
// that posted a prompt message in a chat of one platform it held by grant
// (the key's SessionKey names the platform, the chat and the message; its
// tenant is none's, as a press finds it by the message alone:
// platform.Grants.Prompted). It lasts PromptPosterTTL.
const KindPromptPoster Kind = "platform.prompt_poster"

// PromptPosterTTL is how long a KindPromptPoster lasts: a prompt's buttons
// stay pressable long after the grant it was posted on.
const PromptPosterTTL = 30 * 24 * time.Hour

// WhatsApp Cloud's records (platform/whatsapp), kept here so every
// instance sharing the store sees them:
const (
	// KindWhatsAppConversation is a tenant's conversation with a WhatsApp
	// user (the key's SessionKey is the wa_id): the tenant may act in it,
	// and Ref says which business number the user last wrote to and the
	// id of that message. It lasts WhatsAppConversationTTL after the last
	// message that renewed it.
	KindWhatsAppConversation Kind = "whatsapp_cloud.conversation"
	// KindWhatsAppMessage marks an inbound message id (SessionKey) as
	// delivered to the tenant, so Meta's redeliveries are dropped on every
	// instance, for WhatsAppMessageTTL.
	KindWhatsAppMessage Kind = "whatsapp_cloud.message"
	// KindWhatsAppPrompt is a prompt message sent to a user (SessionKey
	// "<wa_id>:<message id>", under the business number it went out from):
	// Ref names the tenant that posted it, which its taps go to, its
	// prompt_id, and whether a tap answered it, for 7 days.
	KindWhatsAppPrompt Kind = "whatsapp_cloud.prompt"
)

// WhatsAppConversationTTL is how long a KindWhatsAppConversation lasts:
// past Meta's 24-hour service window, so a late send is answered with the
// window's own failure rather than a decline.
const WhatsAppConversationTTL = 30 * 24 * time.Hour

// WhatsAppMessageTTL is how long a KindWhatsAppMessage lasts: Meta
// retries a webhook it did not see answered 200 for up to 7 days, and a
// retry may carry messages stored from an earlier attempt.
const WhatsAppMessageTTL = 7 * 24 * time.Hour

// ttls are the kinds the vault stores, each with the lifetime of its
// values.
var ttls = map[Kind]time.Duration{
	KindDiscordInteractionToken: 15 * time.Minute,
	KindSlackResponseURL:        30 * time.Minute,
	KindChatGrant:               ChatGrantTTL,
	KindPostedMessage:           ChatGrantTTL,
	KindPromptPoster:            PromptPosterTTL,
	KindWhatsAppConversation:    WhatsAppConversationTTL,
	KindWhatsAppMessage:         WhatsAppMessageTTL,
	KindWhatsAppPrompt:          7 * 24 * time.Hour,
}

// remembered are the kinds a Durable vault's in-memory front answers: marks
// that something happened, which are renewed but never replaced by another
// value nor deleted while they live. A value of another kind may be (a
// later interaction's token under the same session key, a conversation's
// business number, a prompt a tap answered), so it is read from the store
// on every lookup: an instance never acts on a value another instance
// replaced or deleted.
var remembered = map[Kind]bool{KindChatGrant: true, KindPostedMessage: true, KindPromptPoster: true, KindWhatsAppMessage: true}

// TTL returns the lifetime of a kind's values (ok false for an unknown kind).
func (k Kind) TTL() (time.Duration, bool) {
	ttl, ok := ttls[k]
	return ttl, ok
}

// Secret is a credential value that never prints.
type Secret struct{ v string }

// NewSecret wraps s.
func NewSecret(s string) Secret { return Secret{v: s} }

// Reveal returns the raw value, for the one call that sends it to the platform.
func (s Secret) Reveal() string { return s.v }

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.v == "" }

const redacted = "[redacted]"

// String hides the value.
func (Secret) String() string { return redacted }

// GoString hides the value from %#v.
func (Secret) GoString() string { return redacted }

// Format hides the value from every fmt verb.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalJSON hides the value from JSON.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText hides the value from text encoders.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue hides the value from log/slog.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// Key addresses one capability.
type Key struct {
	Tenant     string
	SessionKey string
	Kind       Kind
}

// Entry is a stored capability with the context needed to use it.
type Entry struct {
	Value Secret
	// Ref is non-secret context the user of the capability needs, e.g. the
	// interaction id or application id for a Discord token.
	Ref string
	// Stored is when the capability was captured; it expires Stored + TTL.
	Stored time.Time
	// Created is its tenant's creation (Config.Since) when it was stored,
	// which Put sets: one stored under another creation is an earlier
	// tenant's of the id (Earlier), whatever the instances' clocks say.
	Created time.Time
}

// check rejects a key Put cannot store: an unknown kind, or no tenant or
// session key.
func (k Key) check() error {
	if _, ok := k.Kind.TTL(); !ok {
		return fmt.Errorf("vault: unknown capability kind %q", k.Kind)
	}
	if k.Tenant == "" || k.SessionKey == "" {
		return fmt.Errorf("vault: capability %q needs a tenant and a session key", k.Kind)
	}
	return nil
}

// expiredAt reports whether e, of a kind with this ttl, has expired at now.
func (e Entry) expiredAt(now time.Time, ttl time.Duration) bool {
	return now.Sub(e.Stored) >= ttl
}

// Store is the vault's storage. Memory is the in-process implementation;
// Durable keeps values on a store.Capabilities (the embedded store or Redis)
// so they survive restarts and are shared between instances.
//
// Every call runs under the caller's ctx: a lookup on the way to a
// platform call is bounded by that call's deadline.
type Store interface {
	// Put stores e under k, replacing an older value.
	Put(ctx context.Context, k Key, e Entry) error
	// Get returns the live entry under k. A key of another tenant is a
	// different key, so it finds nothing.
	Get(ctx context.Context, k Key) (Entry, bool)
	// Delete removes k.
	Delete(ctx context.Context, k Key)
	// Stats reports counters for metrics.
	Stats() Stats
}

// Stats are vault counters.
type Stats struct {
	Size   int    // live and not yet swept entries
	Hits   uint64 // lookups that found a live capability
	Misses uint64 // lookups that found nothing (absent, expired, other tenant)
	// Expiries counts lookups that found only an expired capability.
	Expiries uint64
	// Evicted counts entries the LRU removed: capacity, TTL sweep or delete.
	Evicted uint64
	// StoreErrors counts failed calls to a Durable vault's backing store.
	StoreErrors uint64
}

// Config sizes the in-memory vault.
type Config struct {
	// MaxEntries bounds each kind's LRU. Zero means 100,000.
	MaxEntries int
	// Clock is the clock expiry is judged by. Nil means clock.System.
	Clock clock.Clock
	// Since, when set, is when a tenant began (the registry's
	// Tenant.Created; zero for always): an entry of the tenant stored
	// under another creation (Entry.Created), or without one before then,
	// is not found, whatever its kind's TTL says. It was
	// stored for an earlier tenant of the id, deleted since, whose grants,
	// posted messages and capabilities the tenant made again under the id
	// must not inherit.
	Since func(tenant string) time.Time
	// Known, when set, reports whether the registry holds tenant now
	// (false: deleted, or not made yet); nil: every tenant is held. Since
	// is zero alike for a declared tenant and for one the registry no
	// longer holds: Known tells them apart (platform.Execute's check 8).
	Known func(tenant string) bool
}

// Memory is a bounded in-process Store: one LRU per kind, whose entries
// expire their kind's TTL after they were stored, by the injected clock.
// An expired value is never returned; it is removed when a lookup finds it,
// or when a Put finds it the least recently used of its kind. It runs no
// goroutine, so any number may be created.
type Memory struct {
	clock clock.Clock
	since func(tenant string) time.Time // Config.Since; nil: none
	known func(tenant string) bool      // Config.Known; nil: every tenant

	mu     sync.Mutex // guards caches; a leaf
	caches map[Kind]*simplelru.LRU[Key, Entry]

	hits, misses, expiries, evicted atomic.Uint64
}

var _ Store = (*Memory)(nil)

// NewMemory creates the vault.
func NewMemory(cfg Config) *Memory {
	cfg.MaxEntries = cmp.Or(max(cfg.MaxEntries, 0), 100_000)
	m := &Memory{caches: make(map[Kind]*simplelru.LRU[Key, Entry]), clock: cmp.Or(cfg.Clock, clock.System), since: cfg.Since, known: cfg.Known}
	for k := range ttls {
		// The eviction callback runs under mu, so it only counts.
		m.caches[k], _ = simplelru.NewLRU(cfg.MaxEntries, func(Key, Entry) { m.evicted.Add(1) }) // size > 0: cannot fail
	}
	return m
}

// Put implements Store.
func (m *Memory) Put(_ context.Context, k Key, e Entry) error {
	if err := k.check(); err != nil {
		return err
	}
	now := m.clock.Now()
	if e.Stored.IsZero() {
		e.Stored = now
	}
	if e.Created.IsZero() {
		e.Created = m.Since(k.Tenant)
	}
	ttl, _ := k.Kind.TTL()
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.caches[k.Kind]
	c.Add(k, e)
	for _, old, ok := c.GetOldest(); ok && old.expiredAt(now, ttl); _, old, ok = c.GetOldest() {
		c.RemoveOldest()
	}
	return nil
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, k Key) (Entry, bool) {
	e, state := m.lookup(k)
	switch state {
	case found:
		m.hits.Add(1)
		return e, true
	case expired:
		m.expiries.Add(1)
	}
	m.misses.Add(1)
	return Entry{}, false
}

// lookupState is what lookup found.
type lookupState uint8

const (
	absent lookupState = iota
	found
	expired // only an expired value, now removed
)

// lookup finds k's live entry without counting the lookup.
func (m *Memory) lookup(k Key) (Entry, lookupState) {
	c, ok := m.caches[k.Kind]
	if !ok || k.Tenant == "" {
		return Entry{}, absent
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := c.Get(k)
	if !ok {
		return Entry{}, absent
	}
	ttl, _ := k.Kind.TTL()
	if e.expiredAt(m.clock.Now(), ttl) || m.predates(k, e) {
		c.Remove(k)
		return Entry{}, expired
	}
	return e, found
}

// Since is when tenant began, as Config.Since says (zero without one):
// entries of the tenant stored before then are not found.
func (m *Memory) Since(tenant string) time.Time {
	if m.since == nil {
		return time.Time{}
	}
	return m.since(tenant)
}

// Known reports whether tenant is one the registry holds, as
// Config.Known says (true without one).
func (m *Memory) Known(tenant string) bool { return m.known == nil || m.known(tenant) }

// Known reports whether s knows tenant as one the registry holds now
// (Config.Known): false for a tenant deleted (or not made yet), whose
// Creation is zero as a declared tenant's is; true when s does not know
// which tenants the registry holds.
func Known(s Store, tenant string) bool {
	b, ok := s.(interface{ Known(tenant string) bool })
	return !ok || b.Known(tenant)
}

// Predates reports whether what was stored for tenant at at (a record
// kept outside s, which s does not judge itself) was stored for an
// earlier tenant of the id, deleted since, as s judges its own entries
// (Config.Since): false when s does not know when tenants began.
func Predates(s Store, tenant string, at time.Time) bool {
	since := Creation(s, tenant)
	return !since.IsZero() && at.UnixMicro() < since.UnixMicro()
}

// Earlier reports whether what was kept for tenant as created at created
// (a record kept outside s, with the creation s gave then: Creation) is
// an earlier tenant's of the id, deleted since: the tenant's creation is
// another now. A tenant without one (declared in the YAML, over the stored
// tenant of its id, which the relay takes for the same) has no earlier.
func Earlier(s Store, tenant string, created time.Time) bool {
	since := Creation(s, tenant)
	return !since.IsZero() && created.UnixMicro() != since.UnixMicro() // whole microseconds, as a Durable keeps them
}

// Creation is tenant's creation as s knows it (Config.Since; zero when s
// does not know).
func Creation(s Store, tenant string) time.Time {
	if b, ok := s.(interface{ Since(tenant string) time.Time }); ok {
		return b.Since(tenant)
	}
	return time.Time{}
}

// Outdated reports whether what was kept for tenant at at, under its
// creation created (zero: kept without one, before creations were kept
// or while the tenant had none), is an earlier tenant's of the id, deleted
// since: under another creation (Earlier), else kept before the creation
// (Predates). s judges its own entries so.
func Outdated(s Store, tenant string, at, created time.Time) bool {
	if !created.IsZero() {
		return Earlier(s, tenant, created)
	}
	return Predates(s, tenant, at)
}

// predates reports whether e was stored for an earlier tenant of k's
// tenant id (Outdated).
func (m *Memory) predates(k Key, e Entry) bool { return Outdated(m, k.Tenant, e.Stored, e.Created) }

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, k Key) {
	if c, ok := m.caches[k.Kind]; ok {
		m.mu.Lock()
		c.Remove(k)
		m.mu.Unlock()
	}
}

// Stats implements Store.
func (m *Memory) Stats() Stats {
	size := 0
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.caches {
		size += c.Len()
	}
	return Stats{
		Size: size, Hits: m.hits.Load(), Misses: m.misses.Load(),
		Expiries: m.expiries.Load(), Evicted: m.evicted.Load(),
	}
}
