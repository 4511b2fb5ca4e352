package platform

import (
	"context"
	"errors"
	"time"

	"connector/internal/clock"
	"connector/store"
)

// ErrClaimHeld is AwaitClaim's answer when another holder kept the claim
// until the wait ended: what it guards is under way elsewhere.
var ErrClaimHeld = errors.New("another copy of this action is in progress; retry")

// Claim is a key this instance holds in a store's claims until it expires
// (AwaitClaim); a nil Claim holds nothing.
type Claim struct {
	claims  store.Claims
	key     string
	expires time.Time
}

// Release gives c up within timeout, so a copy waiting for it goes on;
// one another holder took since c lapsed stays.
func (c *Claim) Release(timeout time.Duration) error {
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.claims.Release(ctx, c.key, c.expires)
}

// AwaitClaim takes key in claims until until() (asked at every try).
// While another holds it, it waits on clk, every poll, for settled to
// report the holder's work done (its record found: nil Claim and error),
// and takes the key once released or lapsed. With poll zero, or once ctx
// ends while it waits, it answers ErrClaimHeld; a store that does not
// answer, its error.
func AwaitClaim(ctx context.Context, claims store.Claims, clk clock.Clock, key string, until func() time.Time, poll time.Duration, settled func() bool) (*Claim, error) {
	for {
		expires := until()
		switch took, err := claims.Claim(ctx, key, expires); {
		case err != nil:
			return nil, err
		case took:
			return &Claim{claims, key, expires}, nil
		case poll == 0 || clk.Sleep(ctx, poll) != nil:
			return nil, ErrClaimHeld
		case settled():
			return nil, nil
		}
	}
}
