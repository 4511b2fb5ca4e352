// Package pace spaces the messages a platform sends to one key (a Slack
// channel, a WhatsApp user): at most perSecond a second, booked in the
// order asked, none while the key is held after a rate-limit answer (until
// the platform's Retry-After, Hold, or for a backoff that doubles with each
// answer in a row, Backoff). Idle keys are forgotten. Slack and WhatsApp
// pace their messages through it; Telegram's sliding windows and Discord's
// route buckets are their own.
package pace

import (
	"maps"
	"sync"
	"time"
)

// Pacer paces the messages of every key. Safe for concurrent use.
type Pacer struct {
	gap time.Duration // 0: no spacing

	mu    sync.Mutex
	keys  map[string]*state
	added int // new keys since the last sweep
}

type state struct {
	next    time.Time // the earliest slot for the next message
	held    time.Time // the end of the last Backoff's hold
	holds   int       // Backoff answers in a row
	touched time.Time
}

// Backoff bounds.
const (
	BackoffMin = time.Second
	BackoffMax = 64 * time.Second
)

// sweepEvery is how many new keys trigger forgetting the idle ones.
const sweepEvery = 4096

// New returns a pacer of perSecond messages a second per key; <= 0 spaces
// nothing (holds still apply).
func New(perSecond int) *Pacer {
	p := &Pacer{keys: make(map[string]*state)}
	if perSecond > 0 {
		p.gap = time.Second / time.Duration(perSecond)
	}
	return p
}

// Reserve books the earliest slot for one message to key at or after now.
// When that slot is after latest it books nothing and reports false with
// the slot it would have been.
func (p *Pacer) Reserve(key string, now, latest time.Time) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.get(key, now)
	at := now
	if s.next.After(at) {
		at = s.next
	}
	if at.After(latest) {
		return at, false
	}
	s.next = at.Add(p.gap)
	return at, true
}

// Hold keeps key's next message back until until (a rate-limit answer's
// Retry-After), unless it is held longer already.
func (p *Pacer) Hold(key string, until, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.get(key, now); until.After(s.next) {
		s.next = until
	}
}

// Backoff holds key's next message back after a rate-limit answer at now
// for a backoff that doubles with each answer in a row (BackoffMin to
// BackoffMax), and returns it. An answer while an earlier one's hold lasts
// (to a call already made when it began) is the same throttle: it returns
// what is left of that hold, not doubled.
func (p *Pacer) Backoff(key string, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.get(key, now)
	if now.Before(s.held) {
		return s.held.Sub(now)
	}
	d := min(BackoffMin<<min(s.holds, 6), BackoffMax)
	s.holds++
	if s.held = now.Add(d); s.held.After(s.next) {
		s.next = s.held
	}
	return d
}

// Passed resets key's backoff after a message went through.
func (p *Pacer) Passed(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.keys[key]; s != nil {
		s.holds = 0
	}
}

// get returns key's state, creating it. Called with mu held.
func (p *Pacer) get(key string, now time.Time) *state {
	s := p.keys[key]
	if s == nil {
		if p.added++; p.added >= sweepEvery {
			p.added = 0
			maps.DeleteFunc(p.keys, func(_ string, v *state) bool { return now.Sub(v.touched) > BackoffMax && !v.next.After(now) })
		}
		s = &state{}
		p.keys[key] = s
	}
	s.touched = now
	return s
}
