package main

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"connector/internal/clock"
	"connector/registry"
)

// TestRegistryPollAppliesOnlyAChange: the periodic look (applyChanged)
// re-applies nothing while the stored layer is unchanged, and applies a
// change another instance made whose notification never came.
func TestRegistryPollAppliesOnlyAChange(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	applied := func() float64 {
		var m dto.Metric
		if err := c.live.metrics.applies.WithLabelValues("ok").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := applied()
	c.live.applyChanged(ctx)
	c.live.applyChanged(ctx)
	if got := applied(); got != before {
		t.Fatalf("an unchanged registry was applied again: %v applies after the looks, %v before", got, before)
	}
	// Another instance adds a tenant; this one never hears of it.
	if err := registry.New(st, clock.System).CreateTenant(ctx, registry.Tenant{ID: "added"}); err != nil {
		t.Fatal(err)
	}
	c.live.applyChanged(ctx)
	if got := applied(); got != before+1 {
		t.Fatalf("a stored change was not applied by the look: %v applies, want %v", got, before+1)
	}
	if n := c.live.tenants.Load(); n != 2 {
		t.Fatalf("serving %d tenants after the look, want 2 (t1 and added)", n)
	}
	c.live.applyChanged(ctx)
	if got := applied(); got != before+1 {
		t.Fatalf("the change was applied twice: %v applies, want %v", got, before+1)
	}
}

// tenantKeeper records the tenant ids each apply gives it.
type tenantKeeper struct{ last []string }

func (k *tenantKeeper) SetTenants(ids []string) { k.last = slices.Sorted(slices.Values(ids)) }

// TestApplyTellsKeepersTheTenants: every apply gives the platforms that keep
// per-tenant state (platform.TenantKeeper: Discord's command manifests) the
// configured tenants, so a deleted tenant's state is forgotten.
func TestApplyTellsKeepersTheTenants(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	k := &tenantKeeper{}
	c.live.keepers = append(c.live.keepers, k)
	reg := registry.New(st, clock.System)
	if err := reg.CreateTenant(ctx, registry.Tenant{ID: "added"}); err != nil {
		t.Fatal(err)
	}
	if err := c.live.apply(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.last, []string{"added", "t1"}) {
		t.Fatalf("tenants given after a create = %v, want [added t1]", k.last)
	}
	if err := reg.DeleteTenant(ctx, "added"); err != nil {
		t.Fatal(err)
	}
	if err := c.live.apply(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.last, []string{"t1"}) {
		t.Fatalf("tenants given after a delete = %v, want [t1]", k.last)
	}
}
