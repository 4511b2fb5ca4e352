package discord

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/discordgo"

	"connector/platform"
)

// Where the Gateway session runs, chat ownership is answered from what the
// connector already knows, never by asking Discord on a gateway's behalf
// (an instance without the Gateway asks, under the rules in standby.go): a
// REST lookup for an id the cache does not hold took 22 ms where a cached
// channel of another tenant was declined in 0.25 ms, which told a tenant
// which channels the bot can see.
// The cache holds every channel and active thread of the bot's guilds once
// the Gateway's guild snapshot (READY, then one GUILD_CREATE per guild) has
// arrived, plus whatever events and ingest taught it since (new channels
// and threads, DM channels a message came from, threads a message revived),
// less the guilds the bot left since (a GUILD_DELETE, or a guild a new
// session's READY no longer lists: cache.dropGuilds).
// So, for any chat id:
//
//   - until the first snapshot has settled (every claimed guild READY
//     listed has had its GUILD_CREATE, or its GUILD_DELETE: the bot left
//     it, or it is in an outage), or guildSnapshotTimeout has passed since
//     READY, no owner is known: unavailable (retryable), whatever the chat;
//   - after it, a cached chat belongs to the tenant of its guild (a DM
//     channel to DMTenant when its user is known and linked to no other
//     tenant: dmTenant), and an id the cache does not hold belongs to no
//     tenant;
//   - but after a later new session's READY, until the GUILD_CREATEs (or
//     GUILD_DELETEs) of the claimed guilds it lists have arrived (they bring what changed while
//     no session was connected, a channel created then) or
//     guildSnapshotTimeout has passed, any chat not cached as the asker's
//     is answered only then (awaitGuilds), or unavailable if the ask's
//     context ends first; Locate, placing an action that names no
//     platform, asks without waiting first (platform.MayWait), so a chat
//     another platform places never waits here.
//
// A decline thus never depends on whether the chat exists or whom it
// belongs to. The price: a DM channel or an archived thread the connector
// has not seen since it started (the cache lives in memory only; a DM
// channel's user comes from Discord's channel object or from the author of
// a message or interaction delivered from it) is declined until a message
// in it arrives,
// and so is a channel pushed out of the cache (past maxCachedChannels, the
// least recently used go) until an event names it again.

// guildSnapshotTimeout bounds the wait for the GUILD_CREATE of a claimed
// guild listed in READY (one in an outage may arrive much later); after it,
// owners are answered from what has loaded.
const guildSnapshotTimeout = time.Minute

// errOwnersUnknown says no chat's owner can be told yet. It wraps
// platform.ErrUnavailable, so an op is answered unavailable in its text, not
// the decline.
const errOwnersUnknown = platform.UnavailableError("discord chat owners are unknown until the Gateway has loaded the guilds; retry later")

// snapshot tracks whether the Gateway's first guild snapshot has loaded:
// READY lists the guilds, GUILD_CREATE delivers each one's channels and
// active threads. It latches while this instance holds the Gateway lease
// (reset): later sessions find the cache already full,
// but for what changed while no session was connected (a channel created
// then), which their own GUILD_CREATEs bring; until they have (settled),
// an ask the cache alone cannot answer for its asker waits (awaitGuilds).
type snapshot struct {
	loaded atomic.Bool

	mu      sync.Mutex
	readyAt time.Time
	pending map[string]bool // claimed guilds listed in READY, not yet created
	settled chan struct{}   // closed once pending empties; nil when it has
}

// reset forgets the snapshot loaded so far, on taking the Gateway lease
// (again): the cache lacks what changed while another instance held it,
// so owners are unknown until the next READY's guilds have arrived.
func (s *snapshot) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = nil
	s.loaded.Store(false)
}

// ready starts the wait for the claimed guilds among those READY listed;
// it reports whether that completed the first snapshot (none to wait for).
func (s *snapshot) ready(now time.Time, listed []string, claimed func(string) bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readyAt = now
	s.pending = make(map[string]bool, len(listed))
	for _, id := range listed {
		if claimed(id) {
			s.pending[id] = true
		}
	}
	if s.settled == nil {
		s.settled = make(chan struct{})
	}
	return s.completeLocked()
}

// created records a guild's GUILD_CREATE, or its GUILD_DELETE (the bot
// left it, or it is in an outage: no GUILD_CREATE of it is coming); it
// reports whether that completed the first snapshot.
func (s *snapshot) created(guildID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		return false // before READY
	}
	delete(s.pending, guildID)
	return s.completeLocked()
}

func (s *snapshot) completeLocked() bool {
	if len(s.pending) > 0 {
		return false
	}
	if s.settled != nil {
		close(s.settled)
		s.settled = nil
	}
	return !s.loaded.Swap(true)
}

// loading returns, while the guilds of the latest READY have not all been
// created and guildSnapshotTimeout has not passed since, a channel closed
// once they have, and how long the wait has left; nil otherwise.
func (s *snapshot) loading(now time.Time) (<-chan struct{}, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := guildSnapshotTimeout - now.Sub(s.readyAt)
	if s.settled == nil || left <= 0 {
		return nil, 0
	}
	return s.settled, left
}

