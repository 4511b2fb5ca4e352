package discord

import (
	"sync"
	"time"
)

// Breaker window: Discord bans an IP that gets 10,000 invalid (401, 403,
// 429) answers within 10 minutes. The breaker counts them in 60 slots of 10
// seconds and refuses REST calls while the window holds limit or more.
const (
	breakerSlots    = 60
	breakerSlotSpan = 10 * time.Second
	// unauthorizedPause is how long every REST call is refused after a 401:
	// Discord asks clients to stop after one, since the token is not valid.
	unauthorizedPause = time.Minute
)

// breaker stops REST traffic before the invalid-request ban threshold.
type breaker struct {
	limit int
	now   func() time.Time

	mu        sync.Mutex
	counts    [breakerSlots]int
	slotStart [breakerSlots]int64 // slot epoch each count belongs to
	openUntil time.Time
}

func newBreaker(limit int, now func() time.Time) *breaker {
	return &breaker{limit: limit, now: now}
}

func (b *breaker) epoch(t time.Time) int64 { return t.UnixNano() / int64(breakerSlotSpan) }

// allow reports whether a REST call may go out now.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if now.Before(b.openUntil) {
		return false
	}
	return b.sumLocked(now) < b.limit
}

// record counts one invalid answer.
func (b *breaker) record() {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.epoch(b.now())
	i := int(e % breakerSlots)
	if b.slotStart[i] != e {
		b.slotStart[i], b.counts[i] = e, 0
	}
	b.counts[i]++
}

// pause refuses every call for d.
func (b *breaker) pause(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if until := b.now().Add(d); until.After(b.openUntil) {
		b.openUntil = until
	}
}

// open reports whether the breaker currently refuses calls.
func (b *breaker) open() bool { return !b.allow() }

func (b *breaker) sumLocked(now time.Time) int {
	e := b.epoch(now)
	sum := 0
	for i := range b.counts {
		if e-b.slotStart[i] < breakerSlots {
			sum += b.counts[i]
		}
	}
	return sum
}
