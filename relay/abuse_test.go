package relay_test

import (
	"bytes"
	"context"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/leakcheck"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
)

// connGauge is a relay.Metrics that follows the gateway connections the
// relay serves (counted from before the relay's ConnOpened to after its
// ConnClosed, which it reports once the socket is fully closed) and the most
// it ever served at once, and counts refused upgrades and ignored frames.
type connGauge struct {
	live, most atomic.Int64
	changed    chan struct{} // capacity 1: live changed

	mu      sync.Mutex
	refused map[string]int
	ignored map[string]int
}

func newConnGauge() *connGauge {
	return &connGauge{changed: make(chan struct{}, 1), refused: map[string]int{}, ignored: map[string]int{}}
}

func (g *connGauge) ConnOpened(string) {
	n := g.live.Add(1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
	g.notify()
}

func (g *connGauge) ConnClosed(string) { g.live.Add(-1); g.notify() }

func (g *connGauge) notify() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

func (g *connGauge) Refused(reason string) {
	g.mu.Lock()
	g.refused[reason]++
	g.mu.Unlock()
}

func (g *connGauge) refusals(reason string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refused[reason]
}

func (g *connGauge) FrameIgnored(_, reason string) {
	g.mu.Lock()
	g.ignored[reason]++
	g.mu.Unlock()
}

func (g *connGauge) ignoredFrames(reason string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ignored[reason]
}

func (*connGauge) Inbound(string, string, string)                 {}
func (*connGauge) Delivered(string, time.Duration)                {}
func (*connGauge) Outbound(string, string, string, time.Duration) {}
func (*connGauge) Buffered(string, int)                           {}

// waitLive waits until the relay serves exactly n connections.
func (g *connGauge) waitLive(t *testing.T, n int64) {
	t.Helper()
	deadline := time.After(relaytest.Timeout)
	for g.live.Load() != n {
		select {
		case <-g.changed:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for the relay to serve %d connections; it serves %d", relaytest.Timeout, n, g.live.Load())
		}
	}
}

// burstClient is one connection of a burst: silent ones read nothing until
// told to, the others say hello and read from the start.
type burstClient struct {
	ws     *websocket.Conn
	frames chan []byte // messages read
	ended  chan int    // the close code received (-1 none) once reading failed
}

func dialBurstClient(ctx context.Context, url string, silent bool) (*burstClient, error) {
	h := http.Header{"Authorization": {"Bearer " + relaytest.Token("gw1", "s1", time.Now())}}
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, err
	}
	c := &burstClient{ws: ws, frames: make(chan []byte, 16), ended: make(chan int, 1)}
	if !silent {
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type": "hello", "platform": "relay", "botId": ""}`+"\n")); err != nil {
			_ = ws.CloseNow()
			return nil, err
		}
		c.read()
	}
	return c, nil
}

// read starts reading c until it fails.
func (c *burstClient) read() {
	go func() {
		for {
			_, msg, err := c.ws.Read(context.Background())
			if err != nil {
				c.ended <- int(websocket.CloseStatus(err))
				return
			}
			select {
			case c.frames <- msg:
			default: // nobody waits for it
			}
		}
	}()
}

