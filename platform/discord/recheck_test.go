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
