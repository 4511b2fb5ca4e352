package relay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/relay/relaytest"
)

// TestShutdownAtTheDeadlineAnswersEveryOpThenCloses1001: ops still running
// on the platform when the grace period ends are each answered, once,
// with a retryable unavailable marked ambiguous, before the gateway's 1001
// close; the platform's late answers are dropped.
func TestShutdownAtTheDeadlineAnswersEveryOpThenCloses1001(t *testing.T) {
	h, p := twoTenants(t)
	release := p.slowChat("c1")
	defer release()
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	const inFlight = 20
	want := map[string]bool{}
	for i := range inFlight {
		id := relaytest.NewRequestID()
		want[id] = true
		gw.Send(t, map[string]any{"type": "outbound", "requestId": id, "action": sendAction("c1", fmt.Sprint("op ", i))})
	}
	for range inFlight {
		p.nextEntered(t) // every op reached the platform and waits there
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the grace period is over
	done := make(chan error, 1)
	go func() { done <- h.Server.Shutdown(ctx) }()

	for range inFlight {
		f := gw.Next(t, contract.TypeOutboundResult)
		if !want[f.RequestID] {
			t.Fatalf("result for %q: unknown or answered twice", f.RequestID)
		}
		delete(want, f.RequestID)
		r := f.Result
		if r.Success || r.Code != contract.CodeUnavailable || !r.Ambiguous {
			t.Fatalf("op cut off by shutdown answered %+v, want unavailable and ambiguous", r)
		}
	}
	release() // the platform answers late: nothing more may reach the gateway
	if code, _ := gw.Closed(t); code != int(websocket.StatusGoingAway) {
		t.Fatalf("closed %d, want 1001", code)
	}
	if err := <-done; err == nil {
		t.Fatal("Shutdown reported no ops cut off")
	}
}
