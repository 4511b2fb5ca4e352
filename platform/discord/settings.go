package discord

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file owns how a tenant's adapter knobs are read: the spellings the
// native Hermes Discord adapter accepts for the same settings (a YAML list or
// a comma-separated string, bare YAML numbers, "*" wildcards, channel names,
// pasted user mentions, the env-var spellings of booleans) become one
// normalized form. docs/settings-parity.md lists every knob and special
// value with the native behaviour and ours; TestSettingsParity checks each
// row.

// UnmarshalYAML reads a tenant's knobs as the native adapter reads its
// config.yaml and DISCORD_* values. Unknown keys are errors.
func (tc *TenantConfig) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
		return nil
	}
	if node.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: discord tenant settings: want a mapping", node.Line)
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, value := node.Content[i], node.Content[i+1]
		read, ok := tenantKnobs[key.Value]
		if !ok {
			// The wording of yaml's own unknown-field error, so the config
			// loader reports it like every other unknown key.
			return fmt.Errorf("line %d: field %s not found in type discord.TenantConfig", key.Line, key.Value)
		}
		if err := read(tc, value); err != nil {
			return fmt.Errorf("line %d: discord tenant setting %s: %w", value.Line, key.Value, err)
		}
	}
	return nil
}

// tenantKnobs reads each YAML key of TenantConfig (TestTenantKnobsCoverFields
// keeps it in step with the struct's yaml tags).
var tenantKnobs = map[string]func(*TenantConfig, *yaml.Node) error{
	"auto_thread":                 flagKnob(func(tc *TenantConfig) **bool { return &tc.AutoThread }, true),
	"require_mention":             flagKnob(func(tc *TenantConfig) **bool { return &tc.RequireMention }, true),
	"thread_require_mention":      flagKnob(func(tc *TenantConfig) **bool { return &tc.ThreadRequireMention }, true),
	"ignore_no_mention":           flagKnob(func(tc *TenantConfig) **bool { return &tc.IgnoreNoMention }, false),
	"bots_require_inline_mention": flagKnob(func(tc *TenantConfig) **bool { return &tc.BotsRequireInlineMention }, true),
	"free_response_channels":      listKnob(func(tc *TenantConfig) *[]string { return &tc.FreeResponseChannels }),
	"no_thread_channels":          listKnob(func(tc *TenantConfig) *[]string { return &tc.NoThreadChannels }),
	"allowed_channels":            listKnob(func(tc *TenantConfig) *[]string { return &tc.AllowedChannels }),
	"ignored_channels":            listKnob(func(tc *TenantConfig) *[]string { return &tc.IgnoredChannels }),
	"voice_linked_text_channels":  listKnob(func(tc *TenantConfig) *[]string { return &tc.VoiceLinkedTextChannels }),
	"allowed_users":               listKnob(func(tc *TenantConfig) *[]string { return &tc.AllowedUsers }),
	"allowed_roles":               listKnob(func(tc *TenantConfig) *[]string { return &tc.AllowedRoles }),
	"allow_bots": func(tc *TenantConfig, n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("want none, all or mentions")
		}
		if n.Tag == "!!null" {
			tc.AllowBots = ""
			return nil
		}
		if yaml11Bool(n) {
			return fmt.Errorf("%q is a YAML boolean; want none, all or mentions (the native adapter would read it as all)", n.Value)
		}
		tc.AllowBots = n.Value
		return nil
	},
	"weight": func(tc *TenantConfig, n *yaml.Node) error { return n.Decode(&tc.Weight) },
}

// flagKnob reads a boolean knob. A YAML boolean (including YAML 1.1's
// plain yes/no/on/off, as the native adapter's YAML loader reads them) is
// that value; any other scalar is the knob's env-var spelling, trimmed and
// case-folded: true/false, 1/0, yes/no, on/off. onIsTrue is false for
// ignore_no_mention, whose env rule (DISCORD_IGNORE_NO_MENTION) counts only
// true, 1 and yes as true.
func flagKnob(field func(*TenantConfig) **bool, onIsTrue bool) func(*TenantConfig, *yaml.Node) error {
	return func(tc *TenantConfig, n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("want a boolean")
		}
		if n.Tag == "!!null" {
			*field(tc) = nil
			return nil
		}
		var v bool
		if yaml11Bool(n) {
			v = yaml11True[n.Value]
		} else {
			var err error
			if v, err = parseFlag(n.Value, onIsTrue); err != nil {
				return err
			}
		}
		*field(tc) = &v
		return nil
	}
}

// parseFlag reads an env-var spelling of a boolean knob.
func parseFlag(s string, onIsTrue bool) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes":
		return true, nil
	case "on":
		return onIsTrue, nil
	case "false", "0", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (want true/false, 1/0, yes/no or on/off)", s)
}

// yaml11True holds the plain scalars YAML 1.1 (the native adapter's
// loader) reads as true; yaml11False those it reads as false.
var (
	yaml11True  = map[string]bool{"true": true, "True": true, "TRUE": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true}
	yaml11False = map[string]bool{"false": true, "False": true, "FALSE": true, "no": true, "No": true, "NO": true, "off": true, "Off": true, "OFF": true}
)

// yaml11Bool reports whether n is a plain (unquoted) scalar YAML 1.1 reads
// as a boolean.
func yaml11Bool(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Style&(yaml.TaggedStyle|yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 &&
		(yaml11True[n.Value] || yaml11False[n.Value])
}

// listKnob reads a list knob: a YAML sequence or a single scalar (a bare
// number, or a comma-separated string as in the DISCORD_* variables). Items
// are kept as written; normalizeList splits and trims them.
func listKnob(field func(*TenantConfig) *[]string) func(*TenantConfig, *yaml.Node) error {
	return func(tc *TenantConfig, n *yaml.Node) error {
		switch {
		case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
			*field(tc) = nil
		case n.Kind == yaml.ScalarNode:
			*field(tc) = []string{n.Value}
		case n.Kind == yaml.SequenceNode:
			items := make([]string, 0, len(n.Content))
			for _, item := range n.Content {
				if item.Kind != yaml.ScalarNode {
					return fmt.Errorf("line %d: want a list of ids or names", item.Line)
				}
				if item.Tag != "!!null" {
					items = append(items, item.Value)
				}
			}
			*field(tc) = items
		default:
			return fmt.Errorf("want a list or a comma-separated string")
		}
		return nil
	}
}

// normalizeList splits every entry on commas (the native adapter joins a
// YAML list with commas into its DISCORD_* variable and splits it again),
// trims the parts and drops empty ones.
func normalizeList(entries []string) []string {
	var out []string
	for _, e := range entries {
		for part := range strings.SplitSeq(e, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
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
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return AllowBotsNone
	}
	return s
}
