package store

import (
	"context"
	"errors"
	"time"
)

// RunExclusive runs run while holder holds the lease name, so that among
// the instances sharing leases it runs on one at a time (a Discord Gateway
// session, a Telegram long poll). It waits for the lease, trying every
// third of ttl; renews it as often; cancels run's context once a renewal
// fails with ErrNotHeld or the lease's expiry passes without one; and then
// waits for the lease again. It returns when ctx ends, or with run's error
// when run fails on its own. After the holder dies another holder takes the
// lease within ttl plus a third of it.
func RunExclusive(ctx context.Context, leases Leases, name, holder string, ttl time.Duration, run func(context.Context) error) error {
	every := ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		l, ok, err := leases.Acquire(ctx, name, holder, ttl)
		if err == nil && ok {
			if err := runHeld(ctx, leases, name, l, ttl, t.C, run); err != nil {
				_ = leases.Release(context.WithoutCancel(ctx), name, l)
				return err
			}
			_ = leases.Release(context.WithoutCancel(ctx), name, l)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// runHeld runs run under the held lease l, renewing it on every tick. It
// returns run's error, nil once run ended because ctx did or the lease was
// lost.
func runHeld(ctx context.Context, leases Leases, name string, l Lease, ttl time.Duration, tick <-chan time.Time, run func(context.Context) error) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(rctx) }()
	for {
		select {
		case err := <-done:
			if rctx.Err() != nil {
				return nil
			}
			return err
		case <-tick:
			nl, err := leases.Renew(ctx, name, l, ttl)
			switch {
			case err == nil:
				l = nl
			case errors.Is(err, ErrNotHeld) || !time.Now().Before(l.Expires):
				cancel()
			}
		}
	}
}
