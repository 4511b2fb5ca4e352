package ledger

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/store"
)

// promotable is a store.Ledger the test points at another server, as the
// failover client follows the replica Sentinel promoted.
type promotable struct {
	mu  sync.Mutex
	cur store.Ledger
}

func (p *promotable) to(l store.Ledger) { p.mu.Lock(); p.cur = l; p.mu.Unlock() }

func (p *promotable) get() store.Ledger { p.mu.Lock(); defer p.mu.Unlock(); return p.cur }

func (p *promotable) Append(ctx context.Context, tenant string, recs []store.Record) ([]uint64, error) {
	return p.get().Append(ctx, tenant, recs)
}

func (p *promotable) Stage(ctx context.Context, tenant string, recs []store.Record) ([]uint64, func() error, error) {
	return p.get().Stage(ctx, tenant, recs)
}

func (p *promotable) Read(ctx context.Context, tenant string, afterSeq uint64, max int, maxBytes int64) ([]store.Record, error) {
	return p.get().Read(ctx, tenant, afterSeq, max, maxBytes)
}

func (p *promotable) Ack(ctx context.Context, tenant string, seqs ...uint64) (int, error) {
	return p.get().Ack(ctx, tenant, seqs...)
}

func (p *promotable) AckAll(ctx context.Context, acks map[string][]uint64) (int, error) {
	return p.get().AckAll(ctx, acks)
}

func (p *promotable) Trim(ctx context.Context, tenant string, b store.Bounds) ([]store.Dropped, error) {
	return p.get().Trim(ctx, tenant, b)
}

func (p *promotable) Stats(ctx context.Context, tenant string) (store.Stats, error) {
	return p.get().Stats(ctx, tenant)
}

func (p *promotable) Tenants(ctx context.Context) ([]string, error) { return p.get().Tenants(ctx) }

func (p *promotable) Forget(ctx context.Context, keep func(string) bool) (int, error) {
	return p.get().Forget(ctx, keep)
}

// TestTailAfterAFailover: the driver's Tail took in a record the primary
// numbered and never replicated (its append refused, or confirmed without
// redis_min_replicas), and the replica promoted then stores the next
// confirmed one. Before, the promoted replica gave that one the lost
// record's seq: Tail, reading past it, passed it over, and the lost
// record's ack removed it from the store.
func TestTailAfterAFailover(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	ctx := context.Background()
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	open := func(srv *redistest.Server) store.Ledger {
		st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st.Ledger()
	}
	st := &promotable{cur: open(primary)}
	p := NewPool(testConfig(st, clk, &fakeMetrics{outcomes: make(map[string]int)}))
	t.Cleanup(func() { p.Close(ctx) })
	driver := p.Ledger("t1")
	gw := &fakeConsumer{name: "gw"}
	driver.Serve(gw, "discord")
	storeOne := func(text string) {
		t.Helper()
		if _, err := driver.StoreAll(ctx, []Delivery{{Platform: "discord", SessionKey: "s", Payload: []byte(text)}}); err != nil {
			t.Fatalf("store %q: %v", text, err)
		}
	}
	tail := func(want ...string) []string {
		t.Helper()
		if _, err := driver.Tail(ctx); err != nil {
			t.Fatal(err)
		}
		got := gw.take()
		if !slices.Equal(payloads(got), want) {
			t.Fatalf("the gateway got %q, want the payloads %q", got, want)
		}
		return ids(got)
	}

	storeOne("replicated")
	if n, err := primary.Client(t).Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	if err := replica.Client(t).ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	storeOne("lost")
	before := tail("replicated", "lost")

	st.to(open(replica))
	storeOne("confirmed")
	for _, id := range before {
		driver.Ack([]byte(id))
	}
	p.Flush(ctx)
	after := tail("confirmed")
	if slices.Contains(before, after[0]) {
		t.Fatalf("the confirmed record came as %s, a bufferId given out before the failover (%q)", after[0], before)
	}
}

// TestSweepForgetsADeletedTenant: the age sweep drops a tenant no longer
// configured whose records are all gone from the store's index of tenants
// (Redis: the ledgers set and the numbered hash), once two sweeps in a row
// found it without a ledger here, and keeps a configured one, and one
// another instance created that this one applied between the sweeps.
// Before, both grew with every tenant ever made; then the first sweep
// dropped the tenant another instance had just created, whose floor
// against a loss of its keys was gone until its next append.
func TestSweepForgetsADeletedTenant(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, tenant := range []string{"t1", "deleted", "created"} {
		seqs, err := st.Ledger().Append(ctx, tenant, []store.Record{{Payload: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Ledger().Ack(ctx, tenant, seqs...); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(st.Ledger(), clk, &fakeMetrics{outcomes: make(map[string]int)})
	cfg.MaxAge, cfg.SweepEvery = time.Hour, 24*time.Hour
	p := NewPool(cfg)
	t.Cleanup(func() { p.Close(context.Background()) })
	p.Ledger("t1")
	sweep := func(want ...string) {
		t.Helper()
		if err := p.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		members, err := srv.Client(t).SMembers(ctx, "connector:ledgers").Result()
		slices.Sort(members)
		if err != nil || !slices.Equal(members, want) {
			t.Fatalf("the set of tenants after the sweep: %v, %v; want %v", members, err, want)
		}
	}
	sweep("created", "deleted", "t1")
	p.Ledger("created") // applied here after the first sweep
	sweep("created", "t1")
}
