package connlimit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connector/internal/clock"
)

// server runs an http.Server on a loopback Listener limited to max; the
// handler blocks requests to /block until release is closed, hijacks
// requests to /hijack (as a WebSocket upgrade refused after it would) and
// to /hijack-authenticated after calling Authenticated (as an upgrade whose
// credential checked out would).
type server struct {
	l        *Listener
	addr     string
	entered  chan string   // the path of every request the handler starts
	idle     chan struct{} // a connection went idle (after the Listener saw it)
	release  chan struct{}
	hijacked chan net.Conn // the server's side of every hijacked connection
	mu       sync.Mutex
	reasons  []string
}

func newServer(t *testing.T, max int) *server {
	t.Helper()
	return newServerConfig(t, Config{Max: max})
}

// newServerConfig is newServer with cfg (its Refused is the server's).
func newServerConfig(t *testing.T, cfg Config) *server {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{entered: make(chan string, 16), idle: make(chan struct{}, 16), release: make(chan struct{}),
		hijacked: make(chan net.Conn, 16)}
	cfg.Refused = func(r string) {
		s.mu.Lock()
		s.reasons = append(s.reasons, r)
		s.mu.Unlock()
	}
	s.l, err = New(inner, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ConnContext: s.l.ConnContext,
		ConnState: func(c net.Conn, st http.ConnState) {
			s.l.ConnState(c, st)
			if st == http.StateIdle {
				s.idle <- struct{}{}
			}
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.entered <- r.URL.Path
			switch r.URL.Path {
			case "/block":
				<-s.release
			case "/hijack-authenticated":
				Authenticated(r.Context())
				fallthrough
			case "/hijack":
				c, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\n\r\n")
					s.hijacked <- c
				}
				return
			}
			_, _ = io.WriteString(w, "ok")
		}),
	}
	go func() { _ = srv.Serve(s.l) }()
	t.Cleanup(func() {
		close(s.release)
		_ = srv.Close()
		for {
			select {
			case c := <-s.hijacked:
				_ = c.Close()
			default:
				return
			}
		}
	})
	s.addr = s.l.Addr().String()
	return s
}

func (s *server) waitIdle(t *testing.T) {
	t.Helper()
	select {
	case <-s.idle:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for a connection to go idle")
	}
}

func (s *server) refusals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reasons...)
}

// client is one keep-alive HTTP/1.1 connection.
type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	return dialFrom(t, addr, "127.0.0.1")
}

// dialFrom dials addr from the loopback address ip (all of 127.0.0.0/8 is
// loopback on Linux), so a test can play several sources.
func dialFrom(t *testing.T, addr, ip string) *client {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{Conn: c, r: bufio.NewReader(c)}
}

