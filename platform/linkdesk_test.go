package platform_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/platform"
)

// TestLinkDeskLimitsEachUser: a user's DMs beyond LinkBurst are refused
// (link_rate_limited) until LinkEvery has passed on the desk's clock;
// another user is unaffected; the DMs taken run on the desk's workers.
func TestLinkDeskLimitsEachUser(t *testing.T) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	d := platform.NewLinkDesk(clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	var mu sync.Mutex
	ran := map[string]int{}
	var wg sync.WaitGroup
	submit := func(user string) string {
		wg.Add(1)
		reason := d.Submit(user, func(context.Context) {
			defer wg.Done()
			mu.Lock()
			ran[user]++
			mu.Unlock()
		})
		if reason != "" {
			wg.Done()
		}
		return reason
	}
	for i := range platform.LinkBurst + 5 {
		reason := submit("mallory")
		if want := ""; i >= platform.LinkBurst {
			want = platform.DropLinkRateLimited
			if reason != want {
				t.Fatalf("mallory's DM %d: %q, want %q", i+1, reason, want)
			}
		} else if reason != want {
			t.Fatalf("mallory's DM %d: %q, want it taken", i+1, reason)
		}
	}
	if reason := submit("alice"); reason != "" {
		t.Fatalf("alice's first DM while mallory is limited: %q", reason)
	}
	clk.Advance(platform.LinkEvery)
	if reason := submit("mallory"); reason != "" {
		t.Fatalf("mallory after %v: %q, want taken", platform.LinkEvery, reason)
	}
	wg.Wait()
	if ran["mallory"] != platform.LinkBurst+1 || ran["alice"] != 1 {
		t.Fatalf("ran %v, want mallory %d and alice 1", ran, platform.LinkBurst+1)
	}
}

// TestLinkDeskShedsWhenFull: with every worker busy and the queue full, a
// further DM is refused at once (link_shed) instead of waiting; Run
// returns when its context ends, with DMs still queued.
func TestLinkDeskShedsWhenFull(t *testing.T) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	d := platform.NewLinkDesk(clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	started := make(chan struct{}, platform.LinkWorkers)
	block := func(ctx context.Context) { started <- struct{}{}; <-ctx.Done() }
	for i := range platform.LinkWorkers {
		if reason := d.Submit("busy"+strconv.Itoa(i), block); reason != "" {
			t.Fatal(reason)
		}
	}
	for range platform.LinkWorkers {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("timed out after 10s waiting for the workers to take the blocking DMs")
		}
	}
	for i := range platform.LinkQueue {
		if reason := d.Submit("queued"+strconv.Itoa(i), func(context.Context) {}); reason != "" {
			t.Fatalf("queued DM %d: %q", i, reason)
		}
	}
	if reason := d.Submit("one-more", func(context.Context) {}); reason != platform.DropLinkShed {
		t.Fatalf("a DM with the queue full: %q, want %q", reason, platform.DropLinkShed)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context ending")
	}
}
