package slack

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
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

// TestThreadRootImages: a turn that enters a thread gets the root's first
// four images as its first media (re-hosted with the workspace's token),
// before its own files, and is a photo; the context names every file of
// the thread's messages; the next turn in the thread gets neither.
func TestThreadRootImages(t *testing.T) {
	ms := newMediaStore(t)
	e := newEnv(t, nil, &platform.Deps{Media: ms})
	png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 100)...)
	var ids []string
	for i := range 5 {
		id := "F0IMG0000" + strconv.Itoa(i)
		e.fake.AddFile(teamA.ID, id, "chart"+strconv.Itoa(i)+".png", "image/png", png)
		ids = append(ids, id)
	}
	e.fake.AddFile(teamA.ID, "F0PDF00001", "report\n[x].pdf", "application/pdf", []byte("%PDF-1.4"))
	root := "1768400000.000100"
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: root, User: userAda, Text: "numbers",
		Files: append([]string{"F0PDF00001"}, ids...)})
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768400000.000400", root, "<@"+teamA.BotUser+"> what's in this chart?"), http.StatusOK)
	d := e.sink.Next(t)
	if d.Event.MessageType != "photo" || len(d.Event.Media) != threadRootImages {
		t.Fatalf("%s with %d media", d.Event.MessageType, len(d.Event.Media))
	}
	for i, m := range d.Event.Media {
		if m.Kind != "image" || m.Filename != "chart"+strconv.Itoa(i)+".png" || m.Size != int64(len(png)) {
			t.Fatalf("media %d: %+v", i, m)
		}
	}
	want := "[thread parent] numbers\n[file: report x .pdf (application/pdf)] [image: chart0.png] [image: chart1.png] [image: chart2.png] [image: chart3.png] [image: chart4.png]"
	if len(d.Event.Context) != 1 || d.Event.Context[0].Text != want {
		t.Fatalf("context %+v", d.Event.Context)
	}
	e.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768400000.000500", root, "<@"+teamA.BotUser+"> and?"), http.StatusOK)
	if d := e.sink.Next(t); len(d.Event.Media) != 0 || d.Event.MessageType != "text" || len(d.Event.Context) != 0 {
		t.Fatalf("second turn %+v", d.Event)
	}
}

// TestThreadContextNamesInTime: a reply that enters a thread is answered
// 200 at once, before its thread is read (its request is in the durable
// intake, so a slow conversations.replies cannot make Slack retry it), and
// delivered once, with its context. The names of the thread's authors
// share one deadline: a thread of thirty authors the workspace's
// users.info budget cannot answer (its burst spent, refilling at 100 a
// minute) holds its chat's turn under 3 s of the platform's clock (which
// the test drives), the names not resolved left as ids. One lookup
// deadline each held the chat's turn, and every message behind it, for
// over five seconds.
func TestThreadContextNamesInTime(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	const root = "1768400000.000100"
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: root, User: userAda, Text: "the deploy failed"})
	for i := range 30 {
		e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: sprintf("1768400001.%06d", i), ThreadTS: root,
			User: sprintf("U0Y%07d", i), Text: sprintf("me too %d", i)})
	}
	body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768400002.000100", root, "<@"+teamA.BotUser+"> why?"))
	start := clk.Now()
	answered(t, e.postAsync(t, EventsPath, "application/json", body), "the reply entering its thread") // the clock stands still
	users := e.p.limits.budget(teamA.ID, "users.info")
	clk.Drive(t, 1, func() int { return int(e.sink.Taken()) }, func() int { return users.Waiting("t1") })
	if took := clk.Now().Sub(start); took > 3*time.Second {
		t.Fatalf("delivered after %v of the platform's clock, want within 3 s", took)
	}
	d := e.sink.Next(t)
	if len(d.Event.Context) != 31 || d.Event.Context[0].Source.UserName != "Ada" || d.Event.Context[30].Source.UserName != "U0Y0000029" {
		t.Fatalf("context %+v", d.Event.Context)
	}
	e.settled(t)
	e.sink.Empty(t) // delivered once
	intakeEmpty(t, e.store)
}
