package fairshare_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/platform/fairshare"
)

// testTimeout bounds every wait of these tests on real goroutines.
const testTimeout = 10 * time.Second

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newScheduler returns a scheduler on a fake clock granting one request per
// second, with its burst already spent: nothing is granted until the test
// advances the clock.
func newScheduler(t *testing.T, weights map[string]int) (*fairshare.Scheduler, *clocktest.Fake) {
	t.Helper()
	clk := clocktest.New(epoch)
	s := fairshare.New(fairshare.Config{Rate: 1, Burst: 1, Weights: weights, Clock: clk})
	if err := s.Wait(context.Background(), "warm-up"); err != nil {
		t.Fatalf("spending the burst: %v", err)
	}
	return s, clk
}

// none counts no finished jobs, for clocktest.Fake.Settle.
func none() int { return 0 }

// waiters starts n[tenant] Waits per tenant, queuing each tenant's before
// the next tenant's (so the ring order is order), and waits until all are
// queued. The returned WaitGroup ends when all of them returned; their
// errors go to t.
func waiters(t *testing.T, s *fairshare.Scheduler, clk *clocktest.Fake, order []string, n map[string]int) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for _, tenant := range order {
		for range n[tenant] {
			wg.Go(func() {
				if err := s.Wait(context.Background(), tenant); err != nil {
					t.Errorf("Wait(%s) = %v", tenant, err)
				}
			})
		}
		clk.Settle(t, n[tenant], none, func() int { return s.Waiting(tenant) })
	}
	return &wg
}

// grantOrder advances the fake clock one token at a time until every
// waiting request of tenants is granted, and returns which tenant got each
// grant. Grants happen only inside Advance, so each step grants exactly one
// request, seen as one tenant's Waiting count dropping by one.
func grantOrder(t *testing.T, s *fairshare.Scheduler, clk *clocktest.Fake, tenants []string) []string {
	t.Helper()
	waiting := func() (map[string]int, int) {
		m, sum := map[string]int{}, 0
		for _, tenant := range tenants {
			m[tenant] = s.Waiting(tenant)
			sum += m[tenant]
		}
		return m, sum
	}
	var got []string
	before, left := waiting()
	for left > 0 {
		clk.Advance(time.Second)
		after, now := waiting()
		if now != left-1 {
			t.Fatalf("one token granted %d requests, want 1 (after %v)", left-now, got)
		}
		for _, tenant := range tenants {
			if after[tenant] < before[tenant] {
				got = append(got, tenant)
			}
		}
		before, left = after, now
	}
	return got
}

// wait waits for wg, failing the test after testTimeout.
func wait(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for %s", testTimeout, what)
	}
}

// repeat returns seq repeated n times, then tail.
func repeat(seq []string, n int, tail ...string) []string {
	var out []string
	for range n {
		out = append(out, seq...)
	}
	return append(out, tail...)
}

