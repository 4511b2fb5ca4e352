package telegram

import (
	"strings"
	"testing"
	"time"

	"connector/platform"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{BotToken: testToken, Chats: map[string]string{"-100123": "t1"}}
	cases := []struct {
		name    string
		mutate  func(*Config)
		wantKey string // "" means valid
	}{
		{"minimal polling config", func(*Config) {}, ""},
		{"webhook mode", func(c *Config) { c.WebhookURL = "https://x.example/telegram/webhook"; c.WebhookSecret = "abc_DEF-123" }, ""},
		{"no token", func(c *Config) { c.BotToken = "" }, "telegram.bot_token"},
		{"token without secret", func(c *Config) { c.BotToken = "123:" }, "telegram.bot_token"},
		{"token without id", func(c *Config) { c.BotToken = "abc:def" }, "telegram.bot_token"},
		{"token with a slash", func(c *Config) { c.BotToken = "123:ab/cd" }, "telegram.bot_token"},
		{"webhook without secret", func(c *Config) { c.WebhookURL = "https://x.example/h" }, "telegram.webhook_secret"},
		{"webhook secret charset", func(c *Config) { c.WebhookURL = "https://x.example/h"; c.WebhookSecret = "has space" }, "telegram.webhook_secret"},
		{"webhook secret too long", func(c *Config) { c.WebhookURL = "https://x.example/h"; c.WebhookSecret = strings.Repeat("a", 257) }, "telegram.webhook_secret"},
		{"webhook url scheme", func(c *Config) { c.WebhookURL = "ftp://x"; c.WebhookSecret = "s" }, "telegram.webhook_url"},
		{"api server url", func(c *Config) { c.APIServerURL = "not a url" }, "telegram.api_server_url"},
		{"chat id", func(c *Config) { c.Chats = map[string]string{"-0100": "t1"} }, `telegram.chats["-0100"]`},
		{"chat without tenant", func(c *Config) { c.Chats = map[string]string{"5": ""} }, `telegram.chats["5"]`},
		{"negative weight", func(c *Config) { c.Tenants = map[string]TenantConfig{"t1": {Weight: -1}} }, `telegram.tenants["t1"].weight`},
		{"topic chat", func(c *Config) { c.GroupTopics = []TopicBinding{{ChatID: "x"}} }, "telegram.group_topics[0].chat_id"},
		{"topic thread", func(c *Config) {
			c.DMTopics = []TopicBinding{{ChatID: "5", Topics: []Topic{{ThreadID: "0", Name: "n"}}}}
		}, "telegram.dm_topics[0].topics[0].thread_id"},
		{"poll timeout", func(c *Config) { c.PollTimeout = time.Second }, "telegram.poll_timeout"},
		{"max connections", func(c *Config) { c.WebhookMaxConnections = 101 }, "telegram.webhook_max_connections"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok
			c.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case c.wantKey == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case c.wantKey != "" && (err == nil || !strings.HasPrefix(err.Error(), c.wantKey+":")):
				t.Fatalf("error %v, want one naming %s", err, c.wantKey)
			case err != nil && (strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "has space")):
				t.Fatalf("error %q echoes a secret", err)
			}
		})
	}
}

// TestConfigValidateChatsInOrder: with several bad chats, Validate names
// the first in sorted order, every time (not whichever the map walk met
// first), as Discord's guilds and WhatsApp's numbers do.
func TestConfigValidateChatsInOrder(t *testing.T) {
	cfg := Config{BotToken: testToken, Chats: map[string]string{"x": "t1", "-0200": "t1", "5": "", "-0100": "t1", "-100123": "t1", "y": "t2"}}
	for range 100 {
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), `telegram.chats["-0100"]:`) {
			t.Fatalf("error %v, want the first bad chat in sorted order, -0100", err)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{BotToken: testToken}.WithDefaults()
	if c.APIServerURL != DefaultAPIServerURL || c.GlobalPerSecond != 30 || c.ChatPerSecond != 1 || c.GroupPerMinute != 20 ||
		c.PollTimeout != 50*time.Second || c.RequestTimeout != 30*time.Second || c.WebhookMaxConnections != 40 ||
		c.MaxWebhookBytes != 1<<20 || c.DedupeWindow != 10_000 {
		t.Errorf("defaults %+v", c)
	}
	if _, err := New(Config{BotToken: testToken}, platform.Deps{}); err != nil {
		t.Errorf("New with a zero config plus token: %v", err)
	}
	if _, err := New(Config{}, platform.Deps{}); err == nil {
		t.Error("New without a token succeeded")
	}
}

func TestChatTenant(t *testing.T) {
	e := newEnv(t, nil)
	if tenant, err := e.p.ChatTenant(t.Context(), "-1009876543210"); err != nil || tenant != "t2" {
		t.Errorf("ChatTenant = %q, %v", tenant, err)
	}
	for _, chat := range []string{"-1007778889990", "x", "", "+123456789"} {
		if _, err := e.p.ChatTenant(t.Context(), chat); err != platform.ErrUnknownChat {
			t.Errorf("ChatTenant(%q) error %v, want ErrUnknownChat", chat, err)
		}
	}
	if e.p.Name() != "telegram" || e.p.Routes() != nil {
		t.Error("polling platform: wrong name or routes mounted")
	}
}
