package main

import (
	"slices"
	"strings"
	"testing"
)

// TestNativeSettingSpellingsLoad: the config loader reads tenant settings
// in the native adapters' spellings (docs/settings-parity.md) and still
// reports unknown keys inside them by name and line.
func TestNativeSettingSpellingsLoad(t *testing.T) {
	doc := `discord:
  tenants:
    t1:
      free_response_channels: 1555379586114523190
      no_thread_channels: "101, #general"
      require_mention: "no"
telegram:
  group_topics:
    "-1001112223334":
      - thread_id: 12
        name: Deploys
  tenants:
    t1:
      require_mention: "on"
      allowed_chats: '["-1001112223334"]'
      ignored_threads: 010
`
	cfg, err := ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tc := cfg.Discord.Tenants["t1"]
	if !slices.Equal(tc.FreeResponseChannels, []string{"1555379586114523190"}) || tc.RequireMention == nil || *tc.RequireMention ||
		!slices.Equal(tc.NoThreadChannels, []string{"101, #general"}) {
		t.Fatalf("discord tenant settings %+v", tc)
	}
	if g := cfg.Telegram.GroupTopics; len(g) != 1 || g[0].ChatID != "-1001112223334" || len(g[0].Topics) != 1 || g[0].Topics[0].ThreadID != "12" {
		t.Fatalf("telegram group_topics %+v", g)
	}
	if tt := cfg.Telegram.Tenants["t1"]; tt.RequireMention == nil || !*tt.RequireMention ||
		!slices.Equal(tt.AllowedChats, []string{`["-1001112223334"]`}) || !slices.Equal(tt.IgnoredThreads, []string{"8"}) {
		t.Fatalf("telegram tenant settings %+v", tt)
	}
	for bad, want := range map[string]string{
		"discord:\n  tenants:\n    t1:\n      free_respons_channels: 1\n":  `unknown key "free_respons_channels" (line 4)`,
		"telegram:\n  group_topics:\n    - chat_id: 1\n      topicz: []\n": `unknown key "topicz" (line 4)`,
		"telegram:\n  tenants:\n    t1:\n      require_mentoin: on\n":      `unknown key "require_mentoin" (line 4)`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", bad, err, want)
		}
	}
}

// TestTelegramTenantSettingsChecked: telegram.tenants names configured
// tenants, and a value the native adapter would silently never match is
// refused naming the tenant and the key.
func TestTelegramTenantSettingsChecked(t *testing.T) {
	base := "tenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}]\ntelegram:\n  token: \"123456:abc\"\n  tenants:\n"
	for doc, want := range map[string]string{
		"    t1: {allowed_chats: \"*\"}\n":      `telegram.tenants["t1"].allowed_chats: "*" is not a wildcard`,
		"    t9: {require_mention: true}\n":     `telegram.tenants["t9"]: tenant "t9" is not defined in tenants`,
		"    t1: {require_mention: maybe}\n":    `telegram tenant setting require_mention: "maybe" is not a boolean`,
		"    t1: {mention_patterns: '(?=x)'}\n": `telegram.tenants["t1"].mention_patterns[0]`,
	} {
		code, _, errOut := runCmd(t, "serve", "-config", writeConfig(t, base+doc), "-check")
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("%q: exit %d, stderr %q, want exit 1 naming %q", doc, code, errOut, want)
		}
	}
	if code, out, errOut := runCmd(t, "serve", "-config", writeConfig(t, base+"    t1: {free_response_topics: \"-1001112223334:1\"}\n"), "-check"); code != 0 {
		t.Fatalf("good settings: exit %d %q %q", code, out, errOut)
	}
}

// TestWeightsBounded: a tenant's weight past fairshare.MaxWeight is
// refused by key, where it was accepted before: a weight above 2^53
// overflowed fairshare.Holdings' comparison of what tenants hold for
// their weights (channel context then forgot the chats of a tenant within
// its share) and Share's product. Negative weights stay refused; the
// largest accepted weight loads.
func TestWeightsBounded(t *testing.T) {
	const huge = "9007199254740993"
	tenants := "tenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}]\n"
	discord := `discord: {bot_token: x.y.z, public_key: "` + strings.Repeat("00", 32) + `", application_id: "9000", tenants: {t1: {weight: `
	for doc, want := range map[string]string{
		discord + huge + "}}}\n": `discord.tenants["t1"].weight: ` + huge + " is not 0 (the default, 1) to 1000000",
		`telegram: {token: "123456:abc", tenants: {t1: {weight: ` + huge + "}}}\n":                             `telegram.tenants["t1"].weight: ` + huge,
		"slack: {bot_token: xoxb-1, signing_secret: s, tenants: {t1: {weight: 1000001}}}\n":                    `slack.tenants["t1"].weight: 1000001`,
		"whatsapp: {app_secret: s, access_token: a, verify_token: v, tenants: {t1: {weight: " + huge + "}}}\n": `whatsapp.tenants["t1"].weight: ` + huge,
		discord + "-1}}}\n":      `discord.tenants["t1"].weight: -1`,
		discord + "1000000}}}\n": "",
	} {
		_, _, err := loadOrDefault(sources{configPath: writeConfig(t, tenants+doc), dataDir: t.TempDir()}, noEnv)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", strings.TrimSpace(doc), err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error saying %q", strings.TrimSpace(doc), err, want)
		}
	}
}

// TestNaNRateRefused: discord.global_per_second .nan, which passed both
// its range checks (every comparison with NaN is false) and left the
// bot's fair-share scheduler with a NaN budget, is refused by key.
func TestNaNRateRefused(t *testing.T) {
	doc := "tenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}]\n" +
		`discord: {bot_token: x.y.z, public_key: "` + strings.Repeat("00", 32) + `", application_id: "9000", global_per_second: .nan}` + "\n"
	_, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
	if err == nil || !strings.Contains(err.Error(), "discord.global_per_second: must be a number") {
		t.Fatalf("global_per_second .nan: %v, want refused by key", err)
	}
}
