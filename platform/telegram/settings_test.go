package telegram

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"
	"go.yaml.in/yaml/v3"

	"connector/internal/doctabletest"
	"connector/platform"
	"connector/platform/platformtest"
)

// The parity probes run as tenant t1 of testChats against the bot of
// testToken, whose username (as getMe answers) is hermes_bot; other_bot
// (777) is another bot in the same groups.
const (
	parityBotUsername = "hermes_bot"
	otherBotID        = 777
)

// parityUpdate builds the update of a probe "<kind>@<place>". Places:
// group (the group -4001234567, without topics), forum (the General topic
// of the forum -1001112223334, no message_thread_id), forum:<n> (its topic
// n), dm (Ada's private chat 123456789), dm:<n> (a topic of it). Kinds, all
// from Ada unless named: plain "hi"; mention "@hermes_bot hi"; Mention
// "@Hermes_Bot hi"; textmention (the bot named by a text_mention entity);
// command "/status@hermes_bot"; cmd "/status"; othercmd
// "/status@other_bot"; otherbot "@other_bot hi"; both "@other_bot
// @hermes_bot hi"; bare "@other_bot hi" without entities; user "@ada_l
// hi" (a user's handle); reply (a reply to the bot's message); bot (other_bot
// says "hi"); botreply (other_bot replies to the bot); botmention
// (other_bot says "@hermes_bot hi"); say(<text>) (that text, no entities);
// photo(<caption>) (a photo with that caption).
func parityUpdate(t testing.TB, probe string, updateID int) *models.Update {
	t.Helper()
	var u models.Update
	if err := decodeUpdate(parityRaw(t, probe, updateID), &u); err != nil {
		t.Fatal(err)
	}
	return &u
}

// parityRaw is the JSON of parityUpdate.
func parityRaw(t testing.TB, probe string, updateID int) []byte {
	t.Helper()
	at := strings.LastIndex(probe, "@")
	if at < 0 {
		t.Fatalf("probe %q: want <kind>@<place>", probe)
	}
	kind, place := probe[:at], probe[at+1:]
	botID, _, _ := strings.Cut(testToken, ":")
	ada := map[string]any{"id": 123456789, "is_bot": false, "first_name": "Ada"}
	hermes := map[string]any{"id": json.Number(botID), "is_bot": true, "first_name": "Hermes", "username": parityBotUsername}
	other := map[string]any{"id": otherBotID, "is_bot": true, "first_name": "Helper", "username": "other_bot"}
	msg := map[string]any{"message_id": 40 + updateID, "date": 1760000000, "from": ada, "text": "hi"}
	where, thread, _ := strings.Cut(place, ":")
	switch where {
	case "group":
		msg["chat"] = map[string]any{"id": -4001234567, "type": "group", "title": "Book Club"}
	case "forum":
		msg["chat"] = map[string]any{"id": -1001112223334, "type": "supergroup", "title": "Dev Forum", "is_forum": true}
	case "dm":
		msg["chat"] = map[string]any{"id": 123456789, "type": "private", "first_name": "Ada"}
	default:
		t.Fatalf("probe %q: unknown place", probe)
	}
	if thread != "" {
		msg["message_thread_id"] = json.Number(thread)
		msg["is_topic_message"] = true
	}
	entity := func(typ string, offset, length int) map[string]any {
		return map[string]any{"type": typ, "offset": offset, "length": length}
	}
	say := func(text string, entities ...map[string]any) {
		msg["text"] = text
		if len(entities) > 0 {
			msg["entities"] = entities
		}
	}
	replyToBot := map[string]any{"message_id": 39, "date": 1760000000, "from": hermes, "chat": msg["chat"], "text": "earlier"}
	switch {
	case kind == "plain":
	case kind == "mention":
		say("@hermes_bot hi", entity("mention", 0, 11))
	case kind == "Mention":
		say("@Hermes_Bot hi", entity("mention", 0, 11))
	case kind == "textmention":
		e := entity("text_mention", 0, 6)
		e["user"] = hermes
		say("Hermes hi", e)
	case kind == "command":
		say("/status@hermes_bot", entity("bot_command", 0, 18))
	case kind == "cmd":
		say("/status", entity("bot_command", 0, 7))
	case kind == "othercmd":
		say("/status@other_bot", entity("bot_command", 0, 17))
	case kind == "otherbot":
		say("@other_bot hi", entity("mention", 0, 10))
	case kind == "both":
		say("@other_bot @hermes_bot hi", entity("mention", 0, 10), entity("mention", 11, 11))
	case kind == "bare":
		say("@other_bot hi")
	case kind == "user":
		say("@ada_l hi", entity("mention", 0, 6))
	case kind == "reply":
		msg["reply_to_message"] = replyToBot
	case kind == "bot":
		msg["from"] = other
	case kind == "botreply":
		msg["from"] = other
		msg["reply_to_message"] = replyToBot
	case kind == "botmention":
		msg["from"] = other
		say("@hermes_bot hi", entity("mention", 0, 11))
	case strings.HasPrefix(kind, "say(") && strings.HasSuffix(kind, ")"):
		say(kind[4 : len(kind)-1])
	case strings.HasPrefix(kind, "photo(") && strings.HasSuffix(kind, ")"):
		delete(msg, "text")
		msg["caption"] = kind[6 : len(kind)-1]
		msg["photo"] = []any{map[string]any{"file_id": "p1", "file_unique_id": "u1", "width": 90, "height": 90}}
	default:
		t.Fatalf("probe %q: unknown kind", probe)
	}
	raw, _ := json.Marshal(map[string]any{"update_id": updateID, "message": msg})
	return raw
}

