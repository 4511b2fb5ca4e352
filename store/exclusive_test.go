package store

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
)

// exclusiveTTL is the lease TTL of the RunExclusive tests; exclusiveStep,
// the fake clock's step, is well under the third of it between renewals.
const (
	exclusiveTTL  = 3 * time.Second
	exclusiveStep = 200 * time.Millisecond
)

// exclusiveRig runs holders through RunExclusive on one memory store and
// one fake clock. It starts in the future, so that a judgement made on the
// real clock instead (time.Now) never finds a lease expired.
type exclusiveRig struct {
	t        *testing.T
	clk      *clocktest.Fake
	st       *Memory
	leases   Leases
	jobs     int          // RunExclusive calls started
	finished atomic.Int64 // RunExclusive calls returned
	started  chan string  // a holder's run started
	stopped  chan string  // a holder's run saw its context end

	mu   sync.Mutex
	runs map[*context.Context]bool // the contexts of the runs under way
}

func newExclusiveRig(t *testing.T) *exclusiveRig {
	clk := clocktest.New(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
	st := NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	return &exclusiveRig{t: t, clk: clk, st: st, leases: st.Leases(),
		started: make(chan string, 16), stopped: make(chan string, 16), runs: map[*context.Context]bool{}}
}

// start runs RunExclusive for holder on leases until ctx ends; its run
// reports to r.started and r.stopped and waits for its context. The
// returned channel is closed once RunExclusive returned.
func (r *exclusiveRig) start(ctx context.Context, leases Leases, holder string) <-chan struct{} {
	r.jobs++
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		defer r.finished.Add(1)
		err := RunExclusive(ctx, r.clk, leases, "job", holder, exclusiveTTL, func(c context.Context) error {
			r.mu.Lock()
			r.runs[&c] = true
			r.mu.Unlock()
			r.started <- holder
			<-c.Done()
			r.stopped <- holder
			r.mu.Lock()
			delete(r.runs, &c)
			r.mu.Unlock()
			return nil
		})
		if err != nil {
			r.t.Errorf("RunExclusive(%s) = %v", holder, err)
		}
	}()
	return returned
}

// settle waits until every holder sleeps on the fake clock (waiting for
// the lease), runs with its lease (its run waits for its context, which
// only the tenure's timers end, inside Advance) or has returned. A holder
// that lost the lease sleeps again only once its run returned. It cannot
// tell a holder whose context just ended (still counted asleep) from one
// that returned: wait for start's channel instead.
func (r *exclusiveRig) settle() {
	r.t.Helper()
	r.clk.Settle(r.t, r.jobs, func() int { return int(r.finished.Load()) }, r.running)
}

// running counts the runs under way whose context has not ended.
func (r *exclusiveRig) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for c := range r.runs {
		if (*c).Err() == nil {
			n++
		}
	}
	return n
}

// advance moves the fake clock d forward in exclusiveSteps, letting the
// holders act after each.
func (r *exclusiveRig) advance(d time.Duration) {
	r.t.Helper()
	r.settle()
	for ; d > 0; d -= exclusiveStep {
		r.clk.Advance(min(d, exclusiveStep))
		r.settle()
	}
}

