package slack

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/slack/slacktest"
	"connector/store"
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

// TestThreadContextKeepsToItsTenant: in a channel no binding or claim
// holds, where Cat is linked to t1 and Dan to t2 (rule 3: each reaches
// its own tenant), a turn of Dan's that enters a thread carries none of
// the thread's messages that reached t1 (Cat's, the root's files with
// them) nor, as its parent, a message the bot posted there for t1; an
// unlinked author's message, and a parent the bot posted for t2, stay.
// Before, t2 read Cat's conversation with t1, and what the bot answered
// t1, in the thread's context.
func TestThreadContextKeepsToItsTenant(t *testing.T) {
	const eve = "U0EVE00005"
	ms := newMediaStore(t)
	e := ownershipEnv(t, &platform.Deps{Media: ms},
		platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t1"},
		platform.Binding{Kind: platform.BindUser, ID: userDan, Tenant: "t2"})
	e.fake.AddUser(teamC.ID, slacktest.User{ID: eve, Name: "eve"})
	e.fake.AddFile(teamC.ID, "F0IMG00001", "merger.png", "image/png", append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 100)...))
	mention := "<@" + teamC.BotUser + "> "
	const root = "1768400000.000100"
	e.fake.AddMessage(slacktest.Message{Team: teamC.ID, Channel: chanNew, TS: root, User: userCat, Text: mention + "the merger plan", Files: []string{"F0IMG00001"}})
	e.fake.AddMessage(slacktest.Message{Team: teamC.ID, Channel: chanNew, TS: "1768400000.000200", ThreadTS: root, User: userCat, Text: "codename bluebird"})
	e.fake.AddMessage(slacktest.Message{Team: teamC.ID, Channel: chanNew, TS: "1768400000.000300", ThreadTS: root, User: eve, Text: "lunch?"})
	e.event(t, teamC, "Ev1", slacktest.MessageEvent(teamC.ID, chanNew, userDan, "1768490900.000100", root, "what is this?"), http.StatusOK)
	d := e.sink.Next(t)
	if d.Tenant != "t2" || len(d.Event.Media) != 0 || len(d.Event.Context) != 1 || d.Event.Context[0].Source.UserID != eve {
		t.Fatalf("Dan's turn to %s: context %+v, %d media; want Eve's message alone", d.Tenant, d.Event.Context, len(d.Event.Media))
	}

	// Cat's and Dan's messages grant the channel to t1 and t2; each posts.
	e.event(t, teamC, "Ev2", slacktest.MessageEvent(teamC.ID, chanNew, userCat, "1768490900.000200", "", "status?"), http.StatusOK)
	e.event(t, teamC, "Ev3", slacktest.MessageEvent(teamC.ID, chanNew, userDan, "1768490900.000300", "", "status?"), http.StatusOK)
	for _, want := range []string{"t1", "t2"} {
		if d := e.sink.Next(t); d.Tenant != want {
			t.Fatalf("delivered to %s, want %s", d.Tenant, want)
		}
	}
	posted := map[string]string{}
	for _, tenant := range []string{"t1", "t2"} {
		r := e.execute(t, tenant, `{"op":"send","chat_id":"`+chanNew+`","content":"`+tenant+`'s answer"}`)
		if !r.Success {
			t.Fatalf("%s's send: %+v", tenant, r)
		}
		posted[tenant] = r.MessageID
	}
	e.event(t, teamC, "Ev4", slacktest.MessageEvent(teamC.ID, chanNew, userDan, "1768490900.000400", posted["t1"], "and this?"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t2" || len(d.Event.Context) != 0 {
		t.Fatalf("Dan's reply to t1's answer, to %s: context %+v; want none", d.Tenant, d.Event.Context)
	}
	e.event(t, teamC, "Ev5", slacktest.MessageEvent(teamC.ID, chanNew, userDan, "1768490900.000500", posted["t2"], "and this?"), http.StatusOK)
	d = e.sink.Next(t)
	if want := "[thread parent] t2's answer"; d.Tenant != "t2" || len(d.Event.Context) != 1 || d.Event.Context[0].Text != want {
		t.Fatalf("Dan's reply to t2's answer, to %s: context %+v; want %q", d.Tenant, d.Event.Context, want)
	}
}

