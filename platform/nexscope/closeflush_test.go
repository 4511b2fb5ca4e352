package nexscope

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/internal/gatetest"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/platformtest"
)

// TestClosingFlushEndsWriteTimeoutAfterTheClose: a member closed after a
// flush (here 4011, a frame over max_payload) whose client reads slowly but
// steadily, each write completing well within WriteTimeout, is dropped once
// WriteTimeout passed since the close, with frames still queued: the flush
// is bounded in total, not only per write. The relay's socket lets through
// only the bytes the test grants, so the test knows when the writer is
// blocked, and the clock is fake.
func TestClosingFlushEndsWriteTimeoutAfterTheClose(t *testing.T) {
	const wt = 4 * time.Second
	tr := startRelay(t, Config{
		WriteTimeout:      wt,
		HeartbeatInterval: time.Hour, // no ping comes due while the test advances the clock
		MaxPayload:        64 << 10,
	})
	gl := serveGated(t, tr)
	slow := tr.join(t, "", "slow")
	gc := gl.Next(t, testTimeout, "the relay's side of slow's connection")
	t.Cleanup(func() { _ = gc.Close() }) // before Run stops: a flush still under way ends
	sender := tr.join(t, "", "sender")
	slow.Expect("presence") // sender joined
	gc.Gate()
	slow.DiscardInBackground()

	// 3 MiB queued for slow, each frame well below what a step grants.
	pad := strings.Repeat("x", 32<<10)
	for i := range 96 {
		sender.SendJSON(msg("m"+strconv.Itoa(i), "sender", []string{"slow"}, pad))
		sender.Expect("ack") // the msg is queued for slow
	}
	gc.WaitStalled(t, testTimeout, "slow's writer to block on the gated socket")
	slow.SendText(strings.Repeat("y", 65<<10)) // over max_payload: 4011 after the flush
	// The flush's bound is armed just after the queue reports the flush:
	// the clock must not move before.
	waitFor(t, "slow's queue closed by a flushing close, WriteTimeout from now armed", func() bool {
		for _, m := range tr.members() {
			if m.name == "slow" {
				return m.q.Flushing() && m.watch.Expiring()
			}
		}
		return false
	})
	// Every step lets more than a whole message through, so no write under
	// way is ever a step old, and the per-write watchdog never fires.
	const steps = 4
	for i := 1; i <= steps; i++ {
		tr.clock.Advance(wt / steps)
		if i == steps {
			select {
			case <-gc.Closed():
				return
			default:
			}
		}
		gc.Grant(128 << 10)
		if !gc.WaitStalled(t, testTimeout, "slow's writer to block again or its socket to be dropped") {
			t.Fatalf("socket dropped %v after the close, before WriteTimeout (%v): too little was queued for this test", wt/steps*time.Duration(i), wt)
		}
	}
	t.Fatalf("still flushing WriteTimeout (%v) after the 4011 close", wt)
}

// serveGated serves tr's routes on a second loopback server whose sockets
// are gated (gatetest), and points tr's joins at it.
func serveGated(t *testing.T, tr *testRelay) *gatetest.Listener {
	t.Helper()
	mux := http.NewServeMux()
	for pattern, h := range tr.p.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewUnstartedServer(mux)
	gl := gatetest.NewListener(srv.Listener)
	srv.Listener = gl
	srv.Start()
	t.Cleanup(srv.Close)
	tr.url = "ws" + strings.TrimPrefix(srv.URL, "http")
	return gl
}

