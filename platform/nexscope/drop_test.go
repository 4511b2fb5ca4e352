package nexscope

import (
	"context"
	"sync"
	"testing"

	"connector/internal/clock"
	"connector/internal/redistest"
	"connector/platform"
	"connector/store"
)

// TestUnboundRoomIsDropped: a room a binding created is dropped once it is
// unbound (its tenant deleted drops its binding) with no member: the
// instance forgets it, its bid for its lease ends and the lease is
// released, so Redis hears nothing more of it; a later binding creates it
// again. One unbound while a member is in it stays until that member
// leaves; a configured room is never dropped.
func TestUnboundRoomIsDropped(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var mu sync.Mutex
	bidding := make(map[string]int) // lease -> bids running
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), RedisPrefix: "nexscope-cluster-test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	in := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: "kept"}}}, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, lease string, run func(context.Context) error) error {
			mu.Lock()
			bidding[lease]++
			mu.Unlock()
			defer func() {
				mu.Lock()
				bidding[lease]--
				mu.Unlock()
			}()
			return store.RunExclusive(ctx, clock.System, st.Leases(), lease, "i0", clusterLeaseTTL, run)
		}
	})
	bids := func(room string) int {
		mu.Lock()
		defer mu.Unlock()
		return bidding[leasePrefix+room]
	}
	held := func(room string) bool {
		_, ok, err := st.Leases().Holder(ctx, leasePrefix+room)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	bind := func(bs ...platform.Binding) {
		t.Helper()
		if err := in.p.Bind(bs); err != nil {
			t.Fatal(err)
		}
	}
	lab := platform.Binding{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}

	waitFor(t, "i0 the home of the configured rooms", func() bool {
		return in.p.room("kept").home.Load() && in.p.room(DefaultRoom).home.Load()
	})
	bind(lab)
	waitFor(t, "i0 the home of lab", func() bool { r := in.p.room("lab"); return r != nil && r.home.Load() })
	bind()
	waitFor(t, "lab dropped, its bid ended and its lease released", func() bool {
		return in.p.room("lab") == nil && bids("lab") == 0 && !held("lab")
	})
	if in.p.room("kept") == nil || in.p.room(DefaultRoom) == nil || bids("kept") != 1 || bids(DefaultRoom) != 1 {
		t.Fatalf("a configured room was dropped (kept %v, default %v, bids %d/%d)", in.p.room("kept"), in.p.room(DefaultRoom), bids("kept"), bids(DefaultRoom))
	}

	// Bound again, lab is created afresh; unbound with alice in it, it stays
	// until she leaves.
	bind(lab)
	waitFor(t, "i0 the home of lab again", func() bool { r := in.p.room("lab"); return r != nil && r.home.Load() })
	alice := in.dialURL(t, "/ws/lab", "name=alice&token="+testToken+"&v=1", nil)
	alice.ExpectPresence("alice", "hermes")
	bind()
	alice.ExpectPresence("alice")
	if in.p.room("lab") == nil || bids("lab") != 1 {
		t.Fatal("lab dropped while alice is in it")
	}
	_ = alice.WS.CloseNow()
	waitFor(t, "lab dropped once alice left", func() bool {
		return in.p.room("lab") == nil && bids("lab") == 0 && !held("lab")
	})
}