// parityOutcome names what became of a probe: "drop:<reason>", "observed"
// (held back as context), or the delivered source's chat_type followed by
// " topic=<chat_topic>" when it has one, " shared" when it has no user (the
// chat's shared session) and " context=<n>" when it carries context.
func parityOutcome(d *platform.Delivery, drop string) string {
	switch {
	case d == nil && drop == dropObserved:
		return "observed"
	case d == nil:
		return "drop:" + drop
	}
	src := d.Event.Source
	out := src.ChatType
	if src.ChatTopic.Valid {
		out += " topic=" + src.ChatTopic.Value
	}
	if !src.UserID.Valid {
		out += " shared"
	}
	if n := len(d.Event.Context); n > 0 {
		out += fmt.Sprintf(" context=%d", n)
	}
	return out
}

// telegramParityCase is one row of docs/settings-parity.md's Telegram
// table: the settings as YAML, exactly as the row writes them (the
// telegram section for group_topics and dm_topics, tenant t1's
// telegram.tenants entry for the others), and the probes, run in order,
// with what must become of each; or the start of the error the settings
// must be refused with.
type telegramParityCase struct {
	knob    string
	setting string
	probes  [][2]string
	err     string
}

// topicKnobs are the rows whose YAML is the telegram section itself.
var topicKnobs = map[string]bool{"group_topics": true, "dm_topics": true}

