package clocktest_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestAdvanceFiresDueTimersInOrder(t *testing.T) {
	c := clocktest.New(epoch)
	var fired []time.Duration
	at := func(d time.Duration) {
		c.AfterFunc(d, func() {
			if got := c.Now().Sub(epoch); got != d {
				t.Errorf("timer for %v fired reading %v", d, got)
			}
			fired = append(fired, d)
		})
	}
	at(3 * time.Second)
	at(time.Second)
	stopped := c.AfterFunc(2*time.Second, func() { t.Error("a stopped timer fired") })
	at(10 * time.Second)
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop must report true once, then false")
	}
	if next, ok := c.Next(); !ok || !next.Equal(epoch.Add(time.Second)) {
		t.Fatalf("Next = %v %v, want %v", next, ok, epoch.Add(time.Second))
	}
	c.Advance(3 * time.Second)
	if len(fired) != 2 || fired[0] != time.Second || fired[1] != 3*time.Second {
		t.Fatalf("fired %v after 3s, want [1s 3s]", fired)
	}
	if got := c.Now().Sub(epoch); got != 3*time.Second {
		t.Fatalf("Now = epoch+%v, want epoch+3s", got)
	}
	if c.Pending() != 1 {
		t.Fatalf("%d timers pending, want 1", c.Pending())
	}
}

func TestAdvanceFiresTimersArmedByCallbacks(t *testing.T) {
	c := clocktest.New(epoch)
	n := 0
	var tick func()
	tick = func() {
		n++
		c.AfterFunc(time.Second, tick)
	}
	c.AfterFunc(time.Second, tick)
	c.Advance(5 * time.Second)
	if n != 5 {
		t.Fatalf("a 1s self-rearming timer fired %d times in 5s, want 5", n)
	}
}

// TestResetReschedulesOrReArms: Reset of a pending timer moves its
// deadline; Reset of a fired or stopped one schedules its callback again, as
// time.Timer.Reset does for an AfterFunc timer.
func TestResetReschedulesOrReArms(t *testing.T) {
	c := clocktest.New(epoch)
	var fired []time.Duration
	tm := c.AfterFunc(time.Second, func() { fired = append(fired, c.Now().Sub(epoch)) })
	if !tm.Reset(3 * time.Second) {
		t.Fatal("Reset of a pending timer reported it was not pending")
	}
	c.Advance(2 * time.Second)
	if len(fired) != 0 {
		t.Fatalf("a timer reset to 3s fired at %v", fired)
	}
	c.Advance(time.Second)
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a fired timer reported it was pending")
	}
	c.Advance(time.Second)
	tm.Reset(time.Second)
	tm.Stop()
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer reported it was pending")
	}
	c.Advance(time.Second)
	if want := []time.Duration{3 * time.Second, 4 * time.Second, 5 * time.Second}; !slices.Equal(fired, want) {
		t.Fatalf("fired at %v, want %v", fired, want)
	}
}

func TestSleep(t *testing.T) {
	c := clocktest.New(epoch)
	done := make(chan error, 1)
	go func() { done <- c.Sleep(context.Background(), time.Minute) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitPending(ctx, 1); err != nil {
		t.Fatal("timed out after 10s waiting for Sleep to arm its timer")
	}
	if n := c.Sleepers(); n != 1 {
		t.Fatalf("%d sleepers, want 1", n)
	}
	c.Advance(time.Minute - 1)
	select {
	case err := <-done:
		t.Fatalf("Sleep returned %v before its minute passed", err)
	default:
	}
	c.Advance(1)
	if n := c.Sleepers(); n != 0 {
		t.Fatalf("%d sleepers once the sleep is due, want 0", n)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Sleep = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for Sleep to return once its minute passed")
	}

	cancelled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if err := c.Sleep(cancelled, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with a cancelled context = %v", err)
	}
	if c.Pending() != 0 {
		t.Fatal("a cancelled Sleep left its timer armed")
	}
}

func TestDriveRunsSleepersToTheEnd(t *testing.T) {
	c := clocktest.New(epoch)
	var finished atomic.Int64
	for i := range 3 {
		go func() {
			defer finished.Add(1)
			for range 2 {
				if err := c.Sleep(context.Background(), time.Duration(i+1)*time.Second); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	c.Drive(t, 3, func() int { return int(finished.Load()) }, func() int { return 0 })
	if got := c.Now().Sub(epoch); got != 6*time.Second {
		t.Fatalf("Drive ended at epoch+%v, want epoch+6s (the longest job: two 3s sleeps)", got)
	}
}

// TestWaitSleepersCountsNoTimer: an AfterFunc timer armed first (a
// deadline) does not end WaitSleepers; the Sleep armed after it does.
func TestWaitSleepersCountsNoTimer(t *testing.T) {
	c := clocktest.New(epoch)
	c.AfterFunc(time.Hour, func() {})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := c.WaitSleepers(ctx, 1); err == nil {
		t.Fatal("WaitSleepers returned with only an AfterFunc timer armed")
	}
	done := make(chan error, 1)
	go func() { done <- c.Sleep(context.Background(), time.Minute) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := c.WaitSleepers(wctx, 1); err != nil {
		t.Fatal("timed out after 10s waiting for Sleep to sleep")
	}
	c.Advance(time.Minute)
	if err := <-done; err != nil {
		t.Fatalf("Sleep = %v", err)
	}
}
