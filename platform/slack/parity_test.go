package slack

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"connector/internal/doctabletest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/slack/slacktest"
)

// slackParityCase is one row of docs/settings-parity.md's Slack table:
// tenant t1's slack.tenants entry as YAML, exactly as the row writes it,
// and the probes, run in order, with what must become of each; or the
// start of the error the settings must be refused with.
type slackParityCase struct {
	knob    string
	setting string
	probes  [][2]string
	err     string
}

var slackParity = []slackParityCase{
	{"require_mention", "{}", [][2]string{{"plain@chan", "drop:mention_required"}, {"mention@chan", "group thread=self"}, {"plain@thread", "drop:mention_required"}, {"plain@botthread", "group thread=root"}, {"plain@mthread", "group thread=root"}, {"plain@mpim", "drop:mention_required"}, {"plain@dm", "dm thread=self"}}, ""},
	{"require_mention", `{require_mention: "off"}`, [][2]string{{"plain@chan", "group thread=self"}, {"plain@thread", "group thread=root"}, {"plain@mpim", "dm thread=self"}}, ""},
	{"require_mention", "{require_mention: maybe}", nil, `require_mention: "maybe" is not a boolean`},
	{"strict_mention", "{strict_mention: true}", [][2]string{{"plain@botthread", "drop:strict_mention"}, {"plain@mthread", "drop:strict_mention"}, {"mention@thread", "group thread=root"}, {"plain@thread", "drop:strict_mention"}}, ""},
	{"strict_mention", "{strict_mention: true, free_response_channels: C0FREE0001}", [][2]string{{"plain@free", "group thread=self"}}, ""},
	{"thread_require_mention", "{thread_require_mention: true, free_response_channels: C0FREE0001}", [][2]string{{"plain@free", "group thread=self"}, {"plain@freethread", "drop:thread_require_mention"}, {"mention@freethread", "group thread=root"}, {"plain@botthread", "drop:thread_require_mention"}}, ""},
	{"ignore_other_user_mentions", "{ignore_other_user_mentions: true, require_mention: false}", [][2]string{{"other@chan", "drop:addressed_to_other_user"}, {"plain@chan", "group thread=self"}, {"otherthenbot@chan", "group thread=self"}}, ""},
	{"disable_dms", "{disable_dms: yes}", [][2]string{{"plain@dm", "drop:dms_disabled"}, {"mention@mpim", "drop:dms_disabled"}, {"mention@chan", "group thread=self"}}, ""},
	{"free_response_channels", `{free_response_channels: "C0FREE0001"}`, [][2]string{{"plain@free", "group thread=self"}, {"plain@chan", "drop:mention_required"}}, ""},
	{"free_response_channels", `{free_response_channels: "*"}`, nil, `"*" is not a wildcard in this list`},
	{"free_response_channels", `{free_response_channels: "<#C0FREE0001>"}`, nil, "is mention or name syntax"},
	{"require_mention_channels", "{require_mention: false, require_mention_channels: [C0GEN00001]}", [][2]string{{"plain@chan", "drop:mention_required"}, {"plain@free", "group thread=self"}}, ""},
	{"allowed_channels", "{allowed_channels: C0FREE0001}", [][2]string{{"mention@chan", "drop:channel_not_allowed"}, {"mention@free", "group thread=self"}, {"plain@dm", "dm thread=self"}}, ""},
	{"allowed_channels", "{allowed_channels: general}", nil, "is not a Slack id"},
	{"ignored_channels", "{ignored_channels: C0GEN00001}", [][2]string{{"mention@chan", "drop:channel_ignored"}, {"mention@free", "group thread=self"}}, ""},
	{"ignored_channels", `{ignored_channels: "*"}`, [][2]string{{"plain@dm", "drop:channel_ignored"}}, ""},
	{"mention_patterns", `{mention_patterns: "\\bhermes\\b"}`, [][2]string{{"say(Hey HERMES, status?)@chan", "group thread=self"}, {"say(hermesbot)@chan", "drop:mention_required"}}, ""},
	{"mention_patterns", `{mention_patterns: ["(?<=x)hermes"]}`, nil, "Go's regexp cannot compile it"},
	{"allow_bots", "{}", [][2]string{{"bot@chan", "drop:bot_sender"}, {"botmention@chan", "drop:bot_sender"}}, ""},
	{"allow_bots", "{allow_bots: mentions}", [][2]string{{"bot@chan", "drop:bot_sender"}, {"botmention@chan", "group thread=self"}}, ""},
	{"allow_bots", "{allow_bots: all, require_mention: false}", [][2]string{{"bot@chan", "group thread=self"}}, ""},
	{"allow_bots", "{allow_bots: some}", nil, `allow_bots: "some" is not one of none, mentions, all`},
	{"api_human_users", "{}", [][2]string{{"app@chan", "drop:bot_sender"}}, ""},
	{"api_human_users", "{api_human_users: U0CAR00003}", [][2]string{{"app@chan", "group thread=self"}}, ""},
	{"reply_in_thread", "{reply_in_thread: false}", [][2]string{{"mention@chan", "group thread=none"}, {"mention@thread", "group thread=root"}}, ""},
	{"reply_in_thread", `{reply_in_thread: "false"}`, nil, "want a YAML boolean"},
	{"dm_top_level_threads_as_sessions", "{dm_top_level_threads_as_sessions: false}", [][2]string{{"plain@dm", "dm thread=none"}, {"plain@dmthread", "dm thread=root"}}, ""},
	{"allowed_users", "{allowed_users: U0ADA00001}", [][2]string{{"carol@chan", "drop:user_not_allowed"}, {"mention@chan", "group thread=self"}}, ""},
	{"allowed_users", `{allowed_users: "*"}`, [][2]string{{"carol@chan", "group thread=self"}}, ""},
	{"allowed_users", "{allowed_users: '@ada'}", nil, "is not a Slack id"},
	{"allow_all_users", "{allowed_users: U0ADA00001, allow_all_users: true}", [][2]string{{"carol@chan", "group thread=self"}}, ""},
	{"reply_broadcast", "{reply_broadcast: true}", [][2]string{{"send@thread", "posted broadcast=true"}}, ""},
	{"reply_broadcast", "{}", [][2]string{{"send@thread", "posted"}}, ""},
	{"unfurl_links", "{unfurl_links: false, unfurl_media: false}", [][2]string{{"send@thread", "posted unfurl_links=false unfurl_media=false"}}, ""},
	{"reaction_triggers", "{}", [][2]string{{"react(thumbsup)@bot", "drop:reaction_routing_disabled"}}, ""},
	{"reaction_triggers", "{reaction_triggers: true}", [][2]string{{"react(thumbsup)@bot", "group thread=root"}, {"react(thumbsup)@ada", "drop:reaction_not_on_bot_message"}, {"botreact(eyes)@bot", "drop:reaction_by_bot"}}, ""},
	{"reaction_triggers", `{reaction_triggers: "eyes, :tada:"}`, [][2]string{{"react(tada)@ada", "group thread=root"}, {"react(thumbsup)@bot", "drop:reaction_not_a_trigger"}}, ""},
	{"reaction_triggers", `{reaction_triggers: "off"}`, [][2]string{{"react(thumbsup)@bot", "drop:reaction_routing_disabled"}}, ""},
	{"reaction_trigger_target", "{reaction_triggers: true, reaction_trigger_target: C0FREE0001}", [][2]string{{"react(thumbsup)@bot", "group thread=none"}}, ""},
	{"reaction_trigger_target", "{reaction_triggers: true, reaction_trigger_target: C0ACME0001}", [][2]string{{"react(thumbsup)@bot", "drop:reaction_target_not_owned"}}, ""},
	{"reaction_trigger_target", "{reaction_trigger_target: general}", nil, "is not a Slack id"},
}

