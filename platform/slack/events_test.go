package slack

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/platform"
	"connector/platform/slack/slacktest"
	"connector/session"
	"connector/store"
)

// TestSignedEventReachesItsTenant: a signed message is delivered to the
// tenant of its workspace, normalized, before the 200.
func TestSignedEventReachesItsTenant(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "hello <@U0BOTA0001>"), http.StatusOK)
	d := e.sink.Next(t)
	src := d.Event.Source
	if d.Tenant != "t1" || d.Platform != "slack" || src.ChatID != dmAda || src.ChatType != "dm" || src.ScopeID != teamA.ID ||
		src.UserName.Value != "Ada" || src.ChatName.Value != "Ada" || src.ThreadID.Value != "1768490100.000100" {
		t.Fatalf("delivery %+v source %+v", d, src)
	}
	if d.Event.Text != "hello" || d.SessionKey != "agent:main:slack:dm:T0AAA00001:D0ADA00001:1768490100.000100" {
		t.Fatalf("event %+v key %s", d.Event, d.SessionKey)
	}
	// Workspace B reaches its own tenant.
	e.event(t, teamB, "Ev2", slacktest.MessageEvent(teamB.ID, chanAcme, userBob, "1768490100.000200", "", "<@U0BOTB0002> status?"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.Text != "status?" || d.Event.Source.ChatName.Value != "acme-general" {
		t.Fatalf("workspace B's event: %+v", d)
	}
	// A channel bound to a tenant goes to it, not to its workspace's.
	e.event(t, teamA, "Ev3", slacktest.MessageEvent(teamA.ID, chanOps, userAda, "1768490100.000300", "", "<@U0BOTA0001> deploy"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t3" {
		t.Fatalf("bound channel's event went to %s", d.Tenant)
	}
}

// TestForgedOrStaleSignatureRefused: a wrong signature, a timestamp more
// than five minutes off the platform's clock either way, and a missing
// header are 401, and deliver nothing.
func TestForgedOrStaleSignatureRefused(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "hi"))
	cases := map[string]*http.Request{
		"forged":     slacktest.SignedRequest(e.srv.URL+EventsPath, "another-secret", clk.Now(), "application/json", body),
		"stale":      slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, clk.Now().Add(-5*time.Minute-time.Second), "application/json", body),
		"from after": slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, clk.Now().Add(5*time.Minute+time.Second), "application/json", body),
	}
	tampered := slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, clk.Now(), "application/json", body)
	tampered.Body = http.NoBody
	cases["tampered body"] = tampered
	unsigned := slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, clk.Now(), "application/json", body)
	unsigned.Header.Del("X-Slack-Signature")
	cases["unsigned"] = unsigned
	for name, req := range cases {
		if code, _ := e.do(t, req); code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, code)
		}
	}
	e.sink.Empty(t)
	// The window is the platform's clock's: a request signed "now" by a
	// sender whose clock agrees is accepted 4m59s later by the platform's.
	clk.Advance(4*time.Minute + 59*time.Second)
	if code, _ := e.do(t, slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, clk.Now().Add(-4*time.Minute-59*time.Second), "application/json", body)); code != http.StatusOK {
		t.Fatalf("a request 4m59s old: %d", code)
	}
	e.sink.Next(t)
}

// TestSigningSecretRotation: while previous_signing_secret is set, a
// request signed with it is accepted as well as one signed with
// signing_secret; without it, the old secret's request is refused 401, as
// is one signed with neither; a log line naming either secret shows
// neither.
func TestSigningSecretRotation(t *testing.T) {
	const old = "old-signing-secret-3c9a"
	body := func(ts string) []byte {
		return slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev"+ts, slacktest.MessageEvent(teamA.ID, dmAda, userAda, ts, "", "hi"))
	}
	send := func(e *env, secret, ts string) int {
		code, _ := e.do(t, slacktest.SignedRequest(e.srv.URL+EventsPath, secret, time.Now(), "application/json", body(ts)))
		return code
	}
	rotating := newEnv(t, func(c *Config) { c.PreviousSigningSecret = old }, nil)
	for i, secret := range []string{testSecret, old} {
		if code := send(rotating, secret, sprintf("1768490100.00010%d", i)); code != http.StatusOK {
			t.Fatalf("during the rotation, signed with secret %d: %d, want 200", i, code)
		}
		rotating.sink.Next(t)
	}
	if code := send(rotating, "another-secret", "1768490100.000200"); code != http.StatusUnauthorized {
		t.Fatalf("during the rotation, signed with neither secret: %d, want 401", code)
	}
	if text := rotating.p.errorText(errors.New("got " + testSecret + " and " + old)); strings.Contains(text, testSecret) || strings.Contains(text, old) {
		t.Fatalf("errorText left a signing secret: %q", text)
	}
	plain := newEnv(t, nil, nil)
	if code := send(plain, old, "1768490100.000300"); code != http.StatusUnauthorized {
		t.Fatalf("without previous_signing_secret, signed with the old secret: %d, want 401", code)
	}
	rotating.sink.Empty(t)
	plain.sink.Empty(t)
	if err := (Config{PreviousSigningSecret: old, AppToken: "xapp-1-A0FAKE-socket", BotToken: teamA.Token}).Validate(); err == nil || strings.Contains(err.Error(), old) {
		t.Fatalf("previous_signing_secret without signing_secret: %v, want refused without the secret", err)
	}
}

