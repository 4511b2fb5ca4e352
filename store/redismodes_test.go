package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"connector/internal/clock"
	"connector/internal/redistest"
	"connector/store"
	"connector/store/storetest"
)

// appUser is the ACL user the mode tests connect as: every command, every
// key, but not the default user.
const (
	appUser     = "app"
	appPassword = "app-secret-7f3a"
	appACL      = appUser + " on >" + appPassword + " ~* &* +@all"
	adminPass   = "admin-secret-91c2"
)

// The conformance suite on a Redis Cluster of three shards, over TLS with a
// CA made for the test, as an ACL user: every script's keys share a slot
// (the cluster refuses CROSSSLOT otherwise), and the tenants' ledgers
// spread over the shards.
func TestRedisCluster(t *testing.T) {
	ca := redistest.NewCA(t)
	c := redistest.StartCluster(t, 3, 0, redistest.Options{TLS: ca, Password: adminPass, Users: []string{appACL}})
	cfg := func() store.Config {
		return store.Config{
			Backend:      store.BackendRedis,
			RedisCluster: &store.RedisCluster{Addrs: c.Addrs()[:1], Username: appUser, Password: appPassword, TLS: true},
			RedisTLS:     ca.ClientConfig(),
			RedisPrefix:  fmt.Sprintf("test%d:", prefixes.Add(1)),
		}
	}
	storetest.Run(t, storetest.Backend{
		Fresh:       func(t *testing.T) storetest.Opener { return opener(t, cfg()) },
		Durable:     true,
		Shared:      true,
		ServerClock: true,
		Lapse:       lapseClaims(c.Primaries...),
	})

	// Names with braces and backslashes keep each name's keys in one slot
	// (an empty or cut tag would hash each key alone: CROSSSLOT) and
	// distinct names apart.
	t.Run("NamesWithBraces", func(t *testing.T) {
		ctx := context.Background()
		s := opener(t, cfg())(clock.System)
		names := []string{"}t", "t}", "{t}", "}", `\}`, `\)`, `t\`, "{", "a}b"}
		for i, name := range names {
			if _, err := s.Ledger().Append(ctx, name, []store.Record{{Payload: []byte(name)}, {Payload: []byte("x")}}); err != nil {
				t.Fatalf("Append(%q): %v", name, err)
			}
			if got := mustReadAll(t, s, name); len(got) != 2 || string(got[0].Payload) != name {
				t.Fatalf("Read(%q) = %d records, first %q", name, len(got), got[0].Payload)
			}
			if st, err := s.Ledger().Stats(ctx, name); err != nil || st.Entries != 2 {
				t.Fatalf("Stats(%q) = %+v, %v", name, st, err)
			}
			if _, err := s.Ledger().Trim(ctx, name, store.Bounds{MaxEntries: 1}); err != nil {
				t.Fatalf("Trim(%q): %v", name, err)
			}
			if _, acquired, err := s.Leases().Acquire(ctx, name, "h", time.Minute); err != nil || !acquired {
				t.Fatalf("Acquire(%q) = %v, %v", name, acquired, err)
			}
			if _, err := s.Registry().Put(ctx, name, "k", []byte{byte(i)}); err != nil {
				t.Fatalf("Registry().Put(%q): %v", name, err)
			}
		}
		tenants, err := s.Ledger().Tenants(ctx)
		if err != nil || len(tenants) != len(names) {
			t.Fatalf("Tenants = %q, %v; want the %d names", tenants, err, len(names))
		}
		for i, name := range names {
			if e, ok, err := s.Registry().Get(ctx, name, "k"); err != nil || !ok || e.Value[0] != byte(i) {
				t.Fatalf("Registry().Get(%q) = %v %v %v", name, e, ok, err)
			}
		}
	})

	t.Run("TenantsSpreadOverShards", func(t *testing.T) {
		ctx := context.Background()
		s := opener(t, cfg())(clock.System)
		for i := range 12 {
			if _, err := s.Ledger().Append(ctx, fmt.Sprintf("tenant-%d", i), []store.Record{{Payload: []byte("x")}}); err != nil {
				t.Fatal(err)
			}
		}
		holding := 0
		for _, p := range c.Primaries {
			n, err := p.Client(t).DBSize(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				holding++
			}
		}
		if holding != 3 {
			t.Fatalf("12 tenants' keys on %d of 3 shards", holding)
		}
	})
}

// The conformance suite through Sentinel, over TLS, as an ACL user, with
// every append and capability waiting for the one replica (WAIT).
func TestRedisSentinel(t *testing.T) {
	ca := redistest.NewCA(t)
	primary := redistest.Start(t, redistest.Options{TLS: ca, Password: adminPass, Users: []string{appACL}})
	redistest.StartReplicas(t, primary, 1)
	sentinels := redistest.StartSentinels(t, primary, 1, 1, redistest.SentinelOptions{Master: "mymaster"})
	storetest.Run(t, storetest.Backend{
		Fresh: func(t *testing.T) storetest.Opener {
			return opener(t, store.Config{
				Backend: store.BackendRedis,
				RedisSentinel: &store.RedisSentinel{Master: "mymaster", Addrs: []string{sentinels[0].Addr()},
					Username: appUser, Password: appPassword, TLS: true},
				RedisTLS:         ca.ClientConfig(),
				RedisMinReplicas: 1,
				// Every write must pass: a long timeout for a loaded machine.
				RedisReplicaTimeout: 5 * time.Second,
				RedisPrefix:         fmt.Sprintf("test%d:", prefixes.Add(1)),
			})
		},
		Durable:     true,
		Shared:      true,
		ServerClock: true,
		Lapse:       lapseClaims(primary),
	})
}

// One server over TLS (rediss://) as an ACL user: the CA is the test's; a
// wrong password is refused without the error naming it; a plain redis://
// URL cannot reach a TLS-only server.
func TestRedisTLSAndUser(t *testing.T) {
	ca := redistest.NewCA(t)
	srv := redistest.Start(t, redistest.Options{TLS: ca, Password: adminPass, Users: []string{appACL}})
	ctx := context.Background()
	url := func(password string) string {
		return fmt.Sprintf("rediss://%s:%s@%s/0", appUser, password, srv.Addr())
	}
	cfg := store.Config{Backend: store.BackendRedis, RedisURL: url(appPassword), RedisTLS: ca.ClientConfig(), RedisPrefix: "tls:"}
	s := opener(t, cfg)(clock.System)
	seqs, err := s.Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte("over tls")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustReadAll(t, s, "t1"); len(got) != 1 || got[0].Seq != seqs[0] {
		t.Fatalf("read back %+v", got)
	}

	for name, bad := range map[string]store.Config{
		"wrong password": {Backend: store.BackendRedis, RedisURL: url("wrong-pw-5521"), RedisTLS: ca.ClientConfig()},
		"plain":          {Backend: store.BackendRedis, RedisURL: strings.Replace(url(appPassword), "rediss:", "redis:", 1)},
		"unknown CA":     {Backend: store.BackendRedis, RedisURL: url(appPassword)},
	} {
		openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := store.Open(openCtx, bad)
		cancel()
		if err == nil {
			_ = st.Close()
			t.Fatalf("%s: Open succeeded", name)
		}
		if strings.Contains(err.Error(), "wrong-pw-5521") || strings.Contains(err.Error(), appPassword) {
			t.Fatalf("%s: the error names the password: %v", name, err)
		}
	}
}

// With RedisMinReplicas an append returns once a replica has it; with the
// replica gone it fails with ErrNotReplicated within the timeout, and what
// it stored is removed again (the source sends it again); a capability,
// a registry write and a claim likewise. With the replica back, appends go through again.
func TestRedisMinReplicas(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	ctx := context.Background()
	cfg := redisConfig(primary)
	// The timeout is what each refused write below waits; one that should
	// pass is retried until the replica acknowledges it (untilReplicated).
	cfg.RedisMinReplicas, cfg.RedisReplicaTimeout = 1, time.Second
	s := opener(t, cfg)(clock.System)
	l := s.Ledger()
	// A refused append removes what it stored, so a retry leaves one record.
	untilReplicated(t, "Append", func() error {
		_, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("replicated")}})
		return err
	})
	untilReplicated(t, "Put", func() error {
		return s.Capabilities().Put(ctx, "cap1", []byte("v"), time.Now().Add(time.Hour))
	})
	untilReplicated(t, "registry Put", func() error {
		_, err := s.Registry().Put(ctx, "slack/intake", "k1", []byte("v"))
		return err
	})

	replica.Kill(t)
	// WAIT counts no replica within the timeout and the append is refused
	// well before this deadline; one that hung would end at the deadline
	// with a context error instead of the count.
	refuseCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := l.Append(refuseCtx, "t1", []store.Record{{Payload: []byte("alone")}})
	if !errors.Is(err, store.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas within") || refuseCtx.Err() != nil {
		t.Fatalf("Append without a replica: %v (deadline: %v), want ErrNotReplicated counting 0 of 1 replicas", err, refuseCtx.Err())
	}
	if got := mustReadAll(t, s, "t1"); len(got) != 1 || string(got[0].Payload) != "replicated" {
		t.Fatalf("after the refused append the ledger holds %d records, want only the replicated one", len(got))
	}
	if err := s.Capabilities().Put(ctx, "cap2", []byte("v"), time.Now().Add(time.Hour)); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("Put without a replica: %v, want ErrNotReplicated", err)
	}
	// A registry write a confirmation waits for (Slack's durable intake)
	// is refused the same way; one that does not apply writes nothing and
	// is answered as before.
	if swapped, err := s.Registry().CompareAndSwap(ctx, "slack/intake", "k2", nil, []byte("v")); !errors.Is(err, store.ErrNotReplicated) || swapped {
		t.Fatalf("registry CompareAndSwap without a replica: %v, %v; want ErrNotReplicated", swapped, err)
	}
	if _, err := s.Registry().Put(ctx, "slack/intake", "k3", []byte("v")); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("registry Put without a replica: %v, want ErrNotReplicated", err)
	}
	if deleted, err := s.Registry().Delete(ctx, "slack/intake", "absent"); err != nil || deleted {
		t.Fatalf("registry Delete of an absent key without a replica: %v, %v; want false, nil", deleted, err)
	}
	// A claim (a nexscope action's, a dedupe's) is refused too, and the
	// one it took on the primary alone released: a failover could lose it
	// and let a second caller act, and kept it would refuse the retry.
	// Before, Claim took it on the primary alone and reported it taken.
	claimUntil := time.Now().Add(time.Hour)
	if took, err := s.Claims().Claim(ctx, "nexscope:exec:1", claimUntil); !errors.Is(err, store.ErrNotReplicated) || took {
		t.Fatalf("Claim without a replica: %v, %v; want ErrNotReplicated", took, err)
	}
	// A dedupe's done marker (Hold) is refused too: one on the primary
	// alone, lost in a failover, lets a retry of the event be delivered
	// again. Before, Hold returned once the primary had it.
	if err := s.Claims().Hold(ctx, "done/2", claimUntil); !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("Hold without a replica: %v; want ErrNotReplicated", err)
	}
	// A probe (an expiry already past: a dedupe's look for a done marker)
	// holds nothing and waits for no replica. Before, it waited the
	// timeout, and failed, as a claim does: every webhook's dedupe waited
	// for the replicas twice.
	probeCtx, cancelProbe := context.WithTimeout(ctx, cfg.RedisReplicaTimeout/2)
	defer cancelProbe()
	if free, err := s.Claims().Claim(probeCtx, "done/1", time.Unix(1, 0)); err != nil || !free {
		t.Fatalf("probe without a replica: %v, %v; want free at once", free, err)
	}
	// A store that asks for no replica is not held up.
	plain := opener(t, store.Config{Backend: store.BackendRedis, RedisURL: primary.URL(), RedisPrefix: cfg.RedisPrefix})(clock.System)
	if _, err := plain.Ledger().Append(ctx, "t2", []store.Record{{}}); err != nil {
		t.Fatalf("Append with RedisMinReplicas 0 and no replica: %v", err)
	}

	replica.Restart(t)
	primary.WaitReplicas(t, 1)
	untilReplicated(t, "Append with the replica back", func() error {
		_, err := l.Append(ctx, "t1", []store.Record{{Payload: []byte("again")}})
		return err
	})
	untilReplicated(t, "Claim with the replica back", func() error {
		took, err := s.Claims().Claim(ctx, "nexscope:exec:1", claimUntil)
		if err == nil && !took {
			t.Fatal("the claim refused without a replica still holds the key")
		}
		return err
	})
}

// A data set written before the hash-tag key layout (an epoch and no
// layout key) is refused with what to do, never read as empty.
func TestRedisRefusesTheEarlierKeyLayout(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.Set(ctx, "old:epoch", "0123456789abcdef", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), RedisPrefix: "old:"})
	if err == nil || !strings.Contains(err.Error(), "earlier connector") {
		t.Fatalf("Open over the earlier layout: %v", err)
	}
}

func mustReadAll(t *testing.T, s store.Store, tenant string) []store.Record {
	t.Helper()
	got, err := s.Ledger().Read(context.Background(), tenant, 0, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// With RedisMinReplicas a lease counts only once a replica has it: with the
// replica gone, a new lease (and its fencing token) is not taken (Acquire
// fails with ErrNotReplicated, Hold gives no tenure) and a renewal fails
// with ErrNotReplicated, not ErrNotHeld, so a Tenure steps down by its
// fence; each waits for the replica at most a renewal period (a quarter of
// the TTL), not RedisReplicaTimeout. With the replica back the holder's
// next bid takes the lease, and the fencing token has not gone back. A
// store that asks for no replica takes leases as before.
func TestRedisMinReplicasLeases(t *testing.T) {
	primary := redistest.Start(t, redistest.Options{})
	replica := redistest.StartReplicas(t, primary, 1)[0]
	ctx := context.Background()
	cfg := redisConfig(primary)
	cfg.RedisMinReplicas, cfg.RedisReplicaTimeout = 1, 4*time.Second
	s := opener(t, cfg)(clock.System)
	leases := s.Leases()
	// The TTL's renewal period, 500 ms, is what each refused lease call
	// waits, below the replica timeout.
	const ttl = 2 * time.Second
	// The leases taken with the replica online outlast the steps below,
	// however long a loaded machine makes them.
	const long = time.Minute
	held := acquireReplicated(t, leases, "held", long)
	other := acquireReplicated(t, leases, "other", long)
	// Acquire returned once the replica had the lease and its token.
	rc := replica.Client(t)
	for name, l := range map[string]store.Lease{"held": held, "other": other} {
		onReplica, err := rc.Get(ctx, cfg.RedisPrefix+"leasetoken:{"+name+"}").Uint64()
		if err != nil || onReplica != l.Token {
			t.Fatalf("%s: token %d acquired, %d (%v) on the replica", name, l.Token, onReplica, err)
		}
	}

	// Within the TTL of the leases taken above, so that each call finds
	// its lease.
	replica.Kill(t)
	if _, err := leases.Renew(ctx, "held", held, ttl); !errors.Is(err, store.ErrNotReplicated) || errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew without a replica: %v, want ErrNotReplicated", err)
	}
	// Extending a lease one holds is no more its own than taking it.
	if _, acquired, err := leases.Acquire(ctx, "other", "a", ttl); acquired || !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("Acquire of a lease held, without a replica = %v, %v; want ErrNotReplicated", acquired, err)
	}
	// A release does not wait for the replicas: lost, the lease expires.
	if err := leases.Release(ctx, "other", other); err != nil {
		t.Fatalf("Release without a replica: %v", err)
	}
	l, acquired, err := leases.Acquire(ctx, "new", "a", ttl)
	if !errors.Is(err, store.ErrNotReplicated) || acquired || l != (store.Lease{}) {
		t.Fatalf("Acquire without a replica = %+v, %v, %v; want not acquired, ErrNotReplicated", l, acquired, err)
	}
	if !strings.Contains(err.Error(), "within 500ms") {
		t.Fatalf("the refused Acquire waited for the replica beyond the renewal period: %v", err)
	}
	if tn, _, err := store.Hold(ctx, clock.System, leases, "new", "a", ttl, nil); tn != nil || !errors.Is(err, store.ErrNotReplicated) {
		t.Fatalf("Hold without a replica = tenure %v, %v; want none, ErrNotReplicated", tn != nil, err)
	}
	// A store that asks for no replica is not held up.
	plainCfg := redisConfig(primary)
	plainCfg.RedisPrefix = cfg.RedisPrefix
	plain := opener(t, plainCfg)(clock.System)
	if _, acquired, err := plain.Leases().Acquire(ctx, "plain", "b", ttl); err != nil || !acquired {
		t.Fatalf("Acquire with RedisMinReplicas 0 and no replica = %v, %v", acquired, err)
	}

	replica.Restart(t)
	primary.WaitReplicas(t, 1)
	l = acquireReplicated(t, leases, "new", ttl)
	untilReplicated(t, "Renew with the replica back", func() error {
		_, err := leases.Renew(ctx, "new", l, ttl)
		return err
	})
}

// acquireReplicated acquires lease name for holder "a" while a replica is
// online (untilReplicated).
func acquireReplicated(t *testing.T, leases store.Leases, name string, ttl time.Duration) store.Lease {
	t.Helper()
	var l store.Lease
	untilReplicated(t, "Acquire "+name, func() error {
		var acquired bool
		var err error
		l, acquired, err = leases.Acquire(context.Background(), name, "a", ttl)
		if err == nil && !acquired {
			err = fmt.Errorf("held by %+v", l)
		}
		return err
	})
	return l
}

// untilReplicated runs op, a write made while a replica is online, until
// the replica acknowledges it: the wait for that is bounded (by
// RedisReplicaTimeout; for a lease by a quarter of its TTL), which a
// loaded machine may outlast (a lease stays on the primary, so the next
// call finds it the caller's; a refused append is removed).
// Any other error fails the test, and so does no acknowledgement within
// 30 s.
func untilReplicated(t *testing.T, what string, op func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := op()
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrNotReplicated) || time.Now().After(deadline) {
			t.Fatalf("%s with a replica online: %v", what, err)
		}
	}
}

// TestCheckRedisRefusesAPortOutOfRange: a redis_url whose port is no TCP
// port is refused with the key named, as serve -check reports it; the
// URL (which may carry a password) is not repeated. Before, go-redis
// parsed port 99999 and the config was ok until serve dialled it.
func TestCheckRedisRefusesAPortOutOfRange(t *testing.T) {
	for _, port := range []string{"0", "65536", "99999"} {
		u := "redis://:pw-x7@h:" + port + "/0"
		err := store.CheckRedis(store.Config{Backend: store.BackendRedis, RedisURL: u})
		if err == nil || !strings.Contains(err.Error(), "store.redis_url") || strings.Contains(err.Error(), "pw-x7") {
			t.Errorf("port %s: %v, want an error naming store.redis_url, not the password", port, err)
		}
	}
	for _, u := range []string{"redis://h:1/0", "redis://h:65535/0", "rediss://h/0"} {
		if err := store.CheckRedis(store.Config{Backend: store.BackendRedis, RedisURL: u}); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}
