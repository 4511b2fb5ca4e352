package discord

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"time"

	"connector/internal/nativecfg"
	"connector/internal/nonneg"
	"connector/platform/fairshare"
)

// Config configures the shared Discord bot. The zero value plus the three
// credentials (BotToken, PublicKey, ApplicationID) works; every other field
// names its default.
type Config struct {
	// BotToken is the bot's token, without the "Bot " prefix. Required. It
	// never appears in logs, errors, metrics or frames. It keys the digests
	// on prompt buttons: after a rotation, a press of a button posted
	// before is dropped (prompt_not_owned).
	BotToken string `yaml:"bot_token"`
	// PublicKey is the application's Ed25519 public key from the developer
	// portal, hex encoded (64 hex digits). Required: it verifies
	// POST /discord/interactions.
	PublicKey string `yaml:"public_key"`
	// ApplicationID is the application (client) id, used for interaction
	// follow-ups and the command registries. Required.
	ApplicationID string `yaml:"application_id"`

	// Guilds maps a guild id to the tenant that owns it: every message and
	// interaction in the guild reaches that tenant, and only it may act
	// there, whoever posts and whatever another tenant claimed (the
	// ownership order, docs/security.md). In a guild no tenant owns only
	// scope claims and linked users' tenants take messages; the others are
	// dropped, never broadcast. Set under the discord section (e.g. guilds:
	// {"1310000000000000500": acme}). Default: none.
	Guilds map[string]string `yaml:"guilds"`
	// DMTenant receives every direct message and DM interaction of a user
	// not linked to a tenant, and acts only in such users' DM channels
	// (not in the DM of a user linked to another tenant); its
	// command_manifest is the only one registered as global (DM-only)
	// commands. Empty (the default) drops such DMs with a log line.
	DMTenant string `yaml:"dm_tenant"`
	// Tenants holds per-tenant adapter knobs and fair-share weights. Values
	// take the native adapter's spellings: a list may also be a bare number
	// or a comma-separated string, a boolean also true/false, 1/0, yes/no or
	// on/off (docs/settings-parity.md). Default: none; a tenant without an
	// entry gets the native adapter's defaults and weight 1.
	Tenants map[string]TenantConfig `yaml:"tenants"`

	// APIBaseURL replaces https://discord.com for every REST call (tests and
	// proxies). Default: empty, the real Discord.
	APIBaseURL string `yaml:"api_base_url"`
	// GatewayURL, when set, is answered to discordgo's GET /gateway instead
	// of asking Discord. Default: empty, ask Discord.
	GatewayURL string `yaml:"gateway_url"`

	// GlobalPerSecond is the bot-wide REST budget in requests per second,
	// shared between tenants by weighted fair share (each tenant's Weight).
	// Default 45 (Discord allows 50; GlobalPerSecond+GlobalBurst never
	// exceeds 50 in any second by default). It is each instance's own:
	// with several, Discord counts their sum against the bot, so divide
	// it (and GlobalBurst) by the number of instances.
	GlobalPerSecond float64 `yaml:"global_per_second"`
	// GlobalBurst is how many requests may go at once after a quiet period.
	// Default 5.
	GlobalBurst int `yaml:"global_burst"`
	// InvalidRequestLimit opens the bot-wide REST breaker (every call
	// answered unavailable) when this many 401, 403 and 429 answers (429s of
	// scope "shared" excluded) arrived within 10 minutes; Discord bans an IP
	// at 10,000, so it must stay below that. Default 8,000.
	InvalidRequestLimit int `yaml:"invalid_request_limit"`
	// TenantInvalidRequestLimit is one tenant's share of InvalidRequestLimit:
	// a tenant whose calls drew this many 401, 403 and 429 answers within 10
	// minutes has its further calls refused with rate_limited (and
	// retry_after_ms) until older answers leave the window, while other
	// tenants go on. At most InvalidRequestLimit. Default
	// InvalidRequestLimit/8 (1,000): eight tenants must spend their whole
	// share at once before the bot-wide breaker opens.
	TenantInvalidRequestLimit int `yaml:"tenant_invalid_request_limit"`
	// RequestTimeout bounds one egress op or REST call whose context has no
	// deadline, including 429 retries. Default 30s (the gateway's own wait).
	RequestTimeout time.Duration `yaml:"request_timeout"`

	// MaxInteractionBytes caps the interactions webhook body; larger bodies
	// get 413. Default 256 KiB.
	MaxInteractionBytes int64 `yaml:"max_interaction_bytes"`
	// InteractionSkew is the largest accepted difference between
	// X-Signature-Timestamp and the clock; older or newer requests get 401.
	// Default 5m.
	InteractionSkew time.Duration `yaml:"interaction_skew"`

	// HandshakeTimeout bounds the Gateway dial plus HELLO and READY (discordgo
	// sets no deadline of its own). Default 30s.
	HandshakeTimeout time.Duration `yaml:"handshake_timeout"`
	// ReconnectMin is the first Gateway reconnect delay; it doubles per
	// failed attempt (jittered over [d/2, d]). Default 1s.
	ReconnectMin time.Duration `yaml:"reconnect_min"`
	// ReconnectMax caps the reconnect delay. Default 10m.
	ReconnectMax time.Duration `yaml:"reconnect_max"`
	// StableAfter is how long a connection must stay up before the delay
	// resets to ReconnectMin, so a crash loop keeps backing off. Default 60s.
	StableAfter time.Duration `yaml:"stable_after"`
	// MaxIdentifiesPerDay bounds Gateway sessions started per rolling 24
	// hours (Discord allows 1,000), counted by this process and, before each
	// new session, by Discord (GET /gateway/bot, which also counts what
	// restarted processes spent); when spent, reconnects wait. Default 900.
	MaxIdentifiesPerDay int `yaml:"max_identifies_per_day"`

	// CommandSyncDebounce is the quiet period after the last discord hello
	// carrying a command_manifest before the commands are reconciled: each
	// tenant's on its own guilds, DMTenant's also globally for DMs (see
	// docs/contract.md). Default 5s.
	CommandSyncDebounce time.Duration `yaml:"command_sync_debounce"`
}