// Parity world: besides the fixture world, a free channel, a group DM,
// Carol, another bot, and three threads in general: one Ada started, one
// the bot started, one whose root mentions the bot.
const (
	parityFree   = "C0FREE0001"
	parityMPIM   = "G0MPIM0001"
	parityCarol  = "U0CAR00003"
	parityRoot   = "1768400000.000100"
	parityBotTS  = "1768400000.000200"
	parityMRoot  = "1768400000.000300"
	parityFreeTS = "1768400000.000400"
	parityDMRoot = "1768400000.000500"
)

// parityProbe is the message event of probe "<kind>@<where>", with ts.
func parityProbe(t *testing.T, probe, ts string) map[string]any {
	kind, where, ok := strings.Cut(probe, "@")
	if !ok {
		t.Fatalf("probe %q", probe)
	}
	if name, ok := strings.CutPrefix(kind, "react("); ok || strings.HasPrefix(kind, "botreact(") {
		return parityReaction(t, kind, strings.TrimSuffix(name, ")"), where, ts)
	}
	channel, thread := chanGeneral, ""
	switch where {
	case "chan":
	case "free":
		channel = parityFree
	case "thread":
		thread = parityRoot
	case "botthread":
		thread = parityBotTS
	case "mthread":
		thread = parityMRoot
	case "freethread":
		channel, thread = parityFree, parityFreeTS
	case "mpim":
		channel = parityMPIM
	case "dm":
		channel = dmAda
	case "dmthread":
		channel, thread = dmAda, parityDMRoot
	default:
		t.Fatalf("probe %q: where", probe)
	}
	bot := "<@" + teamA.BotUser + ">"
	user, text := userAda, "status?"
	extra := map[string]any{}
	switch {
	case kind == "plain":
	case kind == "mention":
		text = bot + " status?"
	case kind == "other":
		text = "<@" + parityCarol + "> can you check?"
	case kind == "otherthenbot":
		text = "<@" + parityCarol + "> and " + bot + " look"
	case kind == "carol":
		user, text = parityCarol, bot+" status?"
	case kind == "bot", kind == "botmention":
		user = ""
		extra["bot_id"], extra["subtype"], extra["username"] = "B0OTHER001", "bot_message", "deploybot"
		if kind == "botmention" {
			text = bot + " deployed"
		}
	case kind == "app":
		user, text = parityCarol, bot+" status?"
		extra["app_id"] = "A0APP00001"
	case strings.HasPrefix(kind, "say(") && strings.HasSuffix(kind, ")"):
		text = kind[4 : len(kind)-1]
	default:
		t.Fatalf("probe %q: kind", probe)
	}
	ev := slacktest.MessageEvent(teamA.ID, channel, user, ts, thread, text)
	if channel == parityMPIM {
		ev["channel_type"] = "mpim"
	}
	if user == "" {
		delete(ev, "user")
	}
	if kind == "bot" || kind == "botmention" || kind == "app" {
		delete(ev, "client_msg_id")
	}
	for k, v := range extra {
		ev[k] = v
	}
	return ev
}