func (c *client) send(t *testing.T, path string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

func (c *client) get(t *testing.T, path string) {
	t.Helper()
	c.send(t, path)
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
}

// closedByServer waits (bounded by the connection's deadline) until the
// server closes c.
func (c *client) closedByServer(t *testing.T, what string) {
	t.Helper()
	_, err := c.r.ReadByte()
	if err == nil {
		t.Fatalf("%s: the server sent data instead of closing", what)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("timed out after 10s waiting for the server to close %s", what)
	}
}

func TestIdleConnectionIsEvictedForANewOne(t *testing.T) {
	s := newServer(t, 2)
	a, b := dial(t, s.addr), dial(t, s.addr)
	a.get(t, "/")
	s.waitIdle(t)
	b.get(t, "/")
	s.waitIdle(t) // b went idle after a: a is the longest idle
	c := dial(t, s.addr)
	c.get(t, "/")
	a.closedByServer(t, "the longest-idle connection")
	if got := s.refusals(); len(got) != 1 || got[0] != ReasonEvictedIdle {
		t.Fatalf("refusals %v, want one %s", got, ReasonEvictedIdle)
	}
	b.get(t, "/") // still open
}

func TestNewConnectionIsRefusedWhenNoneIsIdle(t *testing.T) {
	s := newServer(t, 1)
	a := dial(t, s.addr)
	a.send(t, "/block")
	if p := <-s.entered; p != "/block" {
		t.Fatalf("entered %s", p)
	}
	b := dial(t, s.addr)
	b.closedByServer(t, "a connection over the limit")
	if got := s.refusals(); len(got) != 1 || got[0] != ReasonOverLimit {
		t.Fatalf("refusals %v, want one %s", got, ReasonOverLimit)
	}
	if n := s.l.Unauthenticated(); n != 1 {
		t.Fatalf("unauthenticated %d, want 1", n)
	}
}

// TestHijackedConnectionCountsUntilAuthenticatedOrClosed: a connection
// taken over (a WebSocket upgrade) counts against its source until the
// handler says its client authenticated or the connection is closed, so
// upgrades refused after the upgrade cannot hold more than the source's
// share of sockets.
func TestHijackedConnectionCountsUntilAuthenticatedOrClosed(t *testing.T) {
	s := newServerConfig(t, Config{Max: 4, MaxPerSource: 2})
	upgrade := func(path string) net.Conn {
		t.Helper()
		c := dialFrom(t, s.addr, "127.0.0.2")
		c.send(t, path)
		if line, err := c.r.ReadString('\n'); err != nil || !strings.Contains(line, "101") {
			t.Fatalf("%s answer %q %v", path, line, err)
		}
		<-s.entered
		select {
		case sc := <-s.hijacked:
			return sc
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out after 10s waiting for %s to be hijacked", path)
			return nil
		}
	}
	first := upgrade("/hijack")
	upgrade("/hijack")
	if n := s.l.Unauthenticated(); n != 2 {
		t.Fatalf("unauthenticated %d, want the 2 hijacked connections", n)
	}
	over := dialFrom(t, s.addr, "127.0.0.2")
	over.closedByServer(t, "a third connection of a source holding two hijacked ones")
	if got := s.refusals(); !slices.Equal(got, []string{ReasonSourceLimit}) {
		t.Fatalf("refusals %v, want one %s", got, ReasonSourceLimit)
	}
	dialFrom(t, s.addr, "127.0.0.3").get(t, "/") // another source is served
	<-s.entered

	// Closing a hijacked connection frees its slot.
	_ = first.Close()
	authenticated := upgrade("/hijack-authenticated")
	// An authenticated one leaves the count: the source has room again.
	upgrade("/hijack")
	if n := s.l.Unauthenticated(); n != 3 {
		t.Fatalf("unauthenticated %d, want 3 (2 hijacked of .2, the idle one of .3)", n)
	}
	_ = authenticated.Close() // was not counted: nothing changes
	if n := s.l.Unauthenticated(); n != 3 {
		t.Fatalf("unauthenticated %d after closing the authenticated connection, want 3", n)
	}
}

// emfileListener fails accept with EMFILE n times, then accepts from the
// real listener.
type emfileListener struct {
	net.Listener
	n int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.n > 0 {
		l.n--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// sleepClock is a clock.Clock whose Sleep returns at once, the time moved
// on: it records each sleep.
type sleepClock struct {
	clock.Clock
	now   time.Time
	slept []time.Duration
}

func (c *sleepClock) Now() time.Time { return c.now }

func (c *sleepClock) Sleep(_ context.Context, d time.Duration) error {
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return nil
}

func TestOutOfFDsBacksOffCountsAndLogsOnce(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	var logs bytes.Buffer
	var reasons []string
	clk := &sleepClock{now: time.Unix(1000, 0)}
	l, err := New(&emfileListener{Listener: inner, n: 10}, Config{
		Max:     4,
		Log:     slog.New(slog.NewTextHandler(&logs, nil)),
		Refused: func(r string) { reasons = append(reasons, r) },
		Clock:   clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept: %v (an EMFILE must not reach the server)", err)
	}
	got.Close()
	if len(reasons) != 10 || reasons[0] != ReasonNoFDs {
		t.Fatalf("refusals %v, want 10 %s", reasons, ReasonNoFDs)
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(clk.slept, want) {
		t.Fatalf("slept %v, want %v", clk.slept, want)
	}
	// 3.275 s of backoff: one line, the rest counted in the next one.
	if n := strings.Count(logs.String(), "out of file descriptors"); n != 1 {
		t.Fatalf("%d log lines, want 1:\n%s", n, logs.String())
	}
}

func TestMaxMustBePositive(t *testing.T) {
	if _, err := New(nil, Config{}); err == nil {
		t.Fatal("Max 0 accepted")
	}
}

// TestOneSourceCannotTakeEverySlot: a source holding its share of busy
// connections is refused a further one, while another source still gets
// in; at its share, a source's new connection evicts its own idle one, not
// another source's.
func TestOneSourceCannotTakeEverySlot(t *testing.T) {
	s := newServerConfig(t, Config{Max: 4, MaxPerSource: 2})
	for range 2 {
		a := dialFrom(t, s.addr, "127.0.0.2")
		a.send(t, "/block")
		if p := <-s.entered; p != "/block" {
			t.Fatalf("entered %s", p)
		}
	}
	over := dialFrom(t, s.addr, "127.0.0.2")
	over.closedByServer(t, "a third busy connection of one source")
	if got := s.refusals(); len(got) != 1 || got[0] != ReasonSourceLimit {
		t.Fatalf("refusals %v, want one %s", got, ReasonSourceLimit)
	}

	other := dialFrom(t, s.addr, "127.0.0.3")
	other.get(t, "/")
	<-s.entered
	s.waitIdle(t)
	mine := dialFrom(t, s.addr, "127.0.0.4")
	mine.get(t, "/")
	<-s.entered
	s.waitIdle(t)
	// At the total limit (4), with room in its share, a source's new
	// connection evicts the longest-idle connection of any source: .3's.
	mine2 := dialFrom(t, s.addr, "127.0.0.4")
	mine2.send(t, "/block")
	if p := <-s.entered; p != "/block" {
		t.Fatalf("entered %s", p)
	}
	other.closedByServer(t, "the longest-idle connection at the total limit")
	// At its share, it evicts its own idle connection.
	mine3 := dialFrom(t, s.addr, "127.0.0.4")
	mine3.get(t, "/")
	<-s.entered
	mine.closedByServer(t, "the source's own idle connection at its share")
	if n := s.l.Unauthenticated(); n != 4 {
		t.Fatalf("unauthenticated %d, want 4", n)
	}
	want := []string{ReasonSourceLimit, ReasonEvictedIdle, ReasonEvictedIdle}
	if got := s.refusals(); !slices.Equal(got, want) {
		t.Fatalf("refusals %v, want %v", got, want)
	}
}
