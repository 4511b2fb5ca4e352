// Package gatetest is test support: a listener whose server sockets, once
// gated, write only the bytes a test grants, so a test knows when a writer
// is blocked on a slow peer without depending on kernel socket buffers.
package gatetest

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Listener hands out Conns, each also sent on Conns (when there is room).
type Listener struct {
	net.Listener
	Conns chan *Conn
}

// NewListener wraps ln; up to four accepted Conns wait on Conns.
func NewListener(ln net.Listener) *Listener {
	return &Listener{Listener: ln, Conns: make(chan *Conn, 4)}
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	g := &Conn{Conn: c, more: make(chan struct{}, 1), stalled: make(chan struct{}, 1), closed: make(chan struct{})}
	select {
	case l.Conns <- g:
	default:
	}
	return g, nil
}

// Next waits for the next accepted Conn, failing t past limit.
func (l *Listener) Next(t *testing.T, limit time.Duration, what string) *Conn {
	t.Helper()
	select {
	case c := <-l.Conns:
		return c
	case <-time.After(limit):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

// Conn is a server socket that, once gated, writes only the bytes granted
// to it: a write past them blocks (and says so to WaitStalled) until more
// are granted or the socket is closed.
type Conn struct {
	net.Conn
	mu      sync.Mutex
	gated   bool
	budget  int
	more    chan struct{} // cap 1: bytes were granted
	stalled chan struct{} // cap 1: a write waits for bytes
	closed  chan struct{}
	once    sync.Once
}

// Gate makes writes wait for granted bytes from now on.
func (g *Conn) Gate() {
	g.mu.Lock()
	g.gated = true
	g.mu.Unlock()
}

// Grant lets n more bytes through.
func (g *Conn) Grant(n int) {
	g.mu.Lock()
	g.budget += n
	g.mu.Unlock()
	select {
	case g.more <- struct{}{}:
	default:
	}
}

// Closed is closed once the socket is.
func (g *Conn) Closed() <-chan struct{} { return g.closed }

// WaitStalled waits for a write to block for want of bytes (true) or for
// the socket to be closed (false), failing t past limit.
func (g *Conn) WaitStalled(t *testing.T, limit time.Duration, what string) bool {
	t.Helper()
	select {
	case <-g.stalled:
		return true
	case <-g.closed:
		return false
	case <-time.After(limit):
		t.Fatalf("timed out waiting for %s", what)
		return false
	}
}

// Write implements net.Conn, waiting for granted bytes once gated.
func (g *Conn) Write(p []byte) (int, error) {
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

// Close implements net.Conn.
func (g *Conn) Close() error {
	g.once.Do(func() { close(g.closed) })
	return g.Conn.Close()
}