var telegramParity = []telegramParityCase{
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 12, name: Deploys}]}]}", [][2]string{{"plain@forum:12", "group topic=Deploys"}, {"plain@forum:13", "group"}}, ""},
	{"group_topics", `{group_topics: [{chat_id: "-1001112223334", topics: [{thread_id: "12", name: Deploys}]}]}`, [][2]string{{"plain@forum:12", "group topic=Deploys"}}, ""},
	{"group_topics", `{group_topics: {"-1001112223334": [{thread_id: 12, name: Deploys}]}}`, [][2]string{{"plain@forum:12", "group topic=Deploys"}}, ""},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 1, name: Lobby}]}]}", [][2]string{{"plain@forum", "group topic=Lobby"}}, ""},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 5, name: A}]}, {chat_id: -1001112223334, topics: [{thread_id: 12, name: B}]}]}", [][2]string{{"plain@forum:5", "group topic=A"}, {"plain@forum:12", "group"}}, ""},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 12, name: A}, {thread_id: 12, name: B}]}]}", [][2]string{{"plain@forum:12", "group topic=A"}}, ""},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 12}, {name: Orphan}]}]}", [][2]string{{"plain@forum:12", "group"}}, ""},
	{"group_topics", `{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: "012", name: Deploys}]}]}`, nil, `telegram.group_topics[0].topics[0].thread_id: "012": the native adapter compares group thread ids as written`},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 012, name: Deploys}]}]}", [][2]string{{"plain@forum:10", "group topic=Deploys"}, {"plain@forum:12", "group"}}, ""},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 019, name: Deploys}]}]}", nil, `telegram.group_topics[0].topics[0].thread_id: "019": the native adapter compares group thread ids as written, so this never matches; write 19`},
	{"group_topics", `{group_topics: [{chat_id: " -1001112223334", topics: []}]}`, nil, `telegram.group_topics[0].chat_id: " -1001112223334"`},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 12, name: Deploys, skill: deploy}]}]}", nil, "field skill not found"},
	{"dm_topics", "{dm_topics: [{chat_id: 123456789, topics: [{thread_id: 7, name: Notes}]}]}", [][2]string{{"plain@dm:7", "dm topic=Notes"}, {"plain@dm:8", "dm"}}, ""},
	{"dm_topics", `{dm_topics: [{chat_id: 123456789, topics: [{thread_id: " +007 ", name: Notes}]}]}`, [][2]string{{"plain@dm:7", "dm topic=Notes"}}, ""},
	{"dm_topics", "{dm_topics: [{chat_id: 123456789, topics: [{thread_id: 010, name: Notes}]}]}", [][2]string{{"plain@dm:8", "dm topic=Notes"}, {"plain@dm:10", "dm"}}, ""},
	{"dm_topics", "{dm_topics: [{chat_id: 123456789, topics: [{name: Notes}, {thread_id: 7}]}]}", [][2]string{{"plain@dm:7", "dm"}}, ""},
	{"dm_topics", "{dm_topics: [{chat_id: 123456789, topics: [{thread_id: 7, name: Notes}]}, {chat_id: 123456789, topics: [{thread_id: 7, name: Later}, {thread_id: 8, name: Ideas}]}]}", [][2]string{{"plain@dm:7", "dm topic=Notes"}, {"plain@dm:8", "dm topic=Ideas"}}, ""},
	{"exclusive_bot_mentions", "{}", [][2]string{{"otherbot@group", "drop:mentions_other_bots"}, {"othercmd@group", "drop:mentions_other_bots"}, {"bare@group", "drop:mentions_other_bots"}, {"both@group", "group"}, {"user@group", "group"}, {"otherbot@forum:12", "drop:mentions_other_bots"}, {"otherbot@dm", "dm"}}, ""},
	{"exclusive_bot_mentions", `{exclusive_bot_mentions: "0"}`, [][2]string{{"otherbot@group", "group"}}, ""},
	{"exclusive_bot_mentions", `{exclusive_bot_mentions: "nope"}`, nil, `telegram tenant setting exclusive_bot_mentions: "nope" is not a boolean`},
	{"require_mention", "{require_mention: true}", [][2]string{{"plain@group", "drop:not_mentioned"}, {"plain@forum:12", "drop:not_mentioned"}, {"mention@group", "group"}, {"Mention@group", "group"}, {"textmention@group", "group"}, {"command@group", "group"}, {"cmd@group", "drop:not_mentioned"}, {"reply@group", "group"}, {"plain@dm", "dm"}}, ""},
	{"require_mention", `{require_mention: "on"}`, [][2]string{{"plain@group", "drop:not_mentioned"}}, ""},
	{"require_mention", `{require_mention: "maybe"}`, nil, `telegram tenant setting require_mention: "maybe" is not a boolean`},
	{"mention_patterns", `{require_mention: true, mention_patterns: ["\\bhermes\\b"]}`, [][2]string{{"say(Hey Hermes, status?)@group", "group"}, {"say(hermesbot)@group", "drop:not_mentioned"}, {"photo(hermes look)@group", "group"}}, ""},
	{"mention_patterns", `{require_mention: true, mention_patterns: "hermes, athena"}`, [][2]string{{"say(hermes status)@group", "drop:not_mentioned"}, {"say(Hermes, Athena: status)@group", "group"}}, ""},
	{"mention_patterns", "{require_mention: true, mention_patterns: [hermes, 42]}", nil, `telegram tenant setting mention_patterns: [1]: "42" is not a string to YAML 1.1`},
	{"mention_patterns", `{require_mention: true, mention_patterns: ["(?<!x)hermes"]}`, nil, `telegram.tenants["t1"].mention_patterns[0]: "(?<!x)hermes": Go's regexp cannot compile it`},
	{"free_response_chats", "{require_mention: true, free_response_chats: -4001234567}", [][2]string{{"plain@group", "group"}, {"plain@forum:12", "drop:not_mentioned"}}, ""},
	{"free_response_chats", `{require_mention: true, free_response_chats: "-4001234567, -1001112223334"}`, [][2]string{{"plain@group", "group"}, {"plain@forum:12", "group"}}, ""},
	{"free_response_chats", `{require_mention: true, free_response_chats: '["-1001112223334"]'}`, [][2]string{{"plain@forum", "group"}, {"plain@group", "drop:not_mentioned"}}, ""},
	{"free_response_chats", "{free_response_chats: -4001234567}", [][2]string{{"otherbot@group", "drop:mentions_other_bots"}}, ""},
	{"free_response_chats", `{free_response_chats: "*"}`, nil, `telegram.tenants["t1"].free_response_chats: "*" is not a wildcard`},
	{"free_response_chats", `{free_response_chats: "-04001234567"}`, nil, `telegram.tenants["t1"].free_response_chats: "-04001234567": want a non-zero decimal chat id`},
	{"free_response_topics", `{require_mention: true, free_response_topics: "-1001112223334:12"}`, [][2]string{{"plain@forum:12", "group"}, {"plain@forum:13", "drop:not_mentioned"}, {"plain@forum", "drop:not_mentioned"}}, ""},
	{"free_response_topics", `{require_mention: true, free_response_topics: ["-1001112223334:1", "-4001234567:1"]}`, [][2]string{{"plain@forum", "group"}, {"plain@group", "group"}, {"plain@forum:12", "drop:not_mentioned"}}, ""},
	{"free_response_topics", `{free_response_topics: "-1001112223334:012"}`, nil, `telegram.tenants["t1"].free_response_topics: "-1001112223334:012": the native adapter compares group thread ids as written`},
	{"allowed_chats", "{allowed_chats: -1001112223334}", [][2]string{{"plain@group", "drop:chat_not_allowed"}, {"mention@group", "drop:chat_not_allowed"}, {"plain@forum:12", "group"}, {"plain@dm", "dm"}}, ""},
	{"allowed_chats", `{allowed_chats: "*"}`, nil, `telegram.tenants["t1"].allowed_chats: "*" is not a wildcard`},
	{"guest_mode", "{allowed_chats: -1001112223334, guest_mode: true}", [][2]string{{"mention@group", "group"}, {"reply@group", "drop:chat_not_allowed"}, {"plain@group", "drop:chat_not_allowed"}}, ""},
	{"guest_mode", `{guest_mode: "1", require_mention: true}`, [][2]string{{"mention@group", "group"}, {"plain@group", "drop:not_mentioned"}}, ""},
	{"allowed_topics", "{allowed_topics: 12}", [][2]string{{"plain@forum:12", "group"}, {"plain@forum:13", "drop:topic_not_allowed"}, {"plain@forum", "drop:topic_not_allowed"}, {"mention@group", "drop:topic_not_allowed"}, {"plain@dm:7", "dm"}}, ""},
	{"allowed_topics", `{allowed_topics: "1, 12"}`, [][2]string{{"plain@forum", "group"}, {"plain@group", "group"}, {"plain@forum:13", "drop:topic_not_allowed"}}, ""},
	{"allowed_topics", `{allowed_topics: "012"}`, nil, `telegram.tenants["t1"].allowed_topics: "012": the native adapter compares group thread ids as written`},
	{"ignored_threads", `{ignored_threads: "7, 12"}`, [][2]string{{"mention@forum:12", "drop:thread_ignored"}, {"plain@forum:13", "group"}, {"plain@dm:7", "dm"}}, ""},
	{"ignored_threads", `{ignored_threads: " +012 "}`, [][2]string{{"plain@forum:12", "drop:thread_ignored"}}, ""},
	{"ignored_threads", "{ignored_threads: [1]}", [][2]string{{"plain@forum", "drop:thread_ignored"}, {"plain@group", "group"}}, ""},
	{"ignored_threads", "{ignored_threads: [010]}", [][2]string{{"plain@forum:8", "drop:thread_ignored"}, {"plain@forum:10", "group"}}, ""},
	{"ignored_threads", "{ignored_threads: general}", nil, `telegram.tenants["t1"].ignored_threads: "general": want a positive integer`},
	{"bots_require_mention", "{bots_require_mention: true}", [][2]string{{"bot@group", "drop:bot_not_mentioned"}, {"botreply@group", "drop:bot_not_mentioned"}, {"botmention@group", "group"}, {"reply@group", "group"}}, ""},
	{"bots_require_mention", "{bots_require_mention: true, free_response_chats: -4001234567}", [][2]string{{"bot@group", "group"}}, ""},
	{"observe_unmentioned_group_messages", "{require_mention: true, observe_unmentioned_group_messages: true, group_allowed_chats: -4001234567}", [][2]string{{"plain@group", "observed"}, {"photo(look at this)@group", "observed"}, {"cmd@group", "drop:not_mentioned"}, {"mention@group", "group shared context=2"}, {"mention@group", "group shared"}, {"command@group", "group"}, {"plain@forum:12", "drop:not_mentioned"}}, ""},
	{"observe_unmentioned_group_messages", "{observe_unmentioned_group_messages: true, group_allowed_chats: -4001234567}", [][2]string{{"plain@group", "group shared"}, {"plain@forum:12", "group"}}, ""},
	{"observe_unmentioned_group_messages", `{require_mention: true, observe_unmentioned_group_messages: true, group_allowed_chats: "-4001234567, -1001112223334", allowed_chats: -1001112223334}`, [][2]string{{"plain@group", "drop:chat_not_allowed"}, {"plain@forum:12", "observed"}, {"mention@forum:13", "group shared"}, {"mention@forum:12", "group shared context=1"}}, ""},
	{"observe_unmentioned_group_messages", `{require_mention: true, ingest_unmentioned_group_messages: "yes", group_allowed_chats: -4001234567}`, [][2]string{{"plain@group", "observed"}}, ""},
	{"observe_unmentioned_group_messages", "{require_mention: true, observe_unmentioned_group_messages: true}", [][2]string{{"plain@group", "drop:not_mentioned"}, {"mention@group", "group"}}, ""},
	{"group_allowed_chats", "{group_allowed_chats: -4001234567}", [][2]string{{"plain@group", "group"}}, ""},
}

