package relay_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/gatetest"
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
	gl := gatetest.NewListener(ln)
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
	gc := gl.Next(t, relaytest.Timeout, "the server's side of the connection")
	gc.Gate()
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
	gc.WaitStalled(t, relaytest.Timeout, "the writer to block on the gated socket")
	relay.CloseConns(h.Server, contract.EndShutdown)
	// Every step lets more than a whole message through, so no write under
	// way is ever a step old, and the per-write watchdog never fires.
	const steps = 4
	for i := 1; i <= steps; i++ {
		clk.Advance(wt / steps)
		if i == steps {
			select {
			case <-gc.Closed():
				return
			default:
			}
		}
		gc.Grant(128 << 10)
		if !gc.WaitStalled(t, relaytest.Timeout, "the writer to block again or the socket to be dropped") {
			t.Fatalf("socket dropped %v after the close, before WriteTimeout (%v): too little was queued for this test", wt/steps*time.Duration(i), wt)
		}
	}
	t.Fatalf("still flushing WriteTimeout (%v) after the 1001 close", wt)
}