// TenantConfig holds the native adapter's knobs that change which of a
// tenant's messages become turns and how they map to sessions
// (docs/session-key.md §3), and its fair-share weight. Values are read as
// the native Hermes Discord adapter reads its config.yaml and DISCORD_*
// variables (docs/settings-parity.md): lists may be YAML lists, bare
// numbers (read as YAML 1.1 does: 0700 is octal 448) or comma-separated
// strings; booleans may be YAML booleans or the variables' spellings
// (true/false, 1/0, yes/no, on/off).
type TenantConfig struct {
	// AutoThread starts a thread from a mention in a text or announcement
	// channel and keys the turn on it (discord.auto_thread,
	// DISCORD_AUTO_THREAD). Default true.
	AutoThread *bool `yaml:"auto_thread"`
	// RequireMention drops guild-channel messages that do not mention the
	// bot, except in free-response channels, voice-linked text channels and
	// threads the bot takes part in (discord.require_mention,
	// DISCORD_REQUIRE_MENTION). Default true.
	RequireMention *bool `yaml:"require_mention"`
	// ThreadRequireMention keeps requiring the mention in threads the bot
	// already takes part in, for threads several bots share
	// (discord.thread_require_mention, DISCORD_THREAD_REQUIRE_MENTION).
	// Default false.
	ThreadRequireMention *bool `yaml:"thread_require_mention"`
	// IgnoreNoMention drops guild messages that mention other users but not
	// the bot, except in free-response channels (DISCORD_IGNORE_NO_MENTION;
	// as there, the string "on" means false). Default true. A message that
	// mentions other bots but not this one is always dropped.
	IgnoreNoMention *bool `yaml:"ignore_no_mention"`
	// BotsRequireInlineMention admits a bot author (see AllowBots) only when
	// its text holds a literal <@bot> mention, not a reply ping
	// (discord.bots_require_inline_mention). Default false.
	BotsRequireInlineMention *bool `yaml:"bots_require_inline_mention"`
	// ChannelContext keeps the guild messages require_mention and
	// ignore_no_mention hold back and sends them as the reference-only
	// context of the channel's next message delivered to the tenant
	// (supports_context; docs/contract.md, "Channel context"); off, they
	// are dropped as the native adapter drops them. Not a native setting.
	// Default true.
	ChannelContext *bool `yaml:"channel_context"`
	// FreeResponseChannels need no mention and are never auto-threaded
	// (discord.free_response_channels, DISCORD_FREE_RESPONSE_CHANNELS).
	// Entries are channel ids, channel names ("general" or "#general",
	// exact case) or "*" for every channel; a thread matches by its own id
	// or name or its parent's. Default none.
	FreeResponseChannels []string `yaml:"free_response_channels"`
	// NoThreadChannels still need a mention but are never auto-threaded
	// (discord.no_thread_channels, DISCORD_NO_THREAD_CHANNELS): ids or
	// names; "*" is not a wildcard here, as in the native adapter. Default
	// none.
	NoThreadChannels []string `yaml:"no_thread_channels"`
	// AllowedChannels, when set, drops guild messages outside these
	// channels (discord.allowed_channels, DISCORD_ALLOWED_CHANNELS): ids,
	// names or "*", a thread matching by its parent too. Default none (every
	// channel).
	AllowedChannels []string `yaml:"allowed_channels"`
	// IgnoredChannels drops guild messages in these channels even when they
	// mention the bot, and wins over AllowedChannels
	// (discord.ignored_channels, DISCORD_IGNORED_CHANNELS): ids, names or
	// "*". Default none.
	IgnoredChannels []string `yaml:"ignored_channels"`
	// VoiceLinkedTextChannels are voice channels' text chats treated as
	// voice-linked: free-response and never auto-threaded (channel ids; the
	// native adapter sets this at runtime with /voice join). Default none.
	VoiceLinkedTextChannels []string `yaml:"voice_linked_text_channels"`
	// AllowBots admits bot and webhook authors: "none" (default), "all", or
	// "mentions" (only when they mention the bot); case and surrounding
	// space are ignored (discord.allow_bots, DISCORD_ALLOW_BOTS). Admitted
	// bots skip AllowedUsers and AllowedRoles.
	AllowBots string `yaml:"allow_bots"`
	// AllowedUsers, when it or AllowedRoles is set, admits only these users
	// (or members holding an AllowedRoles role); "*" admits everyone
	// (discord.allowed_users, DISCORD_ALLOWED_USERS). Entries are user ids;
	// pasted <@id>, <@!id> and user:id forms are accepted, usernames are
	// not. Default: none, everyone is admitted (unlike the native adapter,
	// which fails closed; the tenant's gateway applies its own allowlist).
	AllowedUsers []string `yaml:"allowed_users"`
	// AllowedRoles admits members holding one of these role ids
	// (DISCORD_ALLOWED_ROLES); see AllowedUsers. Default: none.
	AllowedRoles []string `yaml:"allowed_roles"`
	// Weight is the tenant's share of the bot's global budget relative to
	// other tenants, and of the channels whose held-back messages an
	// instance keeps as channel context (docs/security.md); a tenant's
	// largest weight on any platform is also its share of an instance's
	// session-owner writes (relay, docs/security.md). Default 1; at most
	// 1,000,000.
	Weight int `yaml:"weight"`
}

