// Package leakcheck fails a test binary when goroutines running the code
// under test outlive its tests: every connection's reader, writer and timer
// must end with the connection. It also tells a test when a goroutine is
// parked in a function (Parked), for waits the code signals nowhere else.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Main runs m's tests and then, if they passed, waits up to grace for every
// goroutine whose stack mentions one of markers (e.g. "connector/relay.") to
// end. It exits the process: 1 with the leaked stacks printed, else m's code.
// Call it from TestMain.
func Main(m *testing.M, grace time.Duration, markers ...string) {
	code := m.Run()
	if code == 0 {
		if leaked := Wait(grace, markers...); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// Wait polls for up to grace until no goroutine mentions one of markers,
// and returns the stacks of those still running ("" when none). Goroutines
// signal nothing when they end, so polling is the only way to observe it.
func Wait(grace time.Duration, markers ...string) string {
	deadline := time.Now().Add(grace)
	for {
		leaked := running(markers)
		if leaked == "" || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// running returns the stacks of goroutines mentioning a marker, other than
// the caller's own and the test binary's main.
func running(markers []string) string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "leakcheck.") || strings.Contains(g, ".TestMain(") {
			continue
		}
		for _, m := range markers {
			if strings.Contains(g, m) {
				out = append(out, g)
				break
			}
		}
	}
	return strings.Join(out, "\n\n")
}

// Parked reports whether a goroutine is blocked in a select inside fn, a
// function as goroutine stacks name it (e.g.
// "connector/platform/chatorder.(*Queue[...]).acquire("): queued for a lock
// or a slot that the code under test signals nowhere else. A test polls it
// with a deadline.
func Parked(fn string) bool {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "[select") && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}
