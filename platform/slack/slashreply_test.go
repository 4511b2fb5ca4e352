package slack

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/slack/slacktest"
	"connector/vault"
)

// slashSend is the gateway's plain send in reply to Ada's slash command in
// the general channel: no reply anchor, the chat's workspace and last
// author in its metadata.
const slashSend = `{"op":"send","chat_id":"C0GEN00001","content":%q,"reply_to":null,"metadata":{"scope_id":"T0AAA00001","user_id":"U0ADA00001"%s}}`

// TestSlashReplyIsEphemeral: the gateway answers a slash command with a
// plain send, on another instance than the one the command reached; the
// reply goes to the command's user alone through its response_url,
// replacing the acknowledgement, never to chat.postMessage, and the
// result has no message_id, as natively. Only the first reply is: the
// next send of the session, a send with a reply anchor, and one by another
// author are public. The response_url never reaches the gateway.
func TestSlashReplyIsEphemeral(t *testing.T) {
	st := newSharedStore(t)
	fake := newFake(t)
	instance := func(name string) *env {
		return newEnvOn(t, fake, nil, &platform.Deps{Store: st, Vault: vault.NewDurable(st.Capabilities(), vault.Config{}),
			Cluster: newNode(t, st, name)})
	}
	a, b := instance("i0"), instance("i1")
	url := fake.ResponseURL("r1")
	if code, body := a.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/model", "gpt-5", url)); code != http.StatusOK || !strings.Contains(body, "Running `/model`") {
		t.Fatalf("%d %s", code, body)
	}
	if d := a.sink.Next(t); d.Event.MessageType != "command" || strings.Contains(d.Event.Text, "response") {
		t.Fatalf("%+v", d.Event)
	}
	r := b.execute(t, "t1", sprintf(slashSend, "**Model** set to gpt-5", ""))
	if !r.Success || r.MessageID != "" {
		t.Fatalf("the reply: %+v", r)
	}
	posts := fake.Responses()
	if len(posts) != 1 || posts[0].ID != "r1" || posts[0].Body["response_type"] != "ephemeral" || posts[0].Body["replace_original"] != true ||
		posts[0].Body["text"] != "*Model* set to gpt-5" {
		t.Fatalf("response_url posts %+v", posts)
	}
	if n := len(fake.Calls("chat.postMessage")); n != 0 {
		t.Fatalf("the command's reply was posted publicly (%d chat.postMessage)", n)
	}
	// Every later send is public, on either instance.
	for i, action := range []string{
		sprintf(slashSend, "and one more thing", ""),
		sprintf(slashSend, "a reply", `,"reply_to_message_id":"1768490100.000100"`),
	} {
		e := []*env{a, b}[i]
		if r := e.execute(t, "t1", action); !r.Success || r.MessageID == "" {
			t.Fatalf("send %d: %+v", i, r)
		}
	}
	if n, m := len(fake.Calls("chat.postMessage")), len(fake.Responses()); n != 2 || m != 1 {
		t.Fatalf("%d public posts, %d response_url posts", n, m)
	}
	// Another user's command in the channel: a send carrying Ada as the
	// author is not its reply.
	a.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, "U0CAR00003", "/usage", "", fake.ResponseURL("r2")))
	a.sink.Next(t)
	if r := b.execute(t, "t1", sprintf(slashSend, "not Car's", "")); !r.Success || r.MessageID == "" || len(fake.Responses()) != 1 {
		t.Fatalf("%+v %+v", r, fake.Responses())
	}
}

