package store_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/store"
	"connector/store/storetest"
)

// prefixes makes every redis data set in this binary distinct on a shared
// server.
var prefixes atomic.Int64

func redisConfig(srv *redistest.Server) store.Config {
	return store.Config{
		Backend: store.BackendRedis, RedisURL: srv.URL(),
		RedisPrefix: fmt.Sprintf("test%d:", prefixes.Add(1)),
	}
}

func TestRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	storetest.Run(t, storetest.Backend{
		Fresh: func(t *testing.T) storetest.Opener {
			return opener(t, redisConfig(srv))
		},
		Durable:     true,
		Shared:      true,
		ServerClock: true,
		Lapse:       lapseClaims(srv),
	})
}

// lapseClaims ends a claim of every data set of this binary on servers
// (each a primary) as its expiry on the server would: its key removed.
func lapseClaims(servers ...*redistest.Server) func(t *testing.T, key string) {
	return func(t *testing.T, key string) {
		t.Helper()
		ctx := context.Background()
		removed := 0
		for _, srv := range servers {
			c := srv.Client(t)
			keys, err := c.Keys(ctx, "test*:claim:"+key).Result()
			if err == nil && len(keys) > 0 {
				err = c.Del(ctx, keys...).Err()
			}
			if err != nil {
				t.Fatalf("ending claim %q: %v", key, err)
			}
			removed += len(keys)
		}
		if removed == 0 {
			t.Fatalf("no claim %q on the server to end", key)
		}
	}
}

// TestRedisClaimsAcrossSkewedClocks: two instances whose clocks disagree
// by ten minutes, far more than a claim's TTL, cannot take or drop each
// other's live claims. Before, a claim's expiry was written by the taker's
// clock and judged by the next caller's: the instance ahead took the live
// claim of the one behind, and dropped it on a release.
func TestRedisClaimsAcrossSkewedClocks(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	open := opener(t, redisConfig(srv))
	behindClock := clocktest.New(time.Now().Add(-10 * time.Minute))
	aheadClock := clocktest.New(time.Now())
	behind, ahead := open(behindClock).Claims(), open(aheadClock).Claims()
	ctx := t.Context()
	claim := func(c store.Claims, clk *clocktest.Fake, key string, want bool) time.Time {
		t.Helper()
		expires := clk.Now().Add(time.Minute)
		if took, err := c.Claim(ctx, key, expires); err != nil || took != want {
			t.Fatalf("Claim(%q) = %v, %v; want %v", key, took, err, want)
		}
		return expires
	}
	claim(behind, behindClock, "ev/behind", true)
	claim(ahead, aheadClock, "ev/behind", false)
	if renewed, err := ahead.Renew(ctx, "ev/behind", aheadClock.Now(), aheadClock.Now().Add(time.Hour)); err != nil || renewed {
		t.Fatalf("Renew of the other instance's live claim = %v, %v; want refused", renewed, err)
	}
	if err := ahead.Release(ctx, "ev/behind", aheadClock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	claim(ahead, aheadClock, "ev/behind", false) // the release left it
	held := claim(ahead, aheadClock, "ev/ahead", true)
	claim(behind, behindClock, "ev/ahead", false)
	// Each instance still renews and releases its own.
	if renewed, err := ahead.Renew(ctx, "ev/ahead", held, aheadClock.Now().Add(time.Hour)); err != nil || !renewed {
		t.Fatalf("Renew of its own claim = %v, %v; want renewed", renewed, err)
	}
	if err := ahead.Release(ctx, "ev/ahead", aheadClock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	claim(behind, behindClock, "ev/ahead", true)
}

// TestRedisEarlierVersionsProbeHoldsNothing: during a rolling upgrade, a
// key an earlier version probed (a dedupe's look for a done marker: a
// claim until 1970-01-01T00:00:01, which that version stored for a
// minute) is free to a new instance, while an earlier version's live claim
// still holds. Before, the probe's value read as another instance's live
// claim: the retry of an event whose handling failed on an earlier
// instance found it done and was dropped.
func TestRedisEarlierVersionsProbeHoldsNothing(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	ctx := t.Context()
	live := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	for key, value := range map[string]string{"ev/probed": "1 123456789000000000", "ev/live": live + " 123456789000000000"} {
		if err := rc.Set(ctx, cfg.RedisPrefix+"claim:"+key, value, 2*time.Minute).Err(); err != nil { // as that version stored them
			t.Fatal(err)
		}
	}
	c := opener(t, cfg)(clock.System).Claims()
	for key, want := range map[string]bool{"ev/probed": true, "ev/live": false} {
		if free, err := c.Claim(ctx, key, time.Unix(1, 0)); err != nil || free != want {
			t.Fatalf("probe of %s, as an earlier version left it: free %v, %v; want %v", key, free, err, want)
		}
	}
}

func TestRedisAppendSurvivesServerKill(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendFsync: "always"})
	cfg := redisConfig(srv)
	ctx := context.Background()
	s, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for i := range 20 {
		seqs, err := s.Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte(strconv.Itoa(i))}, {Payload: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, seqs...)
	}
	epoch := s.Epoch()
	_ = s.Close()

	srv.Kill(t)
	srv.Restart(t)
	cfg.RedisURL = srv.URL()
	s2 := opener(t, cfg)(clock.System)
	if s2.Epoch() != epoch {
		t.Fatalf("epoch after the server restart %q, before %q", s2.Epoch(), epoch)
	}
	got, err := s2.Ledger().Read(ctx, "t1", 0, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d records after kill -9 of redis-server with appendfsync always, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.Seq != want[i] {
			t.Fatalf("record %d has seq %d, want %d", i, r.Seq, want[i])
		}
	}
	next, err := s2.Ledger().Append(ctx, "t1", []store.Record{{}})
	if err != nil || next[0] <= want[len(want)-1] {
		// Past, not next: a restart changes the primary's replication id,
		// which moves the counter on (appendScript).
		t.Fatalf("Append after the restart = %v, %v; want a seq past %d", next, err, want[len(want)-1])
	}
}

