package slack

import (
	"context"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/platformtest"
)

// TestFairShareInAWorkspace: tenant t1 floods workspace A with sends (100
// queued behind its chat.postMessage budget); t3's one send in the same
// workspace gets the next turn instead of waiting behind the flood, and
// t2's in workspace B does not wait at all.
func TestFairShareInAWorkspace(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	for chat, team := range map[string]string{chanGeneral: teamA.ID, chanOps: teamA.ID, chanAcme: teamB.ID} {
		e.p.seenIn(chat, team) // as the chats' inbound does
	}
	send := func(tenant, chat, text string) <-chan contract.Result {
		done := make(chan contract.Result, 1)
		go func() {
			a, _ := contract.DecodeAction([]byte(`{"op":"send","chat_id":"` + chat + `","content":"` + text + `","metadata":{}}`))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done <- e.p.Execute(ctx, tenant, &a)
		}()
		return done
	}
	const flood = 100
	var floods []<-chan contract.Result
	for range flood {
		floods = append(floods, send("t1", chanGeneral, "flood"))
	}
	// The burst (20) goes at once; the rest wait for the budget.
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := e.fake.WaitMessages(ctx, chanGeneral, tierPost.burst); err != nil {
		t.Fatal(err)
	}
	if err := clk.WaitPending(ctx, standingTimers+1); err != nil {
		t.Fatal(err)
	}
	b := e.p.limits.budget(teamA.ID, "chat.postMessage")
	queued := flood - tierPost.burst
	platformtest.WaitUntil(t, "the state", func() bool { return b.Waiting("t1") == queued })
	other := send("t3", chanOps, "urgent")
	elsewhere := send("t2", chanAcme, "elsewhere")
	select {
	case r := <-elsewhere:
		if !r.Success {
			t.Fatalf("%+v", r)
		}
	case <-time.After(waitFor):
		t.Fatal("workspace B waited for workspace A's flood")
	}
	platformtest.WaitUntil(t, "the state", func() bool { return b.Waiting("t3") == 1 })
	// One token at a time (600 a minute): t3 is served on the next turn.
	for steps := 0; b.Waiting("t3") > 0; steps++ {
		if steps > 3 {
			t.Fatalf("t3's send still waiting after %d tokens", steps)
		}
		if err := clk.WaitPending(ctx, standingTimers+1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(100 * time.Millisecond)
	}
	if n := queued - b.Waiting("t1"); n > 2 {
		t.Fatalf("t3 waited behind %d of t1's sends", n)
	}
	select {
	case r := <-other:
		if !r.Success {
			t.Fatalf("%+v", r)
		}
	case <-time.After(waitFor):
		t.Fatal("t3's send was granted but did not complete")
	}
	// The flood still completes.
	for i := 0; i < len(floods); {
		select {
		case r := <-floods[i]:
			if !r.Success {
				t.Fatalf("flood send %d: %+v", i, r)
			}
			i++
		case <-time.After(10 * time.Millisecond):
			clk.Advance(time.Second)
		}
	}
}

// TestBudgetOfTheTokensWorkspace: with bot_token alone every workspace's
// call is made with that token, so every call is on its workspace's
// budget, whatever team it is for (a Slack Connect author's users.info
// names the author's workspace): naming another team opens no second
// budget, nor a fresh burst, for the same token.
func TestBudgetOfTheTokensWorkspace(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, &platform.Deps{Clock: clk})
	lookup := func(team string) error {
		ctx, cancel := context.WithTimeout(platform.WithTenant(context.Background(), "t1"), waitFor)
		defer cancel()
		return e.p.call(ctx, team, "users.info", func(ctx context.Context, c *slack.Client) error {
			_, err := c.GetUserInfoContext(ctx, userAda)
			return err
		})
	}
	for i := range tier4.burst {
		if err := lookup(teamA.ID); err != nil {
			t.Fatalf("lookup %d: %v", i, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- lookup("T0EXT00009") }()
	b := e.p.limits.budget(teamA.ID, "users.info")
	platformtest.WaitUntil(t, "the other team's lookup waiting on bot_token's budget", func() bool { return b.Waiting("t1") == 1 })
	if n := len(e.fake.Calls("users.info")); n != tier4.burst {
		t.Fatalf("%d users.info calls past a burst of %d", n, tier4.burst)
	}
	clk.Advance(time.Minute)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for the lookup once the budget refilled")
	}
}
