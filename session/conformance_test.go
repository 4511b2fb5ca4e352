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

func TestCheckOutcomesDropsAndEvents(t *testing.T) {
	const path = "../testdata/platform_events_slack_whatsapp.json"
	cases, err := session.LoadEventCases(path, "whatsapp_cloud")
	if err != nil {
		t.Fatal(err)
	}
	wants := make(map[string]session.EventCase, len(cases))
	for _, c := range cases {
		wants[c.Name] = c
	}
	// Answer every case with the oracle's own values, except one drop
	// turned into an event, one event turned into a drop and one wrong
	// reply id: exactly those three must fail.
	results, err := session.CheckOutcomes(path, "whatsapp_cloud", func(c session.EventCase) (session.Outcome, error) {
		switch c.Name {
		case "whatsapp_cloud_shared_status_update_ignored":
			return session.Outcome{}, nil
		case "whatsapp_cloud_shared_text_dm":
			return session.Outcome{Drop: "x"}, nil
		}
		if c.Drop != "" {
			return session.Outcome{Drop: c.Drop}, nil
		}
		var src session.Source
		if err := json.Unmarshal(c.Source, &src); err != nil {
			return session.Outcome{}, err
		}
		ev := *c.Event
		if c.Name == "whatsapp_cloud_shared_reply_to_bot_message" {
			other := "wamid.other"
			ev.ReplyToMessageID = &other
		}
		return session.Outcome{Source: src, Event: ev}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, r := range results {
		if len(r.Diffs) > 0 {
			failed[r.Name] = true
		}
	}
	for _, name := range []string{"whatsapp_cloud_shared_status_update_ignored", "whatsapp_cloud_shared_text_dm", "whatsapp_cloud_shared_reply_to_bot_message"} {
		if !failed[name] {
			t.Errorf("%s passed", name)
		}
	}
	if len(failed) != 3 {
		t.Errorf("failed %v, want exactly the three altered cases", failed)
	}
}
