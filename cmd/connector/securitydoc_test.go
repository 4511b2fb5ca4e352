package main

import (
	"testing"

	"connector/internal/doctabletest"
	"connector/media"
	"connector/platform/discord"
	"connector/platform/nexscope"
	"connector/platform/slack"
	"connector/platform/telegram"
	"connector/relay"
)

// TestSecurityDocDefaults: the defaults docs/security.md's limits table
// states are the ones the code fills in, for every section of the config
// the table names (the unauthenticated-connection bound as under a high
// open-file limit).
func TestSecurityDocDefaults(t *testing.T) {
	c := Config{HTTP: HTTPConfig{MaxUnauthenticatedConns: maxUnauthConnsFor(0)}}
	c.normalizeHTTP()
	if err := c.validateHTTP(); err != nil {
		t.Fatal(err)
	}
	m := media.Config{}.WithDefaults()
	relayCfg := relay.Config{}.WithDefaults()
	discordCfg := discord.Config{}.WithDefaults()
	telegramCfg := telegram.Config{}.WithDefaults()
	nexscopeCfg := nexscope.Config{}.WithDefaults()
	slackCfg := slack.Config{}.WithDefaults()
	for _, s := range []struct {
		prefix  string
		cfg     any
		atLeast int // keys of the section the table must name
	}{
		{"http", &c.HTTP, 6}, {"ops", &c.Ops, 1}, {"media", &m, 6},
		{"relay", &relayCfg, 11}, {"discord", &discordCfg, 4}, {"telegram", &telegramCfg, 1}, {"nexscope", &nexscopeCfg, 9},
		{"slack", &slackCfg, 1},
	} {
		n, errs := doctabletest.CheckDefaults("../../docs/security.md", "## Limits", s.prefix, s.cfg)
		for _, err := range errs {
			t.Error(err)
		}
		if n < s.atLeast {
			t.Errorf("%d %s keys checked, want at least %d", n, s.prefix, s.atLeast)
		}
	}
}
