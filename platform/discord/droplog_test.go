package discord

import (
	"strings"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/platform/discord/discordtest"
)

// TestUnclaimedGuildLogsOncePerMinute: events in a guild no tenant claims,
// or DMs with no dm_tenant, are each counted (the drop metric), but their
// info line is written once a minute per guild or DM, on the injected
// clock, the next one saying how many were held back; before, every event
// wrote one, so anyone in such a guild could flood the operator's log.
func TestUnclaimedGuildLogsOncePerMinute(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, discordtest.Options{}, nil)
	lines := func(s string) int { return strings.Count(e.logs.Text(), s) }
	const guildLine, dmLine = "no tenant claims its guild", "discord DM dropped"

	for range 5 {
		e.p.routeDropped("", "998", "999")
		e.p.routeDropped("", "996", "997")
	}
	if g, n := lines(guildLine), e.metrics.drops["unclaimed"]; g != 2 || n != 10 {
		t.Fatalf("10 events in 2 unclaimed guilds wrote %d lines and counted %d, want one line per guild and 10:\n%s", g, n, e.logs.Text())
	}
	clk.Advance(time.Minute - time.Nanosecond)
	e.p.routeDropped("", "998", "999")
	if g := lines(guildLine); g != 2 {
		t.Fatalf("within the minute wrote %d lines in all, want 2", g)
	}
	clk.Advance(time.Nanosecond)
	e.p.routeDropped("", "998", "999")
	if g := lines(guildLine); g != 3 || !strings.Contains(e.logs.Text(), "guild_id=998 suppressed=5") {
		t.Fatalf("a minute later wrote %d lines in all, want 3, the last counting the 5 held back:\n%s", g, e.logs.Text())
	}

	for range 3 {
		e.p.routeDropped("", "", "5001")
	}
	if d, n := lines(dmLine), e.metrics.drops["dm_no_tenant"]; d != 1 || n != 3 {
		t.Fatalf("3 DMs with no dm_tenant wrote %d lines and counted %d, want 1 and 3", d, n)
	}
}
