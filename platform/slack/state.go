package slack

import (
	"context"
	"slices"
	"time"

	"connector/internal/clock"
	"connector/internal/ttlcache"
	"connector/store"
)

// localState keeps, in process memory, what the platform otherwise keeps
// in the store (platform.Deps.Store): values with an expiry
// (store.Capabilities: thread markers, draft streams) and claims
// (store.Claims: dedupe, slash replies), on the platform's clock. It is
// bounded: past size entries the least recently used are forgotten, which
// may let a late duplicate through or an old thread quiet, never loses an
// event.
type localState struct {
	c *ttlcache.Cache[string, []byte]
}

var (
	_ store.Capabilities = localState{}
	_ store.Claims       = localState{}
)

// stateOr is st's capabilities, else a local state of at most size
// entries.
func stateOr(st store.Store, size int, c clock.Clock) store.Capabilities {
	if st != nil {
		return st.Capabilities()
	}
	return newLocalState(size, c)
}

// newLocalState returns a local state of at most size entries.
func newLocalState(size int, c clock.Clock) localState {
	return localState{c: ttlcache.New[string, []byte](size, 0, c)}
}

// Put implements store.Capabilities.
func (s localState) Put(_ context.Context, key string, value []byte, expires time.Time) error {
	s.c.AddUntil(key, slices.Clone(value), expires)
	return nil
}

// Get implements store.Capabilities.
func (s localState) Get(_ context.Context, key string) ([]byte, bool, error) {
	v, ok := s.c.Get(key)
	return slices.Clone(v), ok, nil
}

// Delete implements store.Capabilities.
func (s localState) Delete(_ context.Context, key string) error {
	s.c.Remove(key)
	return nil
}

// Claim implements store.Claims.
func (s localState) Claim(_ context.Context, key string, expires time.Time) (bool, error) {
	return s.c.AddIfAbsent(key, nil, expires), nil
}

// Hold implements store.Claims.
func (s localState) Hold(_ context.Context, key string, expires time.Time) error {
	s.c.AddUntil(key, nil, expires)
	return nil
}

// Release implements store.Claims.
func (s localState) Release(_ context.Context, key string) error {
	s.c.Remove(key)
	return nil
}
