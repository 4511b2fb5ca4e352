package discord

import (
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// This file owns author-first routing (Hermes contract §3, "Author-first
// resolution"): a message whose author is bound to a tenant (a binding of
// kind user) reaches that tenant, wherever it was posted (any guild, a
// DM), and no other; it bypasses the tenant's mention requirement (the
// owner floor: you do not @mention your own agent). A message of an
// unbound author falls back to the guild's tenant (or dm_tenant). The
// tenant may then act in the channel where its author spoke, which
// spokeIn remembers. Interactions (slash commands, buttons) still route by
// guild.

// maxSpokeIn bounds the (channel, tenant) grants remembered; the least
// recently used go first.
const maxSpokeIn = 100_000

// messageNormalizer resolves m's tenant, author binding first, and returns
// the normalizer to read it with.
func (p *Platform) messageNormalizer(m *wireMessage) (*normalizer, string, bool) {
	if m.Author != nil {
		if tenant, ok := (*p.authors.Load())[m.Author.ID]; ok {
			p.spoke.add(m.ChannelID, tenant)
			n := p.normalizer(tenant)
			floor := *n.pol
			floor.requireMention, floor.threadRequireMention, floor.ignoreNoMention = false, false, false
			n.pol = &floor
			return n, tenant, true
		}
	}
	tenant, ok := p.guildTenant(m.GuildID)
	if !ok {
		return nil, "", false
	}
	return p.normalizer(tenant), tenant, true
}

// spokeIn is a bounded set of (channel, tenant) pairs.
type spokeIn struct {
	mu    sync.Mutex
	pairs *simplelru.LRU[[2]string, struct{}]
}

func newSpokeIn(size int) *spokeIn {
	l, _ := simplelru.NewLRU[[2]string, struct{}](size, nil) // size > 0
	return &spokeIn{pairs: l}
}

func (s *spokeIn) add(channel, tenant string) {
	s.mu.Lock()
	s.pairs.Add([2]string{channel, tenant}, struct{}{})
	s.mu.Unlock()
}

func (s *spokeIn) has(channel, tenant string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pairs.Get([2]string{channel, tenant})
	return ok
}

// ChatGranted implements platform.ChatGranter: tenant may act in chatID
// when an author bound to it spoke there (and it is still remembered).
func (p *Platform) ChatGranted(chatID, tenant string) bool { return p.spoke.has(chatID, tenant) }
