package slack

import (
	"net/http"
	"testing"

	"connector/contract"
	"connector/platform/slack/slacktest"
)

// TestThreadContextOnFirstEngagement: a mention in a thread the bot was
// not in yet carries the thread's earlier messages as context (the parent
// marked, the bot's own reply left out, its mention cut, an author the
// allowlist does not admit marked unverified); the next turn in that
// thread carries none.
func TestThreadContextOnFirstEngagement(t *testing.T) {
	const carol = "U0CAR00003"
	e := newEnv(t, func(c *Config) {
		c.Tenants["t1"] = TenantConfig{AllowedUsers: []string{userAda}}
	}, nil)
	e.fake.AddUser(teamA.ID, slacktest.User{ID: carol, Name: "carol", RealName: "Carol"})
	root, thread := "1768400000.000100", "1768400000.000100"
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: root, User: userAda, Text: "the deploy failed <@" + teamA.BotUser + ">"})
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: "1768400000.000200", ThreadTS: thread, User: carol, Text: "logs say OOM"})
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: "1768400000.000300", ThreadTS: thread, User: teamA.BotUser, BotID: teamA.BotID, Text: "an earlier answer"})
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: "1768400000.000400", ThreadTS: thread, User: userAda, Text: "<@" + teamA.BotUser + "> what now?"})
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: "1768400000.000500", ThreadTS: thread, User: carol, Text: "later"})

	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768400000.000400", thread, "<@"+teamA.BotUser+"> what now?"), http.StatusOK)
	d := e.sink.Next(t)
	want := []contract.ContextMessage{
		{Text: "[thread parent] the deploy failed", Source: contract.ContextAuthor{UserName: "Ada", UserID: userAda}},
		{Text: "[unverified] logs say OOM", Source: contract.ContextAuthor{UserName: "Carol", UserID: carol}},
	}
	if d.Event.Text != "what now?" || !equalContext(d.Event.Context, want) {
		t.Fatalf("event %q context %+v", d.Event.Text, d.Event.Context)
	}
	if n := len(e.fake.Calls("conversations.replies")); n != 1 {
		t.Fatalf("%d conversations.replies calls", n)
	}
	// The thread is entered now: the next turn carries no history.
	e.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768400000.000600", thread, "<@"+teamA.BotUser+"> and then?"), http.StatusOK)
	if d := e.sink.Next(t); len(d.Event.Context) != 0 {
		t.Fatalf("second turn's context %+v", d.Event.Context)
	}
	// A top-level message has no thread history.
	e.event(t, teamA, "Ev3", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768400000.000700", "", "<@"+teamA.BotUser+"> hi"), http.StatusOK)
	if d := e.sink.Next(t); len(d.Event.Context) != 0 {
		t.Fatalf("top-level context %+v", d.Event.Context)
	}
}

func equalContext(a, b []contract.ContextMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTSBefore(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"1768400000.000100", "1768400000.000200", true},
		{"1768400000.000200", "1768400000.000100", false},
		{"1768400000.000100", "1768400000.000100", false},
		{"999999999.000100", "1768400000.000100", true},
		{"1768400000.1", "1768400000.000200", false},
		{"1768400000", "1768400000.000001", true},
	} {
		if got := tsBefore(c.a, c.b); got != c.want {
			t.Errorf("tsBefore(%s, %s) = %v", c.a, c.b, got)
		}
	}
}
