// Package descriptor defines the CapabilityDescriptor the connector answers
// each gateway hello with, and the descriptor of every platform it fronts.
//
// The gateway configures its adapter from the descriptor: message length and
// its unit, edit/thread/draft support, markdown dialect, and which ops it may
// use (supported_ops). A missing required key kills the gateway's reader, so
// the nine required fields are always marshaled. supported_ops is passed in by
// each platform from its egress handler table, so it can never advertise an op
// the code does not implement.
package descriptor

import (
	"slices"
	"strings"
)

// Descriptor is the CapabilityDescriptor (contract §2, hermes-wire.md §6.1).
type Descriptor struct {
	ContractVersion        int    `json:"contract_version"`
	Platform               string `json:"platform"`
	Label                  string `json:"label"`
	MaxMessageLength       int    `json:"max_message_length"`
	SupportsDraftStreaming bool   `json:"supports_draft_streaming"`
	SupportsEdit           bool   `json:"supports_edit"`
	SupportsThreads        bool   `json:"supports_threads"`
	MarkdownDialect        string `json:"markdown_dialect"`
	LenUnit                string `json:"len_unit"`

	Emoji           string   `json:"emoji,omitempty"`
	PlatformHint    string   `json:"platform_hint,omitempty"`
	SupportsContext bool     `json:"supports_context,omitempty"`
	SupportedOps    []string `json:"supported_ops"`
}

// ContractVersion is the contract_version every descriptor carries.
const ContractVersion = 1

// Length units.
const (
	LenChars = "chars" // Unicode code points (Python len)
	LenUTF16 = "utf16" // UTF-16 code units
)

// Markdown dialects.
const (
	MarkdownPlain      = "plain"
	MarkdownDiscord    = "discord"
	MarkdownTelegramV2 = "markdown_v2"
	// MarkdownStandard is CommonMark-style markdown the platform converts
	// itself (Slack: to mrkdwn; WhatsApp: to *bold*, _italic_, ~strike~;
	// each as its native adapter's format_message).
	MarkdownStandard = "markdown"
)

// DefaultMaxMessageLength is the max_message_length the gateway applies
// when the field is missing.
const DefaultMaxMessageLength = 4096

// HasOp reports whether op is advertised.
func (d *Descriptor) HasOp(op string) bool { return slices.Contains(d.SupportedOps, op) }

// sortedOps returns a sorted copy so descriptors are byte-stable.
func sortedOps(ops []string) []string {
	out := append([]string{}, ops...) // never nil: the wire wants an array
	slices.Sort(out)
	return slices.Compact(out)
}

// fromOps completes d from the ops its platform implements: the contract
// version, edit, draft and thread support, and supported_ops.
func fromOps(ops []string, d Descriptor) Descriptor {
	d.ContractVersion = ContractVersion
	d.SupportsEdit = slices.Contains(ops, "edit")
	d.SupportsDraftStreaming = slices.Contains(ops, "draft")
	d.SupportsThreads = slices.Contains(ops, "thread_create")
	d.SupportedOps = sortedOps(ops)
	return d
}

// Discord is the descriptor of the shared Discord bot: 2,000 code points per
// message, Discord markdown, edits and threads.
func Discord(ops []string) Descriptor {
	return fromOps(ops, Descriptor{
		Platform:         "discord",
		Label:            "Discord",
		MaxMessageLength: 2000,
		MarkdownDialect:  MarkdownDiscord,
		LenUnit:          LenChars,
		Emoji:            "\U0001f3ae",
		PlatformHint:     "You are chatting on Discord through a shared bot. Discord markdown is supported; messages over 2000 characters are split.",
		// Guild messages the mention gates held back ride the channel's next
		// delivered message as context (platform/discord channelctx.go:
		// Model B, from Gateway events already received, no REST calls).
		SupportsContext: true,
	})
}

// Telegram is the descriptor of the shared Telegram bot. Telegram counts its
// 4,096 limit in code points after entity parsing (TDLib); the descriptor says
// utf16, as the native adapter does, which is a safe upper bound for the
// gateway's chunking, and the connector's egress splits by code points.
func Telegram(ops []string) Descriptor {
	return fromOps(ops, Descriptor{
		Platform:         "telegram",
		Label:            "Telegram",
		MaxMessageLength: 4096,
		MarkdownDialect:  MarkdownTelegramV2,
		LenUnit:          LenUTF16,
		Emoji:            "\u2708\ufe0f",
		PlatformHint:     "You are chatting on Telegram through a shared bot.",
		// Observe mode's held-back group messages ride the next delivered
		// message of their chat topic as context (platform/telegram
		// observe.go: Model B, a passive buffer, no extra API calls).
		SupportsContext: true,
	})
}

