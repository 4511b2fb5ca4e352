package whatsapp

import (
	"testing"
	"time"
)

func TestPacerSpacesAndBacksOff(t *testing.T) {
	p := newPacer(2) // one message every 500 ms
	t0 := time.Unix(1_800_000_000, 0)
	far := t0.Add(time.Hour)
	for i, want := range []time.Duration{0, 500 * time.Millisecond, time.Second} {
		if at, ok := p.reserve("u", t0, far); !ok || at != t0.Add(want) {
			t.Fatalf("slot %d at %v, want +%v", i, at.Sub(t0), want)
		}
	}
	if at, ok := p.reserve("other", t0, far); !ok || at != t0 {
		t.Fatalf("another user waited until +%v", at.Sub(t0))
	}
	if _, ok := p.reserve("u", t0, t0.Add(time.Second)); ok {
		t.Fatal("a slot past latest was booked")
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if got := p.hold("v", t0); got != want {
			t.Fatalf("hold %d: %v, want %v", i, got, want)
		}
	}
	if at, _ := p.reserve("v", t0, far); at != t0.Add(4*time.Second) {
		t.Fatalf("after a 4s hold the slot is +%v", at.Sub(t0))
	}
	p.passed("v")
	if got := p.hold("v", t0); got != time.Second {
		t.Fatalf("backoff not reset: %v", got)
	}
	for range 10 {
		p.hold("w", t0)
	}
	if got := p.hold("w", t0); got != holdMax {
		t.Fatalf("hold not capped: %v", got)
	}
}