// TestTelegramSettingsParity runs every row of the Telegram table in
// docs/settings-parity.md: the settings are read from YAML exactly as the
// row writes them and checked, and each probe goes through live ingest
// (normalization, the tenant's group gate, observe mode, delivery).
func TestTelegramSettingsParity(t *testing.T) {
	for _, c := range telegramParity {
		t.Run(c.knob+" "+c.setting, func(t *testing.T) {
			cfg := Config{BotToken: testToken, Chats: testChats}
			var err error
			if topicKnobs[c.knob] {
				err = yaml.Unmarshal([]byte(c.setting), &cfg)
			} else {
				var tc TenantConfig
				err = yaml.Unmarshal([]byte(c.setting), &tc)
				cfg.Tenants = map[string]TenantConfig{"t1": tc}
			}
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
			p, err := New(cfg, platform.Deps{Metrics: drops})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.transport.CloseIdleConnections)
			m := *p.mapping.Load()
			m.botUsername = parityBotUsername // as getMe answers
			p.mapping.Store(&m)
			rec := newSink()
			var sink platform.Sink = rec
			p.sink.Store(&sink)
			for i, probe := range c.probes {
				if err := p.handle(context.Background(), parityUpdate(t, probe[0], i+1), time.Now()); err != nil {
					t.Fatalf("%s: %v", probe[0], err)
				}
				var d *platform.Delivery
				if got, ok := rec.TryNext(); ok {
					d = &got
				}
				if got := parityOutcome(d, drops.Take()); got != probe[1] {
					t.Errorf("probe %d %s: %s, want %s", i+1, probe[0], got, probe[1])
				}
			}
		})
	}
}

