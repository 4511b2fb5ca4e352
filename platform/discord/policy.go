package discord

import (
	"slices"

	"connector/internal/nativecfg"
)

// policy is one tenant's TenantConfig in the form normalization reads.
type policy struct {
	autoThread           bool
	requireMention       bool
	threadRequireMention bool
	ignoreNoMention      bool
	botsInlineMention    bool
	channelContext       bool
	allowBots            string
	free                 channelSet
	noThread             channelSet
	allowed              channelSet
	ignored              channelSet
	voiceLinked          set
	users                set
	anyUser              bool
	roles                set
}

type set map[string]struct{}

func newSet(ids []string) set {
	if len(ids) == 0 {
		return nil
	}
	s := make(set, len(ids))
	for _, id := range ids {
		s[id] = struct{}{}
	}
	return s
}

func (s set) has(id string) bool {
	_, ok := s[id]
	return ok
}

// channelSet is a channel list: ids and names as written, and whether "*"
// (every channel) is in it.
type channelSet struct {
	keys set
	all  bool
}

// newChannelSet builds a channel list; wild says whether "*" means every
// channel (in no_thread_channels it is an ordinary entry, as natively).
func newChannelSet(entries []string, wild bool) channelSet {
	entries = nativecfg.Split(entries)
	cs := channelSet{keys: newSet(entries)}
	cs.all = wild && cs.keys.has(wildcard)
	return cs
}

func (cs channelSet) empty() bool { return len(cs.keys) == 0 }

// matches reports whether the list names any of a channel's keys (see
// channelKeys), or holds "*".
func (cs channelSet) matches(keys []string) bool {
	return cs.all || slices.ContainsFunc(keys, cs.keys.has)
}

// channelKeys are the spellings a channel list can name a channel by, as
// the native adapter's channel gates see it: its id, name and #name, and
// for a thread also its parent's id, name and #name.
func channelKeys(ch chanInfo, parent *chanInfo) []string {
	keys := make([]string, 0, 6)
	add := func(c chanInfo) {
		if c.ID != "" {
			keys = append(keys, c.ID)
		}
		if c.Name != "" {
			keys = append(keys, c.Name, "#"+c.Name)
		}
	}
	add(ch)
	if parent != nil {
		add(*parent)
	}
	return keys
}

// newPolicy normalizes tc (Validate has checked it; entries it would refuse
// match nothing here).
func newPolicy(tc TenantConfig) *policy {
	p := &policy{
		autoThread:           nativecfg.FlagOr(tc.AutoThread, true),
		requireMention:       nativecfg.FlagOr(tc.RequireMention, true),
		threadRequireMention: nativecfg.FlagOr(tc.ThreadRequireMention, false),
		ignoreNoMention:      nativecfg.FlagOr(tc.IgnoreNoMention, true),
		botsInlineMention:    nativecfg.FlagOr(tc.BotsRequireInlineMention, false),
		channelContext:       nativecfg.FlagOr(tc.ChannelContext, true),
		allowBots:            normalizeAllowBots(tc.AllowBots),
		free:                 newChannelSet(tc.FreeResponseChannels, true),
		noThread:             newChannelSet(tc.NoThreadChannels, false),
		allowed:              newChannelSet(tc.AllowedChannels, true),
		ignored:              newChannelSet(tc.IgnoredChannels, true),
		voiceLinked:          newSet(nativecfg.Split(tc.VoiceLinkedTextChannels)),
	}
	var users, roles []string
	for _, e := range nativecfg.Split(tc.AllowedUsers) {
		if e = cleanUserEntry(e); e == wildcard {
			p.anyUser = true
		}
		users = append(users, e)
	}
	for _, e := range nativecfg.Split(tc.AllowedRoles) {
		if r, err := canonicalRole(e); err == nil {
			roles = append(roles, r)
		}
	}
	p.users, p.roles = newSet(users), newSet(roles)
	return p
}

// admits reports whether the allowlists let a human author (with member's
// roles) in.
func (p *policy) admits(author *wireUser, member *wireMember) bool {
	if p.users == nil && p.roles == nil {
		return true
	}
	if p.anyUser || (author != nil && p.users.has(author.ID)) {
		return true
	}
	return member != nil && slices.ContainsFunc(member.Roles, p.roles.has)
}
