package discord

import (
	"context"
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
//   - before the snapshot of every claimed guild has loaded, no owner is
//     known: unavailable (retryable), whatever the chat;
//   - after it, a cached chat belongs to the tenant of its guild (a DM
//     channel to DMTenant when its user is known and linked to no other
//     tenant: dmTenant), and an id the cache does not hold belongs to no
//     tenant.
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
// active threads. It latches: later sessions find the cache already full.
type snapshot struct {
	loaded atomic.Bool

	mu      sync.Mutex
	readyAt time.Time
	pending map[string]bool // claimed guilds listed in READY, not yet created
}

// ready starts the wait for the claimed guilds among those READY listed;
// it reports whether that completed the snapshot (none to wait for).
func (s *snapshot) ready(now time.Time, listed []string, claimed func(string) bool) bool {
	if s.loaded.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readyAt = now
	s.pending = make(map[string]bool, len(listed))
	for _, id := range listed {
		if claimed(id) {
			s.pending[id] = true
		}
	}
	return s.completeLocked()
}

// created records a guild's GUILD_CREATE; it reports whether that completed
// the snapshot.
func (s *snapshot) created(guildID string) bool {
	if s.loaded.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		return false // before READY
	}
	delete(s.pending, guildID)
	return s.completeLocked()
}

func (s *snapshot) completeLocked() bool {
	if len(s.pending) > 0 || s.loaded.Load() {
		return false
	}
	s.loaded.Store(true)
	return true
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
// the guild snapshot has loaded; it makes no network call. On an instance
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
	if ch, ok := p.cache.cachedChannel(chatID); ok {
		if tenant, ok := p.channelTenant(ch); ok {
			return tenant, nil
		}
	}
	return "", platform.ErrUnknownChat
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
