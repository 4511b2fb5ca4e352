package registry_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
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

// TestRedeemNotReplicatedKeepsTheCodeForItsUserOnRedis: with
// redis_min_replicas and the replica lost, a redemption's consumption of
// its code (a registry CompareAndSwap, its first write) applies on the
// primary but fails with store.ErrNotReplicated. The redemption is
// refused with no link written, and the code stays spent for its user:
// another user is refused, and the same user's retry links once the store
// is whole. A refused redemption does not burn its code for its user.
func TestRedeemNotReplicatedKeepsTheCodeForItsUserOnRedis(t *testing.T) {
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
		if op == "cas" && namespace == "registry/linkcodes" && !killed { // the code about to be consumed
			killed = true
			replica.Kill(t)
			loss.lost.Store(true)
		}
	}
	_, _, err = strict.RedeemLinkCode(ctx, "telegram", "4201", code)
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
		t.Fatalf("after the refused redemption: bindings %v, want no link", s.Bindings)
	}
	if _, _, err := plain.RedeemLinkCode(ctx, "telegram", "4202", code); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("another user's redemption of the code spent for 4201: %v, want ErrNotFound", err)
	}
	if tenant, _, err := plain.RedeemLinkCode(ctx, "telegram", "4201", code); err != nil || tenant != "a" {
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
// the server hold writes, and cancels once the write is held there: a
// request given up while its write is in flight. It sends its outcome on
// held. Each pause is short of the pipeline's read timeout, and renewed
// until the write is held: on a busy machine the write may reach the
// server, or the poller run, after a first pause has lapsed.
func pauseWritesThenCancel(srv *redistest.Server, side *redis.Client, cancel func(), held chan<- error) {
	bg := context.Background()
	pause := func() error { return side.Do(bg, "CLIENT", "PAUSE", 1500, "WRITE").Err() }
	if err := pause(); err != nil {
		held <- err
		return
	}
	go func() {
		start := time.Now()
		paused := start
		for {
			info, err := side.Info(bg, "clients").Result()
			if err == nil && strings.Contains(info, "blocked_clients:1") {
				cancel()
				held <- nil
				return
			}
			if time.Since(start) > 10*time.Second {
				held <- fmt.Errorf("the write was never held at %s within 10s of pausing writes (renewed): %v\n%s", srv.Addr(), err, info)
				return
			}
			if time.Since(paused) > 500*time.Millisecond { // renewed before it lapses: a write not held yet will be
				if err := pause(); err != nil {
					held <- err
					return
				}
				paused = time.Now()
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
	_, _, first := r.RedeemLinkCode(ctx, "telegram", "4301", code)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// A write through the same pipeline, sent after the link: it returns
	// once the link applied.
	if err := r.CreateTenant(bg, registry.Tenant{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	_, _, second := r.RedeemLinkCode(bg, "telegram", "4302", code)
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
// store.ErrNotReplicated: the redemption is refused and the link taken
// back, the code spent for the refused user (consumed before the link):
// another user is refused, the refused user's retry links, so one code
// still makes one link. Before the link was taken back, it stayed on the
// primary with the code unspent: the refused user was linked, and the
// next user to send the code was linked too.
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
	_, _, first := strict.RedeemLinkCode(ctx, "telegram", "4401", code)
	if !killed {
		t.Fatalf("the hook never ran: the redemption wrote no link (%v)", first)
	}
	if !errors.Is(first, store.ErrNotReplicated) {
		t.Fatalf("a redemption losing the replica before its link is written: %v, want ErrNotReplicated", first)
	}
	if s, err := plain.Stored(ctx); err != nil || len(s.Bindings) != 0 {
		t.Fatalf("after the refused redemption: bindings %v (%v), want its link taken back", s.Bindings, err)
	}
	if _, _, err := plain.RedeemLinkCode(ctx, "telegram", "4402", code); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("the code of the refused redemption, by another user: %v, want ErrNotFound", err)
	}
	if _, _, err := plain.RedeemLinkCode(ctx, "telegram", "4401", code); err != nil {
		t.Fatalf("the refused user's retry: %v", err)
	}
	s, err := plain.Stored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Bindings) != 1 || s.Bindings[0].ID != "4401" {
		t.Fatalf("one code, a redemption refused for want of the replica, then its retry: bindings %v, want the retry's link alone", s.Bindings)
	}
}

// gatewaySecrets returns the secrets gateway id has in r's store (nil:
// no such gateway).
func gatewaySecrets(t *testing.T, r *registry.Registry, id string) []string {
	t.Helper()
	s, err := r.Stored(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range s.Gateways {
		if g.ID == id {
			var out []string
			for _, sec := range g.Secrets {
				out = append(out, sec.Value)
			}
			return out
		}
	}
	return nil
}

// TestCreateGatewayNotReplicatedLeavesNoGatewayOnRedis: with
// redis_min_replicas and the replica gone, a gateway's creation applies on
// the primary but fails with store.ErrNotReplicated: it is refused and
// taken back, so the operator's retry creates it and shows its secret.
// Before, the gateway stayed on the primary: the retry was ErrExists, and
// only a rotation showed a secret. A rotation refused so is taken back
// likewise: the secrets it ended are valid again.
func TestCreateGatewayNotReplicatedLeavesNoGatewayOnRedis(t *testing.T) {
	ctx := context.Background()
	strict, plain, replica := onRedisWithAReplica(t)
	if err := plain.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	old, err := plain.CreateGateway(ctx, "a", "gw-old")
	if err != nil {
		t.Fatal(err)
	}
	replica.Kill(t)
	if _, err := strict.CreateGateway(ctx, "a", "gw-new"); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("a creation without the replica: %v, want ErrNotReplicated", err)
	}
	if got := gatewaySecrets(t, plain, "gw-new"); got != nil {
		t.Errorf("the refused creation left gw-new on the primary, secrets %d", len(got))
	}
	if secret, err := plain.CreateGateway(ctx, "a", "gw-new"); err != nil || secret == "" {
		t.Errorf("the retry of the refused creation: %v, want its secret", err)
	}
	if _, err := strict.Rotate(ctx, "a", "gw-old", -1); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("a rotation without the replica: %v, want ErrNotReplicated", err)
	}
	if got := gatewaySecrets(t, plain, "gw-old"); len(got) != 1 || got[0] != old {
		t.Errorf("after the refused rotation gw-old has %d secrets (its own %v), want its secret alone, as before", len(got), len(got) > 0 && got[len(got)-1] == old)
	}
}

// TestRotateGivenUpDuringItsWriteOnRedis: a rotation ending the old
// secrets now (grace 0s) whose request is given up while its write waits
// at the server leaves the gateway as it was: the pipeline sends a queued
// write whether or not its caller still waits, so the rotation applies,
// and is taken back. Before, it ran on the request's context: Rotate
// returned the context's error, the write applied after, and the gateway
// was left with its old secrets ended and a new one nobody was shown.
// A creation given up so is taken back likewise.
func TestRotateGivenUpDuringItsWriteOnRedis(t *testing.T) {
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
	old, err := r.CreateGateway(bg, "a", "gw")
	if err != nil {
		t.Fatal(err)
	}
	givenUp := func(do func(ctx context.Context) (string, error)) (string, error) {
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		held := make(chan error, 1)
		hooked.before = func(op, namespace, _ string) {
			if op == "cas" && namespace == "registry/gateways" {
				hooked.before = nil
				pauseWritesThenCancel(srv, srv.Client(t), cancel, held)
			}
		}
		secret, err := do(ctx)
		if herr := <-held; herr != nil {
			t.Fatal(herr)
		}
		// A write through the same pipeline, sent after the gateway's:
		// it returns once that one applied.
		if err := r.CreateTenant(bg, registry.Tenant{ID: "b"}); err != nil && !errors.Is(err, registry.ErrExists) {
			t.Fatal(err)
		}
		return secret, err
	}
	secret, err := givenUp(func(ctx context.Context) (string, error) { return r.Rotate(ctx, "a", "gw", -1) })
	if got := gatewaySecrets(t, r, "gw"); err == nil && (len(got) != 1 || got[0] != secret) || err != nil && (len(got) != 1 || got[0] != old) {
		t.Fatalf("a rotation (grace 0s) given up during its write: %v, the gateway has %d secrets (the old one first: %v), want the old secret alone on an error",
			err, len(got), len(got) > 0 && got[0] == old)
	}
	_, err = givenUp(func(ctx context.Context) (string, error) { return r.CreateGateway(ctx, "a", "gw-2") })
	if got := gatewaySecrets(t, r, "gw-2"); err != nil && got != nil {
		t.Fatalf("a creation given up during its write: %v, yet gw-2 is stored: a gateway nobody was shown the secret of", err)
	}
}

// TestCreateTenantNotReplicatedLeavesNoTenantOnRedis: with
// redis_min_replicas and the replica gone, a tenant's creation applies on
// the primary but fails with store.ErrNotReplicated: it is refused and
// taken back, so the operator's retry creates it. Before, the tenant
// stayed on the primary and the retry was ErrExists.
func TestCreateTenantNotReplicatedLeavesNoTenantOnRedis(t *testing.T) {
	ctx := context.Background()
	strict, plain, replica := onRedisWithAReplica(t)
	replica.Kill(t)
	if err := strict.CreateTenant(ctx, registry.Tenant{ID: "a"}); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("a creation without the replica: %v, want ErrNotReplicated", err)
	}
	if err := plain.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatalf("the retry of the refused creation: %v, want the tenant made", err)
	}
}

// TestEnrollNotReplicatedUndoGivesTheTokenBackOnRedis: with
// redis_min_replicas and the replica lost after an enrollment wrote its
// gateway, the wake URL's write fails with store.ErrNotReplicated and so
// does the gateway's put-back; both applied on the primary. The gateway is
// back as it was there, so the token is given back too: the same token
// enrolls once the store is whole. Before, a put-back failing with
// ErrNotReplicated was taken for one that did not apply, the gateway for
// left as written, and the token stayed spent: burnt by a refused
// enrollment.
func TestEnrollNotReplicatedUndoGivesTheTokenBackOnRedis(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	loss := lossOf(t, primary)
	hooked := &hookedStore{Store: loss}
	strict, plain := registry.New(hooked, clock.System), registry.New(loss.patient, clock.System)
	if err := plain.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	token, _, err := plain.MintEnrollToken(ctx, "a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	killed := false
	hooked.before = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/wake" && !killed { // the gateway written
			killed = true
			replica.Kill(t)
			loss.lost.Store(true)
		}
	}
	_, err = strict.Enroll(ctx, "a", token, "gw-e", "https://wake.example.com/gw-e")
	if !killed {
		t.Fatalf("the hook never ran: the enrollment wrote no wake URL (%v)", err)
	}
	if !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("an enrollment losing the replica before its wake URL is written: %v, want ErrNotReplicated", err)
	}
	if ok, err := plain.GatewayOf(ctx, "a", "gw-e"); err != nil || ok {
		t.Fatalf("the gateway of the refused enrollment: stored %v, %v; want it put back (absent)", ok, err)
	}
	if secret, err := plain.Enroll(ctx, "a", token, "gw-e", ""); err != nil || secret == "" {
		t.Fatalf("the token of the refused enrollment, again: %v (it was burnt)", err)
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

// TestRedeemNotReplicatedKeepsTheCodeSpentWhileItsLinkIsNotPutBackOnRedis:
// with redis_min_replicas and the replica lost right before a
// redemption's link is written, the link's write applies on the primary
// but fails with store.ErrNotReplicated, and its put-back fails too (the
// store unreachable a moment). The redemption is refused with the code
// spent: its link stands, so one code still makes one link. Before, the
// put-back's failure was dropped for the ErrNotReplicated: the redemption
// left the code unspent, and the next user to send it was linked as well,
// two links of one code.
func TestRedeemNotReplicatedKeepsTheCodeSpentWhileItsLinkIsNotPutBackOnRedis(t *testing.T) {
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
	writes := 0 // of bindings, from the replica's loss on
	hooked.before = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/bindings" && writes == 0 {
			replica.Kill(t)
			loss.lost.Store(true)
		}
	}
	unreachable := errors.New("store unreachable (injected)")
	hooked.put = func(namespace, _ string) error {
		if namespace != "registry/bindings" {
			return nil
		}
		if writes++; writes > 1 { // the link's put-back
			return unreachable
		}
		return nil
	}
	_, _, first := strict.RedeemLinkCode(ctx, "telegram", "4701", code)
	if writes < 2 {
		t.Fatalf("the hooks never ran: the redemption wrote and put back no link (%d writes; %v)", writes, first)
	}
	if first == nil {
		t.Fatal("a redemption whose link was not replicated succeeded")
	}
	_, _, second := plain.RedeemLinkCode(ctx, "telegram", "4702", code)
	s, err := plain.Stored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Bindings) != 1 || !errors.Is(second, registry.ErrNotFound) {
		t.Fatalf("one code, a refused redemption (%v) whose link stayed, then another user's (%v): links %v, want the first link only and the code spent", first, second, s.Bindings)
	}
	if tenant, _, err := plain.RedeemLinkCode(ctx, "telegram", "4701", code); err != nil || tenant != "a" {
		t.Fatalf("the refused user's retry, its link standing: %q, %v; want linked to a", tenant, err)
	}
}

