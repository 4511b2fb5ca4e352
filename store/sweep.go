package store

import (
	"context"
	"time"

	"connector/internal/clock"
)

// sweepBatch bounds the entries one transaction of the embedded sweep looks
// at, so the writes queued behind it wait for that many at most.
const sweepBatch = 1000

// sweepEvery is how often the memory and embedded backends delete expired
// capabilities and owners. Lookups never return an expired value, so this
// only bounds what is kept; Redis expires its keys itself.
const sweepEvery = time.Minute

// startSweeper runs sweep every sweepEvery of c until stop is called; stop
// ends sweep's context and waits for a running sweep to return.
func startSweeper(c clock.Clock, sweep func(context.Context)) (stop func()) {
	ctx, done := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		clock.Every(ctx, c, sweepEvery, sweep)
	}()
	return func() {
		done()
		<-finished
	}
}
