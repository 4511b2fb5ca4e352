// Package fairshare shares one platform budget between tenants.
//
// A shared bot has one global rate limit (Discord: 50 requests/s; Telegram:
// about 30 messages/s). The Scheduler meters that budget as a token bucket and,
// whenever requests are waiting, grants tokens to tenants by weighted round
// robin: each tenant with waiting requests gets up to its weight in grants per
// round, in FIFO order within the tenant. A tenant flooding sends therefore
// only ever receives its share while the others keep flowing; an idle
// tenant's share goes to whoever is waiting. This is the one fairness policy
// of every platform; per-chat and per-route limits are the platforms' own and
// are applied after a grant. Share and Holdings part a bound (not a rate)
// between tenants by the same weights; Slots parts one without weights.
package fairshare

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"connector/internal/clock"
)

// Config sets the budget and the tenants' weights.
type Config struct {
	// Rate is the sustained budget in requests per second. Zero means unlimited.
	Rate float64
	// Burst is how many requests may go at once after a quiet period. Zero
	// means max(1, Rate).
	Burst int
	// Weights gives a tenant's share relative to others; missing or
	// non-positive means 1.
	Weights map[string]int
	// MaxWaiting bounds the requests one tenant may have waiting; further ones
	// fail at once with ErrQueueFull. Zero means 10,000.
	MaxWaiting int
	// Clock meters the budget and times pauses. Nil means clock.System.
	Clock clock.Clock
}

// ErrQueueFull is returned by Wait when a tenant already has MaxWaiting
// requests waiting.
var ErrQueueFull = errors.New("fairshare: too many requests waiting for this tenant")

// Scheduler meters one budget fairly between tenants. Its zero value is not
// usable; call New.
type Scheduler struct {
	cfg   Config
	clock clock.Clock

	mu        sync.Mutex
	tokens    float64
	last      time.Time
	paused    time.Time            // no grants before this instant (a global 429)
	queues    map[string][]*waiter // per tenant with waiters, in FIFO order
	ring      []string             // tenants with waiters, in round-robin order
	cur       int                  // index in ring of the tenant being served
	credit    int                  // grants left for ring[cur] in its turn
	fresh     bool                 // ring[cur] has not started its turn yet
	timer     clock.Timer
	timerWhen time.Time
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

// New returns a Scheduler for cfg.
func New(cfg Config) *Scheduler {
	cfg.Burst = cmp.Or(max(cfg.Burst, 0), max(1, int(cfg.Rate)))
	cfg.MaxWaiting = cmp.Or(max(cfg.MaxWaiting, 0), 10_000)
	clk := cmp.Or(cfg.Clock, clock.System)
	return &Scheduler{cfg: cfg, clock: clk, tokens: float64(cfg.Burst), last: clk.Now(), fresh: true, queues: make(map[string][]*waiter)}
}

// Wait blocks until tenant may make one request, or ctx ends. A nil return
// consumes one unit of the budget.
func (s *Scheduler) Wait(ctx context.Context, tenant string) error {
	if s.cfg.Rate <= 0 {
		return ctx.Err()
	}
	s.mu.Lock()
	s.refill()
	if len(s.ring) == 0 && s.tokens >= 1 && !s.clock.Now().Before(s.paused) {
		s.tokens--
		s.mu.Unlock()
		return nil
	}
	q := s.queues[tenant]
	if len(q) >= s.cfg.MaxWaiting {
		s.mu.Unlock()
		return ErrQueueFull
	}
	w := &waiter{ready: make(chan struct{})}
	if len(q) == 0 {
		s.ring = append(s.ring, tenant)
	}
	s.queues[tenant] = append(q, w)
	s.dispatch()
	s.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		if w.granted {
			return nil // the grant raced the cancellation; use it
		}
		s.remove(tenant, w)
		return ctx.Err()
	}
}

// Pause stops all grants until d from now, e.g. after the platform answered
// a global 429 with a retry-after.
func (s *Scheduler) Pause(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if until := s.clock.Now().Add(d); until.After(s.paused) {
		s.paused = until
	}
	s.tokens = 0
	s.dispatch()
}

// Waiting returns how many requests of tenant are waiting.
func (s *Scheduler) Waiting(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues[tenant])
}

func (s *Scheduler) refill() {
	now := s.clock.Now()
	if now.Before(s.paused) {
		s.last = now
		return
	}
	from := s.last
	if from.Before(s.paused) {
		from = s.paused
	}
	if el := now.Sub(from); el > 0 {
		s.tokens = min(float64(s.cfg.Burst), s.tokens+el.Seconds()*s.cfg.Rate)
	}
	s.last = now
}

// dispatch grants as many waiters as the budget allows and arms a timer for
// the next token. Called with s.mu held.
func (s *Scheduler) dispatch() {
	s.refill()
	for len(s.ring) > 0 && s.tokens >= 1 && !s.clock.Now().Before(s.paused) {
		tenant := s.next()
		q := s.queues[tenant]
		w := q[0]
		q[0] = nil
		s.queues[tenant] = q[1:]
		w.granted = true
		close(w.ready)
		s.tokens--
		s.credit--
		if len(q) == 1 {
			delete(s.queues, tenant)
			s.dropFromRing(s.cur)
		}
	}
	if len(s.ring) == 0 {
		return
	}
	var wait time.Duration
	if now := s.clock.Now(); now.Before(s.paused) {
		wait = s.paused.Sub(now)
	} else {
		wait = time.Duration((1 - s.tokens) / s.cfg.Rate * float64(time.Second))
	}
	s.arm(max(wait, time.Millisecond))
}

// next returns the tenant to serve: ring[cur] while it has credit left in
// its turn, else the following tenant, whose turn gets its weight in credit.
func (s *Scheduler) next() string {
	if s.cur >= len(s.ring) {
		s.cur, s.fresh = 0, true
	}
	if s.credit <= 0 {
		if !s.fresh {
			s.cur = (s.cur + 1) % len(s.ring)
		}
		s.fresh = false
		s.credit = s.weight(s.ring[s.cur])
	}
	return s.ring[s.cur]
}

func (s *Scheduler) weight(tenant string) int { return max(s.cfg.Weights[tenant], 1) }

// dropFromRing removes ring[i] (a tenant with no more waiters). When it was
// the tenant being served, the one sliding into its place starts a fresh turn.
func (s *Scheduler) dropFromRing(i int) {
	s.ring = slices.Delete(s.ring, i, i+1)
	switch {
	case i < s.cur:
		s.cur--
	case i == s.cur:
		s.credit, s.fresh = 0, true
	}
	if s.cur >= len(s.ring) {
		s.cur = 0
	}
}

func (s *Scheduler) remove(tenant string, w *waiter) {
	q, ok := s.queues[tenant]
	if !ok {
		return
	}
	if q = slices.DeleteFunc(q, func(x *waiter) bool { return x == w }); len(q) > 0 {
		s.queues[tenant] = q
		return
	}
	delete(s.queues, tenant)
	if i := slices.Index(s.ring, tenant); i >= 0 {
		s.dropFromRing(i)
	}
}

func (s *Scheduler) arm(d time.Duration) {
	when := s.clock.Now().Add(d)
	if s.timer != nil && !s.timerWhen.After(when) && s.timerWhen.After(s.clock.Now()) {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timerWhen = when
	s.timer = s.clock.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.timer = nil
		s.dispatch()
	})
}
