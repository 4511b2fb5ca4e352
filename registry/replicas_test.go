package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"connector/internal/clock"
	"connector/internal/redistest"
	"connector/registry"
	"connector/store"
)

// onRedisWithAReplica returns two registries on one redis-server primary
// with a replica: strict waits for redis_min_replicas 1, plain does not;
// and the replica.
func onRedisWithAReplica(t *testing.T) (strict, plain *registry.Registry, replica *redistest.Server) {
	t.Helper()
	primary := redistest.Start(t, redistest.Options{})
	replica = redistest.StartReplicas(t, primary, 1)[0]
	open := func(minReplicas int) *registry.Registry {
		cfg := store.Config{Backend: store.BackendRedis, RedisURL: primary.URL(), RedisMinReplicas: minReplicas, RedisReplicaTimeout: 200 * time.Millisecond}
		st, err := store.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return registry.New(st, clock.System)
	}
	return open(1), open(0), replica
}

// TestEnrollNotReplicatedGivesTheTokenBackOnRedis: with redis_min_replicas
// and the replica gone, an enrollment's spend of its token (a registry
// Delete) applies on the primary but fails with store.ErrNotReplicated.
// The enrollment is refused and its token given back, as for any failure
// after the spend (Enroll's writes are all or nothing): the same token
// enrolls once the store is whole. Before, the spend's error was taken for
// a delete that did not apply, the token was not given back, and the
// retry was ErrEnrollToken: a refused enrollment had burnt its token.
func TestEnrollNotReplicatedGivesTheTokenBackOnRedis(t *testing.T) {
	ctx := context.Background()
	strict, plain, replica := onRedisWithAReplica(t)
	if err := plain.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	token, _, err := plain.MintEnrollToken(ctx, "a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	replica.Kill(t)
	if _, err := strict.Enroll(ctx, "a", token, "gw-e", ""); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("an enrollment without the replica: %v, want ErrNotReplicated", err)
	}
	if secret, err := plain.Enroll(ctx, "a", token, "gw-e", ""); err != nil || secret == "" {
		t.Fatalf("the token of the refused enrollment, again: %v (it was burnt)", err)
	}
}

// TestRedeemNotReplicatedGivesTheCodeBackOnRedis: with redis_min_replicas
// and the replica lost after a redemption wrote its link, the code's
// consumption (a registry CompareAndSwap) applies on the primary but fails
// with store.ErrNotReplicated. The redemption is refused, its link taken
// back and its code given back: the same user's retry links once the
// store is whole. Before, the code stayed spent on the primary: a refused
// redemption had burnt its code, and the user had to ask for a new one.
func TestRedeemNotReplicatedGivesTheCodeBackOnRedis(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	loss := lossOf(t, primary)
	hooked := &hookedStore{Store: loss}
	strict, plain := registry.New(hooked, clock.System), registry.New(loss.patient, clock.System)
	if err := plain.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	code, _, err := plain.IssueLinkCode(ctx, "a", "gw-a", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	killed := false
	hooked.before = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/linkcodes" && !killed { // the link written
			killed = true
			replica.Kill(t)
			loss.lost.Store(true)
		}
	}
	_, err = strict.RedeemLinkCode(ctx, "telegram", "4201", code)
	if !killed {
		t.Fatalf("the hook never ran: the redemption consumed no code (%v)", err)
	}
	if !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("a redemption losing the replica before its code is consumed: %v, want ErrNotReplicated", err)
	}
	s, err := plain.Stored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Bindings) != 0 {
		t.Fatalf("after the refused redemption: bindings %v, want its link taken back", s.Bindings)
	}
	if tenant, err := plain.RedeemLinkCode(ctx, "telegram", "4201", code); err != nil || tenant != "a" {
		t.Fatalf("the code of the refused redemption, again: %q, %v (it was burnt)", tenant, err)
	}
}