// TestClusterShutdownFlushEndsWriteTimeoutAfterTheClose: an edge that shuts
// down closes its member with 1001 after the frames queued for it (and its
// undelivered reports); a client reading slowly but steadily is dropped
// WriteTimeout after the close, so Run returns then instead of once the
// flush ends. The edge's socket lets through only the bytes the test
// grants, and the edge's clock is fake.
func TestClusterShutdownFlushEndsWriteTimeoutAfterTheClose(t *testing.T) {
	const wt = 4 * time.Second
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{WriteTimeout: wt, HeartbeatInterval: time.Hour, MaxPayload: 64 << 10}
	home := startInstance(t, srv, cfg, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	fake := newFakeClock()
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) { d.Clock = fake })
	gl := serveGated(t, edge.testRelay)
	slow := edge.joinWith(t, "slow", "slow")
	gc := gl.Next(t, testTimeout, "the edge's side of slow's connection")
	t.Cleanup(func() { _ = gc.Close() }) // before Run stops: a flush still under way ends
	sender := home.joinWith(t, "sender", "sender", "slow")
	slow.ExpectPresence("sender", "slow")
	gc.Gate()
	slow.DiscardInBackground()

	// 3 MiB queued for slow at its edge, each frame well below what a step
	// grants.
	pad := strings.Repeat("x", 32<<10)
	for i := range 96 {
		sender.SendJSON(msg("m"+strconv.Itoa(i), "sender", []string{"slow"}, pad))
		sender.Expect("ack")
	}
	slowMember := func() *member {
		for _, m := range edge.members() {
			if m.name == "slow" {
				return m
			}
		}
		return nil
	}
	waitFor(t, "the frames for slow queued at its edge", func() bool {
		m := slowMember()
		return m != nil && m.q.Queued() >= 96*32<<10
	})
	gc.WaitStalled(t, testTimeout, "slow's writer to block on the gated socket")
	stopped := make(chan struct{})
	go func() {
		edge.stop() // closes slow with 1001 after a flush
		close(stopped)
	}()
	waitFor(t, "slow's queue closed by a flushing close, WriteTimeout from now armed", func() bool {
		m := slowMember()
		return m != nil && m.q.Flushing() && m.watch.Expiring()
	})
	const steps = 4
	for i := 1; i <= steps; i++ {
		fake.Advance(wt / steps)
		if i == steps {
			select {
			case <-gc.Closed():
				select {
				case <-stopped:
				case <-time.After(testTimeout):
					t.Fatal("the edge's Run did not return once slow's socket was dropped")
				}
				return
			default:
			}
		}
		gc.Grant(128 << 10)
		if !gc.WaitStalled(t, testTimeout, "slow's writer to block again or its socket to be dropped") {
			t.Fatalf("socket dropped %v after the close, before WriteTimeout (%v): too little was queued for this test", wt/steps*time.Duration(i), wt)
		}
	}
	t.Fatalf("the edge still flushing WriteTimeout (%v) after its 1001 close: its shutdown waits", wt)
}

