package slack

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"connector/platform"
	"connector/platform/slack/slacktest"
	"connector/session"
)

// checkingSink verifies every delivery against the routing tables: the
// bound channel ops reaches t3 alone, any other chat a workspace's tenant
// (t1 or t2), and the delivery matches its event.
type checkingSink struct {
	t *testing.T
}

func (s *checkingSink) Deliver(_ context.Context, d platform.Delivery) error {
	src := &d.Event.Source
	okTenant := d.Tenant == "t1" || d.Tenant == "t2"
	if src.ChatID == chanOps {
		okTenant = d.Tenant == "t3"
	}
	if !okTenant || d.Platform != "slack" || src.ChatID != d.ChatID || d.SessionKey != session.Key(src, session.DefaultOptions) {
		s.t.Fatalf("delivery to %q of %+v", d.Tenant, src)
	}
	return nil
}

// fixtureBodies are the raw payloads of the Slack fixture cases.
func fixtureBodies(f *testing.F) [][]byte {
	data, err := os.ReadFile("../../testdata/platform_events_slack_whatsapp.json")
	if err != nil {
		f.Fatal(err)
	}
	var cases []struct {
		Platform string          `json:"platform"`
		Raw      json.RawMessage `json:"raw"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for _, c := range cases {
		if c.Platform == "slack" {
			out = append(out, c.Raw)
		}
	}
	return out
}

// FuzzEvents posts arbitrary signed bodies (seeded with every fixture
// payload) to /slack/events: the route answers 200, 400 or 503, never
// panics, and delivers only to the tenant the routing names.
func FuzzEvents(f *testing.F) {
	for _, raw := range fixtureBodies(f) {
		f.Add(raw)
	}
	f.Add(slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", map[string]any{"type": "message", "subtype": "message_changed", "channel": chanOps,
		"message": map[string]any{"text": "<@U0BOTA0001>", "ts": "1.2", "blocks": []any{map[string]any{"type": "rich_text", "elements": []any{
			map[string]any{"type": "rich_text_list", "style": "bullet", "elements": []any{map[string]any{"type": "rich_text_section",
				"elements": []any{map[string]any{"type": "link", "url": "https://x", "text": "x"}}}}}}}}}}))
	f.Add([]byte(`{"type":"event_callback","team_id":"T0AAA00001","event":{"type":"message","team":{"id":7},"files":[{"size":-1}]}}`))
	f.Add([]byte(`{"type":"event_callback","event":null}`))
	f.Add(slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev2", map[string]any{"type": "reaction_added", "user": userAda, "reaction": "+1",
		"item_user": teamA.BotUser, "item": map[string]any{"type": "message", "channel": chanGeneral, "ts": "1.2"}, "event_ts": "3.4"}))
	// Reactions start turns, so the fuzzer reaches their path too.
	e := newEnv(f, func(c *Config) { c.Tenants["t1"] = TenantConfig{ReactionTriggers: &[]string{}} }, nil)
	e.p.sink.Store(ptr[platform.Sink](&checkingSink{}))
	f.Fuzz(func(t *testing.T, body []byte) {
		e.p.sink.Store(ptr[platform.Sink](&checkingSink{t: t}))
		code, _ := e.post(t, EventsPath, "application/json", body)
		switch code {
		case http.StatusOK, http.StatusBadRequest, http.StatusServiceUnavailable:
		default:
			t.Fatalf("answered %d", code)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// FuzzInteractions posts arbitrary signed interaction payloads (seeded
// with the fixture's block_actions and prompt presses).
func FuzzInteractions(f *testing.F) {
	for _, raw := range fixtureBodies(f) {
		f.Add(string(raw))
	}
	f.Add(`{"type":"block_actions","team":{"id":"T0AAA00001"},"user":{"id":"U0ADA00001"},"container":{"channel_id":"C0GEN00001","message_ts":"1.1"},"actions":[{"action_id":"hp1:p:o"}]}`)
	f.Add(`{"type":"block_actions","actions":[{"action_id":"hp1:p:o"}]}`)
	f.Add(`{"type":"view_submission","view":{"state":{"values":{}}}}`)
	e := newEnv(f, nil, nil)
	f.Fuzz(func(t *testing.T, payload string) {
		e.p.sink.Store(ptr[platform.Sink](&checkingSink{t: t}))
		code, _ := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", []byte("payload="+urlEscape(payload)))
		switch code {
		case http.StatusOK, http.StatusBadRequest, http.StatusServiceUnavailable:
		default:
			t.Fatalf("answered %d", code)
		}
	})
}

// FuzzCommands posts arbitrary signed slash command forms.
func FuzzCommands(f *testing.F) {
	f.Add(string(slacktest.Command(teamA.ID, chanGeneral, userAda, "/model", "gpt-5", "https://hooks.slack.com/commands/x")))
	f.Add(string(slacktest.Command(teamA.ID, dmAda, userAda, "/hermes", "", "")))
	f.Add(string(slacktest.Command(teamA.ID, dmAda, userAda, "/link", "CODE", "")))
	f.Add("team_id=T0AAA00001&channel_id=D0ADA00001&user_id=U0ADA00001&command=%2F&text=%ff")
	e := newEnv(f, nil, nil)
	f.Fuzz(func(t *testing.T, form string) {
		e.p.sink.Store(ptr[platform.Sink](&checkingSink{t: t}))
		code, _ := e.post(t, CommandsPath, "application/x-www-form-urlencoded", []byte(form))
		switch code {
		case http.StatusOK, http.StatusBadRequest, http.StatusServiceUnavailable:
		default:
			t.Fatalf("answered %d", code)
		}
	})
}

// FuzzMrkdwn converts arbitrary markdown: it never panics, keeps valid
// UTF-8 valid, and never lets a broadcast mention through.
// broadcast finds a mention that pings a whole channel.
var broadcast = regexp.MustCompile(`(?i)<!(?:here|channel|everyone)[|>]`)

func FuzzMrkdwn(f *testing.F) {
	for _, s := range []string{"**b** *i* ~~s~~ [t](https://u.example/(x)) `c` ```go\nx\n```", "# H **x**\n> q <!here> & <@U1>",
		"| a | b |\n|---|---|\n| 中文 | x |", "***x*** **a!** ![img](u)", "\x00SL0\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		out := toMrkdwn(md)
		if utf8.ValidString(md) && !utf8.ValidString(out) {
			t.Fatalf("%q became invalid UTF-8 %q", md, out)
		}
		// A broadcast is <!here>, <!channel> or <!everyone>, with or without
		// a |label; <!here0> is not one (Slack pings for none but those).
		if broadcast.MatchString(out) {
			if !strings.Contains(strings.ToLower(md), "`") {
				t.Fatalf("%q kept a broadcast mention: %q", md, out)
			}
		}
		for _, part := range mrkdwnParts(md) {
			if n := utf8.RuneCountInString(part); n > maxMessageRunes {
				t.Fatalf("a part of %d characters", n)
			}
		}
	})
}

