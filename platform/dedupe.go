package platform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connector/internal/clock"
	"connector/store"
)

// ErrBusy answers a copy of an event that another instance is handling
// (Dedupe.Begin): the caller answers so that the source tries again later
// (HTTP 503, a Socket Mode envelope left unacknowledged).
var ErrBusy = errors.New("platform: another instance is handling this event; try again later")

// dedupeStoreTimeout bounds a claim's release and its done marker, which
// do not end with the caller's context: a source that stopped waiting for
// the answer retries, and the retry must find the event done.
const dedupeStoreTimeout = 5 * time.Second

// probeUntil is the expiry of a probe: a claim that only tells whether a
// live claim holds its key, and takes nothing. It is long past on every
// instance's clock, so what a probe stores (the memory and embedded
// backends keep it until swept; redis stores nothing) is expired whatever
// the clocks' skew.
var probeUntil = time.Unix(1, 0)

// Dedupe lets one copy of an event through: a platform's retry (a lost or
// late answer, an instance killed after storing the event) and a second
// copy of the same event are dropped, whichever instance gets them, when
// Claims is the store's (ClaimsFor with several instances); with local
// claims, within one process.
//
// A key goes through two claims. Its pending claim is taken before the
// event is handled and lasts Pending; its done claim is set once the event
// is stored (or deliberately dropped) and lasts Window. A second copy that
// finds the key done is a duplicate; one that finds it pending while
// another instance handles it is busy (ErrBusy), answered so that the
// source tries again later: if the first copy fails, its pending claim is
// released, and the retry is handled. A crashed instance's pending claim
// holds the key for Pending at most.
type Dedupe struct {
	// Claims holds the markers.
	Claims store.Claims
	// Clock times them.
	Clock clock.Clock
	// Prefix begins every claim key ("slack/"), so that platforms sharing
	// one store keep apart.
	Prefix string
	// Pending is how long a pending claim lasts: longer than handling an
	// event takes.
	Pending time.Duration
	// Window is how long a done claim lasts: a copy later than that is
	// handled again.
	Window time.Duration
	// Log gets the markers that could not be stored or released.
	Log *slog.Logger
}

// Begin claims key for this copy until the returned expiry (zero when not
// taken): a duplicate (err nil: drop it, confirm it), and a key another
// instance handles (err ErrBusy), are not taken, and nothing is then to be
// finished or released.
func (d *Dedupe) Begin(ctx context.Context, key string) (pending time.Time, err error) {
	pending = d.Clock.Now().Add(d.Pending)
	took, err := d.Claims.Claim(ctx, d.Prefix+"pending/"+key, pending)
	if err != nil {
		return time.Time{}, fmt.Errorf("%sdedupe: %w", d.Prefix, err)
	}
	// A probe: whether a done claim holds the key.
	free, err := d.Claims.Claim(ctx, d.Prefix+"done/"+key, probeUntil)
	if took && (err != nil || !free) {
		d.Release(key, pending)
	}
	switch {
	case err != nil:
		return time.Time{}, fmt.Errorf("%sdedupe: %w", d.Prefix, err)
	case !free:
		return time.Time{}, nil
	case !took:
		return time.Time{}, ErrBusy
	}
	return pending, nil
}

// Once handles the first copy of key with handle. duplicate reports a copy
// already handled (dropped, err nil); a copy another instance is handling
// is ErrBusy. key is done once handle returns nil (the event stored or
// deliberately dropped), else released for a retry.
func (d *Dedupe) Once(ctx context.Context, key string, handle func() error) (duplicate bool, err error) {
	pending, err := d.Begin(ctx, key)
	if pending.IsZero() {
		return err == nil, err
	}
	if err := handle(); err != nil {
		d.Release(key, pending)
		return false, err
	}
	d.Finish(ctx, key)
	return false, nil
}

// Finish records a taken key as done: the event was stored or deliberately
// dropped. It does so even when ctx has ended.
func (d *Dedupe) Finish(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dedupeStoreTimeout)
	defer cancel()
	if err := d.Claims.Hold(ctx, d.Prefix+"done/"+key, d.Clock.Now().Add(d.Window)); err != nil {
		d.Log.Warn("dedupe marker not stored; a retry of this event may be delivered again", "err", err)
	}
}

// Release gives up key, taken until pending (Begin), the event not stored:
// a retry will be handled. A claim another instance took since this one
// lapsed (handling outlasted Pending) stays theirs.
func (d *Dedupe) Release(key string, pending time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), dedupeStoreTimeout)
	defer cancel()
	if err := d.Claims.Release(ctx, d.Prefix+"pending/"+key, pending); err != nil {
		d.Log.Warn("dedupe claim not released; a retry waits for it to expire", "err", err)
	}
}

// Check tells, without taking key, whether a copy of it was handled
// (duplicate, err nil) or is being handled (ErrBusy).
func (d *Dedupe) Check(ctx context.Context, key string) (duplicate bool, err error) {
	free, err := d.Claims.Claim(ctx, d.Prefix+"done/"+key, probeUntil)
	if err != nil {
		return false, fmt.Errorf("%sdedupe: %w", d.Prefix, err)
	}
	if !free {
		return true, nil
	}
	if free, err = d.Claims.Claim(ctx, d.Prefix+"pending/"+key, probeUntil); err != nil {
		return false, fmt.Errorf("%sdedupe: %w", d.Prefix, err)
	}
	if !free {
		return false, ErrBusy
	}
	return false, nil
}