// holder is the lease held now (Holder "" for none).
func (r *exclusiveRig) holder() Lease {
	r.t.Helper()
	l, _, err := r.leases.Holder(context.Background(), "job")
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

// quiet fails if a run started or stopped since the last look.
func (r *exclusiveRig) quiet(when string) {
	r.t.Helper()
	select {
	case h := <-r.started:
		r.t.Fatalf("%s: %s's run started", when, h)
	case h := <-r.stopped:
		r.t.Fatalf("%s: %s's run stopped", when, h)
	default:
	}
}

// Two holders compete for one lease: while the first renews it, through
// many TTLs, the second never runs; once the first stops, the second takes
// over within a RenewEvery of the TTL.
func TestRunExclusiveOneHolderAtATime(t *testing.T) {
	r := newExclusiveRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctxA, stopA := context.WithCancel(ctx)
	returnedA := r.start(ctxA, r.leases, "a")
	r.settle()
	if h := waitString(t, r.started, "the first holder to start"); h != "a" {
		t.Fatalf("first holder %q, want a", h)
	}
	r.start(ctx, r.leases, "b")
	r.advance(5 * exclusiveTTL)
	if h := r.holder().Holder; h != "a" {
		t.Fatalf("after 5 TTLs of renewals the lease is held by %q, want a", h)
	}
	r.quiet("after 5 TTLs of renewals")

	stopA()
	select {
	case <-returnedA:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for a to return once stopped")
	}
	if h := waitString(t, r.stopped, "a's run to stop"); h != "a" {
		t.Fatalf("stopped: %q, want a", h)
	}
	if l := r.holder(); l.Holder != "" {
		t.Fatalf("a returned, but the lease is held by %q", l.Holder)
	}
	r.advance(exclusiveTTL / RenewEvery) // b's next bid
	if h := r.holder().Holder; h != "b" {
		t.Fatalf("a RenewEvery of a TTL after a released the lease it is held by %q, want b", h)
	}
	if h := waitString(t, r.started, "b to take over"); h != "b" {
		t.Fatalf("took over: %q, want b", h)
	}
}

// A holder that dies holding the lease (no renewal, no release) keeps the
// other out until the lease expires on the clock, and no longer: the other
// bids at the expiry it was told.
func TestRunExclusiveTakesOverFromADeadHolder(t *testing.T) {
	r := newExclusiveRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dead, ok, err := r.leases.Acquire(ctx, "job", "a", exclusiveTTL)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v %v", ok, err)
	}
	r.start(ctx, r.leases, "b")
	r.advance(dead.Expires.Sub(r.clk.Now()) - exclusiveStep)
	if h := r.holder().Holder; h != "a" {
		t.Fatalf("before the dead holder's lease expired it is held by %q, want a", h)
	}
	r.quiet("before the dead holder's lease expired")
	r.advance(exclusiveStep)
	if h := r.holder().Holder; h != "b" {
		t.Fatalf("at the dead holder's lease's expiry it is held by %q, want b (its bid waits for the known expiry)", h)
	}
	if h := waitString(t, r.started, "b to take over"); h != "b" {
		t.Fatalf("took over: %q, want b", h)
	}
}

// errPartitioned is what a holder cut off from the store gets.
var errPartitioned = errors.New("store unreachable")

// partitionedLeases fails every call once cut, as a store an instance can
// no longer reach.
type partitionedLeases struct {
	Leases
	cut atomic.Bool
}

