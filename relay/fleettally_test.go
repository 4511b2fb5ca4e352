package relay

import "testing"

// A tally tells links apart by everything a serve announces, and counters
// that differ on two links do not cancel out in its sum.
func TestTallyDigestsEachLinksState(t *testing.T) {
	a := seatHash("conn-a", 1, "discord", false)
	b := seatHash("conn-b", 1, "discord", false)
	sum := func(links ...[2]uint64) tally {
		var t tally
		for _, l := range links {
			t.add(l[0], l[1])
		}
		return t
	}
	base := sum([2]uint64{a, 5}, [2]uint64{b, 3})
	if got := sum([2]uint64{b, 3}, [2]uint64{a, 5}); got != base {
		t.Fatalf("the order of the links changed the tally: %+v, want %+v", got, base)
	}
	if got := tallyOf(base.fields()); got != base {
		t.Fatalf("tally read back as %+v, want %+v", got, base)
	}
	differ := map[string]tally{
		"a frame moved from one link to another": sum([2]uint64{a, 4}, [2]uint64{b, 4}),
		"a link missing":                         sum([2]uint64{a, 5}),
		"one counter lower":                      sum([2]uint64{a, 5}, [2]uint64{b, 2}),
		"another generation": sum([2]uint64{a, 5},
			[2]uint64{seatHash("conn-b", 2, "discord", false), 3}),
		"other platforms": sum([2]uint64{a, 5},
			[2]uint64{seatHash("conn-b", 1, "discord,telegram", false), 3}),
		"gone idle": sum([2]uint64{a, 5},
			[2]uint64{seatHash("conn-b", 1, "discord", true), 3}),
		"a byte moved between fields": sum([2]uint64{a, 5},
			[2]uint64{seatHash("conn-", 1, "bdiscord", false), 3}),
	}
	for what, got := range differ {
		if got == base {
			t.Errorf("%s: the tally did not change", what)
		}
	}
}
