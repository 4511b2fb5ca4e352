package wsconn

import (
	"context"
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
	// A write may complete between WaitPending and Advance; then the next
	// one is tried.
	var err error
	for err == nil {
		if clk.WaitPending(ctx, 1) != nil {
			t.Fatalf("timed out after %v waiting for a write to outlive its watchdog", testTimeout)
		}
		clk.Advance(time.Second)
		select {
		case err = <-result:
		case <-time.After(100 * time.Millisecond): // the Advance found no write under way
		}
	}
	if err != ErrWriteTimeout {
		t.Fatalf("the stuck write failed with %v, want ErrWriteTimeout", err)
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte("x")); err == nil {
		t.Fatal("the socket still takes writes after the watchdog fired")
	}
	w.Stop()
}
