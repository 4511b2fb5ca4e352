// Package ttlcache is a bounded LRU whose entries expire on an injected
// clock (tests move it), checked when read: no goroutine of its own, unlike
// golang-lru's expirable.LRU. The platforms keep what they looked up lately
// in it (names, placements, declines) and, without a store, what they must
// remember for a while.
package ttlcache

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/internal/clock"
)

// Cache is a bounded LRU whose entries expire, each TTL after it was added
// unless added with its own expiry (AddUntil). Safe for concurrent use.
type Cache[K comparable, V any] struct {
	clock clock.Clock
	ttl   time.Duration

	mu  sync.Mutex
	lru *simplelru.LRU[K, entry[V]]
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// New returns a cache of at most size (> 0) entries, each living ttl, on
// clock c.
func New[K comparable, V any](size int, ttl time.Duration, c clock.Clock) *Cache[K, V] {
	l, err := simplelru.NewLRU[K, entry[V]](size, nil)
	if err != nil {
		panic("ttlcache: size must be positive")
	}
	return &Cache[K, V]{clock: c, ttl: ttl, lru: l}
}

// Get returns k's value when it has not expired.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(k)
	if ok && c.clock.Now().Before(e.expires) {
		return e.v, true
	}
	if ok {
		c.lru.Remove(k)
	}
	var zero V
	return zero, false
}

// Contains reports whether k is there and has not expired.
func (c *Cache[K, V]) Contains(k K) bool {
	_, ok := c.Get(k)
	return ok
}

// Add sets k to v for the cache's TTL from now.
func (c *Cache[K, V]) Add(k K, v V) { c.AddUntil(k, v, c.clock.Now().Add(c.ttl)) }

// AddUntil sets k to v until expires; an expiry not after now removes k.
func (c *Cache[K, V]) AddUntil(k K, v V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.clock.Now().Before(expires) {
		c.lru.Remove(k)
		return
	}
	c.lru.Add(k, entry[V]{v: v, expires: expires})
}

// AddIfAbsent sets k to v until expires unless k holds a value that has not
// expired, and reports whether it set it.
func (c *Cache[K, V]) AddIfAbsent(k K, v V, expires time.Time) bool {
	return c.AddUnless(k, v, expires, func(V) bool { return true })
}

// AddUnless sets k to v until expires unless k holds a value that has not
// expired and that keep reports is to be kept, and reports whether it set
// it.
func (c *Cache[K, V]) AddUnless(k K, v V, expires time.Time, keep func(V) bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if e, ok := c.lru.Peek(k); ok && now.Before(e.expires) && keep(e.v) {
		return false
	}
	if !now.Before(expires) {
		c.lru.Remove(k)
		return true
	}
	c.lru.Add(k, entry[V]{v: v, expires: expires})
	return true
}

// RemoveUntil forgets k unless it expires after expires.
func (c *Cache[K, V]) RemoveUntil(k K, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.lru.Peek(k); ok && !e.expires.After(expires) {
		c.lru.Remove(k)
	}
}

// Remove forgets k.
func (c *Cache[K, V]) Remove(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(k)
}