func TestFloodingTenantDoesNotStarveOthers(t *testing.T) {
	s, clk := newScheduler(t, nil)
	wg := waiters(t, s, clk, []string{"flood", "quiet"}, map[string]int{"flood": 60, "quiet": 10})
	got := grantOrder(t, s, clk, []string{"flood", "quiet"})
	wait(t, wg, "every granted Wait to return")

	// While both wait they alternate; then flood has the budget to itself.
	// A FIFO would have served quiet only after flood's 60.
	want := repeat([]string{"flood", "quiet"}, 10, slices.Repeat([]string{"flood"}, 50)...)
	if !slices.Equal(got, want) {
		t.Fatalf("grant order:\n got %s\nwant %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}

func TestWeights(t *testing.T) {
	s, clk := newScheduler(t, map[string]int{"gold": 3})
	wg := waiters(t, s, clk, []string{"gold", "basic"}, map[string]int{"gold": 60, "basic": 60})
	got := grantOrder(t, s, clk, []string{"gold", "basic"})
	wait(t, wg, "every granted Wait to return")

	// Weight 3 to 1: three gold grants per basic one while both wait.
	want := repeat([]string{"gold", "gold", "gold", "basic"}, 20, slices.Repeat([]string{"basic"}, 40)...)
	if !slices.Equal(got, want) {
		t.Fatalf("grant order:\n got %s\nwant %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}

func TestCancelledWaiterLeavesQueue(t *testing.T) {
	s, clk := newScheduler(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Wait(ctx, "a") }()
	clk.Settle(t, 1, none, func() int { return s.Waiting("a") })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for a cancelled Wait to return", testTimeout)
	}
	if n := s.Waiting("a"); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
}

func TestQueueBound(t *testing.T) {
	clk := clocktest.New(epoch)
	s := fairshare.New(fairshare.Config{Rate: 1, Burst: 1, MaxWaiting: 2, Clock: clk})
	if err := s.Wait(context.Background(), "a"); err != nil {
		t.Fatalf("spending the burst: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wait(t, &wg, "the queued Waits to return after cancel")
	defer cancel()
	for range 2 {
		wg.Go(func() { _ = s.Wait(ctx, "a") })
	}
	clk.Settle(t, 2, none, func() int { return s.Waiting("a") })
	if err := s.Wait(ctx, "a"); !errors.Is(err, fairshare.ErrQueueFull) {
		t.Fatalf("Wait = %v, want ErrQueueFull", err)
	}
	// The bound is per tenant: b's request queues (and ends with its context).
	cancelled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	if err := s.Wait(cancelled, "b"); !errors.Is(err, context.Canceled) {
		t.Fatalf("another tenant's Wait = %v, want context.Canceled", err)
	}
}

func TestPauseHoldsGrants(t *testing.T) {
	clk := clocktest.New(epoch)
	s := fairshare.New(fairshare.Config{Rate: 1000, Burst: 5, Clock: clk})
	s.Pause(time.Minute)
	granted := make(chan error, 1)
	go func() { granted <- s.Wait(context.Background(), "a") }()
	clk.Settle(t, 1, none, func() int { return s.Waiting("a") })
	clk.Advance(time.Minute - time.Millisecond)
	if n := s.Waiting("a"); n != 1 {
		t.Fatalf("a request was granted %v before the pause ended", time.Millisecond)
	}
	clk.Advance(time.Second) // the pause ends, and tokens refill
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("Wait after the pause = %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the grant once the pause ended", testTimeout)
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

// TestShare: a tenant's part of a bound is by its weight among the tenants
// named and itself; one alone takes all of it.
func TestShare(t *testing.T) {
	for _, c := range []struct {
		weights map[string]int
		tenant  string
		want    int
	}{
		{map[string]int{"a": 1}, "a", 512},
		{nil, "a", 512},
		{map[string]int{"a": 1, "b": 0}, "a", 256},
		{map[string]int{"a": 3, "b": 1}, "a", 384},
		{map[string]int{"a": 3, "b": 1}, "b", 128},
		{map[string]int{"a": 1, "b": 1}, "c", 170},
	} {
		if got := fairshare.Share(512, c.weights, c.tenant); got != c.want {
			t.Errorf("Share(512, %v, %q) = %d, want %d", c.weights, c.tenant, got, c.want)
		}
	}
}

// TestSlots: a tenant takes half of empty Slots, a second busy one half
// of what the first leaves, a third a quarter; a slot given back is
// taken again. Admits with a bound of the whole n takes all of it.
func TestSlots(t *testing.T) {
	s := fairshare.NewSlots(64)
	takes := func(tenant string) (n int) {
		for s.Take(tenant) {
			n++
		}
		return n
	}
	for _, c := range []struct {
		tenant string
		want   int
	}{{"a", 32}, {"b", 16}, {"c", 8}} {
		if n := takes(c.tenant); n != c.want {
			t.Fatalf("tenant %s took %d, want %d", c.tenant, n, c.want)
		}
	}
	s.Give("c")
	if !s.Take("c") || s.Take("c") {
		t.Fatal("a slot given back: want it taken again, and no other")
	}
	if fairshare.Admits(0, 64, 64, 64) || !fairshare.Admits(63, 63, 64, 64) {
		t.Fatal("a tenant of the whole bound: want it taking all of it, and nothing past it")
	}
}

// TestHoldings: the fullest tenant is the one holding the most for its
// weight; one holding nothing is never named.
func TestHoldings(t *testing.T) {
	h := fairshare.NewHoldings(map[string]int{"a": 3, "z": 0})
	if got := h.Fullest(); got != "" {
		t.Fatalf("nothing held: fullest %q", got)
	}
	for _, step := range []struct {
		tenant  string
		n       int
		fullest string
	}{
		{"a", 1, "a"},
		{"b", 1, "b"}, // 1 of weight 1 over 1 of weight 3
		{"a", 1, "b"}, // 2 of weight 3 under 1 of weight 1
		{"a", 2, "a"},
		{"z", 2, "z"}, // weight 0 counts as 1
		{"z", -2, "a"},
		{"a", -4, "b"},
		{"b", -1, ""},
	} {
		h.Add(step.tenant, step.n)
		if got := h.Fullest(); got != step.fullest {
			t.Fatalf("after %s %+d: fullest %q, want %q", step.tenant, step.n, got, step.fullest)
		}
	}
}

// TestLRU: a key new to a full LRU forgets the least recently used key of
// the tenant holding the most, a lone tenant keeps all n, and a key added
// for another tenant moves to it, one key in all.
func TestLRU(t *testing.T) {
	l := fairshare.NewLRU[int, string](5, nil)
	for k := range 5 {
		l.Add("t1", k, "a")
	}
	if l.Len() != 5 {
		t.Fatalf("a lone tenant keeps %d of 5", l.Len())
	}
	l.Get(0) // 1 is now t1's least recently used
	l.Add("t2", 10, "b")
	if _, ok := l.Peek(1); ok || l.Len() != 5 {
		t.Fatalf("t2's first key did not push out t1's least recently used (len %d)", l.Len())
	}
	for k := 11; k < 20; k++ { // t2 floods
		l.Add("t2", k, "b")
	}
	if got := l.Keys()["t1"]; !slices.Equal(got, []int{4, 0}) {
		t.Fatalf("t2 flooding left t1 %v, want its 2 most recently used, [4 0]", got)
	}
	l.Add("t1", 19, "a") // t2's key 19, now t1's
	if v, _ := l.Get(19); v != "a" || l.Len() != 5 || len(l.Keys()["t1"]) != 3 {
		t.Fatalf("a key moved to t1: %q, len %d, t1's %v", v, l.Len(), l.Keys()["t1"])
	}
	l.Remove(19)
	if _, ok := l.Get(19); ok || l.Len() != 4 {
		t.Fatal("a removed key is still there")
	}
}
