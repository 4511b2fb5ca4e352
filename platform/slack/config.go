package slack

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"connector/internal/nonneg"
	"connector/platform/fairshare"
)

// Config configures the shared Slack app. SigningSecret with BotToken (one
// workspace, HTTP events), AppToken with BotToken (Socket Mode), or
// SigningSecret with ClientID and ClientSecret (OAuth distribution to many
// workspaces) is a working configuration; every other field names its
// default.
type Config struct {
	// SigningSecret verifies every request Slack sends to /slack/events,
	// /slack/interactions and /slack/commands (v0 HMAC-SHA256 of
	// "v0:<timestamp>:<body>"). Without it those routes are not served and
	// the app must use Socket Mode. It never appears in logs, errors or
	// frames.
	SigningSecret string `yaml:"signing_secret"`
	// PreviousSigningSecret, set while the app's signing secret is being
	// rotated in Slack, also verifies those requests, so the ones Slack
	// still signs with the old secret are accepted. Remove it once the
	// rotation is done. Default: empty, signing_secret alone. It never
	// appears in logs, errors or frames.
	PreviousSigningSecret string `yaml:"previous_signing_secret"`
	// BotToken is the xoxb- bot token of a single workspace (the one
	// auth.test names). More workspaces install the app through OAuth.
	BotToken string `yaml:"bot_token"`
	// AppToken is an xapp- app-level token with connections:write: set, the
	// connector receives events, interactions and slash commands over Socket
	// Mode (one instance at a time, under a store lease) instead of HTTP.
	AppToken string `yaml:"app_token"`
	// ClientID, with ClientSecret, enables the OAuth v2 install flow
	// (/slack/install, /slack/oauth/callback) that distributes the app to
	// many workspaces; each workspace's bot token is kept in the store.
	ClientID string `yaml:"client_id"`
	// ClientSecret is the app's client secret, for the OAuth code exchange;
	// it also keys the install flow's signed state. It never appears in
	// logs, errors or frames.
	ClientSecret string `yaml:"client_secret"`
	// RedirectURL is the public URL of /slack/oauth/callback, sent as
	// redirect_uri. Default: empty, the app's single configured redirect URL.
	RedirectURL string `yaml:"redirect_url"`
	// Scopes are the bot scopes /slack/install asks for. Default the
	// scopes of deploy/slack-app-manifest.yaml (DefaultScopes).
	Scopes []string `yaml:"scopes"`
	// APIURL is the Web API base. Default https://slack.com/api/; tests
	// point it at a fake.
	APIURL string `yaml:"api_url"`

	// Teams maps a workspace (team id) to the tenant that owns it. Events of
	// workspaces no tenant claims (by team, channel or author) are dropped.
	Teams map[string]string `yaml:"teams"`
	// AllowAllUsers admits every user of every tenant's workspaces, whatever
	// a tenant's allowed_users say (SLACK_ALLOW_ALL_USERS); a tenant's own
	// allow_all_users overrides it. Default false: a tenant with
	// allowed_users admits only them, one without admits everyone (its
	// gateway applies its own allowlist).
	AllowAllUsers bool `yaml:"allow_all_users"`
	// Tenants holds per-tenant native adapter knobs and fair-share weights,
	// by their native names and spellings (docs/settings-parity.md).
	// Default: none; a tenant without an entry gets the native defaults.
	Tenants map[string]TenantConfig `yaml:"tenants"`
	// Assistant says the app has Slack's Agents & AI Apps feature
	// (assistant:write): typing sets the thread status
	// (assistant.threads.setStatus) and draft streams into a message
	// (chat.startStream, chat.appendStream, chat.stopStream). false
	// advertises neither op. Default true.
	Assistant *bool `yaml:"assistant"`

	// ChannelPerSecond paces the messages posted into one channel (sends,
	// ephemeral replies, uploads, stream starts; not edits, which are
	// Tier 3 calls of their own): Slack allows about one per second per
	// channel. Default 1; negative disables it.
	ChannelPerSecond int `yaml:"channel_per_second"`
	// RequestTimeout bounds an outbound action whose context has no
	// deadline, including 429 retries. Default 30s.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// MaxEventBytes caps a request body of the HTTP routes; larger ones get
	// 413. Default 1 MiB.
	MaxEventBytes int64 `yaml:"max_event_bytes"`
	// DedupeWindow is how long a message's team, channel and ts (a press's
	// prompt message, a slash command's trigger_id) is remembered to drop
	// Slack's retries and duplicates, across instances. Default 1h (the native SLACK_DEDUP_TTL_SECONDS);
	// at least 5m, the signature tolerance: a shorter one would let a
	// captured signed request be replayed once it is forgotten.
	DedupeWindow time.Duration `yaml:"dedupe_window"`
}

