package store

import (
	"context"
	"time"

	"connector/internal/clock"
)

// RunExclusive runs run while holder holds the lease name, so that among
// the instances sharing leases it runs on one at a time (a Discord Gateway
// session, a Telegram long poll, a nexscope room). It bids for the lease
// and, when another holder has it, bids again at its known expiry (BidIn)
// or a RenewEvery of ttl later, whichever comes first (so a release is
// seen then); holds it with a Tenure, renewed every RenewEvery of ttl on
// its own timer; cancels run's context, on the tenure's timer, once the
// tenure ends (a renewal found the lease taken, or the holder's view of it
// expired without one, before the store's expiry); and then waits for the
// lease again. It returns when ctx ends, or with run's error when run fails
// on its own. After the holder dies another holder takes the lease at its
// expiry, ttl after its last renewal, plus the time of a store call. clk
// times the bids and renewals and judges expiry; it should be the clock
// leases' store reads. Held tells run, at any moment, whether it still
// holds the lease.
func RunExclusive(ctx context.Context, clk clock.Clock, leases Leases, name, holder string, ttl time.Duration, run func(context.Context) error) error {
	retry := ttl / RenewEvery
	for {
		wait := retry
		rctx, cancel := context.WithCancel(ctx)
		t, cur, err := Hold(ctx, clk, leases, name, holder, ttl, cancel)
		switch {
		case err == nil && t != nil:
			err := run(context.WithValue(rctx, tenureKey{}, t))
			ended := rctx.Err() != nil
			cancel()
			// Bounded by the TTL, when the lease expires anyway.
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
			_ = t.Release(rctx)
			rcancel()
			if err != nil && !ended {
				return err // run failed on its own
			}
		case err == nil:
			wait = min(BidIn(clk, cur, ttl), retry)
		}
		cancel()
		if clk.Sleep(ctx, wait) != nil {
			return nil
		}
	}
}

// tenureKey is the context key of the Tenure RunExclusive runs run under.
type tenureKey struct{}

// Held reports whether ctx, the context RunExclusive gave its run, still
// holds the lease: ctx has not ended and the tenure's view has not expired
// (Tenure.Held). A holder that wakes from a pause past its lease learns it
// here at once, before the tenure's timer ends ctx. Any other context
// holds while it has not ended.
func Held(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	t, ok := ctx.Value(tenureKey{}).(*Tenure)
	return !ok || t.Held()
}
