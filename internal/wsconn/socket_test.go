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

// A write still under way when the watchdog's timeout passes on the clock
// fails with ErrWriteTimeout and drops the socket; writes that complete in
// time share one timer, which disarms once a timeout passed with no write.
func TestWatchdogDropsAStuckWrite(t *testing.T) {
	ws, _ := pair(t, true)
	clk := clocktest.New(time.Unix(0, 0))
	var w Watchdog
	w.Init(ws, clk, time.Second)
	for range 3 {
		if err := w.Write(websocket.MessageText, []byte("hello")); err != nil {
			t.Fatal(err)
		}
	}
	if n := clk.Pending(); n != 1 {
		t.Fatalf("%d timers armed after three writes, want one", n)
	}
	clk.Advance(time.Second)
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d timers armed a timeout after the last write, want none", n)
	}
	if err := w.Write(websocket.MessageText, []byte("again")); err != nil {
		t.Fatalf("a write after the watchdog disarmed: %v", err)
	}
	// The client's reader discards what it reads (each message within its
	// default read limit of 32 KiB), so writes complete until the test
	// fires the watchdog in the middle of one.
	result := make(chan error, 1)
	go func() {
		big := make([]byte, 16<<10)
		for {
			if err := w.Write(websocket.MessageBinary, big); err != nil {
				result <- err
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	// A write may complete between WaitPending and Advance: the timer then
	// fires with no write under way and disarms (the next write arms it
	// again), and the next one is tried. Advance runs the timer before it
	// returns, so fired says which it was.
	for !w.fired.Load() {
		if clk.WaitPending(ctx, 1) != nil || ctx.Err() != nil {
			t.Fatalf("timed out after %v waiting for a write to outlive its watchdog", testTimeout)
		}
		clk.Advance(time.Second)
	}
	select {
	case err := <-result:
		if err != ErrWriteTimeout {
			t.Fatalf("the stuck write failed with %v, want ErrWriteTimeout", err)
		}
	case <-ctx.Done():
		t.Fatalf("timed out after %v waiting for the write the watchdog fired under to return", testTimeout)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte("x")); err == nil {
		t.Fatal("the socket still takes writes after the watchdog fired")
	}
	w.Stop()
}

// A write that starts after the watchdog's timer was armed by an earlier
// one is dropped a full timeout after its own start: the timer firing
// earlier waits the rest instead.
func TestWatchdogTimesALaterWriteFromItsStart(t *testing.T) {
	ws := silentPair(t)
	clk := clocktest.New(time.Unix(0, 0))
	var w Watchdog
	w.Init(ws, clk, time.Second)
	if err := w.Write(websocket.MessageText, []byte("hello")); err != nil { // arms the timer, due at 1 s
		t.Fatal(err)
	}
	clk.Advance(600 * time.Millisecond)
	// The peer reads nothing: a message far above the sockets' buffers
	// blocks, started at 0.6 s.
	result := make(chan error, 1)
	go func() { result <- w.Write(websocket.MessageBinary, make([]byte, 32<<20)) }()
	waitUntil(t, "the big write to start", func() bool { return w.started.Load() == int64(600*time.Millisecond) })
	clk.Advance(400*time.Millisecond + 599*time.Millisecond) // the timer fired at 1 s and waits until 1.6 s
	if w.fired.Load() {
		t.Fatal("the watchdog dropped a write before it ran its timeout")
	}
	clk.Advance(time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	select {
	case err := <-result:
		if err != ErrWriteTimeout {
			t.Fatalf("the stuck write failed with %v, want ErrWriteTimeout", err)
		}
	case <-ctx.Done():
		t.Fatalf("timed out after %v waiting for the watchdog to drop the stuck write", testTimeout)
	}
	w.Stop()
}

// silentPair returns the server end of a loopback WebSocket whose client
// never reads.
func silentPair(t *testing.T) *websocket.Conn {
	t.Helper()
	accepted := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- ws
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	client, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.CloseNow() })
	select {
	case ws := <-accepted:
		t.Cleanup(func() { _ = ws.CloseNow() })
		return ws
	case <-ctx.Done():
		t.Fatal("timed out waiting for the server end of the WebSocket")
		return nil
	}
}
