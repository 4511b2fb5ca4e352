package store_test

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"connector/internal/redistest"
	"connector/store"
)

// replyDropper is a TCP proxy to a redis-server that, once armed with a
// marker, forwards the next request holding it and then, instead of the
// server's reply, closes the connection: the reply of a command that ran
// is lost, and the client sees EOF.
type replyDropper struct {
	ln      net.Listener
	target  string
	marker  atomic.Pointer[[]byte]
	dropped atomic.Int64
	wg      sync.WaitGroup
	// hold, once set, makes every reply lost with its connection kept
	// open: a server that no longer answers. held is closed at the first.
	hold     atomic.Bool
	held     chan struct{}
	heldOnce sync.Once
}

// newReplyDropper proxies to target until t ends.
func newReplyDropper(t *testing.T, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln, target: target, held: make(chan struct{})}
	p.wg.Go(p.serve)
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

// arm makes the next request holding marker lose its reply.
func (p *replyDropper) arm(marker string) {
	m := []byte(marker)
	p.marker.Store(&m)
}

func (p *replyDropper) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.pipe(c) })
	}
}

// pipe forwards between client and a connection of its own to the
// server until either ends.
func (p *replyDropper) pipe(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	var drop atomic.Bool
	p.wg.Go(func() {
		defer client.Close()
		defer server.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 && p.hold.Load() {
				p.heldOnce.Do(func() { close(p.held) })
				continue
			}
			if n > 0 && drop.Load() {
				p.dropped.Add(1)
				return // the command ran; its reply is lost
			}
			if n > 0 {
				if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	})
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if m := p.marker.Load(); m != nil && bytes.Contains(buf[:n], *m) && p.marker.CompareAndSwap(m, nil) {
				drop.Store(true)
			}
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestRedisRegistryWriteReplyLost: a registry write whose reply is lost
// after it ran (the connection cut: go-redis resends the pipeline) is
// answered as it ran. Before, the resent compare-and-swap found its own
// value and answered "not swapped" (an admin create answered as a
// conflict), the resent Delete "not deleted", and the resent Put bumped
// the revision again.
func TestRedisRegistryWriteReplyLost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	proxy := newReplyDropper(t, srv.Addr())
	cfg := redisConfig(srv)
	cfg.RedisURL = "redis://" + proxy.ln.Addr().String() + "/0"
	reg := opener(t, cfg)(nil).Registry()
	ctx := t.Context()
	lost := func(what string) {
		t.Helper()
		if n := proxy.dropped.Swap(0); n != 1 {
			t.Fatalf("%s: %d replies dropped, want 1", what, n)
		}
	}

	// The write script loaded first: a lost NOSCRIPT reply is no test.
	if _, err := reg.Put(ctx, "warm", "k", nil); err != nil {
		t.Fatal(err)
	}
	proxy.arm("created-value")
	if swapped, err := reg.CompareAndSwap(ctx, "ns", "k", nil, []byte("created-value")); !swapped || err != nil {
		t.Fatalf("create whose reply was lost: swapped %v, err %v; want swapped", swapped, err)
	}
	lost("create")
	proxy.arm("swapped-value")
	if swapped, err := reg.CompareAndSwap(ctx, "ns", "k", []byte("created-value"), []byte("swapped-value")); !swapped || err != nil {
		t.Fatalf("swap whose reply was lost: swapped %v, err %v; want swapped", swapped, err)
	}
	lost("swap")
	proxy.arm("put-value")
	rev, err := reg.Put(ctx, "ns", "p", []byte("put-value"))
	if err != nil {
		t.Fatal(err)
	}
	lost("put")
	if now, err := reg.Revision(ctx, "ns"); now != rev || err != nil {
		t.Fatalf("revision after a put whose reply was lost: %d, %v; want the put's %d (it ran once)", now, err, rev)
	}
	proxy.arm("\r\nk\r\n")
	if deleted, err := reg.Delete(ctx, "ns", "k"); !deleted || err != nil {
		t.Fatalf("delete whose reply was lost: deleted %v, err %v; want deleted", deleted, err)
	}
	lost("delete")
	want := []store.Entry{{Key: "p", Value: []byte("put-value"), Rev: rev}}
	if got, _, err := reg.List(ctx, "ns"); err != nil || len(got) != 1 || got[0].Key != want[0].Key || !bytes.Equal(got[0].Value, want[0].Value) {
		t.Fatalf("entries %+v, %v; want %+v", got, err, want)
	}
}

// TestRedisClaimReplyLost: a Claim whose reply is lost after it ran (go-redis
// sends it again) answers that it took the claim, and so does a Renew.
// Before, the resent Claim found its own live claim and answered "not
// taken", so its caller dropped what it had just claimed.
func TestRedisClaimReplyLost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	proxy := newReplyDropper(t, srv.Addr())
	cfg := redisConfig(srv)
	cfg.RedisURL = "redis://" + proxy.ln.Addr().String() + "/0"
	open := opener(t, cfg)
	claims := open(nil).Claims()
	ctx := t.Context()
	expires := time.Now().Add(time.Hour)

	// The scripts loaded first: a lost NOSCRIPT reply is no test.
	if _, err := claims.Claim(ctx, "warm", expires); err != nil {
		t.Fatal(err)
	}
	if _, err := claims.Renew(ctx, "warm", expires, expires); err != nil {
		t.Fatal(err)
	}
	proxy.arm("ev/lost")
	if took, err := claims.Claim(ctx, "ev/lost", expires); !took || err != nil {
		t.Fatalf("claim whose reply was lost: took %v, err %v; want taken", took, err)
	}
	if n := proxy.dropped.Swap(0); n != 1 {
		t.Fatalf("claim: %d replies dropped, want 1", n)
	}
	if took, err := open(nil).Claims().Claim(ctx, "ev/lost", expires); took || err != nil {
		t.Fatalf("another caller's claim of the same key with the same expiry: took %v, err %v; want refused", took, err)
	}
	later := expires.Add(time.Hour)
	proxy.arm("ev/lost")
	if renewed, err := claims.Renew(ctx, "ev/lost", expires, later); !renewed || err != nil {
		t.Fatalf("renewal whose reply was lost: renewed %v, err %v; want renewed", renewed, err)
	}
	if n := proxy.dropped.Swap(0); n != 1 {
		t.Fatalf("renewal: %d replies dropped, want 1", n)
	}
}

