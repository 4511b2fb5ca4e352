package platform_test

import (
	"context"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/platform"
	"connector/store"
	"connector/vault"
)

// TestGrantsSharedThroughTheStore: a grant one instance makes is seen by
// another instance on the same store (memory and a real redis-server),
// not by another tenant or chat; it expires vault.ChatGrantTTL after the
// last renewal, and a renewal made on one instance keeps it alive on the
// other, whose in-memory front held the older grant.
func TestGrantsSharedThroughTheStore(t *testing.T) {
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			cfg := store.Config{Backend: backend, Now: clk.Now}
			if backend == store.BackendRedis {
				cfg.RedisURL = redistest.Start(t, redistest.Options{}).URL()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := store.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			a := platform.NewGrants(vault.NewDurable(st.Capabilities(), vault.Config{Now: clk.Now}), clk.Now, nil)
			b := platform.NewGrants(vault.NewDurable(st.Capabilities(), vault.Config{Now: clk.Now}), clk.Now, nil)

			if b.Has(t.Context(), "501", "t2") {
				t.Fatal("granted before any message")
			}
			a.Add(t.Context(), "501", "t2")
			if !b.Has(t.Context(), "501", "t2") || !a.Has(t.Context(), "501", "t2") {
				t.Fatal("the grant made on a is not seen on both instances")
			}
			if b.Has(t.Context(), "501", "t1") || b.Has(t.Context(), "502", "t2") || b.Has(t.Context(), "", "t2") || b.Has(t.Context(), "501", "") {
				t.Fatal("a grant leaked to another tenant or chat")
			}

			// A renewal past half the TTL, on a, outlives b's cached copy.
			clk.Advance(vault.ChatGrantTTL/2 + time.Minute)
			a.Add(t.Context(), "501", "t2")
			clk.Advance(vault.ChatGrantTTL/2 + time.Minute)
			if !b.Has(t.Context(), "501", "t2") {
				t.Fatal("the grant renewed on a expired on b")
			}
			// Without a renewal it expires everywhere.
			clk.Advance(vault.ChatGrantTTL)
			if a.Has(t.Context(), "501", "t2") || b.Has(t.Context(), "501", "t2") {
				t.Fatal("the grant outlived its TTL")
			}
		})
	}
}

// TestGrantsWithoutVault: with no vault the grants are the process's own.
func TestGrantsWithoutVault(t *testing.T) {
	g := platform.NewGrants(nil, nil, nil)
	g.Add(t.Context(), "-100", "t1")
	if !g.Has(t.Context(), "-100", "t1") || g.Has(t.Context(), "-100", "t2") {
		t.Fatal("a process-local grant is not kept, or kept for another tenant")
	}
}
