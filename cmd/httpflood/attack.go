package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"connector/relay/relaytest"
)

// attack holds the attack connections and learns when the connector closes
// one.
type attack struct {
	addr string
	o    options

	mu    sync.Mutex
	conns []net.Conn
	// closedByServer counts attack connections the connector closed.
	closedByServer atomic.Int64
	failed         atomic.Int64 // dials that failed
	stop           chan struct{}
	wg             sync.WaitGroup
}

func newAttack(addr string, o options) *attack {
	return &attack{addr: addr, o: o, stop: make(chan struct{})}
}

// open starts every mode's connections and returns how many were opened.
func (a *attack) open() int {
	for _, m := range a.o.Modes {
		switch m {
		case modeIdle:
			for range a.o.Idle {
				a.dial(idleRequest, nil)
			}
		case modeSlowBody:
			for i := range a.o.Slow {
				path := "/discord/interactions"
				if i%2 == 1 {
					path = "/telegram/webhook"
				}
				a.dial(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n{", path), trickle)
			}
		case modeSlowHeader:
			for range a.o.Slow {
				a.dial("GET /healthz HTTP/1.1\r\nHost: x\r\n", trickleHeader)
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

// attackDialer dials every attack connection from one address.
var attackDialer = net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}

const idleRequest = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"

// dial opens one connection, writes first, then runs more (if any) on
// the connection until the attack stops, while a reader counts the
// connector closing it.
func (a *attack) dial(first string, more func(net.Conn, <-chan struct{})) {
	c, err := attackDialer.Dial("tcp", a.addr)
	if err != nil {
		a.failed.Add(1)
		return
	}
	if _, err := io.WriteString(c, first); err != nil {
		a.closedByServer.Add(1)
		_ = c.Close()
		return
	}
	a.mu.Lock()
	a.conns = append(a.conns, c)
	a.mu.Unlock()
	a.wg.Go(func() {
		// Reads answers (an idle connection's one response) until the
		// connector closes the connection or the attack ends.
		_, _ = io.Copy(io.Discard, bufio.NewReader(c))
		select {
		case <-a.stop:
		default:
			a.closedByServer.Add(1)
		}
	})
	if more != nil {
		a.wg.Go(func() { more(c, a.stop) })
	}
}

// trickle sends one body byte every 5 s.
func trickle(c net.Conn, stop <-chan struct{}) {
	tick(stop, func() bool { _, err := io.WriteString(c, " "); return err == nil })
}

// trickleHeader sends one more header line every 5 s.
func trickleHeader(c net.Conn, stop <-chan struct{}) {
	tick(stop, func() bool { _, err := io.WriteString(c, "X-Slow: 1\r\n"); return err == nil })
}

func tick(stop <-chan struct{}, f func() bool) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if !f() {
				return
			}
		}
	}
}

// status describes the attack connections: opened, closed by the
// connector, and dials that failed.
func (a *attack) status(opened int) string {
	closed := a.closedByServer.Load()
	return fmt.Sprintf("%d opened, %d still open, %d closed by it, %d dials failed",
		opened, int64(opened)-closed, closed, a.failed.Load())
}

// close ends the attack: every connection is closed from this side.
func (a *attack) close() {
	close(a.stop)
	a.mu.Lock()
	for _, c := range a.conns {
		_ = c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// probeSource is the address the gateway probe dials from: another host
// than the attack's (127.0.0.1) as far as the connector can tell, so the
// probe shows what a gateway elsewhere sees while one address floods.
const probeSource = "127.0.0.2"

// probeGateway dials /relay from probeSource as the configured gateway,
// says hello and reports how it went and how long it took.
func probeGateway(c *child) string {
	d, err := dialProbe(c)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("ok in %s", d.Round(time.Millisecond))
}

// dialProbe dials /relay from probeSource as the configured gateway, says
// hello and returns how long it took until the descriptor arrived.
func dialProbe(c *child) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	failed := func(what string, err error) (time.Duration, error) {
		return 0, fmt.Errorf("%s failed after %s: %w", what, time.Since(start).Round(time.Millisecond), err)
	}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(probeSource)}}
	h := http.Header{"Authorization": {"Bearer " + relaytest.Token(gatewayID, c.secret, time.Now())}}
	ws, _, err := websocket.Dial(ctx, "ws://"+c.addr+"/relay", &websocket.DialOptions{
		HTTPHeader: h,
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}},
	})
	if err != nil {
		return failed("dial", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"hello","platform":"relay","botId":""}`+"\n")); err != nil {
		return failed("hello", err)
	}
	_, msg, err := ws.Read(ctx)
	if err != nil {
		return failed("hello", err)
	}
	if !strings.Contains(string(msg), `"type":"descriptor"`) {
		return failed("hello", fmt.Errorf("answered %.80q", msg))
	}
	return time.Since(start), nil
}

// raiseFileLimit lifts this process's soft open-file limit to the hard
// one: every attack connection is a socket here too.
func raiseFileLimit() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}