// TestSlashReplyFallsBackPrivately: a response_url that fails is replaced
// by chat.postEphemeral to the command's user, never a public post; a
// reply longer than five parts is cut to five with the native notice; a
// reply later than two minutes after the command is public.
func TestSlashReplyFallsBackPrivately(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	command := func(responseURL string) {
		t.Helper()
		e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", responseURL))
		e.sink.Next(t)
	}
	command(e.fake.URL + "no-such-path/r1")
	if r := e.execute(t, "t1", sprintf(slashSend, "all good", "")); !r.Success || r.MessageID != "" {
		t.Fatalf("%+v", r)
	}
	eph := e.fake.Calls("chat.postEphemeral")
	if len(eph) != 1 || eph[0].Form.Get("user") != userAda || eph[0].Form.Get("channel") != chanGeneral || eph[0].Form.Get("text") != "all good" ||
		len(e.fake.Calls("chat.postMessage")) != 0 {
		t.Fatalf("ephemeral fallback %+v", eph)
	}
	// Six parts: five posts, the fifth ending with the notice.
	command(e.fake.ResponseURL("r2"))
	long := strings.Repeat(strings.Repeat("x", 999)+"\n", 39*6)
	if r := e.execute(t, "t1", sprintf(slashSend, long, "")); !r.Success {
		t.Fatalf("%+v", r)
	}
	posts := e.fake.Responses()
	if len(posts) != 5 || !strings.HasSuffix(posts[4].Body["text"].(string), "\n\n_[Reply truncated: 1 more part(s) exceeded Slack's ephemeral reply limit.]_") ||
		posts[0].Body["replace_original"] != true || posts[1].Body["replace_original"] != false {
		t.Fatalf("%d posts", len(posts))
	}
	// Two minutes on, a send is no longer the command's reply.
	command(e.fake.ResponseURL("r3"))
	clk.Advance(slashReplyWindow)
	if r := e.execute(t, "t1", sprintf(slashSend, "late", "")); !r.Success || r.MessageID == "" || len(e.fake.Responses()) != 5 {
		t.Fatalf("%+v", r)
	}
}

// TestSlashReplyFailingPartwayGoesOnEphemerally: a two-part reply to a
// slash command whose response_url takes the first part and fails the
// second goes on with the second part by chat.postEphemeral. Before,
// every part was posted ephemerally, so the user saw the first twice.
func TestSlashReplyFailingPartwayGoesOnEphemerally(t *testing.T) {
	fake := newFake(t)
	upstream, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	var posts atomic.Int32
	forward := httputil.NewSingleHostReverseProxy(upstream)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/response/") && posts.Add(1) == 2 {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	e := newEnvOn(t, fake, func(c *Config) { c.APIURL = proxy.URL + "/" }, nil)
	e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", proxy.URL+"/response/r1"))
	e.sink.Next(t)
	part := strings.Repeat(strings.Repeat("x", 999)+"\n", 39)
	if r := e.execute(t, "t1", sprintf(slashSend, part+part, "")); !r.Success {
		t.Fatalf("%+v", r)
	}
	parts := mrkdwnParts(part + part)
	eph := e.fake.Calls("chat.postEphemeral")
	if out := e.fake.Responses(); len(parts) != 2 || len(out) != 1 || out[0].Body["text"] != parts[0] || len(eph) != 1 || eph[0].Form.Get("text") != parts[1] {
		t.Fatalf("%d parts: %d response_url posts, %d ephemeral, want the first part through the response_url and the second ephemerally", len(parts), len(e.fake.Responses()), len(eph))
	}
}

// TestResponseURLNeverLogged: a slash command's response_url is a
// capability (docs/security.md); when posting to it fails on the network,
// neither the log nor the result names it.
func TestResponseURLNeverLogged(t *testing.T) {
	e := newEnv(t, nil, nil)
	url := e.fake.ResponseURL("r1-secret-capability")
	e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", url))
	e.sink.Next(t)
	e.p.seenIn(chanGeneral, teamA.ID) // as the chat's inbound does
	e.fake.Close()
	r := e.execute(t, "t1", sprintf(slashSend, "all good", ""))
	if r.Success {
		t.Fatalf("%+v with Slack down", r)
	}
	if strings.Contains(r.Error, "r1-secret-capability") || strings.Contains(e.logs.String(), "r1-secret-capability") {
		t.Fatalf("the response_url reached the result or the log: %q\n%s", r.Error, e.logs.String())
	}
	if !strings.Contains(e.logs.String(), "slack response_url reply failed") {
		t.Fatalf("the failure was not logged (%+v):\n%s", r, e.logs.String())
	}
}