// AllowBots values.
const (
	AllowBotsNone     = "none"
	AllowBotsAll      = "all"
	AllowBotsMentions = "mentions"
)

// Defaults applied by New.
const (
	DefaultGlobalPerSecond     = 45
	DefaultGlobalBurst         = 5
	DefaultInvalidRequestLimit = 8000
	DefaultRequestTimeout      = 30 * time.Second
	DefaultMaxInteractionBytes = 256 << 10
	DefaultInteractionSkew     = 5 * time.Minute
	DefaultHandshakeTimeout    = 30 * time.Second
	DefaultReconnectMin        = time.Second
	DefaultReconnectMax        = 10 * time.Minute
	DefaultStableAfter         = time.Minute
	DefaultMaxIdentifiesPerDay = 900
	DefaultCommandSyncDebounce = 5 * time.Second
)

// WithDefaults returns cfg with every zero or negative knob set to its
// default: the configuration New runs with.
func (cfg Config) WithDefaults() Config {
	cfg.GlobalPerSecond = cmp.Or(max(cfg.GlobalPerSecond, 0), DefaultGlobalPerSecond)
	cfg.GlobalBurst = cmp.Or(max(cfg.GlobalBurst, 0), DefaultGlobalBurst)
	cfg.InvalidRequestLimit = cmp.Or(max(cfg.InvalidRequestLimit, 0), DefaultInvalidRequestLimit)
	cfg.TenantInvalidRequestLimit = cmp.Or(max(cfg.TenantInvalidRequestLimit, 0), max(1, cfg.InvalidRequestLimit/tenantShareDivisor))
	cfg.RequestTimeout = cmp.Or(max(cfg.RequestTimeout, 0), DefaultRequestTimeout)
	cfg.MaxInteractionBytes = cmp.Or(max(cfg.MaxInteractionBytes, 0), DefaultMaxInteractionBytes)
	cfg.InteractionSkew = cmp.Or(max(cfg.InteractionSkew, 0), DefaultInteractionSkew)
	cfg.HandshakeTimeout = cmp.Or(max(cfg.HandshakeTimeout, 0), DefaultHandshakeTimeout)
	cfg.ReconnectMin = cmp.Or(max(cfg.ReconnectMin, 0), DefaultReconnectMin)
	cfg.ReconnectMax = cmp.Or(max(cfg.ReconnectMax, 0), DefaultReconnectMax)
	cfg.StableAfter = cmp.Or(max(cfg.StableAfter, 0), DefaultStableAfter)
	cfg.MaxIdentifiesPerDay = cmp.Or(max(cfg.MaxIdentifiesPerDay, 0), DefaultMaxIdentifiesPerDay)
	cfg.CommandSyncDebounce = cmp.Or(max(cfg.CommandSyncDebounce, 0), DefaultCommandSyncDebounce)
	return cfg
}