// TestOversizedBodyIs413: a signed body over max_event_bytes is answered
// 413 "request too large" (docs/security.md) and delivers nothing.
func TestOversizedBodyIs413(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxEventBytes = 64 }, nil)
	body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "hi"))
	if code, text := e.post(t, EventsPath, "application/json", body); code != http.StatusRequestEntityTooLarge || strings.TrimSpace(text) != "request too large" {
		t.Fatalf("%d %q, want 413 request too large", code, text)
	}
	e.sink.Empty(t)
}

// TestURLVerification answers the challenge.
func TestURLVerification(t *testing.T) {
	e := newEnv(t, nil, nil)
	code, body := e.post(t, EventsPath, "application/json", []byte(`{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`))
	if code != http.StatusOK || !strings.Contains(body, `"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"`) {
		t.Fatalf("%d %s", code, body)
	}
	e.sink.Empty(t)
}

// TestRetriedEventDeliveredOnce: Slack's retry of an event (same body,
// X-Slack-Retry-Num) and the app_mention of a message already delivered
// (same team and ts) are answered 200 and not delivered again.
func TestRetriedEventDeliveredOnce(t *testing.T) {
	e := newEnv(t, nil, nil)
	msg := slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490100.000100", "", "<@U0BOTA0001> once")
	e.event(t, teamA, "Ev1", msg, http.StatusOK)
	e.sink.Next(t)
	req := slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, time.Now(), "application/json", slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", msg))
	req.Header.Set("X-Slack-Retry-Num", "1")
	req.Header.Set("X-Slack-Retry-Reason", "http_timeout")
	if code, _ := e.do(t, req); code != http.StatusOK {
		t.Fatalf("retry: %d", code)
	}
	mention := slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490100.000100", "", "<@U0BOTA0001> once")
	mention["type"] = "app_mention"
	delete(mention, "channel_type")
	e.event(t, teamA, "Ev2", mention, http.StatusOK)
	e.sink.Empty(t)
}

// TestNotStoredIsRetried: a delivery the relay refuses is answered 503
// (Slack retries), and the retry is delivered.
func TestNotStoredIsRetried(t *testing.T) {
	e := newEnv(t, nil, nil)
	msg := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "refused first")
	e.sink.Refuse(1)
	e.event(t, teamA, "Ev1", msg, http.StatusServiceUnavailable)
	e.sink.Empty(t)
	e.event(t, teamA, "Ev1", msg, http.StatusOK)
	if d := e.sink.Next(t); d.Event.Text != "refused first" {
		t.Fatalf("%+v", d.Event)
	}
}

