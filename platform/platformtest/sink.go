// Package platformtest is test support for the platform packages: Sink,
// the one platform.Sink double their tests, fuzz targets and benchmarks
// deliver into, WaitUntil, the one wait for a state to hold, and LastDrop,
// the metrics double that tells which gate dropped an event.
package platformtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"connector/platform"
)

// Timeout bounds every wait of a Sink and of WaitUntil.
const Timeout = 20 * time.Second

// TB is the part of testing.TB the waits use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// WaitUntil waits up to Timeout until cond holds, checking every
// millisecond; what names the state in the failure. It is how a test waits
// for a state it cannot be told of (a platform's readiness, a fake's
// registry), never for a log line.
func WaitUntil(tb TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(Timeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", Timeout, what)
		}
		<-tick.C
	}
}

// ErrRefused is what a Sink answers a delivery it refuses, as a relay
// whose store fails.
var ErrRefused = errors.New("platformtest: the sink refuses deliveries")

// Sink records what a platform delivers. It keeps deliveries for Next
// (up to its keep; Deliver then waits for Next), counts them, and refuses
// the ones Refuse and RefuseAll say, or Check returns an error for.
type Sink struct {
	// Check, when set, sees every delivery first; an error it returns is
	// Deliver's (the delivery is refused). It may block, as a slow store
	// does. Set it before the sink is used.
	Check func(platform.Delivery) error

	kept          chan platform.Delivery
	calls, taken  atomic.Int64
	refuseNext    atomic.Int64
	refuseForever atomic.Bool
}

// NewSink returns a Sink keeping up to keep deliveries for Next; keep 0
// keeps none (a benchmark's or fuzz target's sink that only counts).
func NewSink(keep int) *Sink {
	s := &Sink{}
	if keep > 0 {
		s.kept = make(chan platform.Delivery, keep)
	}
	return s
}

// Deliver implements platform.Sink.
func (s *Sink) Deliver(_ context.Context, d platform.Delivery) error {
	s.calls.Add(1)
	if s.Check != nil {
		if err := s.Check(d); err != nil {
			return err
		}
	}
	if s.refuseForever.Load() || s.refuseNext.Add(-1) >= 0 {
		return ErrRefused
	}
	s.taken.Add(1)
	if s.kept != nil {
		s.kept <- d
	}
	return nil
}

// Refuse makes the sink refuse the next n deliveries.
func (s *Sink) Refuse(n int) { s.refuseNext.Store(int64(n)) }

// RefuseAll makes the sink refuse every delivery while on is true.
func (s *Sink) RefuseAll(on bool) { s.refuseForever.Store(on) }

// Calls reports how many deliveries were offered, refused ones included.
func (s *Sink) Calls() int64 { return s.calls.Load() }

// Taken reports how many deliveries the sink took.
func (s *Sink) Taken() int64 { return s.taken.Load() }

// Next returns the next delivery kept, failing t when none comes within
// Timeout.
func (s *Sink) Next(t testing.TB) platform.Delivery {
	t.Helper()
	select {
	case d := <-s.kept:
		return d
	case <-time.After(Timeout):
		t.Fatalf("no delivery within %s", Timeout)
		return platform.Delivery{}
	}
}

// TryNext returns the next delivery kept, if one is, without waiting.
func (s *Sink) TryNext() (platform.Delivery, bool) {
	select {
	case d := <-s.kept:
		return d, true
	default:
		return platform.Delivery{}, false
	}
}

// Empty fails t when a delivery is kept. It means something only after an
// ingest that returns once delivered (a webhook's request), or while
// nothing can be delivered.
func (s *Sink) Empty(t testing.TB) {
	t.Helper()
	if n := len(s.kept); n != 0 {
		t.Fatalf("%d unexpected deliveries, the first %+v", n, <-s.kept)
	}
}