// TestTelegramSettingsParityDocInSync fails when the Telegram table of
// docs/settings-parity.md and telegramParity name different rows.
func TestTelegramSettingsParityDocInSync(t *testing.T) {
	rows, err := doctabletest.Rows("../../docs/settings-parity.md", "## Telegram")
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
	for _, c := range telegramParity {
		cases = append(cases, c.knob+" "+c.setting)
	}
	if !slices.Equal(doc, cases) {
		t.Fatalf("docs/settings-parity.md Telegram rows and telegramParity differ:\ndoc:   %q\ncases: %q", doc, cases)
	}
}

// TestTopicBindingsYAMLErrors: wrong shapes and unknown keys are refused
// with the line.
func TestTopicBindingsYAMLErrors(t *testing.T) {
	for setting, want := range map[string]string{
		"{group_topics: 5}":                                          "want a list of {chat_id, topics} or a map",
		"{group_topics: [{chat: 1}]}":                                "line 1: field chat not found in type telegram.TopicBinding",
		"{group_topics: [5]}":                                        "want a mapping",
		"{group_topics: {\"-100\": 5}}":                              "topics: want a list",
		"{dm_topics: [{chat_id: 5, topics: [{id: 1}]}]}":             "field id not found in type telegram.Topic",
		"{group_topics: [{chat_id: [5]}]}":                           "line 1: want an id",
		"{dm_topics: [{chat_id: 5, topics: [{thread_id: {a: 1}}]}]}": "line 1: want an id",
	} {
		var cfg Config
		if err := yaml.Unmarshal([]byte(setting), &cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", setting, err, want)
		}
	}
	var cfg Config
	if err := yaml.Unmarshal([]byte("{group_topics: null, dm_topics: [{chat_id: 5, topics: null}]}"), &cfg); err != nil ||
		cfg.GroupTopics != nil || len(cfg.DMTopics) != 1 || cfg.DMTopics[0].Topics != nil {
		t.Errorf("null values: %+v %v", cfg, err)
	}
}

