package telegram

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestLimiterChatWindow(t *testing.T) {
	l := newLimiter(1, -1)
	far := t0.Add(time.Hour)
	for i, want := range []time.Duration{0, time.Second, 2 * time.Second} {
		at, ok := l.reserve(42, true, t0, far)
		if !ok || at != t0.Add(want) {
			t.Errorf("reservation %d at %v (%v), want t0+%v", i, at.Sub(t0), ok, want)
		}
	}
	// Another chat is independent.
	if at, _ := l.reserve(43, true, t0, far); at != t0 {
		t.Errorf("other chat at %v", at.Sub(t0))
	}
}

func TestLimiterGroupWindow(t *testing.T) {
	l := newLimiter(-1, 20)
	far := t0.Add(time.Hour)
	for i := range 20 {
		now := t0.Add(time.Duration(i) * time.Second)
		if at, ok := l.reserve(-100, true, now, far); !ok || at != now {
			t.Fatalf("message %d delayed to %v", i, at.Sub(t0))
		}
	}
	// The 21st waits until the first leaves the 60 s window.
	if at, _ := l.reserve(-100, true, t0.Add(25*time.Second), far); at != t0.Add(60*time.Second) {
		t.Errorf("21st at t0+%v, want t0+60s", at.Sub(t0))
	}
	// Edits (countGroup false) and private chats are not group-limited.
	if at, _ := l.reserve(-100, false, t0.Add(26*time.Second), far); at != t0.Add(60*time.Second) {
		t.Errorf("edit at t0+%v: it still queues behind the chat's last slot", at.Sub(t0))
	}
	for i := range 30 {
		if at, _ := l.reserve(7, true, t0, far); at != t0 {
			t.Fatalf("private message %d delayed", i)
		}
	}
}

func TestLimiterDeadlineBooksNothing(t *testing.T) {
	l := newLimiter(1, -1)
	l.reserve(42, true, t0, t0)
	at, ok := l.reserve(42, true, t0, t0.Add(500*time.Millisecond))
	if ok || at != t0.Add(time.Second) {
		t.Fatalf("got %v %v, want a refusal for t0+1s", at.Sub(t0), ok)
	}
	// The refused slot was not booked.
	if at, ok := l.reserve(42, true, t0, t0.Add(time.Hour)); !ok || at != t0.Add(time.Second) {
		t.Errorf("next slot t0+%v, want t0+1s", at.Sub(t0))
	}
}

func TestLimiterFloodWait(t *testing.T) {
	l := newLimiter(-1, -1)
	l.block(42, t0.Add(7*time.Second), t0)
	if got := l.blockedUntil(42); got != t0.Add(7*time.Second) {
		t.Errorf("blocked until %v", got)
	}
	if at, _ := l.reserve(42, true, t0, t0.Add(time.Hour)); at != t0.Add(7*time.Second) {
		t.Errorf("slot t0+%v, want after the flood wait", at.Sub(t0))
	}
	// A shorter block does not shorten a longer one.
	l.block(42, t0.Add(time.Second), t0)
	if got := l.blockedUntil(42); got != t0.Add(7*time.Second) {
		t.Errorf("blocked until t0+%v", got.Sub(t0))
	}
}

func TestLimiterForgetsIdleChats(t *testing.T) {
	l := newLimiter(1, 20)
	for i := range sweepEvery - 1 {
		l.reserve(int64(-i-1), true, t0, t0.Add(time.Hour))
	}
	later := t0.Add(2 * time.Minute)
	l.reserve(1, true, later, later) // the sweep runs on this new chat
	if n := len(l.chats); n != 1 {
		t.Errorf("%d chats remembered after a sweep, want only the active one", n)
	}
}