// known reports whether owners can be answered at now; missing is how many
// claimed guilds never arrived when it gave up waiting (then, and only then,
// expired is true).
func (s *snapshot) known(now time.Time) (known, expired bool, missing int) {
	if s.loaded.Load() {
		return true, false, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil || now.Sub(s.readyAt) < guildSnapshotTimeout || s.loaded.Load() {
		return false, false, 0
	}
	s.loaded.Store(true)
	return true, true, len(s.pending)
}

// ChatTenant implements platform.Platform. Where the Gateway runs, from the
// cache only (see above): the tenant a cached channel's guild is bound to,
// DMTenant for a cached DM channel under rule 4 (dmTenant),
// platform.ErrUnknownChat for anything
// else, and an error wrapping platform.ErrUnavailable for every chat until
// the guild snapshot has loaded (and for a chat not cached as the asker's
// while a new session's guilds load, should ctx end first, at once when
// ctx may not wait: platform.ErrWouldWait); it makes no network call. On an instance
// of several that does not run the Gateway (or has not loaded its guild
// snapshot yet), it asks Discord for the tenant platform.TenantOf(ctx)
// names (standbyTenant).
func (p *Platform) ChatTenant(ctx context.Context, chatID string) (string, error) {
	if !isSnowflake(chatID) {
		return "", platform.ErrUnknownChat
	}
	if p.standby() {
		return p.standbyTenant(ctx, chatID)
	}
	if !p.ownersKnown() {
		return "", errOwnersUnknown
	}
	tenant, ok := p.cachedOwner(chatID)
	if ok && tenant == platform.TenantOf(ctx) {
		return tenant, nil
	}
	if err := p.awaitGuilds(ctx); err != nil {
		return "", err
	}
	if tenant, ok := p.cachedOwner(chatID); ok {
		return tenant, nil
	}
	return "", platform.ErrUnknownChat
}

// cachedOwner is the owner of a cached chat (channelTenant).
func (p *Platform) cachedOwner(chatID string) (string, bool) {
	if ch, ok := p.cache.cachedChannel(chatID); ok {
		return p.channelTenant(ch)
	}
	return "", false
}

// awaitGuilds waits while a new session's guilds load (snapshot.loading),
// for every chat alike, so neither the wait nor its outcome tells whether
// a chat exists or whose it is. It fails, unavailable, when ctx ends first,
// and at once with platform.ErrWouldWait when ctx may not wait
// (platform.MayWait: Locate's first asks, which try the other platforms
// before waiting here).
func (p *Platform) awaitGuilds(ctx context.Context) error {
	settled, left := p.snap.loading(p.clock.Now())
	if settled == nil {
		return nil
	}
	if !platform.MayWait(ctx) {
		return platform.ErrWouldWait
	}
	expired := make(chan struct{})
	t := p.clock.AfterFunc(left, func() { close(expired) })
	defer t.Stop()
	select {
	case <-settled:
	case <-expired:
	case <-ctx.Done():
		return errOwnersUnknown
	}
	return nil
}

// ownersKnown reports whether the guild snapshot has loaded (or the wait for
// it timed out, which is logged once).
func (p *Platform) ownersKnown() bool {
	known, expired, missing := p.snap.known(p.clock.Now())
	if expired {
		p.log.Warn("discord guild snapshot incomplete; answering chat owners from the guilds loaded", "missing_guilds", missing, "waited", guildSnapshotTimeout)
	}
	return known
}

// channelTenant is ch's owner: the tenant a binding gives it
// (platform.Ownership.Owner: its guild's), or for a DM channel the DM
// tenant under rule 4 (dmTenant).
func (p *Platform) channelTenant(ch chanInfo) (string, bool) {
	switch ch.Type {
	case discordgo.ChannelTypeDM:
		return p.dmTenant(ch.Recipient)
	case discordgo.ChannelTypeGroupDM:
		return "", false
	}
	return p.owners.Load().Owner(chatOfInfo(ch))
}

// dmTenant is the owner of a DM channel with recipient by rule 4, the
// fallback for a DM no rule above places: DMTenant, unless there is none,
// the recipient is unknown ("": a DM channel Discord answered without its
// user, whose owner cannot be told, so nobody), or the recipient is linked
// to a tenant other than DMTenant (rule 3 places that DM: the linked
// tenant acts there on its grant, ChatGranted, and DMTenant not at all).
func (p *Platform) dmTenant(recipient string) (string, bool) {
	dm := p.cfg.DMTenant
	if dm == "" || recipient == "" || p.owners.Load().LinkedElsewhere(recipient, dm) {
		return "", false
	}
	return dm, true
}

// HeldSince is when chatID's holder came to hold it
// (platform.Handover): by the binding of its guild or its claim, the chat
// placed as the cache knows it (uncached, by its own claim only).
func (p *Platform) HeldSince(chatID string) time.Time {
	c := platform.Chat{ID: chatID}
	if ci, ok := p.cache.cachedChannel(chatID); ok {
		c = chatOfInfo(ci)
	}
	return p.owners.Load().HeldSince(c)
}

// discordEpoch is the first millisecond of 2015 (Unix ms), which a
// snowflake's time counts from.
const discordEpoch = 1420070400000

// PostedAt is when message was posted, as its snowflake says
// (platform.Handover).
func (p *Platform) PostedAt(message string) (at time.Time, dated, spelt bool) {
	id, err := strconv.ParseUint(message, 10, 64)
	if err != nil || !isSnowflake(message) {
		return time.Time{}, false, false
	}
	return time.UnixMilli(int64(id>>22) + discordEpoch), true, true
}
