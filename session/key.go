package session

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
)

// Options are the gateway knobs that change a session key. They must match
// the gateway the tenant runs (config.yaml group_sessions_per_user,
// thread_sessions_per_user, and the profile under multiplex_profiles), or the
// connector's keys (used for interrupt routing and the capability vault) will
// differ from the gateway's.
type Options struct {
	// GroupSessionsPerUser isolates each user outside threads. The gateway's
	// default is true; use DefaultOptions for the gateway defaults.
	GroupSessionsPerUser bool
	// ThreadSessionsPerUser isolates each user inside threads and topics.
	ThreadSessionsPerUser bool
	// Profile is the namespace slot; "" and "default" mean agent:main.
	Profile string
	// NexscopeKeyPlatform is the platform slot of the keys of nexscope
	// sources. The stock gateway knows no platform "nexscope": it reads such
	// a source's platform as "relay" (hermes-wire.md §6.2) and keys it so,
	// which "" means too. A gateway with a nexscope platform plugin keys it
	// as "nexscope".
	NexscopeKeyPlatform string
}

// PlatformNexscope is the wire platform of nexscope rooms, and PlatformRelay
// the platform the stock gateway reads it as.
const (
	PlatformNexscope = "nexscope"
	PlatformRelay    = "relay"
)

// keyPlatform is the platform slot of the key of a source from platform p.
func (o *Options) keyPlatform(p string) string {
	if p != PlatformNexscope {
		return p
	}
	return cmp.Or(o.NexscopeKeyPlatform, PlatformRelay)
}

// DefaultOptions are the gateway's defaults: per-user group sessions, shared
// threads, no profile.
var DefaultOptions = Options{GroupSessionsPerUser: true}

// Key returns the session key build_session_key() computes for src as the
// gateway reads it: a nexscope source is keyed under
// opts.NexscopeKeyPlatform ("relay" unless set).
//
// One deliberate difference: for a WhatsApp identifier containing characters
// outside [A-Za-z0-9@.+-] the Python function raises; Key uses the normalized
// identifier instead. WhatsApp alias files are not consulted (the connector
// has none).
func Key(src *Source, opts Options) string {
	var b strings.Builder
	b.Grow(len("agent:main:") + len(opts.Profile) + len(opts.keyPlatform(src.Platform)) + len(src.ChatType) +
		len(src.ScopeID) + len(src.ChatID) + len(src.ThreadID.Value) + len(src.ProspectiveThreadID) +
		len(src.UserID.Value) + len(src.UserIDAlt) + 8)
	isDM := src.ChatType == ChatTypeDM
	whatsapp := src.Platform == "whatsapp"

	chatID := src.ChatID
	if whatsapp && isDM {
		chatID = normalizeWhatsApp(chatID)
	}

	thread := ""
	threadFromProspective := false
	if src.ThreadID.Truthy() {
		thread = src.ThreadID.Value
	} else if !isDM && src.ProspectiveThreadID != "" {
		thread = src.ProspectiveThreadID
		threadFromProspective = true
	}

	participant := cmp.Or(src.UserIDAlt, src.UserID.Value)
	if whatsapp && participant != "" {
		participant = cmp.Or(normalizeWhatsApp(participant), participant)
	}

	var addUser bool
	if isDM {
		addUser = chatID == ""
	} else {
		addUser = opts.GroupSessionsPerUser && (thread == "" || opts.ThreadSessionsPerUser)
	}

	b.WriteString("agent:")
	switch opts.Profile {
	case "", "default":
		b.WriteString("main")
	case "main":
		b.WriteString("main~")
	default:
		b.WriteString(opts.Profile)
	}
	b.WriteByte(':')
	b.WriteString(opts.keyPlatform(src.Platform))
	b.WriteByte(':')
	if threadFromProspective {
		b.WriteString(ChatTypeThread)
	} else {
		b.WriteString(src.ChatType)
	}
	part := func(s string) {
		if s != "" {
			b.WriteByte(':')
			b.WriteString(s)
		}
	}
	if src.Platform == "slack" {
		part(src.ScopeID)
	}
	part(chatID)
	if isDM && addUser {
		part(participant) // a DM's user comes before its thread
	}
	part(thread)
	if !isDM && addUser {
		part(participant)
	}
	return b.String()
}

// normalizeWhatsApp strips JID syntax down to the bare identifier: trim
// spaces, drop the first "+", cut at the first ":" and then the first "@".
func normalizeWhatsApp(s string) string {
	s = strings.TrimSpace(s)
	s = strings.Replace(s, "+", "", 1)
	s, _, _ = strings.Cut(s, ":")
	s, _, _ = strings.Cut(s, "@")
	return s
}

// UnmarshalJSON reads the gateway's knob names (group_sessions_per_user,
// thread_sessions_per_user, profile); a missing knob keeps the gateway
// default, so {} decodes to DefaultOptions.
func (o *Options) UnmarshalJSON(data []byte) error {
	var w struct {
		Group   *bool   `json:"group_sessions_per_user"`
		Thread  *bool   `json:"thread_sessions_per_user"`
		Profile *string `json:"profile"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return fmt.Errorf("session options: %w", err)
	}
	*o = DefaultOptions
	if w.Group != nil {
		o.GroupSessionsPerUser = *w.Group
	}
	if w.Thread != nil {
		o.ThreadSessionsPerUser = *w.Thread
	}
	if w.Profile != nil {
		o.Profile = *w.Profile
	}
	return nil
}