// parityReaction is the reaction probe "react(<name>)@<bot|ada>" (Ada's
// reaction to the bot's thread root or to hers), or
// "botreact(<name>)@..." (the bot's own).
func parityReaction(t *testing.T, kind, name, where, ts string) map[string]any {
	reactor := userAda
	if rest, ok := strings.CutPrefix(kind, "botreact("); ok {
		reactor, name = teamA.BotUser, strings.TrimSuffix(rest, ")")
	}
	item, author := parityBotTS, teamA.BotUser
	switch where {
	case "bot":
	case "ada":
		item, author = parityRoot, userAda
	default:
		t.Fatalf("reaction probe %q: where", where)
	}
	return map[string]any{"type": "reaction_added", "user": reactor, "reaction": name, "item_user": author,
		"item": map[string]any{"type": "message", "channel": chanGeneral, "ts": item}, "event_ts": ts}
}

// parityOutcome writes what became of a probe: "<chat_type> thread=<self
// (the message's own ts), root (its thread's), none>" or "drop:<reason>".
func parityOutcome(d *platform.Delivery, ts, drop string) string {
	if d == nil {
		if drop == "" {
			return "nothing"
		}
		return "drop:" + drop
	}
	src := d.Event.Source
	thread := "none"
	switch src.ThreadID.Value {
	case "":
	case ts:
		thread = "self"
	default:
		thread = "root"
	}
	return src.ChatType + " thread=" + thread
}