// TestRedisRegistryAnswerOutlastsResends: a registry write's kept answer
// lasts until go-redis's last resend even when each resend first dials for
// the client's whole dial budget (a failover: the old primary black-holed,
// the new one named by Sentinel only after dials time out), after waiting
// its pool timeout for a connection (the pool busy). Before, it was
// kept four read timeouts (16 s), and a resend after it expired answered
// from its second run (a create answered as a conflict).
func TestRedisRegistryAnswerOutlastsResends(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	// go-redis's defaults, and a URL that sends more often and dials longer.
	for _, query := range []string{"", "?max_retries=7&dial_timeout=10s&max_retry_backoff=2s", "?pool_timeout=60s"} {
		t.Run("url"+query, func(t *testing.T) {
			cfg := redisConfig(srv)
			cfg.RedisURL += query
			reg := opener(t, cfg)(nil).Registry()
			ctx := t.Context()
			if _, err := reg.Put(ctx, "ns", "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			admin := srv.Client(t)
			keys, err := admin.Keys(ctx, cfg.RedisPrefix+"registryanswer:*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("answer keys %v, %v; want one", keys, err)
			}
			pttl, err := admin.PTTL(ctx, keys[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			opt, err := redis.ParseURL(cfg.RedisURL)
			if err != nil {
				t.Fatal(err)
			}
			opt.ReadTimeout = 3 * time.Second   // the store's (readTimeoutFor)
			o := redis.NewClient(opt).Options() // go-redis's defaults where the URL sets none
			resends := time.Duration(o.MaxRetries)
			dials := time.Duration(o.DialerRetries) * (o.DialTimeout + o.DialerRetryTimeout)
			handshake := 4 * (o.WriteTimeout + o.ReadTimeout) // HELLO, options, maintenance notifications, CLIENT SETINFO
			if want := resends * (o.PoolTimeout + dials + handshake + o.MaxRetryBackoff + o.ReadTimeout); pttl < want {
				t.Fatalf("answer kept %v; go-redis's %d resends may each dial for %v and set the connection up for %v: want at least %v", pttl, o.MaxRetries, dials, handshake, want)
			}
		})
	}
}

// TestRedisLeaseReleaseReplyLost: a lease Release whose reply is lost after
// it ran (go-redis sends it again) answers that it released the lease.
// Before, the resend found the lease gone and answered ErrNotHeld, so the
// relay took a tenant it had handed over for one it still drove.
func TestRedisLeaseReleaseReplyLost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	proxy := newReplyDropper(t, srv.Addr())
	cfg := redisConfig(srv)
	cfg.RedisURL = "redis://" + proxy.ln.Addr().String() + "/0"
	leases := opener(t, cfg)(nil).Leases()
	ctx := t.Context()

	// The scripts loaded first: a lost NOSCRIPT reply is no test.
	warm, _, err := leases.Acquire(ctx, "warm", "warm-holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := leases.Release(ctx, "warm", warm); err != nil {
		t.Fatal(err)
	}
	l, ok, err := leases.Acquire(ctx, "job", "lost-holder", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire = %+v, %v, %v", l, ok, err)
	}
	proxy.arm("lost-holder")
	if err := leases.Release(ctx, "job", l); err != nil {
		t.Fatalf("release whose reply was lost: %v; want released", err)
	}
	if n := proxy.dropped.Swap(0); n != 1 {
		t.Fatalf("release: %d replies dropped, want 1", n)
	}
	if h, ok, err := leases.Holder(ctx, "job"); ok || err != nil {
		t.Fatalf("Holder after the release = %+v, %v, %v; want free", h, ok, err)
	}
	if err := leases.Release(ctx, "job", l); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("a second Release: err %v, want ErrNotHeld", err)
	}
}

// TestRedisCloseCutsARoundTripShort: Close returns at once while a
// pipeline waits for a server that no longer answers (a black-holed
// primary at shutdown), and the call under way fails. Before, Close
// waited for go-redis to give the pipeline up: four sends of a read
// timeout each.
func TestRedisCloseCutsARoundTripShort(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	proxy := newReplyDropper(t, srv.Addr())
	cfg := redisConfig(srv)
	cfg.RedisURL = "redis://" + proxy.ln.Addr().String() + "/0"
	s := opener(t, cfg)(nil)
	ctx := t.Context()
	if _, err := s.Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte("warm")}}); err != nil {
		t.Fatal(err)
	}
	proxy.hold.Store(true)
	appended := make(chan error, 1)
	go func() {
		_, err := s.Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte("unanswered")}})
		appended <- err
	}()
	select {
	case <-proxy.held:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the append to reach the server")
	}
	closed := make(chan struct{})
	go func() {
		_ = s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a round trip to a server that does not answer")
	}
	select {
	case err := <-appended:
		if err == nil {
			t.Fatal("an append the server never answered succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the append cut short by Close")
	}
}