// TestDuplicateAcrossInstances: two instances sharing a store get the
// same event at once (Slack retried a slow first delivery on another
// instance); it is delivered once, and the copy that found it in hand
// elsewhere is answered 503 or 200, never delivered.
func TestDuplicateAcrossInstances(t *testing.T) {
	st := newSharedStore(t)
	node := func(name string) *cluster.Node {
		n, err := cluster.New(cluster.Config{Instance: name, PubSub: st.PubSub()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	a := newEnv(t, nil, &platform.Deps{Store: st, Cluster: node("i0")})
	b := newEnv(t, nil, &platform.Deps{Store: st, Cluster: node("i1")})
	for i := range 20 {
		ts := "1768490100.0001" + string(rune('0'+i/10)) + string(rune('0'+i%10))
		body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev"+ts, slacktest.MessageEvent(teamA.ID, dmAda, userAda, ts, "", "once "+ts))
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for j, e := range []*env{a, b} {
			wg.Go(func() {
				codes[j], _ = e.do(t, slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, time.Now(), "application/json", body))
			})
		}
		wg.Wait()
		if codes[0] != http.StatusOK && codes[1] != http.StatusOK {
			t.Fatalf("event %d: answered %v, want one 200", i, codes)
		}
		got := a.sink.Taken() + b.sink.Taken() - int64(i)
		// A 503 copy is retried by Slack: the retry finds it done.
		for j, e := range []*env{a, b} {
			if codes[j] == http.StatusServiceUnavailable {
				if code, _ := e.do(t, slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, time.Now(), "application/json", body)); code != http.StatusOK {
					t.Fatalf("event %d: the retry got %d", i, code)
				}
			}
		}
		if n := a.sink.Taken() + b.sink.Taken() - int64(i); got != 1 || n != 1 {
			t.Fatalf("event %d delivered %d times", i, n)
		}
		for _, e := range []*env{a, b} {
			e.sink.TryNext()
		}
	}
}

// TestUnclaimedWorkspaceDropped: an event of a workspace no tenant claims
// is answered 200 and delivered to nobody.
func TestUnclaimedWorkspaceDropped(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Teams = nil }, nil)
	if err := e.p.Bind(nil); err != nil {
		t.Fatal(err)
	}
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490100.000100", "", "anyone?"), http.StatusOK)
	e.sink.Empty(t)
}

// TestEventsAreNotMisrouted: the session key of a delivered event is the
// one its tenant's gateway computes, and a DM in workspace B never reaches
// workspace A's tenant.
func TestEventsAreNotMisrouted(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.fake.AddChannel(teamB.ID, slacktest.Channel{ID: "D0BOB00001", IsIM: true, Peer: userBob})
	e.event(t, teamB, "Ev1", slacktest.MessageEvent(teamB.ID, "D0BOB00001", userBob, "1768490100.000100", "", "private"), http.StatusOK)
	d := e.sink.Next(t)
	if d.Tenant != "t2" || d.SessionKey != session.Key(&d.Event.Source, session.DefaultOptions) {
		t.Fatalf("%+v", d)
	}
}

// postDriven posts the signed event body while driving clk, one timer at
// a time, whenever the request waits on it (sleeping, or waiting for the
// users.info budget of workspace A, any tenant's share), and answers the request's status and
// how far clk moved meanwhile.
func (e *env) postDriven(t *testing.T, clk *clocktest.Fake, body []byte) (code int, took time.Duration) {
	t.Helper()
	ctx, cancel := contextFor()
	defer cancel()
	req := slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, e.now(), "application/json", body).WithContext(ctx)
	var answered atomic.Int32
	codes := make(chan int, 1)
	go func() {
		defer answered.Store(1)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			codes <- 0
			return
		}
		resp.Body.Close()
		codes <- resp.StatusCode
	}()
	start := clk.Now()
	users := e.p.limits.budget(teamA.ID, "users.info")
	waiting := func() (n int) {
		for _, tenant := range []string{"t1", "t2", "t3"} {
			n += users.Waiting(tenant)
		}
		return n
	}
	clk.Drive(t, 1, func() int { return int(answered.Load()) }, waiting)
	return <-codes, clk.Now().Sub(start)
}

