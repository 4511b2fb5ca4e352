package ledger

import (
	"context"
	"strconv"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/store"

	"github.com/redis/go-redis/v9"
)

// A stored record that does not decode (a field another program or
// version wrote: here a generation g that is not a number) is passed over,
// logged and counted as dropped_malformed and removed from the store,
// on real Redis: the tenant's records before and after it are delivered.
// It stalled the tenant's reads for good before (every Read failed at it,
// and Recover failed the start).
func TestTailPassesOverARecordThatDoesNotDecode(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	c := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	m := &fakeMetrics{outcomes: make(map[string]int)}
	cfg := testConfig(st.Ledger(), c, m)
	p := NewPool(cfg)
	t.Cleanup(func() { p.Close(context.Background()) })
	l := p.Ledger("t1")

	rc := srv.Client(t)
	if _, err := st.Ledger().Append(ctx, "t1", []store.Record{{Platform: "discord", SessionKey: "s1", Payload: []byte("before")}}); err != nil {
		t.Fatal(err)
	}
	seq, err := rc.Incr(ctx, "connector:seq:{t1}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: "connector:log:{t1}", ID: "0-" + strconv.FormatInt(seq, 10),
		Values: []any{"k", "1", "p", "discord", "s", "s1", "c", "", "r", "1767323045000000", "d", "bad", "g", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Ledger().Append(ctx, "t1", []store.Record{{Platform: "discord", SessionKey: "s2", Payload: []byte("after")}}); err != nil {
		t.Fatal(err)
	}

	n, err := p.Recover(ctx)
	if err != nil || n != 2 {
		t.Fatalf("Recover took in %d (%v), want 2", n, err)
	}
	cons := &fakeConsumer{}
	l.Serve(cons, "discord")
	want(t, "delivered", payloads(cons.take()), "before", "after")
	if got := m.count("dropped_malformed"); got != 1 {
		t.Fatalf("counted %d dropped_malformed, want 1", got)
	}
	p.Flush(ctx)
	recs, err := st.Ledger().Read(ctx, "t1", 0, 10)
	if err != nil {
		t.Fatalf("the record that does not decode is still stored: %v", err)
	}
	got := make([]string, len(recs))
	for i, r := range recs {
		got[i] = string(r.Payload)
	}
	want(t, "stored", got, "before", "after")
}