// Validate reports the first invalid field, naming its YAML key. Secrets are
// never echoed.
func (cfg *Config) Validate() error {
	if cfg.BotToken == "" {
		return fmt.Errorf("discord.bot_token: required")
	}
	if _, err := decodePublicKey(cfg.PublicKey); err != nil {
		return fmt.Errorf("discord.public_key: %w", err)
	}
	if !isSnowflake(cfg.ApplicationID) {
		return fmt.Errorf("discord.application_id: want a Discord id (digits), got %q", cfg.ApplicationID)
	}
	for _, g := range slices.Sorted(maps.Keys(cfg.Guilds)) {
		if !isSnowflake(g) {
			return fmt.Errorf("discord.guilds[%q]: not a Discord guild id", g)
		}
		if cfg.Guilds[g] == "" {
			return fmt.Errorf("discord.guilds[%q]: empty tenant", g)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Tenants)) {
		if err := cfg.Tenants[name].validate(); err != nil {
			return fmt.Errorf("discord.tenants[%q].%w", name, err)
		}
	}
	for key, raw := range map[string]string{"api_base_url": cfg.APIBaseURL, "gateway_url": cfg.GatewayURL} {
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return fmt.Errorf("discord.%s: want an absolute URL, got %q", key, raw)
		}
	}
	if err := nonneg.Check("discord.", cfg); err != nil {
		return err
	}
	if cfg.GlobalPerSecond > 50 {
		return fmt.Errorf("discord.global_per_second: %v exceeds Discord's 50 requests/s", cfg.GlobalPerSecond)
	}
	if cfg.InvalidRequestLimit >= discordInvalidBan {
		return fmt.Errorf("discord.invalid_request_limit: %d reaches Discord's ban threshold of %d invalid requests per 10 minutes", cfg.InvalidRequestLimit, discordInvalidBan)
	}
	if botLimit := cfg.WithDefaults().InvalidRequestLimit; cfg.TenantInvalidRequestLimit > botLimit {
		return fmt.Errorf("discord.tenant_invalid_request_limit: %d exceeds invalid_request_limit %d", cfg.TenantInvalidRequestLimit, botLimit)
	}
	return nil
}

// validate checks a tenant's knobs in their normalized form; the error
// starts with the YAML key.
func (tc TenantConfig) validate() error {
	switch normalizeAllowBots(tc.AllowBots) {
	case AllowBotsNone, AllowBotsAll, AllowBotsMentions:
	default:
		return fmt.Errorf("allow_bots: want none, all or mentions, got %q (the native adapter would admit every bot)", tc.AllowBots)
	}
	if err := fairshare.CheckWeight(tc.Weight); err != nil {
		return err
	}
	for _, l := range []struct {
		key     string
		entries []string
	}{
		{"free_response_channels", tc.FreeResponseChannels}, {"no_thread_channels", tc.NoThreadChannels},
		{"allowed_channels", tc.AllowedChannels}, {"ignored_channels", tc.IgnoredChannels},
	} {
		for _, e := range nativecfg.Split(l.entries) {
			if err := checkChannelEntry(e); err != nil {
				return fmt.Errorf("%s: %w", l.key, err)
			}
		}
	}
	for _, e := range nativecfg.Split(tc.VoiceLinkedTextChannels) {
		if !isSnowflake(e) {
			return fmt.Errorf("voice_linked_text_channels: %q is not a Discord channel id", e)
		}
	}
	for _, e := range nativecfg.Split(tc.AllowedUsers) {
		if err := checkUserEntry(cleanUserEntry(e)); err != nil {
			return fmt.Errorf("allowed_users: %w", err)
		}
	}
	for _, e := range nativecfg.Split(tc.AllowedRoles) {
		if _, err := canonicalRole(e); err != nil {
			return fmt.Errorf("allowed_roles: %w", err)
		}
	}
	return nil
}

func decodePublicKey(h string) ([]byte, error) {
	if h == "" {
		return nil, fmt.Errorf("required")
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("want 64 hex digits (an Ed25519 public key)")
	}
	return b, nil
}

// isSnowflake reports whether s is a Discord id: 1 to 20 ASCII digits that
// fit in a uint64, without a leading zero. Every id put into a REST path is
// checked with it, so a gateway cannot steer a request to another route,
// nor name by another spelling a message or channel whose record (a posted
// message's, platform.MayChange; a grant) is keyed by Discord's.
func isSnowflake(s string) bool {
	if len(s) == 0 || len(s) > 20 || s[0] == '0' {
		return false
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}