// DefaultScopes are the bot scopes the install flow asks for: those of
// deploy/slack-app-manifest.yaml.
var DefaultScopes = []string{
	"app_mentions:read", "assistant:write", "channels:history", "channels:read", "chat:write",
	"commands", "files:read", "files:write", "groups:history", "groups:read", "im:history",
	"im:read", "im:write", "mpim:history", "mpim:read", "reactions:read", "reactions:write", "users:read",
}

// Defaults applied by New to zero fields.
const (
	DefaultAPIURL           = "https://slack.com/api/"
	DefaultChannelPerSecond = 1
	DefaultRequestTimeout   = 30 * time.Second
	DefaultMaxEventBytes    = 1 << 20
	DefaultDedupeWindow     = time.Hour
)

// Routes on the public listener.
const (
	EventsPath        = "/slack/events"
	InteractionsPath  = "/slack/interactions"
	CommandsPath      = "/slack/commands"
	InstallPath       = "/slack/install"
	OAuthCallbackPath = "/slack/oauth/callback"
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.APIURL = cmp.Or(c.APIURL, DefaultAPIURL)
	if !strings.HasSuffix(c.APIURL, "/") {
		c.APIURL += "/"
	}
	c.ChannelPerSecond = cmp.Or(c.ChannelPerSecond, DefaultChannelPerSecond)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
	c.MaxEventBytes = cmp.Or(c.MaxEventBytes, DefaultMaxEventBytes)
	c.DedupeWindow = cmp.Or(c.DedupeWindow, DefaultDedupeWindow)
	if len(c.Scopes) == 0 {
		c.Scopes = DefaultScopes
	}
	return c
}

// assistant reports whether the app has the Agents & AI Apps feature.
func (c Config) assistant() bool { return c.Assistant == nil || *c.Assistant }

// Slack's id shapes: a workspace, a conversation (channel, private
// channel or group, DM), a user (W for Enterprise Grid).
var (
	teamIDPattern    = regexp.MustCompile(`^T[A-Z0-9]{2,30}$`)
	channelIDPattern = regexp.MustCompile(`^[CGD][A-Z0-9]{2,30}$`)
	userIDPattern    = regexp.MustCompile(`^[UWB][A-Z0-9]{2,30}$`)
)

// Validate reports the first invalid field, naming its key and never the
// value of a secret.
func (c Config) Validate() error {
	switch {
	case c.BotToken != "" && !strings.HasPrefix(c.BotToken, "xoxb-"):
		return errors.New("slack.bot_token: want a bot token (xoxb-...)")
	case strings.ContainsAny(c.BotToken, ", \t\n"):
		return errors.New("slack.bot_token: want one bot token, without commas or spaces (more workspaces install the app through OAuth: client_id)")
	case c.AppToken != "" && !strings.HasPrefix(c.AppToken, "xapp-"):
		return errors.New("slack.app_token: want an app-level token (xapp-...)")
	case (c.ClientID == "") != (c.ClientSecret == ""):
		return errors.New("slack.client_id and slack.client_secret: set both or neither")
	case c.BotToken == "" && c.ClientID == "":
		return errors.New("slack: set bot_token (one workspace) or client_id and client_secret (OAuth installs)")
	case c.PreviousSigningSecret != "" && c.SigningSecret == "":
		return errors.New("slack.previous_signing_secret: set only with signing_secret, during its rotation")
	case c.SigningSecret == "" && c.AppToken == "":
		return errors.New("slack: set signing_secret (HTTP events) or app_token (Socket Mode)")
	case c.DedupeWindow != 0 && c.DedupeWindow < signatureWindow:
		return fmt.Errorf("slack.dedupe_window: want at least %v, the signature tolerance (a signed request is accepted that long, so a shorter window lets it be replayed)", signatureWindow)
	}
	for _, u := range []struct{ key, value string }{{"api_url", c.APIURL}, {"redirect_url", c.RedirectURL}} {
		if u.value == "" {
			continue
		}
		if p, err := url.Parse(u.value); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			return fmt.Errorf("slack.%s: want an http(s) URL", u.key)
		}
	}
	for _, team := range slices.Sorted(maps.Keys(c.Teams)) {
		if !teamIDPattern.MatchString(team) {
			return fmt.Errorf("slack.teams[%q]: want a workspace id (T...)", team)
		}
		if c.Teams[team] == "" {
			return fmt.Errorf("slack.teams[%q]: empty tenant", team)
		}
	}
	for _, tenant := range slices.Sorted(maps.Keys(c.Tenants)) {
		if _, err := newPolicy(c.Tenants[tenant], c.AllowAllUsers); err != nil {
			return fmt.Errorf("slack.tenants[%q].%w", tenant, err)
		}
		if err := fairshare.CheckWeight(c.Tenants[tenant].Weight); err != nil {
			return fmt.Errorf("slack.tenants[%q].%w", tenant, err)
		}
	}
	return nonneg.Check("slack.", &c, "channel_per_second")
}