// TestEnrollGivenUpDuringTheSpendOnRedis: an enrollment whose request is
// given up while the spend of its token (a registry Delete, sent in the
// store's pipeline) waits at the server leaves the token redeemable: the
// pipeline sends a queued write whether or not its caller still waits, so
// the Delete applies, and the token is given back with the rest. Before,
// the spend ran on the request's context: Enroll returned the context's
// error, took the token for unspent and did not give it back, and the
// Delete applied after: the client had given up and the token was burnt.
func TestEnrollGivenUpDuringTheSpendOnRedis(t *testing.T) {
	bg := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.Open(bg, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	hooked := &hookedStore{Store: st}
	r := registry.New(hooked, clock.System)
	if err := r.CreateTenant(bg, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	token, _, err := r.MintEnrollToken(bg, "a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	held := make(chan error, 1)
	hooked.before = func(op, namespace, _ string) {
		if op == "delete" && namespace == "registry/enroll" {
			hooked.before = nil
			pauseWritesThenCancel(srv, srv.Client(t), cancel, held)
		}
	}
	if _, err := r.Enroll(ctx, "a", token, "gw-e", ""); err == nil {
		t.Fatal("an enrollment given up during its spend succeeded")
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// A write through the same pipeline, sent after the spend: it returns
	// once the spend applied.
	if err := r.CreateTenant(bg, registry.Tenant{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if secret, err := r.Enroll(bg, "a", token, "gw-e", ""); err != nil || secret == "" {
		t.Fatalf("the token of the enrollment given up, again: %v (it was burnt)", err)
	}
}

// pauseWritesThenCancel, run before a write of the store of srv, makes
// the server hold writes for a while (under the pipeline's read timeout),
// and cancels once the write is held there: a request given up while its
// write is in flight. It sends its outcome on held.
func pauseWritesThenCancel(srv *redistest.Server, side *redis.Client, cancel func(), held chan<- error) {
	bg := context.Background()
	if err := side.Do(bg, "CLIENT", "PAUSE", 1500, "WRITE").Err(); err != nil {
		held <- err
		return
	}
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			info, err := side.Info(bg, "clients").Result()
			if err == nil && strings.Contains(info, "blocked_clients:1") {
				cancel()
				held <- nil
				return
			}
			if time.Now().After(deadline) {
				held <- fmt.Errorf("the write was never held at %s: %v\n%s", srv.Addr(), err, info)
				return
			}
			time.Sleep(5 * time.Millisecond) // polling the server's state
		}
	}()
}

// TestRedeemGivenUpDuringTheLinkOnRedis: a redemption whose request is
// given up while its link's write waits at the server makes one link with
// its code, whoever redeems the code next: the pipeline sends a queued
// write whether or not its caller still waits, so the link applies.
// Before, the link was written on the request's context: the redemption
// returned the context's error without consuming the code, the link
// applied after, and the next user's redemption of the same code made a
// second link.
func TestRedeemGivenUpDuringTheLinkOnRedis(t *testing.T) {
	bg := context.Background()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.Open(bg, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	hooked := &hookedStore{Store: st}
	r := registry.New(hooked, clock.System)
	if err := r.CreateTenant(bg, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	code, _, err := r.IssueLinkCode(bg, "a", "gw-a", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	held := make(chan error, 1)
	hooked.before = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/bindings" {
			hooked.before = nil
			pauseWritesThenCancel(srv, srv.Client(t), cancel, held)
		}
	}
	_, first := r.RedeemLinkCode(ctx, "telegram", "4301", code)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// A write through the same pipeline, sent after the link: it returns
	// once the link applied.
	if err := r.CreateTenant(bg, registry.Tenant{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	_, second := r.RedeemLinkCode(bg, "telegram", "4302", code)
	s, err := r.Stored(bg)
	if err != nil {
		t.Fatal(err)
	}
	if links := len(s.Bindings); (first == nil) == (second == nil) || links != 1 {
		t.Fatalf("one code, a redemption given up during its link (%v), then another (%v): %d links %v, want one redemption and its link", first, second, links, s.Bindings)
	}
}

// TestRedeemNotReplicatedTakesTheLinkBackOnRedis: with redis_min_replicas
// and the replica lost right before a redemption's link is written, the
// link's write applies on the primary but fails with
// store.ErrNotReplicated: the redemption is refused, the link taken back
// and the code left redeemable, so one code still makes one link. Before,
// the link stayed on the primary with the code unspent: the refused user
// was linked, and the next user to send the code was linked too.
func TestRedeemNotReplicatedTakesTheLinkBackOnRedis(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	loss := lossOf(t, primary)
	hooked := &hookedStore{Store: loss}
	strict, plain := registry.New(hooked, clock.System), registry.New(loss.patient, clock.System)
	if err := plain.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	code, _, err := plain.IssueLinkCode(ctx, "a", "gw-a", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	killed := false
	hooked.before = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/bindings" && !killed {
			killed = true
			replica.Kill(t)
			loss.lost.Store(true)
		}
	}
	_, first := strict.RedeemLinkCode(ctx, "telegram", "4401", code)
	if !killed {
		t.Fatalf("the hook never ran: the redemption wrote no link (%v)", first)
	}
	if !errors.Is(first, store.ErrNotReplicated) {
		t.Fatalf("a redemption losing the replica before its link is written: %v, want ErrNotReplicated", first)
	}
	if _, err := plain.RedeemLinkCode(ctx, "telegram", "4402", code); err != nil {
		t.Fatalf("the code of the refused redemption, by another user: %v", err)
	}
	s, err := plain.Stored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Bindings) != 1 || s.Bindings[0].ID != "4402" {
		t.Fatalf("one code, a redemption refused for want of the replica, then another: bindings %v, want the second's link alone", s.Bindings)
	}
}

// replicaLoss is a store on a primary with a replica whose registry calls
// go to patient, which waits for no replica, until lost is set (the test
// killed the replica), and to the embedded strict store, which waits for
// one (redis_min_replicas 1), from then on. Only writes the replica's loss
// fails wait for it: a write before the loss waiting for the live replica
// could fail as not replicated on a busy machine, where the replica may
// not acknowledge within the timeout.
type replicaLoss struct {
	store.Store
	patient store.Store
	lost    atomic.Bool
}

// lossOf opens a replicaLoss on primary, closed when the test ends.
func lossOf(t *testing.T, primary *redistest.Server) *replicaLoss {
	t.Helper()
	open := func(minReplicas int) store.Store {
		cfg := store.Config{Backend: store.BackendRedis, RedisURL: primary.URL(), RedisMinReplicas: minReplicas, RedisReplicaTimeout: 200 * time.Millisecond}
		st, err := store.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	return &replicaLoss{Store: open(1), patient: open(0)}
}

func (s *replicaLoss) Registry() store.Registry { return lossRegistry{s} }

// lossRegistry is a replicaLoss's registry.
type lossRegistry struct{ s *replicaLoss }

// now is the registry a call goes to.
func (r lossRegistry) now() store.Registry {
	if r.s.lost.Load() {
		return r.s.Store.Registry()
	}
	return r.s.patient.Registry()
}

func (r lossRegistry) Put(ctx context.Context, namespace, key string, value []byte) (uint64, error) {
	return r.now().Put(ctx, namespace, key, value)
}

func (r lossRegistry) Get(ctx context.Context, namespace, key string) (store.Entry, bool, error) {
	return r.now().Get(ctx, namespace, key)
}

func (r lossRegistry) Delete(ctx context.Context, namespace, key string) (bool, error) {
	return r.now().Delete(ctx, namespace, key)
}

func (r lossRegistry) List(ctx context.Context, namespace string) ([]store.Entry, uint64, error) {
	return r.now().List(ctx, namespace)
}

func (r lossRegistry) Revision(ctx context.Context, namespace string) (uint64, error) {
	return r.now().Revision(ctx, namespace)
}

func (r lossRegistry) CompareAndSwap(ctx context.Context, namespace, key string, old, value []byte) (bool, error) {
	return r.now().CompareAndSwap(ctx, namespace, key, old, value)
}
