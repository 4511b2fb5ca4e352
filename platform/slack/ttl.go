package slack

import (
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// ttlCache is a bounded LRU whose entries expire after ttl on the
// platform's clock (tests move it), checked when read: no goroutine of its
// own, unlike expirable.LRU.
type ttlCache[K comparable, V any] struct {
	now func() time.Time
	ttl time.Duration

	mu  sync.Mutex
	lru *simplelru.LRU[K, ttlEntry[V]]
}

type ttlEntry[V any] struct {
	v       V
	expires time.Time
}

func newTTLCache[K comparable, V any](size int, ttl time.Duration, now func() time.Time) *ttlCache[K, V] {
	l, _ := simplelru.NewLRU[K, ttlEntry[V]](size, nil) // size > 0: cannot fail
	return &ttlCache[K, V]{now: now, ttl: ttl, lru: l}
}

// Get returns k's value when it has not expired.
func (c *ttlCache[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(k)
	if ok && c.now().Before(e.expires) {
		return e.v, true
	}
	if ok {
		c.lru.Remove(k)
	}
	var zero V
	return zero, false
}

// Contains reports whether k is there and has not expired.
func (c *ttlCache[K, V]) Contains(k K) bool {
	_, ok := c.Get(k)
	return ok
}

// Add sets k to v for ttl from now.
func (c *ttlCache[K, V]) Add(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Add(k, ttlEntry[V]{v: v, expires: c.now().Add(c.ttl)})
}

// Remove forgets k.
func (c *ttlCache[K, V]) Remove(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(k)
}