// TestSlashReplyWithTheTenantsOwnToken: in a Slack Connect channel shared
// by A (t1's) and B (t2's) and bound to t1, a slash command of B's Bob is
// t1's; the private replies that go by chat.postEphemeral (the
// response_url failing, or past its five posts) are made with A's token,
// t1's own, as every other action of t1 there, never with B's.
func TestSlashReplyWithTheTenantsOwnToken(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	e := newEnvOn(t, fake, nil, nil)
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindChannel, ID: shared, Tenant: "t1"},
	}); err != nil {
		t.Fatal(err)
	}
	e.p.seenIn(shared, teamA.ID) // events of the channel came to both installations
	e.p.seenIn(shared, teamB.ID)
	command := func(responseURL string) platform.Delivery {
		t.Helper()
		e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamB.ID, shared, userBob, "/status", "", responseURL))
		d := e.sink.Next(t)
		if d.Tenant != "t1" {
			t.Fatalf("Bob's command in the channel bound to t1 went to %s", d.Tenant)
		}
		return d
	}
	ephemeralTeam := func(n int) string {
		t.Helper()
		eph := fake.Calls("chat.postEphemeral")
		if len(eph) != n || eph[n-1].Form.Get("user") != userBob {
			t.Fatalf("%d ephemeral posts %+v, want %d to Bob", len(eph), eph, n)
		}
		return eph[n-1].Team
	}
	// The response_url fails: the reply goes ephemerally.
	command(fake.URL + "no-such-path/r1")
	send := `{"op":"send","chat_id":"` + shared + `","content":%q,"reply_to":null,"metadata":{"scope_id":"` + teamB.ID + `","user_id":"` + userBob + `"}}`
	if r := e.execute(t, "t1", sprintf(send, "all good")); !r.Success || r.MessageID != "" {
		t.Fatalf("%+v", r)
	}
	if team := ephemeralTeam(1); team != teamA.ID {
		t.Fatalf("t1's private reply went with %s's token", team)
	}
	// follow_up past the response_url's five posts.
	d := command(fake.ResponseURL("r2"))
	for i := range 6 {
		if r := e.execute(t, "t1", `{"op":"follow_up","session_key":"`+d.SessionKey+`","kind":"slack.response_url","content":"part `+strconv.Itoa(i)+`"}`); !r.Success {
			t.Fatalf("follow_up %d: %+v", i, r)
		}
	}
	if team := ephemeralTeam(2); team != teamA.ID {
		t.Fatalf("t1's follow_up went with %s's token", team)
	}
}

// TestSlashReplyRetriedStaysPrivate: a slash command's reply that could
// not be posted privately (its response_url failing, chat.postEphemeral
// answered 429 past the send's deadline) fails, and the gateway's retry
// is posted to the command's user alone. The retry found the reply's
// claim taken, took it for answered already, and posted it publicly.
func TestSlashReplyRetriedStaysPrivate(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", e.fake.URL+"no-such-path/r1"))
	e.sink.Next(t)
	e.fake.Fail429("chat.postEphemeral", 1, 30*time.Second) // past the send's deadline: not waited for
	if r := e.execute(t, "t1", sprintf(slashSend, "all good", "")); r.Success {
		t.Fatalf("the reply under a 429: %+v, want it failed", r)
	}
	clk.Advance(31 * time.Second) // past the Retry-After
	if r := e.execute(t, "t1", sprintf(slashSend, "all good", "")); !r.Success || r.MessageID != "" {
		t.Fatalf("the retried reply: %+v, want it posted privately", r)
	}
	if n := len(e.fake.Calls("chat.postMessage")); n != 0 {
		t.Fatalf("the command's reply was posted publicly (%d chat.postMessage)", n)
	}
	if eph := e.fake.Calls("chat.postEphemeral"); len(eph) != 2 || eph[1].Form.Get("user") != userAda || eph[1].Form.Get("text") != "all good" {
		t.Fatalf("ephemeral posts %+v", eph)
	}
}