func (p *partitionedLeases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (Lease, bool, error) {
	if p.cut.Load() {
		return Lease{}, false, errPartitioned
	}
	return p.Leases.Acquire(ctx, name, holder, ttl)
}

func (p *partitionedLeases) Renew(ctx context.Context, name string, l Lease, ttl time.Duration) (Lease, error) {
	if p.cut.Load() {
		return Lease{}, errPartitioned
	}
	return p.Leases.Renew(ctx, name, l, ttl)
}

func (p *partitionedLeases) Release(ctx context.Context, name string, l Lease) error {
	if p.cut.Load() {
		return errPartitioned
	}
	return p.Leases.Release(ctx, name, l)
}

// A holder whose renewals fail (cut off from the store) stops before its
// lease expires in the store (its own view ends FenceMargin of the TTL
// earlier: fencing), and the other holder takes over at the expiry, not
// before.
func TestRunExclusiveHolderThatCannotRenewStops(t *testing.T) {
	r := newExclusiveRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cutOff := &partitionedLeases{Leases: r.leases}
	r.start(ctx, cutOff, "a")
	r.settle()
	if h := waitString(t, r.started, "the first holder to start"); h != "a" {
		t.Fatalf("first holder %q, want a", h)
	}
	r.start(ctx, r.leases, "b")
	r.advance(2 * exclusiveTTL)
	cutOff.cut.Store(true)
	last := r.holder()
	if last.Holder != "a" {
		t.Fatalf("after 2 TTLs of renewals the lease is held by %q, want a", last.Holder)
	}
	r.advance(last.Expires.Sub(r.clk.Now()) - exclusiveStep)
	if h := r.holder().Holder; h != "a" {
		t.Fatalf("before a's last renewal expired the lease is held by %q, want a", h)
	}
	// a's run ended (inside the Advance that reached the end of its view)
	// before a slept again, so it has reported.
	select {
	case h := <-r.stopped:
		if h != "a" {
			t.Fatalf("stopped: %q, want a", h)
		}
	default:
		t.Fatal("a step before a's lease expires unrenewed in the store, a's run still runs")
	}
	r.quiet("while a's lease has not expired in the store")

	r.advance(exclusiveStep)
	if h := r.holder().Holder; h != "b" {
		t.Fatalf("at a's unrenewed lease's expiry it is held by %q, want b", h)
	}
	if h := waitString(t, r.started, "b to take over"); h != "b" {
		t.Fatalf("took over: %q, want b", h)
	}
}

// A run that fails on its own ends RunExclusive with its error, and the
// lease is released at once rather than left to expire.
func TestRunExclusiveReturnsRunsError(t *testing.T) {
	r := newExclusiveRig(t)
	failed := errors.New("gateway session failed")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan error, 1)
	go func() {
		returned <- RunExclusive(ctx, r.clk, r.leases, "job", "a", exclusiveTTL, func(context.Context) error { return failed })
	}()
	select {
	case err := <-returned:
		if !errors.Is(err, failed) {
			t.Fatalf("RunExclusive = %v, want run's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for RunExclusive to return run's error")
	}
	if l := r.holder(); l.Holder != "" {
		t.Fatalf("after run failed the lease is held by %q", l.Holder)
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

// stallingRelease is Leases whose Release answers nothing until its
// context ends, as a store that stopped answering.
type stallingRelease struct{ Leases }

func (stallingRelease) Release(ctx context.Context, _ string, _ Lease) error {
	<-ctx.Done()
	return ctx.Err()
}

// RunExclusive's release of the lease, after its run ended, is bounded
// (by the TTL, when the lease expires anyway): a store that stopped
// answering does not keep it from returning.
func TestRunExclusiveReleaseIsBounded(t *testing.T) {
	r := newExclusiveRig(t)
	boom := errors.New("run failed")
	returned := make(chan error, 1)
	go func() {
		returned <- RunExclusive(t.Context(), r.clk, stallingRelease{r.leases}, "job", "a", 100*time.Millisecond,
			func(context.Context) error { return boom })
	}()
	select {
	case err := <-returned:
		if !errors.Is(err, boom) {
			t.Fatalf("RunExclusive = %v, want the run's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunExclusive still releasing 10s after its run failed, on a store that does not answer")
	}
}

// aheadClock is a fake clock whose Now is ahead of its timers by ahead, as
// a process's clock is when it wakes from a pause before its timers fire.
type aheadClock struct {
	*clocktest.Fake
	ahead time.Duration
}

func (c *aheadClock) Now() time.Time { return c.Fake.Now().Add(c.ahead) }

// Held tells a run whether it still holds its lease by the tenure's own
// view, at once: a holder whose clock went past that view (it woke from a
// pause) reads false before the tenure's timer ends the run's context. A
// context RunExclusive did not give holds until it ends.
func TestHeldFollowsTheTenure(t *testing.T) {
	r := newExclusiveRig(t)
	clk := &aheadClock{Fake: r.clk}
	var before, after bool
	done := errors.New("checked")
	err := RunExclusive(context.Background(), clk, r.leases, "job", "a", exclusiveTTL, func(ctx context.Context) error {
		before = Held(ctx)
		clk.ahead = exclusiveTTL
		after = Held(ctx)
		if ctx.Err() != nil {
			t.Error("the run's context ended at once; want it ended by the tenure's timer only")
		}
		return done
	})
	if !errors.Is(err, done) || !before || after {
		t.Fatalf("RunExclusive = %v; Held before the pause %v, after %v; want true, false", err, before, after)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if !Held(ctx) {
		t.Fatal("Held(a context RunExclusive did not give) = false before it ended")
	}
	cancel()
	if Held(ctx) {
		t.Fatal("Held(an ended context) = true")
	}
}
