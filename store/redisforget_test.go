package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"connector/internal/clock"
	"connector/internal/redistest"
)

// forgetHook runs before when the unindex script is sent, and after once
// it ran; fail, if set, answers a command an error instead of sending it.
type forgetHook struct {
	once          sync.Once
	before, after func()
	fail          func(redis.Cmder) error
}

func (h *forgetHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *forgetHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *forgetHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fail != nil {
			if err := h.fail(cmd); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		args := cmd.Args()
		if len(args) < 2 || args[0] != "evalsha" || args[1] != unindexScript.Hash() {
			return next(ctx, cmd)
		}
		run := false
		h.once.Do(func() { run = true })
		if run {
			h.before()
		}
		err := next(ctx, cmd)
		if run {
			h.after()
		}
		return err
	}
}

// TestRedisForgetEndedMidwayReindexes: a sweep whose context ended (a
// shutdown, its deadline) right after it removed a tenant from the index,
// while another store's append had taken the prune marker, indexed the
// tenant and removed the marker just before, still indexes the tenant
// again. Before, it stopped there: the tenant, with a confirmed record,
// was left outside the ledgers set a restart recovers from.
func TestRedisForgetEndedMidwayReindexes(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Backend: BackendRedis, RedisURL: srv.URL(), RedisPrefix: "midway:", Clock: clock.System}
	open := func() *redisStore {
		t.Helper()
		s, err := openRedis(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(), open()
	seqs, err := b.Ledger().Append(t.Context(), "t1", []Record{{Payload: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ledger().Ack(t.Context(), "t1", seqs...); err != nil {
		t.Fatal(err)
	}
	// The sweep's context ends once the tenant left the index.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := unindexScript.Load(t.Context(), a.c).Err(); err != nil {
		t.Fatal(err)
	}
	var appendErr error
	ran := false
	a.c.AddHook(&forgetHook{
		before: func() {
			ran = true
			_, appendErr = b.Ledger().Append(t.Context(), "t1", []Record{{Payload: []byte("confirmed")}})
		},
		after: cancel,
	})
	_, _ = a.Ledger().Forget(ctx, func(string) bool { return false })
	if !ran || appendErr != nil {
		t.Fatalf("the append during the sweep: ran %v, %v", ran, appendErr)
	}
	if tenants, err := open().Ledger().Tenants(t.Context()); err != nil || !slices.Equal(tenants, []string{"t1"}) {
		t.Fatalf("a fresh store's tenants: %v, %v; want [t1], which holds a confirmed record", tenants, err)
	}
}

// TestRedisForgetLooksAgainAfterAFailedLook: a sweep that removed a tenant
// from the index, while another store's append had taken the prune marker,
// indexed the tenant and removed the marker, and then could not look at the
// marker (the network failed), looks again at each next sweep, which fails
// while the look does, and indexes the tenant again. Before, only the appending store's own sweep put it
// back: with that store gone, the tenant, with a confirmed record, stayed
// outside the ledgers set a restart recovers from.
func TestRedisForgetLooksAgainAfterAFailedLook(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Backend: BackendRedis, RedisURL: srv.URL(), RedisPrefix: "relook:", Clock: clock.System}
	open := func() *redisStore {
		t.Helper()
		s, err := openRedis(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := open(), open()
	seqs, err := b.Ledger().Append(t.Context(), "t1", []Record{{Payload: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ledger().Ack(t.Context(), "t1", seqs...); err != nil {
		t.Fatal(err)
	}
	if err := unindexScript.Load(t.Context(), a.c).Err(); err != nil {
		t.Fatal(err)
	}
	var appendErr error
	var cut atomic.Bool
	a.c.AddHook(&forgetHook{
		before: func() {
			_, appendErr = b.Ledger().Append(t.Context(), "t1", []Record{{Payload: []byte("confirmed")}})
		},
		after: func() { cut.Store(true) },
		fail: func(cmd redis.Cmder) error {
			if cut.Load() && cmd.Name() == "get" {
				return errors.New("connection cut")
			}
			return nil
		},
	})
	none := func(string) bool { return false }
	if _, err := a.Ledger().Forget(t.Context(), none); err == nil || appendErr != nil {
		t.Fatalf("the sweep whose look failed: %v, the append during it: %v; want the look's error, no append error", err, appendErr)
	}
	// The next sweep's look fails too: it says so, as the first did
	// (before, it was silent, and so was every sweep after it).
	if _, err := a.Ledger().Forget(t.Context(), none); err == nil || !strings.Contains(err.Error(), "look again") {
		t.Fatalf("the next sweep, whose look failed again: %v; want the look's error", err)
	}
	_ = b.Close() // the appending store is gone
	cut.Store(false)
	if _, err := a.Ledger().Forget(t.Context(), none); err != nil {
		t.Fatalf("the next sweep: %v", err)
	}
	if tenants, err := open().Ledger().Tenants(t.Context()); err != nil || !slices.Equal(tenants, []string{"t1"}) {
		t.Fatalf("a fresh store's tenants: %v, %v; want [t1], which holds a confirmed record", tenants, err)
	}
}
