package nexscope

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/redistest"
	"connector/platform"
	"connector/store"
)

// TestUnboundRoomIsDropped: a room a binding created is dropped once it is
// unbound (its tenant deleted drops its binding) with no member: the
// instance forgets it, its bid for its lease ends and the lease is
// released, so Redis hears nothing more of it; a later binding creates it
// again. One unbound while a member is in it stays until that member
// leaves; a configured room is never dropped.
func TestUnboundRoomIsDropped(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var mu sync.Mutex
	bidding := make(map[string]int) // lease -> bids running
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st := openStore(t, srv)
	in := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: "kept"}}}, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, lease string, run func(context.Context) error) error {
			mu.Lock()
			bidding[lease]++
			mu.Unlock()
			defer func() {
				mu.Lock()
				bidding[lease]--
				mu.Unlock()
			}()
			return store.RunExclusive(ctx, clock.System, st.Leases(), lease, "i0", clusterLeaseTTL, run)
		}
	})
	bids := func(room string) int {
		mu.Lock()
		defer mu.Unlock()
		return bidding[leasePrefix+room]
	}
	held := func(room string) bool {
		_, ok, err := st.Leases().Holder(ctx, leasePrefix+room)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	bind := func(bs ...platform.Binding) {
		t.Helper()
		if err := in.p.Bind(bs); err != nil {
			t.Fatal(err)
		}
	}
	lab := platform.Binding{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}

	waitFor(t, "i0 the home of the configured rooms", func() bool {
		return in.p.room("kept").home.Load() && in.p.room(DefaultRoom).home.Load()
	})
	bind(lab)
	waitFor(t, "i0 the home of lab", func() bool { r := in.p.room("lab"); return r != nil && r.home.Load() })
	bind()
	waitFor(t, "lab dropped, its bid ended and its lease released", func() bool {
		return in.p.room("lab") == nil && bids("lab") == 0 && !held("lab")
	})
	if in.p.room("kept") == nil || in.p.room(DefaultRoom) == nil || bids("kept") != 1 || bids(DefaultRoom) != 1 {
		t.Fatalf("a configured room was dropped (kept %v, default %v, bids %d/%d)", in.p.room("kept"), in.p.room(DefaultRoom), bids("kept"), bids(DefaultRoom))
	}

	// Bound again, lab is created afresh; unbound with alice in it, it stays
	// until she leaves.
	bind(lab)
	waitFor(t, "i0 the home of lab again", func() bool { r := in.p.room("lab"); return r != nil && r.home.Load() })
	alice := in.dialURL(t, "/ws/lab", "name=alice&token="+testToken+"&v=1", nil)
	alice.ExpectPresence("alice", "hermes")
	bind()
	alice.ExpectPresence("alice")
	if in.p.room("lab") == nil || bids("lab") != 1 {
		t.Fatal("lab dropped while alice is in it")
	}
	_ = alice.WS.CloseNow()
	waitFor(t, "lab dropped once alice left", func() bool {
		return in.p.room("lab") == nil && bids("lab") == 0 && !held("lab")
	})
}

// gatedLeases holds a release of the lease named gated, once gate is set,
// until gate closes, and counts the bids for it meanwhile.
type gatedLeases struct {
	store.Leases
	gated string
	gate  atomic.Pointer[chan struct{}]
	bids  atomic.Int32
}

func (l *gatedLeases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, bool, error) {
	if gate := l.gate.Load(); gate != nil && name == l.gated {
		select {
		case <-*gate:
		default:
			l.bids.Add(1)
		}
	}
	return l.Leases.Acquire(ctx, name, holder, ttl)
}

func (l *gatedLeases) Release(ctx context.Context, name string, lease store.Lease) error {
	if gate := l.gate.Load(); gate != nil && name == l.gated {
		<-*gate
	}
	return l.Leases.Release(ctx, name, lease)
}