// The pipeline sends scripts by their SHA; after the server's script cache
// is flushed a pipelined call is answered NOSCRIPT and must be sent again
// with its body, so appends, reads and acks keep working.
func TestRedisPipelineSurvivesScriptFlush(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	s := opener(t, redisConfig(srv))(clock.System)
	l := s.Ledger()
	first, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	next, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("b")}})
	if err != nil || next[0] != first[0]+1 {
		t.Fatalf("Append after SCRIPT FLUSH = %v, %v; want seq %d", next, err, first[0]+1)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if recs, err := l.Read(ctx, "t1", 0, 10, 1); err != nil || len(recs) != 1 || recs[0].Seq != first[0] {
		t.Fatalf("Read after SCRIPT FLUSH = %v, %v; want seq %d alone", recs, err, first[0])
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Ack(ctx, "t1", first[0], next[0]); err != nil || n != 2 {
		t.Fatalf("Ack after SCRIPT FLUSH = %d, %v; want 2 removed", n, err)
	}
}

// TestRedisRecordOfAnOlderVersion: a ledger record stored by a version
// that wrote no generation (no field g) reads back with generation zero,
// its other fields whole.
func TestRedisRecordOfAnOlderVersion(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	cfg := redisConfig(srv)
	s := opener(t, cfg)(clock.System)
	l := s.Ledger()
	first, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("a"), Generation: 42}})
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	received := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: cfg.RedisPrefix + "log:{t1}", ID: fmt.Sprintf("0-%d", first[0]+1),
		Values: []any{"k", 3, "p", "discord", "s", "sk", "c", "c1", "r", received.UnixMicro(), "d", "old"}}).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := l.Read(ctx, "t1", 0, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Generation != 42 {
		t.Fatalf("read %+v, want the appended record of generation 42 and the older version's", got)
	}
	if r := got[1]; r.Generation != 0 || r.Kind != 3 || r.Platform != "discord" || r.SessionKey != "sk" || r.ChatID != "c1" ||
		string(r.Payload) != "old" || !r.Received.Equal(received) {
		t.Fatalf("the older version's record read as %+v, want generation 0 and its fields", r)
	}
}

// TestRedisPublishAllKeepsOrder: the redis backend's PublishAll (the
// cluster layer's batched outbox) delivers every message, in order, across
// channels and over more than one pipeline; a bad channel name fails alone.
func TestRedisPublishAllKeepsOrder(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := opener(t, redisConfig(srv))(clock.System)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, stopA, err := s.PubSub().Subscribe(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer stopA()
	b, stopB, err := s.PubSub().Subscribe(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer stopB()
	var msgs []store.Message
	for i := range 200 {
		msgs = append(msgs, store.Message{Channel: []string{"a", "b"}[i%2], Msg: fmt.Appendf(nil, "%d", i)})
	}
	msgs = append(msgs, store.Message{Channel: "", Msg: []byte("no channel")})
	failed, err := s.PubSub().(store.BatchPublisher).PublishAll(ctx, msgs)
	if failed != 1 || err == nil {
		t.Fatalf("PublishAll = %d, %v; want the one message without a channel failed", failed, err)
	}
	for i := range 200 {
		ch := []<-chan []byte{a, b}[i%2]
		select {
		case m := <-ch:
			if string(m) != fmt.Sprint(i) {
				t.Fatalf("message %d arrived as %q", i, m)
			}
		case <-ctx.Done():
			t.Fatalf("timed out waiting for message %d", i)
		}
	}
}

// TestRedisCallsEndWithTheirContext: a call to a server that does not
// answer (here: CLIENT PAUSE) ends with its caller's deadline, not with the
// client's read timeout or when the server answers again: a vault lookup on
// the way to a platform call, a lease renewal, a claim keep the deadline
// their caller gave them.
func TestRedisCallsEndWithTheirContext(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	cfg.RedisReplicaTimeout = time.Minute // and so a read timeout past the pause
	s := opener(t, cfg)(clock.System)
	admin := srv.Client(t)
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "30000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(ctx context.Context) error{
		"capability get": func(ctx context.Context) error { _, _, err := s.Capabilities().Get(ctx, "k"); return err },
		"owner set": func(ctx context.Context) error {
			return s.Owners().Set(ctx, "t1", "s", store.Owner{Instance: "a"}, time.Minute)
		},
		"lease acquire": func(ctx context.Context) error {
			_, _, err := s.Leases().Acquire(ctx, "l", "a", time.Minute)
			return err
		},
		"claim": func(ctx context.Context) error {
			_, err := s.Claims().Claim(ctx, "c", time.Now().Add(time.Minute))
			return err
		},
		"registry get": func(ctx context.Context) error { _, _, err := s.Registry().Get(ctx, "ns", "k"); return err },
	} {
		endsWithItsDeadline(t, name, call)
	}
}

// TestRedisPipelinedCallsEndWithTheirContext: a pipelined call (an append,
// a capability write) stops waiting for a server that does not answer when
// its caller's deadline passes, and an append refused so is removed once
// the server has it, so its records are not delivered besides the source's
// retry; a claim refused so is released.
func TestRedisPipelinedCallsEndWithTheirContext(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	cfg.RedisReplicaTimeout = time.Minute // and so a read timeout past the pause
	s := opener(t, cfg)(clock.System)
	if _, err := s.Ledger().Append(context.Background(), "t1", []store.Record{{Payload: []byte("indexed")}}); err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(t)
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(ctx context.Context) error{
		"append": func(ctx context.Context) error {
			_, err := s.Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte("refused")}})
			return err
		},
		"capability put": func(ctx context.Context) error {
			return s.Capabilities().Put(ctx, "k", []byte("v"), time.Now().Add(time.Minute))
		},
		"claim": func(ctx context.Context) error {
			_, err := s.Claims().Claim(ctx, "c", time.Now().Add(time.Hour))
			return err
		},
	} {
		endsWithItsDeadline(t, name, call)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		recs, err := s.Ledger().Read(context.Background(), "t1", 0, 10, 0)
		if err == nil && len(recs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the pause: ledger %v, %v; want only the record appended before it", recs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The claim its caller gave up on, taken once the server ran it, is
	// released: before, it refused every other caller for its hour.
	for {
		took, err := s.Claims().Claim(context.Background(), "c", time.Now().Add(time.Minute))
		if err == nil && took {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the pause: claim %v, %v; want the claim given up on released", took, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// endsWithItsDeadline runs call under a 200 ms deadline on a paused server
// and fails t unless it returns an error within 15 s.
func endsWithItsDeadline(t *testing.T, name string, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("%s: succeeded only once the server answered again, after its deadline", name)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: still waiting for the paused server 15s after its 200ms deadline", name)
	}
}

// TestRedisQueuedCallsEndWithTheirContext: behind a pipeline the server
// does not answer, more calls than a pipeline holds queue up; each, the
// ones still waiting for room in the queue too, returns once its deadline
// passes.
func TestRedisQueuedCallsEndWithTheirContext(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	cfg.RedisReplicaTimeout = time.Minute // and so a read timeout past the pause
	s := opener(t, cfg)(clock.System)
	t.Cleanup(func() { srv.Kill(t) }) // before the store closes: the queue then fails at once
	admin := srv.Client(t)
	if err := admin.Do(context.Background(), "CLIENT", "PAUSE", "30000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	const calls = 3000 // well over the pipeline's queue of 1024
	done := make(chan error, calls)
	for i := range calls {
		go func() { done <- s.Capabilities().Put(ctx, strconv.Itoa(i), []byte("v"), time.Now().Add(time.Minute)) }()
	}
	timeout := time.After(15 * time.Second)
	for i := range calls {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a capability write succeeded on the paused server")
			}
		case <-timeout:
			t.Fatalf("%d of %d capability writes still waiting 15s after their 500ms deadline", calls-i, calls)
		}
	}
}

// TestRedisReadRemovesAnEntryItDidNotWrite: Read meets a stream entry the
// connector did not write (XADD ... *, an id above all of its own),
// removes it and reports it (*UnreadableRecord with ForeignID, Seq the
// record before it), and the tenant's appends go on after it. Read failed
// at it for good before, and so did every Append.
func TestRedisReadRemovesAnEntryItDidNotWrite(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	cfg := redisConfig(srv)
	l := opener(t, cfg)(clock.System).Ledger()
	first, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: cfg.RedisPrefix + "log:{t1}", ID: "*", Values: []any{"d", "x"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Read(ctx, "t1", 0, 10, 0)
	var bad *store.UnreadableRecord
	if !errors.As(err, &bad) || bad.ForeignID != id || bad.Seq != first[0] || len(got) != 1 {
		t.Fatalf("Read = %+v, %v; want the record before and entry %s reported after seq %d", got, err, id, first[0])
	}
	next, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("b")}})
	if err != nil {
		t.Fatalf("Append after the entry was removed: %v", err)
	}
	if got, err = l.Read(ctx, "t1", 0, 10, 0); err != nil || len(got) != 2 || got[1].Seq != next[0] {
		t.Fatalf("Read = %+v, %v; want the two appended records", got, err)
	}
}

