package leakcheck_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"connector/internal/leakcheck"
)

// blockUntil closes started, then waits for release. Until a goroutine has
// started, its stack names only the go statement's wrapper
// (TestX.gowrap1), not blockUntil, so the test waits for started before
// looking.
func blockUntil(started, release chan struct{}) {
	close(started)
	<-release
}

func TestWaitReportsRunningGoroutinesUntilTheyEnd(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	go blockUntil(started, release)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce() // a failed run leaves no goroutine to the next one
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("timed out after 5s waiting for the blocked goroutine to start")
	}
	if leaked := leakcheck.Wait(50*time.Millisecond, "leakcheck_test.blockUntil"); !strings.Contains(leaked, "blockUntil") {
		t.Fatalf("a blocked goroutine was not reported: %q", leaked)
	}
	releaseOnce()
	if leaked := leakcheck.Wait(5*time.Second, "leakcheck_test.blockUntil"); leaked != "" {
		t.Fatalf("an ended goroutine was reported:\n%s", leaked)
	}
}
