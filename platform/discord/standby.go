package discord

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"connector/platform"
)

// With several instances only the holder of the lease ingest/discord/gateway
// runs the Gateway session, so only its cache knows the bot's channels, once
// the guild snapshot has loaded. An instance without it (a standby, or the
// holder right after taking the lease, or taking it back) answers a chat's owner by asking Discord,
// GET /channels/{id}, and applies the same rule to the answer as the cache
// path (channelTenant: the guild's tenant, DMTenant for a DM under rule 4,
// dmTenant: the DM's recipient comes from Discord's answer). To keep a
// decline from telling a tenant whether a chat exists or whose it is:
//
//   - the lookup runs for the asking tenant (platform.TenantOf), on its share
//     of the REST budget, and every first ask of a chat costs one call
//     whether the chat is the asker's, another tenant's or nobody's;
//   - what a lookup found is kept in the channel cache (a channel's guild
//     never changes), and a chat found to be the asker's lets the asker
//     through for standbyOwnTTL without a lookup (the bot may leave the
//     guild meanwhile, and a standby sees no GUILD_DELETE); a chat found
//     or cached as another tenant's is looked up again, like one never
//     seen;
//   - a decline is remembered per (asking tenant, chat) for
//     standbyDeclineTTL, whatever its reason (not found, not visible to the
//     bot, another tenant's), so a repeated ask is answered from memory
//     alike, and only the asker's own asks decide that; it holds under the
//     bindings it was made under (Bind forgets them all alike), so a chat
//     just bound to or claimed by the asker is looked up again at once.
//
// A lookup Discord does not answer (timeout, 5xx, rate limit, breaker) is
// unavailable (retryable), never a decline. An action that names no
// platform makes the lookup only when no other platform places its chat
// (platform.MayWait), so another platform's chat costs no call here.

// Decline memory of a standby: how long and how many; and how long a
// chat found to be its asker's is trusted (as many).
const (
	standbyDeclineTTL  = 30 * time.Second
	maxStandbyDeclines = 100_000
	standbyOwnTTL      = 5 * time.Minute
)

// standby reports whether chat owners are looked up at Discord: there are
// several instances and this one does not run the Gateway session, or has
// just taken it over and not loaded the guild snapshot yet (a lone
// instance answers unavailable then; see owners.go).
func (p *Platform) standby() bool {
	return p.deps.Exclusive != nil && (!p.gwHere.Load() || !p.ownersKnown())
}

// standbyTenant is ChatTenant on a standby (see above). It returns the
// asking tenant when the chat is the asker's, platform.ErrUnknownChat when it
// is not (another tenant's included), and an error wrapping
// platform.ErrUnavailable when Discord could not be asked.
func (p *Platform) standbyTenant(ctx context.Context, chatID string) (string, error) {
	asker, gen := platform.TenantOf(ctx), p.ownersGen.Load()
	if ch, ok := p.owned.Get([2]string{asker, chatID}); ok {
		if owner, ok := p.channelTenant(ch); ok && owner == asker { // the bindings may have changed since
			return owner, nil
		}
	}
	ci, found, err := p.standbyLookup(ctx, chatID, asker)
	if err != nil {
		return "", err
	}
	if found {
		if owner, ok := p.channelTenant(ci); ok && owner == asker {
			return owner, nil
		}
		p.decline(gen, asker, chatID)
	}
	return "", platform.ErrUnknownChat
}

// decline remembers asker's decline of chatID, decided under gen (the
// count of Binds read before the decision: one Bind meanwhile makes it
// forgotten at once).
func (p *Platform) decline(gen uint64, asker, chatID string) {
	p.declined.Add([2]string{asker, chatID}, gen)
}

// standbyLookup is a standby's lookup of chatID for asker (see above): no
// call while a decline of (asker, chat) is remembered, else GET
// /channels/{id} on asker's share of the budget, its answer kept in the
// channel cache, and remembered as asker's chat when it is (owned).
// found is false for a chat Discord does not show the bot, whose decline
// it remembers; the caller remembers one of a chat found
// that is not asker's. The error wraps platform.ErrUnavailable; it is
// platform.ErrWouldWait, with no call, when ctx may not wait
// (platform.MayWait: Locate asks the other platforms before a lookup
// here).
func (p *Platform) standbyLookup(ctx context.Context, chatID, asker string) (ci chanInfo, found bool, err error) {
	gen := p.ownersGen.Load()
	if under, ok := p.declined.Get([2]string{asker, chatID}); ok && under == gen {
		return chanInfo{}, false, nil
	}
	if !platform.MayWait(ctx) {
		return chanInfo{}, false, platform.ErrWouldWait
	}
	wc, err := p.fetchChannel(platform.WithTenant(ctx, asker), chatID)
	switch {
	case errors.Is(err, errNotFound):
	case err != nil:
		return chanInfo{}, false, fmt.Errorf("discord: the chat's owner could not be looked up (%s): %w", describe(err).Error, platform.ErrUnavailable)
	case wc.ID == chatID:
		p.cache.putChannel(&wc)
		ci := infoFrom(&wc)
		if owner, ok := p.channelTenant(ci); ok && owner == asker {
			p.owned.Add([2]string{asker, chatID}, ci)
		}
		return ci, true, nil
	}
	p.decline(gen, asker, chatID)
	return chanInfo{}, false, nil
}

// LocateChat implements platform.ScopeLocator with the same lookup: the
// channel cache, else GET /channels/{id} for the asking tenant. A channel
// Discord answers 404 or 403 for is one the bot cannot see.
func (p *Platform) LocateChat(ctx context.Context, chatID string) (platform.Chat, error) {
	n, err := strconv.ParseUint(chatID, 10, 64)
	if err != nil || len(chatID) > 20 {
		return platform.Chat{}, platform.ErrUnknownChat
	}
	ci, err := p.cache.channel(ctx, strconv.FormatUint(n, 10))
	switch {
	case errors.Is(err, errNotFound):
		return platform.Chat{}, platform.ErrUnknownChat
	case err != nil:
		return platform.Chat{}, fmt.Errorf("discord: the channel could not be looked up (%s): %w", describe(err).Error, platform.ErrUnavailable)
	}
	return chatOfInfo(ci), nil
}
