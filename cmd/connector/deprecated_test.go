package main

import (
	"reflect"
	"strings"
	"testing"
)

// oldSpellings is a config that uses every older key spelling.
const oldSpellings = `listen: 127.0.0.1:0
tenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}, {id: t2, gateways: [{id: gw2, secrets: [s2]}]}]
discord:
  bot_token: MTQwMDAwMDAwMDAwMDAwMDAw.old-spelling
  public_key: "` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `"
  application_id: "9000"
  global_rate: 40
telegram:
  token: "123456:old-spelling"
  tenant_weights: {t1: 3, t2: 2}
  tenants: {t1: {require_mention: true}}
`

// TestOlderKeySpellingsStillWork: telegram.token, discord.global_rate and
// telegram.tenant_weights are read as the keys that replaced them, each is
// reported with its line, and serve -check logs a warning naming both
// spellings.
func TestOlderKeySpellingsStillWork(t *testing.T) {
	cfg, err := ParseConfig([]byte(oldSpellings))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Telegram.BotToken != "123456:old-spelling" || cfg.Discord.GlobalPerSecond != 40 {
		t.Fatalf("renamed keys not read: telegram %+v discord %+v", cfg.Telegram, cfg.Discord)
	}
	if w := cfg.Telegram.Tenants; w["t1"].Weight != 3 || w["t2"].Weight != 2 || w["t1"].RequireMention == nil || !*w["t1"].RequireMention {
		t.Fatalf("tenant_weights not moved into tenants, or tenants' own settings lost: %+v", w)
	}
	want := []deprecation{
		{"telegram.token", "telegram.bot_token", 9},
		{"discord.global_rate", "discord.global_per_second", 7},
		{"telegram.tenant_weights", "telegram.tenants.<tenant>.weight", 10},
	}
	if !reflect.DeepEqual(cfg.deprecations, want) {
		t.Fatalf("deprecations %+v, want %+v", cfg.deprecations, want)
	}
	code, out, errOut := runCmd(t, "serve", "-config", writeConfig(t, oldSpellings), "-data-dir", t.TempDir(), "-check")
	if code != 0 || out != "config ok\n" {
		t.Fatalf("-check: exit %d %q %q", code, out, errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, `"key":"`+w.Old+`"`) || !strings.Contains(errOut, `"use":"`+w.New+`"`) {
			t.Errorf("no deprecation warning for %s in %s", w.Old, errOut)
		}
	}
	current := strings.NewReplacer("  token:", "  bot_token:", "global_rate", "global_per_second",
		"  tenant_weights: {t1: 3, t2: 2}\n", "", "{t1: {require_mention: true}}", "{t1: {require_mention: true, weight: 3}, t2: {weight: 2}}").Replace(oldSpellings)
	now, err := ParseConfig([]byte(current))
	if err != nil {
		t.Fatal(err)
	}
	if len(now.deprecations) != 0 {
		t.Fatalf("current spellings reported as deprecated: %+v", now.deprecations)
	}
	now.deprecations = cfg.deprecations
	if !reflect.DeepEqual(now, cfg) {
		t.Fatalf("old spellings read as\n%+v\nthe current ones as\n%+v", cfg, now)
	}
}

// TestBothSpellingsOfOneKeyAreRefused: a file may not set a key under its
// older and its current name.
func TestBothSpellingsOfOneKeyAreRefused(t *testing.T) {
	for doc, want := range map[string]string{
		"telegram:\n  token: a\n  bot_token: b\n":                              "telegram.token (line 2) is the older spelling of telegram.bot_token (line 3)",
		"discord: {global_rate: 1, global_per_second: 2}\n":                    "discord.global_rate (line 1) is the older spelling of discord.global_per_second",
		"telegram:\n  tenant_weights: {t1: 2}\n  tenants: {t1: {weight: 3}}\n": "telegram.tenant_weights.t1 (line 2) is the older spelling of telegram.tenants.t1.weight (line 3)",
		"telegram:\n  tenant_weights: [t1]\n":                                  "telegram.tenant_weights (line 2): want a map",
		"telegram:\n  tenant_weights: {t1: many}\n":                            "weight",
	} {
		_, err := ParseConfig([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", doc, err, want)
		}
	}
}

// TestValidateChangesNothing: Validate only checks; defaults and the
// platform ids' spelling are normalize's.
func TestValidateChangesNothing(t *testing.T) {
	doc := strings.Replace(oldSpellings, "listen: 127.0.0.1:0\n", "", 1) + "  chats: {\"-0100\": t1}\n"
	doc = strings.Replace(doc, "  global_rate: 40\n", "  global_rate: 40\n  guilds: {\"0500\": t2}\n", 1)
	cfg, err := ParseConfig([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := ParseConfig([]byte(doc))
	if err := cfg.Validate(); err == nil {
		t.Fatal(`"-0100" is not a chat id until normalized, yet Validate accepted it`)
	}
	if !reflect.DeepEqual(cfg, before) {
		t.Fatalf("Validate changed the config:\n%+v\nwas\n%+v", cfg, before)
	}
	if err := cfg.normalize(); err != nil {
		t.Fatal(err)
	}
	normalized, _ := ParseConfig([]byte(doc))
	_ = normalized.normalize()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, normalized) {
		t.Fatal("Validate changed a normalized config")
	}
	if cfg.Listen != defaultListen || cfg.Ops.Listen != defaultOpsListen || cfg.HTTP.IdleTimeout != defaultIdleTimeout ||
		cfg.Discord.Guilds["500"] != "t2" || cfg.Telegram.Chats["-100"] != "t1" {
		t.Fatalf("normalize: listen %q ops %q idle %v guilds %v chats %v", cfg.Listen, cfg.Ops.Listen, cfg.HTTP.IdleTimeout, cfg.Discord.Guilds, cfg.Telegram.Chats)
	}
}
