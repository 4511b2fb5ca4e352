package relay

import (
	"context"
	"errors"
	"testing"
)

// TestAdmissionNewestWin walks one gateway id with a limit of 2 through a
// burst: each newcomer beyond the limit evicts the oldest connection not
// already leaving, or else displaces the oldest waiting newcomer, and slots
// go to the waiting ones in arrival order, only as evicted ones release
// theirs.
func TestAdmissionNewestWin(t *testing.T) {
	a := newAdmission(2)
	arrive := func(name string) *slot {
		t.Helper()
		s, leaving := a.arrive()
		if leaving != nil {
			t.Fatalf("%s: an unattached slot has no connection to close", name)
		}
		return s
	}
	admitted := func(s *slot) bool {
		t.Helper()
		select {
		case <-s.ready:
			return s.admitted
		default:
			return false
		}
	}
	held := func(want int) {
		t.Helper()
		if len(a.held) != want {
			t.Fatalf("%d slots held, want %d", len(a.held), want)
		}
	}

	first, second := arrive("first"), arrive("second")
	if !admitted(first) || !admitted(second) {
		t.Fatal("the first two are not admitted at once")
	}
	third := arrive("third")
	if admitted(third) || !first.evicted || second.evicted {
		t.Fatalf("third: admitted %v, first evicted %v, second evicted %v; want it waiting for the first to leave",
			admitted(third), first.evicted, second.evicted)
	}
	fourth := arrive("fourth")
	if !second.evicted {
		t.Fatal("fourth did not evict second")
	}
	fifth := arrive("fifth")
	if _, err := a.wait(context.Background(), third); !errors.Is(err, errReplaced) {
		t.Fatalf("third waiting when fifth arrived: %v, want errReplaced", err)
	}
	held(2) // first and second are still closing: nobody else gets in
	if admitted(fourth) || admitted(fifth) {
		t.Fatal("a newcomer was admitted before an evicted connection released its slot")
	}
	a.release(first)
	if !admitted(fourth) || admitted(fifth) {
		t.Fatal("first's slot did not go to fourth, the oldest waiting")
	}
	a.release(second)
	if !admitted(fifth) {
		t.Fatal("second's slot did not go to fifth")
	}
	held(2)

	// A newcomer that gives up while waiting leaves no trace.
	ctx, cancel := context.WithCancel(context.Background())
	sixth := arrive("sixth")
	if !fourth.evicted {
		t.Fatal("sixth did not evict fourth")
	}
	cancel()
	if _, err := a.wait(ctx, sixth); !errors.Is(err, context.Canceled) {
		t.Fatalf("sixth gave up: %v, want context.Canceled", err)
	}
	a.release(fourth)
	held(1)
	if len(a.waiting) != 0 {
		t.Fatalf("%d newcomers still waiting", len(a.waiting))
	}
	if s := arrive("seventh"); !admitted(s) {
		t.Fatal("seventh is not admitted to the free slot")
	}
}
