package discord

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bwmarrin/discordgo"
	"go.yaml.in/yaml/v3"

	"connector/internal/doctabletest"
)

// parityWorld is the guild the parity cases run in: text channels general
// (101) and random (102), thread "Deploy plan" (103) under general, thread
// "Ops" (104) under random that the bot takes part in, and a DM (301). The
// bot is 9000; ada (501) has no roles, cy (503) holds role 700; 777 is
// another bot.
func parityWorld() *fixtureLookup {
	return &fixtureLookup{
		chans: map[string]chanInfo{
			"101": {ID: "101", Type: discordgo.ChannelTypeGuildText, GuildID: "100", Name: "general"},
			"102": {ID: "102", Type: discordgo.ChannelTypeGuildText, GuildID: "100", Name: "random"},
			"103": {ID: "103", Type: discordgo.ChannelTypeGuildPublicThread, GuildID: "100", Name: "Deploy plan", ParentID: "101"},
			"104": {ID: "104", Type: discordgo.ChannelTypeGuildPublicThread, GuildID: "100", Name: "Ops", ParentID: "102"},
			"301": {ID: "301", Type: discordgo.ChannelTypeDM},
		},
		guilds: map[string]string{"100": "Lab"},
		joined: "104",
	}
}

// parityMessage builds a MESSAGE_CREATE body from a probe name
// "<kind>@<channel>": plain (no mention), mention (mentions the bot),
// others (mentions the human 502), otherbot (mentions the bot 888), role
// (cy, role 700, mentions the bot), bot (author 777, no mention), botping
// (author 777, the bot only in mentions, as a reply ping), botinline
// (author 777, a literal <@9000>).
func parityMessage(t *testing.T, probe string) *wireMessage {
	t.Helper()
	kind, channel, ok := strings.Cut(probe, "@")
	if !ok {
		t.Fatalf("probe %q: want kind@channel", probe)
	}
	m := map[string]any{"id": "6001", "channel_id": channel, "type": 0, "content": "hi",
		"author": map[string]any{"id": "501", "username": "ada"}}
	if channel != "301" {
		m["guild_id"] = "100"
		m["member"] = map[string]any{"roles": []any{}}
	}
	bot := map[string]any{"id": "9000", "username": "hermes", "bot": true}
	switch kind {
	case "plain":
	case "mention":
		m["mentions"], m["content"] = []any{bot}, "<@9000> hi"
	case "others":
		m["mentions"], m["content"] = []any{map[string]any{"id": "502", "username": "bo"}}, "<@502> look"
	case "otherbot":
		m["mentions"], m["content"] = []any{map[string]any{"id": "888", "username": "helper", "bot": true}}, "<@888> look"
	case "role":
		m["author"] = map[string]any{"id": "503", "username": "cy"}
		m["member"] = map[string]any{"roles": []any{"700"}}
		m["mentions"], m["content"] = []any{bot}, "<@9000> hi"
	case "bot", "botping", "botinline":
		m["author"] = map[string]any{"id": "777", "username": "otherbot", "bot": true}
		if kind == "botping" {
			m["mentions"] = []any{bot}
		}
		if kind == "botinline" {
			m["mentions"], m["content"] = []any{bot}, "<@9000> hi"
		}
	default:
		t.Fatalf("probe %q: unknown kind", probe)
	}
	raw, _ := json.Marshal(m)
	var w wireMessage
	if err := json.Unmarshal(raw, &w); err != nil {
		t.Fatal(err)
	}
	return &w
}

// outcome names what the connector made of a message: "group", "dm",
// "in-thread" (a turn in an existing thread), "auto-thread" (a thread it
// started), or "drop:<reason>".
func outcome(tr *turn, err error) string {
	if err != nil {
		return "drop:" + dropReason(err)
	}
	switch s := tr.ev.Source; {
	case s.AutoThreadCreated:
		return "auto-thread"
	case s.ChatType == "thread":
		return "in-thread"
	default:
		return string(s.ChatType)
	}
}

// parityCase is one row of docs/settings-parity.md's Discord table: a
// knob, the tenant settings as YAML (exactly as the row writes them), and
// what the connector must do with each probe message, or the start of the
// config error it must refuse the settings with.
type parityCase struct {
	knob    string
	setting string
	probes  map[string]string
	err     string
}

