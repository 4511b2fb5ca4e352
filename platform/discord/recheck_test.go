package discord

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/discord/discordtest"
)

// TestSendWaitingWhileItsChatIsRebound: a send waiting for its route's
// bucket while its guild is bound to another tenant is declined once its
// turn comes, and not posted (before, it was posted as the earlier
// tenant's).
func TestSendWaitingWhileItsChatIsRebound(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/messages") { // one message a second
			w.Header().Set("X-RateLimit-Limit", "1")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset-After", "1.000")
			w.Header().Set("X-RateLimit-Bucket", "msgs")
		}
		return false
	})
	send := contract.Action{Op: contract.OpSend, ChatID: chanRandom, Content: "hello"}
	if r := e.p.Execute(waitCtx(t), "t1", &send); !r.Success {
		t.Fatalf("the first send: %+v", r)
	}
	var (
		second   contract.Result
		finished atomic.Int64
	)
	go func() {
		defer finished.Add(1)
		second = e.p.Execute(waitCtx(t), "t1", &send)
	}()
	done := func() int { return int(finished.Load()) }
	none := func() int { return 0 }
	clk.Settle(t, 1, done, none)
	if done() != 0 {
		t.Fatalf("the second send did not wait for the route's bucket: %+v", second)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	clk.Drive(t, 1, done, none)
	if second.Code != contract.CodeEgressDeclined {
		t.Errorf("the send after the rebind: %+v, want declined", second)
	}
	if n := len(e.fake.Messages(chanRandom)); n != 1 {
		t.Fatalf("%d messages posted, want the first alone", n)
	}
}

// TestFollowUpWaitingWhileItsChatIsRebound: t1's second follow-up waits
// for its webhook's bucket while its guild is bound to t2; it is declined
// once its turn comes, and not posted (before, a follow_up was authorized
// once, and was posted as t1's into t2's channel).
func TestFollowUpWaitingWhileItsChatIsRebound(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Now())
	e := newEnvOn(t, clk, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.AddInteractionTokenIn("tok-8402", chanGeneral)
	body := slashBody("8402", "tok-8402", guildLab, chanGeneral)
	if code, ack := post(t, discordtest.InteractionRequest(e.webhookServer(t), e.priv, clk.Now(), body)); code != 200 || ack != `{"type":5}` {
		t.Fatalf("Ada's slash command = %d %s", code, ack)
	}
	d := e.sink.Next(t)
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method == "POST" && strings.Contains(r.URL.Path, "/webhooks/") { // one follow-up a second
			w.Header().Set("X-RateLimit-Limit", "1")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset-After", "1.000")
			w.Header().Set("X-RateLimit-Bucket", "hooks")
		}
		return false
	})
	if r := execute(t, e, "t1", followUpAction(d.SessionKey, "first")); !r.Success {
		t.Fatalf("the first follow_up: %+v", r)
	}
	var (
		second   contract.Result
		finished atomic.Int64
	)
	go func() {
		defer finished.Add(1)
		second = execute(t, e, "t1", followUpAction(d.SessionKey, "second"))
	}()
	done := func() int { return int(finished.Load()) }
	none := func() int { return 0 }
	clk.Settle(t, 1, done, none)
	if done() != 0 {
		t.Fatalf("the second follow_up did not wait for its bucket: %+v", second)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	clk.Drive(t, 1, done, none)
	if second.Code != contract.CodeEgressDeclined {
		t.Errorf("the follow_up after the rebind: %+v, want declined", second)
	}
	if n := len(e.fake.Messages(chanGeneral)); n != 1 {
		t.Fatalf("%d messages posted, want the first follow-up alone", n)
	}
}