// TestRoomBoundAgainWaitsForItsDroppedBid: a room bound again while the
// bid of its dropped self is still ending (releasing the lease) bids only
// once that release is done. The holder is the instance, so a bid meanwhile
// would take the lease as the same holder, and the release that follows
// would free it under the new room's home: another instance could then
// become a second home of the room.
func TestRoomBoundAgainWaitsForItsDroppedBid(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st := openStore(t, srv)
	leases := &gatedLeases{Leases: st.Leases(), gated: leasePrefix + "lab"}
	in := startInstanceWith(t, srv, Config{}, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, lease string, run func(context.Context) error) error {
			return store.RunExclusive(ctx, clock.System, leases, lease, "i0", clusterLeaseTTL, run)
		}
	})
	lab := []platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}
	if err := in.p.Bind(lab); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "i0 the home of lab", func() bool { r := in.p.room("lab"); return r != nil && r.home.Load() })
	gate := make(chan struct{})
	openGate := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(openGate) // before Run stops
	leases.gate.Store(&gate)
	if err := in.p.Bind(nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "lab's release under way", stacksHold("nexscope.(*gatedLeases).Release"))
	if err := in.p.Bind(lab); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "lab's new bid under way or waiting for the dropped one's", func() bool {
		return leases.bids.Load() > 0 || stacksHold("nexscope.afterBid")()
	})
	if n := leases.bids.Load(); n > 0 {
		t.Fatalf("lab bound again bid %d times while its dropped self was releasing the lease", n)
	}
	openGate()
	waitFor(t, "i0 the home of lab again, holding its lease", func() bool {
		r := in.p.room("lab")
		l, ok, err := st.Leases().Holder(ctx, leasePrefix+"lab")
		return err == nil && ok && l.Holder == "i0" && r != nil && r.home.Load()
	})
}

// openStore opens a store on srv, as the cluster tests' instances do,
// closed when the test ends.
func openStore(t testing.TB, srv *redistest.Server) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), RedisPrefix: "nexscope-cluster-test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestBindWhileRunStops: a Bind while Run is stopping, waiting for the
// rooms' bids to end, starts no bid: one started once the last bid ended
// while Run's shutdown waited for them reused its wait group under the
// wait ("sync: WaitGroup is reused before previous Wait has returned", or
// a data race under -race). The default room's lease release is held so
// that the shutdown surely waits: a room bound then must have no bid. Then
// Binds run, creating and dropping a room, as the last bid ends,
// unsynchronised with Run's end, and a hundred beyond it (with bids, the
// race detector saw the misuse on most runs).
func TestBindWhileRunStops(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	st := openStore(t, srv)
	leases := &gatedLeases{Leases: st.Leases(), gated: leasePrefix + DefaultRoom}
	in := startInstanceWith(t, srv, Config{}, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, lease string, run func(context.Context) error) error {
			return store.RunExclusive(ctx, clock.System, leases, lease, "i0", clusterLeaseTTL, run)
		}
	})
	waitFor(t, "i0 the home of the default room", func() bool { return in.p.room(DefaultRoom).home.Load() })
	gate := make(chan struct{})
	openGate := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(openGate) // before Run stops
	leases.gate.Store(&gate)

	stopped := make(chan struct{})
	go func() {
		in.stop()
		close(stopped)
	}()
	waitFor(t, "Run's shutdown waiting for the bids, the default room's held in its release", func() bool {
		return goroutineIn("nexscope.(*fleet).shutdown(", "sync.(*WaitGroup).Wait(")() && stacksHold("nexscope.(*gatedLeases).Release")()
	})
	if err := in.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "late", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	in.p.roomsMu.RLock()
	late := in.p.rooms["late"]
	bid := late != nil && late.unbid != nil
	in.p.roomsMu.RUnlock()
	if bid {
		t.Fatal("a room bound while Run's shutdown waited for the bids started a bid")
	}
	stopBinds, bindsDone := make(chan struct{}), make(chan error, 1)
	lab := []platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}
	var binds atomic.Int64
	go func() {
		for {
			select {
			case <-stopBinds:
				bindsDone <- nil
				return
			default:
			}
			if err := in.p.Bind(lab[:binds.Add(1)%2]); err != nil {
				bindsDone <- err
				return
			}
		}
	}()
	openGate()
	select {
	case <-stopped:
	case <-time.After(testTimeout):
		t.Fatal("Run did not return")
	}
	n := binds.Load() // Binds go on past Run's end, unsynchronised with it
	waitFor(t, "a hundred Binds more", func() bool { return binds.Load() >= n+100 })
	close(stopBinds)
	if err := <-bindsDone; err != nil {
		t.Fatal(err)
	}
	if in.p.room(DefaultRoom) == nil {
		t.Fatal("the default room was dropped")
	}
}

// goroutineIn reports whether one goroutine's stack holds every one of subs.
func goroutineIn(subs ...string) func() bool {
	return func() bool {
		buf := make([]byte, 1<<20)
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(g, s) }) {
				return true
			}
		}
		return false
	}
}

