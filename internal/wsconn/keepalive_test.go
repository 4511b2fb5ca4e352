package wsconn

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/internal/clock/clocktest"
)

// testTimeout bounds every real-time wait of these tests.
const testTimeout = 10 * time.Second

// pair returns the server end of a loopback WebSocket, with a goroutine
// reading it (reading is what handles pongs), and the client end, whose
// reader runs until the test ends; pong tells the client whether to answer
// a ping, and each ping it gets is sent on pings.
func pair(t *testing.T, pong bool) (server *websocket.Conn, pings <-chan struct{}) {
	t.Helper()
	accepted := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- ws
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	got := make(chan struct{}, 16)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool { got <- struct{}{}; return pong },
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, _, err := client.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { _ = client.CloseNow() })
	select {
	case server = <-accepted:
	case <-ctx.Done():
		t.Fatal("timed out waiting for the server end of the WebSocket")
	}
	t.Cleanup(func() { _ = server.CloseNow() })
	return server, got
}

// await waits for one signal on ch.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for %s", testTimeout, what)
	}
}

// waitUntil polls cond (state behind a lock, which signals nothing) until
// it holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", testTimeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkJitter fails unless the next tick is due within (0.9, 1] interval
// of now.
func checkJitter(t *testing.T, clk *clocktest.Fake, interval time.Duration) {
	t.Helper()
	at, ok := clk.Next()
	if !ok {
		t.Fatal("no tick armed")
	}
	if d := at.Sub(clk.Now()); d > interval || d < interval-interval/10 {
		t.Fatalf("next tick in %v, want within a tenth below %v", d, interval)
	}
}

// A peer that stops answering pings is timed out at the tick of its
// misses-th consecutive miss, not earlier; ticks are jittered below the
// interval.
func TestKeepaliveTimesOutAMutePeer(t *testing.T) {
	const interval = 30 * time.Second
	ws, pings := pair(t, false)
	clk := clocktest.New(time.Unix(0, 0))
	timedOut := make(chan struct{})
	var k Keepalive
	k.Init(ws, clk, interval, 2, func() { close(timedOut) })
	k.Start()
	defer k.Wait()
	defer ws.CloseNow()

	checkJitter(t, clk, interval)
	clk.Advance(interval) // ping 1
	await(t, pings, "ping 1")
	clk.Advance(interval) // miss 1, ping 2
	await(t, pings, "ping 2")
	select {
	case <-timedOut:
		t.Fatal("timed out after one miss")
	default:
	}
	clk.Advance(interval) // miss 2
	await(t, timedOut, "the timeout after two misses")
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers armed after the timeout, want none", n)
	}
}

// A peer that answers every ping is never timed out, and a stopped
// keepalive arms nothing more.
func TestKeepaliveKeepsAnAnsweringPeer(t *testing.T) {
	const interval = time.Second
	ws, pings := pair(t, true)
	clk := clocktest.New(time.Unix(0, 0))
	var k Keepalive
	k.Init(ws, clk, interval, 1, func() { t.Error("an answering peer was timed out") })
	k.Start()
	for i := range 5 {
		clk.Advance(interval)
		await(t, pings, "a ping")
		waitUntil(t, "the pong of ping "+string(rune('1'+i)), func() bool {
			k.mu.Lock()
			defer k.mu.Unlock()
			return !k.awaiting
		})
	}
	k.Stop()
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers armed after Stop, want none", n)
	}
	_ = ws.CloseNow()
	k.Wait()
}

// Probe reports a pong within its timeout, and false for a mute peer once
// the timeout passed on the clock, or for a stopped keepalive.
func TestKeepaliveProbe(t *testing.T) {
	clk := clocktest.New(time.Unix(0, 0))
	alive, _ := pair(t, true)
	var k Keepalive
	k.Init(alive, clk, time.Hour, 1, func() {})
	if !k.Probe(5 * time.Second) {
		t.Fatal("an answering peer failed the probe")
	}

	mute, pings := pair(t, false)
	var m Keepalive
	m.Init(mute, clk, time.Hour, 1, func() {})
	result := make(chan bool, 1)
	go func() { result <- m.Probe(5 * time.Second) }()
	await(t, pings, "the probe's ping")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := clk.WaitPending(ctx, 1); err != nil {
		t.Fatal("the probe armed no deadline")
	}
	clk.Advance(5 * time.Second)
	select {
	case ok := <-result:
		if ok {
			t.Fatal("a mute peer passed the probe")
		}
	case <-time.After(testTimeout):
		t.Fatal("the probe outlived its deadline")
	}
	m.Stop()
	if m.Probe(time.Second) {
		t.Fatal("a stopped keepalive probed")
	}
	_ = alive.CloseNow()
	_ = mute.CloseNow()
	k.Wait()
	m.Wait()
}

// A peer whose reader is held back (Hold) cannot have its pong read, but it
// is alive: no tick counts a miss while it is held or was since the
// previous tick, and neither does a probe. Once it reads again, a pong
// still missing counts as usual.
func TestKeepaliveSparesAHeldPeer(t *testing.T) {
	const interval = 30 * time.Second
	ws, pings := pair(t, false) // mute: as if the pongs waited unread
	clk := clocktest.New(time.Unix(0, 0))
	timedOut := make(chan struct{})
	var k Keepalive
	k.Init(ws, clk, interval, 2, func() { close(timedOut) })
	k.Start()
	defer k.Wait()
	defer ws.CloseNow()
	notTimedOut := func(when string) {
		t.Helper()
		select {
		case <-timedOut:
			t.Fatalf("timed out %s", when)
		default: // ticks run inside Advance
		}
	}

	clk.Advance(interval) // ping 1
	await(t, pings, "ping 1")
	k.Hold(true)
	k.Hold(false)
	clk.Advance(interval) // held since the last tick: no miss
	clk.Advance(interval) // miss 1
	notTimedOut("at the first miss after a hold")
	k.Hold(true)
	for range 3 {
		clk.Advance(interval)
		notTimedOut("while held")
	}
	if !k.Held() || !k.Probe(5*time.Second) {
		t.Fatal("a held peer failed the probe")
	}
	k.Hold(false)
	clk.Advance(interval) // miss 1: not held since the last tick
	notTimedOut("after one miss")
	clk.Advance(interval) // miss 2
	await(t, timedOut, "the timeout after two misses once the peer was no longer held")
}

// A probe whose ping gets no pong still passes when the reader was held
// back meanwhile.
func TestKeepaliveProbeHeldMeanwhile(t *testing.T) {
	clk := clocktest.New(time.Unix(0, 0))
	mute, pings := pair(t, false)
	var k Keepalive
	k.Init(mute, clk, time.Hour, 1, func() {})
	result := make(chan bool, 1)
	go func() { result <- k.Probe(5 * time.Second) }()
	await(t, pings, "the probe's ping")
	k.Hold(true)
	k.Hold(false)
	clk.Advance(5 * time.Second)
	select {
	case ok := <-result:
		if !ok {
			t.Fatal("a peer held back during the probe failed it")
		}
	case <-time.After(testTimeout):
		t.Fatal("the probe outlived its deadline")
	}
	_ = mute.CloseNow()
	k.Wait()
}
