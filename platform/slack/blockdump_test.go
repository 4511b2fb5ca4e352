package slack

import (
	"encoding/json"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"connector/platform/slack/slacktest"
)

// dumpBlocks are blocks of every kind the dump treats apart: rich_text and
// table (rendered as text, not dumped), a null (dropped), allowlisted and
// other keys, empty values, a repeated key, numbers Python writes its own
// way, and strings with escapes and non-ASCII text.
const dumpBlocks = `[
 {"type":"rich_text","block_id":"r1","elements":[{"type":"rich_text_section","elements":[{"type":"text","text":"deploy?"}]}]},
 {"type":"section","block_id":"s1","text":{"type":"mrkdwn","text":"*Build* #42 \"ok\" — é\u0001\ttab","verbatim":false},"accessory":{"type":"button","text":{"type":"plain_text","text":"Open","emoji":true},"url":"https://ci.example/42","action_id":"open","value":"x"}},
 {"type":"actions","block_id":"a","elements":[{"type":"button","action_id":"a1","text":{"type":"plain_text","text":""},"style":"primary"},{"type":"static_select","options":[],"placeholder":{"type":"plain_text","text":"Pick"},"action_id":"s"}],"optional":1e16,"multiple":-0,"emoji":100.0,"dispatch_action":1.5e-5},
 {"type":"context","elements":[{"type":"image","image_url":"https://x/y.png","alt_text":"logo"},{"type":"mrkdwn","text":"line1\nline2 \\ back"}]},
 {"type":"table","rows":[[{"type":"raw_text","text":"a"}]]},
 null,
 {"type":"divider","block_id":"d1","style":{"nested":[1,{}]},"block_id":"d2"}
]`

// TestBlockPayloadAsNative: the JSON dump of a message's other blocks is
// the native adapter's to the character (_serialize_slack_blocks_for_agent,
// checked against Python's json.dumps), and is cut at 6,000 characters.
func TestBlockPayloadAsNative(t *testing.T) {
	want := "[Slack Block Kit payload for this message]\n```json\n[\n  {\n    \"type\": \"section\",\n    \"block_id\": \"s1\",\n    \"text\": {\n      \"type\": \"mrkdwn\",\n      \"text\": \"*Build* #42 \\\"ok\\\" — é\\u0001\\ttab\"\n    },\n    \"accessory\": {\n      \"type\": \"button\",\n      \"text\": {\n        \"type\": \"plain_text\",\n        \"text\": \"Open\",\n        \"emoji\": true\n      },\n      \"action_id\": \"open\"\n    }\n  },\n  {\n    \"type\": \"actions\",\n    \"block_id\": \"a\",\n    \"elements\": [\n      {\n        \"type\": \"button\",\n        \"action_id\": \"a1\",\n        \"text\": {\n          \"type\": \"plain_text\"\n        },\n        \"style\": \"primary\"\n      },\n      {\n        \"type\": \"static_select\",\n        \"placeholder\": {\n          \"type\": \"plain_text\",\n          \"text\": \"Pick\"\n        },\n        \"action_id\": \"s\"\n      }\n    ],\n    \"optional\": 1e+16,\n    \"multiple\": 0,\n    \"emoji\": 100.0,\n    \"dispatch_action\": 1.5e-05\n  },\n  {\n    \"type\": \"context\",\n    \"elements\": [\n      {\n        \"type\": \"image\"\n      },\n      {\n        \"type\": \"mrkdwn\",\n        \"text\": \"line1\\nline2 \\\\ back\"\n      }\n    ]\n  },\n  {\n    \"type\": \"divider\",\n    \"block_id\": \"d2\",\n    \"style\": {\n      \"nested\": [\n        1,\n        {}\n      ]\n    }\n  }\n]\n```"
	if got := blockPayload(json.RawMessage(dumpBlocks)); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	long, _ := json.Marshal([]any{map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": strings.Repeat("é", 7000)}}})
	got := blockPayload(long)
	if n := utf8.RuneCountInString(got); n != 6053 || !strings.HasSuffix(got, "éé\n... [truncated]\n```") {
		t.Fatalf("%d characters, ending %q", n, got[len(got)-40:])
	}
	for _, none := range []string{`[]`, `[{"type":"rich_text","elements":[]},{"type":"table","rows":[]}]`, `{"type":"section"}`, `[`} {
		if got := blockPayload(json.RawMessage(none)); got != "" {
			t.Errorf("%s: %q", none, got)
		}
	}
}

// TestBlockPayloadDeeplyNested: a deeply nested block is dumped (cut as
// any long dump) for about what the dump's first characters cost. Its
// whole indentation grows with the square of the depth: written out, this
// 40 KB block took 57 s and 9 GB of allocations.
func TestBlockPayloadDeeplyNested(t *testing.T) {
	const depth = 20_000
	raw := []byte(`[{"type":"section","style":` + strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth) + `}]`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := blockPayload(raw)
	runtime.ReadMemStats(&after)
	want := blockPayloadHeader + "[\n  {\n    \"type\": \"section\",\n    \"style\": [\n      ["
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "[\n... [truncated]\n```") {
		t.Fatalf("not the cut dump: %.80q ... %q", got, got[max(0, len(got)-40):])
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
		t.Fatalf("dumping a %d-byte block allocated %d MB", len(raw), n>>20)
	}
}

// TestBlockPayloadManyKeys: a message whose block has many keys (10,000
// here, 210 KB) reaches the gateway over the wire with the dump the native
// adapter makes: the block's without the keys the dump leaves out, a
// repeated key in its first place with its last value. That the keys are
// found by an index, not each among those before it (60,000 keys read so
// took 8.7 s, 100,000 about 25 s, past Slack's patience), is held by
// TestDecodeOrderedIndexesKeys without a clock.
func TestBlockPayloadManyKeys(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxEventBytes = 4 << 20 }, nil)
	var raw strings.Builder
	raw.WriteString(`[{"type":"section","block_id":"b0",`)
	for i := range 10_000 {
		raw.WriteString(`"k` + strconv.Itoa(i) + `":{"text":"x"},`)
	}
	raw.WriteString(`"block_id":"b1"}]`)
	ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "deploy?")
	ev["blocks"] = json.RawMessage(raw.String())
	body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", ev)
	ctx, cancel := contextFor()
	defer cancel()
	if code, answer := e.do(t, slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, e.now(), "application/json", body).WithContext(ctx)); code != http.StatusOK {
		t.Fatalf("%d %s", code, answer)
	}
	if d, want := e.sink.Next(t), "deploy?\n\n"+blockPayload(json.RawMessage(`[{"type":"section","block_id":"b1"}]`)); d.Event.Text != want {
		t.Fatalf("text %.200q, want %q", d.Event.Text, want)
	}
}