// TestCreateTenantNotReplicatedTakesBackWhatWasMadeMeanwhileOnRedis: with
// redis_min_replicas and the replica gone, a tenant's creation applies on
// the primary and waits for the replica; meanwhile another instance
// creates a gateway of the tenant there. The creation is refused and taken
// back as a deletion: the gateway goes with it, so the tenant made again
// under the id (after the deletion is finished, when asked) does not
// inherit a gateway whose secret someone else was shown. Before, the
// take-back removed the tenant alone, and the gateway was the next
// tenant's.
func TestCreateTenantNotReplicatedTakesBackWhatWasMadeMeanwhileOnRedis(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	loss := lossOf(t, primary)
	hooked := &hookedStore{Store: loss}
	strict, plain := registry.New(hooked, clock.System), registry.New(loss.patient, clock.System)
	made := false
	hooked.before = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/tenants" && !loss.lost.Load() {
			replica.Kill(t)
			loss.lost.Store(true)
		}
	}
	hooked.after = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/tenants" && !made { // the tenant on the primary
			made = true
			if _, err := plain.CreateGateway(ctx, "a", "gw"); err != nil {
				t.Errorf("a gateway of the tenant being created: %v", err)
			}
		}
	}
	if err := strict.CreateTenant(ctx, registry.Tenant{ID: "a"}); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("a creation without the replica: %v, want ErrNotReplicated", err)
	}
	err := plain.CreateTenant(ctx, registry.Tenant{ID: "a"})
	if errors.Is(err, registry.ErrExists) { // its deletion did not finish: finish it
		if err = plain.DeleteTenant(ctx, "a"); err == nil {
			err = plain.CreateTenant(ctx, registry.Tenant{ID: "a"})
		}
	}
	if err != nil {
		t.Fatalf("the retry of the refused creation: %v", err)
	}
	if ok, err := plain.GatewayOf(ctx, "a", "gw"); err != nil || ok {
		t.Fatalf("the tenant made again holds gw, made for the refused one: %v, %v", ok, err)
	}
}

