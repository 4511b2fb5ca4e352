package relay_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
)

// logBuffer collects log output written from several goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// line returns the first logged line containing msg, or "".
func (l *logBuffer) line(msg string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for line := range strings.Lines(l.b.String()) {
		if strings.Contains(line, msg) {
			return line
		}
	}
	return ""
}

// twoTenantsLogged is twoTenants with the relay's log captured.
func twoTenantsLogged(t *testing.T) (*relaytest.Harness, *fakePlatform, *logBuffer) {
	t.Helper()
	p := newFake("discord", map[string]string{"c1": "t1", "c2": "t2"})
	logs := &logBuffer{}
	h := relaytest.StartConfig(t, relay.Config{
		Tenants: []relay.Tenant{
			{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
			{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
		},
		Platforms: []platform.Platform{p},
		Log:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	return h, p, logs
}

// TestRefusedUpgradeLogNamesClaimedGateway: the refusal log line says which
// gateway id the token claimed, and never carries the token or a secret.
func TestRefusedUpgradeLogNamesClaimedGateway(t *testing.T) {
	h, _, logs := twoTenantsLogged(t)
	for _, claimed := range []string{"gw1", "gw-nobody"} {
		token := contract.MintToken(claimed, "wrong-secret-4711", time.Now().Unix()+300)
		gw := h.DialToken(t, token)
		if code, _ := gw.Closed(t); code != int(contract.CloseUnauthorized) {
			t.Fatalf("%s: closed %d, want 4401", claimed, code)
		}
		line := logs.line("gateway_id=" + claimed + " ")
		if !strings.Contains(line, "gateway refused") {
			t.Fatalf("no refusal line names gateway %s:\n%s", claimed, logs.String())
		}
		if strings.Contains(line, token) || strings.Contains(line, "wrong-secret-4711") {
			t.Fatalf("refusal line leaks the token or secret: %s", line)
		}
	}
}

// TestDroppedInterruptLogNamesSessionAndGateway: an interrupt that reaches
// no owner is logged with its session key and the gateway that sent it.
func TestDroppedInterruptLogNamesSessionAndGateway(t *testing.T) {
	h, _, logs := twoTenantsLogged(t)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	key := "agent:main:discord:thread:1310000000000000500:1310000000000000777:1310000000000000999"
	gw.Send(t, map[string]any{"type": "interrupt", "session_key": key, "reason": nil})
	// Frames are handled in order: once this result is back, the interrupt
	// has been handled.
	gw.Outbound(t, "", map[string]any{"op": "no_such_op"})
	line := logs.line("interrupt dropped")
	if !strings.Contains(line, "session_key="+key+" ") || !strings.Contains(line, "gateway_id=gw1") {
		t.Fatalf("interrupt dropped line does not name the session and gateway: %q\n%s", line, logs.String())
	}
}

// TestShutdownLogCountsDiscardedInbound: inbound still in the ledger when
// the relay shuts down is lost with the process, and the log says how much.
func TestShutdownLogCountsDiscardedInbound(t *testing.T) {
	h, p, logs := twoTenantsLogged(t)
	p.deliver("t1", "c1", "u1", "one")
	p.deliver("t1", "c1", "u1", "two")
	p.deliver("t2", "c2", "u2", "three")
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	if err := h.Server.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	line := logs.line("discard")
	if !strings.Contains(line, "entries=3") {
		t.Fatalf("shutdown does not say it discards 3 buffered inbound: %q\n%s", line, logs.String())
	}
}
