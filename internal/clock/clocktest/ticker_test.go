package clocktest_test

import (
	"context"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
)

// A clock.Ticker on a Fake ticks inside the Advance that reaches each
// period, drops a tick that finds its channel full, and stops.
func TestTicker(t *testing.T) {
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	tk := clock.NewTicker(c, time.Second)
	c.Advance(999 * time.Millisecond)
	select {
	case <-tk.C:
		t.Fatal("a tick before the period")
	default:
	}
	c.Advance(time.Millisecond)
	if got := <-tk.C; !got.Equal(c.Now()) {
		t.Fatalf("tick at %v, want %v", got, c.Now())
	}
	c.Advance(3 * time.Second) // three ticks, two dropped
	<-tk.C
	select {
	case <-tk.C:
		t.Fatal("a dropped tick was kept")
	default:
	}
	tk.Stop()
	c.Advance(time.Hour)
	select {
	case <-tk.C:
		t.Fatal("a tick after Stop")
	default:
	}
	if n := c.Pending(); n != 0 {
		t.Fatalf("%d timers pending after Stop", n)
	}
}

// clock.Every calls its function on each tick with its context, and
// returns once the context is done, its ticker stopped.
func TestEvery(t *testing.T) {
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	ctx, cancel := context.WithCancel(context.Background())
	calls, returned := make(chan context.Context), make(chan struct{})
	go func() {
		defer close(returned)
		clock.Every(ctx, c, time.Second, func(got context.Context) { calls <- got })
	}()
	wait, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := c.WaitPending(wait, 1); err != nil {
		t.Fatalf("Every armed no ticker in 10 s: %v", err)
	}
	for range 2 { // the ticker re-arms inside Advance
		c.Advance(time.Second)
		if got := <-calls; got != ctx {
			t.Fatal("called with another context")
		}
	}
	cancel()
	<-returned
	if n := c.Pending(); n != 0 {
		t.Fatalf("%d timers pending after Every returned", n)
	}
}
