package relay_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
)

// TestClosingFlushEndsWriteTimeoutAfterTheClose: a connection closed with
// a flushing close (here 1001) whose gateway reads slowly but steadily,
// each write completing well within WriteTimeout, is dropped once
// WriteTimeout passed since the close, with frames still queued: the flush
// is bounded in total, not only per write. The server's socket lets
// through only the bytes the test grants, so the test knows when the
// writer is blocked, and the clock is fake.
func TestClosingFlushEndsWriteTimeoutAfterTheClose(t *testing.T) {
	const wt = 4 * time.Second
	p := newFake("discord", map[string]string{"c1": "t1"})
	clk := clocktest.New(time.Now())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl := &gatedListener{Listener: ln, conns: make(chan *gatedConn, 4)}
	h := relaytest.StartWith(t, relay.Config{
		Tenants:      []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms:    []platform.Platform{p},
		Clock:        clk,
		WriteTimeout: wt,
		PingInterval: time.Hour, // no ping comes due while the test advances the clock
		AckWindow:    1000,
		Log:          relaytest.TestLogger(t),
	}, relaytest.Options{Listener: gl})
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, h.RelayURL(), &websocket.DialOptions{HTTPHeader: map[string][]string{
		"Authorization": {"Bearer " + relaytest.Token("gw1", "s1", clk.Now())}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(contract.MaxFrameBytes)
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type": "hello", "platform": "discord", "botId": ""}`+"\n")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || !strings.Contains(string(msg), `"descriptor"`) {
		t.Fatalf("descriptor: %s %v", msg, err)
	}
	var gc *gatedConn
	select {
	case gc = <-gl.conns:
	case <-ctx.Done():
		t.Fatal("timed out waiting for the server's side of the connection")
	}
	gc.gate()
	go func() { // the gateway reads all it is sent
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	// 3 MiB queued, each frame well below a batch (64 KiB).
	pad := strings.Repeat("x", 32<<10)
	for i := range 96 {
		p.deliver("t1", "c1", "u1", strconv.Itoa(i)+":"+pad)
	}
	gc.waitStalled(t, ctx, "the writer to block on the gated socket")
	relay.CloseConns(h.Server, contract.EndShutdown)
	// Every step lets more than a whole message through, so no write under
	// way is ever a step old, and the per-write watchdog never fires.
	const steps = 4
	for i := 1; i <= steps; i++ {
		clk.Advance(wt / steps)
		if i == steps {
			select {
			case <-gc.closed:
				return
			default:
			}
		}
		gc.grant(128 << 10)
		if !gc.waitStalled(t, ctx, "the writer to block again or the socket to be dropped") {
			t.Fatalf("socket dropped %v after the close, before WriteTimeout (%v): too little was queued for this test", wt/steps*time.Duration(i), wt)
		}
	}
	t.Fatalf("still flushing WriteTimeout (%v) after the 1001 close", wt)
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
func (g *gatedConn) waitStalled(t *testing.T, ctx context.Context, what string) bool {
	t.Helper()
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