// TestRoomBoundAsItsLastMemberLeaves: a room a binding created, unbound
// while alice is in it, then bound again as she leaves, stays and is
// bound. Her leave dropped it between Bind's look-up of the rooms and its
// binding of this one, which bound the dropped room: the binding was lost
// until the registry changed again (the room unknown to members, the
// gateway's sends declined). Here Bind is held on the lock of a room it
// takes before lab (the rooms' order varies: tried until it does) while
// alice leaves.
func TestRoomBoundAsItsLastMemberLeaves(t *testing.T) {
	tr := startRelay(t, Config{Rooms: []Room{{Name: "kept"}}})
	lab := []platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}
	bind := func(bs []platform.Binding) {
		t.Helper()
		if err := tr.p.Bind(bs); err != nil {
			t.Fatal(err)
		}
	}
	members := func() int {
		tr.p.mu.Lock()
		defer tr.p.mu.Unlock()
		return len(tr.p.members)
	}
	for try := 0; ; try++ {
		if try == 30 {
			t.Fatal("Bind never took kept before lab")
		}
		bind(lab)
		alice := tr.join(t, "lab", "alice")
		bind(nil)
		alice.ExpectPresence("alice")
		r, kept := tr.p.room("lab"), tr.p.room("kept")
		kept.mu.Lock()
		unlockKept := sync.OnceFunc(kept.mu.Unlock)
		t.Cleanup(unlockKept) // before Run stops
		done := make(chan error, 1)
		go func() { done <- tr.p.Bind(lab) }()
		waitFor(t, "Bind held on a room's lock", goroutineIn("nexscope.(*Platform).Bind(", "sync.(*Mutex).Lock("))
		if r.tenant() == "" {
			_ = alice.WS.CloseNow()
			waitFor(t, "alice's leave over", func() bool { return members() == 0 })
		}
		unlockKept()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if members() == 0 { // alice left as Bind was held before lab
			if r := tr.p.room("lab"); r == nil || r.tenant() != "t1" {
				t.Fatalf("lab bound as alice left is %v", r)
			}
			return
		}
		_ = alice.WS.CloseNow()
		waitFor(t, "alice's leave over", func() bool { return members() == 0 })
	}
}

// TestRemoteJoinRacingTheDropIsUnknownRoom: a member joining through
// another instance a room its home drops meanwhile is refused as one
// joining at the home is: unknown_room (4017), not 1013 (no home), which
// has it reconnect. The home is held in its decision (its lock of the
// members) until the room is dropped there.
func TestRemoteJoinRacingTheDropIsUnknownRoom(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	i0 := startInstance(t, srv, Config{}, "i0", clusterLeaseTTL)
	i1 := startInstance(t, srv, Config{}, "i1", clusterLeaseTTL)
	lab := []platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}
	if err := i0.p.Bind(lab); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "i0 the home of lab", func() bool { r := i0.p.room("lab"); return r != nil && r.home.Load() })
	if err := i1.p.Bind(lab); err != nil {
		t.Fatal(err)
	}
	i0.p.mu.Lock()
	unlock := sync.OnceFunc(i0.p.mu.Unlock)
	t.Cleanup(unlock) // before Run stops
	bob := i1.dialURL(t, "/ws/lab", "name=bob&token="+testToken+"&v=1", nil)
	waitFor(t, "i0 deciding bob's join", goroutineIn("nexscope.(*fleet).joinHere(", "nexscope.(*Platform).track("))
	if err := i0.p.Bind(nil); err != nil {
		t.Fatal(err)
	}
	if i0.p.room("lab") != nil {
		t.Fatal("lab not dropped at i0")
	}
	unlock()
	expectError(bob, CodeUnknownRoom)
	expectClose(bob, CloseUnknownRoom)
}

// droppedAtHome starts two instances with lab bound to t1, i1 bidding for
// no lease until gate is closed, and has i0, lab's home, drop lab (its
// Bind runs first).
func droppedAtHome(t *testing.T) (i0, i1 *instance, gate chan struct{}) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	i0 = startInstance(t, srv, Config{}, "i0", clusterLeaseTTL)
	gate = make(chan struct{})
	i1 = startInstanceWith(t, srv, Config{}, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		bid := d.Exclusive
		d.Exclusive = func(ctx context.Context, lease string, run func(context.Context) error) error {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil
			}
			return bid(ctx, lease, run)
		}
	})
	lab := []platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}
	for _, in := range []*instance{i0, i1} {
		if err := in.p.Bind(lab); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "i0 the home of lab", func() bool { r := i0.p.room("lab"); return r != nil && r.homeHeld() })
	if err := i0.p.Bind(nil); err != nil {
		t.Fatal(err)
	}
	return i0, i1, gate
}