// newSharedStore is one store two instances share.
func newSharedStore(t *testing.T) store.Store {
	t.Helper()
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestManyMentionsStoredInTime: the names of a message's mentions are
// looked up within one deadline, not one each: a message mentioning a
// hundred users the workspace's users.info budget cannot answer (the
// budget's burst is spent and it refills at 100 a minute) is still stored
// before Slack gives up on the request (3 s on the platform's clock, which
// the test drives one timer at a time), with the names it could not
// resolve left as ids. One lookup deadline each would hold the request,
// and every message behind it in the chat, for over twenty seconds.
func TestManyMentionsStoredInTime(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	var text strings.Builder
	text.WriteString("<@U0BOTA0001> ping <@" + userAda + ">")
	for i := range 100 {
		text.WriteString(sprintf(" <@U0X%07d>", i))
	}
	body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490100.000100", "", text.String()))
	if code, took := e.postDriven(t, clk, body); code != http.StatusOK || took > 3*time.Second {
		t.Fatalf("answered %d after %v of the platform's clock, want 200 within Slack's 3 s", code, took)
	}
	if d := e.sink.Next(t); !strings.HasPrefix(d.Event.Text, "ping @Ada @U0X0000000") {
		t.Fatalf("text %.80q", d.Event.Text)
	}
}

// TestNameNotLostToAnotherTenantsBudget: a name lookup that gives up
// because the asking tenant's share of the budget or its deadline ran out
// is not Slack's answer, so it is not remembered as failed. A member of
// t3's channel ops (in t1's workspace) mentioning thirty users spends t3's
// share; a message t1 gets from one of them a little later still carries
// the user's name (and whether it is a bot), not its id.
func TestNameNotLostToAnotherTenantsBudget(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	var text strings.Builder
	text.WriteString("<@" + teamA.BotUser + "> ping")
	for i := range 30 {
		e.fake.AddUser(teamA.ID, slacktest.User{ID: sprintf("U0Z%07d", i), Name: sprintf("zed%d", i)})
		text.WriteString(sprintf(" <@U0Z%07d>", i))
	}
	body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", slacktest.MessageEvent(teamA.ID, chanOps, userAda, "1768490100.000100", "", text.String()))
	if code, _ := e.postDriven(t, clk, body); code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t3" || !strings.HasSuffix(d.Event.Text, " @U0Z0000029") {
		t.Fatalf("%s %.80q: want t3's, the last name unresolved", d.Tenant, d.Event.Text)
	}
	clk.Advance(10 * time.Second) // the budget refills; failedTTL is a minute
	body = slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev2", slacktest.MessageEvent(teamA.ID, chanGeneral, "U0Z0000029", "1768490110.000100", "", "<@"+teamA.BotUser+"> hi"))
	if code, _ := e.postDriven(t, clk, body); code != http.StatusOK {
		t.Fatalf("answered %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.Source.UserName.Value != "zed29" {
		t.Fatalf("%s %+v: want t1's, from zed29", d.Tenant, d.Event.Source)
	}
}

// TestSameTSInTwoChannels: Slack's ts are unique per channel only, so two
// messages of one workspace with the same ts in two channels (here bound
// to two tenants) are two messages: both are delivered, each to its
// tenant, and an edit in one is not taken for an edit of the other's
// answered message. The message and app_mention of one mention (same
// channel and ts) still deliver once.
func TestSameTSInTwoChannels(t *testing.T) {
	e := newEnv(t, nil, nil)
	const ts = "1768490100.000100"
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, ts, "", "<@U0BOTA0001> in general"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.Text != "in general" {
		t.Fatalf("general: %+v", d)
	}
	e.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, chanOps, userAda, ts, "", "<@U0BOTA0001> in ops"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t3" || d.Event.Text != "in ops" {
		t.Fatalf("ops: %+v", d)
	}
	mention := slacktest.MessageEvent(teamA.ID, chanOps, userAda, ts, "", "<@U0BOTA0001> in ops")
	mention["type"] = "app_mention"
	delete(mention, "channel_type")
	e.event(t, teamA, "Ev3", mention, http.StatusOK)
	e.sink.Empty(t)
	// A message of the same ts in a third channel, unmentioned, starts no
	// turn; its edit adding the mention does, although general's message
	// of that ts did.
	e.fake.AddChannel(teamA.ID, slacktest.Channel{ID: "C0DEV00003", Name: "dev"})
	e.event(t, teamA, "Ev5", slacktest.MessageEvent(teamA.ID, "C0DEV00003", userAda, ts, "", "can someone look?"), http.StatusOK)
	e.sink.Empty(t)
	edit := map[string]any{"type": "message", "subtype": "message_changed", "channel": "C0DEV00003", "channel_type": "channel",
		"ts": "1768490160.000900", "event_ts": "1768490160.000900", "hidden": true,
		"message": map[string]any{"client_msg_id": "m1", "type": "message", "user": userAda, "ts": ts,
			"text": "<@U0BOTA0001> can someone look?", "team": teamA.ID, "edited": map[string]any{"user": userAda, "ts": "1768490160.000900"}}}
	e.event(t, teamA, "Ev6", edit, http.StatusOK)
	if d := e.sink.Next(t); d.Event.Source.ChatID != "C0DEV00003" || !d.Event.Source.MessageIsEdit {
		t.Fatalf("edit: %+v", d.Event)
	}
}

