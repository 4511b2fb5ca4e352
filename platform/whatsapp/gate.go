package whatsapp

import (
	"cmp"
	"fmt"
	"strings"
)

// This file owns who may start a turn: the native adapter's DM intake gate
// (whatsapp_common.py _should_process_message, _is_dm_intake_allowed) and
// the strict check it applies to interactive taps (_is_dm_allowed), with
// the knobs read as whatsapp_cloud.py __init__ reads them.

// DM policies, as the native dm_policy spells them.
const (
	policyAllowlist = "allowlist"
	policyPairing   = "pairing"
	policyOpen      = "open"
	policyDisabled  = "disabled"
)

// Drop reasons of the gate.
const (
	dropBroadcast      = "broadcast"
	dropNoSender       = "no_sender"
	dropNotAllowlisted = "dm_not_allowlisted"
	dropOpenNotOptedIn = "dm_open_not_opted_in"
	dropDMDisabled     = "dm_disabled"
	dropTapNotAllowed  = "tap_not_allowed"
)

// access is one tenant's DM gate.
type access struct {
	policy   string
	allowAll bool
	allow    map[string]bool // bare wa_ids, and "*"
}

// newAccess builds the gate of tenant settings over the top-level ones
// (over nil: the top-level ones alone). The error starts with the key.
func newAccess(top TenantConfig, over *TenantConfig) (*access, error) {
	tc := top
	if over != nil {
		if over.AllowAllUsers != nil {
			tc.AllowAllUsers = over.AllowAllUsers
		}
		if over.DMPolicy != "" {
			tc.DMPolicy = over.DMPolicy
		}
		if over.AllowFrom != nil || over.AllowedUsers != nil {
			tc.AllowFrom, tc.AllowedUsers = over.AllowFrom, over.AllowedUsers
		}
	}
	a := &access{allowAll: tc.AllowAllUsers != nil && bool(*tc.AllowAllUsers), allow: map[string]bool{}}
	// allow_from wins by presence, even empty; then the older name.
	entries := tc.AllowFrom
	if entries == nil {
		entries = tc.AllowedUsers
	}
	for _, e := range entries {
		a.allow[bareID(e)] = true
	}
	def := policyOpen
	if len(a.allow) > 0 && !a.allowAll {
		def = policyAllowlist
	}
	a.policy = cmp.Or(strings.ToLower(strings.TrimSpace(tc.DMPolicy)), def)
	switch a.policy {
	case policyAllowlist, policyPairing, policyOpen, policyDisabled:
	default:
		return nil, fmt.Errorf("dm_policy: %q: want allowlist, pairing, open or disabled (the native adapter would admit nobody)", tc.DMPolicy)
	}
	return a, nil
}

// bareID reduces an allowlist entry or sender to the bare wa_id the native
// adapter compares: the part before any "@", digits only; an entry with no
// digit ("*") is kept as written.
func bareID(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "@")
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			b.WriteByte(s[i])
		}
	}
	if b.Len() == 0 {
		return strings.TrimSpace(s)
	}
	return b.String()
}

// listed reports whether sender is on the allowlist.
func (a *access) listed(sender string) bool {
	return a.allow[bareID(sender)] || a.allow["*"]
}

// intake is the DM gate of a message from sender: "" admits it, else the
// drop reason.
func (a *access) intake(sender string) string {
	switch cid := strings.ToLower(strings.TrimSpace(sender)); {
	case cid == "status@broadcast" || strings.HasSuffix(cid, "@broadcast") || strings.HasSuffix(cid, "@newsletter"):
		return dropBroadcast
	case cid == "":
		return dropNoSender
	}
	switch a.policy {
	case policyAllowlist:
		if !a.listed(sender) {
			return dropNotAllowlisted
		}
	case policyPairing:
	case policyOpen:
		if !a.allowAll {
			return dropOpenNotOptedIn
		}
	default:
		return dropDMDisabled
	}
	return ""
}

// tapAllowed is the strict check of an interactive tap (00067189
// _dispatch_interactive_reply): pairing does not admit it.
func (a *access) tapAllowed(sender string) bool {
	switch {
	case sender == "":
		return false
	case a.policy == policyAllowlist:
		return a.listed(sender)
	}
	return a.policy == policyOpen && a.allowAll
}