// TestForwardToAHomeThatDroppedTheRoomGivesUp: a gateway's send through
// an instance that still has a room bound, forwarded to the home as that
// home drops the room, is answered by no one: it fails unavailable once
// the forwarding instance takes the room's lease, or drops the room too,
// not at the end of the gateway's deadline.
func TestForwardToAHomeThatDroppedTheRoomGivesUp(t *testing.T) {
	for _, then := range []string{"homed here", "dropped here"} {
		t.Run(then, func(t *testing.T) {
			_, i1, gate := droppedAtHome(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*testTimeout)
			defer cancel()
			done := make(chan contract.Result, 1)
			go func() {
				done <- i1.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: "lab", Content: "hi"})
			}()
			waitFor(t, "i1 forwarding the send", goroutineIn("nexscope.(*fleet).forwardExec(", "cluster.(*Node).CallAgain("))
			if then == "homed here" {
				close(gate)
			} else if err := i1.p.Bind(nil); err != nil {
				t.Fatal(err)
			}
			select {
			case res := <-done:
				if res.Success || res.Code != contract.CodeUnavailable {
					t.Fatalf("send forwarded to the home that dropped lab: %+v, want unavailable", res)
				}
			case <-time.After(testTimeout):
				t.Fatalf("send forwarded to the home that dropped lab unanswered %v after i1 %s", testTimeout, then)
			}
		})
	}
}

// TestSendHomedHereAsItLooksRunsHere: a gateway's send through an
// instance that becomes the room's home between forwarded's look at
// homeHeld and its read of the room's away runs here. It failed
// unavailable at once: forwardExec found away ended and gave up, though
// this instance was the home. Here the look is made to see no home (home
// cleared under r.mu, as becomeHome sets it), the send held on r.mu, and
// home set again as becomeHome leaves it.
func TestSendHomedHereAsItLooksRunsHere(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{in}, DefaultRoom)
	alice := in.joinWith(t, "alice", "alice", "hermes")
	r := in.p.room(DefaultRoom)
	r.mu.Lock()
	r.home.Store(false)
	done := make(chan contract.Result, 1)
	go func() {
		done <- in.p.Execute(context.Background(), "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	}()
	waitFor(t, "the send held on the room's lock after its look at homeHeld", goroutineIn(".forwarded.func1(", "sync.(*Mutex).Lock("))
	r.home.Store(true)
	r.mu.Unlock()
	select {
	case res := <-done:
		if !res.Success {
			t.Fatalf("send through the instance homed as it looked: %+v, want it run here", res)
		}
	case <-time.After(testTimeout):
		t.Fatalf("send through the instance homed as it looked unanswered after %v", testTimeout)
	}
	if m := alice.Expect("msg"); m["text"] != "hi" {
		t.Fatalf("alice got %v, want the send", m)
	}
}

// TestJoinThroughAnEdgeHomedMeanwhileJoinsHere: a client joining through
// an instance that still has a room bound, as the room's home drops it,
// joins at that instance once it takes the room's lease: a member of the
// room there like any other, not one of its own remote members whose
// every frame crossed Redis or a stream to itself and back.
func TestJoinThroughAnEdgeHomedMeanwhileJoinsHere(t *testing.T) {
	_, i1, gate := droppedAtHome(t)
	bob := i1.dialURL(t, "/ws/lab", "name=bob&token="+testToken+"&v=1", nil)
	waitFor(t, "i1 joining bob at lab's home", goroutineIn("nexscope.(*fleet).joinRemote("))
	close(gate)
	bob.ExpectPresence("bob", "hermes")
	r := i1.p.room("lab")
	r.mu.Lock()
	m := r.members["bob"]
	r.mu.Unlock()
	if m == nil || m.link != nil || m.remote != nil {
		t.Fatalf("bob at i1, the home of lab: member %v, through a link %v, remote %v; want a member with its socket here",
			m != nil, m != nil && m.link != nil, m != nil && m.remote != nil)
	}
	bob.SendJSON(msg("m1", "bob", []string{"hermes"}, "hi"))
	if a := bob.Expect("ack"); a["msgId"] != "m1" {
		t.Fatalf("bob got %v, want the ack of m1", a)
	}
}

// TestJoinThroughAnEdgeThatDropsTheRoomIsUnknownRoom: a client joining
// through an instance that drops the room meanwhile (no home answering
// yet) is refused as one joining there after the drop: unknown_room
// (4017), not 1013 after the join's timeout.
func TestJoinThroughAnEdgeThatDropsTheRoomIsUnknownRoom(t *testing.T) {
	_, i1, _ := droppedAtHome(t)
	bob := i1.dialURL(t, "/ws/lab", "name=bob&token="+testToken+"&v=1", nil)
	waitFor(t, "i1 joining bob at lab's home", goroutineIn("nexscope.(*fleet).joinRemote("))
	if err := i1.p.Bind(nil); err != nil {
		t.Fatal(err)
	}
	expectError(bob, CodeUnknownRoom)
	expectClose(bob, CloseUnknownRoom)
}
