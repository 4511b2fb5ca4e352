package change

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
)

// TestTenantAllowanceSpansItsGateways: a tenant's gateways share
// TenantBurst changes, then one per TenantEvery, each gateway within its
// own allowance; another tenant's are not charged. Before, each gateway
// had its own allowance alone: a tenant with 100 gateways had 100 times
// one gateway's.
func TestTenantAllowanceSpansItsGateways(t *testing.T) {
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	l := NewLimiter(c)
	for i := range TenantBurst {
		gw := "gw-" + strconv.Itoa(i/(GatewayBurst/2)) // half a gateway's burst each
		if err := l.Check("a", gw); err != nil {
			t.Fatalf("change %d of tenant a (by %s): %v, want allowed", i+1, gw, err)
		}
		l.Spend("a", gw)
	}
	var r *Refusal
	if err := l.Check("a", "gw-fresh"); !errors.As(err, &r) || r.RetryAfter != time.Second {
		t.Fatalf("change %d of tenant a, by a gateway that spent nothing: %v, want a 429 retried after 1s", TenantBurst+1, err)
	}
	if err := l.Check("b", "gw-fresh"); err != nil {
		t.Fatalf("tenant b's first change: %v, want allowed", err)
	}
	c.Advance(TenantEvery)
	if err := l.Check("a", "gw-fresh"); err != nil {
		t.Fatalf("tenant a's change a TenantEvery later: %v, want allowed", err)
	}
}

// TestOneGatewayDoesNotLockOutItsTenant: requests of one gateway checked
// at once (each waits for its tenant's turn in the registry before it
// spends) put that gateway in debt, not its tenant: its tenant's other
// gateways have a change again a TenantEvery after the allowance ran out.
// Before, the tenant's allowance went as far into debt as the gateway had
// requests in flight: 2,000 locked every gateway of the tenant out for
// 100 s.
func TestOneGatewayDoesNotLockOutItsTenant(t *testing.T) {
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	l := NewLimiter(c)
	const inFlight = 2 * TenantBurst
	for i := range inFlight {
		if err := l.Check("a", "gw-busy"); err != nil {
			t.Fatalf("request %d in flight: %v, want allowed (none spent yet)", i+1, err)
		}
	}
	for range inFlight {
		l.Spend("a", "gw-busy")
	}
	c.Advance(TenantEvery)
	if err := l.Check("a", "gw-other"); err != nil {
		t.Fatalf("another gateway of the tenant a TenantEvery later: %v, want allowed", err)
	}
	if err := l.Check("a", "gw-busy"); err == nil {
		t.Fatal("the gateway that spent 2,000 at once: allowed, want a 429 (its own debt)")
	}
}