// TestRedisTrimLeavesAnEntryItDidNotWriteToRead: Trim passes over no
// stream entry the connector did not write: it stops there, and Read then
// removes it, after which appends go on. Trim removed it before and failed
// (an id that is no seq), leaving the stream's top id above every append.
func TestRedisTrimLeavesAnEntryItDidNotWriteToRead(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	cfg := redisConfig(srv)
	l := opener(t, cfg)(clock.System).Ledger()
	if _, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("a"), Received: time.Now().Add(-2 * time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: cfg.RedisPrefix + "log:{t1}", ID: "*", Values: []any{"d", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if dropped, err := l.Trim(ctx, "t1", store.Bounds{MaxAge: time.Hour}); err != nil || len(dropped) != 1 {
		t.Fatalf("Trim = %+v, %v; want the expired record dropped", dropped, err)
	}
	var bad *store.UnreadableRecord
	if _, err := l.Read(ctx, "t1", 0, 10, 0); !errors.As(err, &bad) || bad.ForeignID == "" {
		t.Fatalf("Read: %v, want the entry reported", err)
	}
	if _, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("b")}}); err != nil {
		t.Fatalf("Append after Read removed the entry: %v", err)
	}
}

// TestRedisSeqsNeverGoBackAfterAFailover: a record the primary numbered
// (and a driver's Tail may have read, or a refused append's removal may
// name) but never replicated is gone once a replica is promoted; the
// promoted replica's counter is behind, and before the next append got
// that seq again: a bufferId reused, and a confirmed record a Tail past
// it would skip.
func TestRedisSeqsNeverGoBackAfterAFailover(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	ctx := context.Background()
	cfg := redisConfig(primary)
	old := opener(t, cfg)(clock.System).Ledger()
	if _, err := old.Append(ctx, "t1", []store.Record{{Payload: []byte("replicated")}}); err != nil {
		t.Fatal(err)
	}
	if n, err := primary.Client(t).Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	if err := replica.Client(t).ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	lost, err := old.Append(ctx, "t1", []store.Record{{Payload: []byte("lost")}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := old.Read(ctx, "t1", 0, 10, 0); err != nil || len(got) != 2 {
		t.Fatalf("the old primary read %+v, %v; want the replicated record and the lost one", got, err)
	}
	cfg.RedisURL = replica.URL()
	promoted := opener(t, cfg)(clock.System).Ledger()
	next, err := promoted.Append(ctx, "t1", []store.Record{{Payload: []byte("confirmed")}})
	if err != nil {
		t.Fatal(err)
	}
	if next[0] <= lost[0] {
		t.Fatalf("the promoted replica numbered its first record %d, not past %d, the lost one's", next[0], lost[0])
	}
	got, err := promoted.Read(ctx, "t1", lost[0], 10, 0)
	if err != nil || len(got) != 1 || string(got[0].Payload) != "confirmed" {
		t.Fatalf("read past the lost record: %+v, %v; want the confirmed one", got, err)
	}
}

// TestRedisTenantKeysLostWhileRunning: a tenant whose keys are lost while
// instances run (a failover before its first append reached a replica, a
// server restarted without its data, here deleted) is listed by Tenants
// again once an instance that appended for it appends again, and an
// instance that gave or read its seqs does not give them out again: the
// numbering skips as after a failover. Before, the instance remembered
// having added the tenant to the set once (its later records were neither
// recovered by a restart nor swept by age), and the numbering started over
// at 1: bufferIds a gateway had seen came again, and a gateway
// deduplicating by bufferId dropped the new events.
func TestRedisTenantKeysLostWhileRunning(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	a, b := opener(t, cfg)(nil).Ledger(), opener(t, cfg)(nil).Ledger()
	ctx := t.Context()
	for _, tenant := range []string{"t1", "t2"} {
		if _, err := a.Append(ctx, tenant, []store.Record{{Payload: []byte("lost")}, {Payload: []byte("lost")}}); err != nil {
			t.Fatal(err)
		}
	}
	if recs, err := b.Read(ctx, "t2", 0, 10, 0); err != nil || len(recs) != 2 {
		t.Fatalf("read t2: %+v, %v; want its 2 records", recs, err)
	}
	admin := srv.Client(t)
	keys, err := admin.Keys(ctx, cfg.RedisPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasSuffix(k, "epoch") && !strings.HasSuffix(k, "layout") {
			if err := admin.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		l      store.Ledger
		tenant string
	}{{a, "t1"}, {b, "t2"}} {
		seqs, err := c.l.Append(ctx, c.tenant, []store.Record{{Payload: []byte("after")}})
		if err != nil {
			t.Fatal(err)
		}
		if seqs[0] != 1<<32+1 {
			t.Fatalf("%s's append after its keys were lost got seq %d; want %d, past those given before", c.tenant, seqs[0], uint64(1<<32+1))
		}
	}
	if tenants, err := a.Tenants(ctx); err != nil || len(tenants) != 2 {
		t.Fatalf("tenants after the keys were lost and an append: %v, %v; want [t1 t2]", tenants, err)
	}
}

// TestRedisTenantKeysLostBeforeStart: a tenant whose keys are lost while
// the set of tenants keeps it (a Cluster shard failing over, or restarted
// without its data, apart from the set's; here deleted) is not numbered
// from 1 again by an instance that never gave or read one of its seqs.
// Before, a store opened after the loss gave out seq 1 again: a bufferId
// a gateway had seen.
func TestRedisTenantKeysLostBeforeStart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	ctx := t.Context()
	if _, err := opener(t, cfg)(nil).Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte("lost")}}); err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(t)
	keys, err := admin.Keys(ctx, cfg.RedisPrefix+"*{t1}").Result()
	if err != nil || len(keys) < 3 {
		t.Fatalf("t1's keys: %v, %v", keys, err)
	}
	if err := admin.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	l := opener(t, cfg)(nil).Ledger()
	seqs, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("after")}})
	if err != nil {
		t.Fatal(err)
	}
	if seqs[0] != 1<<32+1 {
		t.Fatalf("append after t1's keys were lost got seq %d; want %d, past those given before", seqs[0], uint64(1<<32+1))
	}
	if seqs, err := l.Append(ctx, "t2", []store.Record{{Payload: []byte("new")}}); err != nil || seqs[0] != 1 {
		t.Fatalf("a new tenant's first append: %v, %v; want seq 1", seqs, err)
	}
}