// FuzzState checks install states: a state the platform signed passes;
// with any byte changed, it fails; arbitrary text never panics.
func FuzzState(f *testing.F) {
	p, err := New(Config{SigningSecret: "s", ClientID: "1", ClientSecret: "cs", BotToken: "xoxb-1"}, platform.Deps{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(0, byte(1), "")
	f.Add(20, byte(0x80), "x")
	f.Add(55, byte(7), "not a state")
	f.Fuzz(func(t *testing.T, at int, flip byte, text string) {
		_, _, _ = p.checkState(text)
		good := p.newState()
		raw, _ := base64.RawURLEncoding.DecodeString(good)
		if _, _, err := p.checkState(good); err != nil {
			t.Fatalf("a state just signed fails: %v", err)
		}
		if flip == 0 || at < 0 {
			return
		}
		raw[at%len(raw)] ^= flip
		if _, _, err := p.checkState(base64.RawURLEncoding.EncodeToString(raw)); err == nil {
			t.Fatalf("a state with byte %d changed passed", at%len(raw))
		}
	})
}

func urlEscape(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", "=", "%3D").Replace(s)
}

// FuzzBlockPayload: any blocks JSON dumps without a panic, to at most the
// header, 6,000 characters of JSON and the fence; what it dumps is valid
// JSON (unless cut, or holding Python's Infinity).
func FuzzBlockPayload(f *testing.F) {
	f.Add([]byte(dumpBlocks))
	f.Add([]byte(`[{"type":"section","text":{"type":"mrkdwn","text":"a\u0000b"},"fields":[1.5e300,-0,1e-7,"",null,{}]}]`))
	f.Add([]byte(`[null, 0, false, "", [], {}]`))
	f.Add([]byte(`[{"type":"x","optional":1e999,"multiple":-1e999}]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		out := blockPayload(raw)
		if out == "" {
			return
		}
		body, ok := strings.CutPrefix(out, blockPayloadHeader)
		if !ok || !strings.HasSuffix(body, "\n```") {
			t.Fatalf("not a fenced dump: %q", out)
		}
		body = strings.TrimSuffix(body, "\n```")
		if n := utf8.RuneCountInString(body); n > maxBlockPayload {
			t.Fatalf("%d characters", n)
		}
		if !strings.HasSuffix(body, "\n... [truncated]") && !strings.Contains(body, "Infinity") && !json.Valid([]byte(body)) {
			t.Fatalf("invalid JSON: %q", body)
		}
	})
}