// TestRefusedNewEntriesAreTakenBackOnRedis: with redis_min_replicas and
// the replica gone, a link code's issue, an enrollment token's mint and a
// wake URL's registration apply on the primary but fail with
// store.ErrNotReplicated: each is taken back. Before, they stayed on the
// primary: a refused code counted against the tenant's 16 outstanding
// (a gateway retrying through a replica's loss used them up for an hour),
// a token nobody was shown stayed redeemable, and a URL answered as not
// registered was woken.
func TestRefusedNewEntriesAreTakenBackOnRedis(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	loss := lossOf(t, primary)
	strict, plain := registry.New(loss, clock.System), registry.New(loss.patient, clock.System)
	if err := plain.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.CreateGateway(ctx, "a", "gw"); err != nil {
		t.Fatal(err)
	}
	replica.Kill(t)
	loss.lost.Store(true)
	if _, _, err := strict.IssueLinkCode(ctx, "a", "gw", "", 0); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("a link code issued without the replica: %v, want ErrNotReplicated", err)
	}
	if _, _, err := strict.MintEnrollToken(ctx, "a", time.Hour); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("an enrollment token minted without the replica: %v, want ErrNotReplicated", err)
	}
	if err := strict.SetWake(ctx, "a", "gw", "https://wake.example.com/gw"); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("a wake URL registered without the replica: %v, want ErrNotReplicated", err)
	}
	for _, ns := range []string{"registry/linkcodes", "registry/enroll"} {
		if entries, _, err := loss.patient.Registry().List(ctx, ns); err != nil || len(entries) != 0 {
			t.Errorf("%s after its refused write: %d entries, %v; want none", ns, len(entries), err)
		}
	}
	if wakes, err := plain.Wakes(ctx); err != nil || len(wakes) != 0 {
		t.Errorf("wake URLs after the refused registration: %v, %v; want none", wakes, err)
	}
}