// Slack is the descriptor of the shared Slack app: 39,000 code points per
// message (the native adapter's MAX_MESSAGE_LENGTH under Slack's 40,000),
// standard markdown that the connector converts to mrkdwn as the native
// adapter does, edits, and threads (a thread is a reply to a message).
func Slack(ops []string) Descriptor {
	return fromOps(ops, Descriptor{
		Platform:         "slack",
		Label:            "Slack",
		MaxMessageLength: 39000,
		SupportsContext:  true,
		MarkdownDialect:  MarkdownStandard,
		LenUnit:          LenChars,
		Emoji:            "\U0001f4bc",
		PlatformHint:     "You are chatting on Slack through a shared app. Markdown is converted to Slack mrkdwn.",
	})
}

// WhatsApp is the descriptor of the WhatsApp Cloud API platform
// (whatsapp_cloud): 4,096 code points per message as the native adapter
// splits them, standard markdown converted to WhatsApp's syntax on send, no
// edits, no threads, no drafts (the Cloud API has none of them).
func WhatsApp(ops []string) Descriptor {
	return fromOps(ops, Descriptor{
		Platform:         "whatsapp_cloud",
		Label:            "WhatsApp",
		MaxMessageLength: 4096,
		MarkdownDialect:  MarkdownStandard,
		LenUnit:          LenChars,
		Emoji:            "\U0001f4ac",
		PlatformHint:     "You are chatting on WhatsApp through a shared business number. WhatsApp has no threads and no message edits; replies quote the user's message.",
	})
}

// Nexscope is the descriptor of the connector's own nexscope relay rooms:
// plain text up to maxText bytes' worth of code points, no edits, no thread API.
func Nexscope(ops []string, maxText int) Descriptor {
	return fromOps(ops, Descriptor{
		Platform:         "nexscope",
		Label:            "nexscope",
		MaxMessageLength: maxText,
		MarkdownDialect:  MarkdownPlain,
		LenUnit:          LenChars,
		Emoji:            "\U0001f9ed",
		PlatformHint:     "You are in a nexscope room: a plain-text chat relay between coding agents and their users.",
	})
}

// Merge builds the descriptor answered to a hello for platform "relay": the
// capabilities every one of ds supports (smallest message length, features
// all share, ops all advertise), so whatever platform a chat turns out to be
// on, the gateway never exceeds it.
func Merge(platform string, ds ...Descriptor) Descriptor {
	m := Descriptor{
		ContractVersion:  ContractVersion,
		Platform:         platform,
		MarkdownDialect:  MarkdownPlain,
		LenUnit:          LenChars,
		MaxMessageLength: DefaultMaxMessageLength,
		SupportedOps:     []string{},
	}
	if len(ds) == 0 {
		m.Label = "Relay (no platforms)"
		return m
	}
	labels := make([]string, 0, len(ds))
	m.MaxMessageLength = ds[0].MaxMessageLength
	m.SupportsEdit, m.SupportsThreads, m.SupportsDraftStreaming, m.SupportsContext = true, true, true, true
	m.MarkdownDialect = ds[0].MarkdownDialect
	m.SupportedOps = slices.Clone(ds[0].SupportedOps)
	for _, d := range ds {
		labels = append(labels, d.Label)
		m.MaxMessageLength = min(m.MaxMessageLength, d.MaxMessageLength)
		m.SupportsEdit = m.SupportsEdit && d.SupportsEdit
		m.SupportsThreads = m.SupportsThreads && d.SupportsThreads
		m.SupportsDraftStreaming = m.SupportsDraftStreaming && d.SupportsDraftStreaming
		m.SupportsContext = m.SupportsContext && d.SupportsContext
		if d.MarkdownDialect != m.MarkdownDialect {
			m.MarkdownDialect = MarkdownPlain
		}
		if d.LenUnit == LenUTF16 {
			m.LenUnit = LenUTF16
		}
		m.SupportedOps = slices.DeleteFunc(m.SupportedOps, func(op string) bool { return !d.HasOp(op) })
	}
	m.Label = "Relay (" + strings.Join(labels, ", ") + ")"
	m.SupportedOps = sortedOps(m.SupportedOps)
	return m
}