// TestRedisTenantsRepairsTheSet: a tenant an instance appended for, gone
// from the set of tenants (on a Cluster the set's shard failed over before
// it had the SADD, or restarted without its data; here removed), is listed
// and added back by that instance's next Tenants. Before, no instance
// added it again until it restarted, so a restart of every instance did
// not recover the tenant's records and the sweep never aged them out.
func TestRedisTenantsRepairsTheSet(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	ctx := t.Context()
	l := opener(t, cfg)(nil).Ledger()
	if _, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("kept")}}); err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(t)
	if err := admin.Del(ctx, cfg.RedisPrefix+"ledgers").Err(); err != nil {
		t.Fatal(err)
	}
	if tenants, err := l.Tenants(ctx); err != nil || !slices.Equal(tenants, []string{"t1"}) {
		t.Fatalf("tenants after the set was lost: %v, %v; want [t1]", tenants, err)
	}
	if tenants, err := opener(t, cfg)(nil).Ledger().Tenants(ctx); err != nil || !slices.Equal(tenants, []string{"t1"}) {
		t.Fatalf("a new instance's tenants after the set was repaired: %v, %v; want [t1]", tenants, err)
	}
}

// TestRedisTenantsPassesOverAForeignLog: a tenant's log key overwritten
// with a key of another type (by hand or another program) is no tenant
// with records, and the others are still listed; the tenant's next append
// replaces it. Before, Tenants failed with WRONGTYPE, and with it every
// tenant's recovery and age sweep, and every append of the tenant.
func TestRedisTenantsPassesOverAForeignLog(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	ctx, admin := t.Context(), srv.Client(t)
	l := opener(t, cfg)(nil).Ledger()
	for _, tenant := range []string{"t1", "t2"} {
		if _, err := l.Append(ctx, tenant, []store.Record{{Payload: []byte("kept")}}); err != nil {
			t.Fatal(err)
		}
	}
	key := cfg.RedisPrefix + "log:{t2}"
	if err := cmp.Or(admin.Del(ctx, key).Err(), admin.Set(ctx, key, "x", 0).Err()); err != nil {
		t.Fatal(err)
	}
	if tenants, err := l.Tenants(ctx); err != nil || !slices.Equal(tenants, []string{"t1"}) {
		t.Fatalf("tenants beside a foreign log: %v, %v; want [t1]", tenants, err)
	}
	// The tenant's next append replaces the key; before, every append of
	// the tenant failed.
	seqs, err := l.Append(ctx, "t2", []store.Record{{Payload: []byte("again")}})
	if err != nil {
		t.Fatalf("append over a foreign log: %v", err)
	}
	if recs, err := l.Read(ctx, "t2", 0, 10, 0); err != nil || len(recs) != 1 || recs[0].Seq != seqs[0] {
		t.Fatalf("read after the append over a foreign log: %+v, %v; want seq %d alone", recs, err, seqs[0])
	}
	if st, err := l.Stats(ctx, "t2"); err != nil || st != (store.Stats{Entries: 1, Bytes: 5}) {
		t.Fatalf("stats after the append over a foreign log: %+v, %v; want 1 entry of 5 bytes", st, err)
	}
}

