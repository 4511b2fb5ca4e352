package nexscope

import "time"

// Clock is the time source of the relay's timers: the heartbeat, the file
// transfer deadline and the ts of every frame. Tests inject a fake whose
// AfterFunc fires when the test advances it, so a 60 s stall or two missed
// 30 s heartbeats are tested without waiting.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed, unless the
	// returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it
	// did so.
	Stop() bool
}

// systemClock is the real clock; now may come from platform.Deps.Clock.
type systemClock struct{ now func() time.Time }

func (c systemClock) Now() time.Time { return c.now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