// TestSharedChannelOnOneTokenThreadContextKeepsToItsTenant: without
// slack.client_id, in a Slack Connect channel shared by A (t1's) and B
// (t2's), where each tenant acts as on a grant (sharedOnOneToken), Ada of
// A replying in the thread of t2's answer does not give t1 that answer as
// the thread's parent; in the thread of t1's answer, t1 gets its answer.
// Before, the channel counted as held by A's binding, and t1 read what
// the bot answered t2.
func TestSharedChannelOnOneTokenThreadContextKeepsToItsTenant(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	e := newEnvOn(t, fake, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, nil)
	posted := map[string]string{}
	for _, tenant := range []string{"t1", "t2"} {
		r := e.execute(t, tenant, `{"op":"send","chat_id":"`+shared+`","content":"`+tenant+`'s answer","metadata":{}}`)
		if !r.Success || r.MessageID == "" {
			t.Fatalf("%s's send: %+v", tenant, r)
		}
		posted[tenant] = r.MessageID
	}
	mention := "<@" + teamA.BotUser + "> "
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, shared, userAda, "1768490900.000200", posted["t2"], mention+"and this?"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t1" || len(d.Event.Context) != 0 {
		t.Fatalf("Ada's reply to t2's answer, to %s: context %+v; want none", d.Tenant, d.Event.Context)
	}
	e.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, shared, userAda, "1768490900.000300", posted["t1"], mention+"and this?"), http.StatusOK)
	d := e.sink.Next(t)
	if want := "[thread parent] t1's answer"; d.Tenant != "t1" || len(d.Event.Context) != 1 || d.Event.Context[0].Text != want {
		t.Fatalf("Ada's reply to t1's answer, to %s: context %+v; want %q", d.Tenant, d.Event.Context, want)
	}
}

// TestSharedChannelClaimedThreadContextKeepsToItsTenant: without
// slack.client_id, in a Slack Connect channel shared by A (t1's by its
// binding) and C (bound to nobody), which t2 claimed and whose Dan is
// linked to t2, each tenant holds one workspace's view of the channel: a
// turn of either that enters the other's thread carries none of the
// other's messages (each judged in its author's workspace, its team),
// while its own thread shows its root. Before, each read as holding the
// channel alone (heldAlone: C is bound to nobody), and read the other
// tenant's conversation in the thread's context.
func TestSharedChannelClaimedThreadContextKeepsToItsTenant(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	fake.AddTeam(teamC)
	fake.AddUser(teamC.ID, slacktest.User{ID: userDan, Name: "dan"})
	for _, team := range []string{teamA.ID, teamC.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamC.ID}})
	}
	e := newEnvOn(t, fake, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, nil)
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindScope, ID: shared, Tenant: "t2", Space: teamC.ID},
		{Kind: platform.BindUser, ID: userDan, Tenant: "t2"},
	}); err != nil {
		t.Fatal(err)
	}
	const adaRoot, danRoot = "1768400000.000100", "1768400000.000200"
	fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: shared, TS: adaRoot, User: userAda, Text: "t1's plan"})
	fake.AddMessage(slacktest.Message{Team: teamC.ID, Channel: shared, TS: danRoot, User: userDan, Text: "t2's plan"})
	mention := "<@" + teamA.BotUser + "> "
	turn := func(team slacktest.Team, id, user, ts, thread, tenant, want string) {
		t.Helper()
		e.event(t, team, id, slacktest.MessageEvent(team.ID, shared, user, ts, thread, mention+"what is this?"), http.StatusOK)
		d := e.sink.Next(t)
		var got []string
		for _, c := range d.Event.Context {
			got = append(got, c.Text)
		}
		if d.Tenant != tenant || strings.Join(got, "|") != want {
			t.Fatalf("%s's reply in %s, to %s: context %q; want %q", user, thread, d.Tenant, got, want)
		}
	}
	turn(teamC, "Ev1", userDan, "1768490900.000100", adaRoot, "t2", "")
	turn(teamA, "Ev2", userAda, "1768490900.000200", danRoot, "t1", "")
	turn(teamC, "Ev3", userDan, "1768490900.000300", danRoot, "t2", "[thread parent] t2's plan")
	turn(teamA, "Ev4", userAda, "1768490900.000400", adaRoot, "t1", "[thread parent] t1's plan")
}

