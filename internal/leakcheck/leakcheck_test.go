package leakcheck_test

import (
	"strings"
	"testing"
	"time"

	"connector/internal/leakcheck"
)

func blockUntil(release chan struct{}) { <-release }

func TestWaitReportsRunningGoroutinesUntilTheyEnd(t *testing.T) {
	release := make(chan struct{})
	go blockUntil(release)
	if leaked := leakcheck.Wait(50*time.Millisecond, "leakcheck_test.blockUntil"); !strings.Contains(leaked, "blockUntil") {
		t.Fatalf("a blocked goroutine was not reported: %q", leaked)
	}
	close(release)
	if leaked := leakcheck.Wait(5*time.Second, "leakcheck_test.blockUntil"); leaked != "" {
		t.Fatalf("an ended goroutine was reported:\n%s", leaked)
	}
}
