package main

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connector/internal/wsconn"
)

// webhookJob is one event a webhook driver posts: its sequence number and
// scheduled time.
type webhookJob struct {
	seq int
	at  time.Time
}

// webhookPool posts the events of a driver that plays a platform's
// webhook sender (Discord interactions, Meta's WhatsApp webhooks) from a
// fixed number of workers, counting what the connector refused.
type webhookPool struct {
	client   *http.Client
	jobs     chan webhookJob
	workers  sync.WaitGroup
	failed   atomic.Int64 // refused webhooks and events the platform dropped
	progress chan struct{}
	// answered records how long each webhook took to be answered (the
	// platform's confirmation), from its POST.
	answered recorder
}

// start runs n workers that post each job with post, which reports
// whether the webhook's contract was met; progress is signalled on each
// failure.
func (w *webhookPool) start(n int, progress chan struct{}, post func(webhookJob) bool) {
	w.progress = progress
	w.client = &http.Client{Timeout: dialTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	w.jobs = make(chan webhookJob, n)
	for range n {
		w.workers.Go(func() {
			for j := range w.jobs {
				start := time.Now()
				ok := post(j)
				w.answered.add(time.Since(start), 0)
				if !ok {
					w.fail()
				}
			}
		})
	}
}

// fail counts an event that will never reach a gateway.
func (w *webhookPool) fail() {
	w.failed.Add(1)
	wsconn.Signal(w.progress)
}

// fire queues event seq for the workers.
func (w *webhookPool) fire(seq int, at time.Time) error {
	w.jobs <- webhookJob{seq: seq, at: at}
	return nil
}

// failures implements eventDriver.
func (w *webhookPool) failures() int64 { return w.failed.Load() }

// stop ends the workers once the queued jobs are posted.
func (w *webhookPool) stop() {
	if w.jobs != nil {
		close(w.jobs)
		w.workers.Wait()
		w.jobs = nil
	}
}

// dropCounter is the Metrics of a driver's platform: an event the platform
// accepted but dropped will never reach a gateway.
type dropCounter struct{ w *webhookPool }

// RateLimitWait implements platform.Metrics.
func (dropCounter) RateLimitWait(string, time.Duration) {}

// RateLimited implements platform.Metrics.
func (dropCounter) RateLimited(string) {}

// Dropped implements platform.Metrics.
func (m dropCounter) Dropped(string, string) { m.w.fail() }
