package discord

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"connector/internal/nativecfg"
)

// This file owns how a tenant's adapter knobs are read: the spellings the
// native Hermes Discord adapter accepts for the same settings (a YAML list or
// a comma-separated string, bare YAML numbers, "*" wildcards, channel names,
// pasted user mentions, the env-var spellings of booleans) become one
// normalized form. docs/settings-parity.md lists every knob and special
// value with the native behaviour and ours; TestSettingsParity checks each
// row.

// UnmarshalYAML reads a tenant's knobs as the native adapter reads its
// config.yaml and DISCORD_* values (nativecfg.ReadKnobs). Unknown keys are
// errors.
func (tc *TenantConfig) UnmarshalYAML(node *yaml.Node) error {
	return nativecfg.ReadKnobs(node, tc, "discord tenant", tenantKnobs)
}

// tenantKnobs reads each YAML key of TenantConfig (TestTenantKnobsCoverFields
// keeps it in step with the struct's yaml tags). Booleans count on as true
// except ignore_no_mention, whose env rule (DISCORD_IGNORE_NO_MENTION)
// counts only true, 1 and yes as true; list items are split and checked in
// validate.
var tenantKnobs = map[string]nativecfg.Knob[TenantConfig]{
	"auto_thread":                 nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.AutoThread }, true),
	"require_mention":             nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.RequireMention }, true),
	"thread_require_mention":      nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.ThreadRequireMention }, true),
	"ignore_no_mention":           nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.IgnoreNoMention }, false),
	"bots_require_inline_mention": nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.BotsRequireInlineMention }, true),
	"channel_context":             nativecfg.FlagKnob(func(tc *TenantConfig) **bool { return &tc.ChannelContext }, true),
	"free_response_channels":      nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.FreeResponseChannels }),
	"no_thread_channels":          nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.NoThreadChannels }),
	"allowed_channels":            nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.AllowedChannels }),
	"ignored_channels":            nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.IgnoredChannels }),
	"voice_linked_text_channels":  nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.VoiceLinkedTextChannels }),
	"allowed_users":               nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.AllowedUsers }),
	"allowed_roles":               nativecfg.ListKnob(func(tc *TenantConfig) *[]string { return &tc.AllowedRoles }),
	"allow_bots": func(tc *TenantConfig, n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("want none, all or mentions")
		}
		if n.Tag == "!!null" {
			tc.AllowBots = ""
			return nil
		}
		if nativecfg.IsYAML11Bool(n) {
			return fmt.Errorf("%q is a YAML boolean; want none, all or mentions (the native adapter would read it as all)", n.Value)
		}
		tc.AllowBots = n.Value
		return nil
	},
	"weight": func(tc *TenantConfig, n *yaml.Node) error { return n.Decode(&tc.Weight) },
}

// wildcard is the list entry that matches every channel (or user).
const wildcard = "*"

// checkChannelEntry validates one channel-list entry: a Discord id, "*", or
// a channel name ("general" or "#general"), matched as written.
func checkChannelEntry(e string) error {
	if strings.HasPrefix(e, "<") {
		return fmt.Errorf("%q is mention syntax; write the bare channel id", e)
	}
	return nil
}

// cleanUserEntry undoes what users paste into allowed_users, as the native
// adapter does: surrounding space, <@id> and <@!id> mention syntax, and a
// "user:" prefix (any case).
func cleanUserEntry(e string) string {
	e = strings.TrimSpace(e)
	if strings.HasPrefix(e, "<@") && strings.HasSuffix(e, ">") {
		e = strings.TrimRight(strings.TrimLeft(e, "<@!"), ">")
	}
	if len(e) >= 5 && strings.EqualFold(e[:5], "user:") {
		e = e[5:]
	}
	return strings.TrimSpace(e)
}

// checkUserEntry validates a cleaned allowed_users entry: a Discord id or
// "*". Usernames are refused: the native adapter resolves them to ids from
// member lists at connect, which a shared connector does not do.
func checkUserEntry(e string) error {
	if e == wildcard || isSnowflake(e) {
		return nil
	}
	return fmt.Errorf("%q is not a Discord user id (usernames are not resolved; use the numeric id)", e)
}

// canonicalRole parses an allowed_roles entry as the native adapter does
// (digits, compared as a number, so "0123" is role 123).
func canonicalRole(e string) (string, error) {
	n, err := strconv.ParseUint(e, 10, 64)
	if err != nil || e == "" || e[0] == '+' {
		return "", fmt.Errorf("%q is not a Discord role id (the native adapter ignores such entries)", e)
	}
	return strconv.FormatUint(n, 10), nil
}

// normalizeAllowBots folds an allow_bots value as the native adapter does
// (case and surrounding space ignored; empty means none).
func normalizeAllowBots(s string) string {
	return cmp.Or(strings.ToLower(strings.TrimSpace(s)), AllowBotsNone)
}