// TestSharedChannelWithInstallsThreadContextKeepsToItsTenant: with OAuth
// installs, in a Slack Connect channel shared by A (t1's) and B (t2's),
// both of whose tokens read every message of the channel, a turn of t1's
// that enters the thread of Bob of B carries none of B's messages (Bob's,
// nor B's bot's answer to t2), and t2's none of A's; each keeps its own
// workspace's. Before, the
// channel read as held by each workspace's binding alone, so each tenant
// read the other's conversation in the thread's context.
func TestSharedChannelWithInstallsThreadContextKeepsToItsTenant(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	e := newEnvOn(t, fake, nil, nil)
	const adaRoot, bobRoot = "1768400000.000100", "1768400000.000200"
	fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: shared, TS: adaRoot, User: userAda, Text: "t1's plan"})
	fake.AddMessage(slacktest.Message{Team: teamB.ID, Channel: shared, TS: bobRoot, User: userBob, Text: "t2's plan"})
	for _, m := range []slacktest.Message{
		{Team: teamB.ID, TS: "1768400000.000300", ThreadTS: bobRoot, User: teamB.BotUser, BotID: teamB.BotID, Text: "t2's agent"},
		{Team: teamA.ID, TS: "1768400000.000400", ThreadTS: bobRoot, User: userAda, Text: "t1's aside"},
		{Team: teamA.ID, TS: "1768400000.000500", ThreadTS: adaRoot, User: teamA.BotUser, BotID: teamA.BotID, Text: "t1's agent"},
		{Team: teamB.ID, TS: "1768400000.000600", ThreadTS: adaRoot, User: userBob, Text: "t2's aside"},
	} {
		m.Channel = shared
		fake.AddMessage(m)
	}
	turn := func(team slacktest.Team, id, user, ts, thread, tenant, want string) {
		t.Helper()
		e.event(t, team, id, slacktest.MessageEvent(team.ID, shared, user, ts, thread, "<@"+team.BotUser+"> what is this?"), http.StatusOK)
		d := e.sink.Next(t)
		var got []string
		for _, c := range d.Event.Context {
			got = append(got, c.Text)
		}
		if d.Tenant != tenant || strings.Join(got, "|") != want {
			t.Fatalf("%s's reply in %s, to %s: context %q; want %q", user, thread, d.Tenant, got, want)
		}
	}
	turn(teamA, "Ev1", userAda, "1768490900.000100", bobRoot, "t1", "t1's aside")
	turn(teamB, "Ev2", userBob, "1768490900.000200", adaRoot, "t2", "t2's aside")
}

// TestSharedChannelThreadContextLeavesOutAnotherInstallsAnswers: with
// OAuth installs, in a Slack Connect channel shared by A (t1's) and C
// (installed, bound to nobody), where t2 answers Dan of C on its grant
// with C's bot, a turn of t1's that enters the thread carries not C's
// bot's answer to t2, which its token reads too. Before, only the
// install's own bot's messages were judged by whom they were posted for.
func TestSharedChannelThreadContextLeavesOutAnotherInstallsAnswers(t *testing.T) {
	const shared = "C0SHR00001"
	e := ownershipEnv(t, nil, platform.Binding{Kind: platform.BindUser, ID: userDan, Tenant: "t2"})
	for _, team := range []string{teamA.ID, teamC.ID} {
		e.fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamC.ID}})
	}
	const root, answer = "1768400000.000100", "1768400000.000300"
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: shared, TS: root, User: userAda, Text: "the plan"})
	e.fake.AddMessage(slacktest.Message{Team: teamC.ID, Channel: shared, TS: "1768400000.000200", ThreadTS: root, User: userDan, Text: "t2's question"})
	e.fake.AddMessage(slacktest.Message{Team: teamC.ID, Channel: shared, TS: answer, ThreadTS: root, User: teamC.BotUser, BotID: teamC.BotID, Text: "t2's answer"})
	ctx, cancel := contextFor()
	defer cancel()
	e.p.grants.Posted(ctx, shared, answer, "t2", time.Time{})
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, shared, userAda, "1768490900.000100", root, "<@"+teamA.BotUser+"> and now?"), http.StatusOK)
	d := e.sink.Next(t)
	var got []string
	for _, c := range d.Event.Context {
		got = append(got, c.Text)
	}
	if want := "[thread parent] the plan"; d.Tenant != "t1" || strings.Join(got, "|") != want {
		t.Fatalf("Ada's reply, to %s: context %q; want %q", d.Tenant, got, want)
	}
}

