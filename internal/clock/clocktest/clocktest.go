// Package clocktest is a fake clock.Clock for tests: time stands still until
// the test advances it, and timers fire only then, so time-dependent rules
// are tested without sleeping and without depending on the machine's speed.
package clocktest

import (
	"context"
	"sync"
	"time"

	"connector/internal/clock"
)

// Fake is a clock.Clock whose time moves only by Advance. Its zero value is
// not usable; call New.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer
	changed chan struct{} // closed and replaced whenever a timer is armed
}

type timer struct {
	c     *Fake
	at    time.Time
	f     func()
	sleep bool // armed by Sleep
}

var _ clock.Clock = (*Fake)(nil)

// New returns a Fake reading start.
func New(start time.Time) *Fake { return &Fake{now: start, changed: make(chan struct{})} }

// Now implements clock.Clock.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements clock.Clock: f runs inside the Advance that reaches
// now+d.
func (c *Fake) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.arm(d, f, false)
}

// Sleep implements clock.Clock: it returns inside the Advance that reaches
// now+d (or when ctx ends).
func (c *Fake) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	woken := make(chan struct{})
	t := c.arm(d, func() { close(woken) }, true)
	select {
	case <-woken:
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

func (c *Fake) arm(d time.Duration, f func(), sleep bool) *timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, f: f, sleep: sleep}
	t.schedule(d)
	return t
}

// schedule makes t pending, due d from now, and wakes WaitPending. c.mu
// must be held.
func (t *timer) schedule(d time.Duration) {
	c := t.c
	t.at = c.now.Add(max(d, 0))
	c.timers = append(c.timers, t)
	close(c.changed)
	c.changed = make(chan struct{})
}

// Stop implements clock.Timer.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.unlink()
}

// Reset implements clock.Timer: the callback runs inside the Advance that
// reaches now+d.
func (t *timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	pending := t.unlink()
	t.schedule(d)
	return pending
}

// unlink removes t from the pending timers, reporting whether it was there.
// c.mu must be held.
func (t *timer) unlink() bool {
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the clock forward by d. Every timer that comes due fires in
// deadline order (the clock reading its deadline meanwhile), synchronously:
// when Advance returns, every callback due by then has returned, including
// those of timers the callbacks armed. Callbacks must not call Advance.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		next := -1
		for i, t := range c.timers {
			if !t.at.After(target) && (next < 0 || t.at.Before(c.timers[next].at)) {
				next = i
			}
		}
		if next < 0 {
			c.now = target
			c.mu.Unlock()
			return
		}
		t := c.timers[next]
		c.timers = append(c.timers[:next], c.timers[next+1:]...)
		c.now = t.at
		c.mu.Unlock()
		t.f()
	}
}

// Next returns the deadline of the earliest pending timer; ok is false when
// none is pending.
func (c *Fake) Next() (at time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.timers {
		if !ok || t.at.Before(at) {
			at, ok = t.at, true
		}
	}
	return at, ok
}

// Pending counts the timers not yet fired or stopped, Sleeps' included.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Sleepers counts the goroutines blocked in Sleep. One a due Advance wakes
// stops counting inside that Advance, before it returns.
func (c *Fake) Sleepers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if t.sleep {
			n++
		}
	}
	return n
}

// WaitPending blocks until at least n timers (Sleeps' included) are
// pending, e.g. until the goroutines under test all sleep on the clock, or
// ctx ends.
func (c *Fake) WaitPending(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		ok := len(c.timers) >= n
		ch := c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitSleepers blocks until at least n goroutines sleep in Sleep, or ctx
// ends. Unlike WaitPending it counts no AfterFunc timer, such as a deadline
// the code under test arms before it sleeps.
func (c *Fake) WaitSleepers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if c.Sleepers() >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Failer is the part of testing.TB that Drive needs.
type Failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// settleTimeout bounds, in real time, how long Settle waits.
const settleTimeout = 10 * time.Second

// Settle waits until each of n jobs running in their own goroutines has
// finished or blocks on the clock: sleeping in c.Sleep, or counted by
// waiting (e.g. queued in a fair-share scheduler on c). It fails t after
// 10 s of real time. It reads finished first: while the clock stands still a
// job only moves from running to blocked or finished, so the sum never counts
// a running job.
func (c *Fake) Settle(t Failer, n int, finished, waiting func() int) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for {
		f := finished()
		w, s := waiting(), c.Sleepers()
		if f+w+s == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for every job to finish or block on the clock: %d finished, %d waiting, %d sleeping, of %d", settleTimeout, f, w, s, n)
		}
		time.Sleep(100 * time.Microsecond) // polling: blocking signals nothing
	}
}

// Drive advances c, timer by timer, for n jobs running in their own
// goroutines, until finished reports all n done. Before each step it
// Settles. Jobs must leave their blocked states only inside Advance; then no
// job runs while the clock moves, and what each one does happens at the very
// instant it was released, however slow the machine. Drive fails t when
// Settle does, or when the jobs wait with no timer armed.
func (c *Fake) Drive(t Failer, n int, finished, waiting func() int) {
	t.Helper()
	for {
		c.Settle(t, n, finished, waiting)
		if finished() == n {
			return
		}
		next, ok := c.Next()
		if !ok {
			t.Fatalf("%d jobs wait on the clock, but no timer is armed", n-finished())
		}
		c.Advance(next.Sub(c.Now()))
	}
}
