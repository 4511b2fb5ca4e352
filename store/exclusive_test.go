package store

import (
	"context"
	"testing"
	"time"
)

// Two holders compete for one lease: run runs under one of them at a time,
// and the other takes over once the first gives up.
func TestRunExclusiveOneHolderAtATime(t *testing.T) {
	st := NewMemory(nil)
	defer st.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan string, 2)
	stopA, endA := context.WithCancel(ctx)
	errs := make(chan error, 2)
	go func() {
		errs <- RunExclusive(stopA, st.Leases(), "job", "a", 300*time.Millisecond, func(c context.Context) error {
			started <- "a"
			<-c.Done()
			return nil
		})
	}()
	first := waitString(t, started, "the first holder to start")
	if first != "a" {
		t.Fatalf("first holder %q, want a", first)
	}
	go func() {
		errs <- RunExclusive(ctx, st.Leases(), "job", "b", 300*time.Millisecond, func(c context.Context) error {
			started <- "b"
			<-c.Done()
			return nil
		})
	}()
	select {
	case h := <-started:
		t.Fatalf("%s started while a held the lease", h)
	case <-time.After(time.Second): // a second of renewals without a takeover
	}
	endA()
	if h := waitString(t, started, "b to take over"); h != "b" {
		t.Fatalf("took over: %q, want b", h)
	}
}

func waitString(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out after 10s waiting for %s", what)
	}
	return ""
}
