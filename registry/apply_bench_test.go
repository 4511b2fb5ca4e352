package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"connector/internal/clock"
	"connector/internal/redistest"
	"connector/registry"
	"connector/store"
)

// BenchmarkEffective measures what every registry change costs each
// instance before it applies: reading and merging the whole registry, at
// 1,000 tenants of 10 gateways each (10,000), on the memory store and on
// Redis (a real redis-server on loopback). The result is in
// docs/performance.md.
func BenchmarkEffective(b *testing.B) {
	for _, backend := range []string{"memory", "redis"} {
		b.Run(backend, func(b *testing.B) {
			r := seeded(b, backend)
			ctx := context.Background()
			for b.Loop() {
				s, _, err := r.Effective(ctx)
				if err != nil || len(s.Gateways) != 10_000 {
					b.Fatalf("Effective: %d gateways, %v", len(s.Gateways), err)
				}
			}
		})
	}
}

// BenchmarkCreateGateway measures creating (and removing) one gateway of
// a tenant among the 10,000 of BenchmarkEffective's registry, as an
// instance that has read the registry before: the creation counts the
// tenant's gateways against its max_gateways. The result is in
// docs/performance.md.
func BenchmarkCreateGateway(b *testing.B) {
	for _, backend := range []string{"memory", "redis"} {
		b.Run(backend, func(b *testing.B) {
			r := seeded(b, backend)
			ctx := context.Background()
			if _, _, err := r.Effective(ctx); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := r.CreateGateway(ctx, "t0500", "t0500-new"); err != nil {
					b.Fatal(err)
				}
				if err := r.DeleteGateway(ctx, "t0500", "t0500-new"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// seeded returns a registry on backend (memory or redis) holding 1,000
// tenants of 10 gateways each, the timer reset after.
func seeded(b *testing.B, backend string) *registry.Registry {
	var st store.Store
	var err error
	if backend == "redis" {
		srv := redistest.Start(b, redistest.Options{})
		st, err = store.Open(context.Background(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	} else {
		st = store.NewMemory(clock.System)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	r := registry.New(st, clock.System)
	ctx := context.Background()
	for i := range 1000 {
		tenant := fmt.Sprintf("t%04d", i)
		if err := r.CreateTenant(ctx, registry.Tenant{ID: tenant}); err != nil {
			b.Fatal(err)
		}
		for g := range 10 { // as CreateGateway stores them, without its count of the tenant's gateways
			gw := registry.Gateway{ID: fmt.Sprintf("%s-gw%d", tenant, g), Tenant: tenant, Origin: registry.OriginAdmin,
				Secrets: []registry.Secret{{Value: fmt.Sprintf("%064d", i*10+g)}}}
			data, _ := json.Marshal(gw)
			if _, err := st.Registry().Put(ctx, "registry/gateways", gw.ID, data); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	return r
}
