package main

import (
	"bytes"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestOptionsAreBounded(t *testing.T) {
	for _, args := range [][]string{
		{},                                    // no -connector
		{"-connector", "x", "-idle", "5001"},  // too many connections
		{"-connector", "x", "-hold", "6m"},    // too long
		{"-connector", "x", "-mode", "flood"}, // unknown mode
		{"-connector", "x", "-mode", "upgrade,idle"},                // upgrade runs alone
		{"-connector", "x", "-mode", "upgrade", "-auth", "maybe"},   // unknown -auth
		{"-connector", "x", "-mode", "upgrade", "-open", "10001"},   // too many open
		{"-connector", "x", "-mode", "upgrade", "-rate", "1000000"}, // too fast
		{"-connector", "x", "-mode", "upgrade", "-linger", "2m"},    // too long
	} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestAttackRunsAgainstTheBuiltConnector runs a small attack of every mode
// against the connector binary and checks the report's shape: every phase
// sampled, the connector's fds and goroutines read, the gateway probe
// answered; for the ledger mode every message delivered, then
// acknowledged by the draining gateway; for the upgrade flood every
// upgrade answered, refused with a 401 (no Authorization) or upgraded and
// closed (a bad token).
func TestAttackRunsAgainstTheBuiltConnector(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit not installed")
	}
	bin := filepath.Join(t.TempDir(), "connector")
	if out, err := exec.Command("go", "build", "-o", bin, "../connector").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(t *testing.T, args []string, want ...string) {
		var out bytes.Buffer
		if code := attackMain(append([]string{"-connector", bin}, args...), &out, io.Discard); code != 0 {
			t.Fatalf("exit %d:\n%s", code, out.String())
		}
		report := out.String()
		for _, w := range want {
			if !strings.Contains(report, w) {
				t.Errorf("report lacks %q:\n%s", w, report)
			}
		}
		if strings.Contains(report, " -1 ") {
			t.Errorf("a sample could not read the goroutines:\n%s", report)
		}
	}
	t.Run("connections", func(t *testing.T) {
		run(t, []string{"-mode", "idle,slowbody,slowheader", "-idle", "20", "-slow", "4", "-hold", "1s", "-settle", "0s", "-nofile", "256"},
			"open-file limit 256", "baseline", "under attack", "after 1s", "attack ended", "28 opened", "ok in")
	})
	t.Run("upgrade", func(t *testing.T) {
		run(t, []string{"-mode", "upgrade", "-auth", "none", "-workers", "4", "-rate", "200", "-hold", "2s", "-settle", "0s"},
			"baseline", "peak", "attack ended", "dials ok", "answered 401", "0 dials failed")
		run(t, []string{"-mode", "upgrade", "-auth", "bad", "-workers", "4", "-rate", "200", "-hold", "2s", "-settle", "0s"},
			"baseline", "peak", "attack ended", "dials ok", "0 answered 401", "0 dials failed")
	})
	t.Run("ledger", func(t *testing.T) {
		run(t, []string{"-mode", "ledger", "-readers", "2", "-members", "2", "-messages", "6", "-message-bytes", "10000", "-hold", "1m", "-settle", "0s"},
			"baseline", "6 sent, 6 delivered to the bot; readers got 6 inbound", "peak", "readers closed",
			"a gateway acknowledged 6 buffered inbound\n")
	})
}
