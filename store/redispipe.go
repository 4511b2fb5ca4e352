package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxPipeline bounds the commands in one pipeline.
const maxPipeline = 1024

// pipeCall is one command sent through the pipeline, and where its reply
// goes.
type pipeCall struct {
	// queue adds the command to the pipeline and returns its reply.
	queue func(ctx context.Context, p redis.Pipeliner) redis.Cmder
	// reload queues a script with its body: a script the server answered
	// NOSCRIPT (its script cache was flushed) is sent again this way,
	// which loads it. Nil for a command that is not a script.
	reload func(ctx context.Context, p redis.Pipeliner) redis.Cmder
	// key is a key the command touches: on a Redis Cluster it goes to the
	// primary serving that key's slot.
	key string
	// replicate marks a write a platform's confirmation waits for, or a
	// lease's: with Config.RedisMinReplicas its reply also waits for the
	// replicas.
	replicate bool
	// waitAtMost, when above 0, bounds a replicate call's wait for the
	// replicas below Config.RedisReplicaTimeout (a lease's, by its renewal
	// period).
	waitAtMost time.Duration
	reply      chan pipeReply
}

// pipeReply is a pipelined command's reply.
type pipeReply struct {
	cmd redis.Cmder
	// unreplicated, for a replicate call that succeeded, says the replicas
	// did not acknowledge it in time (ErrNotReplicated).
	unreplicated error
	// late, for a call its caller stopped waiting for (its context ended
	// first), is where the reply will still come: the call was queued, so
	// it is sent.
	late <-chan pipeReply
}

// err is the reply's error: the command's, else the replicas'.
func (r pipeReply) err() error {
	if err := r.cmd.Err(); err != nil {
		return err
	}
	return r.unreplicated
}

// pipelined sends call in the next pipeline and returns its reply. It
// shares one round trip with every command queued at the same time,
// whatever their tenants; a script stays one atomic call on the server.
func (s *redisStore) pipelined(ctx context.Context, call pipeCall) pipeReply {
	return s.pipelinedAll(ctx, []pipeCall{call})[0]
}

// pipelinedAll queues calls together, so they go in the same pipeline
// (unless it fills up), and returns their replies in order. It waits for
// them until ctx ends; the replies it did not wait for are ctx's error,
// with late set.
func (s *redisStore) pipelinedAll(ctx context.Context, calls []pipeCall) []pipeReply {
	out := make([]pipeReply, len(calls))
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i] = pipeReply{cmd: failedCmd(ctx, err)}
		}
		return out
	}
	for i := range calls {
		calls[i].reply = make(chan pipeReply, 1)
		if err := s.pipe.submit(ctx, calls[i]); err != nil {
			out[i] = pipeReply{cmd: failedCmd(ctx, err)}
		}
	}
	for i, c := range calls {
		if out[i].cmd != nil {
			continue
		}
		select {
		case out[i] = <-c.reply:
		case <-ctx.Done():
			out[i] = pipeReply{cmd: failedCmd(ctx, ctx.Err()), late: c.reply}
		}
	}
	return out
}

// scriptCall is the pipelined call of script on keys, routed by the first.
func scriptCall(script *redis.Script, keys []string, args ...any) pipeCall {
	return pipeCall{
		queue:  func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return script.EvalSha(ctx, p, keys, args...) },
		reload: func(ctx context.Context, p redis.Pipeliner) redis.Cmder { return script.Eval(ctx, p, keys, args...) },
		key:    keys[0],
	}
}

func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// sendPipeline sends calls, one pipeline per server: on a Redis Cluster
// each primary gets the calls whose keys it serves, all primaries at once.
// The calls' contexts are not used: a call once queued is sent, within the
// client's read and write timeouts, even when its caller no longer waits.
func (s *redisStore) sendPipeline(calls []pipeCall) {
	if s.cluster == nil {
		s.sendTo(s.c, calls)
		return
	}
	ctx := context.Background()
	shares := make(map[*redis.Client][]pipeCall)
	for _, c := range calls {
		node, err := s.cluster.MasterForKey(ctx, c.key)
		if err != nil {
			c.reply <- pipeReply{cmd: failedCmd(ctx, fmt.Errorf("the cluster serves no slot of %q: %w", c.key, err))}
			continue
		}
		shares[node] = append(shares[node], c)
	}
	var wg sync.WaitGroup
	for node, share := range shares {
		wg.Go(func() {
			if s.sendTo(node, share) {
				// The slots moved or the node failed: look the cluster up
				// again, so the next pipelines go where the slots are now.
				// The calls that failed are refused, as on any error.
				s.cluster.ReloadState(ctx)
			}
		})
	}
	wg.Wait()
}