// TestRefusedChangesAreTakenBackOnRedis: with redis_min_replicas and the
// replica gone, a policy, a DM default, a principal and a tenant's
// session settings apply on the primary but fail with
// store.ErrNotReplicated: each is taken back, the earlier value back in
// place. Before, they stayed on the primary, answered as failed.
func TestRefusedChangesAreTakenBackOnRedis(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	loss := lossOf(t, primary)
	strict, plain := registry.New(loss, clock.System), registry.New(loss.patient, clock.System)
	if err := plain.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := plain.Bind(ctx, registry.Binding{Platform: "discord", Kind: "user", ID: "42", Tenant: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := plain.SetPolicy(ctx, registry.Policy{Tenant: "a", Platform: "discord", Gateway: "gw"}); err != nil {
		t.Fatal(err)
	}
	before, err := plain.Stored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replica.Kill(t)
	loss.lost.Store(true)
	profile := &registry.Session{Profile: "p"}
	for what, err := range map[string]error{
		"policy":     strict.SetPolicy(ctx, registry.Policy{Tenant: "a", Platform: "discord", Gateway: "gw", RequireAddress: true}),
		"dm default": strict.SetDMDefault(ctx, "a", "discord", "42"),
		"principal":  strict.SetPrincipal(ctx, "a", "discord", "any", nil),
		"session":    strict.SetSession(ctx, "a", profile),
	} {
		if !errors.Is(err, store.ErrNotReplicated) {
			t.Errorf("the %s without the replica: %v, want ErrNotReplicated", what, err)
		}
	}
	after, err := plain.Stored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, before) {
		t.Errorf("after the refused changes the registry holds %+v, want %+v as before", after, before)
	}
}

// TestRefusedDeletionStaysOnRedis: with redis_min_replicas and the replica
// gone, a tenant's deletion ends the tenant on the primary but fails with
// store.ErrNotReplicated: the tenant stays ended, and a deletion run
// again finishes it. Before, the end was taken back: a deletion on
// another instance that had read it and swept meanwhile left the tenant
// alive without what it swept.
func TestRefusedDeletionStaysOnRedis(t *testing.T) {
	ctx := context.Background()
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	loss := lossOf(t, primary)
	strict, plain := registry.New(loss, clock.System), registry.New(loss.patient, clock.System)
	if err := plain.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.CreateGateway(ctx, "a", "gw"); err != nil {
		t.Fatal(err)
	}
	replica.Kill(t)
	loss.lost.Store(true)
	if err := strict.DeleteTenant(ctx, "a"); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("the deletion without the replica: %v, want ErrNotReplicated", err)
	}
	if s, err := plain.Stored(ctx); err != nil || len(s.Tenants) != 0 {
		t.Fatalf("tenants after the refused deletion: %+v, %v; want a still ended", s.Tenants, err)
	}
	if err := plain.DeleteTenant(ctx, "a"); err != nil {
		t.Fatalf("the deletion run again: %v", err)
	}
	if s, err := plain.Stored(ctx); err != nil || len(s.Tenants)+len(s.Gateways) != 0 {
		t.Fatalf("after the deletion run again the registry holds %+v, %v; want nothing", s, err)
	}
}