// countingStore counts the claims taken or held in its store, and apart
// those taken on intake entries.
type countingStore struct {
	store.Store
	writes, intake atomic.Int64
}

func (s *countingStore) Claims() store.Claims {
	return countingClaims{s.Store.Claims(), &s.writes, &s.intake}
}

type countingClaims struct {
	store.Claims
	writes, intake *atomic.Int64
}

func (c countingClaims) Claim(ctx context.Context, key string, expires time.Time) (bool, error) {
	c.writes.Add(1)
	if strings.HasPrefix(key, "slack/intake/") {
		c.intake.Add(1)
	}
	return c.Claims.Claim(ctx, key, expires)
}

func (c countingClaims) Hold(ctx context.Context, key string, expires time.Time) error {
	c.writes.Add(1)
	return c.Claims.Hold(ctx, key, expires)
}

// TestUnclaimedCostsNoStoreWrite: the messages of an installed workspace
// no tenant claims are dropped before their duplicate check, so they
// write nothing to the store however many Slack sends; a claimed
// workspace's message and its retry are still deduplicated.
func TestUnclaimedCostsNoStoreWrite(t *testing.T) {
	st := &countingStore{Store: newSharedStore(t)}
	e := newEnv(t, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0")})
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	before := st.writes.Load()
	for i := range 20 {
		ts := sprintf("1768490100.%06d", i)
		e.event(t, teamB, "Ev"+ts, slacktest.MessageEvent(teamB.ID, chanAcme, userBob, ts, "", "<@U0BOTB0002> anyone?"), http.StatusOK)
	}
	if n := st.writes.Load() - before; n != 0 {
		t.Fatalf("20 messages of an unclaimed workspace cost %d claim writes, want 0", n)
	}
	e.sink.Empty(t)
	msg := slacktest.MessageEvent(teamA.ID, dmAda, userAda, "1768490200.000100", "", "claimed")
	e.event(t, teamA, "Ev1", msg, http.StatusOK)
	e.sink.Next(t)
	e.event(t, teamA, "Ev1", msg, http.StatusOK)
	e.sink.Empty(t)
}

// TestBotsOwnThreadPostsSkipTheIntake: Slack sends the bot's own posts in
// a thread, and every edit of its drafts there, back as message events;
// each is dropped (bot_sender), as is a deleted message's event, so none
// is worth an intake entry (a claim, a write, a deletion and a release in
// the store) ahead of that. A user's thread reply still takes one.
func TestBotsOwnThreadPostsSkipTheIntake(t *testing.T) {
	st := &countingStore{Store: newSharedStore(t)}
	e := newEnv(t, nil, &platform.Deps{Store: st, Cluster: newNode(t, st, "i0")})
	const root = "1768490100.000100"
	own := slacktest.MessageEvent(teamA.ID, chanGeneral, teamA.BotUser, "1768490100.000200", root, "working on it")
	delete(own, "client_msg_id")
	own["bot_id"] = teamA.BotID
	e.event(t, teamA, "Ev1", own, http.StatusOK)
	edited := maps.Clone(own)
	edited["text"], edited["edited"] = "working on it: done", map[string]any{"user": teamA.BotUser, "ts": "1768490100.000300"}
	e.event(t, teamA, "Ev2", map[string]any{"type": "message", "subtype": "message_changed", "channel": chanGeneral,
		"channel_type": "channel", "ts": "1768490100.000300", "event_ts": "1768490100.000300", "message": edited}, http.StatusOK)
	e.event(t, teamA, "Ev3", map[string]any{"type": "message", "subtype": "message_deleted", "channel": chanGeneral,
		"channel_type": "channel", "ts": "1768490100.000400", "event_ts": "1768490100.000400", "deleted_ts": "1768490100.000200",
		"thread_ts": root, "previous_message": own}, http.StatusOK)
	e.settled(t)
	e.sink.Empty(t)
	if n := st.intake.Load(); n != 0 {
		t.Fatalf("the bot's own thread post, its edit and a deletion took %d intake entries, want 0", n)
	}
	e.event(t, teamA, "Ev4", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490100.000500", root, "<@U0BOTA0001> and now?"), http.StatusOK)
	e.settled(t)
	e.sink.Next(t)
	if n := st.intake.Load(); n != 1 {
		t.Fatalf("a user's thread reply took %d intake entries, want 1", n)
	}
}

// TestGateHoldsWhileTheBotIsUnknown: a channel message of a workspace
// whose bot user is not known (an install without one, an envelope
// without a bot authorization) still goes through the tenant's channel
// gate: unmentioned, it starts no turn; in a free-response channel it
// does.
func TestGateHoldsWhileTheBotIsUnknown(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Tenants["t2"] = TenantConfig{FreeResponseChannels: []string{"C0FREE0001"}}
	}, nil)
	ctx, cancel := contextFor()
	defer cancel()
	if err := e.p.works.install(ctx, teamB.ID, installRecord{Token: teamB.Token}); err != nil {
		t.Fatal(err)
	}
	e.fake.AddChannel(teamB.ID, slacktest.Channel{ID: "C0FREE0001", Name: "free"})
	post := func(id, channel, ts, text string) {
		t.Helper()
		body := slacktest.Envelope(teamB.ID, "", id, slacktest.MessageEvent(teamB.ID, channel, userBob, ts, "", text))
		if code, b := e.post(t, EventsPath, "application/json", body); code != http.StatusOK {
			t.Fatalf("%s: %d %s", id, code, b)
		}
	}
	post("Ev1", chanAcme, "1768490100.000100", "just chatting, not for the bot")
	e.sink.Empty(t)
	post("Ev2", "C0FREE0001", "1768490100.000200", "anyone?")
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.Text != "anyone?" {
		t.Fatalf("%+v", d)
	}
}

