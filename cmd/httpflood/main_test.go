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
	} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestAttackRunsAgainstTheBuiltConnector runs a small attack of every mode
// against the connector binary and checks the report's shape: every phase
// sampled, the connector's fds and goroutines read, the gateway probe
// answered.
func TestAttackRunsAgainstTheBuiltConnector(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit not installed")
	}
	bin := filepath.Join(t.TempDir(), "connector")
	if out, err := exec.Command("go", "build", "-o", bin, "../connector").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out bytes.Buffer
	code := attackMain([]string{"-connector", bin, "-mode", "idle,slowbody,slowheader",
		"-idle", "20", "-slow", "4", "-hold", "1s", "-settle", "0s", "-nofile", "256"}, &out, io.Discard)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	report := out.String()
	for _, want := range []string{"open-file limit 256", "baseline", "under attack", "after 1s", "attack ended", "28 opened", "ok in"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, " -1 ") {
		t.Errorf("a sample could not read the goroutines:\n%s", report)
	}
}
