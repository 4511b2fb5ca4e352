package discord

import (
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"time"
)

// Config configures the shared Discord bot. The zero value plus the three
// credentials (BotToken, PublicKey, ApplicationID) works; every other field
// names its default.
type Config struct {
	// BotToken is the bot's token, without the "Bot " prefix. Required. It
	// never appears in logs, errors, metrics or frames.
	BotToken string `yaml:"bot_token"`
	// PublicKey is the application's Ed25519 public key from the developer
	// portal, hex encoded (64 hex digits). Required: it verifies
	// POST /discord/interactions.
	PublicKey string `yaml:"public_key"`
	// ApplicationID is the application (client) id, used for interaction
	// follow-ups and the global command registry. Required.
	ApplicationID string `yaml:"application_id"`

	// Guilds maps a guild id to the tenant that owns it. Messages and
	// interactions of a guild no tenant claims are dropped, never broadcast.
	// Set under the discord section (e.g. guilds: {"1310000000000000500": acme}). Default: none
	// (every guild event is dropped).
	Guilds map[string]string `yaml:"guilds"`
	// DMTenant receives every direct message and DM interaction. Empty (the
	// default) drops DMs with a log line.
	DMTenant string `yaml:"dm_tenant"`
	// Tenants holds per-tenant adapter knobs and fair-share weights. Default:
	// none; a tenant without an entry gets the native adapter's defaults and
	// weight 1.
	Tenants map[string]TenantConfig `yaml:"tenants"`

	// APIBaseURL replaces https://discord.com for every REST call (tests and
	// proxies). Default: empty, the real Discord.
	APIBaseURL string `yaml:"api_base_url"`
	// GatewayURL, when set, is answered to discordgo's GET /gateway instead
	// of asking Discord. Default: empty, ask Discord.
	GatewayURL string `yaml:"gateway_url"`

	// GlobalRate is the bot-wide REST budget in requests per second, shared
	// between tenants by weighted fair share. Default 45 (Discord allows 50;
	// GlobalRate+GlobalBurst never exceeds 50 in any second by default).
	GlobalRate float64 `yaml:"global_rate"`
	// GlobalBurst is how many requests may go at once after a quiet period.
	// Default 5.
	GlobalBurst int `yaml:"global_burst"`
	// InvalidRequestLimit opens the REST breaker when this many 401, 403 and
	// 429 answers (429s of scope "shared" excluded) arrived within 10
	// minutes; Discord bans an IP at 10,000. Default 8,000.
	InvalidRequestLimit int `yaml:"invalid_request_limit"`
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
	// hours (Discord allows 1,000); when spent, reconnects wait. Default 900.
	MaxIdentifiesPerDay int `yaml:"max_identifies_per_day"`

	// CommandSyncDebounce is the quiet period after the last discord hello
	// carrying a command_manifest before the global commands are reconciled.
	// Default 5s.
	CommandSyncDebounce time.Duration `yaml:"command_sync_debounce"`
}

