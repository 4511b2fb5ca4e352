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
	for bad, want := range map[string]string{
		"discord:\n  tenants:\n    t1:\n      free_respons_channels: 1\n":  `unknown key "free_respons_channels" (line 4)`,
		"telegram:\n  group_topics:\n    - chat_id: 1\n      topicz: []\n": `unknown key "topicz" (line 4)`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", bad, err, want)
		}
	}
}
