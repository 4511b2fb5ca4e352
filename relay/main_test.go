package relay_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package when a goroutine started by the relay outlives
// the tests: every connection's reader, writer and pinger must end with it.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := relayGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked by the relay:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// relayGoroutines waits up to d for goroutines running relay code to end
// and returns the stacks of those still running.
func relayGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for g := range strings.SplitSeq(string(buf), "\n\n") {
			if strings.Contains(g, "connector/relay.") && !strings.Contains(g, "relayGoroutines") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
