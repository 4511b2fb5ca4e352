package pace

import (
	"strconv"
	"testing"
	"time"
)

// TestSpacesAndBacksOff: a key's slots are spaced, another key's are not;
// nothing is booked past latest; backoffs double up to their cap and reset
// once a message passes; a hold keeps the key until it ends.
func TestSpacesAndBacksOff(t *testing.T) {
	p := New(2) // one message every 500 ms
	t0 := time.Unix(1_800_000_000, 0)
	far := t0.Add(time.Hour)
	for i, want := range []time.Duration{0, 500 * time.Millisecond, time.Second} {
		if at, ok := p.Reserve("u", t0, far); !ok || at != t0.Add(want) {
			t.Fatalf("slot %d at %v, want +%v", i, at.Sub(t0), want)
		}
	}
	if at, ok := p.Reserve("other", t0, far); !ok || at != t0 {
		t.Fatalf("another key waited until +%v", at.Sub(t0))
	}
	if _, ok := p.Reserve("u", t0, t0.Add(time.Second)); ok {
		t.Fatal("a slot past latest was booked")
	}
	at := t0 // each answer as the hold before it ends
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		got := p.Backoff("v", at)
		if got != want {
			t.Fatalf("backoff %d: %v, want %v", i, got, want)
		}
		at = at.Add(got)
	}
	if slot, _ := p.Reserve("v", t0, far); slot != at {
		t.Fatalf("after backoffs of 1, 2 and 4s the slot is +%v", slot.Sub(t0))
	}
	p.Passed("v")
	if got := p.Backoff("v", at); got != time.Second {
		t.Fatalf("backoff not reset: %v", got)
	}
	for at = t0; p.Backoff("w", at) < BackoffMax; at = at.Add(BackoffMax) {
	}
	if got := p.Backoff("w", at.Add(BackoffMax)); got != BackoffMax {
		t.Fatalf("backoff not capped: %v", got)
	}
	unpaced := New(0)
	unpaced.Hold("c", t0.Add(3*time.Second), t0)
	if at, _ := unpaced.Reserve("c", t0, far); at != t0.Add(3*time.Second) {
		t.Fatalf("a held key's slot is +%v", at.Sub(t0))
	}
	if at, _ := unpaced.Reserve("c", t0.Add(3*time.Second), far); at != t0.Add(3*time.Second) {
		t.Fatalf("an unspaced key waited until +%v", at.Sub(t0))
	}
}

// TestIdleKeysForgotten: keys idle past the longest backoff are forgotten
// as new ones come, so memory follows the keys in use.
func TestIdleKeysForgotten(t *testing.T) {
	p := New(1)
	t0 := time.Unix(1_800_000_000, 0)
	for i := range sweepEvery - 1 {
		p.Reserve("old"+strconv.Itoa(i), t0, t0)
	}
	later := t0.Add(BackoffMax + 2*time.Second)
	p.Reserve("new", later, later)
	if n := len(p.keys); n != 1 { // every call above has returned
		t.Fatalf("%d keys remembered, want 1", n)
	}
}

// TestAnswersDuringAHoldDoNotDoubleIt: rate-limit answers to calls that
// were in flight when a hold began (several of one tenant's sends at once)
// are one throttle, not answers in a row: the backoff doubles only for an
// answer once the hold ended. Before, each doubled it, so one throttle of
// seven calls at once held the key for 64 s.
func TestAnswersDuringAHoldDoNotDoubleIt(t *testing.T) {
	p := New(0)
	t0 := time.Unix(1_800_000_000, 0)
	if got := p.Backoff("k", t0); got != BackoffMin {
		t.Fatalf("first backoff %v", got)
	}
	for range 6 {
		if got := p.Backoff("k", t0.Add(time.Second/2)); got != time.Second/2 {
			t.Fatalf("an answer during the hold: %v, want the hold's remaining 500ms", got)
		}
	}
	if got := p.Backoff("k", t0.Add(time.Second)); got != 2*time.Second {
		t.Fatalf("an answer once the hold ended: %v, want it doubled to 2s", got)
	}
}
