package nexscope

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run when a goroutine of this package (a member's
// writer, a ping, a handler, a test client) outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := checkLeaks(10 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func checkLeaks(grace time.Duration) error {
	deadline := time.Now().Add(grace)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "connector/platform/nexscope.") && !strings.Contains(g, "nexscope.checkLeaks") &&
				!strings.Contains(g, "nexscope.TestMain") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		<-tick.C
	}
}