// TestTelegramTenantKnobsCoverFields keeps tenantKnobs and TenantConfig's
// yaml tags the same set.
func TestTelegramTenantKnobsCoverFields(t *testing.T) {
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

// TestTelegramTenantSettingsErrors: unknown keys and wrong shapes are
// refused with the line and the key; null is no settings.
func TestTelegramTenantSettingsErrors(t *testing.T) {
	for setting, want := range map[string]string{
		"{require_mentoin: true}":            "line 1: field require_mentoin not found in type telegram.TenantConfig",
		"{allowed_chats: {a: 1}}":            "telegram tenant setting allowed_chats: want a list",
		"{allowed_topics: [[12]]}":           "want a list of ids or names",
		"{guest_mode: [true]}":               "telegram tenant setting guest_mode: want a boolean",
		"{mention_patterns: {a: b}}":         "telegram tenant setting mention_patterns: want a list of regular expressions or one",
		"{mention_patterns: 42}":             "want a list of regular expressions or one",
		"[1, 2]":                             "want a mapping",
		"{free_response_topics: -100123}":    `free_response_topics: "-100123": want <chat id>:<thread id>`,
		"{allowed_chats: '[\"-100\", 1.5]'}": "allowed_chats: JSON list element 1.5 is not an integer",
	} {
		var tc TenantConfig
		err := yaml.Unmarshal([]byte(setting), &tc)
		if err == nil {
			_, err = newPolicy(tc)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", setting, err, want)
		}
	}
	var tc TenantConfig
	if err := yaml.Unmarshal([]byte("null"), &tc); err != nil || !reflect.DeepEqual(tc, TenantConfig{}) {
		t.Errorf("null settings: %+v %v", tc, err)
	}
	if pol, err := newPolicy(TenantConfig{}); err != nil || !reflect.DeepEqual(pol, defaultPolicy) {
		t.Errorf("empty settings: %+v %v, want the native defaults", pol, err)
	}
	if err := yaml.Unmarshal([]byte("{observe_unmentioned_group_messages: false, ingest_unmentioned_group_messages: true}"), &tc); err != nil || func() bool { pol, err := newPolicy(tc); return err != nil || pol.observe }() {
		t.Errorf("observe_unmentioned_group_messages false did not win over the older name: %v", err)
	}
}

// FuzzTelegramTenantSettings: any YAML is read without a panic, and
// settings that are read and checked build a policy that gates every probe
// message without a panic.
func FuzzTelegramTenantSettings(f *testing.F) {
	for _, c := range telegramParity {
		if !topicKnobs[c.knob] {
			f.Add(c.setting)
		}
	}
	f.Add(`{ignored_threads: "1__2", allowed_chats: "[", mention_patterns: ""}`)
	m := &mapping{botID: 7012345678, botUsername: parityBotUsername}
	var msgs []*models.Message
	for i, probe := range []string{"plain@group", "both@forum:12", "bare@group", "botreply@forum", "photo(hermes)@group", "plain@dm"} {
		msgs = append(msgs, parityUpdate(f, probe, i+1).Message)
	}
	f.Fuzz(func(t *testing.T, setting string) {
		var tc TenantConfig
		if yaml.Unmarshal([]byte(setting), &tc) != nil {
			return
		}
		pol, err := newPolicy(tc)
		if err != nil {
			return
		}
		for _, msg := range msgs {
			if pol.admit(msg, m) != "" {
				pol.observes(msg, m)
			}
			pol.sharesSessions(msg)
		}
	})
}
