package session_test

import (
	"encoding/json"
	"errors"
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
	if err != nil || len(d) != 3 || !strings.Contains(d[0], `source.chat_id: expected "43", got "42"`) ||
		!strings.Contains(d[1], `source.chat_topic: expected "x", got null`) || !strings.HasPrefix(d[2], "key:") {
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

func TestCheckEventsReportsEveryFailure(t *testing.T) {
	calls := 0
	results, err := session.CheckEvents("../testdata/platform_events.json", "telegram", func(c session.EventCase) (session.Source, error) {
		calls++
		if calls == 1 {
			return session.Source{}, errors.New("boom")
		}
		return session.Source{Platform: "telegram", ChatID: "wrong", ChatType: "dm"}, nil
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
