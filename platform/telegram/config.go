package telegram

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"connector/internal/nonneg"
	"connector/platform/fairshare"
)

// Config configures the shared Telegram bot. Its zero value plus BotToken
// (and the tenants' Chats) is a working long-polling configuration.
type Config struct {
	// BotToken is the bot token from @BotFather ("<bot id>:<secret>").
	// Required. It never appears in logs, errors, metrics or frames.
	BotToken string `yaml:"bot_token"`
	// WebhookURL is the public HTTPS URL Telegram posts updates to; it must
	// reach this connector's POST /telegram/webhook. Set, the platform runs in
	// webhook mode and registers the URL with setWebhook; empty (the default),
	// it long-polls getUpdates, so the connector can run behind NAT.
	WebhookURL string `yaml:"webhook_url"`
	// WebhookSecret is the secret_token registered with setWebhook and
	// required in every delivery's X-Telegram-Bot-Api-Secret-Token header
	// (16-256 characters of A-Z a-z 0-9 _ -, and 64 bits by the estimate of
	// docs/security.md: a random one, openssl rand -hex 32). Required in
	// webhook mode; ignored when polling.
	WebhookSecret string `yaml:"webhook_secret"`
	// APIServerURL is the Bot API server. Default https://api.telegram.org;
	// tests and self-hosted Bot API servers set their own.
	APIServerURL string `yaml:"api_server_url"`

	// Chats maps a chat id (decimal, as Telegram sends it: negative for
	// groups and channels) to the tenant that owns it: every update there
	// reaches that tenant, and only it may act there, whoever posts and
	// whatever another tenant claimed (the ownership order,
	// docs/security.md). Updates from other chats reach only scope claims
	// and linked users' tenants, or are dropped. The config loader fills it
	// from the tenants section. Default empty.
	Chats map[string]string `yaml:"chats"`
	// Tenants holds per-tenant group trigger knobs of the native adapter
	// (require_mention, allowed_chats, ...) and fair-share weights, in its
	// spellings: a list may
	// also be a bare number, a comma-separated string or a JSON list
	// literal, a boolean also true/false, 1/0, yes/no or on/off
	// (docs/settings-parity.md). Default: none; a tenant without an entry
	// gets the native defaults (every group message is a turn, except one
	// whose @…bot mentions all name other bots).
	Tenants map[string]TenantConfig `yaml:"tenants"`
	// GroupTopics names forum topics, like the native adapter's
	// extra.group_topics: a bound topic's name becomes the source's
	// chat_topic (it never changes the session key). A list of {chat_id,
	// topics}, or the native legacy map {chat_id: topics}; the first entry
	// for a chat is the only one read, and thread ids match as written
	// (docs/settings-parity.md). Default none.
	GroupTopics TopicBindings `yaml:"group_topics"`
	// DMTopics names private-chat topics, like the native adapter's
	// extra.dm_topics: topics need a thread_id and a name (entries without
	// are skipped: the native adapter creates such topics, the connector
	// does not); thread ids are read as numbers. Default none.
	DMTopics TopicBindings `yaml:"dm_topics"`

	// GlobalPerSecond is the bot's overall send budget in messages per
	// second, shared between tenants by weighted fair share (each tenant's
	// Weight). Default 30 (Telegram's bulk limit); negative disables it.
	GlobalPerSecond int `yaml:"global_per_second"`
	// ChatPerSecond caps messages (sends and edits) into one chat in any one
	// second. Default 1; negative disables it.
	ChatPerSecond int `yaml:"chat_per_second"`
	// GroupPerMinute caps messages sent into one group, supergroup or channel
	// in any 60 s. Default 20; negative disables it.
	GroupPerMinute int `yaml:"group_per_minute"`

	// PollTimeout is the getUpdates long-poll duration. Default 50s; at least 2s.
	PollTimeout time.Duration `yaml:"poll_timeout"`
	// RequestTimeout bounds an outbound action whose context has no deadline
	// (the gateway itself gives up after 30 s), and, on its own, a group
	// `send`'s deletion of the draft previews it replaces. Default 30s.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// WebhookMaxConnections is setWebhook's max_connections (1-100). Default 40.
	WebhookMaxConnections int `yaml:"webhook_max_connections"`
	// MaxWebhookBytes limits a webhook request body; a larger one gets 413.
	// Default 1 MiB.
	MaxWebhookBytes int64 `yaml:"max_webhook_bytes"`
	// DedupeWindow is how many recent update_ids each instance remembers to
	// drop redeliveries. Default 10,000. With several instances, a webhook
	// update's update_id is also claimed in the store for 24 hours
	// (Telegram's retry period), so a retry that reaches another instance
	// is dropped too.
	DedupeWindow int `yaml:"dedupe_window"`
}

// TopicBinding names the topics of one chat.
type TopicBinding struct {
	// ChatID is the chat's id (decimal, as Telegram sends it; a YAML number,
	// read as YAML 1.1 does, or string).
	ChatID string `yaml:"chat_id"`
	// Topics are the named topics of the chat.
	Topics []Topic `yaml:"topics"`
}

// Topic is one named topic.
type Topic struct {
	// ThreadID is the topic's message_thread_id ("1" is the General topic);
	// a YAML number, read as YAML 1.1 does (012 is octal 10), or string.
	// Empty: the entry is skipped.
	ThreadID string `yaml:"thread_id"`
	// Name is reported as the source's chat_topic.
	Name string `yaml:"name"`
}