// TestRedisAnswersRotateByAge: a tenant's answers hash (answerLua) becomes
// the older one once it is older than the resend window, not only at 1024
// answers, and the older one goes at the next such turn. Before, each call
// renewed its PX, so a tenant calling once a minute kept up to 2048
// answers (about 150 KB) long past any resend.
func TestRedisAnswersRotateByAge(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	s := opener(t, cfg)(nil)
	l, ctx := s.Ledger(), t.Context()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	answers, older := cfg.RedisPrefix+"answers:{t1}", cfg.RedisPrefix+"oldanswers:{t1}"
	window := store.ResendWindow(s)
	lens := func() (int64, int64) {
		t.Helper()
		a, err := c.HLen(ctx, answers).Result()
		if err != nil {
			t.Fatal(err)
		}
		o, err := c.HLen(ctx, older).Result()
		if err != nil {
			t.Fatal(err)
		}
		return a, o
	}
	// Each hash holds its answers and the field '' that makes it a
	// hashtable: a listpack's HGET scans all its answers.
	for i, want := range [][2]int64{{2, 0}, {2, 2}, {2, 2}} {
		if _, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		if a, o := lens(); a != want[0] || o != want[1] {
			t.Fatalf("after append %d: %d fields, %d older; want %d and %d", i+1, a, o, want[0], want[1])
		}
		if enc, err := c.ObjectEncoding(ctx, answers).Result(); err != nil || enc != "hashtable" {
			t.Fatalf("after append %d: answers encoded %q, %v; want hashtable", i+1, enc, err)
		}
		// The hash a window old (what the clock would do): the next call
		// starts another.
		if err := c.PExpire(ctx, answers, window-time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRedisForeignValuesDoNotStall: a lease key or a registry entry holding
// a value the connector did not write (set by hand or another program)
// does not stop the lease or the namespace for good, and holds no lease.
// Before, every Acquire failed with a script error (a value without ":")
// or a corrupt token until the key expired, which without a TTL is never,
// Holder failed on it, and every List of the namespace failed on the one
// entry. A number alone ("7") Holder took for a lease held by "" while
// Acquire took it over. A token of digits past a uint64 (20 of them)
// failed every Acquire as corrupt until the key expired; one of 20 digits
// or more that a uint64 holds (leading zeros) Holder took for held while
// Acquire took it over. A fencing token counter holding no integer failed
// every Acquire of the free lease.
func TestRedisForeignValuesDoNotStall(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	s, ctx := opener(t, cfg)(nil), t.Context()
	admin := srv.Client(t)
	for i, v := range []string{"garbage", "x:someone", "7", "99999999999999999999:someone", "000000000000000000001:someone"} {
		name := fmt.Sprintf("job%d", i)
		if err := admin.Set(ctx, cfg.RedisPrefix+"lease:{"+name+"}", v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, held, err := s.Leases().Holder(ctx, name); err != nil || held {
			t.Fatalf("holder of the lease value %q: %v, %v; want none", v, held, err)
		}
		if l, ok, err := s.Leases().Acquire(ctx, name, "me", time.Minute); err != nil || !ok || l.Holder != "me" {
			t.Fatalf("acquire over the lease value %q: %+v, %v, %v; want it taken", v, l, ok, err)
		}
	}
	// A fencing token counter INCR does not take moves past the tokens
	// given before; before, every Acquire of the free lease failed. So did
	// one over a number past INCR's range (the counter moved past what a
	// token's digits hold), until this sitting's second look.
	for _, v := range []string{"garbage", "hash", "99999999999999999999999", "9223372036854775807"} {
		name := "fenced-" + v
		held, ok, err := s.Leases().Acquire(ctx, name, "me", time.Minute)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		if err := s.Leases().Release(ctx, name, held); err != nil {
			t.Fatal(err)
		}
		key := cfg.RedisPrefix + "leasetoken:{" + name + "}"
		if v == "hash" {
			err = cmp.Or(admin.Del(ctx, key).Err(), admin.HSet(ctx, key, "f", "v").Err())
		} else {
			err = admin.Set(ctx, key, v, 0).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
		if l, ok, err := s.Leases().Acquire(ctx, name, "me", time.Minute); err != nil || !ok || l.Token <= held.Token {
			t.Fatalf("acquire over the token counter %q: %+v, %v, %v; want a token past %d", v, l, ok, err, held.Token)
		}
		if l, ok, err := s.Leases().Acquire(ctx, name, "other", time.Minute); err != nil || ok {
			t.Fatalf("acquire by another of the lease taken over the token counter %q: %+v, %v, %v; want it refused", v, l, ok, err)
		}
	}
	if _, err := s.Registry().Put(ctx, "ns", "good", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := admin.HSet(ctx, cfg.RedisPrefix+"registry:{ns}", "bad", "short").Err(); err != nil {
		t.Fatal(err)
	}
	if es, _, err := s.Registry().List(ctx, "ns"); err != nil || len(es) != 1 || es[0].Key != "good" {
		t.Fatalf("list beside a foreign entry: %+v, %v; want the entry good", es, err)
	}
}

// TestRedisNumberedFollowsASkip: when the raise of a tenant's numbered
// entry after a skip (a failover, here a changed replication id) fails,
// the instance's next append raises it. Before, only the skipped append
// raised it, so once the tenant's keys were lost an instance opened after
// gave out the seqs past the skip again.
func TestRedisNumberedFollowsASkip(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	ctx, admin := t.Context(), srv.Client(t)
	l := opener(t, cfg)(nil).Ledger()
	if _, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("before")}}); err != nil {
		t.Fatal(err)
	}
	numbered := cfg.RedisPrefix + "numbered{" + cfg.RedisPrefix + "ledgers}"
	if err := admin.Set(ctx, cfg.RedisPrefix+"replid:{t1}", "0", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Rename(ctx, numbered, "kept").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, numbered, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("skipped")}}); err == nil {
		t.Fatal("append whose numbered raise failed succeeded; want it refused")
	}
	if err := admin.Rename(ctx, "kept", numbered).Err(); err != nil {
		t.Fatal(err)
	}
	given, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("after")}})
	if err != nil || given[0] <= 1<<32 {
		t.Fatalf("append after the skip: %v, %v; want a seq past %d", given, err, uint64(1<<32))
	}
	keys, err := admin.Keys(ctx, cfg.RedisPrefix+"*{t1}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	seqs, err := opener(t, cfg)(nil).Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte("lost")}})
	if err != nil || seqs[0] <= given[0] {
		t.Fatalf("append after t1's keys were lost: %v, %v; want a seq past %d, given before", seqs, err, given[0])
	}
}

// TestRedisForeignSeqCounter: a tenant's seq counter overwritten with a
// value that is no number (by hand or another program; a key of another
// type, which after a failover failed the appends and the foreign entry's
// removal still), or deleted while the stream keeps entries, maybe beside
// an entry the connector did not write, does not stop the tenant's appends,
// and the numbering moves past every seq given. Before, every append of the
// tenant failed for good: a script error, an id below the stream's top one,
// and Read failed to drop the foreign entry (XSETID below the top); after
// an append the foreign entry refused (its INCRBY kept), appends failed
// until the counter passed the top entry, then numbered on from it without
// the skip.
func TestRedisForeignSeqCounter(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	admin := srv.Client(t)
	for _, c := range []struct {
		name    string
		counter string // "": deleted
		foreign bool
	}{{"no number", "garbage", false}, {"deleted", "", false}, {"deleted beside a foreign entry", "", true}, {"a hash, after a failover", "hash", true}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := redisConfig(srv)
			ctx := t.Context()
			l := opener(t, cfg)(nil).Ledger()
			given, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("a")}, {Payload: []byte("b")}})
			if err != nil {
				t.Fatal(err)
			}
			seqKey := cfg.RedisPrefix + "seq:{t1}"
			switch c.counter {
			case "hash":
				// Another program's key of another type; the replid key
				// gone as a failover has the first append find it.
				if err = admin.Del(ctx, seqKey, cfg.RedisPrefix+"replid:{t1}").Err(); err == nil {
					err = admin.HSet(ctx, seqKey, "x", "y").Err()
				}
			case "":
				err = admin.Del(ctx, seqKey, cfg.RedisPrefix+"numbered{"+cfg.RedisPrefix+"ledgers}").Err()
			default:
				err = admin.Set(ctx, seqKey, c.counter, 0).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			fresh := opener(t, cfg)(nil).Ledger()
			if c.foreign {
				if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: cfg.RedisPrefix + "log:{t1}", ID: "5-0", Values: []any{"x", "y"}}).Err(); err != nil {
					t.Fatal(err)
				}
				// Refused below the foreign entry's id, after the counter's
				// INCRBY; another instance's Read removes the entry.
				_, _ = fresh.Append(ctx, "t1", []store.Record{{Payload: []byte("c")}})
				var unreadable *store.UnreadableRecord
				if _, err := opener(t, cfg)(nil).Ledger().Read(ctx, "t1", 0, 10, 0); !errors.As(err, &unreadable) || unreadable.ForeignID != "5-0" {
					t.Fatalf("read beside the foreign entry: %v; want it dropped", err)
				}
			}
			seqs, err := fresh.Append(ctx, "t1", []store.Record{{Payload: []byte("c")}})
			if err != nil || seqs[0] <= given[1] {
				t.Fatalf("append: %v, %v; want a seq past %d", seqs, err, given[1])
			}
			recs, err := l.Read(ctx, "t1", 0, 10, 0)
			if err != nil || len(recs) != 3 || recs[2].Seq != seqs[0] {
				t.Fatalf("read after: %+v, %v; want the 3 records", recs, err)
			}
		})
	}
}