var postedForm = regexp.MustCompile(`^send@thread$`)

// TestSlackSettingsParity runs every row of the Slack table in
// docs/settings-parity.md: tenant t1's settings are read from YAML
// exactly as the row writes them and checked, and each probe goes
// through signed live ingest (normalization, the tenant's gates,
// delivery) or, for send, egress.
func TestSlackSettingsParity(t *testing.T) {
	for _, c := range slackParity {
		t.Run(c.knob+" "+c.setting, func(t *testing.T) {
			var tc TenantConfig
			err := yaml.Unmarshal([]byte(c.setting), &tc)
			cfg := Config{SigningSecret: testSecret, BotToken: teamA.Token, Tenants: map[string]TenantConfig{"t1": tc}}
			if err == nil {
				err = cfg.Validate()
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
			drops := &platformtest.LastDrop{}
			e := newEnv(t, func(cfg *Config) { cfg.Tenants["t1"] = tc }, &platform.Deps{Metrics: drops})
			e.fake.AddChannel(teamA.ID, slacktest.Channel{ID: parityFree, Name: "free"})
			e.fake.AddChannel(teamA.ID, slacktest.Channel{ID: parityMPIM, Name: "mpdm-ada--carol-1", IsMPIM: true})
			e.fake.AddUser(teamA.ID, slacktest.User{ID: parityCarol, Name: "carol", RealName: "Carol"})
			e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: parityRoot, User: userAda, Text: "a plan"})
			e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: parityBotTS, User: teamA.BotUser, BotID: teamA.BotID, Text: "daily digest"})
			e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: parityMRoot, User: userAda, Text: "<@" + teamA.BotUser + "> look"})
			e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: parityFree, TS: parityFreeTS, User: userAda, Text: "free talk"})
			e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: dmAda, TS: parityDMRoot, User: userAda, Text: "earlier"})
			drops.Take()
			for i, probe := range c.probes {
				ts := fmt.Sprintf("1768490300.%06d", (i+1)*100)
				var got string
				if postedForm.MatchString(probe[0]) {
					got = paritySend(t, e)
				} else {
					e.event(t, teamA, fmt.Sprintf("EvP%d", i), parityProbe(t, probe[0], ts), http.StatusOK)
					e.settled(t)             // a thread reply is handled after its 200, from the intake
					var d *platform.Delivery // delivered by now, if at all
					if got, ok := e.sink.TryNext(); ok {
						d = &got
					}
					got = parityOutcome(d, ts, drops.Take())
				}
				if got != probe[1] {
					t.Errorf("probe %d %s: %s, want %s", i+1, probe[0], got, probe[1])
				}
			}
		})
	}
}

// paritySend sends a reply into Ada's thread for t1 and writes what the
// chat.postMessage call carried of the reply knobs.
func paritySend(t *testing.T, e *env) string {
	t.Helper()
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"`+chanGeneral+`","content":"done","metadata":{"thread_id":"`+parityRoot+`"}}`); !r.Success {
		t.Fatalf("send: %+v", r)
	}
	f := e.lastCall(t, "chat.postMessage").Form
	out := []string{"posted"}
	if v := f.Get("reply_broadcast"); v != "" {
		out = append(out, "broadcast="+v)
	}
	for _, k := range []string{"unfurl_links", "unfurl_media"} {
		if v := f.Get(k); v != "" {
			out = append(out, k+"="+v)
		}
	}
	return strings.Join(out, " ")
}

// TestSlackSettingsParityDocInSync fails when the Slack table of
// docs/settings-parity.md and slackParity name different rows.
func TestSlackSettingsParityDocInSync(t *testing.T) {
	rows, err := doctabletest.Rows("../../docs/settings-parity.md", "## Slack")
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
	for _, c := range slackParity {
		cases = append(cases, c.knob+" "+c.setting)
	}
	if !slices.Equal(doc, cases) {
		t.Fatalf("docs/settings-parity.md Slack rows and slackParity differ:\ndoc:   %q\ncases: %q", doc, cases)
	}
}
