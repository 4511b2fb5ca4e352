package relay_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
)

// panickyPlatform is a fakePlatform whose hello observer panics on the
// first hello of one gateway, standing in for a bug on a connection's
// reader.
type panickyPlatform struct {
	*fakePlatform
	victim   string
	panicked *atomic.Bool
}

func (p panickyPlatform) ObserveHello(_ string, _ time.Time, gatewayID string, _ *contract.GatewayFrame) {
	if gatewayID == p.victim && p.panicked.CompareAndSwap(false, true) {
		panic("a bug in hello handling")
	}
}

// TestReaderPanicEndsOnlyItsConnection: a panic on a gateway connection's
// reader drops that connection and is logged; the process and the other
// connections go on, and the gateway can connect again.
func TestReaderPanicEndsOnlyItsConnection(t *testing.T) {
	p := panickyPlatform{newFake("discord", map[string]string{"c1": "t1", "c2": "t2"}), "gw2", new(atomic.Bool)}
	logs := newLogBuffer()
	h := relaytest.StartConfig(t, relay.Config{
		Tenants: []relay.Tenant{
			{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
			{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
		},
		Platforms: []platform.Platform{p},
		Log:       slog.New(slog.NewTextHandler(logs, nil)),
	})
	gw1 := h.Dial(t, "gw1", "s1")
	gw1.Hello(t, "discord", "")

	gw2 := h.Dial(t, "gw2", "s2")
	gw2.SendRaw(t, `{"type": "hello", "platform": "discord", "botId": ""}`+"\n")
	if code, _ := gw2.Closed(t); code == int(contract.CloseUnauthorized) {
		t.Fatalf("the panicking connection was closed %d, want a dropped socket", code)
	}
	logs.waitLine(t, "gateway connection failed: panic")

	p.deliver("t1", "c1", "u1", "still here")
	if ev, _ := gw1.NextInbound(t); ev.Text != "still here" {
		t.Fatalf("the other connection got %q", ev.Text)
	}
	if res := gw1.Outbound(t, "discord", sendAction("c1", "hi")); !res.Success {
		t.Fatalf("the other connection's send after the panic: %+v", res)
	}
	again := h.Dial(t, "gw2", "s2")
	again.Hello(t, "discord", "")
	if res := again.Outbound(t, "discord", sendAction("c2", "back")); !res.Success {
		t.Fatalf("the reconnected gateway's send after the panic: %+v", res)
	}
}

// panickyEgress is a fakePlatform whose Execute panics for chat "boom",
// standing in for a platform bug an action can reach.
type panickyEgress struct{ *fakePlatform }

func (p panickyEgress) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	if a.ChatID == "boom" {
		panic("a bug in a platform's egress")
	}
	return p.fakePlatform.Execute(ctx, tenant, a)
}

// TestOutboundPanicFailsOnlyItsOp: a panic in a platform's Execute answers
// that op with platform_error and is logged; the process, the connection
// and every other tenant's gateway go on.
func TestOutboundPanicFailsOnlyItsOp(t *testing.T) {
	p := panickyEgress{newFake("discord", map[string]string{"c1": "t1", "c2": "t2", "boom": "t1"})}
	logs := newLogBuffer()
	h := relaytest.StartConfig(t, relay.Config{
		Tenants: []relay.Tenant{
			{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
			{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
		},
		Platforms: []platform.Platform{p},
		Log:       slog.New(slog.NewTextHandler(logs, nil)),
	})
	gw1 := h.Dial(t, "gw1", "s1")
	gw1.Hello(t, "discord", "")
	gw2 := h.Dial(t, "gw2", "s2")
	gw2.Hello(t, "discord", "")

	if res := gw1.Outbound(t, "discord", sendAction("boom", "hi")); res.Success || res.Code != contract.CodePlatformError {
		t.Fatalf("the panicking op answered %+v, want platform_error", res)
	}
	logs.waitLine(t, "outbound op failed: panic")
	if res := gw1.Outbound(t, "discord", sendAction("c1", "after")); !res.Success {
		t.Fatalf("the same connection's send after the panic: %+v", res)
	}
	if res := gw2.Outbound(t, "discord", sendAction("c2", "other tenant")); !res.Success {
		t.Fatalf("the other tenant's send after the panic: %+v", res)
	}
}

// helloRecorder is a fakePlatform that records the creation each hello's
// tenant had as the relay served it.
type helloRecorder struct {
	*fakePlatform
	created chan time.Time
}

func (p helloRecorder) ObserveHello(_ string, created time.Time, _ string, _ *contract.GatewayFrame) {
	p.created <- created
}

// TestHelloObservedWithTheTenantsCreation: a platform observing hellos is
// told the tenant's creation as the relay serves it, the relay's view,
// which a tenant made again under its id reaches before the platforms'
// (SetTenants), so a hello in between belongs to the new tenant.
func TestHelloObservedWithTheTenantsCreation(t *testing.T) {
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	p := helloRecorder{newFake("discord", map[string]string{"c1": "t1"}), make(chan time.Time, 4)}
	tenant := func(created time.Time) []relay.Tenant {
		return []relay.Tenant{{ID: "t1", Created: created, Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
	}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenant(first), Platforms: []platform.Platform{p}})
	for _, created := range []time.Time{first, again} {
		if err := h.Server.SetTenants(tenant(created)); err != nil {
			t.Fatal(err)
		}
		h.Dial(t, "gw1", "s1").Hello(t, "discord", "")
		select {
		case got := <-p.created:
			if !got.Equal(created) {
				t.Fatalf("hello observed with creation %v, want %v", got, created)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no hello observed within 10 s")
		}
	}
}

// helloGate is a slog.Handler that holds the first "hello" line (logged
// by a connection's reader before it tells the platforms of the hello)
// until release is closed, having closed held.
type helloGate struct {
	slog.Handler
	once          *sync.Once
	held, release chan struct{}
}

func (h helloGate) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "hello" {
		h.once.Do(func() {
			close(h.held)
			<-h.release
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h helloGate) WithAttrs(attrs []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(attrs)
	return h
}

func (h helloGate) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

// TestHelloOfARevokedConnectionIsNotObserved: the hello of an earlier
// tenant's connection, read while its tenant was made again under its id
// (after SetTenants took in the new creation, before the connection
// closed), is not told to the platforms: it was observed as the new
// tenant's, so Discord kept the earlier gateway's command manifest for the
// new tenant.
func TestHelloOfARevokedConnectionIsNotObserved(t *testing.T) {
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	p := helloRecorder{newFake("discord", map[string]string{"c1": "t1"}), make(chan time.Time, 4)}
	tenant := func(created time.Time) []relay.Tenant {
		return []relay.Tenant{{ID: "t1", Created: created, Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
	}
	logs := newLogBuffer()
	gate := helloGate{slog.NewTextHandler(logs, nil), new(sync.Once), make(chan struct{}), make(chan struct{})}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenant(first), Platforms: []platform.Platform{p}, Log: slog.New(gate)})

	old := h.Dial(t, "gw1", "s1")
	old.SendRaw(t, `{"type": "hello", "platform": "discord", "botId": ""}`+"\n")
	select {
	case <-gate.held:
	case <-time.After(relaytest.Timeout):
		t.Fatal("the hello was not read within the timeout")
	}
	if err := h.Server.SetTenants(tenant(again)); err != nil {
		t.Fatal(err)
	}
	close(gate.release)
	logs.waitLine(t, "gateway disconnected")
	select {
	case got := <-p.created:
		t.Fatalf("the earlier tenant's hello was observed with creation %v", got)
	default:
	}

	h.Dial(t, "gw1", "s1").Hello(t, "discord", "")
	select {
	case got := <-p.created:
		if !got.Equal(again) {
			t.Fatalf("the new tenant's hello observed with creation %v, want %v", got, again)
		}
	case <-time.After(relaytest.Timeout):
		t.Fatal("the new tenant's hello was not observed within the timeout")
	}
}