// TestRedisFirstAppendRoundTrips: an instance's first append of a tenant
// whose numbered entry is in the block of its seqs makes two round trips
// (the entry read, the append), not three: the entry needs no raise.
// Before, every instance's first append of every tenant raised it again.
func TestRedisFirstAppendRoundTrips(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	ctx, admin := t.Context(), srv.Client(t)
	if _, err := opener(t, cfg)(nil).Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	l := opener(t, cfg)(nil).Ledger()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	stats, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stats, "cmdstat_evalsha:calls=2,") {
		t.Fatalf("scripts run by a first append of a known tenant:\n%s\nwant 2 EVALSHA calls", stats)
	}
}

// TestRedisForeignRegistryRevision: a namespace's revision overwritten
// with a value INCR does not take (no number, a negative one, a key of
// another type) moves past the revisions its entries hold and the
// namespace goes on. Before, every write, List and Revision of the
// namespace failed until someone deleted the key by hand. So does one
// deleted while the entries stay; before, it started over at 1, below
// them.
func TestRedisForeignRegistryRevision(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	s, ctx, admin := opener(t, cfg)(nil), t.Context(), srv.Client(t)
	reg, key := s.Registry(), cfg.RedisPrefix+"registryrev:{ns}"
	last, err := reg.Put(ctx, "ns", "k", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"garbage", "-3", "hash", "deleted"} {
		switch bad {
		case "hash":
			err = cmp.Or(admin.Del(ctx, key).Err(), admin.HSet(ctx, key, "f", "v").Err())
		case "deleted": // by hand, the entries kept: before, it started over at 1
			err = admin.Del(ctx, key).Err()
		default:
			err = admin.Set(ctx, key, bad, 0).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, rev, err := reg.List(ctx, "ns"); err != nil || rev <= last {
			t.Fatalf("list over the revision %q: rev %d, %v; want one past %d", bad, rev, err, last)
		}
		rev, err := reg.Put(ctx, "ns", "k", []byte(bad))
		if err != nil || rev <= last {
			t.Fatalf("put over the revision %q: %d, %v; want a revision past %d", bad, rev, err, last)
		}
		if now, err := reg.Revision(ctx, "ns"); err != nil || now != rev {
			t.Fatalf("revision after the put over %q: %d, %v; want %d", bad, now, err, rev)
		}
		last = rev
	}
}

// TestRedisForeignRegistryRevisionOverAForeignValue: a revision that is no
// number, in a namespace holding a value another program wrote (which
// List still returns as an entry), moves past the entries' revisions only: the foreign
// value's first eight bytes are no revision. Before, they were taken for
// one, and the revision moved to 10^18 or more (past what INCR and the
// check take: set again by every read, back below a deletion's) or to a
// negative number no read parses.
func TestRedisForeignRegistryRevisionOverAForeignValue(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	s, ctx, admin := opener(t, cfg)(nil), t.Context(), srv.Client(t)
	reg := s.Registry()
	for _, value := range []string{"hello world", "\xff\xff\xff\xff\xff\xff\xff\xffjunk"} {
		ns := fmt.Sprintf("ns%d", len(value))
		last, err := reg.Put(ctx, ns, "k", []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		err = cmp.Or(admin.HSet(ctx, cfg.RedisPrefix+"registry:{"+ns+"}", "foreign", value).Err(),
			admin.Set(ctx, cfg.RedisPrefix+"registryrev:{"+ns+"}", "garbage", 0).Err())
		if err != nil {
			t.Fatal(err)
		}
		if _, rev, err := reg.List(ctx, ns); err != nil || rev <= last || rev >= 1e18 {
			t.Fatalf("list over %q: rev %d, %v; want one past %d below 10^18", value, rev, err, last)
		}
		put, err := reg.Put(ctx, ns, "k2", []byte("v"))
		if err != nil || put <= last {
			t.Fatalf("put over %q: %d, %v; want past %d", value, put, err, last)
		}
		deleted, err := reg.Delete(ctx, ns, "k2")
		if err != nil || !deleted {
			t.Fatalf("delete over %q: %v, %v", value, deleted, err)
		}
		after, err := reg.Revision(ctx, ns)
		if err != nil || after <= put {
			t.Fatalf("revision after the deletion over %q: %d, %v; want past %d", value, after, err, put)
		}
		if _, rev, err := reg.List(ctx, ns); err != nil || rev != after {
			t.Fatalf("list after the deletion over %q: rev %d, %v; want %d", value, rev, err, after)
		}
	}
}

// TestRedisForeignBytesCounter: a tenant's byte counter overwritten with a
// value INCRBY does not take (no number, a key of another type; by hand or
// another program) is counted again from the stream, and the tenant's
// appends, acks and trims go on. Before, every append of the tenant failed
// after storing its records (delivered, then sent again by the source),
// every ack after removing its entries, and every trim, for good.
func TestRedisForeignBytesCounter(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	ctx, admin := t.Context(), srv.Client(t)
	l, key := opener(t, cfg)(nil).Ledger(), cfg.RedisPrefix+"bytes:{t1}"
	foreign := func(what string) {
		t.Helper()
		var err error
		if what == "hash" {
			err = cmp.Or(admin.Del(ctx, key).Err(), admin.HSet(ctx, key, "f", "v").Err())
		} else {
			err = admin.Set(ctx, key, what, 0).Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	first, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("aaaa")}})
	if err != nil {
		t.Fatal(err)
	}
	foreign("garbage")
	seqs, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("bb")}, {Payload: []byte("c")}})
	if err != nil {
		t.Fatalf("append over the byte counter %q: %v", "garbage", err)
	}
	if st, err := l.Stats(ctx, "t1"); err != nil || st != (store.Stats{Entries: 3, Bytes: 7}) {
		t.Fatalf("stats after the append: %+v, %v; want 3 entries of 7 bytes", st, err)
	}
	foreign("hash")
	if n, err := l.Ack(ctx, "t1", first...); err != nil || n != 1 {
		t.Fatalf("ack over a byte counter of another type: %d, %v; want 1 removed", n, err)
	}
	if st, err := l.Stats(ctx, "t1"); err != nil || st != (store.Stats{Entries: 2, Bytes: 3}) {
		t.Fatalf("stats after the ack: %+v, %v; want 2 entries of 3 bytes", st, err)
	}
	foreign("garbage")
	dropped, err := l.Trim(ctx, "t1", store.Bounds{MaxBytes: 1})
	if err != nil || len(dropped) != 1 || dropped[0].Seq != seqs[0] {
		t.Fatalf("trim over the byte counter %q: %+v, %v; want seq %d dropped", "garbage", dropped, err, seqs[0])
	}
	if st, err := l.Stats(ctx, "t1"); err != nil || st != (store.Stats{Entries: 1, Bytes: 1}) {
		t.Fatalf("stats after the trim: %+v, %v; want 1 entry of 1 byte", st, err)
	}
}

