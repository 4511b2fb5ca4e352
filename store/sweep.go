package store

import "time"

// sweepEvery is how often the memory and embedded backends delete expired
// capabilities and owners. Lookups never return an expired value, so this
// only bounds what is kept; Redis expires its keys itself.
const sweepEvery = time.Minute

// startSweeper runs sweep every sweepEvery until stop is called; stop waits
// for a running sweep to finish.
func startSweeper(sweep func()) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				sweep()
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
