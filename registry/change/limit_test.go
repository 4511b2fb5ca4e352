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