// TestFollowUpAfterRebindDeclined: a slash command's response_url lives 30
// minutes, past its routing: once the command's workspace is rebound from
// t1 to t2, t1's follow_up is declined as a send there would be (the
// uniform egress_declined), and nothing reaches Slack, through the
// response_url or chat.postEphemeral. A follow_up of a command in a chat
// the tenant still holds (a DM, here) is posted as ever.
func TestFollowUpAfterRebindDeclined(t *testing.T) {
	e := newEnv(t, nil, nil)
	followUp := func(key, content string) contract.Result {
		t.Helper()
		return e.execute(t, "t1", `{"op":"follow_up","session_key":"`+key+`","kind":"slack.response_url","content":"`+content+`"}`)
	}
	e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", e.fake.ResponseURL("r1")))
	inChannel := e.sink.Next(t)
	e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, dmAda, userAda, "/status", "", e.fake.ResponseURL("r2")))
	inDM := e.sink.Next(t)
	if inChannel.Tenant != "t1" || inDM.Tenant != "t1" {
		t.Fatalf("the commands went to %s and %s, want t1", inChannel.Tenant, inDM.Tenant)
	}
	if r := followUp(inDM.SessionKey, "done"); !r.Success {
		t.Fatalf("a DM command's follow_up: %+v", r)
	}
	if posts := e.fake.Responses(); len(posts) != 1 || posts[0].ID != "r2" {
		t.Fatalf("response_url posts %+v, want the DM command's follow_up through r2", posts)
	}
	// The channel is rebound to t2: t1 holds the DM still, not the channel.
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindChannel, ID: chanGeneral, Tenant: "t2"},
	}); err != nil {
		t.Fatal(err)
	}
	if r := followUp(inChannel.SessionKey, "late"); r.Code != contract.CodeEgressDeclined || r.Error != contract.Declined(platformName).Error {
		t.Fatalf("t1's follow_up in the channel rebound to t2: %+v, want the uniform decline", r)
	}
	if r := followUp(inDM.SessionKey, "still mine"); !r.Success {
		t.Fatalf("a DM command's follow_up after the rebind: %+v", r)
	}
	// The whole workspace is rebound to t2: t1 holds nothing of it.
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t2"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
	}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{inChannel.SessionKey, inDM.SessionKey} {
		for i := range 6 { // past the response_url's five posts too
			if r := followUp(key, "late "+strconv.Itoa(i)); r.Code != contract.CodeEgressDeclined {
				t.Fatalf("t1's follow_up %d in the workspace rebound to t2: %+v, want egress_declined", i, r)
			}
		}
	}
	if posts, eph := e.fake.Responses(), e.fake.Calls("chat.postEphemeral"); len(posts) != 2 || posts[1].ID != "r2" || len(eph) != 0 {
		t.Fatalf("response_url posts %+v, ephemeral %+v: want only the DM's two follow_ups", posts, eph)
	}
}

