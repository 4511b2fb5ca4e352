package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/store"
)

// TestGoneTenantsHubIsFreed: t1, declared (Created zero), has buffered
// inbound, and t2, stored through the registry (Created set), is served,
// when both leave the tenants: the relay holds no hub for either. t1
// declared again gets its buffered inbound, kept in the store, over a
// real WebSocket; t2 created again works end to end.
func TestGoneTenantsHubIsFreed(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1", "c2": "t2"})
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	t1 := relay.Tenant{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}
	t2 := relay.Tenant{ID: "t2", Created: time.Now().Add(-time.Hour), Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}}
	h := relaytest.StartConfig(t, relay.Config{Tenants: []relay.Tenant{t1, t2}, Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t), Store: st})
	p.deliver("t1", "c1", "u1", "t1's")
	gw := h.Dial(t, "gw2", "s2")
	gw.Hello(t, "discord", "app")
	p.deliver("t2", "c2", "u1", "before")
	if ev, id := gw.NextInbound(t); ev.Text != "before" {
		t.Fatalf("t2's gateway got %q, want before", ev.Text)
	} else {
		gw.Ack(t, id)
	}
	if err := h.Server.SetTenants(nil); err != nil {
		t.Fatal(err)
	}
	if n := relay.Hubs(h.Server); n != 0 {
		t.Fatalf("after every tenant left, the relay holds %d hubs, want 0", n)
	}
	gw.Closed(t)

	t2.Created = time.Now()
	if err := h.Server.SetTenants([]relay.Tenant{t1, t2}); err != nil {
		t.Fatal(err)
	}
	gw1 := h.Dial(t, "gw1", "s1")
	gw1.Hello(t, "discord", "app")
	if ev, id := gw1.NextInbound(t); ev.Text != "t1's" {
		t.Fatalf("t1 declared again: its gateway got %q, want %q", ev.Text, "t1's")
	} else {
		gw1.Ack(t, id)
	}
	gw2 := h.Dial(t, "gw2", "s2")
	gw2.Hello(t, "discord", "app")
	p.deliver("t2", "c2", "u1", "after")
	if ev, id := gw2.NextInbound(t); ev.Text != "after" {
		t.Fatalf("t2 created again: its gateway got %q, want after", ev.Text)
	} else {
		gw2.Ack(t, id)
	}
}

// TestGoneTenantsLeaseIsReleased, on a real redis-server and a fake
// clock: t1's gateway on i0 has i0 drive t1. Once t1 is deleted on both
// instances, no instance holds its lease, at once (given up, not left to
// expire) and beats later (nobody renews or takes it); neither relay
// holds a hub for it. t1 created again is driven under its new lease and
// serves its gateway.
func TestGoneTenantsLeaseIsReleased(t *testing.T) {
	if testing.Short() {
		t.Skip("runs redis-server")
	}
	ctx := t.Context()
	clk := clocktest.New(time.Now())
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: redistest.Start(t, redistest.Options{}).URL(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// A TTL no test run reaches on the Redis server's clock: a lease
	// gone is one given up.
	const ttl = time.Minute
	tenant := func(created time.Time) []relay.Tenant {
		return []relay.Tenant{{ID: "t1", Created: created, Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
	}
	first := tenant(clk.Now().Add(-time.Hour))
	var hs []*relaytest.Harness
	var ps []*fakePlatform
	for i := range 2 {
		p := newFake("discord", map[string]string{"c1": "t1"})
		node, err := cluster.New(cluster.Config{Instance: fmt.Sprintf("i%d", i), PubSub: st.PubSub(), LeaseTTL: ttl, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Close)
		hs = append(hs, relaytest.StartConfig(t, relay.Config{Tenants: first, Platforms: []platform.Platform{p},
			Log: relaytest.TestLogger(t), Store: st, Cluster: node, Clock: clk,
			PingInterval: time.Hour, WriteTimeout: time.Hour}))
		ps = append(ps, p)
	}
	holder := func(name string) (string, bool) {
		l, ok, err := st.Leases().Holder(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		return l.Holder, ok
	}
	name := "relay/tenant/t1@" + fmt.Sprint(first[0].Created.UnixMicro())
	gw := hs[0].DialToken(t, relaytest.Token("gw1", "s1", clk.Now()))
	gw.Hello(t, "discord", "")
	ps[0].deliver("t1", "c1", "u1", "first")
	if ev, id := gw.NextInbound(t); ev.Text != "first" {
		t.Fatalf("t1's gateway got %q, want first", ev.Text)
	} else {
		gw.Ack(t, id)
	}
	if who, ok := holder(name); !ok || who != "i0" {
		t.Fatalf("t1's lease %s held by %q (%v), want i0", name, who, ok)
	}

	for _, h := range hs {
		if err := h.Server.SetTenants(nil); err != nil {
			t.Fatal(err)
		}
	}
	gw.Closed(t)
	if who, ok := holder(name); ok {
		t.Fatalf("after t1 was deleted, %s still holds its lease", who)
	}
	for range 3 {
		clk.Advance(ttl)
	}
	if who, ok := holder(name); ok {
		t.Fatalf("three lease TTLs after t1 was deleted, %s holds its lease", who)
	}
	for i, h := range hs {
		if n := relay.Hubs(h.Server); n != 0 {
			t.Fatalf("after t1 was deleted, i%d holds %d hubs, want 0", i, n)
		}
	}

	again := tenant(clk.Now())
	for _, h := range hs {
		if err := h.Server.SetTenants(again); err != nil {
			t.Fatal(err)
		}
	}
	gw = hs[1].DialToken(t, relaytest.Token("gw1", "s1", clk.Now()))
	gw.Hello(t, "discord", "")
	ps[0].deliverAt("t1", "c1", "u1", "again", clk.Now())
	if ev, id := gw.NextInbound(t); ev.Text != "again" {
		t.Fatalf("t1 created again: its gateway got %q, want again", ev.Text)
	} else {
		gw.Ack(t, id)
	}
}
