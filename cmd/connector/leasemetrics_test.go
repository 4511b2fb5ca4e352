package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"connector/internal/clock/clocktest"
	"connector/store"
)

// TestLeaseMetricsCountTenures: a lease taken is held and acquired once,
// however often it is renewed; one acquired again while held (its holder's
// tenure gave it up unrenewed) is lost and acquired again; a renewal that
// finds another instance's lease counts it lost, and so does a bid of the
// instance that counted it held; a released lease is no longer held.
func TestLeaseMetricsCountTenures(t *testing.T) {
	clk := clocktest.New(time.Unix(1767225600, 0))
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	lm := newLeaseMetrics(newMetrics())
	i0 := lm.count(mem).Leases()
	ctx := context.Background()
	const name, ttl = "relay/tenant/acme", 5 * time.Second
	l, ok, err := i0.Acquire(ctx, name, "i0", ttl)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if l, err = i0.Renew(ctx, name, l, ttl); err != nil {
		t.Fatal(err)
	}
	held, acquired, lost := lm.held.WithLabelValues("tenant"), lm.acquired.WithLabelValues("tenant"), lm.lost.WithLabelValues("tenant")
	if value(held) != 1 || value(acquired) != 1 {
		t.Fatalf("held %v acquired %v, want 1 and 1", value(held), value(acquired))
	}
	if _, _, err := i0.Acquire(ctx, name, "i0", ttl); err != nil { // after a tenure that gave it up
		t.Fatal(err)
	}
	if value(held) != 1 || value(acquired) != 2 || value(lost) != 1 {
		t.Fatalf("held %v acquired %v lost %v after it was given up and taken again, want 1, 2 and 1", value(held), value(acquired), value(lost))
	}
	clk.Advance(2 * ttl) // i0 stalls; i1 takes the lease over
	if _, ok, err := mem.Leases().Acquire(ctx, name, "i1", ttl); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := i0.Renew(ctx, name, l, ttl); err == nil {
		t.Fatal("renewed a lease another instance holds")
	}
	if value(held) != 0 || value(lost) != 2 {
		t.Fatalf("held %v lost %v after the takeover, want 0 and 2", value(held), value(lost))
	}
	clk.Advance(2 * ttl)
	l, _, _ = i0.Acquire(ctx, name, "i0", ttl)
	if err := i0.Release(ctx, name, l); err != nil {
		t.Fatal(err)
	}
	if value(held) != 0 || value(acquired) != 3 || leaseKind("ingest/nexscope/room/lab") != "nexscope_room" ||
		leaseKind("ingest/telegram/poll") != "telegram_poll" {
		t.Fatalf("after a second tenure and its release: held %v acquired %v", value(held), value(acquired))
	}
	// A tenure that gave the lease up unrenewed, and another instance took
	// it: the holder's next bid finds it lost.
	if _, ok, err := i0.Acquire(ctx, name, "i0", ttl); err != nil || !ok {
		t.Fatal(ok, err)
	}
	clk.Advance(2 * ttl)
	if _, ok, err := mem.Leases().Acquire(ctx, name, "i1", ttl); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, ok, err := i0.Acquire(ctx, name, "i0", ttl); err != nil || ok {
		t.Fatal(ok, err)
	}
	if value(held) != 0 || value(lost) != 3 {
		t.Fatalf("held %v lost %v after a bid found the lease another's, want 0 and 3", value(held), value(lost))
	}
}

// value is the current value of a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	_ = m.Write(&d)
	if c := d.GetCounter(); c != nil {
		return c.GetValue()
	}
	return d.GetGauge().GetValue()
}

// TestLeaseMetricsLostInAnOutage: a tenure that gave its lease up because
// the store could not be reached is no longer counted held once the
// holder's next bid fails too: during a Redis outage (or a failover whose
// writes are not replicated) connector_leases_held says no lease is held
// and the loss is counted, instead of the lease staying held until the
// store answers again.
func TestLeaseMetricsLostInAnOutage(t *testing.T) {
	clk := clocktest.New(time.Unix(1767225600, 0))
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	lm := newLeaseMetrics(newMetrics())
	ctx := context.Background()
	const name, ttl = "ingest/telegram/poll", 5 * time.Second
	if _, ok, err := lm.count(mem).Leases().Acquire(ctx, name, "i0", ttl); err != nil || !ok {
		t.Fatal(ok, err)
	}
	down := countedLeases{Leases: unreachableLeases{mem.Leases()}, m: lm}
	if _, _, err := down.Acquire(ctx, name, "i0", ttl); err == nil {
		t.Fatal("a bid on an unreachable store succeeded")
	}
	held, lost := lm.held.WithLabelValues("telegram_poll"), lm.lost.WithLabelValues("telegram_poll")
	if value(held) != 0 || value(lost) != 1 {
		t.Fatalf("held %v lost %v after the tenure ended and the next bid failed, want 0 and 1", value(held), value(lost))
	}
	if _, ok, err := lm.count(mem).Leases().Acquire(ctx, name, "i0", ttl); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if value(held) != 1 || value(lost) != 1 || value(lm.acquired.WithLabelValues("telegram_poll")) != 2 {
		t.Fatalf("held %v lost %v once the store is back and the lease taken again, want 1 and 1", value(held), value(lost))
	}
}

// unreachableLeases fails every bid, as a store that cannot be reached.
type unreachableLeases struct{ store.Leases }

func (unreachableLeases) Acquire(context.Context, string, string, time.Duration) (store.Lease, bool, error) {
	return store.Lease{}, false, errors.New("dial tcp: connection refused")
}
