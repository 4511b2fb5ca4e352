package fairshare_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"connector/platform/fairshare"
)

// grants starts n waiters for each tenant (in the given order, each tenant's
// waiters queued before the next tenant's) and returns the tenants in the
// order their Wait returned.
func grants(t *testing.T, s *fairshare.Scheduler, order []string, n map[string]int) []string {
	t.Helper()
	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	for _, tenant := range order {
		for range n[tenant] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.Wait(context.Background(), tenant); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, tenant)
				mu.Unlock()
			}()
		}
		// Let this tenant's waiters queue up before the next tenant's.
		for s.Waiting(tenant) < n[tenant]-1 {
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	return got
}

func TestFloodingTenantDoesNotStarveOthers(t *testing.T) {
	s := fairshare.New(fairshare.Config{Rate: 400, Burst: 1})
	got := grants(t, s, []string{"flood", "quiet"}, map[string]int{"flood": 60, "quiet": 10})
	if len(got) != 70 {
		t.Fatalf("granted %d, want 70", len(got))
	}
	last := 0
	for i, tenant := range got {
		if tenant == "quiet" {
			last = i
		}
	}
	// Alternating service puts quiet's 10th grant around position 21; a FIFO
	// would put it at 69.
	if last > 25 {
		t.Fatalf("quiet tenant's last grant at position %d of %d: %v", last, len(got), got)
	}
}

func TestWeights(t *testing.T) {
	s := fairshare.New(fairshare.Config{Rate: 400, Burst: 1, Weights: map[string]int{"gold": 3}})
	got := grants(t, s, []string{"gold", "basic"}, map[string]int{"gold": 60, "basic": 60})
	gold := 0
	for _, tenant := range got[:40] {
		if tenant == "gold" {
			gold++
		}
	}
	// 3:1 weights give gold about 30 of the first 40 grants.
	if gold < 26 || gold > 34 {
		t.Fatalf("gold got %d of the first 40 grants, want about 30: %v", gold, got[:40])
	}
}

func TestCancelledWaiterLeavesQueue(t *testing.T) {
	s := fairshare.New(fairshare.Config{Rate: 1, Burst: 1})
	if err := s.Wait(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Wait(ctx, "a") }()
	for s.Waiting("a") == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	if n := s.Waiting("a"); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
}

func TestQueueBound(t *testing.T) {
	s := fairshare.New(fairshare.Config{Rate: 0.001, Burst: 1, MaxWaiting: 2})
	_ = s.Wait(context.Background(), "a")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 {
		go func() { _ = s.Wait(ctx, "a") }()
	}
	for s.Waiting("a") < 2 {
		time.Sleep(time.Millisecond)
	}
	if err := s.Wait(ctx, "a"); !errors.Is(err, fairshare.ErrQueueFull) {
		t.Fatalf("Wait = %v, want ErrQueueFull", err)
	}
}

func TestPauseHoldsGrants(t *testing.T) {
	s := fairshare.New(fairshare.Config{Rate: 1000, Burst: 5})
	s.Pause(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Wait(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait during pause = %v, want deadline exceeded", err)
	}
}

func BenchmarkWaitUncontended(b *testing.B) {
	s := fairshare.New(fairshare.Config{Rate: 1e12, Burst: 1 << 30})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Wait(ctx, "t")
	}
}