// TestRedisTrimReplyLost: a Trim whose reply is lost after it ran (go-redis
// sends it again) answers the entries it dropped. Before, the resend found
// them gone and answered none, so they were never logged nor counted as
// dropped.
func TestRedisTrimReplyLost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	proxy := newReplyDropper(t, srv.Addr())
	cfg := redisConfig(srv)
	cfg.RedisURL = "redis://" + proxy.ln.Addr().String() + "/0"
	l := opener(t, cfg)(nil).Ledger()
	ctx := t.Context()

	// The script loaded first: a lost NOSCRIPT reply is no test.
	if _, err := l.Trim(ctx, "warm", store.Bounds{MaxEntries: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, "lost-trim", []store.Record{{Platform: "discord", Payload: []byte("old")}, {Platform: "discord", Payload: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	proxy.arm("lost-trim")
	dropped, err := l.Trim(ctx, "lost-trim", store.Bounds{MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := proxy.dropped.Swap(0); n != 1 {
		t.Fatalf("trim: %d replies dropped, want 1", n)
	}
	if len(dropped) != 1 || dropped[0].Seq != 1 || dropped[0].Platform != "discord" || dropped[0].Bytes != 3 {
		t.Fatalf("trim whose reply was lost dropped %+v; want seq 1 (discord, 3 bytes)", dropped)
	}
	if recs, err := l.Read(ctx, "lost-trim", 0, 10, 0); err != nil || len(recs) != 1 || recs[0].Seq != 2 {
		t.Fatalf("after the trim: %+v, %v; want seq 2 alone", recs, err)
	}
}

// TestRedisAppendAckReplyLost: an Append and an Ack whose replies are lost
// after they ran (go-redis sends them again) answer as their first runs
// did. Before, the resent append stored its record a second time under
// the next seq, and the resent ack reported none removed.
func TestRedisAppendAckReplyLost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	proxy := newReplyDropper(t, srv.Addr())
	cfg := redisConfig(srv)
	cfg.RedisURL = "redis://" + proxy.ln.Addr().String() + "/0"
	l := opener(t, cfg)(nil).Ledger()
	ctx := t.Context()

	// The scripts loaded and the tenant indexed first: a lost NOSCRIPT
	// reply is no test.
	if _, err := l.Append(ctx, "lost-append", []store.Record{{Payload: []byte("warm")}}); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Ack(ctx, "lost-append", 1); n != 1 || err != nil {
		t.Fatalf("ack: %d, %v", n, err)
	}
	proxy.arm("lost-payload")
	seqs, err := l.Append(ctx, "lost-append", []store.Record{{Payload: []byte("lost-payload")}, {Payload: []byte("next")}})
	if err != nil {
		t.Fatal(err)
	}
	if n := proxy.dropped.Swap(0); n != 1 {
		t.Fatalf("append: %d replies dropped, want 1", n)
	}
	if len(seqs) != 2 || seqs[0] != 2 || seqs[1] != 3 {
		t.Fatalf("append whose reply was lost: seqs %v, want [2 3]", seqs)
	}
	if st, err := l.Stats(ctx, "lost-append"); err != nil || st.Entries != 2 || st.Bytes != 16 {
		t.Fatalf("after an append whose reply was lost: %+v, %v; want its 2 records (16 bytes) once", st, err)
	}
	proxy.arm("log:{lost-append}")
	if n, err := l.Ack(ctx, "lost-append", seqs...); n != 2 || err != nil {
		t.Fatalf("ack whose reply was lost: removed %d, %v; want 2", n, err)
	}
	if n := proxy.dropped.Swap(0); n != 1 {
		t.Fatalf("ack: %d replies dropped, want 1", n)
	}
	if st, err := l.Stats(ctx, "lost-append"); err != nil || st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("after the ack: %+v, %v; want none", st, err)
	}
}