// TenantConfig holds the native adapter's knobs that change how a tenant's
// messages map to sessions (docs/session-key.md §3), and its fair-share
// weight.
type TenantConfig struct {
	// AutoThread starts a thread from a mention in a text or announcement
	// channel and keys the turn on it (discord.auto_thread). Default true.
	AutoThread *bool `yaml:"auto_thread"`
	// RequireMention drops guild-channel messages that do not mention the
	// bot, except in free-response channels, voice-linked text channels and
	// threads the bot takes part in (discord.require_mention). Default true.
	RequireMention *bool `yaml:"require_mention"`
	// IgnoreNoMention drops guild messages that mention other users but not
	// the bot (DISCORD_IGNORE_NO_MENTION). Default true.
	IgnoreNoMention *bool `yaml:"ignore_no_mention"`
	// FreeResponseChannels need no mention and are never auto-threaded; a
	// thread whose parent is listed is free too. Default none.
	FreeResponseChannels []string `yaml:"free_response_channels"`
	// NoThreadChannels still need a mention but are never auto-threaded.
	// Default none.
	NoThreadChannels []string `yaml:"no_thread_channels"`
	// VoiceLinkedTextChannels are voice channels' text chats treated as
	// voice-linked: free-response and never auto-threaded. Default none.
	VoiceLinkedTextChannels []string `yaml:"voice_linked_text_channels"`
	// AllowBots admits bot and webhook authors: "none" (default), "all", or
	// "mentions" (only when they mention the bot).
	AllowBots string `yaml:"allow_bots"`
	// AllowedUsers, when it or AllowedRoles is set, admits only these users
	// (or members holding an AllowedRoles role). Default: none, everyone is
	// admitted (unlike the native adapter, which fails closed; the tenant's
	// gateway applies its own allowlist).
	AllowedUsers []string `yaml:"allowed_users"`
	// AllowedRoles admits members holding one of these roles; see
	// AllowedUsers. Default: none.
	AllowedRoles []string `yaml:"allowed_roles"`
	// Weight is the tenant's share of the bot's global budget relative to
	// other tenants. Default 1.
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
	DefaultGlobalRate          = 45
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

// withDefaults returns cfg with every zero knob set to its default.
func (cfg Config) withDefaults() Config {
	positiveOr(&cfg.GlobalRate, DefaultGlobalRate)
	positiveOr(&cfg.GlobalBurst, DefaultGlobalBurst)
	positiveOr(&cfg.InvalidRequestLimit, DefaultInvalidRequestLimit)
	positiveOr(&cfg.RequestTimeout, DefaultRequestTimeout)
	positiveOr(&cfg.MaxInteractionBytes, DefaultMaxInteractionBytes)
	positiveOr(&cfg.InteractionSkew, DefaultInteractionSkew)
	positiveOr(&cfg.HandshakeTimeout, DefaultHandshakeTimeout)
	positiveOr(&cfg.ReconnectMin, DefaultReconnectMin)
	positiveOr(&cfg.ReconnectMax, DefaultReconnectMax)
	positiveOr(&cfg.StableAfter, DefaultStableAfter)
	positiveOr(&cfg.MaxIdentifiesPerDay, DefaultMaxIdentifiesPerDay)
	positiveOr(&cfg.CommandSyncDebounce, DefaultCommandSyncDebounce)
	return cfg
}

// positiveOr sets *v to def when it is zero or negative.
func positiveOr[T int | int64 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
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
	for _, g := range sortedKeys(cfg.Guilds) {
		if !isSnowflake(g) {
			return fmt.Errorf("discord.guilds[%q]: not a Discord guild id", g)
		}
		if cfg.Guilds[g] == "" {
			return fmt.Errorf("discord.guilds[%q]: empty tenant", g)
		}
	}
	for _, name := range sortedKeys(cfg.Tenants) {
		tc := cfg.Tenants[name]
		switch tc.AllowBots {
		case "", AllowBotsNone, AllowBotsAll, AllowBotsMentions:
		default:
			return fmt.Errorf("discord.tenants[%q].allow_bots: want none, all or mentions, got %q", name, tc.AllowBots)
		}
		if tc.Weight < 0 {
			return fmt.Errorf("discord.tenants[%q].weight: must not be negative", name)
		}
		for key, ids := range map[string][]string{
			"free_response_channels": tc.FreeResponseChannels, "no_thread_channels": tc.NoThreadChannels,
			"voice_linked_text_channels": tc.VoiceLinkedTextChannels, "allowed_users": tc.AllowedUsers,
			"allowed_roles": tc.AllowedRoles,
		} {
			for _, id := range ids {
				if !isSnowflake(id) {
					return fmt.Errorf("discord.tenants[%q].%s: %q is not a Discord id", name, key, id)
				}
			}
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
	if cfg.GlobalRate > 50 {
		return fmt.Errorf("discord.global_rate: %v exceeds Discord's 50 requests/s", cfg.GlobalRate)
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
// fit in a uint64. Every id put into a REST path is checked with it, so a
// gateway cannot steer a request to another route.
func isSnowflake(s string) bool {
	if len(s) == 0 || len(s) > 20 {
		return false
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