// Defaults applied by New to zero fields.
const (
	DefaultAPIServerURL          = "https://api.telegram.org"
	DefaultGlobalPerSecond       = 30
	DefaultChatPerSecond         = 1
	DefaultGroupPerMinute        = 20
	DefaultPollTimeout           = 50 * time.Second
	DefaultRequestTimeout        = 30 * time.Second
	DefaultWebhookMaxConnections = 40
	DefaultMaxWebhookBytes       = 1 << 20
	DefaultDedupeWindow          = 10_000
)

// WebhookPath is where Telegram posts updates in webhook mode.
const WebhookPath = "/telegram/webhook"

// WithDefaults returns c with every zero field set to its default: the
// configuration New runs with.
func (c Config) WithDefaults() Config {
	c.APIServerURL = strings.TrimRight(cmp.Or(c.APIServerURL, DefaultAPIServerURL), "/")
	c.GlobalPerSecond = cmp.Or(c.GlobalPerSecond, DefaultGlobalPerSecond)
	c.ChatPerSecond = cmp.Or(c.ChatPerSecond, DefaultChatPerSecond)
	c.GroupPerMinute = cmp.Or(c.GroupPerMinute, DefaultGroupPerMinute)
	c.PollTimeout = cmp.Or(c.PollTimeout, DefaultPollTimeout)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
	c.WebhookMaxConnections = cmp.Or(c.WebhookMaxConnections, DefaultWebhookMaxConnections)
	c.MaxWebhookBytes = cmp.Or(c.MaxWebhookBytes, DefaultMaxWebhookBytes)
	c.DedupeWindow = cmp.Or(c.DedupeWindow, DefaultDedupeWindow)
	return c
}

// Validate reports the first invalid field, naming its key (never its value
// when the value is a secret).
func (c Config) Validate() error {
	if err := validToken(c.BotToken); err != nil {
		return fmt.Errorf("telegram.bot_token: %w", err)
	}
	if c.WebhookURL != "" {
		if err := validHTTPURL(c.WebhookURL); err != nil {
			return fmt.Errorf("telegram.webhook_url: %w", err)
		}
		if err := validSecretToken(c.WebhookSecret); err != nil {
			return fmt.Errorf("telegram.webhook_secret: %w", err)
		}
	}
	if c.APIServerURL != "" {
		if err := validHTTPURL(c.APIServerURL); err != nil {
			return fmt.Errorf("telegram.api_server_url: %w", err)
		}
	}
	for _, chat := range slices.Sorted(maps.Keys(c.Chats)) {
		tenant := c.Chats[chat]
		if _, err := parseChatID(chat); err != nil {
			return fmt.Errorf("telegram.chats[%q]: %w", chat, err)
		}
		if tenant == "" {
			return fmt.Errorf("telegram.chats[%q]: empty tenant", chat)
		}
	}
	for _, tenant := range slices.Sorted(maps.Keys(c.Tenants)) {
		if err := fairshare.CheckWeight(c.Tenants[tenant].Weight); err != nil {
			return fmt.Errorf("telegram.tenants[%q].%w", tenant, err)
		}
		if _, err := newPolicy(c.Tenants[tenant]); err != nil {
			return fmt.Errorf("telegram.tenants[%q].%w", tenant, err)
		}
	}
	if _, err := topicNames(c.GroupTopics, false); err != nil {
		return fmt.Errorf("telegram.group_topics%w", err)
	}
	if _, err := topicNames(c.DMTopics, true); err != nil {
		return fmt.Errorf("telegram.dm_topics%w", err)
	}
	switch {
	case c.PollTimeout != 0 && c.PollTimeout < 2*time.Second:
		return errors.New("telegram.poll_timeout: must be at least 2s")
	case c.WebhookMaxConnections < 0 || c.WebhookMaxConnections > 100:
		return errors.New("telegram.webhook_max_connections: must be 1-100")
	}
	return nonneg.Check("telegram.", &c, "global_per_second", "chat_per_second", "group_per_minute")
}

// validToken checks the "<bot id>:<secret>" shape without echoing the token.
func validToken(token string) error {
	if token == "" {
		return errors.New("required")
	}
	id, secret, ok := strings.Cut(token, ":")
	if !ok || secret == "" {
		return errors.New("want <bot id>:<secret>")
	}
	if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
		return errors.New("the part before ':' must be the numeric bot id")
	}
	for _, r := range token {
		if r <= ' ' || r == '/' || r > '~' {
			return errors.New("contains a character that cannot appear in a URL path")
		}
	}
	return nil
}

// validSecretToken checks setWebhook's secret_token rules.
func validSecretToken(s string) error {
	if s == "" {
		return errors.New("required in webhook mode")
	}
	if len(s) > 256 {
		return errors.New("longer than 256 characters")
	}
	if strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
		return errors.New("only A-Z a-z 0-9 _ - are allowed")
	}
	return nil
}

func validHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return errors.New("want an http(s) URL")
	}
	if u.Host == "" {
		return errors.New("no host")
	}
	return nil
}

// parseChatID parses a chat id in its canonical decimal spelling.
func parseChatID(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 || strconv.FormatInt(n, 10) != s {
		return 0, errors.New("want a non-zero decimal chat id")
	}
	return n, nil
}