var discordParity = []parityCase{
	{"free_response_channels", "{free_response_channels: 101}", map[string]string{"plain@101": "group", "plain@102": "drop:not_mentioned"}, ""},
	{"free_response_channels", `{free_response_channels: "101,102"}`, map[string]string{"plain@101": "group", "plain@102": "group"}, ""},
	{"free_response_channels", `{free_response_channels: [101, " 102 "]}`, map[string]string{"plain@101": "group", "plain@102": "group"}, ""},
	{"free_response_channels", `{free_response_channels: ["101,102"]}`, map[string]string{"plain@101": "group", "plain@102": "group"}, ""},
	{"free_response_channels", "{free_response_channels: [0x65, 1_02]}", map[string]string{"plain@101": "group", "plain@102": "group"}, ""},
	{"free_response_channels", `{free_response_channels: "*"}`, map[string]string{"plain@102": "group", "plain@103": "in-thread"}, ""},
	{"free_response_channels", "{free_response_channels: general}", map[string]string{"plain@101": "group", "plain@102": "drop:not_mentioned"}, ""},
	{"free_response_channels", `{free_response_channels: "#general"}`, map[string]string{"plain@101": "group"}, ""},
	{"free_response_channels", "{free_response_channels: General}", map[string]string{"plain@101": "drop:not_mentioned"}, ""},
	{"free_response_channels", "{free_response_channels: [101]}", map[string]string{"plain@103": "in-thread", "others@101": "group", "mention@101": "group"}, ""},
	{"free_response_channels", `{free_response_channels: "Deploy plan"}`, map[string]string{"plain@103": "in-thread", "plain@101": "drop:not_mentioned"}, ""},
	{"free_response_channels", `{free_response_channels: "<#101>"}`, nil, "free_response_channels: \"<#101>\" is mention syntax"},
	{"no_thread_channels", "{no_thread_channels: 101}", map[string]string{"mention@101": "group", "mention@102": "auto-thread"}, ""},
	{"no_thread_channels", `{no_thread_channels: "general,102"}`, map[string]string{"mention@101": "group", "mention@102": "group"}, ""},
	{"no_thread_channels", `{no_thread_channels: "*"}`, map[string]string{"mention@101": "auto-thread"}, ""},
	{"allowed_channels", "{allowed_channels: 101}", map[string]string{"mention@101": "auto-thread", "mention@103": "in-thread", "mention@102": "drop:channel_not_allowed", "plain@301": "dm"}, ""},
	{"allowed_channels", `{allowed_channels: "*"}`, map[string]string{"mention@102": "auto-thread"}, ""},
	{"ignored_channels", "{ignored_channels: [general]}", map[string]string{"mention@101": "drop:channel_ignored", "mention@103": "drop:channel_ignored", "mention@102": "auto-thread", "plain@301": "dm"}, ""},
	{"ignored_channels", `{ignored_channels: "*", allowed_channels: 101}`, map[string]string{"mention@101": "drop:channel_ignored"}, ""},
	{"require_mention", "{}", map[string]string{"plain@101": "drop:not_mentioned", "mention@101": "auto-thread", "plain@104": "in-thread", "plain@301": "dm"}, ""},
	{"require_mention", "{require_mention: off}", map[string]string{"plain@102": "auto-thread"}, ""},
	{"require_mention", `{require_mention: "0", auto_thread: "no"}`, map[string]string{"plain@102": "group"}, ""},
	{"require_mention", `{require_mention: "maybe"}`, nil, "discord tenant setting require_mention: \"maybe\" is not a boolean"},
	{"auto_thread", "{auto_thread: 0}", map[string]string{"mention@101": "group"}, ""},
	{"auto_thread", `{auto_thread: " ON "}`, map[string]string{"mention@101": "auto-thread", "mention@104": "in-thread"}, ""},
	{"thread_require_mention", "{thread_require_mention: true}", map[string]string{"plain@104": "drop:not_mentioned", "mention@104": "in-thread"}, ""},
	{"ignore_no_mention", "{require_mention: false}", map[string]string{"others@102": "drop:mentions_others", "others@101": "drop:mentions_others"}, ""},
	{"ignore_no_mention", "{require_mention: false, ignore_no_mention: false}", map[string]string{"others@102": "auto-thread", "otherbot@102": "drop:mentions_other_bots"}, ""},
	{"ignore_no_mention", `{require_mention: false, ignore_no_mention: "on"}`, map[string]string{"others@102": "auto-thread"}, ""},
	{"ignore_no_mention", `{require_mention: false, ignore_no_mention: "YES"}`, map[string]string{"others@102": "drop:mentions_others"}, ""},
	{"allow_bots", "{}", map[string]string{"botinline@101": "drop:bot_author"}, ""},
	{"allow_bots", "{allow_bots: ALL}", map[string]string{"botinline@101": "auto-thread", "bot@101": "drop:not_mentioned"}, ""},
	{"allow_bots", `{allow_bots: " Mentions "}`, map[string]string{"botping@101": "auto-thread", "bot@101": "drop:bot_author"}, ""},
	{"allow_bots", "{allow_bots: all, allowed_users: [42]}", map[string]string{"botinline@101": "auto-thread", "mention@101": "drop:user_not_allowed"}, ""},
	{"allow_bots", "{allow_bots: false}", nil, "discord tenant setting allow_bots: \"false\" is a YAML boolean"},
	{"allow_bots", "{allow_bots: some}", nil, "allow_bots: want none, all or mentions"},
	{"bots_require_inline_mention", "{allow_bots: mentions, bots_require_inline_mention: yes}", map[string]string{"botping@101": "drop:bot_not_inline_mentioned", "botinline@101": "auto-thread"}, ""},
	{"allowed_users", "{allowed_users: 501}", map[string]string{"mention@101": "auto-thread", "role@101": "drop:user_not_allowed", "plain@301": "dm"}, ""},
	{"allowed_users", `{allowed_users: "<@501>, <@!42>"}`, map[string]string{"mention@101": "auto-thread"}, ""},
	{"allowed_users", `{allowed_users: ["user:501", "USER:42"]}`, map[string]string{"mention@101": "auto-thread"}, ""},
	{"allowed_users", `{allowed_users: "*", allowed_roles: 1}`, map[string]string{"role@101": "auto-thread", "mention@101": "auto-thread"}, ""},
	{"allowed_users", "{allowed_users: ada}", nil, "allowed_users: \"ada\" is not a Discord user id"},
	{"allowed_roles", "{allowed_roles: 700}", map[string]string{"role@101": "auto-thread", "mention@101": "drop:user_not_allowed", "plain@301": "drop:user_not_allowed"}, ""},
	{"allowed_roles", `{allowed_roles: "0700"}`, map[string]string{"role@101": "auto-thread"}, ""},
	{"allowed_roles", "{allowed_roles: 0700}", map[string]string{"role@101": "drop:user_not_allowed"}, ""},
	{"allowed_roles", "{allowed_roles: [01274]}", map[string]string{"role@101": "auto-thread"}, ""},
	{"allowed_roles", `{allowed_roles: "<@&700>"}`, nil, "allowed_roles: \"<@&700>\" is not a Discord role id"},
	{"voice_linked_text_channels", "{voice_linked_text_channels: 102}", map[string]string{"plain@102": "group", "mention@102": "group", "plain@104": "in-thread"}, ""},
}

