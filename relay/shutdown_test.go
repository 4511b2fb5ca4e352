package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/platform"
	"connector/relay"
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

// TestShutdownPokesNoWakeURL: the inbound a connection holds unacknowledged
// when Shutdown closes it waits in the store for the next start, which
// reports it unserved then; Shutdown does not (Config.Away): a poke would
// send the gateway to an instance going away and hold the next start's off
// for a cooldown.
func TestShutdownPokesNoWakeURL(t *testing.T) {
	var away atomic.Int32
	p := newFake("discord", map[string]string{"c1": "t1"})
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:   []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms: []platform.Platform{p},
		Log:       relaytest.TestLogger(t),
		Away:      func(string) { away.Add(1) },
	})
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	p.deliver("t1", "c1", "u1", "held")
	if ev, _ := gw.NextInbound(t); ev.Text != "held" {
		t.Fatalf("inbound %q, want held", ev.Text)
	}
	// The delivery may have found the connection not yet serving (its
	// hello answered before its consumer attached) and reported the tenant
	// then: count only what Shutdown reports.
	before := away.Load()
	if err := h.Server.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _ := gw.Closed(t); code != int(websocket.StatusGoingAway) {
		t.Fatalf("closed %d, want 1001", code)
	}
	if n := away.Load() - before; n != 0 {
		t.Fatalf("Shutdown reported the tenant unserved %d times, want none", n)
	}
}

// TestDeliveriesRefusedOnceShutdownBegan: a delivery whose context ended,
// or that comes once Shutdown began, is not taken, through Deliver and
// DeliverAll alike (one check, Server.hubOrCatchUp), so its platform leaves
// it unconfirmed at its source.
func TestDeliveriesRefusedOnceShutdownBegan(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:   []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms: []platform.Platform{p},
		Log:       relaytest.TestLogger(t),
	})
	d := batchDelivery("t1", "c1", "u1", "late")
	refused := func(ctx context.Context, want error) {
		t.Helper()
		if err := h.Server.Deliver(ctx, d); !errors.Is(err, want) {
			t.Fatalf("Deliver = %v, want %v", err, want)
		}
		if errs := h.Server.DeliverAll(ctx, []platform.Delivery{d}); len(errs) != 1 || !errors.Is(errs[0], want) {
			t.Fatalf("DeliverAll = %v, want [%v]", errs, want)
		}
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	refused(ended, context.Canceled)
	if err := h.Server.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	refused(context.Background(), relay.ErrShuttingDown)
}