// TestDecodeOrderedIndexesKeys: an object of 100,000 keys (2.2 MB, under a
// 4 MiB max_event_bytes) is decoded with every key in the index at its
// place in first-seen order, so each key is found in one lookup, and a
// repeated key keeps its first place and takes its last value.
func TestDecodeOrderedIndexesKeys(t *testing.T) {
	const n = 100_000
	var raw strings.Builder
	raw.WriteString(`{"k0":0,`)
	for i := 1; i < n; i++ {
		raw.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i) + `,`)
	}
	raw.WriteString(`"k0":"last"}`)
	v, err := decodeOrdered([]byte(raw.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.keys) != n || len(v.vals) != n || len(v.index) != n {
		t.Fatalf("%d keys, %d values, %d indexed; want %d each", len(v.keys), len(v.vals), len(v.index), n)
	}
	for i, k := range v.keys {
		if want := "k" + strconv.Itoa(i); k != want || v.index[k] != i {
			t.Fatalf("key %d is %q indexed at %d, want %q at %d", i, k, v.index[k], want, i)
		}
	}
	if got := v.get("k0"); got == nil || got.str != "last" {
		t.Fatalf("k0 = %+v, want the last value", got)
	}
}

// TestBlocksInTheText: a message's other blocks reach the turn's text as
// the native adapter puts them there (after the text), and an unfurl's
// pasted table after the unfurl's text.
func TestBlocksInTheText(t *testing.T) {
	e := newEnv(t, nil, nil)
	ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "deploy?")
	ev["blocks"] = json.RawMessage(dumpBlocks)
	ev["attachments"] = []any{map[string]any{"title": "Sheet", "title_link": "https://docs.example/s", "text": "Q1 numbers",
		"blocks": []any{map[string]any{"type": "table", "rows": []any{[]any{map[string]any{"type": "raw_text", "text": "q"}, map[string]any{"type": "raw_text", "text": "1"}}}}}}}
	e.event(t, teamA, "Ev1", ev, http.StatusOK)
	d := e.sink.Next(t)
	// The table block is rendered into the text ("a"), the others dumped.
	want := "deploy?\na\n\n" + blockPayload(json.RawMessage(dumpBlocks)) + "\n\n📎 [Sheet](https://docs.example/s)\n   Q1 numbers\nq | 1"
	if d.Event.Text != want {
		t.Fatalf("text\n%s\nwant\n%s", d.Event.Text, want)
	}
}