// TestSettingsParity runs every row of the Discord table in
// docs/settings-parity.md: the settings are read from YAML exactly as the
// row writes them, checked, and every probe message must come out as the
// row says (or the settings must be refused with the row's error).
func TestSettingsParity(t *testing.T) {
	t.Parallel()
	for _, c := range discordParity {
		t.Run(c.knob+" "+c.setting, func(t *testing.T) {
			var tc TenantConfig
			err := yaml.Unmarshal([]byte(c.setting), &tc)
			if err == nil {
				err = tc.validate()
			}
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("settings refused: %v", err)
			}
			n := &normalizer{look: parityWorld(), botID: "9000", pol: newPolicy(tc), startThread: threadFromMessage}
			for _, probe := range slices.Sorted(func(yield func(string) bool) {
				for p := range c.probes {
					if !yield(p) {
						return
					}
				}
			}) {
				got := outcome(n.message(context.Background(), parityMessage(t, probe), false))
				if want := c.probes[probe]; got != want {
					t.Errorf("%s: %s, want %s", probe, got, want)
				}
			}
		})
	}
}

// TestSettingsParityDocInSync fails when the Discord table of
// docs/settings-parity.md and discordParity name different rows: each
// row's knob and YAML must be a case, in the same order.
func TestSettingsParityDocInSync(t *testing.T) {
	t.Parallel()
	rows, err := doctabletest.Rows("../../docs/settings-parity.md", "## Discord")
	if err != nil {
		t.Fatal(err)
	}
	var doc, cases []string
	for _, r := range rows {
		if len(r) != 4 {
			t.Fatalf("row %q: want 4 cells (knob, setting, native, connector)", r)
		}
		doc = append(doc, doctabletest.Code(r[0])+" "+doctabletest.Code(r[1]))
	}
	for _, c := range discordParity {
		cases = append(cases, c.knob+" "+c.setting)
	}
	if !slices.Equal(doc, cases) {
		t.Fatalf("docs/settings-parity.md Discord rows and discordParity differ:\ndoc:   %q\ncases: %q", doc, cases)
	}
}

