package telegram

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/go-telegram/bot/models"
	"go.yaml.in/yaml/v3"

	"connector/internal/doctable"
	"connector/platform"
)

// topicProbe builds the update of a probe: "forum@<thread>" is a message in
// topic <thread> of the forum -1001112223334 ("forum@general": its General
// topic, no message_thread_id); "dm@<thread>" is a message in topic <thread>
// of the private chat 123456789.
func topicProbe(t *testing.T, probe string) *models.Update {
	t.Helper()
	kind, thread, _ := strings.Cut(probe, "@")
	msg := map[string]any{"message_id": 40, "date": 1760000000, "text": "hi",
		"from": map[string]any{"id": 123456789, "is_bot": false, "first_name": "Ada"}}
	switch kind {
	case "forum":
		msg["chat"] = map[string]any{"id": -1001112223334, "type": "supergroup", "title": "Dev Forum", "is_forum": true}
	case "dm":
		msg["chat"] = map[string]any{"id": 123456789, "type": "private", "first_name": "Ada"}
	default:
		t.Fatalf("probe %q: unknown kind", probe)
	}
	if thread != "general" {
		msg["message_thread_id"] = json.Number(thread)
		msg["is_topic_message"] = true
	}
	raw, _ := json.Marshal(map[string]any{"update_id": 1, "message": msg})
	var u models.Update
	if err := decodeUpdate(raw, &u); err != nil {
		t.Fatal(err)
	}
	return &u
}

// telegramParityCase is one row of docs/settings-parity.md's Telegram
// table: the settings as YAML (exactly as the row writes them) and the
// chat_topic each probe must get ("null" for none), or the start of the
// error the settings must be refused with.
type telegramParityCase struct {
	knob    string
	setting string
	topics  map[string]string
	err     string
}

var telegramParity = []telegramParityCase{
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 12, name: Deploys}]}]}", map[string]string{"forum@12": "Deploys", "forum@13": "null"}, ""},
	{"group_topics", `{group_topics: [{chat_id: "-1001112223334", topics: [{thread_id: "12", name: Deploys}]}]}`, map[string]string{"forum@12": "Deploys"}, ""},
	{"group_topics", `{group_topics: {"-1001112223334": [{thread_id: 12, name: Deploys}]}}`, map[string]string{"forum@12": "Deploys"}, ""},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 1, name: Lobby}]}]}", map[string]string{"forum@general": "Lobby"}, ""},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 5, name: A}]}, {chat_id: -1001112223334, topics: [{thread_id: 12, name: B}]}]}", map[string]string{"forum@5": "A", "forum@12": "null"}, ""},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 12, name: A}, {thread_id: 12, name: B}]}]}", map[string]string{"forum@12": "A"}, ""},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 12}, {name: Orphan}]}]}", map[string]string{"forum@12": "null"}, ""},
	{"group_topics", `{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: "012", name: Deploys}]}]}`, nil, `telegram.group_topics[0].topics[0].thread_id: "012": the native adapter compares group thread ids as written`},
	{"group_topics", `{group_topics: [{chat_id: " -1001112223334", topics: []}]}`, nil, `telegram.group_topics[0].chat_id: " -1001112223334"`},
	{"group_topics", "{group_topics: [{chat_id: -1001112223334, topics: [{thread_id: 12, name: Deploys, skill: deploy}]}]}", nil, "field skill not found"},
	{"dm_topics", "{dm_topics: [{chat_id: 123456789, topics: [{thread_id: 7, name: Notes}]}]}", map[string]string{"dm@7": "Notes", "dm@8": "null"}, ""},
	{"dm_topics", `{dm_topics: [{chat_id: 123456789, topics: [{thread_id: " +007 ", name: Notes}]}]}`, map[string]string{"dm@7": "Notes"}, ""},
	{"dm_topics", "{dm_topics: [{chat_id: 123456789, topics: [{name: Notes}, {thread_id: 7}]}]}", map[string]string{"dm@7": "null"}, ""},
	{"dm_topics", "{dm_topics: [{chat_id: 123456789, topics: [{thread_id: 7, name: Notes}]}, {chat_id: 123456789, topics: [{thread_id: 7, name: Later}, {thread_id: 8, name: Ideas}]}]}", map[string]string{"dm@7": "Notes", "dm@8": "Ideas"}, ""},
}

// TestTelegramSettingsParity runs every row of the Telegram table in
// docs/settings-parity.md through the config's YAML reading, Validate and
// the live normalization.
func TestTelegramSettingsParity(t *testing.T) {
	for _, c := range telegramParity {
		t.Run(c.knob+" "+c.setting, func(t *testing.T) {
			cfg := Config{Token: testToken}
			err := yaml.Unmarshal([]byte(c.setting), &cfg)
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
			p, err := New(cfg, platform.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			m, err := p.liveMapping()
			if err != nil {
				t.Fatal(err)
			}
			for probe, want := range c.topics {
				in, drop := normalize(topicProbe(t, probe), m)
				if drop != "" {
					t.Fatalf("%s dropped: %s", probe, drop)
				}
				got := "null"
				if topic := in.event.Source.ChatTopic; topic.Valid {
					got = topic.Value
				}
				if got != want {
					t.Errorf("%s: chat_topic %s, want %s", probe, got, want)
				}
			}
		})
	}
}

// TestTelegramSettingsParityDocInSync fails when the Telegram table of
// docs/settings-parity.md and telegramParity name different rows.
func TestTelegramSettingsParityDocInSync(t *testing.T) {
	rows, err := doctable.Rows("../../docs/settings-parity.md", "## Telegram")
	if err != nil {
		t.Fatal(err)
	}
	var doc, cases []string
	for _, r := range rows {
		if len(r) != 4 {
			t.Fatalf("row %q: want 4 cells (knob, setting, native, connector)", r)
		}
		doc = append(doc, doctable.Code(r[0])+" "+doctable.Code(r[1]))
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
		"{group_topics: 5}":                              "want a list of {chat_id, topics} or a map",
		"{group_topics: [{chat: 1}]}":                    "line 1: field chat not found in type telegram.TopicBinding",
		"{group_topics: [5]}":                            "want a mapping",
		"{group_topics: {\"-100\": 5}}":                  "topics: want a list",
		"{dm_topics: [{chat_id: 5, topics: [{id: 1}]}]}": "field id not found in type telegram.Topic",
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
