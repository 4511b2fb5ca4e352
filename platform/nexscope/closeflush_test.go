package nexscope

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/internal/redistest"
	"connector/platform"
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
	var gc *gatedConn
	select {
	case gc = <-gl.conns:
	case <-time.After(testTimeout):
		t.Fatal("timed out waiting for the relay's side of slow's connection")
	}
	t.Cleanup(func() { _ = gc.Close() }) // before Run stops: a flush still under way ends
	sender := tr.join(t, "", "sender")
	slow.Expect("presence") // sender joined
	gc.gate()
	slow.DiscardInBackground()

	// 3 MiB queued for slow, each frame well below what a step grants.
	pad := strings.Repeat("x", 32<<10)
	for i := range 96 {
		sender.SendJSON(msg("m"+strconv.Itoa(i), "sender", []string{"slow"}, pad))
		sender.Expect("ack") // the msg is queued for slow
	}
	gc.waitStalled(t, "slow's writer to block on the gated socket")
	slow.SendText(strings.Repeat("y", 65<<10)) // over max_payload: 4011 after the flush
	waitFor(t, "slow's queue closed by a flushing close", func() bool {
		for _, m := range tr.members() {
			if m.name == "slow" {
				return m.q.Flushing()
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
			case <-gc.closed:
				return
			default:
			}
		}
		gc.grant(128 << 10)
		if !gc.waitStalled(t, "slow's writer to block again or its socket to be dropped") {
			t.Fatalf("socket dropped %v after the close, before WriteTimeout (%v): too little was queued for this test", wt/steps*time.Duration(i), wt)
		}
	}
	t.Fatalf("still flushing WriteTimeout (%v) after the 4011 close", wt)
}

// serveGated serves tr's routes on a second loopback server whose sockets
// are gatedConns, and points tr's joins at it.
func serveGated(t *testing.T, tr *testRelay) *gatedListener {
	t.Helper()
	mux := http.NewServeMux()
	for pattern, h := range tr.p.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewUnstartedServer(mux)
	gl := &gatedListener{Listener: srv.Listener, conns: make(chan *gatedConn, 4)}
	srv.Listener = gl
	srv.Start()
	t.Cleanup(srv.Close)
	tr.url = "ws" + strings.TrimPrefix(srv.URL, "http")
	return gl
}

// gatedListener hands out gatedConns, each also sent on conns.
type gatedListener struct {
	net.Listener
	conns chan *gatedConn
}

func (l *gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	g := &gatedConn{Conn: c, more: make(chan struct{}, 1), stalled: make(chan struct{}, 1), closed: make(chan struct{})}
	select {
	case l.conns <- g:
	default:
	}
	return g, nil
}

// gatedConn is a server socket that, once gated, writes only the bytes
// granted to it: a write past them blocks (and says so on stalled) until
// more are granted or the socket is closed.
type gatedConn struct {
	net.Conn
	mu      sync.Mutex
	gated   bool
	budget  int
	more    chan struct{} // cap 1: bytes were granted
	stalled chan struct{} // cap 1: a write waits for bytes
	closed  chan struct{}
	once    sync.Once
}

func (g *gatedConn) gate() {
	g.mu.Lock()
	g.gated = true
	g.mu.Unlock()
}

func (g *gatedConn) grant(n int) {
	g.mu.Lock()
	g.budget += n
	g.mu.Unlock()
	select {
	case g.more <- struct{}{}:
	default:
	}
}

// waitStalled waits for a write to block for want of bytes (true) or for
// the socket to be closed (false).
func (g *gatedConn) waitStalled(t *testing.T, what string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	select {
	case <-g.stalled:
		return true
	case <-g.closed:
		return false
	case <-ctx.Done():
		t.Fatalf("timed out waiting for %s", what)
		return false
	}
}

func (g *gatedConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		select {
		case <-g.closed:
			return written, net.ErrClosed
		default:
		}
		g.mu.Lock()
		n := len(p)
		if g.gated {
			n = min(n, g.budget)
			g.budget -= n
		}
		g.mu.Unlock()
		if n == 0 {
			select {
			case g.stalled <- struct{}{}:
			default:
			}
			select {
			case <-g.more:
			case <-g.closed:
			}
			continue
		}
		m, err := g.Conn.Write(p[:n])
		written += m
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

func (g *gatedConn) Close() error {
	g.once.Do(func() { close(g.closed) })
	return g.Conn.Close()
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
	var gc *gatedConn
	select {
	case gc = <-gl.conns:
	case <-time.After(testTimeout):
		t.Fatal("timed out waiting for the edge's side of slow's connection")
	}
	t.Cleanup(func() { _ = gc.Close() }) // before Run stops: a flush still under way ends
	sender := home.joinWith(t, "sender", "sender", "slow")
	slow.ExpectPresence("sender", "slow")
	gc.gate()
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
	gc.waitStalled(t, "slow's writer to block on the gated socket")
	stopped := make(chan struct{})
	go func() {
		edge.stop() // closes slow with 1001 after a flush
		close(stopped)
	}()
	waitFor(t, "slow's queue closed by a flushing close", func() bool {
		m := slowMember()
		return m != nil && m.q.Flushing()
	})
	const steps = 4
	for i := 1; i <= steps; i++ {
		fake.Advance(wt / steps)
		if i == steps {
			select {
			case <-gc.closed:
				select {
				case <-stopped:
				case <-time.After(testTimeout):
					t.Fatal("the edge's Run did not return once slow's socket was dropped")
				}
				return
			default:
			}
		}
		gc.grant(128 << 10)
		if !gc.waitStalled(t, "slow's writer to block again or its socket to be dropped") {
			t.Fatalf("socket dropped %v after the close, before WriteTimeout (%v): too little was queued for this test", wt/steps*time.Duration(i), wt)
		}
	}
	t.Fatalf("the edge still flushing WriteTimeout (%v) after its 1001 close: its shutdown waits", wt)
}