// TestRedisForeignAnswerKeys: a tenant's replication id or answers key
// overwritten with a key of another type (by hand or another program) does
// not stop the tenant: appends, acks and trims go on. Before, every one of
// them failed with WRONGTYPE until someone deleted the key.
func TestRedisForeignAnswerKeys(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	ctx, admin := t.Context(), srv.Client(t)
	l := opener(t, cfg)(nil).Ledger()
	first, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"replid:{t1}", "answers:{t1}", "oldanswers:{t1}"} {
		if err := cmp.Or(admin.Del(ctx, cfg.RedisPrefix+k).Err(), admin.RPush(ctx, cfg.RedisPrefix+k, "x").Err()); err != nil {
			t.Fatal(err)
		}
	}
	seqs, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("b")}, {Payload: []byte("c")}})
	if err != nil {
		t.Fatalf("append over keys of another type: %v", err)
	}
	if n, err := l.Ack(ctx, "t1", first...); err != nil || n != 1 {
		t.Fatalf("ack over keys of another type: %d, %v; want 1 removed", n, err)
	}
	if dropped, err := l.Trim(ctx, "t1", store.Bounds{MaxEntries: 1}); err != nil || len(dropped) != 1 || dropped[0].Seq != seqs[0] {
		t.Fatalf("trim over keys of another type: %+v, %v; want seq %d dropped", dropped, err, seqs[0])
	}
}

