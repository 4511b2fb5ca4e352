package discord

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

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
