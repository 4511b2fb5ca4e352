package discord

import (
	"context"
	"errors"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
)

func TestIdentifyBudgetBlocksWhenSpent(t *testing.T) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	b := &identifyBudget{max: 3, clock: clk}
	for range 3 {
		if !b.ready() {
			t.Fatal("budget spent too early")
		}
		b.record()
		clk.Advance(time.Hour)
	}
	if b.ready() {
		t.Fatal("a fourth identify within 24h allowed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait = %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- b.wait(context.Background()) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := clk.WaitPending(wctx, 1); err != nil {
		t.Fatal("timed out after 10s waiting for wait to sleep on the clock")
	}
	clk.Advance(21*time.Hour - time.Nanosecond)
	select {
	case err := <-waited:
		t.Fatalf("wait returned %v before the first identify was 24h old", err)
	default:
	}
	clk.Advance(time.Nanosecond) // the first identify is now 24h old
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("wait = %v", err)
		}
	case <-wctx.Done():
		t.Fatal("timed out after 10s waiting for wait to return once the first identify was 24h old")
	}
	if !b.ready() {
		t.Fatal("budget did not refill after 24h")
	}
}

func TestBreakerWindow(t *testing.T) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	b := newBreaker(3, clk.Now)
	for range 3 {
		if !b.allow() {
			t.Fatal("opened too early")
		}
		b.record()
		clk.Advance(time.Minute)
	}
	if b.allow() {
		t.Fatal("limit reached but calls allowed")
	}
	clk.Advance(8 * time.Minute) // the first record leaves the 10-minute window
	if !b.allow() {
		t.Fatal("breaker did not close as the window slid")
	}
	b.pause(time.Minute)
	if b.allow() {
		t.Fatal("pause ignored")
	}
	clk.Advance(time.Minute)
	if !b.allow() {
		t.Fatal("pause did not end")
	}
}

func TestParseRouteHashesTokens(t *testing.T) {
	r := parseRoute("POST", "/api/v9/webhooks/9000/secret-token?wait=true")
	if !r.exemptGlobal || r.key == "" || containsStr(r.key, "secret-token") || redactRoute(r.key) != "POST webhooks 9000 {token}" {
		t.Fatalf("route = %+v (%s)", r, redactRoute(r.key))
	}
	if r := parseRoute("PATCH", "/api/v9/channels/101/messages/555"); r.key != "PATCH channels 101 messages :id" || r.exemptGlobal {
		t.Fatalf("route = %+v", r)
	}
	if r := parseRoute("POST", "/api/v9/interactions/123/tok/callback"); !r.exemptGlobal || containsStr(r.key, "tok ") {
		t.Fatalf("route = %+v", r)
	}
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