// TestTenantKnobsCoverFields keeps tenantKnobs and TenantConfig's yaml
// tags the same set, so no key is documented but unreadable or readable
// but undocumented.
func TestTenantKnobsCoverFields(t *testing.T) {
	t.Parallel()
	var tags []string
	rt := reflect.TypeFor[TenantConfig]()
	for i := range rt.NumField() {
		tags = append(tags, rt.Field(i).Tag.Get("yaml"))
	}
	var knobs []string
	for k := range tenantKnobs {
		knobs = append(knobs, k)
	}
	slices.Sort(tags)
	slices.Sort(knobs)
	if !slices.Equal(tags, knobs) {
		t.Fatalf("yaml tags %q, readers %q", tags, knobs)
	}
}

// TestTenantSettingsErrors: unknown keys and wrong shapes are refused with
// the line and the key.
func TestTenantSettingsErrors(t *testing.T) {
	t.Parallel()
	for setting, want := range map[string]string{
		"{free_respons_channels: 101}":        "line 1: field free_respons_channels not found in type discord.TenantConfig",
		"{free_response_channels: {a: 1}}":    "discord tenant setting free_response_channels: want a list",
		"{free_response_channels: [[101]]}":   "want a list of ids or names",
		"{auto_thread: [true]}":               "discord tenant setting auto_thread: want a boolean",
		"{weight: many}":                      "weight",
		"[1, 2]":                              "want a mapping",
		"{voice_linked_text_channels: lobby}": "",
	} {
		var tc TenantConfig
		err := yaml.Unmarshal([]byte(setting), &tc)
		if err == nil {
			err = tc.validate()
		}
		if want == "" {
			want = "voice_linked_text_channels: \"lobby\" is not a Discord channel id"
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", setting, err, want)
		}
	}
	var tc TenantConfig
	if err := yaml.Unmarshal([]byte("null"), &tc); err != nil || !reflect.DeepEqual(tc, TenantConfig{}) {
		t.Errorf("null settings: %+v %v", tc, err)
	}
}

// FuzzTenantSettings: any YAML is read without a panic, and settings that
// are read and validated build a policy.
func FuzzTenantSettings(f *testing.F) {
	for _, c := range discordParity {
		f.Add(c.setting)
	}
	f.Add("{allowed_users: '<@!>', allowed_roles: '+1'}")
	f.Fuzz(func(t *testing.T, setting string) {
		var tc TenantConfig
		if yaml.Unmarshal([]byte(setting), &tc) != nil || tc.validate() != nil {
			return
		}
		if p := newPolicy(tc); p == nil {
			t.Fatalf("no policy for %q", setting)
		}
	})
}

// TestFlagSpellings: a plain YAML 1.1 boolean word is a boolean; the same
// word quoted or tagged !!str follows the knob's variable rule.
func TestFlagSpellings(t *testing.T) {
	t.Parallel()
	for setting, want := range map[string]bool{
		"{ignore_no_mention: on}":       true,
		"{ignore_no_mention: 'on'}":     false,
		"{ignore_no_mention: !!str on}": false,
		"{ignore_no_mention: Off}":      false,
		"{ignore_no_mention: 1}":        true,
		"{auto_thread: !!str on}":       true,
		"{auto_thread: \"  No \"}":      false,
		"{auto_thread: TRUE}":           true,
		"auto_thread: |\n  yes\n":       true,
	} {
		var tc TenantConfig
		if err := yaml.Unmarshal([]byte(setting), &tc); err != nil {
			t.Fatalf("%s: %v", setting, err)
		}
		got := tc.IgnoreNoMention
		if strings.Contains(setting, "auto_thread") {
			got = tc.AutoThread
		}
		if got == nil || *got != want {
			t.Errorf("%s: %v, want %v", setting, got, want)
		}
	}
}
