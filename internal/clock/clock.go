// Package clock is the time source of the connector's time-dependent rules
// (rate limits, pauses, backoffs): production code takes a Clock instead of
// calling time.Now and time.AfterFunc, so tests can drive those rules on a
// fake clock (clocktest.Fake) instead of waiting on the real one.
package clock

import (
	"context"
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
