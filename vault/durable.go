package vault

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"connector/store"
)

// Durable is a Store on a store.Capabilities: a capability survives
// restarts and is shared by every connector instance on the same store, for
// its kind's TTL. A bounded Memory in front answers lookups of values this
// process already holds of the kinds no instance replaces or deletes
// while they live (remembered).
//
// The stored value holds the secret in clear: the store's data (the
// embedded data directory, the Redis server) must be protected like the
// bot's own credentials (docs/durability.md).
type Durable struct {
	mem  *Memory // its clock is the store's
	caps store.Capabilities

	hits, misses, expiries, storeErrors atomic.Uint64
}

var _ Store = (*Durable)(nil)

// storeTimeout bounds each call to the backing store, within the caller's
// deadline.
const storeTimeout = 5 * time.Second

// NewDurable returns a vault on caps, with a Memory configured by cfg in
// front. cfg.Clock must be the store's clock: expiry is judged by both.
func NewDurable(caps store.Capabilities, cfg Config) *Durable {
	return &Durable{mem: NewMemory(cfg), caps: caps}
}

// storedEntry is an Entry as the store keeps it.
type storedEntry struct {
	Value   string `json:"v"`
	Ref     string `json:"ref,omitempty"`
	Stored  int64  `json:"stored"`      // Unix microseconds
	Created int64  `json:"c,omitempty"` // Unix microseconds (Entry.Created)
}

// storeKey is k's key in the store: the kind, then the tenant with its
// length, then the session key, so no two keys collide.
func storeKey(k Key) string {
	return "vault/" + string(k.Kind) + "/" + strconv.Itoa(len(k.Tenant)) + ":" + k.Tenant + "/" + k.SessionKey
}

// Put implements Store: the value is stored durably before Put returns,
// unless the store holds one of a later creation of k's tenant (an
// instance that still knew the earlier one, made again under its id
// meanwhile, does not replace the new tenant's entry, nor keeps its own
// in memory: it reads the store's).
func (d *Durable) Put(ctx context.Context, k Key, e Entry) error {
	if err := k.check(); err != nil {
		return err
	}
	ttl, _ := k.Kind.TTL()
	if e.Stored.IsZero() {
		e.Stored = d.mem.clock.Now()
	}
	if e.Created.IsZero() {
		e.Created = d.Since(k.Tenant)
	}
	se := storedEntry{Value: e.Value.Reveal(), Ref: e.Ref, Stored: e.Stored.UnixMicro()}
	if !e.Created.IsZero() {
		se.Created = e.Created.UnixMicro()
	}
	value, _ := json.Marshal(se) // plain fields: cannot fail
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	stored, err := d.caps.PutUnlessLater(ctx, storeKey(k), value, se.Created, e.Stored.Add(ttl))
	if err != nil {
		d.storeErrors.Add(1)
		return fmt.Errorf("vault: store capability %q: %w", k.Kind, err)
	}
	if !stored {
		d.mem.Delete(ctx, k)
		return nil
	}
	return d.mem.Put(ctx, k, e)
}

// Get implements Store. A value this process does not hold live is looked
// up in the store (written before a restart, or by another instance); a
// store failure counts as a miss (Stats.StoreErrors; Lookup tells it).
func (d *Durable) Get(ctx context.Context, k Key) (Entry, bool) {
	e, ok, _ := d.lookup(ctx, k)
	return e, ok
}

// Lookup is s.Get telling a miss from a store that did not answer (err,
// when s is a Durable holding no live value of k): a caller that would
// decline on a miss can answer unavailable instead.
func Lookup(ctx context.Context, s Store, k Key) (Entry, bool, error) {
	if d, ok := s.(*Durable); ok {
		return d.lookup(ctx, k)
	}
	e, ok := s.Get(ctx, k)
	return e, ok, nil
}

// lookup is Get with the store's failure.
func (d *Durable) lookup(ctx context.Context, k Key) (Entry, bool, error) {
	ttl, ok := k.Kind.TTL()
	if !ok || k.Tenant == "" {
		d.misses.Add(1)
		return Entry{}, false, nil
	}
	// A value expired here is looked up in the store too: another
	// instance may have renewed it (a chat grant).
	held, state := d.mem.lookup(k)
	if state == found && remembered[k.Kind] {
		d.hits.Add(1)
		return held, true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	raw, ok, err := d.caps.Get(ctx, storeKey(k))
	if err != nil {
		d.storeErrors.Add(1)
		if state == found { // the store did not answer: what this process holds
			d.hits.Add(1)
			return held, true, nil
		}
		d.misses.Add(1)
		return Entry{}, false, fmt.Errorf("vault: look up capability %q: %w", k.Kind, err)
	}
	var se storedEntry
	if !ok || json.Unmarshal(raw, &se) != nil {
		if state == found { // gone from the store: not to be answered when it fails
			d.mem.Delete(ctx, k)
		}
		d.misses.Add(1)
		return Entry{}, false, nil
	}
	e := Entry{Value: NewSecret(se.Value), Ref: se.Ref, Stored: time.UnixMicro(se.Stored)}
	if se.Created != 0 {
		e.Created = time.UnixMicro(se.Created)
	}
	if e.expiredAt(d.mem.clock.Now(), ttl) || d.mem.predates(k, e) {
		d.expiries.Add(1)
		d.misses.Add(1)
		return Entry{}, false, nil
	}
	_ = d.mem.Put(ctx, k, e) // k was checked above: cannot fail
	d.hits.Add(1)
	return e, true, nil
}

// Delete implements Store.
func (d *Durable) Delete(ctx context.Context, k Key) {
	d.mem.Delete(ctx, k)
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if err := d.caps.Delete(ctx, storeKey(k)); err != nil {
		d.storeErrors.Add(1)
	}
}

// Since is when tenant began (Memory.Since).
func (d *Durable) Since(tenant string) time.Time { return d.mem.Since(tenant) }

// Known reports whether the registry holds tenant (Memory.Known).
func (d *Durable) Known(tenant string) bool { return d.mem.Known(tenant) }

// Stats implements Store. Size and Evicted are those of the in-memory
// front.
func (d *Durable) Stats() Stats {
	m := d.mem.Stats()
	return Stats{
		Size: m.Size, Hits: d.hits.Load(), Misses: d.misses.Load(),
		Expiries: d.expiries.Load(), Evicted: m.Evicted, StoreErrors: d.storeErrors.Load(),
	}
}
