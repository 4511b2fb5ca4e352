package slack

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/slack/slacktest"
	"connector/store"
	"connector/vault"
)

// TestThreadMarkersSharedAcrossInstances: the markers the mention gating
// reads are the store's, so two instances on one store, and an instance
// started later on it, gate alike: an unmentioned reply wakes the bot in a
// thread it posted into on the other instance, in a thread mentioned on
// the other instance, and not in a thread nobody engaged; an edit of a
// message that started a turn on the other instance starts none. A marker
// expires memoryTTL after it was set.
func TestThreadMarkersSharedAcrossInstances(t *testing.T) {
	// The store's clock judges expiry; the platforms run on real time (the
	// Slack signatures do). The store's is real time too, moved on a week
	// when the test says: never behind the platforms', as in production (a
	// store whose clock lagged would hold a duplicate check's claim "until
	// now" live, and drop the message it checked).
	clk := &shiftedClock{Clock: clock.System}
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	fake := newFake(t)
	deps := func(instance string) *platform.Deps {
		return &platform.Deps{Store: st, Cluster: newNode(t, st, instance)}
	}
	a := newEnvOn(t, fake, nil, deps("i0"))
	b := newEnvOn(t, fake, nil, deps("i1"))
	const root, mentionRoot, quiet = "1768490100.000100", "1768490200.000100", "1768490300.000100"

	// The bot answers in a thread on a; a plain reply there reaches b.
	if r := a.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"looking","metadata":{"thread_id":"`+root+`"}}`); !r.Success {
		t.Fatalf("%+v", r)
	}
	b.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490110.000100", root, "thanks"), http.StatusOK)
	if d := b.sink.Next(t); d.Event.Text != "thanks" {
		t.Fatalf("%+v", d.Event)
	}
	// A top-level mention on a marks its thread; a plain reply on b wakes.
	a.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, mentionRoot, "", "<@"+teamA.BotUser+"> look"), http.StatusOK)
	a.sink.Next(t)
	b.event(t, teamA, "Ev3", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490210.000100", mentionRoot, "and this"), http.StatusOK)
	if d := b.sink.Next(t); d.Event.Text != "and this" {
		t.Fatalf("%+v", d.Event)
	}
	// Nobody engaged this thread: its reply starts nothing anywhere.
	b.event(t, teamA, "Ev4", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490310.000100", quiet, "chatter"), http.StatusOK)
	b.sink.Empty(t)
	// An edit of the message that started a turn on a starts none on b.
	edit := map[string]any{"type": "message", "subtype": "message_changed", "channel": chanGeneral, "channel_type": "channel",
		"ts": "1768490400.000900", "event_ts": "1768490400.000900",
		"message": map[string]any{"client_msg_id": "m1", "type": "message", "user": userAda, "ts": mentionRoot,
			"text": "<@U0BOTA0001> look again", "team": teamA.ID, "edited": map[string]any{"user": userAda, "ts": "1768490400.000900"}}}
	b.event(t, teamA, "Ev5", edit, http.StatusOK)
	b.sink.Empty(t)

	// An instance started later on the store agrees.
	c := newEnvOn(t, fake, nil, deps("i2"))
	c.event(t, teamA, "Ev6", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490120.000100", root, "still there?"), http.StatusOK)
	if d := c.sink.Next(t); d.Event.Text != "still there?" {
		t.Fatalf("%+v", d.Event)
	}
	// The markers expire: a week later the bot-posted thread is quiet.
	clk.Advance(memoryTTL + time.Minute)
	c.event(t, teamA, "Ev7", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490130.000100", root, "anyone?"), http.StatusOK)
	c.sink.Empty(t)
}

// TestThreadMarkersStayInTheirChannel: the markers that wake the bot on an
// unmentioned reply count only in the channel (and for the tenant) they
// were set in. Tenant t3, whose channel ops is in t1's workspace, posts
// into a thread of its own channel under the ts of a thread of t1's
// general, and is mentioned in a thread of ops under another such ts:
// neither wakes the bot in general's threads of the same ts.
func TestThreadMarkersStayInTheirChannel(t *testing.T) {
	e := newEnv(t, nil, nil)
	const posted, mentioned = "1768490500.000100", "1768490600.000100"
	if r := e.execute(t, "t3", `{"op":"send","chat_id":"C0OPS00002","content":"hi","metadata":{"thread_id":"`+posted+`"}}`); !r.Success {
		t.Fatalf("%+v", r)
	}
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, chanOps, userAda, mentioned, mentioned, "<@"+teamA.BotUser+"> look"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t3" {
		t.Fatalf("the mention in ops went to %s", d.Tenant)
	}
	e.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490510.000100", posted, "chatter"), http.StatusOK)
	e.event(t, teamA, "Ev3", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490610.000100", mentioned, "chatter"), http.StatusOK)
	e.sink.Empty(t)
	// In ops itself both still wake it.
	e.event(t, teamA, "Ev4", slacktest.MessageEvent(teamA.ID, chanOps, userAda, "1768490520.000100", posted, "thanks"), http.StatusOK)
	e.event(t, teamA, "Ev5", slacktest.MessageEvent(teamA.ID, chanOps, userAda, "1768490620.000100", mentioned, "more"), http.StatusOK)
	for _, want := range []string{"thanks", "more"} {
		if d := e.sink.Next(t); d.Tenant != "t3" || d.Event.Text != want {
			t.Fatalf("%s %+v, want %q for t3", d.Tenant, d.Event, want)
		}
	}
}

// shiftedClock is real time moved on by what Advance added.
type shiftedClock struct {
	clock.Clock
	by atomic.Int64
}

// Now implements clock.Clock.
func (c *shiftedClock) Now() time.Time { return c.Clock.Now().Add(time.Duration(c.by.Load())) }

// Advance moves the clock on by d.
func (c *shiftedClock) Advance(d time.Duration) { c.by.Add(int64(d)) }

// TestThreadMarkersOfAnEarlierTenant: t1 posted into a thread, and is
// deleted and created again under its id (the vault's Since moves to its
// new start): an unmentioned reply in that thread does not wake the bot
// for the new t1 (the thread was the earlier t1's); in a thread the new t1
// posted into, one does.
func TestThreadMarkersOfAnEarlierTenant(t *testing.T) {
	eachSkew(t, func(t *testing.T, skewed bool) {
		clk := clocktest.New(time.Now()) // requests are signed at the time of day
		var began atomic.Int64
		since := func(tenant string) time.Time {
			if us := began.Load(); tenant == "t1" && us != 0 {
				return time.UnixMicro(us)
			}
			return time.Time{}
		}
		if skewed {
			began.Store(clk.Now().Add(-time.Hour).UnixMicro()) // the earlier t1's creation
		}
		drops := &platformtest.LastDrop{}
		e := newEnvOn(t, newFake(t), nil, &platform.Deps{Clock: clk, Metrics: drops, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})})
		post := func(root string) {
			t.Helper()
			if r := e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"looking","metadata":{"thread_id":"`+root+`"}}`); !r.Success {
				t.Fatalf("%+v", r)
			}
		}
		const earlier, later = "1768490100.000100", "1768490200.000100"
		post(earlier)
		clk.Advance(time.Second)
		began.Store(createdAt(clk.Now(), skewed)) // t1 deleted and created again
		clk.Advance(time.Second)
		post(later)
		drops.Take()
		e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490110.000100", earlier, "thanks"), http.StatusOK)
		e.settled(t)
		e.sink.Empty(t)
		if r := drops.Take(); r != dropMentionRequired {
			t.Fatalf("the reply in the earlier t1's thread: drop %q, want %s", r, dropMentionRequired)
		}
		e.event(t, teamA, "Ev2", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490210.000100", later, "thanks"), http.StatusOK)
		if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.Text != "thanks" {
			t.Fatalf("the reply in the new t1's thread: %s %+v", d.Tenant, d.Event)
		}
	})
}

// eachSkew runs test as it is, and with t1's earlier creation kept (an
// hour before) and its new one made by a clock 5 s behind (skewed): records
// were told apart by when they were kept, which that skew got wrong.
func eachSkew(t *testing.T, test func(t *testing.T, skewed bool)) {
	for _, skewed := range []bool{false, true} {
		t.Run(fmt.Sprintf("skewed %v", skewed), func(t *testing.T) { test(t, skewed) })
	}
}

// createdAt is t1's creation made at now, by a clock 5 s behind when
// skewed.
func createdAt(now time.Time, skewed bool) int64 {
	if skewed {
		return now.Add(-5 * time.Second).UnixMicro()
	}
	return now.UnixMicro()
}
