package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connector/contract"
	"connector/session"
)

// batchUpdates is how many updates the crash test's one getUpdates answer
// carries: a full answer.
const batchUpdates = 100

// TestCrashBetweenBatchFetchAndCommitRefetches: the connector binary long
// polls, gets one getUpdates answer of 100 updates and is killed (SIGKILL)
// the moment that answer is on the wire, before the next poll could confirm
// it. Nothing is lost: unless the dead process's next poll had already
// confirmed the answer (then it had stored it), the restarted connector
// fetches the same answer again, and the gateway gets every update, the
// first copy of each session's in order.
func TestCrashBetweenBatchFetchAndCommitRefetches(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newCrashRig(t, connectorBinary(t), true)
	for i := range batchUpdates {
		r.tfake.Enqueue([]byte(telegramUpdate(i)))
	}
	killed := make(chan struct{})
	// started is closed once r.start has set r.child: the connector may
	// poll before startChild returns, and the answer must not read r.child
	// before then.
	started := make(chan struct{})
	r.tfake.OnAnswer(func(n int) {
		<-started
		select {
		case <-killed:
			return
		default:
		}
		if n != batchUpdates {
			t.Errorf("the first getUpdates answer carried %d updates, want %d", n, batchUpdates)
		}
		_ = r.child.cmd.Process.Signal(syscall.SIGKILL)
		close(killed)
	})
	func() {
		defer close(started) // also when r.start fails the test
		r.start(t)
	}()
	select {
	case <-killed:
	case <-time.After(crashWait):
		t.Fatalf("no getUpdates answer within %v", crashWait)
	}
	select {
	case <-r.child.exited:
	case <-time.After(crashWait):
		t.Fatalf("the connector did not exit within %v of SIGKILL", crashWait)
	}
	last := int64(1000 + batchUpdates - 1)
	polls := len(r.tfake.Calls("getUpdates"))
	confirmed := false
	for _, c := range r.tfake.Calls("getUpdates") {
		if off, _ := strconv.ParseInt(c.Form["offset"], 10, 64); off > last {
			confirmed = true
		}
	}

	r.start(t)
	gw := r.gateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	seen := map[int]bool{}
	lastOf := map[string]int{}
	for len(seen) < batchUpdates {
		f, err := gw.Next(ctx, contract.TypeInbound)
		if err != nil {
			t.Fatalf("got %d of the %d updates after the restart, then: %v", len(seen), batchUpdates, err)
		}
		words := strings.Fields(f.Event.Text)
		i, err := strconv.Atoi(words[len(words)-1])
		if err != nil || i < 0 || i >= batchUpdates {
			t.Fatalf("inbound %q is not one of the batch's", f.Event.Text)
		}
		if err := gw.Ack(ctx, f.BufferID); err != nil {
			t.Fatal(err)
		}
		if seen[i] {
			continue // stored before the kill and fetched again: at least once
		}
		seen[i] = true
		key := session.Key(&f.Event.Source, session.DefaultOptions)
		if prev, ok := lastOf[key]; ok && i < prev {
			t.Errorf("session %s: update %d came after %d", key, i, prev)
		}
		lastOf[key] = i
	}
	if !confirmed {
		calls := r.tfake.Calls("getUpdates")
		if len(calls) <= polls {
			t.Fatal("the restarted connector never polled")
		}
		if off, _ := strconv.ParseInt(calls[polls].Form["offset"], 10, 64); off > 1000 {
			t.Fatalf("the restarted connector's first getUpdates had offset %d: the unconfirmed answer (updates 1000-%d) was skipped", off, last)
		}
	}
	t.Logf("confirmed before the kill: %v; getUpdates calls before the restart: %d", confirmed, polls)
	r.stop(t, syscall.SIGTERM)
}