// TestBurstOfOneGatewayNeverExceedsTheLimit: a burst of connections of one
// gateway id, half of which never read (not even the close frame), never
// has more than MaxConnsPerGateway open or closing at once; every extra one
// is closed with 4409 (which ones stay is TestAdmissionNewestWin's), and
// everything the relay started for the burst ends with it.
func TestBurstOfOneGatewayNeverExceedsTheLimit(t *testing.T) {
	const limit, n = 4, 60
	g := newConnGauge()
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:            []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		MaxConnsPerGateway: limit,
		CloseTimeout:       100 * time.Millisecond,
		Metrics:            g,
		Log:                relaytest.TestLogger(t),
	})
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()

	clients := make([]*burstClient, n)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			c, err := dialBurstClient(ctx, h.RelayURL(), i%2 == 0)
			if err != nil {
				t.Errorf("connection %d: %v", i, err)
				return
			}
			clients[i] = c
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if most := g.most.Load(); most > limit {
		t.Fatalf("the relay served %d connections of one gateway id at once; the limit is %d", most, limit)
	}

	// The burst is over: the silent ones read now, and find their close
	// frame if they were closed.
	for i, c := range clients {
		if i%2 == 0 {
			c.read()
		}
	}
	type end struct{ i, code int }
	ends := make(chan end, n)
	for i, c := range clients {
		go func() { ends <- end{i, <-c.ended} }()
	}
	closed := make([]bool, n)
	deadline := time.After(relaytest.Timeout)
	for range n - limit {
		select {
		case e := <-ends:
			if e.code != int(contract.CloseReplaced) {
				t.Fatalf("connection %d closed with %d, want 4409", e.i, e.code)
			}
			closed[e.i] = true
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %d connections to be closed 4409", relaytest.Timeout, n-limit)
		}
	}
	// The others are open: each answers a hello.
	var open []*burstClient
	for i, c := range clients {
		if closed[i] {
			continue
		}
		open = append(open, c)
		if err := c.ws.Write(ctx, websocket.MessageText, []byte(`{"type": "hello", "platform": "relay", "botId": ""}`+"\n")); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		for described := false; !described; {
			select {
			case msg := <-c.frames:
				described = bytes.Contains(msg, []byte(`"type":"descriptor"`))
			case e := <-ends:
				t.Fatalf("connection %d closed with %d; %d connections should stay", e.i, e.code, limit)
			case <-deadline:
				t.Fatalf("timed out after %v waiting for connection %d's descriptor", relaytest.Timeout, i)
			}
		}
	}
	if most := g.most.Load(); most > limit {
		t.Fatalf("the relay served %d connections of one gateway id at once; the limit is %d", most, limit)
	}
	t.Logf("%d refused before their upgrade, %d closed after it", g.refusals("too_many_connections"), n-limit-g.refusals("too_many_connections"))

	for _, c := range open {
		_ = c.ws.CloseNow()
	}
	g.waitLive(t, 0)
	if leaked := leakcheck.Wait(relaytest.Timeout, "connector/relay.(*conn)", "connector/relay.(*Server).ServeHTTP"); leaked != "" {
		t.Fatalf("the relay's connection goroutines outlived the burst:\n%s", leaked)
	}
	until := time.Now().Add(relaytest.Timeout)
	for runtime.NumGoroutine() > base {
		if time.Now().After(until) {
			t.Fatalf("%d goroutines %v after the burst ended, %d before it", runtime.NumGoroutine(), relaytest.Timeout, base)
		}
		time.Sleep(10 * time.Millisecond) // polling: goroutines ending signal nothing
	}
}

// A connection's interrupts past its rate (relay.InterruptBurst at once,
// then one per relay.InterruptEvery on the relay's clock) are skipped and
// counted, not routed: among several instances each would cost a store read
// and a message between instances.
func TestInterruptsPastTheConnectionsRateAreSkipped(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	clk := clocktest.New(time.Now())
	g := newConnGauge()
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:      []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms:    []platform.Platform{p},
		Clock:        clk,
		PingInterval: time.Hour,
		Metrics:      g,
		Log:          relaytest.TestLogger(t),
	})
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	p.deliver("t1", "c1", "u1", "start")
	ev, id := gw.NextInbound(t)
	gw.Ack(t, id)
	key := sessionKey("discord", ev.Source.ChatID, "u1")
	// routed sends n interrupts, then a hello, and counts the
	// interrupt_inbound that come before its descriptor.
	routed := func(n int) int {
		t.Helper()
		for range n {
			gw.Send(t, map[string]any{"type": "interrupt", "session_key": key, "reason": nil})
		}
		gw.Send(t, map[string]any{"type": "hello", "platform": "discord", "botId": ""})
		got := 0
		for {
			switch f := gw.Next(t); f.Type {
			case contract.TypeInterruptInbound:
				got++
			case contract.TypeDescriptor:
				return got
			}
		}
	}
	if got := routed(relay.InterruptBurst + 5); got != relay.InterruptBurst {
		t.Fatalf("%d interrupts at once routed %d, want the burst, %d", relay.InterruptBurst+5, got, relay.InterruptBurst)
	}
	if n := g.ignoredFrames("interrupt_rate"); n != 5 {
		t.Fatalf("%d interrupts counted as over the rate, want 5", n)
	}
	clk.Advance(relay.InterruptEvery)
	if got := routed(2); got != 1 {
		t.Fatalf("one interval later, 2 interrupts routed %d, want 1", got)
	}
}
