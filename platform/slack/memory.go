package slack

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"connector/internal/clock"
	"connector/platform"
	"connector/store"
	"connector/vault"
)

// memory is what the connector remembers of the workspaces' messages and
// threads, as the native adapter's _processed_message_ts, _bot_message_ts,
// _mentioned_threads and its thread sessions do: the messages that started
// a turn (an edit of one starts none), the messages the bot posted and the
// threads it posted into, the threads mentioned earlier, and the threads
// with a delivered turn; and who posted each prompt message. The mention
// gating reads the first (gate.go), a press the last (ingestPress), so every
// instance must read the same: with a store (platform.Deps.Store) each
// marker is a store capability, written when it is set and read at every
// question, so every instance sharing the store and the next start agree.
// Each marker expires memoryTTL after it was last set, which bounds the
// store by the rate the bot posts and is mentioned at, as the native
// adapter's sets are bounded (5,000 each, oldest first; and forgotten at a
// restart). Without a store the markers are kept in process memory
// (platform.LocalState), 25,000 in all, least recently set forgotten first.
type memory struct {
	caps  store.Capabilities // the store's, else a platform.LocalState
	clock clock.Clock
	// vault judges whether a prompt was posted by an earlier tenant of
	// its tenant's id (earlierRecord); nil judges none so.
	vault vault.Store
}

// memoryTTL is how long a marker lasts after it was last set.
const memoryTTL = 7 * 24 * time.Hour

// memorySize bounds the markers kept in process memory (the native caps,
// 5,000 of each of the four thread kinds, and as many prompts).
const memorySize = 5 * 5000

// markKind names a kind of marker.
type markKind string

// Marker kinds. Keys are turnMark's for turn, threadMark's for posted,
// mentioned and active, "<channel>:<ts>" for prompt.
const (
	markTurn      markKind = "turn"      // a message that started a turn
	markPosted    markKind = "posted"    // a message the bot posted, or a thread it posted into
	markMentioned markKind = "mentioned" // a thread mentioned earlier
	markActive    markKind = "active"    // a thread with a delivered turn
	markPrompt    markKind = "prompt"    // a prompt message, valued with who posted it (promptOwner)
)

var _ threadState = (*memory)(nil)

// threadMark is the key of a posted, mentioned or active marker: message
// or thread ts of channel in workspace team, for tenant. A marker counts
// only in its own channel and for its own tenant: Slack's ts are unique
// per channel alone, and a tenant names any thread ts it posts into, so a
// key without them would let one tenant's post or mention wake the bot
// unmentioned in another's thread of the same ts. The tenant goes last:
// the others hold no colon.
func threadMark(tenant, team, channel, ts string) string {
	return team + ":" + channel + ":" + ts + ":" + tenant
}

// turnMark is the key of a turn marker: message ts of channel in
// workspace team (a ts is unique in its channel only).
func turnMark(team, channel, ts string) string { return team + ":" + channel + ":" + ts }

// markKey is a marker's key in the store.
func markKey(kind markKind, key string) string { return "slack/mark/" + string(kind) + "/" + key }

// has reports whether the marker kind/key is set. A thread marker
// (threadMark's key) set for an earlier tenant of its tenant's id, deleted
// since, is not (earlierRecord): a tenant created again under the id does
// not inherit its threads. One stored without its time (before it was
// kept) counts.
func (m *memory) has(ctx context.Context, kind markKind, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	value, ok, err := m.caps.Get(ctx, markKey(kind, key))
	if !ok || err != nil || kind == markTurn || len(value) == 0 {
		return ok, err
	}
	at, created, _ := strings.Cut(string(value), "/")
	us, perr := strconv.ParseInt(at, 10, 64)
	c, _ := strconv.ParseInt(created, 10, 64)
	return perr != nil || !earlierRecord(m.vault, markTenant(key), us, c), nil
}

// markTenant is the tenant of a thread marker's key (threadMark).
func markTenant(key string) string { return key[strings.LastIndexByte(key, ':')+1:] }

