package store

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"connector/internal/clock"
	"connector/internal/redistest"
)

// forgetHook runs before when the unindex script is sent, and after once
// it ran.
type forgetHook struct {
	once          sync.Once
	before, after func()
}

func (h *forgetHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *forgetHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *forgetHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
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
