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
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if got := p.Backoff("v", t0); got != want {
			t.Fatalf("backoff %d: %v, want %v", i, got, want)
		}
	}
	if at, _ := p.Reserve("v", t0, far); at != t0.Add(4*time.Second) {
		t.Fatalf("after a 4s backoff the slot is +%v", at.Sub(t0))
	}
	p.Passed("v")
	if got := p.Backoff("v", t0); got != time.Second {
		t.Fatalf("backoff not reset: %v", got)
	}
	for range 10 {
		p.Backoff("w", t0)
	}
	if got := p.Backoff("w", t0); got != BackoffMax {
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
