package platform

import (
	"context"
	"slices"
	"time"

	"connector/internal/clock"
	"connector/internal/ttlcache"
	"connector/store"
)

// LocalState keeps, in process memory, what a platform otherwise keeps
// in the store (Deps.Store): values with an expiry (store.Capabilities:
// Slack's thread markers and draft streams, Telegram's topic names) and
// claims (store.Claims: Slack's dedupe and slash replies), on the
// platform's clock. It is
// bounded: past size entries the least recently used are forgotten, which
// may let a late duplicate through or an old thread quiet, never loses an
// event.
type LocalState struct {
	c *ttlcache.Cache[string, []byte]
}

var (
	_ store.Capabilities = LocalState{}
	_ store.Claims       = LocalState{}
)

// StateOr is st's capabilities, else a local state of at most size
// entries.
func StateOr(st store.Store, size int, c clock.Clock) store.Capabilities {
	if st != nil {
		return st.Capabilities()
	}
	return NewLocalState(size, c)
}

// ClaimsFor is where a platform keeps its claims (one holder per key:
// Slack's event dedupe and slash replies, Discord's interaction ids): the
// store's when several instances share it (deps.Cluster), so one instance
// takes each key whichever gets it, else a local state of at most size
// entries.
func ClaimsFor(deps Deps, size int, c clock.Clock) store.Claims {
	if claims := deps.SharedClaims(); claims != nil {
		return claims
	}
	return NewLocalState(size, c)
}

// SharedClaims is the store's claims when several instances share it
// (d.Cluster), else nil: a platform that needs claims only across
// instances (Telegram's webhook dedupe) keeps none with one.
func (d Deps) SharedClaims() store.Claims {
	if d.Cluster != nil && d.Store != nil {
		return d.Store.Claims()
	}
	return nil
}

// NewLocalState returns a local state of at most size entries.
func NewLocalState(size int, c clock.Clock) LocalState {
	return LocalState{c: ttlcache.New[string, []byte](size, 0, c)}
}

// Put implements store.Capabilities.
func (s LocalState) Put(_ context.Context, key string, value []byte, expires time.Time) error {
	s.c.AddUntil(key, slices.Clone(value), expires)
	return nil
}

// PutUnlessLater implements store.Capabilities.
func (s LocalState) PutUnlessLater(ctx context.Context, key string, value []byte, gen int64, expires time.Time) (bool, error) {
	if gen <= 0 {
		return true, s.Put(ctx, key, value, expires)
	}
	return s.c.AddUnless(key, slices.Clone(value), expires, func(cur []byte) bool { return store.Later(cur, gen) }), nil
}

// Get implements store.Capabilities.
func (s LocalState) Get(_ context.Context, key string) ([]byte, bool, error) {
	v, ok := s.c.Get(key)
	return slices.Clone(v), ok, nil
}

// Delete implements store.Capabilities.
func (s LocalState) Delete(_ context.Context, key string) error {
	s.c.Remove(key)
	return nil
}

// Claim implements store.Claims.
func (s LocalState) Claim(_ context.Context, key string, expires time.Time) (bool, error) {
	return s.c.AddIfAbsent(key, nil, expires), nil
}

// Hold implements store.Claims.
func (s LocalState) Hold(_ context.Context, key string, expires time.Time) error {
	s.c.AddUntil(key, nil, expires)
	return nil
}

// Renew implements store.Claims: key's claim, unless it lasts past held,
// gives way to one until expires.
func (s LocalState) Renew(_ context.Context, key string, held, expires time.Time) (bool, error) {
	s.c.RemoveUntil(key, held)
	return s.c.AddIfAbsent(key, nil, expires), nil
}

// Release implements store.Claims.
func (s LocalState) Release(_ context.Context, key string, expires time.Time) error {
	s.c.RemoveUntil(key, expires)
	return nil
}
