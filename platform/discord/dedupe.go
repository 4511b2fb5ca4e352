package discord

import (
	"sync"
	"time"

	"connector/internal/clock"
)

// dedupe remembers interaction ids for at least window. It keeps two
// generations of ids and drops the older one when the current one is window
// old (or full), so it needs no sweeper goroutine. window is twice the
// timestamp skew: a replay older than that fails the freshness check anyway.
type dedupe struct {
	window time.Duration
	clock  clock.Clock

	mu      sync.Mutex
	cur     map[string]struct{}
	prev    map[string]struct{}
	rotated time.Time
}

// maxDedupeGeneration bounds one generation's ids (interactions arrive at
// human rates; this only matters under a flood of valid signatures).
const maxDedupeGeneration = 1 << 20

func newDedupe(window time.Duration, c clock.Clock) *dedupe {
	return &dedupe{window: window, clock: c, cur: map[string]struct{}{}, prev: map[string]struct{}{}, rotated: c.Now()}
}

// add records id and reports whether it was new.
func (d *dedupe) add(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now := d.clock.Now(); now.Sub(d.rotated) >= d.window || len(d.cur) >= maxDedupeGeneration {
		d.prev, d.cur, d.rotated = d.cur, make(map[string]struct{}, len(d.cur)), now
	}
	if _, ok := d.cur[id]; ok {
		return false
	}
	if _, ok := d.prev[id]; ok {
		return false
	}
	d.cur[id] = struct{}{}
	return true
}
