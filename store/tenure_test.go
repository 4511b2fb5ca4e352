package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"connector/internal/clock"
)

// handClock is a clock the test sets by hand; its timers fire only when
// the test fires them, so a store call can take time: the clock moves
// while it is under way.
type handClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*handTimer
}

type handTimer struct {
	c  *handClock
	f  func()
	at time.Time
	on bool
}

func (c *handClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *handClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *handClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &handTimer{c: c, f: f, at: c.now.Add(d), on: true}
	c.timers = append(c.timers, t)
	return t
}

func (c *handClock) Sleep(context.Context, time.Duration) error {
	panic("handClock: Sleep is not used by Tenure")
}

func (t *handTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.on
	t.on = false
	return was
}

func (t *handTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.on
	t.on, t.at = true, t.c.now.Add(d)
	return was
}

// due returns the armed timer due first.
func (c *handClock) due(t *testing.T) *handTimer {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var first *handTimer
	for _, x := range c.timers {
		if x.on && (first == nil || x.at.Before(first.at)) {
			first = x
		}
	}
	if first == nil {
		t.Fatal("no timer armed")
	}
	return first
}

// at returns the armed timer due at when.
func (c *handClock) at(t *testing.T, when time.Time) *handTimer {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.timers {
		if x.on && x.at.Equal(when) {
			return x
		}
	}
	t.Fatalf("no timer armed for %v", when)
	return nil
}

// slowRenew delays each renewal's reply: the store renews at once, and the
// clock has moved by delay when the reply comes.
type slowRenew struct {
	Leases
	clk   *handClock
	delay time.Duration
}

func (s slowRenew) Renew(ctx context.Context, name string, l Lease, ttl time.Duration) (Lease, error) {
	nl, err := s.Leases.Renew(ctx, name, l, ttl)
	s.clk.set(s.clk.Now().Add(s.delay))
	return nl, err
}

// A renewal counts from when it was sent: with a reply a second late, the
// holder's view of its lease ends FenceMargin of the TTL before the
// store's expiry counted from the send, not from the reply (which would be
// after the store's expiry); and it renews a RenewEvery of the TTL after
// the send.
func TestTenureRenewalCountsFromItsSending(t *testing.T) {
	const ttl = 4 * time.Second
	t0 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &handClock{now: t0}
	st := NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	leases := slowRenew{Leases: st.Leases(), clk: clk, delay: time.Second}
	lost := make(chan struct{}, 1)
	ten, _, err := Hold(context.Background(), clk, leases, "job", "a", ttl, func() { lost <- struct{}{} })
	if err != nil || ten == nil {
		t.Fatalf("Hold = %v, %v", ten, err)
	}
	if !ten.Held() {
		t.Fatal("not held right after Hold")
	}
	renew := clk.due(t)
	if want := t0.Add(ttl / RenewEvery); !renew.at.Equal(want) {
		t.Fatalf("first renewal due at %v, want %v", renew.at, want)
	}
	sent := renew.at
	clk.set(sent)
	renew.f() // sent at t0+1s, answered at t0+2s
	storeExpiry := sent.Add(ttl)
	if l, _, _ := st.Leases().Holder(context.Background(), "job"); !l.Expires.Equal(storeExpiry) {
		t.Fatalf("store expiry %v, want %v", l.Expires, storeExpiry)
	}
	if next := clk.due(t); !next.at.Equal(sent.Add(ttl / RenewEvery)) {
		t.Fatalf("next renewal due at %v, want a RenewEvery of the TTL after the last was sent (%v)", next.at, sent.Add(ttl/RenewEvery))
	}
	viewEnd := sent.Add(ttl - ttl/FenceMargin)
	clk.set(viewEnd.Add(-time.Millisecond))
	if !ten.Held() {
		t.Fatal("not held before the view counted from the renewal's sending ended")
	}
	clk.set(viewEnd)
	if ten.Held() {
		t.Fatalf("held at %v, after the view counted from the renewal's sending ended (store expiry %v)", viewEnd, storeExpiry)
	}
	// The fence timer, due at the view's end, ends the tenure.
	clk.at(t, viewEnd).f()
	select {
	case <-lost:
	default:
		t.Fatal("the fence ended the tenure without calling lost")
	}
	select {
	case <-ten.Done():
	default:
		t.Fatal("Done not closed once the tenure ended")
	}
	if err := ten.Release(context.Background()); err != ErrNotHeld {
		t.Fatalf("Release after the tenure ended = %v, want ErrNotHeld", err)
	}
}
