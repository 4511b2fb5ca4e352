package relay_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
)

// logBuffer collects log output written from several goroutines.
type logBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // capacity 1: something was written
}

func newLogBuffer() *logBuffer { return &logBuffer{written: make(chan struct{}, 1)} }

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.written <- struct{}{}:
	default:
	}
	return l.b.Write(p)
}

// waitLine waits for a logged line containing msg and returns it.
func (l *logBuffer) waitLine(t *testing.T, msg string) string {
	t.Helper()
	deadline := time.After(relaytest.Timeout)
	for {
		if line := l.line(msg); line != "" {
			return line
		}
		select {
		case <-l.written:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for a log line containing %q:\n%s", relaytest.Timeout, msg, l.String())
		}
	}
}

// count counts the logged lines containing msg.
func (l *logBuffer) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for line := range strings.Lines(l.b.String()) {
		if strings.Contains(line, msg) {
			n++
		}
	}
	return n
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
	logs := newLogBuffer()
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

// TestInvalidFrameFloodLogsBoundedLines: 5 MiB of small frames the relay
// skips (malformed, of unknown type, or missing what their type needs) cost
// a bounded number of log lines, even at debug level, while every one of
// them is counted by reason; the connection's closing line says how many
// lines were held back. The relay's clock stands still, so no allowance
// refills during the test.
func TestInvalidFrameFloodLogsBoundedLines(t *testing.T) {
	now := time.Now()
	logs := newLogBuffer()
	g := newConnGauge()
	h := relaytest.StartConfig(t, relay.Config{
		Tenants: []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Metrics: g,
		Clock:   clocktest.New(now),
		Log:     slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, contract.PlatformRelay, "")
	kinds := []struct{ frame, reason string }{
		{"x", "malformed"},
		{`{"type":"nope"}`, "unknown_type"},
		{`{"type":"outbound"}`, "no_request_id"},
		{`{"type":"interrupt"}`, "no_session_key"},
		{`{"type":"inbound_ack","bufferId":"none"}`, "unknown_buffer_id"},
	}
	// Handling 5 MiB of frames takes seconds under the race detector on a
	// busy machine, and the socket holds the sender back meanwhile, so the
	// flood and the wait for its handling share one longer deadline.
	const floodTimeout = 2 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), floodTimeout)
	defer cancel()
	want := map[string]int{}
	frames, sent := 0, 0
	var msg []byte
	for sent < 5<<20 {
		msg = msg[:0]
		for len(msg) < 64<<10 {
			k := kinds[frames%len(kinds)]
			msg = append(append(msg, k.frame...), '\n')
			want[k.reason]++
			frames++
		}
		if err := gw.Client.SendRaw(ctx, msg); err != nil {
			t.Fatalf("sending the flood (%d of 5 MiB sent, up to %v in all): %v", sent, floodTimeout, err)
		}
		sent += len(msg)
	}
	// Frames are handled in order: once this result is back, every frame
	// before it has been.
	if _, err := gw.Client.Outbound(ctx, "", map[string]any{"op": "no_such_op"}); err != nil {
		t.Fatalf("waited up to %v for the flood to be handled: %v", floodTimeout, err)
	}

	logged, lines := len(logs.String()), logs.count("\n")
	t.Logf("%d invalid frames in %d bytes logged %d lines, %d bytes: %.4f bytes per invalid frame",
		frames, sent, lines, logged, float64(logged)/float64(frames))
	const maxLines = 20 // connected, hello and the connection's allowance, with room to spare
	if lines > maxLines {
		t.Fatalf("%d invalid frames logged %d lines, want at most %d", frames, lines, maxLines)
	}
	for reason, n := range want {
		if got := g.ignoredFrames(reason); got != n {
			t.Errorf("%d frames ignored as %s, want %d", got, reason, n)
		}
	}

	_ = gw.Close()
	line := logs.waitLine(t, "gateway disconnected")
	if !strings.Contains(line, `"log_lines_suppressed":`) {
		t.Fatalf("the closing line does not say how many lines were held back: %s", line)
	}
}

// TestRefusedUpgradeFloodLogsBoundedLines: upgrades refused from one remote
// address cost a bounded number of log lines, while each is counted.
func TestRefusedUpgradeFloodLogsBoundedLines(t *testing.T) {
	now := time.Now()
	logs := newLogBuffer()
	g := newConnGauge()
	h := relaytest.StartConfig(t, relay.Config{
		Tenants: []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Metrics: g,
		Clock:   clocktest.New(now),
		Log:     slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	const refusals = 100
	for range refusals {
		gw := h.Dial(t, "gw1", "wrong-secret")
		if code, _ := gw.Closed(t); code != int(contract.CloseUnauthorized) {
			t.Fatalf("closed %d, want 4401", code)
		}
	}
	if n := g.refusals(contract.ReasonUnauthorized); n != refusals {
		t.Fatalf("%d refusals counted, want %d", n, refusals)
	}
	const maxLines = 10 // one remote address's allowance
	if n := logs.count("gateway refused"); n > maxLines {
		t.Fatalf("%d refused upgrades from one address logged %d lines, want at most %d", refusals, n, maxLines)
	}
}

// TestDroppedInterruptLogPerTenantCoversTenantsMadeAtRuntime: tenants
// made while the relay runs (the admin API) each keep their own allowance
// of dropped-interrupt lines: two of them taking turns get 10 lines each,
// never a fresh allowance at every turn. The clock stands still, so no
// allowance refills.
func TestDroppedInterruptLogPerTenantCoversTenantsMadeAtRuntime(t *testing.T) {
	logs := newLogBuffer()
	h := relaytest.StartConfig(t, relay.Config{
		Clock: clocktest.New(time.Now()),
		Log:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err := h.Server.SetTenants([]relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	gws := []*relaytest.Gateway{h.Dial(t, "gw1", "s1"), h.Dial(t, "gw2", "s2")}
	for _, gw := range gws {
		gw.Hello(t, contract.PlatformRelay, "")
	}
	for i := range 15 {
		for _, gw := range gws {
			gw.Send(t, map[string]any{"type": "interrupt", "session_key": "agent:main:relay:dm:" + strconv.Itoa(i), "reason": nil})
			// Frames are handled in order: once this result is back, the
			// interrupt has been handled, so the tenants take turns.
			gw.Outbound(t, "", map[string]any{"op": "no_such_op"})
		}
	}
	dropped := map[string]int{}
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "interrupt dropped") {
			dropped[strings.TrimSpace(line[strings.LastIndex(line, "tenant="):])]++
		}
	}
	if len(dropped) != 2 || dropped["tenant=t1"] != 10 || dropped["tenant=t2"] != 10 {
		t.Fatalf("interrupt dropped lines by tenant: %v, want 10 for each of t1 and t2:\n%s", dropped, logs.String())
	}
}
