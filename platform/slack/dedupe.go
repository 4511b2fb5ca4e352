package slack

import (
	"context"
	"time"

	"connector/internal/clock"
	"connector/platform"
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

func newDedupe(p *Platform) *dedupe { return &dedupe{p: p, claims: p.claims} }

// localClaims bounds the claims kept in process memory: past it the least
// recently used are forgotten, which may let a late duplicate through but
// never loses an event.
const localClaims = 500_000

// newClaims is where the platform's claims are kept: the store's with
// several instances (so one instance takes each), else process memory.
func newClaims(deps platform.Deps, c clock.Clock) store.Claims {
	if deps.Cluster != nil && deps.Store != nil {
		return deps.Store.Claims()
	}
	return newLocalState(localClaims, c)
}

// begin claims key for this copy.
func (d *dedupe) begin(ctx context.Context, key string) (claimOutcome, error) {
	now := d.p.clock.Now()
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
	if err := d.claims.Hold(ctx, "slack/done/"+key, d.p.clock.Now().Add(d.p.cfg.DedupeWindow)); err != nil {
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
