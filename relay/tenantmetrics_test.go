package relay_test

import (
	"sync"
	"testing"

	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
)

// queuedOf is a relay.TenantMetrics that counts each tenant's stored
// deliveries through the funcs QueuedOf resolved, and apart those reported
// by label values (Inbound "queued").
type queuedOf struct {
	relayMetricsNop
	mu       sync.Mutex
	resolved map[string]int // QueuedOf calls by platform/tenant
	queued   map[string]int // counted through them, by platform/tenant
	byName   int            // counted through Inbound
}

func (m *queuedOf) QueuedOf(platform, tenant string) func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resolved[platform+"/"+tenant]++
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.queued[platform+"/"+tenant]++
	}
}

func (m *queuedOf) Inbound(_, _, outcome string) {
	if outcome == "queued" {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.byName++
	}
}

// TestTenantMetricsCountEachTenantsStoredDeliveries: with a TenantMetrics,
// each tenant's hub resolves its queued series once per configured
// platform, and each delivery stored for a tenant is counted on its own
// tenant's and platform's series, none by label values.
func TestTenantMetricsCountEachTenantsStoredDeliveries(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1", "c2": "t2"})
	m := &queuedOf{resolved: make(map[string]int), queued: make(map[string]int)}
	relaytest.StartConfig(t, relay.Config{Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t), Metrics: m,
		Tenants: []relay.Tenant{
			{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
			{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
		}})
	p.deliver("t1", "c1", "u1", "a")
	p.deliver("t1", "c1", "u1", "b")
	p.deliver("t2", "c2", "u2", "c")

	m.mu.Lock()
	defer m.mu.Unlock()
	for key, want := range map[string]int{"discord/t1": 2, "discord/t2": 1} {
		if m.resolved[key] != 1 || m.queued[key] != want {
			t.Errorf("%s resolved %d times, counted %d; want once, %d", key, m.resolved[key], m.queued[key], want)
		}
	}
	if m.byName != 0 || len(m.queued) != 2 {
		t.Errorf("counted %v through the resolved series and %d by label values, want t1's and t2's only and none", m.queued, m.byName)
	}
}
