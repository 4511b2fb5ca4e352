package slack

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestSlackTenantKnobsCoverFields: every yaml key of TenantConfig has a
// reader, and no reader a missing key.
func TestSlackTenantKnobsCoverFields(t *testing.T) {
	var tags, knobs []string
	rt := reflect.TypeFor[TenantConfig]()
	for i := range rt.NumField() {
		tags = append(tags, rt.Field(i).Tag.Get("yaml"))
	}
	for k := range tenantKnobs {
		knobs = append(knobs, k)
	}
	slices.Sort(tags)
	slices.Sort(knobs)
	if !slices.Equal(tags, knobs) {
		t.Fatalf("yaml tags %q, readers %q", tags, knobs)
	}
}

// TestSlackTenantSettingsErrors: values the native adapter would read as
// something else are refused, naming the key.
func TestSlackTenantSettingsErrors(t *testing.T) {
	for setting, want := range map[string]string{
		"{require_mentoin: true}":                "field require_mentoin not found",
		"{allow_bots: some}":                     `allow_bots: "some" is not one of none, mentions, all`,
		`{reply_in_thread: "false"}`:             "want a YAML boolean",
		"{free_response_channels: '<#C0123>'}":   "is mention or name syntax",
		"{allowed_channels: general}":            "is not a Slack id",
		"{free_response_channels: '*'}":          `"*" is not a wildcard in this list`,
		"{mention_patterns: ['(?<=x)hermes']}":   "Go's regexp cannot compile it",
		"{allowed_users: '@ada'}":                "is not a Slack id",
		"{strict_mention: maybe}":                "is not a boolean",
		"{mention_patterns: [42]}":               "is not a string to YAML 1.1",
		"{dm_top_level_threads_as_sessions: []}": "want a boolean",
	} {
		var tc TenantConfig
		err := yaml.Unmarshal([]byte(setting), &tc)
		if err == nil {
			_, err = newPolicy(tc, false)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", setting, err, want)
		}
	}
}

// TestSlackPolicyDefaults: the native defaults, and the spellings of the
// list and boolean knobs.
func TestSlackPolicyDefaults(t *testing.T) {
	def := defaultPolicy(false)
	if !def.requireMention || !def.replyInThread || !def.dmTopLevelThreads || def.allowBots != AllowBotsNone ||
		def.strictMention || def.disableDMs || def.allowedChannels != nil || def.allowedUsers != nil {
		t.Fatalf("defaults %+v", def)
	}
	var tc TenantConfig
	doc := `{require_mention: "off", free_response_channels: "C01, C02", ignored_channels: ["*"], allow_bots: " Mentions ",
		allowed_users: [U01], reply_in_thread: no, disable_dms: 1, mention_patterns: "\\bhermes\\b"}`
	if err := yaml.Unmarshal([]byte(doc), &tc); err != nil {
		t.Fatal(err)
	}
	pol, err := newPolicy(tc, false)
	if err != nil {
		t.Fatal(err)
	}
	if pol.requireMention || !pol.freeResponse["C01"] || !pol.freeResponse["C02"] || !pol.ignoreAll || pol.allowBots != AllowBotsMentions ||
		!pol.allowedUsers["U01"] || pol.replyInThread || !pol.disableDMs || !pol.mentionPattern("Hey HERMES, go") {
		t.Fatalf("policy %+v", pol)
	}
	if !pol.admits("U01") || pol.admits("U02") {
		t.Fatal("allowed_users does not restrict")
	}
	if all, _ := newPolicy(tc, true); all.allowedUsers != nil {
		t.Fatal("slack.allow_all_users does not lift allowed_users")
	}
}

// TestConfigRefusesATokenList: the native SLACK_BOT_TOKEN may list
// several workspaces' tokens, comma-separated; bot_token takes one (more
// workspaces install through OAuth), so a list is refused at load, naming
// the key and no token, rather than sent to Slack as one token.
func TestConfigRefusesATokenList(t *testing.T) {
	for _, token := range []string{teamA.Token + "," + teamB.Token, teamA.Token + ", " + teamB.Token, teamA.Token + " " + teamB.Token} {
		err := Config{SigningSecret: testSecret, BotToken: token}.Validate()
		if err == nil || !strings.Contains(err.Error(), "slack.bot_token") || strings.Contains(err.Error(), teamB.Token) {
			t.Fatalf("bot_token %q: %v", token, err)
		}
	}
}

// TestConfigRefusesAShortDedupeWindow: a signed request is accepted for
// signatureWindow, so a dedupe_window below it would let a captured one be
// replayed once the dedupe forgets it; Validate refuses it, naming the key.
func TestConfigRefusesAShortDedupeWindow(t *testing.T) {
	for _, w := range []time.Duration{time.Second, signatureWindow - time.Second} {
		err := Config{SigningSecret: testSecret, BotToken: teamA.Token, DedupeWindow: w}.Validate()
		if err == nil || !strings.Contains(err.Error(), "slack.dedupe_window") {
			t.Fatalf("dedupe_window %v: %v", w, err)
		}
	}
	for _, w := range []time.Duration{0, signatureWindow, time.Hour} {
		if err := (Config{SigningSecret: testSecret, BotToken: teamA.Token, DedupeWindow: w}).Validate(); err != nil {
			t.Fatalf("dedupe_window %v refused: %v", w, err)
		}
	}
}