// TestThreadContextLeavesOutAnInstallsAnswersItCannotTell: as
// TestSharedChannelThreadContextLeavesOutAnotherInstallsAnswers, but the
// store cannot read C's install (its bot user unknown): C's bot's answer
// to t2 is left out of t1's context. Before, a message whose workspace's
// bot could not be looked up read as nobody's bot's, and showed.
func TestThreadContextLeavesOutAnInstallsAnswersItCannotTell(t *testing.T) {
	const shared = "C0SHR00001"
	fail := &atomic.Bool{}
	e := ownershipEnv(t, &platform.Deps{Store: installGetFails{store.NewMemory(nil), fail}}, platform.Binding{Kind: platform.BindUser, ID: userDan, Tenant: "t2"})
	for _, team := range []string{teamA.ID, teamC.ID} {
		e.fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamC.ID}})
	}
	const root = "1768400000.000100"
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: shared, TS: root, User: userAda, Text: "the plan"})
	e.fake.AddMessage(slacktest.Message{Team: teamC.ID, Channel: shared, TS: "1768400000.000300", ThreadTS: root, User: teamC.BotUser, BotID: teamC.BotID, Text: "t2's answer"})
	fail.Store(true)
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, shared, userAda, "1768490900.000100", root, "<@"+teamA.BotUser+"> and now?"), http.StatusOK)
	d := e.sink.Next(t)
	var got []string
	for _, c := range d.Event.Context {
		got = append(got, c.Text)
	}
	if want := "[thread parent] the plan"; d.Tenant != "t1" || strings.Join(got, "|") != want {
		t.Fatalf("Ada's reply, to %s: context %q; want %q", d.Tenant, got, want)
	}
}

// installGetFails is a store whose Registry cannot read installs while
// fail is set.
type installGetFails struct {
	store.Store
	fail *atomic.Bool
}

// Registry implements store.Store.
func (s installGetFails) Registry() store.Registry { return failingGet{s.Store.Registry(), s.fail} }

// failingGet is a Registry whose Get of an install fails while fail is set.
type failingGet struct {
	store.Registry
	fail *atomic.Bool
}

// Get implements store.Registry.
func (r failingGet) Get(ctx context.Context, namespace, key string) (store.Entry, bool, error) {
	if namespace == installsNamespace && r.fail.Load() {
		return store.Entry{}, false, errors.New("registry unavailable")
	}
	return r.Registry.Get(ctx, namespace, key)
}

// TestThreadContextPlacesTheChannelWithinItsDeadline: while Slack does
// not answer conversations.info, the turn that enters a thread waits for
// the channel's placement (heldAlone) no longer than placeDeadline, and
// then reads the channel as not held alone (its context
// judged message by message). Before, the placement waited on the
// ingest's context, up to the request timeout, with the chat's turns held
// behind it.
func TestThreadContextPlacesTheChannelWithinItsDeadline(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	const root = "1768400000.000100"
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: root, User: userAda, Text: "the plan"})
	// A turn outside the thread first: the channel's name is known then.
	e.event(t, teamA, "Ev0", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490900.000050", "", "<@"+teamA.BotUser+"> hi"), http.StatusOK)
	e.sink.Next(t)
	started := make(chan string, 16)
	e.fake.StallMethod("conversations.info", started)
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490900.000100", root, "<@"+teamA.BotUser+"> and now?"), http.StatusOK)
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatal("the channel was not placed")
	}
	clk.Advance(placeDeadline)
	d := e.sink.Next(t)
	if len(d.Event.Context) != 1 || d.Event.Context[0].Text != "[thread parent] the plan" {
		t.Fatalf("context %+v", d.Event.Context)
	}
}