// TestRenameWaitingWhileItsThreadIsClaimed: t2 holds chanGeneral by grant
// and renames the thread it made there; the second rename waits for its
// bucket while t3 claims the thread. It is declined once its turn comes
// and the thread keeps its name (before, the rename asked again about
// chanGeneral, which t2 still holds, and renamed t3's thread).
func TestRenameWaitingWhileItsThreadIsClaimed(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Now())
	e := newEnvOn(t, clk, discordtest.Options{}, nil)
	e.startReady(t)
	bindings := []platform.Binding{{Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"}, {Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("7101", chanGeneral, guildLab, "ada to her agent", false))
	if d := e.sink.Next(t); d.Event == nil || d.Tenant != "t2" {
		t.Fatalf("delivery %+v, want Ada's message to t2", d)
	}
	th := e.p.Execute(waitCtx(t), "t2", &contract.Action{Op: contract.OpThreadCreate, ChatID: chanGeneral, ThreadName: "t2's"})
	if !th.Success {
		t.Fatalf("thread_create on a grant = %+v", th)
	}
	clk.Advance(time.Second) // the global budget's burst is spent
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method == "PATCH" { // one rename a second
			w.Header().Set("X-RateLimit-Limit", "1")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset-After", "1.000")
			w.Header().Set("X-RateLimit-Bucket", "patch")
		}
		return false
	})
	rename := func(name string) contract.Result {
		return e.p.Execute(waitCtx(t), "t2", &contract.Action{Op: contract.OpThreadRename, ChatID: chanGeneral, MessageID: contract.ID(th.ThreadID), ThreadName: name})
	}
	if r := rename("first"); !r.Success {
		t.Fatalf("the first rename: %+v", r)
	}
	var (
		second   contract.Result
		finished atomic.Int64
	)
	go func() {
		defer finished.Add(1)
		second = rename("second")
	}()
	done := func() int { return int(finished.Load()) }
	queued := func() int { return e.p.sched.Waiting("t2") }
	clk.Settle(t, 1, done, queued)
	if done() != 0 {
		t.Fatalf("the second rename did not wait for its bucket: %+v", second)
	}
	claimed := append(bindings, platform.Binding{Kind: platform.BindScope, ID: th.ThreadID, Space: guildLab, Tenant: "t3"})
	if err := e.p.Bind(claimed); err != nil {
		t.Fatal(err)
	}
	clk.Drive(t, 1, done, queued)
	if second.Code != contract.CodeEgressDeclined {
		t.Errorf("the rename after t3 claimed the thread: %+v, want declined", second)
	}
	if ch, _ := e.fake.Channel(th.ThreadID); ch.Name != "first" {
		t.Fatalf("t3's thread is named %q, want %q", ch.Name, "first")
	}
}

// TestDMFollowUpWaitingWhileItsUserIsLinked: dm_tenant t1's second
// follow-up in Ada's DM waits for its webhook's bucket while Ada is linked
// to t2; it is declined once its turn comes, and not posted (before, a
// follow-up dm_tenant answered was checked once, and was posted as t1's
// in the DM rule 3 now gives t2).
func TestDMFollowUpWaitingWhileItsUserIsLinked(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Now())
	e := newEnvOn(t, clk, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.AddInteractionTokenIn("tok-8403", chanDMAda)
	body := slashBody("8403", "tok-8403", "", chanDMAda)
	if code, ack := post(t, discordtest.InteractionRequest(e.webhookServer(t), e.priv, clk.Now(), body)); code != 200 || ack != `{"type":5}` {
		t.Fatalf("Ada's DM slash command = %d %s", code, ack)
	}
	d := e.sink.Next(t)
	if d.Tenant != "t1" {
		t.Fatalf("Ada's DM slash command delivered as %+v, want to dm_tenant t1", d)
	}
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method == "POST" && strings.Contains(r.URL.Path, "/webhooks/") { // one follow-up a second
			w.Header().Set("X-RateLimit-Limit", "1")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset-After", "1.000")
			w.Header().Set("X-RateLimit-Bucket", "hooks")
		}
		return false
	})
	if r := execute(t, e, "t1", followUpAction(d.SessionKey, "first")); !r.Success {
		t.Fatalf("the first follow_up: %+v", r)
	}
	var (
		second   contract.Result
		finished atomic.Int64
	)
	go func() {
		defer finished.Add(1)
		second = execute(t, e, "t1", followUpAction(d.SessionKey, "second"))
	}()
	done := func() int { return int(finished.Load()) }
	none := func() int { return 0 }
	clk.Settle(t, 1, done, none)
	if done() != 0 {
		t.Fatalf("the second follow_up did not wait for its bucket: %+v", second)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"},
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"}, {Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	clk.Drive(t, 1, done, none)
	if second.Code != contract.CodeEgressDeclined {
		t.Errorf("the follow_up after Ada was linked to t2: %+v, want declined", second)
	}
	if n := len(e.fake.Messages(chanDMAda)); n != 1 {
		t.Fatalf("%d messages posted, want the first follow-up alone", n)
	}
}