// TestFollowUpWaitingWhileItsChatIsRebound: t1's follow_up past its
// command's five response_url posts goes as an ephemeral message, which
// waits for the channel's pace (one message a second) while the channel
// is bound to t2: it is declined once its turn comes, and not posted.
// Before, a follow_up was authorized once, and was posted into t2's
// channel.
func TestFollowUpWaitingWhileItsChatIsRebound(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, func(c *Config) { c.ChannelPerSecond = 1 }, &platform.Deps{Clock: clk})
	e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", e.fake.ResponseURL("r1")))
	d := e.sink.Next(t)
	followUp := `{"op":"follow_up","session_key":"` + d.SessionKey + `","kind":"slack.response_url","content":"done"}`
	for i := range maxResponseURLPosts {
		if r := e.execute(t, "t1", followUp); !r.Success {
			t.Fatalf("follow_up %d: %+v", i, r)
		}
	}
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"hello","metadata":{"scope_id":"T0AAA00001"}}`); !r.Success {
		t.Fatalf("the send: %+v", r)
	}
	var (
		late     contract.Result
		finished atomic.Int64
	)
	go func() {
		defer finished.Add(1)
		late = e.execute(t, "t1", followUp)
	}()
	done := func() int { return int(finished.Load()) }
	none := func() int { return 0 }
	clk.Settle(t, 1, done, none)
	if done() != 0 {
		t.Fatalf("the ephemeral follow_up did not wait for the channel's pace: %+v", late)
	}
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindChannel, ID: chanGeneral, Tenant: "t2"},
	}); err != nil {
		t.Fatal(err)
	}
	clk.Drive(t, 1, done, none)
	if late.Code != contract.CodeEgressDeclined {
		t.Errorf("the follow_up after the rebind: %+v, want declined", late)
	}
	if n := len(e.fake.Calls("chat.postEphemeral")); n != 0 {
		t.Fatalf("%d ephemeral posts, want none", n)
	}
}

// TestSlashReplySealResentStaysPrivate: a gateway's connection drops
// while its seal of a slash command's reply (a draft's final frame with
// nothing streamed, which is sent as the reply) is being posted through
// the response_url; it dials another instance and sends the seal again
// (the gateway retries an ambiguous seal once). The resend waits for the
// first copy's outcome, never posting publicly: when the first copy
// answers the command, the resend answers done and posts nothing (the
// reply went once); when it fails (the response_url and
// chat.postEphemeral both refuse it), the resend answers the command
// privately itself, rather than answering done with the reply lost. A
// later send of other content is public, as ever. A seal that answers no
// command, resent while its first copy is posted, waits for it too and
// answers its message: the reply is posted once, not twice.
func TestSlashReplySealResentStaysPrivate(t *testing.T) {
	for _, c := range []struct{ command, firstFails bool }{{true, false}, {true, true}, {false, false}} {
		firstFails := c.firstFails
		t.Run(fmt.Sprintf("command %v, first copy fails %v", c.command, firstFails), func(t *testing.T) {
			st := newSharedStore(t)
			fake := newFake(t)
			started, release := make(chan struct{}, 1), make(chan struct{})
			var waited, refuseEphemeral atomic.Bool
			refuseEphemeral.Store(firstFails)
			upstream, err := url.Parse(fake.URL)
			if err != nil {
				t.Fatal(err)
			}
			forward := httputil.NewSingleHostReverseProxy(upstream)
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case (strings.HasPrefix(r.URL.Path, "/response/") || r.URL.Path == "/chat.postMessage") && waited.CompareAndSwap(false, true): // the first post waits
					started <- struct{}{}
					select {
					case <-release:
					case <-r.Context().Done():
					}
					if firstFails {
						http.Error(w, "no", http.StatusNotFound)
						return
					}
				case r.URL.Path == "/chat.postEphemeral" && refuseEphemeral.CompareAndSwap(true, false):
					_, _ = w.Write([]byte(`{"ok":false,"error":"restricted_action"}`))
					return
				}
				forward.ServeHTTP(w, r)
			}))
			t.Cleanup(proxy.Close)
			var once sync.Once
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			clk := clocktest.New(time.Now())
			instance := func(name string, clk clock.Clock) *env {
				return newEnvOn(t, fake, func(c *Config) { c.APIURL = proxy.URL + "/" }, &platform.Deps{Store: st, Clock: clk,
					Vault: vault.NewDurable(st.Capabilities(), vault.Config{}), Cluster: newNode(t, st, name)})
			}
			a, b := instance("i0", clock.System), instance("i1", clk)
			if c.command {
				a.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", proxy.URL+"/response/r1"))
				a.sink.Next(t)
			}
			const seal = `{"op":"draft","chat_id":"C0GEN00001","draft_id":1,"content":"all good","final":true,"metadata":{"scope_id":"T0AAA00001","user_id":"U0ADA00001"}}`
			first, resent := make(chan contract.Result, 1), make(chan contract.Result, 1)
			go func() { first <- a.execute(t, "t1", seal) }()
			select {
			case <-started:
			case <-time.After(waitFor):
				t.Fatalf("timed out after %v waiting for the first seal's response_url post", waitFor)
			}
			timers := clk.Pending()
			go func() { resent <- b.execute(t, "t1", seal) }()
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			pending := make(chan error, 1)
			go func() { pending <- clk.WaitPending(ctx, timers+1) }()
			select {
			case r := <-resent:
				t.Fatalf("the resent seal was answered (%+v) while its first copy still posted", r)
			case err := <-pending:
				if err != nil {
					t.Fatalf("waiting for the resent seal to wait for its first copy: %v", err)
				}
			}
			once.Do(func() { close(release) })
			want := ""
			select {
			case r := <-first:
				if r.Success == firstFails || (r.MessageID == "") == !c.command {
					t.Fatalf("the first seal: %+v", r)
				}
				want = r.MessageID
			case <-time.After(waitFor):
				t.Fatalf("timed out after %v waiting for the first seal", waitFor)
			}
			clk.Advance(sealPoll)
			select {
			case r := <-resent:
				if !r.Success || r.MessageID != want {
					t.Fatalf("the resent seal: %+v, want %q", r, want)
				}
			case <-time.After(waitFor):
				t.Fatalf("timed out after %v waiting for the resent seal", waitFor)
			}
			if !c.command {
				if n := len(fake.Calls("chat.postMessage")); n != 1 {
					t.Fatalf("the reply was posted %d times", n)
				}
				return
			}
			if n := len(fake.Calls("chat.postMessage")); n != 0 {
				t.Fatalf("the command's reply was posted publicly (%d chat.postMessage)", n)
			}
			if posts := fake.Responses(); len(posts) != 1 || posts[0].ID != "r1" || posts[0].Body["text"] != "all good" {
				t.Fatalf("response_url posts %+v, want the reply once", posts)
			}
			if r := b.execute(t, "t1", sprintf(slashSend, "and another thing", "")); !r.Success || r.MessageID == "" {
				t.Fatalf("a later send: %+v, want it public", r)
			}
		})
	}
}

// TestSlashReplyContentSentAgainLater: the agent answers a slash command
// with a send and, within the two minutes, sends the same words again (a
// later turn's answer): that is a message of its own, posted publicly as
// any send after the command's reply, not answered as done with nothing
// posted. So is a send of the words a seal answered a command with: only a
// seal resent (the same draft_id) is the same reply.
func TestSlashReplyContentSentAgainLater(t *testing.T) {
	e := newEnv(t, nil, nil)
	const seal = `{"op":"draft","chat_id":"C0GEN00001","draft_id":1,"content":"all good","final":true,"metadata":{"scope_id":"T0AAA00001","user_id":"U0ADA00001"}}`
	for i, reply := range []string{sprintf(slashSend, "all good", ""), seal} {
		e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", e.fake.ResponseURL("r"+strconv.Itoa(i))))
		e.sink.Next(t)
		if r := e.execute(t, "t1", reply); !r.Success || r.MessageID != "" {
			t.Fatalf("reply %d: %+v, want it private", i, r)
		}
		if r := e.execute(t, "t1", sprintf(slashSend, "all good", "")); !r.Success || r.MessageID == "" {
			t.Fatalf("the same words sent after reply %d: %+v, want them public", i, r)
		}
		if posts, public := e.fake.Responses(), e.fake.Calls("chat.postMessage"); len(posts) != i+1 || len(public) != i+1 {
			t.Fatalf("after reply %d: response_url posts %+v, %d public posts", i, posts, len(public))
		}
	}
}

// TestFollowUpsAtOnceTakeFiveResponsePosts: two follow_ups of a command
// run at once, on two instances: the first is posting its first part when
// the second, of five parts, starts. Between them they post through the
// response_url five times, as Slack takes, and one post replaces the
// acknowledgement; the parts beyond go ephemerally. Each read the use
// count before the other stored it, and together they posted eight.
func TestFollowUpsAtOnceTakeFiveResponsePosts(t *testing.T) {
	st := newSharedStore(t)
	fake := newFake(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	var waited atomic.Bool
	upstream, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(upstream)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/response/") && waited.CompareAndSwap(false, true) { // the first post waits
			started <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	vaultOn := vault.NewDurable(st.Capabilities(), vault.Config{})
	instance := func(name string) *env {
		return newEnvOn(t, fake, func(c *Config) { c.APIURL = proxy.URL + "/" }, &platform.Deps{Store: st, Vault: vaultOn, Cluster: newNode(t, st, name)})
	}
	a, b := instance("i0"), instance("i1")
	a.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", proxy.URL+"/response/r1"))
	d := a.sink.Next(t)
	followUp := func(content string) string {
		return `{"op":"follow_up","session_key":"` + d.SessionKey + `","kind":"slack.response_url","content":"` + content + `"}`
	}
	part := strings.Repeat(strings.Repeat("x", 999)+`\n`, 39)
	first := make(chan contract.Result, 1)
	go func() { first <- a.execute(t, "t1", followUp(part+part+part)) }()
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the first follow_up's post", waitFor)
	}
	if r := b.execute(t, "t1", followUp(strings.Repeat(part, 5))); !r.Success {
		t.Fatalf("the second follow_up: %+v", r)
	}
	releaseOnce()
	select {
	case r := <-first:
		if !r.Success {
			t.Fatalf("the first follow_up: %+v", r)
		}
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the first follow_up", waitFor)
	}
	posts, replacing := fake.Responses(), 0
	for _, p := range posts {
		if p.Body["replace_original"] == true {
			replacing++
		}
	}
	if len(posts) != 5 || replacing != 1 || len(fake.Calls("chat.postEphemeral")) != 3 {
		t.Fatalf("%d response_url posts (%d replacing the acknowledgement), %d ephemeral; want 5 (1), 3",
			len(posts), replacing, len(fake.Calls("chat.postEphemeral")))
	}
}

// TestSlashReplyPartlySent: a two-part reply to a slash command whose
// response_url takes the first part and fails the second, and whose
// chat.postEphemeral refuses it too, answers success with an error saying
// 1 of 2 parts went out (platform.SendParts), as a follow_up does. Before,
// it answered a failure, which released the reply's claim, and the
// gateway's resend posted the first part again.
func TestSlashReplyPartlySent(t *testing.T) {
	fake := newFake(t)
	upstream, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	var posts atomic.Int32
	forward := httputil.NewSingleHostReverseProxy(upstream)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/response/") && posts.Add(1) == 2 {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	e := newEnvOn(t, fake, func(c *Config) { c.APIURL = proxy.URL + "/" }, nil)
	e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", proxy.URL+"/response/r1"))
	e.sink.Next(t)
	e.fake.Fail404("chat.postEphemeral", 1)
	part := strings.Repeat(strings.Repeat("x", 999)+"\n", 39)
	if r := e.execute(t, "t1", sprintf(slashSend, part+part, "")); !r.Success || r.Code != "" || !strings.HasSuffix(r.Error, "(sent 1 of 2 parts; the rest was not sent)") {
		t.Fatalf("%+v, want success with 1 of 2 parts sent", r)
	}
	if out := e.fake.Responses(); len(out) != 1 {
		t.Fatalf("%d response_url posts, want the first part's", len(out))
	}
}

// TestSlashReplyFailingPartwayAndEphemerallyIsSent: a two-part reply to a
// slash command whose response_url takes the first part and fails the
// second, and whose chat.postEphemeral of the second fails too (a 429 past
// the send's deadline), succeeds saying the second part was not sent, as
// a message sent in part does (platform.SendParts): the gateway does not
// send it again, which would post the first part twice. Before, it failed
// and released the reply's claim.
func TestSlashReplyFailingPartwayAndEphemerallyIsSent(t *testing.T) {
	fake := newFake(t)
	upstream, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	var posts atomic.Int32
	forward := httputil.NewSingleHostReverseProxy(upstream)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/response/") && posts.Add(1) == 2 {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	clk := clocktest.New(time.Now())
	e := newEnvOn(t, fake, func(c *Config) { c.APIURL = proxy.URL + "/" }, &platform.Deps{Clock: clk})
	e.post(t, CommandsPath, "application/x-www-form-urlencoded", slacktest.Command(teamA.ID, chanGeneral, userAda, "/status", "", proxy.URL+"/response/r1"))
	e.sink.Next(t)
	e.fake.Fail429("chat.postEphemeral", 1, 30*time.Second) // past the send's deadline: not waited for
	part := strings.Repeat(strings.Repeat("x", 999)+"\n", 39)
	r := e.execute(t, "t1", sprintf(slashSend, part+part, ""))
	if !r.Success || !strings.Contains(r.Error, "sent 1 of 2 parts") {
		t.Fatalf("%+v, want success saying 1 of 2 parts went out", r)
	}
	if out := e.fake.Responses(); len(out) != 1 {
		t.Fatalf("%d response_url posts, want the first part's", len(out))
	}
}
