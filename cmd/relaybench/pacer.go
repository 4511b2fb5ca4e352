package main

import (
	"context"
	"fmt"
	"time"
)

// stallTimeout is how long the pacer waits for the window to open before it
// gives up on the run.
const stallTimeout = 30 * time.Second

// pacer schedules a run's events: at Rate per second on a fixed schedule
// (each event carries its scheduled time, so a stall shows in the latencies
// instead of being hidden by sending later), or, at Rate 0, as fast as the
// window allows. Never more than Window events are in flight.
type pacer struct {
	Rate     float64
	Duration time.Duration
	// Count, when positive, ends the run after that many events instead
	// of after Duration.
	Count  int
	Window int
	// InFlight reports events sent and not yet completed.
	InFlight func() int64
	// Progress is signalled when InFlight may have dropped.
	Progress <-chan struct{}
}

// run calls fire for each event until Duration has passed (or Count events
// were fired) and returns how many it fired and how many of those failed.
func (p *pacer) run(ctx context.Context, fire func(seq int, at time.Time) error) (sent, failed int, err error) {
	start := time.Now()
	end := start.Add(p.Duration)
	if p.Count > 0 {
		end = time.Unix(1<<62, 0) // never: the count ends the run
	}
	var interval time.Duration
	if p.Rate > 0 {
		interval = time.Duration(float64(time.Second) / p.Rate)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for seq := 0; p.Count <= 0 || seq < p.Count; seq++ {
		at := time.Now()
		if interval > 0 {
			at = start.Add(time.Duration(seq) * interval)
			if !at.Before(end) {
				return sent, failed, nil
			}
			if wait := time.Until(at); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return sent, failed, ctx.Err()
				}
			}
		} else if !at.Before(end) {
			return sent, failed, nil
		}
		if err := p.waitWindow(ctx, timer); err != nil {
			return sent, failed, err
		}
		sent++
		if fire(seq, at) != nil {
			failed++
		}
	}
	return sent, failed, nil
}

// waitWindow waits until fewer than Window events are in flight.
func (p *pacer) waitWindow(ctx context.Context, timer *time.Timer) error {
	if p.InFlight() < int64(p.Window) {
		return nil
	}
	timer.Reset(stallTimeout)
	for p.InFlight() >= int64(p.Window) {
		select {
		case <-p.Progress:
		case <-timer.C:
			return fmt.Errorf("stalled: %d events in flight for %s", p.InFlight(), stallTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
