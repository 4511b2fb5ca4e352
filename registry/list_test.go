package registry_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/registry"
	"connector/store"
)

// TestReadSeesEveryChangeOfAnotherInstance: an instance that has read the
// registry reads each later change another instance makes (a rotated
// secret, a bound raised, a gateway removed, a value replaced by one that
// does not decode and back), never the value it decoded before.
func TestReadSeesEveryChangeOfAnotherInstance(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(c)
	t.Cleanup(func() { _ = st.Close() })
	reader, writer := registry.New(st, c), registry.New(st, c)
	if err := writer.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	first, err := writer.CreateGateway(ctx, "acme", "gw1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.CreateGateway(ctx, "acme", "gw2"); err != nil {
		t.Fatal(err)
	}
	if s, _ := effective(t, reader); len(s.Gateways) != 2 || !slices.Equal(secretsOf(s, "gw1"), []string{first}) {
		t.Fatalf("first read: %d gateways, gw1's secrets %d", len(s.Gateways), len(secretsOf(s, "gw1")))
	}
	second, err := writer.Rotate(ctx, "acme", "gw1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.SetMaxGateways(ctx, "acme", 7); err != nil {
		t.Fatal(err)
	}
	if err := writer.DeleteGateway(ctx, "acme", "gw2"); err != nil {
		t.Fatal(err)
	}
	s, _ := effective(t, reader)
	if len(s.Gateways) != 1 || !slices.Equal(slices.Sorted(slices.Values(secretsOf(s, "gw1"))), slices.Sorted(slices.Values([]string{first, second}))) || len(s.Tenants) != 1 || s.Tenants[0].MaxGateways != 7 {
		t.Fatalf("after the changes: gateways %d, gw1's secrets %d (want both), tenants %+v (want max_gateways 7)", len(s.Gateways), len(secretsOf(s, "gw1")), s.Tenants)
	}
	kv := st.Registry()
	e, _, err := kv.Get(ctx, "registry/gateways", "gw1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "registry/gateways", "gw1", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if s, _ := effective(t, reader); len(s.Gateways) != 0 || !slices.Equal(s.Corrupt, []string{"registry/gateways gw1"}) {
		t.Fatalf("gw1 corrupt: gateways %+v, corrupt %q: want none and gw1", s.Gateways, s.Corrupt)
	}
	if _, err := kv.Put(ctx, "registry/gateways", "gw1", e.Value); err != nil {
		t.Fatal(err)
	}
	if s, _ := effective(t, reader); len(s.Corrupt) != 0 || !slices.Equal(slices.Sorted(slices.Values(secretsOf(s, "gw1"))), slices.Sorted(slices.Values([]string{first, second}))) {
		t.Fatalf("gw1 put back: corrupt %q, gw1's secrets %d", s.Corrupt, len(secretsOf(s, "gw1")))
	}
}

// TestReadDecodesOnlyWhatChanged: reading an unchanged registry again
// costs no decoding of its entries (the allocations of one stored copy
// each), so every registry change does not cost each instance the whole
// registry's JSON (docs/performance.md).
func TestReadDecodesOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	const gateways = 200
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme", MaxGateways: gateways}); err != nil {
		t.Fatal(err)
	}
	for i := range gateways {
		if _, err := r.CreateGateway(ctx, "acme", fmt.Sprintf("gw%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	effective(t, r)
	allocs := testing.AllocsPerRun(5, func() {
		if s, err := r.Stored(ctx); err != nil || len(s.Gateways) != gateways {
			t.Fatalf("Stored: %d gateways, %v", len(s.Gateways), err)
		}
	})
	if allocs > 3*gateways {
		t.Fatalf("reading %d unchanged gateways allocated %.0f times: decoded again", gateways, allocs)
	}
}

// TestReadsRacingWrites: reads on several goroutines of an instance,
// while another instance rotates a gateway's secret, each see a whole
// gateway, and the last read after the writes sees the last secret (run
// with -race: the reads share what they decoded).
func TestReadsRacingWrites(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(c)
	t.Cleanup(func() { _ = st.Close() })
	reader, writer := registry.New(st, c), registry.New(st, c)
	if err := writer.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.CreateGateway(ctx, "acme", "gw1"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for range 50 {
				s, _, err := reader.Effective(ctx)
				if err == nil && (len(s.Gateways) != 1 || len(s.Gateways[0].Secrets) == 0) {
					err = fmt.Errorf("read %+v: want gw1 with its secrets", s.Gateways)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var last string
	for range 20 {
		var err error
		if last, err = writer.Rotate(ctx, "acme", "gw1", 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the reads did not end within a minute")
		}
	}
	if s, _ := effective(t, reader); !slices.Contains(secretsOf(s, "gw1"), last) {
		t.Fatalf("after the rotations gw1's secrets are %d, without the last", len(secretsOf(s, "gw1")))
	}
}
