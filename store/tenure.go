package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"connector/internal/clock"
)

// Tenure is one holder's hold on a lease, the one mechanism every lease
// holder of the connector keeps its leases with (RunExclusive, the relay's
// tenants). It renews the lease on its own timer, every RenewEvery of the
// TTL, not on a beat other work can delay; each renewal has its own
// deadline (the time to the next one), and only one is under way at a
// time. A renewal counts from when it was sent, never from when its reply
// came: the store's expiry starts no earlier, so a slow reply never makes
// the holder believe it holds the lease longer than the store does. And
// the holder's own view ends FenceMargin of the TTL before that (Held turns
// false, Done closes, the lost callback runs), so a holder that cannot
// renew in time stops acting as the owner before the store lets another
// holder take over.
type Tenure struct {
	clk    clock.Clock
	leases Leases
	name   string
	ttl    time.Duration
	lost   func()
	done   chan struct{}

	mu    sync.Mutex // guards what follows; a leaf
	lease Lease
	valid time.Time // the holder's view: the lease is its own until then
	renew clock.Timer
	fence clock.Timer
	ended bool
}

// RenewEvery is the part of the TTL between two renewals: three renewals
// may fail or be late before the lease expires in the store.
const RenewEvery = 4

// FenceMargin is the part of the TTL by which the holder's own view of its
// lease ends before the store's expiry.
const FenceMargin = 8

// Hold tries once to take the lease name for holder for ttl. When it is
// taken, the returned Tenure keeps it until Release or until a renewal
// fails to keep it: then lost runs (once, on the tenure's timer, so it must
// not wait) and Done closes. Otherwise t is nil and cur is the current
// lease, whose Expires is when to bid again (BidIn).
func Hold(ctx context.Context, clk clock.Clock, leases Leases, name, holder string, ttl time.Duration, lost func()) (t *Tenure, cur Lease, err error) {
	sent := clk.Now()
	l, acquired, err := leases.Acquire(ctx, name, holder, ttl)
	if err != nil || !acquired {
		return nil, l, err
	}
	t = &Tenure{clk: clk, leases: leases, name: name, ttl: ttl, lost: lost, done: make(chan struct{}), lease: l}
	if t.lost == nil {
		t.lost = func() {}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.valid = sent.Add(t.view())
	t.renew = clk.AfterFunc(ttl/RenewEvery, t.renewOnce)
	t.fence = clk.AfterFunc(t.valid.Sub(clk.Now()), t.check)
	return t, l, nil
}

// view is how long after a renewal is sent the holder counts the lease
// its own.
func (t *Tenure) view() time.Duration { return t.ttl - t.ttl/FenceMargin }

// BidIn is how long a holder waiting for the lease cur (as Hold or Holder
// returned it) waits before bidding again: until its known expiry, at
// least a millisecond and at most ttl.
func BidIn(clk clock.Clock, cur Lease, ttl time.Duration) time.Duration {
	return min(max(cur.Expires.Sub(clk.Now()), time.Millisecond), ttl)
}

// Held reports whether the holder may still act as the lease's owner: the
// tenure has not ended and its view has not expired.
func (t *Tenure) Held() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.ended && t.clk.Now().Before(t.valid)
}

// Done is closed once the tenure ended: lost or released.
func (t *Tenure) Done() <-chan struct{} { return t.done }

// Release ends the tenure and gives the lease up in the store, so another
// holder may take it at once.
func (t *Tenure) Release(ctx context.Context) error {
	t.mu.Lock()
	was := t.end()
	l := t.lease
	t.mu.Unlock()
	if !was {
		return ErrNotHeld
	}
	return t.leases.Release(ctx, t.name, l)
}

// end marks the tenure ended, under mu, reporting whether it was not yet.
func (t *Tenure) end() bool {
	if t.ended {
		return false
	}
	t.ended = true
	t.renew.Stop()
	t.fence.Stop()
	close(t.done)
	return true
}

// renewOnce renews the lease and arms the next renewal, a RenewEvery of
// the TTL after this one was sent.
func (t *Tenure) renewOnce() {
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return
	}
	l := t.lease
	t.mu.Unlock()
	every := t.ttl / RenewEvery
	sent := t.clk.Now()
	ctx, cancel := context.WithTimeout(context.Background(), every)
	nl, err := t.leases.Renew(ctx, t.name, l, t.ttl)
	cancel()
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return
	}
	switch {
	case err == nil:
		t.lease, t.valid = nl, sent.Add(t.view())
		t.fence.Reset(t.valid.Sub(t.clk.Now()))
	case errors.Is(err, ErrNotHeld):
		t.end()
		t.mu.Unlock()
		t.lost()
		return
	}
	t.renew.Reset(max(sent.Add(every).Sub(t.clk.Now()), 0))
	t.mu.Unlock()
}

// check ends the tenure once its view expired without a renewal.
func (t *Tenure) check() {
	t.mu.Lock()
	if t.ended || t.clk.Now().Before(t.valid) {
		t.mu.Unlock()
		return
	}
	t.end()
	t.mu.Unlock()
	t.lost()
}
