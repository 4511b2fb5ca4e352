// Package keyrate rate-limits requests per key (a tenant, a platform
// user): each key has its own token bucket (golang.org/x/time/rate), Burst
// requests at once and then one more per Every. The buckets of at most
// MaxKeys keys are kept, least recently used forgotten first, so keys an
// outsider invents cannot grow memory; a forgotten key starts again with a
// full bucket.
//
// Time comes from an injected clock, so tests judge the limits on a clock
// that does not move.
package keyrate

import (
	"cmp"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"

	"connector/internal/clock"
)

// Config sets the allowance of every key.
type Config struct {
	// Burst requests may go at once; at least 1.
	Burst int
	// Every is the time that earns one more request; > 0.
	Every time.Duration
	// MaxKeys bounds the keys remembered; at least 1.
	MaxKeys int
	// Clock is the clock; nil is clock.System.
	Clock clock.Clock
}

// Limiter limits requests per key. It is safe for concurrent use.
type Limiter struct {
	cfg Config

	mu   sync.Mutex
	keys *simplelru.LRU[string, *rate.Limiter]
}

// New returns a Limiter; it panics on a Config outside its bounds (a
// programming error: the limits are constants of their users).
func New(cfg Config) *Limiter {
	if cfg.Burst < 1 || cfg.Every <= 0 || cfg.MaxKeys < 1 {
		panic("keyrate: Burst, Every and MaxKeys must be positive")
	}
	cfg.Clock = cmp.Or(cfg.Clock, clock.System)
	keys, _ := simplelru.NewLRU[string, *rate.Limiter](cfg.MaxKeys, nil) // size > 0: no error
	return &Limiter{cfg: cfg, keys: keys}
}

// Allow spends one request of key's allowance. When none is left it
// spends nothing and reports how long until one is.
func (l *Limiter) Allow(key string) (ok bool, retryAfter time.Duration) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketLocked(key)
	if b.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - b.TokensAt(now)
	return false, time.Duration(missing * float64(l.cfg.Every))
}

// Check reports, without spending any, whether key has a request of its
// allowance left, else how long until it has: for a caller that spends
// only on what succeeded (Spend).
func (l *Limiter) Check(key string) (ok bool, retryAfter time.Duration) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, found := l.keys.Get(key)
	if !found {
		return true, 0
	}
	if tokens := b.TokensAt(now); tokens < 1 {
		return false, time.Duration((1 - tokens) * float64(l.cfg.Every))
	}
	return true, 0
}

// Spend spends one request of key's allowance, into debt when none is
// left (requests checked at once and all succeeding): the debt is earned
// back, at one per Every, before Check allows the next.
func (l *Limiter) Spend(key string) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketLocked(key)
	b.ReserveN(now, 1) // n <= Burst: always granted, into debt when due
}

// bucketLocked is key's bucket, a full one for a key not seen (or
// forgotten); l.mu is held.
func (l *Limiter) bucketLocked(key string) *rate.Limiter {
	b, found := l.keys.Get(key)
	if !found {
		b = rate.NewLimiter(rate.Every(l.cfg.Every), l.cfg.Burst)
		l.keys.Add(key, b)
	}
	return b
}
