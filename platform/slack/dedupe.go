package slack

import (
	"context"
	"sync"
	"time"

	"connector/store"
)

// This file keeps Slack's duplicates out: a retried delivery
// (X-Slack-Retry-Num, a Socket Mode redelivery), an event_id seen twice,
// and the message and app_mention events one mention produces (they share
// the message's team and ts: the native dedupe key "<team>:<ts>", for
// DedupeWindow). With several instances the markers are the store's
// Claims, so a duplicate is dropped whichever instance gets it; with one,
// they are in memory.
//
// A key goes through two claims. Its pending claim is taken before the
// event is handled and lasts pendingTTL; its done claim is set once the
// event is stored (or deliberately dropped) and lasts DedupeWindow. A
// second copy that finds the key done is a duplicate; one that finds it
// pending while another instance handles it is busy, answered so that
// Slack tries again later (HTTP 503, a Socket Mode envelope left
// unacknowledged): if the first copy fails, its pending claim is
// released, and the retry is handled.

// pendingTTL bounds how long a crashed instance's pending claim holds a
// key.
const pendingTTL = 30 * time.Second

// claimOutcome is what begin found.
type claimOutcome int

const (
	claimTaken claimOutcome = iota // handle the event, then finish
	claimDone                      // a duplicate: drop it, confirm it
	claimBusy                      // another instance is handling it
)

// dedupe holds the markers.
type dedupe struct {
	p      *Platform
	claims store.Claims
}

func newDedupe(p *Platform) *dedupe {
	d := &dedupe{p: p}
	if p.deps.Cluster != nil && p.deps.Store != nil {
		d.claims = p.deps.Store.Claims()
	} else {
		d.claims = newMemClaims(p.now)
	}
	return d
}

// begin claims key for this copy.
func (d *dedupe) begin(ctx context.Context, key string) (claimOutcome, error) {
	now := d.p.now()
	took, err := d.claims.Claim(ctx, "slack/pending/"+key, now.Add(pendingTTL))
	if err != nil {
		return claimBusy, err
	}
	// Claiming until now takes nothing: it only tells whether a done
	// claim holds the key.
	free, err := d.claims.Claim(ctx, "slack/done/"+key, now)
	switch {
	case err != nil:
		if took {
			d.release(key)
		}
		return claimBusy, err
	case !free:
		if took {
			d.release(key)
		}
		return claimDone, nil
	case !took:
		return claimBusy, nil
	}
	return claimTaken, nil
}

// finish records a taken key as done: the event was stored or
// deliberately dropped.
func (d *dedupe) finish(ctx context.Context, key string) {
	if err := d.claims.Hold(ctx, "slack/done/"+key, d.p.now().Add(d.p.cfg.DedupeWindow)); err != nil {
		d.p.log.Warn("slack dedupe marker not stored; a retry of this event may be delivered again", "err", err)
	}
}

// release gives a taken key up (the event was not stored): a retry will be
// handled.
func (d *dedupe) release(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := d.claims.Release(ctx, "slack/pending/"+key); err != nil {
		d.p.log.Warn("slack dedupe claim not released; a retry waits for it to expire", "err", err)
	}
}

// memClaimsMax bounds the claims kept in memory: past it (after a sweep),
// arbitrary ones are forgotten, which may let a late duplicate through
// but never loses an event.
const memClaimsMax = 500_000

// memClaims are claims in process memory: a map swept of expired ones
// whenever it has doubled since the last sweep.
type memClaims struct {
	now func() time.Time

	mu    sync.Mutex
	until map[string]time.Time
	swept int
}

func newMemClaims(now func() time.Time) *memClaims {
	return &memClaims{now: now, until: map[string]time.Time{}, swept: 1024}
}

// Claim implements store.Claims.
func (m *memClaims) Claim(_ context.Context, key string, expires time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if u, ok := m.until[key]; ok && now.Before(u) {
		return false, nil
	}
	m.set(key, expires, now)
	return true, nil
}

// Hold implements store.Claims.
func (m *memClaims) Hold(_ context.Context, key string, expires time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set(key, expires, m.now())
	return nil
}

// Release implements store.Claims.
func (m *memClaims) Release(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.until, key)
	return nil
}

// set stores a claim, sweeping the expired ones when the map has doubled.
// Called with mu held.
func (m *memClaims) set(key string, expires, now time.Time) {
	if !now.Before(expires) {
		delete(m.until, key)
		return
	}
	m.until[key] = expires
	if len(m.until) >= 2*m.swept {
		for k, u := range m.until {
			if !now.Before(u) {
				delete(m.until, k)
			}
		}
		for k := range m.until {
			if len(m.until) <= memClaimsMax {
				break
			}
			delete(m.until, k)
		}
		m.swept = max(len(m.until), 1024)
	}
}
