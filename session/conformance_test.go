package session_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"connector/session"
)

func TestMismatches(t *testing.T) {
	src := session.Source{Platform: "telegram", ChatID: "42", ChatType: "dm", UserID: session.Str("42"), IsBot: true}
	want := json.RawMessage(`{"platform": "telegram", "chat_id": "42", "chat_type": "dm", "user_id": "42", "thread_id": null}`)
	if d, err := session.Mismatches(&src, want, "agent:main:telegram:dm:42"); err != nil || len(d) != 0 {
		t.Fatalf("matching case reported %v %v", d, err)
	}
	tampered := json.RawMessage(`{"platform": "telegram", "chat_id": "43", "chat_type": "dm", "chat_topic": "x"}`)
	d, err := session.Mismatches(&src, tampered, "agent:main:telegram:dm:43")
	if err != nil || len(d) != 4 || !strings.Contains(d[0], `source.chat_id: expected "43", got "42"`) ||
		!strings.Contains(d[1], `source.chat_topic: expected "x", got null`) ||
		d[2] != `source.user_id: expected (absent), got "42"` || !strings.HasPrefix(d[3], "key:") {
		t.Fatalf("diffs %q %v", d, err)
	}
}

func TestLoadEventCases(t *testing.T) {
	all, err := session.LoadEventCases("../testdata/platform_events.json", "")
	if err != nil || len(all) != 62 {
		t.Fatalf("%d cases, %v", len(all), err)
	}
	tg, _ := session.LoadEventCases("../testdata/platform_events.json", "telegram")
	if len(tg) != 28 {
		t.Fatalf("%d telegram cases", len(tg))
	}
}

func TestCheckOutcomesReportsEveryFailure(t *testing.T) {
	calls := 0
	results, err := session.CheckOutcomes("../testdata/platform_events.json", "telegram", func(c session.EventCase) (session.Outcome, error) {
		calls++
		if calls == 1 {
			return session.Outcome{}, errors.New("boom")
		}
		return session.Outcome{Source: session.Source{Platform: "telegram", ChatID: "wrong", ChatType: "dm"}}, nil
	})
	if err != nil || len(results) != 28 {
		t.Fatalf("%d results, %v", len(results), err)
	}
	if d := results[0].Diffs; len(d) != 1 || d[0] != "normalize: boom" {
		t.Fatalf("normalize error reported as %q", d)
	}
	for _, r := range results[1:] {
		if len(r.Diffs) == 0 {
			t.Fatalf("%s: a wrong source passed", r.Name)
		}
	}
}

// TestCheckOutcomes: a drop case passes on any drop and fails on a turn; a
// turn case fails on a drop and on each event field that differs.
func TestCheckOutcomes(t *testing.T) {
	path := t.TempDir() + "/cases.json"
	cases := `[
 {"name": "dropped", "platform": "p", "raw": {}, "drop": "bot_sender"},
 {"name": "turn", "platform": "p", "raw": {},
  "source": {"platform": "p", "chat_id": "c", "chat_type": "dm"}, "key": "agent:main:p:dm:c",
  "event": {"text": "hi", "message_type": "text", "message_id": "m1", "reply_to_message_id": null}}]`
	if err := os.WriteFile(path, []byte(cases), 0o600); err != nil {
		t.Fatal(err)
	}
	src := session.Source{Platform: "p", ChatID: "c", ChatType: "dm"}
	m1 := "m1"
	check := func(drop string, ev *session.EventFields) []session.EventResult {
		t.Helper()
		res, err := session.CheckOutcomes(path, "", func(c session.EventCase) (session.Outcome, error) {
			return session.Outcome{Source: src, Drop: drop, Event: ev}, nil
		})
		if err != nil || len(res) != 2 {
			t.Fatalf("%v %v", res, err)
		}
		return res
	}
	res := check("", &session.EventFields{Text: "hi", MessageType: "text", MessageID: &m1})
	if len(res[0].Diffs) != 1 || len(res[1].Diffs) != 0 {
		t.Fatalf("a turn: %+v", res)
	}
	res = check("gated", nil)
	if len(res[0].Diffs) != 0 || len(res[1].Diffs) != 1 {
		t.Fatalf("a drop: %+v", res)
	}
	res = check("", &session.EventFields{Text: "hi!", MessageType: "text", ReplyToMessageID: &m1})
	if d := res[1].Diffs; len(d) != 3 || !strings.Contains(d[0], "event.message_id") || !strings.Contains(d[2], "event.text") {
		t.Fatalf("event differences: %q", d)
	}
}

// TestMismatchesReportsExtraKeys: a key the connector's source carries
// and the native adapter's lacks is a difference (it reaches the gateway,
// which may read it), but for the two connector additions is_bot and
// message_is_edit, which gateways ignore on the wire.
func TestMismatchesReportsExtraKeys(t *testing.T) {
	src := session.Source{Platform: "discord", ChatID: "42", ChatType: "group", UserID: session.Str("7"), ChatIDAlt: "alt", ScopeID: "g1", IsBot: true, MessageIsEdit: true}
	want := json.RawMessage(`{"platform": "discord", "chat_id": "42", "chat_name": null, "chat_type": "group", "user_id": "7", "user_name": null, "thread_id": null, "chat_topic": null}`)
	d, err := session.Mismatches(&src, want, session.Key(&src, session.DefaultOptions))
	if err != nil || len(d) != 3 || d[0] != `source.chat_id_alt: expected (absent), got "alt"` ||
		d[1] != `source.guild_id: expected (absent), got "g1"` || d[2] != `source.scope_id: expected (absent), got "g1"` {
		t.Fatalf("diffs %q %v", d, err)
	}
}
