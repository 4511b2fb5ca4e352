package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"connector/internal/redistest"
)

// One pipeline mixing writes with and without a shorter replica bound
// (waitAtMost, a lease's): each learns whether the replicas had the
// pipeline's writes within its own bound, the others still within
// RedisReplicaTimeout, and a call that does not replicate is not told
// anything about replicas.
func TestExecWaitsForTheReplicasPerBound(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	ctx := context.Background()
	st, err := Open(ctx, Config{
		Backend: BackendRedis, RedisURL: primary.URL(), RedisPrefix: "exec:",
		RedisMinReplicas: 1, RedisReplicaTimeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	s := st.(*redisStore)
	set := func(key string, replicate bool, waitAtMost time.Duration) pipeCall {
		return pipeCall{key: key, replicate: replicate, waitAtMost: waitAtMost, reply: make(chan pipeReply, 1),
			queue: func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return p.Set(ctx, key, "v", 0) }}
	}
	// short is the shorter bound: generous while the replica is online (a
	// WAIT answers once the replica has the writes, so a long bound costs
	// nothing then, and a loaded machine may take more than 300 ms).
	run := func(short time.Duration) []pipeReply {
		calls := []pipeCall{set("exec:full", true, 0), set("exec:short", true, short),
			set("exec:short2", true, short), set("exec:plain", false, 0),
			set("exec:longer", true, time.Hour)}
		if again, _ := s.exec(s.c, calls, false); len(again) > 0 {
			t.Fatalf("%d calls to send again", len(again))
		}
		out := make([]pipeReply, len(calls))
		for i, c := range calls {
			out[i] = <-c.reply
			if err := out[i].cmd.Err(); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		return out
	}

	for i, r := range run(time.Minute) {
		if r.unreplicated != nil {
			t.Fatalf("with the replica online, call %d: %v", i, r.unreplicated)
		}
	}

	replica.Kill(t)
	got := run(300 * time.Millisecond)
	for i, want := range []string{"within 3s", "within 300ms", "within 300ms", "", "within 3s"} {
		err := got[i].unreplicated
		if want == "" {
			if err != nil {
				t.Fatalf("call %d does not replicate, yet: %v", i, err)
			}
			continue
		}
		if !errors.Is(err, ErrNotReplicated) || !strings.Contains(err.Error(), want) {
			t.Fatalf("without the replica, call %d: %v; want ErrNotReplicated %s", i, err, want)
		}
	}
}