// TestRedisForgetDropsADeletedTenant: the ledgers set and the numbered
// hash shrink once a deleted tenant's records are gone (Forget), a store
// that still remembers having indexed the tenant does not add it back, and
// the tenant made again under the name goes on from its last seq and is
// indexed again by its next append, whichever store makes it. Before,
// nothing removed a tenant from either: they grew with every tenant ever
// made.
func TestRedisForgetDropsADeletedTenant(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	ctx := t.Context()
	a, b, c := opener(t, cfg)(nil).Ledger(), opener(t, cfg)(nil).Ledger(), opener(t, cfg)(nil).Ledger()
	var last uint64
	for _, l := range []store.Ledger{a, b, c} {
		seqs, err := l.Append(ctx, "gone", []store.Record{{Payload: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Ack(ctx, "gone", seqs...); err != nil {
			t.Fatal(err)
		}
		last = seqs[0]
	}
	if _, err := a.Append(ctx, "kept", []store.Record{{Payload: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, "held", []store.Record{{Payload: []byte("z")}}); err != nil {
		t.Fatal(err)
	}
	n, err := a.Forget(ctx, func(tenant string) bool { return tenant == "kept" })
	if err != nil || n != 1 {
		t.Fatalf("Forget: %d, %v; want 1 (gone: held has records, kept is kept)", n, err)
	}
	admin := srv.Client(t)
	set, numbered := cfg.RedisPrefix+"ledgers", cfg.RedisPrefix+"numbered{"+cfg.RedisPrefix+"ledgers}"
	index := func() ([]string, []string) {
		t.Helper()
		members, err := admin.SMembers(ctx, set).Result()
		if err != nil {
			t.Fatal(err)
		}
		fields, err := admin.HKeys(ctx, numbered).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(members)
		slices.Sort(fields)
		return members, fields
	}
	if m, f := index(); !slices.Equal(m, []string{"held", "kept"}) || !slices.Equal(f, []string{"held", "kept"}) {
		t.Fatalf("after Forget the set holds %v and the hash %v; want [held kept] in both", m, f)
	}
	if tenants, err := b.Tenants(ctx); err != nil || !slices.Equal(tenants, []string{"held", "kept"}) {
		t.Fatalf("tenants: %v, %v", tenants, err)
	}
	if m, _ := index(); slices.Contains(m, "gone") {
		t.Fatalf("a store that had indexed the forgotten tenant added it back: %v", m)
	}
	seqs, err := c.Append(ctx, "gone", []store.Record{{Payload: []byte("again")}})
	if err != nil {
		t.Fatal(err)
	}
	if seqs[0] <= last {
		t.Fatalf("the tenant made again numbered from %d, after %d", seqs[0], last)
	}
	if m, f := index(); !slices.Contains(m, "gone") || !slices.Contains(f, "gone") {
		t.Fatalf("the tenant's append after Forget left it out of the index: set %v, hash %v", m, f)
	}
	if tenants, err := opener(t, cfg)(nil).Ledger().Tenants(ctx); err != nil || !slices.Contains(tenants, "gone") {
		t.Fatalf("a new instance's tenants: %v, %v; want gone listed", tenants, err)
	}
}

// TestRedisForeignRegistryValue: a registry value another program wrote
// (text: its first eight bytes read as a revision of 2^59 or more) is no
// entry to Get as to List, a swap from none replaces it and a Delete
// removes it (before, it reported none and left it). Before, Get
// returned it as an entry with that revision, and a reader keeping the
// highest revision it saw (Discord's manifests) missed every later change
// until a restart.
func TestRedisForeignRegistryValue(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	s, ctx := opener(t, cfg)(nil), t.Context()
	if err := srv.Client(t).HSet(ctx, cfg.RedisPrefix+"registry:{ns}", "k", "another program's value", "k2", "another").Err(); err != nil {
		t.Fatal(err)
	}
	if e, ok, err := s.Registry().Get(ctx, "ns", "k"); err != nil || ok {
		t.Fatalf("get of a foreign value: %+v, %v, %v; want none", e, ok, err)
	}
	if es, _, err := s.Registry().List(ctx, "ns"); err != nil || len(es) != 0 {
		t.Fatalf("list of a foreign value: %+v, %v; want none", es, err)
	}
	if ok, err := s.Registry().CompareAndSwap(ctx, "ns", "k", nil, []byte("v")); err != nil || !ok {
		t.Fatalf("swap from none over a foreign value: %v, %v; want swapped", ok, err)
	}
	if e, ok, err := s.Registry().Get(ctx, "ns", "k"); err != nil || !ok || string(e.Value) != "v" || e.Rev >= 1<<59 {
		t.Fatalf("get after the swap: %+v, %v, %v; want v at a revision below 2^59", e, ok, err)
	}
	// A swap from an empty entry to none is no Delete: it does not take it
	// for one (before, it did, and removed it).
	if ok, err := s.Registry().CompareAndSwap(ctx, "ns", "k2", []byte{}, nil); err != nil || ok {
		t.Fatalf("swap from an empty entry over a foreign value: %v, %v; want not swapped", ok, err)
	}
	// An admin can remove one: it is there to Delete.
	if ok, err := s.Registry().Delete(ctx, "ns", "k2"); err != nil || !ok {
		t.Fatalf("delete of a foreign value: %v, %v; want deleted", ok, err)
	}
	if n, err := srv.Client(t).HExists(ctx, cfg.RedisPrefix+"registry:{ns}", "k2").Result(); err != nil || n {
		t.Fatalf("foreign value still stored after its deletion: %v, %v", n, err)
	}
}

// TestRedisAppendGivenUpOnKeepsThePruneMarker: an append of a tenant
// Forget dropped, which its caller gave up on (its deadline passed on a
// paused server) and the server ran later, took the prune marker without
// indexing the tenant; the marker stays, so the tenant's next append, from
// any store, indexes it. Without it, a store that had indexed the tenant
// before appended for good outside the set a restart recovers from.
func TestRedisAppendGivenUpOnKeepsThePruneMarker(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := redisConfig(srv)
	cfg.RedisReplicaTimeout = time.Minute // and so a read timeout past the pause
	ctx := context.Background()
	a, b := opener(t, cfg)(clock.System).Ledger(), opener(t, cfg)(clock.System).Ledger()
	seqs, err := b.Append(ctx, "gone", []store.Record{{Payload: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ack(ctx, "gone", seqs...); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Forget(ctx, func(string) bool { return false }); err != nil || n != 1 {
		t.Fatalf("Forget: %d, %v", n, err)
	}
	admin := srv.Client(t)
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	endsWithItsDeadline(t, "append", func(ctx context.Context) error {
		_, err := b.Append(ctx, "gone", []store.Record{{Payload: []byte("given up on")}})
		return err
	})
	marker := cfg.RedisPrefix + "pruned:{gone}"
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := admin.Exists(ctx, marker).Result()
		recs, rerr := b.Read(ctx, "gone", 0, 10, 0)
		if err == nil && n == 1 && rerr == nil && len(recs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the pause: marker %d, %v, records %v, %v; want the marker back and no record", n, err, recs, rerr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := b.Append(ctx, "gone", []store.Record{{Payload: []byte("kept")}}); err != nil {
		t.Fatal(err)
	}
	if tenants, err := opener(t, cfg)(clock.System).Ledger().Tenants(ctx); err != nil || !slices.Equal(tenants, []string{"gone"}) {
		t.Fatalf("a new store's tenants: %v, %v; want [gone]", tenants, err)
	}
}

// TestRedisAppendIndexesUntilTheTakenMarkerIsIndexed: an append took a
// forgotten tenant's prune marker and could neither index the tenant nor
// put the marker back (here its user may no longer SADD or SET; a crash
// after the append does the same); a store that had indexed the tenant
// before Forget then appends for it, and a fresh store (a restart) lists
// the tenant. Before, the taken marker was gone, the second append did not
// index the tenant, and its confirmed record was outside the set a restart
// recovers from.
func TestRedisAppendIndexesUntilTheTakenMarkerIsIndexed(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Users: []string{appACL}})
	cfg := redisConfig(srv)
	ctx := t.Context()
	limited := cfg
	limited.RedisURL = fmt.Sprintf("redis://%s:%s@%s/0", appUser, appPassword, srv.Addr())
	a, c := opener(t, limited)(nil).Ledger(), opener(t, cfg)(nil).Ledger()
	for _, l := range []store.Ledger{a, c} {
		seqs, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Ack(ctx, "t1", seqs...); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := opener(t, cfg)(nil).Ledger().Forget(ctx, func(string) bool { return false }); err != nil || n != 1 {
		t.Fatalf("Forget: %d, %v; want 1", n, err)
	}
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", appUser, "-sadd", "-set").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "t1", []store.Record{{Payload: []byte("not indexed")}}); err == nil {
		t.Fatal("an append whose index was refused succeeded")
	}
	if _, err := c.Append(ctx, "t1", []store.Record{{Payload: []byte("confirmed")}}); err != nil {
		t.Fatal(err)
	}
	if tenants, err := opener(t, cfg)(nil).Ledger().Tenants(ctx); err != nil || !slices.Equal(tenants, []string{"t1"}) {
		t.Fatalf("a fresh store's tenants: %v, %v; want [t1], which holds a confirmed record", tenants, err)
	}
}

// TestRedisForeignPruneMarker: a forgotten tenant's prune marker
// overwritten with a value that is no number or a key of another type (by
// hand or another program) does not stop the tenant's appends: the first
// is stored once, indexes the tenant and removes the marker. Before, the
// append script's INCR of the marker failed after its XADD: every append
// of the tenant failed for good and left its records in the stream, which
// the resent event stored again.
func TestRedisForeignPruneMarker(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	admin := srv.Client(t)
	for _, c := range []struct {
		name string
		set  func(ctx context.Context, key string) error
	}{
		{"no number", func(ctx context.Context, key string) error { return admin.Set(ctx, key, "garbage", 0).Err() }},
		{"a hash", func(ctx context.Context, key string) error {
			if err := admin.Del(ctx, key).Err(); err != nil {
				return err
			}
			return admin.HSet(ctx, key, "x", "y").Err()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := redisConfig(srv)
			ctx := t.Context()
			l := opener(t, cfg)(nil).Ledger()
			seqs, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("a")}})
			if err == nil {
				_, err = l.Ack(ctx, "t1", seqs...)
			}
			if err != nil {
				t.Fatal(err)
			}
			if n, err := l.Forget(ctx, func(string) bool { return false }); err != nil || n != 1 {
				t.Fatalf("Forget: %d, %v; want 1", n, err)
			}
			marker := cfg.RedisPrefix + "pruned:{t1}"
			if err := c.set(ctx, marker); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("b")}}); err != nil {
				t.Fatalf("append over the foreign marker: %v", err)
			}
			if recs, err := l.Read(ctx, "t1", 0, 10, 0); err != nil || len(recs) != 1 {
				t.Fatalf("read: %+v, %v; want the one record", recs, err)
			}
			if n, err := admin.Exists(ctx, marker).Result(); err != nil || n != 0 {
				t.Fatalf("marker: %d, %v; want it gone", n, err)
			}
			if tenants, err := opener(t, cfg)(nil).Ledger().Tenants(ctx); err != nil || !slices.Equal(tenants, []string{"t1"}) {
				t.Fatalf("a fresh store's tenants: %v, %v; want [t1]", tenants, err)
			}
		})
	}
}