// TestClusterResignFlushesTheHomesOwnMembers: a home that loses the room's
// lease closes its own members with 1012 after the frames queued for them,
// as an edge does: a recipient whose writer is held up still gets the
// transfer_incomplete of the file it was receiving (its sender left with
// the room) before the close, not a bare 1012.
func TestClusterResignFlushesTheHomesOwnMembers(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	home := startInstance(t, srv, Config{HeartbeatInterval: time.Hour}, "i0", takeoverTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	gl := serveGated(t, home.testRelay)
	bob := home.joinWith(t, "bob", "bob")
	gc := gl.Next(t, testTimeout, "the home's side of bob's connection")
	t.Cleanup(func() { _ = gc.Close() })
	alice := home.joinWith(t, "alice", "alice", "bob")
	bob.ExpectPresence("alice", "bob")
	alice.SendJSON(fileStart("f1", "alice", []string{"bob"}, 100))
	bob.Expect("file-start")

	gc.Gate()
	alice.SendJSON(msg("m1", "alice", []string{"bob"}, strings.Repeat("x", 1000)))
	alice.Expect("ack") // m1 is queued for bob
	gc.WaitStalled(t, testTimeout, "bob's writer to block on the gated socket")
	var bobMember *member
	for _, m := range home.members() {
		if m.name == "bob" {
			bobMember = m
		}
	}
	_ = home.st.Close() // the home is cut off: its lease lapses, it resigns
	waitFor(t, "bob removed from the room by the resign", bobMember.left.Load)
	gc.Grant(1 << 20)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	incomplete := false
	for {
		_, b, err := bob.WS.Read(ctx)
		if err != nil {
			if !endedWith(err, CloseRoomMoved) {
				t.Fatalf("bob ended with %v, want %v", err, CloseRoomMoved)
			}
			break
		}
		if strings.Contains(string(b), `"code":"transfer_incomplete"`) && strings.Contains(string(b), `"msgId":"f1"`) {
			incomplete = true
		}
	}
	if !incomplete {
		t.Fatal("bob was closed with 1012 without the transfer_incomplete of f1 queued for it")
	}
	// alice, f1's sender, had no answer for it: undelivered (after the
	// presence of the others leaving, if it came first), then 1012.
	e := alice.Next()
	for e["type"] == "presence" {
		e = alice.Next()
	}
	if e["type"] != "error" || e["code"] != string(CodeUndelivered) || e["msgId"] != "f1" {
		t.Fatalf("alice got %v, want undelivered for f1", e)
	}
	expectClose(alice, CloseRoomMoved)
}

// TestShutdownFlushesLocalMembers: a connector that shuts down closes its
// members with 1001 after the frames queued for them: a member whose ack
// sits behind a write its client has not read yet gets the ack, then the
// 1001, instead of a bare 1001 that leaves it not knowing its msg was
// accepted. The relay's socket to that member lets through only the bytes
// the test grants; the clock is fake and not moved, so the flush's
// WriteTimeout bound never ends it early.
func TestShutdownFlushesLocalMembers(t *testing.T) {
	tr := newRelay(t, Config{HeartbeatInterval: time.Hour})
	var once sync.Once
	run := tr.run(t, platformtest.NewSink(64))
	stop := func() { once.Do(run) }
	t.Cleanup(stop)
	gl := serveGated(t, tr)
	slow := tr.join(t, "", "slow")
	gc := gl.Next(t, testTimeout, "the relay's side of slow's connection")
	t.Cleanup(func() { _ = gc.Close() })
	peer := tr.join(t, "", "peer")
	slow.ExpectPresence("peer", "slow")
	var slowMember *member
	for _, m := range tr.members() {
		if m.name == "slow" {
			slowMember = m
		}
	}

	gc.Gate()
	peer.SendJSON(msg("big", "peer", []string{"slow"}, strings.Repeat("x", 1000)))
	peer.Expect("ack")
	gc.WaitStalled(t, testTimeout, "slow's writer to block on the gated socket")
	slow.SendJSON(msg("m1", "slow", []string{"peer"}, "hi"))
	peer.Expect("msg")
	peer.DiscardInBackground() // reads up to its 1001, which the relay's close waits for
	waitFor(t, "slow's ack of m1 queued behind its blocked write", func() bool { return slowMember.q.Len() > 0 })

	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	waitFor(t, "slow's queue closed by the shutdown (flushing, or its frames dropped)", func() bool {
		return slowMember.left.Load() && (slowMember.q.Flushing() || slowMember.q.Len() == 0)
	})
	gc.Grant(1 << 20)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	acked := false
	for {
		_, b, err := slow.WS.Read(ctx)
		if err != nil {
			if !endedWith(err, CloseGoingAway) {
				t.Fatalf("slow ended with %v, want %v", err, CloseGoingAway)
			}
			break
		}
		if strings.Contains(string(b), `"type":"ack"`) && strings.Contains(string(b), `"msgId":"m1"`) {
			acked = true
		}
	}
	if !acked {
		t.Fatal("slow was closed with 1001 without the ack of m1 queued for it")
	}
	select {
	case <-stopped:
	case <-time.After(testTimeout):
		t.Fatal("Run did not return once slow's queue was flushed and closed")
	}
}

// TestShutdownFlushesMembersAtOnce: the members a shutdown closes flush
// together, each bounded by WriteTimeout from the shutdown, so two members
// whose clients read nothing hold Run up WriteTimeout in all, not one
// WriteTimeout each: both flushes' bounds are armed before the fake clock
// moves, and one WriteTimeout later both sockets are dropped and Run
// returns.
func TestShutdownFlushesMembersAtOnce(t *testing.T) {
	const wt = 4 * time.Second
	tr := newRelay(t, Config{WriteTimeout: wt, HeartbeatInterval: time.Hour})
	var once sync.Once
	run := tr.run(t, platformtest.NewSink(64))
	stop := func() { once.Do(run) }
	t.Cleanup(stop)
	gl := serveGated(t, tr)
	var gated []*gatetest.Conn
	for _, name := range []string{"a", "b"} {
		tr.join(t, "", name).DiscardInBackground()
		gc := gl.Next(t, testTimeout, "the relay's side of "+name+"'s connection")
		t.Cleanup(func() { _ = gc.Close() })
		gated = append(gated, gc)
	}
	peer := tr.join(t, "", "peer")
	waitFor(t, "a and b listed with peer", func() bool { return len(tr.members()) == 3 })
	for _, gc := range gated {
		gc.Gate()
	}
	peer.SendJSON(msg("big", "peer", []string{"a", "b"}, strings.Repeat("x", 1000)))
	peer.Expect("ack")
	peer.DiscardInBackground()
	for i, gc := range gated {
		gc.WaitStalled(t, testTimeout, "the writer of member "+strconv.Itoa(i)+" to block on its gated socket")
	}

	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	waitFor(t, "both a's and b's queues flushing, WriteTimeout from now armed for each", func() bool {
		n := 0
		for _, m := range tr.members() {
			if m.name != "peer" && m.q.Flushing() && m.watch.Expiring() {
				n++
			}
		}
		return n == 2
	})
	tr.clock.Advance(wt)
	for i, gc := range gated {
		select {
		case <-gc.Closed():
		case <-time.After(testTimeout):
			t.Fatalf("member %d's socket still open WriteTimeout (%v) after the shutdown", i, wt)
		}
	}
	select {
	case <-stopped:
	case <-time.After(testTimeout):
		t.Fatal("Run did not return once both sockets were dropped")
	}
}

// TestShutdownTellsAFilesSenderAndRecipients: a connector that shuts down
// during a file transfer tells its sender the file was not delivered
// (undelivered, naming the shutdown) and its recipient that it did not
// complete (transfer_incomplete), each before its 1001.
func TestShutdownTellsAFilesSenderAndRecipients(t *testing.T) {
	tr := newRelay(t, Config{HeartbeatInterval: time.Hour})
	var once sync.Once
	run := tr.run(t, platformtest.NewSink(64))
	stop := func() { once.Do(run) }
	t.Cleanup(stop)
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.ExpectPresence("alice", "bob")
	alice.SendJSON(fileStart("f1", "alice", []string{"bob"}, 100))
	bob.Expect("file-start")

	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	readToClose := func(c *client, name, want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		told := false
		for {
			_, b, err := c.WS.Read(ctx)
			if err != nil {
				if !told {
					t.Fatalf("%s ended with %v before %s for f1", name, err, want)
				}
				if !endedWith(err, CloseGoingAway) {
					t.Fatalf("%s ended with %v, want %v", name, err, CloseGoingAway)
				}
				return
			}
			if strings.Contains(string(b), want) && strings.Contains(string(b), `"msgId":"f1"`) {
				told = true
			}
		}
	}
	readToClose(alice, "alice", `"code":"undelivered"`)
	readToClose(bob, "bob", `"code":"transfer_incomplete"`)
	select {
	case <-stopped:
	case <-time.After(testTimeout):
		t.Fatal("Run did not return once alice and bob were closed")
	}
}
