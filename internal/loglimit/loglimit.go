// Package loglimit bounds the log lines that outside input can cause.
//
// A Bucket is a token bucket of log lines for one source (a gateway
// connection, a tenant): it lets the first Rate.Burst lines through, then
// one more per Rate.Every, and counts the lines it holds back. The next line
// it lets through carries that count as attribute "suppressed", so the log
// says how much it left out; exact counts of the events themselves belong in
// metrics. A Limiter keeps a Bucket per key (a remote address), for a
// bounded number of keys, and one shared by all keys, so neither one source
// nor many together can flood the log.
//
// Time comes from an injected clock (a func returning now), so tests judge
// the bounds on a clock that does not move.
package loglimit

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/time/rate"

	"connector/internal/clock"
	"connector/internal/netsource"
)

// Rate is an allowance of log lines: Burst at once, then one more per
// Every, never more than Burst saved up.
type Rate struct {
	Burst int
	Every time.Duration
}

// SuppressedKey is the attribute that carries, on a line let through, how
// many lines were held back since the previous one.
const SuppressedKey = "suppressed"

// bucket is one token bucket (golang.org/x/time/rate's) and the lines it
// held back since the last one it let through.
type bucket struct {
	lim        *rate.Limiter
	suppressed int
}

func newBucket(r Rate) bucket { return bucket{lim: rate.NewLimiter(rate.Every(r.Every), r.Burst)} }

// take spends a token if there is one at now: ok, with the lines
// suppressed before this one (the count restarts); otherwise the line is
// counted as suppressed.
func (b *bucket) take(now time.Time) (ok bool, suppressed int) {
	if !b.lim.AllowN(now, 1) {
		b.suppressed++
		return false, 0
	}
	suppressed, b.suppressed = b.suppressed, 0
	return true, suppressed
}

// Bucket limits the log lines of one source. It is safe for concurrent
// use.
type Bucket struct {
	clock clock.Clock

	mu sync.Mutex
	b  bucket
}

// NewBucket returns a full Bucket of rate r on the clock now.
func NewBucket(r Rate, c clock.Clock) *Bucket {
	return &Bucket{clock: c, b: newBucket(r)}
}

// Log writes msg with args at level to log when log is enabled for level
// and a token is left, adding SuppressedKey when lines were held back
// before it. A line log would not write takes no token and is not counted.
func (b *Bucket) Log(log *slog.Logger, level slog.Level, msg string, args ...any) {
	if !log.Enabled(context.Background(), level) {
		return
	}
	b.mu.Lock()
	ok, suppressed := b.b.take(b.clock.Now())
	b.mu.Unlock()
	if ok {
		write(log, level, suppressed, msg, args)
	}
}

// TakeSuppressed returns the lines held back since the last one let
// through and restarts the count, for a closing summary of the source.
func (b *Bucket) TakeSuppressed() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.b.suppressed
	b.b.suppressed = 0
	return n
}

// write logs one line let through.
func write(log *slog.Logger, level slog.Level, suppressed int, msg string, args []any) {
	if suppressed > 0 {
		args = append(args[:len(args):len(args)], SuppressedKey, suppressed)
	}
	log.Log(context.Background(), level, msg, args...)
}

// Limiter limits log lines per key and over all keys together. It keeps
// the buckets of the maxKeys keys used most recently; a key seen again
// after being forgotten starts with a full bucket, and the count of lines
// it had held back is lost from the log (but not from metrics). It is safe
// for concurrent use.
type Limiter struct {
	perKey Rate
	clock  clock.Clock

	mu   sync.Mutex
	all  bucket
	keys *simplelru.LRU[string, *bucket]
}

// NewLimiter returns a Limiter allowing perKey to each key and overall to
// all keys together, remembering at most maxKeys keys, on the clock now.
func NewLimiter(perKey, overall Rate, maxKeys int, c clock.Clock) *Limiter {
	keys, err := simplelru.NewLRU[string, *bucket](max(maxKeys, 1), nil)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &Limiter{perKey: perKey, clock: c, all: newBucket(overall), keys: keys}
}

// Log is Bucket.Log for the bucket of key: the line needs a token of
// key's bucket and of the shared one, and counts as suppressed for key when
// either has none.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	if !log.Enabled(context.Background(), level) {
		return
	}
	l.mu.Lock()
	now := l.clock.Now()
	kb, found := l.keys.Get(key)
	if !found {
		b := newBucket(l.perKey)
		kb = &b
		l.keys.Add(key, kb)
	}
	ok, suppressed := false, 0
	if kb.lim.TokensAt(now) >= 1 && l.all.lim.AllowN(now, 1) {
		ok, suppressed = kb.take(now)
	} else {
		kb.suppressed++
	}
	l.mu.Unlock()
	if ok {
		write(log, level, suppressed, msg, args)
	}
}

// NewSources returns the Limiter of the lines that requests refused before
// they authenticate cause (a bad bearer on an HTTP route, a refused
// upgrade), keyed by the remote source (LogFrom): 10 lines per 10 s a
// source, 100 per 100 ms in all, 4,096 sources remembered.
func NewSources(c clock.Clock) *Limiter {
	return NewLimiter(Rate{Burst: 10, Every: 10 * time.Second}, Rate{Burst: 100, Every: 100 * time.Millisecond}, 4096, c)
}

// LogFrom is Log keyed by the source of remote (host:port, an
// http.Request's RemoteAddr; netsource.Of), so one host's ports and IPv6
// addresses share its allowance.
func (l *Limiter) LogFrom(log *slog.Logger, level slog.Level, remote, msg string, args ...any) {
	l.Log(log, level, netsource.Of(remote), msg, args...)
}
