package discord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
)

func TestIdentifyBudgetBlocksWhenSpent(t *testing.T) {
	t.Parallel()
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
	// A sleep Advance woke stops counting before Advance returns, so wait
	// is still asleep unless it was woken early; its return would come
	// later, on its own goroutine.
	if n := clk.Sleepers(); n != 1 {
		t.Fatalf("wait was woken before the first identify was 24h old (%d asleep on the clock, want 1)", n)
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
	t.Parallel()
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	b := newBreaker(3, 3, clk)
	for range 3 {
		if b.open() {
			t.Fatal("opened too early")
		}
		b.record("")
		clk.Advance(time.Minute)
	}
	if !b.open() || b.admit("t1") != errBreakerOpen {
		t.Fatal("limit reached but calls allowed")
	}
	clk.Advance(8 * time.Minute) // the first record leaves the 10-minute window
	if b.open() {
		t.Fatal("breaker did not close as the window slid")
	}
	b.pause(time.Minute)
	if !b.open() {
		t.Fatal("pause ignored")
	}
	clk.Advance(time.Minute)
	if b.open() {
		t.Fatal("pause did not end")
	}
}

// TestBreakerChargesTheTenant: a tenant that reached its share is refused
// alone, with the time until its oldest answers leave the window; the bot
// and other tenants go on.
func TestBreakerChargesTheTenant(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	b := newBreaker(40, 10, clk)
	for range 4 {
		b.record("a")
	}
	clk.Advance(3 * time.Minute)
	for range 6 {
		b.record("a")
	}
	var spent *shareSpentError
	if err := b.admit("a"); !errors.As(err, &spent) {
		t.Fatalf("admit(a) at its share = %v, want *shareSpentError", err)
	}
	// Without the 4 oldest answers a is below 10: they leave the window 10
	// minutes after their slot began, at most 7 minutes from now.
	if spent.retryAfter <= 6*time.Minute+50*time.Second || spent.retryAfter > 7*time.Minute {
		t.Fatalf("retry after %v, want about 7m", spent.retryAfter)
	}
	if err := b.admit("b"); err != nil {
		t.Fatalf("admit(b) = %v", err)
	}
	if err := b.admit(""); err != nil || b.open() {
		t.Fatalf("the connector's own calls refused: %v", err)
	}
	clk.Advance(spent.retryAfter - time.Millisecond)
	if b.admit("a") == nil {
		t.Fatal("a admitted before its retry_after")
	}
	clk.Advance(time.Millisecond)
	if err := b.admit("a"); err != nil {
		t.Fatalf("admit(a) at its retry_after = %v", err)
	}
}

// TestBreakerKeepsTheBotBelowTheBan drives tenants that call as fast as they
// are admitted, every answer invalid, for 30 minutes under the default
// limits: in no 10-minute window do more than InvalidRequestLimit (< 10,000)
// invalid answers reach the bot; seven such tenants never refuse a tenant
// that behaves, thirty do (the bot-wide breaker, the last line).
func TestBreakerKeepsTheBotBelowTheBan(t *testing.T) {
	t.Parallel()
	cfg := Config{}.WithDefaults()
	if cfg.InvalidRequestLimit >= discordInvalidBan || cfg.TenantInvalidRequestLimit != cfg.InvalidRequestLimit/8 {
		t.Fatalf("defaults %d / %d", cfg.InvalidRequestLimit, cfg.TenantInvalidRequestLimit)
	}
	for _, bad := range []int{7, 30} {
		clk := clocktest.New(time.Unix(1_700_000_000, 0))
		b := newBreaker(cfg.InvalidRequestLimit, cfg.TenantInvalidRequestLimit, clk)
		var perSecond []int
		goodRefused := false
		for range 30 * 60 {
			n := 0
			for i := range bad {
				tenant := fmt.Sprintf("bad-%d", i)
				for range 20 {
					if b.admit(tenant) == nil {
						b.record(tenant)
						n++
					}
				}
			}
			goodRefused = goodRefused || b.admit("good") != nil
			perSecond = append(perSecond, n)
			clk.Advance(time.Second)
		}
		worst := 0
		for i := range perSecond {
			sum := 0
			for _, n := range perSecond[max(0, i-599) : i+1] {
				sum += n
			}
			worst = max(worst, sum)
		}
		t.Logf("%d misbehaving tenants: at most %d invalid answers in any 10 minutes; a good tenant refused: %v", bad, worst, goodRefused)
		if worst > cfg.InvalidRequestLimit {
			t.Fatalf("%d misbehaving tenants: %d invalid answers within 10 minutes, limit %d", bad, worst, cfg.InvalidRequestLimit)
		}
		if want := bad*cfg.TenantInvalidRequestLimit >= cfg.InvalidRequestLimit; goodRefused != want {
			t.Fatalf("%d misbehaving tenants: good tenant refused = %v, want %v", bad, goodRefused, want)
		}
	}
}

func TestParseRouteHashesTokens(t *testing.T) {
	t.Parallel()
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

func TestInvalidRequestLimitsValidated(t *testing.T) {
	t.Parallel()
	base := Config{BotToken: "x", PublicKey: strings.Repeat("ab", 32), ApplicationID: "9000"}
	for _, tc := range []struct {
		bot, tenant int
		err         string
	}{
		{0, 0, ""},
		{9999, 9999, ""},
		{10_000, 0, "discord.invalid_request_limit"},
		{0, 8001, "discord.tenant_invalid_request_limit"},
		{100, 101, "discord.tenant_invalid_request_limit"},
	} {
		cfg := base
		cfg.InvalidRequestLimit, cfg.TenantInvalidRequestLimit = tc.bot, tc.tenant
		err := cfg.Validate()
		if (err == nil) != (tc.err == "") || (err != nil && !strings.HasPrefix(err.Error(), tc.err+":")) {
			t.Errorf("limits %d/%d: Validate = %v, want %q", tc.bot, tc.tenant, err, tc.err)
		}
	}
	if d := (Config{InvalidRequestLimit: 4}).WithDefaults(); d.TenantInvalidRequestLimit != 1 {
		t.Errorf("tenant share of a bot limit of 4 = %d, want 1", d.TenantInvalidRequestLimit)
	}
}

// TestNegativeKnobsRefused: a negative number or duration is an error
// naming its key, as in the other platforms' sections, not silently the
// default (global_per_second: -1 disables Telegram's budget but would run
// Discord's at 45).
func TestNegativeKnobsRefused(t *testing.T) {
	t.Parallel()
	base := Config{BotToken: "x", PublicKey: strings.Repeat("ab", 32), ApplicationID: "9000"}
	for key, set := range map[string]func(*Config){
		"global_per_second":            func(c *Config) { c.GlobalPerSecond = -1 },
		"global_burst":                 func(c *Config) { c.GlobalBurst = -1 },
		"invalid_request_limit":        func(c *Config) { c.InvalidRequestLimit = -1 },
		"tenant_invalid_request_limit": func(c *Config) { c.TenantInvalidRequestLimit = -1 },
		"request_timeout":              func(c *Config) { c.RequestTimeout = -time.Second },
		"max_interaction_bytes":        func(c *Config) { c.MaxInteractionBytes = -1 },
		"reconnect_min":                func(c *Config) { c.ReconnectMin = -time.Second },
		"max_identifies_per_day":       func(c *Config) { c.MaxIdentifiesPerDay = -1 },
		"command_sync_debounce":        func(c *Config) { c.CommandSyncDebounce = -time.Second },
	} {
		cfg := base
		set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "discord."+key+":") {
			t.Errorf("%s negative: Validate = %v, want an error naming it", key, err)
		}
	}
}
