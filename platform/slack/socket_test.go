package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/slack/slacktest"
	"connector/store"
	"connector/vault"
)

// socketLease is the TTL of the leases socketDeps runs Exclusive on.
const socketLease = time.Minute

// socketDeps runs Exclusive on st's leases, as serve does with several
// instances, under instance's name; the leases and the cluster node run on
// clk (st's clock too), so that a lease is held, and another instance
// bids again, only as the test moves clk, however slow the machine.
func socketDeps(t *testing.T, st store.Store, clk clock.Clock, instance string) *platform.Deps {
	node, err := cluster.New(cluster.Config{Instance: instance, PubSub: st.PubSub(), LeaseTTL: socketLease, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	return &platform.Deps{
		Store:   st,
		Cluster: node,
		Exclusive: func(ctx context.Context, name string, run func(context.Context) error) error {
			return store.RunExclusive(ctx, clk, st.Leases(), "ingest/"+name, instance, socketLease, run)
		},
	}
}

// TestSocketModeUnderALease: with app_token, one instance holds the Socket
// Mode connection; an envelope is acknowledged once its event is stored;
// when that instance stops, the other takes the lease and connects, and
// events keep flowing.
func TestSocketModeUnderALease(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
	a := newEnv(t, socket, socketDeps(t, st, clk, "i0"))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := a.fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	b := newEnvOn(t, a.fake, socket, socketDeps(t, st, clk, "i1"))
	push := func(fake *slacktest.Server, ts, text string) string {
		t.Helper()
		env := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev"+ts, slacktest.MessageEvent(teamA.ID, dmAda, userAda, ts, "", text))
		id, err := fake.PushEvent(ctx, "events_api", env)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := push(a.fake, "1768490100.000100", "over the socket")
	d := a.sink.Next(t)
	if d.Tenant != "t1" || d.Event.Text != "over the socket" {
		t.Fatalf("%+v", d)
	}
	if _, err := a.fake.WaitAck(ctx, id); err != nil {
		t.Fatal(err)
	}
	// A slash command over the socket is acknowledged with its ephemeral
	// answer.
	cmd, _ := json.Marshal(map[string]string{"team_id": teamA.ID, "channel_id": chanGeneral, "user_id": userAda, "command": "/status",
		"text": "", "response_url": a.fake.ResponseURL("r9")})
	cid, err := a.fake.PushEvent(ctx, "slash_commands", cmd)
	if err != nil {
		t.Fatal(err)
	}
	if d := a.sink.Next(t); d.Event.Text != "/status" {
		t.Fatalf("%+v", d.Event)
	}
	payload, err := a.fake.WaitAck(ctx, cid)
	if err != nil || !strings.Contains(string(payload), "Running `/status`") {
		t.Fatalf("ack %s %v", payload, err)
	}
	// Instance i0 stops, releasing the lease: i1, which lost its bid to
	// i0 and sleeps on clk until its next, takes it then, and the
	// connection. The next event is pushed on i1's connection alone: the
	// fake pushes on any connection it still has open.
	platformtest.WaitUntil(t, "i1 to lose its bid for the lease and sleep until its next", func() bool { return clk.Sleepers() > 0 })
	a.stop()
	a.stop = func() {}
	platformtest.WaitUntil(t, "i0's connection closed at the fake", func() bool { return a.fake.OpenSockets() == 0 })
	clk.Advance(socketLease)
	if err := a.fake.WaitSocket(ctx, 2); err != nil {
		t.Fatal(err)
	}
	push(a.fake, "1768490100.000200", "after the move")
	if d := b.sink.Next(t); d.Event.Text != "after the move" {
		t.Fatalf("%+v", d)
	}
}

// blockingVault holds every response_url Put until release is closed,
// telling entered of each.
type blockingVault struct {
	vault.Store
	entered chan struct{}
	release chan struct{}
}

func (v *blockingVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if k.Kind == vault.KindSlackResponseURL {
		v.entered <- struct{}{}
		<-v.release
	}
	return v.Store.Put(ctx, k, e)
}

// TestSocketModeBoundsWorkBesideTheReader: the slash commands and
// interactions handled beside the Socket Mode reader are bounded; one past
// the bound is left unacknowledged (and logged), and once the work in hand
// ends the next one is handled.
func TestSocketModeBoundsWorkBesideTheReader(t *testing.T) {
	old := maxBeside
	maxBeside = 2
	t.Cleanup(func() { maxBeside = old })
	v := &blockingVault{Store: vault.NewMemory(vault.Config{}), entered: make(chan struct{}, 8), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(v.release) })
	t.Cleanup(release)
	socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
	e := newEnv(t, socket, &platform.Deps{Vault: v})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	push := func(n int) string {
		t.Helper()
		// Each in a channel of its own: a chat's commands are delivered,
		// their response_urls kept, one at a time.
		cmd, _ := json.Marshal(map[string]string{"team_id": teamA.ID, "channel_id": sprintf("C0BND%05d", n), "user_id": userAda, "command": "/status",
			"text": sprintf("%d", n), "response_url": e.fake.ResponseURL(sprintf("r%d", n))})
		id, err := e.fake.PushEvent(ctx, "slash_commands", cmd)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	var held []string
	for n := range 2 {
		held = append(held, push(n))
		select {
		case <-v.entered:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for slash command %d to be in hand", n)
		}
	}
	over := push(2)
	for !strings.Contains(e.logs.String(), "one left unacknowledged") {
		if ctx.Err() != nil {
			t.Fatal("timed out waiting for the envelope past the bound to be turned away")
		}
		time.Sleep(2 * time.Millisecond) // the platform signals nothing else
	}
	release()
	for _, id := range held {
		if _, err := e.fake.WaitAck(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if e.fake.Acked(over) {
		t.Fatal("the envelope past the bound was acknowledged")
	}
	// A slot is given back once its work has returned, just after its ack
	// was sent: the fake may see the ack first.
	platformtest.WaitUntil(t, "the slash commands in hand to give their slots back", func() bool { return len(e.p.besides) == 0 })
	if _, err := e.fake.WaitAck(ctx, push(3)); err != nil {
		t.Fatalf("after the work in hand ended: %v", err)
	}
	for range 3 {
		e.sink.Next(t)
	}
}

// TestSocketModeStalledFileAckedFirst: over Socket Mode, as on the HTTP
// route, a message whose file stalls is acknowledged at once (its envelope
// stored in the durable intake), and so are a later message and a slash
// command of its chat; they are delivered after it, in order, once its
// download ends. The message held its chat's turn, and every envelope
// behind it, unacknowledged while it downloaded.
func TestSocketModeStalledFileAckedFirst(t *testing.T) {
	clk := clocktest.New(time.Now())
	socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
	e := newEnv(t, socket, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 4)
	url := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // a failed test's download ends
	push := func(kind string, payload []byte) string {
		t.Helper()
		id, err := e.fake.PushEvent(ctx, kind, payload)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	acked := func(id, what string) {
		t.Helper()
		if _, err := e.fake.WaitAck(ctx, id); err != nil {
			t.Fatalf("%s not acknowledged: %v", what, err)
		}
	}
	acked(push("events_api", slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", fileMessage(dmAda, "1768490100.000100", "F0SLOW0001", url))), "the message with a stalled file")
	waitStarted(t, started, "the stalled file")
	acked(push("events_api", slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev2", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000200", "", "and then"))), "the later message")
	cmd, _ := json.Marshal(map[string]string{"team_id": teamA.ID, "channel_id": dmAda, "user_id": userAda, "command": "/status",
		"text": "", "response_url": e.fake.ResponseURL("r1")})
	acked(push("slash_commands", cmd), "the slash command")
	e.sink.Empty(t)
	clk.Advance(mediaDownloadTimeout)
	for i, want := range []string{"F0SLOW0001.png could not be fetched", "and then", "/status"} {
		if d := e.sink.Next(t); !strings.Contains(d.Event.Text, want) {
			t.Fatalf("delivery %d %q, want it to hold %q", i, d.Event.Text, want)
		}
	}
	e.settled(t)
	e.sink.Empty(t)
	intakeEmpty(t, e.store)
}

// TestRunEndsWhenATokenIsRefused: Slack refusing app_token, or bot_token
// without client_id, ends Run with its error while Run's context is still
// live; Run returns, every background goroutine (the intake's keeper, the
// link desk) ended with it.
func TestRunEndsWhenATokenIsRefused(t *testing.T) {
	for _, refused := range []string{"app", "bot"} {
		t.Run(refused, func(t *testing.T) {
			fake := newFake(t)
			cfg := Config{AppToken: "xapp-1-A0FAKE-socket", BotToken: teamA.Token, APIURL: fake.URL, ChannelPerSecond: -1,
				Teams: map[string]string{teamA.ID: "t1"}}
			fake.Revoke(map[string]string{"app": cfg.AppToken, "bot": cfg.BotToken}[refused])
			st := store.NewMemory(nil)
			t.Cleanup(func() { _ = st.Close() })
			p, err := New(cfg, platform.Deps{Store: st, Vault: vault.NewMemory(vault.Config{})})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel() // live until Run has returned
			done := make(chan error, 1)
			go func() { done <- p.Run(ctx, platformtest.NewSink(1)) }()
			select {
			case err := <-done:
				if !errors.Is(err, errTokenRejected) {
					t.Fatalf("Run: %v, want the token's rejection", err)
				}
			case <-time.After(waitFor):
				t.Fatalf("timed out after %v waiting for Run to return once Slack refused the %s token", waitFor, refused)
			}
			if st := p.Status(); !st.Terminal {
				t.Errorf("status %+v, want terminal", st)
			}
		})
	}
}

// TestSocketModeRecoversFromA404: apps.connections.open answering HTTP 404
// (which the socketmode client reports as invalid auth) a few times is
// retried, not taken for a refused app_token: once the socket connects,
// the platform reports ready. Its status stayed terminal before ("Slack
// rejected app_token") while it reconnected, and once connected. The
// backoffs between the attempts run on the injected clock, which the test
// moves on once the platform sleeps in each.
func TestSocketModeRecoversFromA404(t *testing.T) {
	fake := newFake(t)
	const refused = 3
	fake.Fail404("apps.connections.open", refused)
	socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
	clk := clocktest.New(time.Now())
	e := startEnvOn(t, fake, socket, &platform.Deps{Clock: clk})
	for i := range refused {
		platformtest.WaitUntil(t, fmt.Sprintf("the platform to back off after 404 number %d", i+1), func() bool { return clk.Sleepers() == 1 })
		if st := e.p.Status(); st.Terminal {
			t.Fatalf("status after 404 number %d: %+v, want it not terminal", i+1, st)
		}
		clk.Advance(connectBackoffMin << i)
	}
	ctx, cancel := contextFor()
	defer cancel()
	if err := fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	platformtest.WaitUntil(t, "the platform to report the socket connected", func() bool {
		return e.p.Status().Ready
	})
	if st := e.p.Status(); st.Terminal {
		t.Fatalf("status %+v, want it not terminal", st)
	}
}

// TestSocketModeMalformedCountedAsOnHTTP: a Socket Mode envelope whose
// payload does not read is counted dropped as the HTTP routes count a body
// they answer 400 (malformed): an interactive or slash command payload the
// socketmode client cannot parse, an events_api payload with no type; one
// of a type the route does not take is unsupported, as there, and so is an
// envelope of a type the client does not know; app_rate_limited, Slack's
// notice that it holds events back, is logged and not counted. Every one
// is acknowledged (received: sent again, it would not read better, and
// Slack counts an envelope left unanswered against the app). Before, the
// envelopes the client could not read were left unacknowledged.
func TestSocketModeMalformedCountedAsOnHTTP(t *testing.T) {
	m := &drops{got: map[string]int{}}
	socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
	e := newEnv(t, socket, &platform.Deps{Metrics: m})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	var unread []string
	for _, kind := range []string{"interactive", "slash_commands", "future_kind"} {
		id, err := e.fake.PushEvent(ctx, kind, []byte(`[1]`))
		if err != nil {
			t.Fatal(err)
		}
		unread = append(unread, id)
	}
	for _, payload := range []string{`{}`, `{"type":"team_migration_started"}`, `{"type":"app_rate_limited","team_id":"` + teamA.ID + `"}`} {
		id, err := e.fake.PushEvent(ctx, "events_api", []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.fake.WaitAck(ctx, id); err != nil {
			t.Fatalf("events_api %s not acknowledged: %v", payload, err)
		}
	}
	for _, id := range unread {
		if _, err := e.fake.WaitAck(ctx, id); err != nil {
			t.Fatalf("unreadable envelope %s not acknowledged: %v", id, err)
		}
	}
	platformtest.WaitUntil(t, "three envelopes counted malformed and two unsupported", func() bool { // the final count is checked below
		return m.count(dropMalformed) == 3 && m.count(dropUnsupported) >= 2
	})
	if m.count(dropUnsupported) != 2 || !strings.Contains(e.logs.String(), "slack is rate limiting the app's events") {
		t.Fatalf("%d envelopes counted unsupported in all, or app_rate_limited not logged, want 2 (not app_rate_limited) and logged", m.count(dropUnsupported))
	}
	e.sink.Empty(t)
}

// TestSocketModeReadsEventsAsOnHTTP: a message whose team is an object,
// which the socketmode client cannot read into slackevents' typed events
// (EventTypeErrorBadMessage) and the HTTP route reads, is delivered and
// acknowledged over Socket Mode too. Before, it was left unacknowledged,
// counted malformed, and lost.
func TestSocketModeReadsEventsAsOnHTTP(t *testing.T) {
	socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
	e := newEnv(t, socket, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	ev := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "a team object")
	ev["team"] = map[string]any{"id": teamA.ID}
	id, err := e.fake.PushEvent(ctx, "events_api", slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", ev))
	if err != nil {
		t.Fatal(err)
	}
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.Text != "a team object" {
		t.Fatalf("%+v", d)
	}
	if _, err := e.fake.WaitAck(ctx, id); err != nil {
		t.Fatalf("the message not acknowledged: %v", err)
	}
}

// TestSocketModePress: a prompt press over Socket Mode is delivered, as the
// client read it, and acknowledged.
func TestSocketModePress(t *testing.T) {
	socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
	e := newEnv(t, socket, nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	form, _ := url.ParseQuery(string(slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once")))
	id, err := e.fake.PushEvent(ctx, "interactive", []byte(form.Get("payload")))
	if err != nil {
		t.Fatal(err)
	}
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil || d.Event.PromptResponse.OptionID != "once" {
		t.Fatalf("press delivered as %+v", d.Event)
	}
	if _, err := e.fake.WaitAck(ctx, id); err != nil {
		t.Fatalf("the press not acknowledged: %v", err)
	}
}

// TestSocketModePressPastItsTenantsBoundAnsweredBusy: over Socket Mode as
// on the HTTP route, a press the intake has no room for (t1's bound taken:
// its stalled chat's entry and reservations) is acknowledged, and its
// user told through its response_url to press again. Before, it was left
// unacknowledged, and its user saw Slack's timeout error.
func TestSocketModePressPastItsTenantsBoundAnsweredBusy(t *testing.T) {
	clk := clocktest.New(time.Now())
	socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
	e := newEnv(t, socket, &platform.Deps{Media: newMediaStore(t), Clock: clk})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	started := make(chan string, 1)
	file := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	id, err := e.fake.PushEvent(ctx, "events_api", slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", fileMessage(chanGeneral, "1768490100.000100", "F0SLOW0001", file)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fake.WaitAck(ctx, id); err != nil {
		t.Fatalf("the message with a stalled file not acknowledged: %v", err)
	}
	waitStarted(t, started, "the stalled file")
	for range e.p.intakeBound("t1") - 1 {
		if !e.p.intake.reserve(e.p.chargeOf("t1"), false) {
			t.Fatal("t1's reservation refused below its bound")
		}
	}
	var payload map[string]any
	form, _ := url.ParseQuery(string(slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once")))
	if err := json.Unmarshal([]byte(form.Get("payload")), &payload); err != nil {
		t.Fatal(err)
	}
	payload["response_url"] = e.fake.ResponseURL("busy")
	if id, err = e.fake.PushEvent(ctx, "interactive", mustJSON(t, payload)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fake.WaitAck(ctx, id); err != nil {
		t.Fatalf("the press past t1's bound not acknowledged: %v", err)
	}
	posts, err := e.fake.WaitResponses(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b := posts[0].Body; posts[0].ID != "busy" || b["response_type"] != "ephemeral" || !strings.Contains(fmt.Sprint(b["text"]), "press it again") {
		t.Fatalf("the press's user was told %+v, want an ephemeral press it again", posts[0])
	}
}

// TestSocketModeSlowBusyPostsBounded: busy answers to presses (the
// intake full) whose response_url never answers hold at most maxBusyPosts
// of the slots beside the reader; a press past them is acknowledged, its
// post skipped and counted (overloaded), and a slash command is still
// handled. Before, each busy post held its slot for request_timeout, and
// a flood of them left every later press and command unacknowledged.
func TestSocketModeSlowBusyPostsBounded(t *testing.T) {
	oldBeside, oldBusy := maxBeside, maxBusyPosts
	maxBeside, maxBusyPosts = 3, 1
	t.Cleanup(func() { maxBeside, maxBusyPosts = oldBeside, oldBusy })
	clk := clocktest.New(time.Now())
	m := &drops{got: map[string]int{}}
	socket := func(c *Config) { c.AppToken, c.SigningSecret = "xapp-1-A0FAKE-socket", "" }
	e := newEnv(t, socket, &platform.Deps{Media: newMediaStore(t), Clock: clk, Metrics: m})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := e.fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	r := e.execute(t, "t1", `{"op":"prompt","chat_id":"C0GEN00001","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	started := make(chan string, 1)
	file := e.fake.AddStalledFile(teamA.ID, "F0SLOW0001", "F0SLOW0001.png", "image/png", started)
	t.Cleanup(func() { clk.Advance(mediaDownloadTimeout) }) // the download ends
	id, err := e.fake.PushEvent(ctx, "events_api", slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", fileMessage(chanGeneral, "1768490100.000100", "F0SLOW0001", file)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fake.WaitAck(ctx, id); err != nil {
		t.Fatalf("the message with a stalled file not acknowledged: %v", err)
	}
	waitStarted(t, started, "the stalled file")
	for range e.p.intakeBound("t1") - 1 {
		if !e.p.intake.reserve(e.p.chargeOf("t1"), false) {
			t.Fatal("t1's reservation refused below its bound")
		}
	}
	posting := make(chan string, 8)
	e.fake.StallResponses(posting)
	var payload map[string]any
	form, _ := url.ParseQuery(string(slacktest.Press(teamA.ID, chanGeneral, userAda, r.MessageID, "", "hp1:p1:once", "Approve once")))
	if err := json.Unmarshal([]byte(form.Get("payload")), &payload); err != nil {
		t.Fatal(err)
	}
	for n := range maxBeside {
		payload["response_url"] = e.fake.ResponseURL(sprintf("busy%d", n))
		if id, err = e.fake.PushEvent(ctx, "interactive", mustJSON(t, payload)); err != nil {
			t.Fatal(err)
		}
		if _, err := e.fake.WaitAck(ctx, id); err != nil {
			t.Fatalf("busy press %d not acknowledged: %v", n, err)
		}
		if n == 0 {
			waitStarted(t, posting, "the first busy post")
		}
	}
	platformtest.WaitUntil(t, "the presses past the busy posts' bound to be counted", func() bool { return m.count(dropOverloaded) == maxBeside-1 })
	cmd, _ := json.Marshal(map[string]string{"team_id": teamA.ID, "channel_id": "C0FREE0001", "user_id": userAda, "command": "/status",
		"text": "x", "response_url": e.fake.ResponseURL("cmd")})
	if id, err = e.fake.PushEvent(ctx, "slash_commands", cmd); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fake.WaitAck(ctx, id); err != nil {
		t.Fatalf("a slash command behind the slow busy posts: %v", err)
	}
}
