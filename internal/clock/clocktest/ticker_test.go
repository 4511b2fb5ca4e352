package clocktest_test

import (
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