// set sets the marker kind/key for memoryTTL from now, valued with when
// (Unix microseconds) and, for a thread marker, "/" and its tenant's
// creation (creation).
func (m *memory) set(ctx context.Context, kind markKind, key string) error {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	now := m.clock.Now()
	value := strconv.AppendInt(nil, now.UnixMicro(), 10)
	if kind != markTurn {
		value = strconv.AppendInt(append(value, '/'), creation(ctx, m.vault, markTenant(key)), 10)
	}
	return m.caps.Put(ctx, markKey(kind, key), value, now.Add(memoryTTL))
}

// creation is tenant's creation as its op was authorized, else as v knows
// it (platform.AuthorizedCreation), in Unix microseconds, 0 when it has
// none.
func creation(ctx context.Context, v vault.Store, tenant string) int64 {
	if c := platform.AuthorizedCreation(ctx, v, tenant); !c.IsZero() {
		return c.UnixMicro()
	}
	return 0
}

// earlierRecord reports whether a record of tenant stored at at under its
// creation created (Unix microseconds; created 0: kept without one) is an
// earlier tenant's of the id, deleted since (vault.Outdated).
func earlierRecord(v vault.Store, tenant string, at, created int64) bool {
	var c time.Time
	if created != 0 {
		c = time.UnixMicro(created)
	}
	return vault.Outdated(v, tenant, time.UnixMicro(at), c)
}

// turnStarted records a delivered turn of tenant: message ts of team in
// channel, in session thread (may be "").
func (m *memory) turnStarted(ctx context.Context, tenant, team, channel, ts, thread string) error {
	if err := m.set(ctx, markTurn, turnMark(team, channel, ts)); err != nil {
		return err
	}
	if thread == "" {
		return nil
	}
	return m.set(ctx, markActive, threadMark(tenant, team, channel, thread))
}

// sent records a message the bot posted for tenant with team's token in
// channel, and the thread it went into.
func (m *memory) sent(ctx context.Context, tenant, team, channel, ts, thread string) error {
	for _, k := range []string{ts, thread} {
		if k == "" {
			continue
		}
		if err := m.set(ctx, markPosted, threadMark(tenant, team, channel, k)); err != nil {
			return err
		}
	}
	return nil
}

// promptOwner is who posted a prompt message: the tenant whose action it
// was, and the workspace whose token posted it (the only one that may
// update it).
type promptOwner struct {
	Tenant string `json:"tenant"`
	Team   string `json:"team"`
	// At is when the prompt was posted, in Unix microseconds (zero in
	// records stored before it was kept, which only tenants created before
	// then, judged by nothing, hold).
	At int64 `json:"at,omitempty"`
	// Created is the tenant's creation then (creation; 0: none, or not kept).
	Created int64 `json:"c,omitempty"`
}

// promptPosted records that o (its Created read as its op was authorized)
// posted the prompt message ts in channel.
func (m *memory) promptPosted(ctx context.Context, channel, ts string, o promptOwner) error {
	o.At = m.clock.Now().UnixMicro()
	value, _ := json.Marshal(o) // strings and integers: cannot fail
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	return m.caps.Put(ctx, markKey(markPrompt, channel+":"+ts), value, m.clock.Now().Add(memoryTTL))
}

// promptOwnerOf returns who posted the prompt message ts in channel; ok
// is false when no prompt of the connector's is remembered there, or when
// an earlier tenant of its tenant's id, deleted since, posted it (a tenant
// created again under the id does not get the presses of its prompts).
func (m *memory) promptOwnerOf(ctx context.Context, channel, ts string) (o promptOwner, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	value, found, err := m.caps.Get(ctx, markKey(markPrompt, channel+":"+ts))
	if err != nil || !found {
		return promptOwner{}, false, err
	}
	if json.Unmarshal(value, &o) != nil || o.Tenant == "" || o.Team == "" || earlierRecord(m.vault, o.Tenant, o.At, o.Created) {
		return promptOwner{}, false, nil
	}
	return o, true, nil
}
