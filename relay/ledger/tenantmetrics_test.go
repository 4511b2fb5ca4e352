package ledger

import (
	"context"
	"sync"
	"testing"
)

// tenantMetrics is a fakeMetrics that resolves each tenant's Buffered
// series once (TenantMetrics), and records what each tenant's reported.
type tenantMetrics struct {
	*fakeMetrics
	mu       sync.Mutex
	resolved map[string]int // BufferedOf calls by tenant
	buffered map[string]int // the last count reported through them
}

func (m *tenantMetrics) BufferedOf(tenant string) func(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resolved[tenant]++
	return func(n int) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.buffered[tenant] = n
	}
}

func (m *tenantMetrics) of(tenant string) (resolved, buffered int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.resolved[tenant], m.buffered[tenant]
}

// TestTenantMetricsResolvedOncePerLedger: with a TenantMetrics, each
// tenant's ledger resolves its Buffered series once and reports every
// count to it, its own tenant's; Metrics.Buffered is not called.
func TestTenantMetricsResolvedOncePerLedger(t *testing.T) {
	tm := &tenantMetrics{fakeMetrics: &fakeMetrics{outcomes: make(map[string]int), buffered: -1},
		resolved: make(map[string]int), buffered: make(map[string]int)}
	r := newRig(t, func(c *Config) { c.Metrics = tm })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	first := r.add(t, "s1", "m1")
	r.add(t, "s2", "m2")
	if resolved, n := tm.of("t1"); resolved != 1 || n != 2 {
		t.Fatalf("t1 resolved %d times, reported %d buffered; want once, 2", resolved, n)
	}
	if !r.Ack([]byte(first)) {
		t.Fatalf("the ack of %s found nothing", first)
	}
	if _, n := tm.of("t1"); n != 1 {
		t.Fatalf("t1 reported %d buffered after an ack, want 1", n)
	}

	// Another tenant's ledger reports to its own series.
	if _, err := r.pool.Ledger("t2").Append(context.Background(), Delivery{Platform: "discord", Payload: []byte("m3")}); err != nil {
		t.Fatal(err)
	}
	if resolved, n := tm.of("t2"); resolved != 1 || n != 1 {
		t.Fatalf("t2 resolved %d times, reported %d buffered; want once, 1", resolved, n)
	}
	if _, n := tm.of("t1"); n != 1 {
		t.Fatalf("t1 reported %d buffered after t2's append, want still 1", n)
	}
	if tm.fakeMetrics.buffered != -1 {
		t.Fatalf("Metrics.Buffered was called (%d) with a TenantMetrics", tm.fakeMetrics.buffered)
	}
}
