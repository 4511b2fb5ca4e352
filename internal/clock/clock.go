// Package clock is the time source of the connector's time-dependent rules
// (rate limits, pauses, backoffs): production code takes a Clock instead of
// calling time.Now and time.AfterFunc, so tests can drive those rules on a
// fake clock (clocktest.Fake) instead of waiting on the real one.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the time and schedules callbacks.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// AfterFunc calls f once d has elapsed, unless the returned Timer is
	// stopped first.
	AfterFunc(d time.Duration, f func()) Timer
	// Sleep waits d, or until ctx ends; it returns ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it
	// did so.
	Stop() bool
	// Reset schedules the call d from now, as time.Timer.Reset does for an
	// AfterFunc timer: it reports whether the call was pending (and is now
	// rescheduled) rather than already started or stopped (and is now
	// scheduled again). A timer reset around each operation watches many
	// without allocating.
	Reset(d time.Duration) bool
}

// System is the real clock: time.Now and time.AfterFunc.
var System Clock = system{}

type system struct{}

func (system) Now() time.Time { return time.Now() }

func (system) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

func (system) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ticker delivers the time on C every period of its clock, as time.Ticker
// does: a tick that finds C full is dropped. On a clocktest.Fake it ticks
// inside the Advance that reaches each period.
type Ticker struct {
	// C receives the ticks.
	C <-chan time.Time

	c      chan time.Time
	clock  Clock
	period time.Duration
	mu     sync.Mutex // guards timer and stopped
	timer  Timer
	stop   bool
}

// NewTicker starts a Ticker of period d on c; Stop ends it.
func NewTicker(c Clock, d time.Duration) *Ticker {
	ch := make(chan time.Time, 1)
	t := &Ticker{C: ch, c: ch, clock: c, period: d}
	t.mu.Lock()
	t.timer = c.AfterFunc(d, t.tick)
	t.mu.Unlock()
	return t
}

func (t *Ticker) tick() {
	select {
	case t.c <- t.clock.Now():
	default:
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stop {
		t.timer.Reset(t.period)
	}
}

// Stop ends the ticks; no tick is sent after it returns but one under way.
func (t *Ticker) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stop = true
	t.timer.Stop()
}

// Every calls f with ctx every period of c (a Ticker's ticks) until ctx is
// done; a call under way then finishes before Every returns.
func Every(ctx context.Context, c Clock, period time.Duration, f func(context.Context)) {
	t := NewTicker(c, period)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f(ctx)
		case <-ctx.Done():
			return
		}
	}
}
