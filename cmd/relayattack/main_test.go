package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary play the attacker process that attack
// starts (this executable re-executed with RELAYATTACK_ROLE=attacker).
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == roleAttacker {
		os.Exit(attackerMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// run runs relayattack with args and returns what it printed.
func run(t *testing.T, args ...string) string {
	t.Helper()
	var out, errs bytes.Buffer
	if code := parentMain(args, &out, &errs); code != 0 {
		t.Fatalf("relayattack %q exited %d: %s\n%s", args, code, errs.String(), out.String())
	}
	return out.String()
}

// TestBurstHoldsTheLimit: of a burst of one gateway id, as many as the limit
// stay open, every other one is closed 4409, and the relay never served
// more at once.
func TestBurstHoldsTheLimit(t *testing.T) {
	out := run(t, "-mode", "burst", "-conns", "40", "-limit", "4", "-silent", "0.25", "-hold", "0s", "-workers", "40")
	if open, ok := resultField(out, "open"); !ok || open != 4 {
		t.Errorf("%d connections left open, want 4:\n%s", open, out)
	}
	if closed, ok := resultField(out, "closed_4409"); !ok || closed != 36 {
		t.Errorf("%d connections closed 4409, want 36:\n%s", closed, out)
	}
	if !strings.Contains(out, "(most at once     4)") {
		t.Errorf("the relay served more than 4 at once, or the report does not say:\n%s", out)
	}
}

// TestLogFloodIsCounted: the log flood reports the relay's log cost per
// frame and the frames it counted as ignored.
func TestLogFloodIsCounted(t *testing.T) {
	out := run(t, "-mode", "logflood", "-bytes", "65536", "-frame", "outbound")
	const frames = 3277 // 65536 bytes of 20-byte frames, rounded up
	if n, ok := resultField(out, "frames"); !ok || n != frames {
		t.Fatalf("the attacker reports %d frames, want %d:\n%s", n, frames, out)
	}
	if !strings.Contains(out, "lines for 3277 frames") || !strings.Contains(out, "metrics: 3277 frames counted as ignored") {
		t.Fatalf("the report misses the log cost or the ignored count:\n%s", out)
	}
}

func TestOptionsRefuseUnboundedAttacks(t *testing.T) {
	for _, args := range [][]string{
		{"-conns", "100000"},
		{"-hold", "1h"},
		{"-bytes", "1073741824"},
		{"-mode", "nope"},
		{"-frame", "nope"},
		{"-silent", "2"},
	} {
		var errs bytes.Buffer
		if _, err := parseOptions("relayattack", args, &errs); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
