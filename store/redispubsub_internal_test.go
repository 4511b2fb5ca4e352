package store

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"connector/internal/redistest"
)

// checkedCtx is a context whose first Err call is signalled on checked,
// so a test knows subscribe has passed its early ctx check.
type checkedCtx struct {
	context.Context
	once    sync.Once
	checked chan struct{}
}

func (c *checkedCtx) Err() error {
	c.once.Do(func() { close(c.checked) })
	return c.Context.Err()
}

// subscribedClientIDs is the ids of the server's clients subscribed to a
// channel.
func subscribedClientIDs(t *testing.T, admin *redis.Client) []string {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
		var id string
		subscribed := false
		for f := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(f, "sub="); ok {
				n, _ := strconv.Atoi(v)
				subscribed = n > 0
			}
		}
		if subscribed {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestRedisSubscribeExpiredCtxKeepsConnection: a Subscribe whose ctx
// deadline passes while it waits for its turn writes its SUBSCRIBE on the
// shared connection without that deadline, so it does not fail the write
// and make go-redis drop the connection every other subscription is on.
func TestRedisSubscribeExpiredCtxKeepsConnection(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	admin := srv.Client(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	rs := newRedisSubs(c)
	defer rs.close()
	bg, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, _, err := rs.subscribe(bg, "a"); err != nil {
		t.Fatal(err)
	}
	before := subscribedClientIDs(t, admin)
	if len(before) != 1 {
		t.Fatalf("subscribed clients %v, want one", before)
	}

	// The deadline passes while subscribe waits for rs.mu.
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	ctx := &checkedCtx{Context: dctx, checked: make(chan struct{})}
	rs.mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, stop, err := rs.subscribe(ctx, "b")
		if err == nil {
			stop()
		}
	}()
	<-ctx.checked
	<-dctx.Done()
	rs.mu.Unlock()
	select {
	case <-done:
	case <-bg.Done():
		t.Fatal("timed out waiting for subscribe to return")
	}

	// A confirmed subscription: the connection subscribed now is up.
	if _, _, err := rs.subscribe(bg, "c"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		after := subscribedClientIDs(t, admin)
		if len(after) == 1 {
			if after[0] != before[0] {
				t.Fatalf("subscribed client %s replaced by %s: the expired ctx dropped the shared connection", before[0], after[0])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for one subscribed client: %v", after)
		}
		time.Sleep(10 * time.Millisecond) // polling the server, not synchronising goroutines
	}
}

// TestRedisFailedSubscribeDoesNotDialAgain: a SUBSCRIBE that failed, its
// connection down, is taken out of the PubSub without dialling again: its
// cleanup runs under rs.mu, where a dial to a black-holed host would hold
// every subscribe and delivery for go-redis's dial timeouts. The server
// here is a listener that closes each connection it accepts.
func TestRedisFailedSubscribeDoesNotDialAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			_ = c.Close()
		}
	})
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	defer c.Close()
	rs := newRedisSubs(c)
	defer rs.close()

	if _, _, err := rs.subscribe(t.Context(), "a"); err == nil {
		t.Fatal("subscribe through a server that closes every connection succeeded")
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections dialled by a failed subscribe, want 1 (its own): its cleanup dialled again", n)
	}
	rs.mu.Lock()
	_, left := rs.chans["a"]
	rs.mu.Unlock()
	if left {
		t.Fatal("a failed subscribe left its channel")
	}
}

