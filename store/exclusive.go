package store

import (
	"context"
	"errors"
	"time"

	"connector/internal/clock"
)

// RunExclusive runs run while holder holds the lease name, so that among
// the instances sharing leases it runs on one at a time (a Discord Gateway
// session, a Telegram long poll). It waits for the lease, trying every
// third of ttl; renews it as often; cancels run's context once a renewal
// fails with ErrNotHeld or the lease's expiry passes without one; and then
// waits for the lease again. It returns when ctx ends, or with run's error
// when run fails on its own. After the holder dies another holder takes the
// lease within ttl plus a third of it. clk times the tries and renewals and
// judges expiry; it should be the clock leases' store reads.
func RunExclusive(ctx context.Context, clk clock.Clock, leases Leases, name, holder string, ttl time.Duration, run func(context.Context) error) error {
	every := ttl / 3
	for {
		l, ok, err := leases.Acquire(ctx, name, holder, ttl)
		if err == nil && ok {
			err := runHeld(ctx, clk, leases, name, l, ttl, run)
			_ = leases.Release(context.WithoutCancel(ctx), name, l)
			if err != nil {
				return err
			}
		}
		if clk.Sleep(ctx, every) != nil {
			return nil
		}
	}
}

// runHeld runs run under the held lease l, renewing it every third of ttl
// until run ends. It returns run's error, nil once run ended because ctx
// did or the lease was lost.
func runHeld(ctx context.Context, clk clock.Clock, leases Leases, name string, l Lease, ttl time.Duration, run func(context.Context) error) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var runErr error
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if err := run(rctx); rctx.Err() == nil {
			runErr = err // run ended on its own
		}
		cancel() // ends the renewals
	}()
	for clk.Sleep(rctx, ttl/3) == nil {
		nl, err := leases.Renew(ctx, name, l, ttl)
		switch {
		case err == nil:
			l = nl
		case errors.Is(err, ErrNotHeld) || !clk.Now().Before(l.Expires):
			cancel()
		}
	}
	<-ended
	return runErr
}
