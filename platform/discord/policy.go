package discord

// policy is one tenant's TenantConfig in the form normalization reads.
type policy struct {
	autoThread      bool
	requireMention  bool
	ignoreNoMention bool
	allowBots       string
	free            set
	noThread        set
	voiceLinked     set
	users           set
	roles           set
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

func orDefault(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

func newPolicy(tc TenantConfig) *policy {
	allow := tc.AllowBots
	if allow == "" {
		allow = AllowBotsNone
	}
	return &policy{
		autoThread:      orDefault(tc.AutoThread, true),
		requireMention:  orDefault(tc.RequireMention, true),
		ignoreNoMention: orDefault(tc.IgnoreNoMention, true),
		allowBots:       allow,
		free:            newSet(tc.FreeResponseChannels),
		noThread:        newSet(tc.NoThreadChannels),
		voiceLinked:     newSet(tc.VoiceLinkedTextChannels),
		users:           newSet(tc.AllowedUsers),
		roles:           newSet(tc.AllowedRoles),
	}
}

// admits reports whether the allowlists let author (with member's roles) in.
func (p *policy) admits(author *wireUser, member *wireMember) bool {
	if p.users == nil && p.roles == nil {
		return true
	}
	if author != nil && p.users.has(author.ID) {
		return true
	}
	if member != nil {
		for _, r := range member.Roles {
			if p.roles.has(r) {
				return true
			}
		}
	}
	return false
}