// TestRedisStaleConfirmationDoesNotConfirm: a confirmation of a channel's
// SUBSCRIBE sent before its UNSUBSCRIBE (a reconnection subscribes every
// channel again) that dispatch reads after the channel was left and
// subscribed again does not confirm the new subscription: the server may
// not have taken its SUBSCRIBE yet, and a message published meanwhile
// would be lost. The test stands between go-redis and dispatch, so it
// hands dispatch each server reply when it chooses.
func TestRedisStaleConfirmationDoesNotConfirm(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs := newRedisSubs(c)
	rs.ps = c.Subscribe(ctx)
	replies := rs.ps.ChannelWithSubscriptions()
	mid := make(chan any) // unbuffered: a send returns once dispatch took the one before
	rs.dispatching = true
	go rs.dispatch(mid)
	next := func(want string) any {
		t.Helper()
		select {
		case m := <-replies:
			if s, ok := m.(*redis.Subscription); !ok || s.Kind+" "+s.Channel != want {
				t.Fatalf("server reply %v, want %s", m, want)
			}
			return m
		case <-ctx.Done():
			t.Fatalf("timed out waiting for the server's %s", want)
			return nil
		}
	}
	hand := func(m any) {
		mid <- m
		mid <- &redis.Pong{} // dispatch passes it over once it handled m
	}
	confirmed := func() bool {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		ch := rs.chans["k"]
		return ch != nil && ch.confirmed
	}
	type result struct {
		msgs <-chan []byte
		stop func()
		err  error
	}
	subscribe := func() <-chan result {
		r := make(chan result, 1)
		go func() {
			msgs, stop, err := rs.subscribe(ctx, "k")
			r <- result{msgs, stop, err}
		}()
		return r
	}

	first := subscribe()
	hand(next("subscribe k"))
	r := <-first
	if r.err != nil {
		t.Fatal(r.err)
	}
	// A reconnection's SUBSCRIBE, its confirmation not read yet.
	if err := rs.ps.Subscribe(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	stale := next("subscribe k")
	r.stop() // the last subscriber leaves: UNSUBSCRIBE
	second := subscribe()
	unsubscribed := next("unsubscribe k")
	own := next("subscribe k") // the second subscription's SUBSCRIBE
	hand(stale)
	if confirmed() {
		t.Fatal("a confirmation sent before the channel's UNSUBSCRIBE confirmed its next subscription")
	}
	hand(unsubscribed)
	hand(own)
	if !confirmed() {
		t.Fatal("the channel's own confirmation, read after its UNSUBSCRIBE's reply, did not confirm it")
	}
	go func() { // the rest as it comes
		defer close(mid)
		for m := range replies {
			mid <- m
		}
	}()
	r = <-second
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.stop()
	if err := c.Publish(ctx, "k", "hello").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-r.msgs:
		if string(m) != "hello" {
			t.Fatalf("message %q, want hello", m)
		}
	case <-ctx.Done():
		t.Fatal("timed out waiting for the message")
	}
	rs.close()
}

// TestRedisSubscribeAfterALostUnsubscribeReply: a channel whose last
// UNSUBSCRIBE's reply a reconnection lost is still confirmed when
// subscribed again: the confirmation it distrusts makes it subscribe once
// more, and the answer to that confirms it.
func TestRedisSubscribeAfterALostUnsubscribeReply(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	rs := newRedisSubs(c)
	defer rs.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := rs.subscribe(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	rs.mu.Lock()
	rs.leaving["k"] = 1 // its reply lost with the connection it was written on
	rs.mu.Unlock()
	msgs, stop, err := rs.subscribe(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := c.Publish(ctx, "k", "hello").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		if string(m) != "hello" {
			t.Fatalf("message %q, want hello", m)
		}
	case <-ctx.Done():
		t.Fatal("timed out waiting for the message")
	}
}

// TestRedisSubscribeDoesNotWaitForAnotherDial: a Subscribe whose
// connection is being dialled (a host that accepts and never answers)
// holds up no other Subscribe: that one returns when its own ctx ends.
// Before, the first dialled under rs.mu, and every other Subscribe,
// cancel and delivery waited for its dial, whatever their contexts.
func TestRedisSubscribeDoesNotWaitForAnotherDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	})
	hangUp := func() { // the dials under way fail at once
		for {
			select {
			case c := <-accepted:
				_ = c.Close()
			default:
				return
			}
		}
	}
	defer hangUp()
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ReadTimeout: time.Minute, ContextTimeoutEnabled: true})
	defer c.Close()
	rs := newRedisSubs(c)
	defer rs.close()

	first, cancelFirst := context.WithCancel(context.Background())
	defer cancelFirst()
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		_, _, _ = rs.subscribe(first, "a")
	}()
	select {
	case conn := <-accepted:
		accepted <- conn // closed at the end
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the first Subscribe to dial")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() {
		_, _, err := rs.subscribe(ctx, "b")
		returned <- err
	}()
	select {
	case err := <-returned:
		if err == nil {
			t.Fatal("a Subscribe through a server that never answers succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a Subscribe whose ctx ended waited for another Subscribe's dial")
	}
	cancelFirst()
	select {
	case <-firstDone:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the first Subscribe to return after its cancel")
	}
	hangUp()
	rs.close()
}

// TestRedisCloseDoesNotWaitForAHandshake: close returns at once while the
// subscriptions' connection is in its handshake with a server that never
// answers. Before, it waited for the PubSub, which go-redis holds for the
// handshake's read timeout (the connection not yet tracked, so closing the
// client does not cut it).
func TestRedisCloseDoesNotWaitForAHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c // held open, never answered
		}
	})
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ReadTimeout: time.Minute, ContextTimeoutEnabled: true})
	defer c.Close()
	rs := newRedisSubs(c)
	returned := make(chan error, 1)
	go func() {
		_, _, err := rs.subscribe(context.Background(), "a")
		returned <- err
	}()
	var conn net.Conn
	select {
	case conn = <-accepted:
		defer conn.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the Subscribe to dial")
	}
	// The handshake's first command read: the client waits for its reply.
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		rs.close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close waited for a handshake with a server that does not answer")
	}
	select {
	case err := <-returned:
		if err == nil {
			t.Fatal("a Subscribe closed in its handshake succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for the Subscribe ended by close")
	}
}
