package slack

import (
	"context"
	"fmt"
	"time"
)

// This file keeps Slack's duplicates out: a retried delivery
// (X-Slack-Retry-Num, a Socket Mode redelivery), an event_id seen twice,
// and the message and app_mention events one mention produces (they share
// the message's team, channel and ts: the native dedupe key "<team>:<ts>"
// qualified by the channel, as a ts is unique in its channel only; for
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

// dedupe holds the markers (in the platform's claims).
type dedupe struct{ p *Platform }

// localClaims bounds the claims kept in process memory: past it the least
// recently used are forgotten, which may let a late duplicate through but
// never loses an event.
const localClaims = 500_000

// begin claims key for this copy. taken is false for a duplicate (err
// nil: drop it, confirm it) and while another instance handles the key
// (err errBusy); then nothing is to be finished or released.
func (d *dedupe) begin(ctx context.Context, key string) (taken bool, err error) {
	claims, now := d.p.claims, d.p.clock.Now()
	took, err := claims.Claim(ctx, "slack/pending/"+key, now.Add(pendingTTL))
	if err != nil {
		return false, fmt.Errorf("slack: dedupe: %w", err)
	}
	// Claiming until now takes nothing: it only tells whether a done
	// claim holds the key.
	free, err := claims.Claim(ctx, "slack/done/"+key, now)
	if took && (err != nil || !free) {
		d.release(key)
	}
	switch {
	case err != nil:
		return false, fmt.Errorf("slack: dedupe: %w", err)
	case !free:
		return false, nil
	case !took:
		return false, errBusy
	}
	return true, nil
}

// once handles the first copy of key with handle: a duplicate is dropped
// (nil), a copy another instance is handling is errBusy, and key is done
// once handle returns nil (the event stored or deliberately dropped), else
// released for a retry.
func (d *dedupe) once(ctx context.Context, key, eventID string, handle func() error) error {
	if taken, err := d.begin(ctx, key); !taken {
		if err == nil {
			d.p.drop(dropDuplicate, eventID)
		}
		return err
	}
	if err := handle(); err != nil {
		d.release(key)
		return err
	}
	d.finish(ctx, key)
	return nil
}

// finish records a taken key as done: the event was stored or
// deliberately dropped.
func (d *dedupe) finish(ctx context.Context, key string) {
	if err := d.p.claims.Hold(ctx, "slack/done/"+key, d.p.clock.Now().Add(d.p.cfg.DedupeWindow)); err != nil {
		d.p.log.Warn("slack dedupe marker not stored; a retry of this event may be delivered again", "err", err)
	}
}

// release gives a taken key up (the event was not stored): a retry will be
// handled.
func (d *dedupe) release(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := d.p.claims.Release(ctx, "slack/pending/"+key); err != nil {
		d.p.log.Warn("slack dedupe claim not released; a retry waits for it to expire", "err", err)
	}
}