// TestSharedChannelNamesUseTheInstallsToken: a partner's message in a
// Slack Connect channel (its team B's, B installed for t2) delivered to
// A's installation goes to t1 with the names A's token reads: the
// sender's, the mentioned user's and the channel's are looked up in A,
// never with B's token (t2's credential, B's names of the channel). The
// bot it mentions is still judged by its scope (B's bot user), as before.
func TestSharedChannelNamesUseTheInstallsToken(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners-" + team, SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	fake.AddUser(teamA.ID, slacktest.User{ID: userBob, Name: "bob", RealName: "Bob (partner)"})
	e := newEnvOn(t, fake, nil, nil)
	ev := slacktest.MessageEvent(teamB.ID, shared, userBob, "1768490100.000100", "", "<@"+teamB.BotUser+"> ask <@"+userAda+">")
	delete(ev, "client_msg_id") // probed with users.info for a bot too
	e.event(t, teamA, "Ev1", ev, http.StatusOK)
	d := e.sink.Next(t)
	src := d.Event.Source
	if d.Tenant != "t1" || src.ScopeID != teamB.ID || src.UserName.Value != "Bob (partner)" ||
		src.ChatName.Value != "partners-"+teamA.ID || d.Event.Text != "ask @Ada" {
		t.Fatalf("delivery to %s: text %q source %+v", d.Tenant, d.Event.Text, src)
	}
	for _, method := range []string{"users.info", "conversations.info"} {
		for _, c := range e.fake.Calls(method) {
			if c.Team != teamA.ID {
				t.Fatalf("%s for t1's event called with %s's token", method, c.Team)
			}
		}
	}
}

// TestSharedChannelEventGoesToTheInstallThatGotIt: in a Slack Connect
// channel hosted by B (t2's), where only A's bot (t1's) is, Slack delivers
// Ada's mention of it to A's installation, naming B, the host, as the
// envelope's team_id and A in its authorizations: it goes to t1. Before,
// team_id won, so t2 got the messages of a channel only t1's bot is in,
// its users' mentions of t1's bot among them, and t1 none.
func TestSharedChannelEventGoesToTheInstallThatGotIt(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamB.ID, teamA.ID}})
	e := newEnvOn(t, fake, nil, nil)
	var env map[string]any
	ev := slacktest.MessageEvent(teamA.ID, shared, userAda, "1768490100.000100", "", "<@"+teamA.BotUser+"> status?")
	if err := json.Unmarshal(slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", ev), &env); err != nil {
		t.Fatal(err)
	}
	env["team_id"], env["is_ext_shared_channel"] = teamB.ID, true
	body, _ := json.Marshal(env)
	if code, resp := e.post(t, EventsPath, "application/json", body); code != http.StatusOK {
		t.Fatalf("event: %d %s", code, resp)
	}
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.Text != "status?" {
		t.Fatalf("delivery to %s: %q", d.Tenant, d.Event.Text)
	}
	e.sink.Empty(t)
}
