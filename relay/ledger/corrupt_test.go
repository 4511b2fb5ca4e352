package ledger

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/store"

	"github.com/redis/go-redis/v9"
)

// redisRig is a pool of ledgers on a store on a real redis-server, with a
// client to that server to write records as another program would.
type redisRig struct {
	store   store.Store
	pool    *Pool
	metrics *fakeMetrics
	client  *redis.Client
}

func newRedisRig(t *testing.T, mod func(*Config)) *redisRig {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	clk := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st, err := store.Open(context.Background(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	m := &fakeMetrics{outcomes: make(map[string]int)}
	cfg := testConfig(st.Ledger(), clk, m)
	if mod != nil {
		mod(&cfg)
	}
	p := NewPool(cfg)
	t.Cleanup(func() { p.Close(context.Background()) })
	return &redisRig{store: st, pool: p, metrics: m, client: srv.Client(t)}
}

// append stores a record of tenant with payload text.
func (r *redisRig) append(t *testing.T, tenant, session, text string) {
	t.Helper()
	if _, err := r.store.Ledger().Append(context.Background(), tenant, []store.Record{{Platform: "discord", SessionKey: session, Payload: []byte(text)}}); err != nil {
		t.Fatal(err)
	}
}

// appendRaw stores a record of tenant with the stream fields values, with
// the next seq, as another program or version would.
func (r *redisRig) appendRaw(t *testing.T, tenant string, values ...any) {
	t.Helper()
	ctx := context.Background()
	seq, err := r.client.Incr(ctx, "connector:seq:{"+tenant+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.client.SAdd(ctx, "connector:ledgers", tenant).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.client.XAdd(ctx, &redis.XAddArgs{Stream: "connector:log:{" + tenant + "}", ID: "0-" + strconv.FormatInt(seq, 10), Values: values}).Err(); err != nil {
		t.Fatal(err)
	}
}

// stored returns the payloads the store holds for tenant, after writing
// the queued removals.
func (r *redisRig) stored(t *testing.T, tenant string) []string {
	t.Helper()
	ctx := context.Background()
	r.pool.Flush(ctx)
	recs, err := r.store.Ledger().Read(ctx, tenant, 0, 10, 0)
	if err != nil {
		t.Fatalf("%s's records: %v", tenant, err)
	}
	got := make([]string, len(recs))
	for i, rec := range recs {
		got[i] = string(rec.Payload)
	}
	return got
}

// A stored record that does not decode (a field another program or
// version wrote: here a generation g that is not a number) is passed over,
// logged and counted as dropped_malformed and removed from the store,
// on real Redis: the tenant's records before and after it are delivered.
// It stalled the tenant's reads for good before (every Read failed at it,
// and Recover failed the start).
func TestTailPassesOverARecordThatDoesNotDecode(t *testing.T) {
	ctx := context.Background()
	r := newRedisRig(t, nil)
	l := r.pool.Ledger("t1")
	r.append(t, "t1", "s1", "before")
	r.appendRaw(t, "t1", "k", "1", "p", "discord", "s", "s1", "c", "", "r", "1767323045000000", "d", "bad", "g", "x")
	r.append(t, "t1", "s2", "after")

	n, err := r.pool.Recover(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Recover took in %d (%v), want 2", n, err)
	}
	cons := &fakeConsumer{}
	l.Serve(cons, "discord")
	want(t, "delivered", payloads(cons.take()), "before", "after")
	if got := r.metrics.count("dropped_malformed"); got != 1 {
		t.Fatalf("counted %d dropped_malformed, want 1", got)
	}
	want(t, "stored", r.stored(t, "t1"), "before", "after")
}

// The age sweep drops a stored record whose receipt time does not decode
// (a tenant no ledger reads, so Tail does not drop it) as expired, and
// trims past it, on real Redis. Its trim failed on it before at every
// sweep, for good, and the records after it never aged out.
func TestSweepDropsARecordWhoseReceiptTimeDoesNotDecode(t *testing.T) {
	r := newRedisRig(t, func(c *Config) { c.MaxAge, c.SweepEvery = time.Hour, 24*time.Hour })
	old := strconv.FormatInt(r.pool.cfg.Clock.Now().Add(-2*time.Hour).UnixMicro(), 10)
	r.appendRaw(t, "t2", "k", "1", "p", "discord", "s", "s1", "c", "", "r", "x", "d", "bad")
	r.appendRaw(t, "t2", "k", "1", "p", "discord", "s", "s1", "c", "", "r", old, "d", "old")
	r.append(t, "t2", "s1", "new")
	if err := r.pool.Sweep(context.Background()); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	want(t, "stored", r.stored(t, "t2"), "new")
	if got := r.metrics.count(DroppedExpired); got != 2 {
		t.Fatalf("counted %d dropped_expired, want 2", got)
	}
}

// A record that does not decode is counted and logged once, even when the
// ledger reads the stream again from the start while its removal is still
// queued (a Reset, as when the instance stops and starts driving the
// tenant): that read writes the removal first. It was counted and logged
// at each read before.
func TestUnreadableRecordCountedOnceWhenReadAgainBeforeItsRemoval(t *testing.T) {
	ctx := context.Background()
	r := newRedisRig(t, nil)
	l := r.pool.Ledger("t1")
	r.appendRaw(t, "t1", "k", "1", "p", "discord", "s", "s1", "c", "", "r", "1767323045000000", "d", "bad", "g", "x")
	r.append(t, "t1", "s2", "after")
	// The pool's goroutine stopped: the removal stays queued until the
	// Tail after the Reset, which reads from the start, writes it first.
	r.pool.Close(ctx)
	if n, err := l.Tail(ctx); err != nil || n != 1 {
		t.Fatalf("first Tail took in %d (%v), want 1", n, err)
	}
	l.Reset()
	if n, err := l.Tail(ctx); err != nil || n != 1 {
		t.Fatalf("Tail after Reset took in %d (%v), want 1", n, err)
	}
	if got := r.metrics.count(DroppedMalformed); got != 1 {
		t.Fatalf("counted %d dropped_malformed, want 1", got)
	}
	want(t, "stored", r.stored(t, "t1"), "after")
	if st := r.pool.Stats(); st.Removed != 1 || st.RemoveErrors != 0 {
		t.Fatalf("stats %+v, want one entry removed", st)
	}
}

// A stream entry the connector did not write (added with XADD ... *, so
// its id is not 0-<seq> and above all of the connector's) is passed over,
// removed, logged and counted as dropped_malformed, on real Redis, and the
// tenant's records stored after it are taken in and delivered. Every Tail
// failed at it before, and every Append after it (an id below the
// stream's top one): the tenant's inbound stopped for good.
func TestTailPassesOverAnEntryTheConnectorDidNotWrite(t *testing.T) {
	ctx := context.Background()
	r := newRedisRig(t, nil)
	l := r.pool.Ledger("t1")
	r.append(t, "t1", "s1", "before")
	if err := r.client.XAdd(ctx, &redis.XAddArgs{Stream: "connector:log:{t1}", ID: "*", Values: []any{"d", "foreign"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Tail(ctx); err != nil || n != 1 {
		t.Fatalf("Tail took in %d (%v), want 1", n, err)
	}
	r.append(t, "t1", "s2", "after")
	if n, err := l.Tail(ctx); err != nil || n != 1 {
		t.Fatalf("Tail after the next append took in %d (%v), want 1", n, err)
	}
	cons := &fakeConsumer{}
	l.Serve(cons, "discord")
	want(t, "delivered", payloads(cons.take()), "before", "after")
	if got := r.metrics.count(DroppedMalformed); got != 1 {
		t.Fatalf("counted %d dropped_malformed, want 1", got)
	}
	want(t, "stored", r.stored(t, "t1"), "before", "after")
}

// A stored record whose payload is over MaxPayloadBytes (written by
// another program or version), whose frame no gateway takes, is dropped as
// it is read: counted as dropped_oversized and removed from the store; the
// records after it are delivered. It was framed and sent at every
// delivery before, and the gateway closed each time (1009).
func TestTailDropsAStoredRecordOverThePayloadBound(t *testing.T) {
	r := newRig(t, nil)
	r.store1(t, "s1", "before")
	r.store1(t, "s2", "far too large")
	r.store1(t, "s3", "after")
	again := newRigOn(t, r.store, r.clock, func(c *Config) { c.MaxPayloadBytes = len("before") })
	if n, err := again.pool.Recover(context.Background()); err != nil || n != 2 {
		t.Fatalf("Recover took in %d (%v), want 2", n, err)
	}
	cons := &fakeConsumer{}
	again.Serve(cons, "discord")
	want(t, "delivered", payloads(cons.take()), "before", "after")
	if got := again.metrics.count(DroppedOversized); got != 1 {
		t.Fatalf("counted %d dropped_oversized, want 1", got)
	}
	want(t, "stored", again.stored(t), "before", "after")
}

// readCounter is a store that keeps the payload bytes of its largest Read.
type readCounter struct {
	store.Ledger
	most int
}

func (c *readCounter) Read(ctx context.Context, tenant string, afterSeq uint64, n int, maxBytes int64) ([]store.Record, error) {
	recs, err := c.Ledger.Read(ctx, tenant, afterSeq, n, maxBytes)
	size := 0
	for _, r := range recs {
		size += len(r.Payload)
	}
	c.most = max(c.most, size)
	return recs, err
}

// A Tail reads at most about MaxBytes at once, however many records it
// asks for: after small records, large ones are not read 1,024 at a time
// (up to ~1 GiB held at once).
func TestTailReadsAtMostMaxBytes(t *testing.T) {
	r := newRig(t, nil)
	large := strings.Repeat("x", 500)
	for i := range 120 {
		payload := "s"
		if i >= 20 {
			payload = large
		}
		r.store1(t, "s"+strconv.Itoa(i), payload)
	}
	reads := &readCounter{}
	bound := 16 * len(large)
	again := newRigOn(t, r.store, r.clock, func(c *Config) {
		c.MaxBytes = int64(bound)
		reads.Ledger = c.Store
		c.Store = reads
	})
	if n, err := again.pool.Recover(context.Background()); err != nil || n != 120 {
		t.Fatalf("Recover took in %d (%v), want 120", n, err)
	}
	if reads.most >= bound+len(large) {
		t.Fatalf("a Read returned %d payload bytes, want less than MaxBytes (%d) and one record", reads.most, bound)
	}
}