// sendTo sends calls to one server in one pipeline, scripts by their SHA1,
// and sends again with their bodies the scripts the server did not have.
// It reports whether a call failed because the server is unreachable or no
// longer serves its key (stale).
func (s *redisStore) sendTo(c redis.UniversalClient, calls []pipeCall) (stale bool) {
	again, stale := s.exec(c, calls, false)
	if len(again) > 0 {
		_, staleAgain := s.exec(c, again, true)
		stale = stale || staleAgain
	}
	return stale
}

// exec sends calls in one pipeline, scripts with their bodies or by their
// SHA1, followed by the WAITs of the writes to replicate (waitBounds): WAIT
// counts the replicas that acknowledged every write its connection made, so
// the whole pipeline's writes wait together. It answers each call, except
// the scripts sent by SHA1 that the server answered NOSCRIPT, which it
// returns, and reports whether a call failed for a reason that makes the
// cluster's layout stale (notServing).
func (s *redisStore) exec(c redis.UniversalClient, calls []pipeCall, bodies bool) (again []pipeCall, stale bool) {
	ctx := context.Background()
	pipe := c.Pipeline()
	cmds := make([]redis.Cmder, len(calls))
	for i, call := range calls {
		if bodies {
			cmds[i] = call.reload(ctx, pipe)
		} else {
			cmds[i] = call.queue(ctx, pipe)
		}
	}
	bounds := s.waitBounds(calls)
	waits := make([]*redis.IntCmd, len(bounds))
	for i, ms := range bounds {
		waited := int64(0)
		if i > 0 {
			waited = bounds[i-1]
		}
		waits[i] = redis.NewIntCmd(ctx, "wait", s.minReplicas, ms-waited)
		_ = pipe.Process(ctx, waits[i])
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	unreplicated := make([]error, len(waits))
	for i, wait := range waits {
		unreplicated[i] = s.replicated(wait, time.Duration(bounds[i])*time.Millisecond)
	}
	for i, call := range calls {
		if !bodies && call.reload != nil && redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			again = append(again, call)
			continue
		}
		r := pipeReply{cmd: cmds[i]}
		if call.replicate && len(bounds) > 0 {
			j, _ := slices.BinarySearch(bounds, s.waitBound(call))
			r.unreplicated = unreplicated[j]
		}
		stale = stale || notServing(cmds[i].Err())
		call.reply <- r
	}
	return again, stale
}

// waitBounds are the distinct bounds (waitBound) of the calls to
// replicate, in ascending order, or none when Config.RedisMinReplicas asks
// for no replica. exec sends one WAIT per bound, each for the time from
// the previous bound to its own, so a call learns whether the replicas
// had the pipeline's writes within its bound, and the whole pipeline
// waits no longer than its longest bound.
func (s *redisStore) waitBounds(calls []pipeCall) []int64 {
	if s.minReplicas <= 0 {
		return nil
	}
	var bounds []int64
	for _, call := range calls {
		if call.replicate {
			bounds = append(bounds, s.waitBound(call))
		}
	}
	slices.Sort(bounds)
	return slices.Compact(bounds)
}

// waitBound is how long, in milliseconds (at least 1: WAIT's 0 waits for
// ever), call waits for the replicas: Config.RedisReplicaTimeout, or its
// waitAtMost when that is shorter.
func (s *redisStore) waitBound(call pipeCall) int64 {
	d := s.replicaTimeout
	if call.waitAtMost > 0 {
		d = min(d, call.waitAtMost)
	}
	return max(d.Milliseconds(), 1)
}

// notServing reports whether err says the server could not be reached or
// does not serve the key (any more): a connection error, not a reply, or a
// Redis Cluster redirection or outage.
func notServing(err error) bool {
	if err == nil {
		return false
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true
	}
	for _, prefix := range []string{"MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN", "READONLY"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// replicated is nil when WAIT's reply counts Config.RedisMinReplicas
// replicas, else the ErrNotReplicated saying how many did within bound.
func (s *redisStore) replicated(wait *redis.IntCmd, bound time.Duration) error {
	n, err := wait.Result()
	switch {
	case err != nil:
		return fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
	case n < int64(s.minReplicas):
		return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, s.minReplicas, bound)
	}
	return nil
}
