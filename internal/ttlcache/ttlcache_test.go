package ttlcache

import (
	"testing"
	"time"

	"connector/internal/clock/clocktest"
)

// TestExpiryAndBound: an entry lives its TTL (or its own expiry) on the
// cache's clock, and past the size the least recently used goes first.
func TestExpiryAndBound(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := New[string, int](2, time.Minute, clk)
	c.Add("a", 1)
	c.AddUntil("b", 2, clk.Now().Add(time.Hour))
	if v, ok := c.Get("a"); !ok || v != 1 {
		t.Fatalf("a: %v %v", v, ok)
	}
	clk.Advance(time.Minute)
	if c.Contains("a") || !c.Contains("b") {
		t.Fatal("a outlived its TTL, or b did not live its own expiry")
	}
	c.Add("c", 3)
	c.Add("d", 4) // b is the least recently used
	if c.Contains("b") || !c.Contains("c") || !c.Contains("d") {
		t.Fatal("the bound did not drop the least recently used")
	}
	c.AddUntil("d", 5, clk.Now()) // an expiry not after now removes
	if c.Contains("d") {
		t.Fatal("an entry added until now is still there")
	}
	c.Remove("c")
	if c.Contains("c") {
		t.Fatal("removed, still there")
	}
}

// TestAddIfAbsent: it sets a key only when no live value holds it.
func TestAddIfAbsent(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := New[string, struct{}](8, time.Minute, clk)
	if !c.AddIfAbsent("k", struct{}{}, clk.Now().Add(time.Second)) {
		t.Fatal("a free key was not taken")
	}
	if c.AddIfAbsent("k", struct{}{}, clk.Now().Add(time.Hour)) {
		t.Fatal("a held key was taken again")
	}
	clk.Advance(time.Second)
	if !c.AddIfAbsent("k", struct{}{}, clk.Now().Add(time.Second)) {
		t.Fatal("an expired key was not taken")
	}
	if !c.AddIfAbsent("free", struct{}{}, clk.Now()) || c.Contains("free") {
		t.Fatal("asking with an expiry of now must report free and hold nothing")
	}
}

// TestRemoveUntil: an entry expiring at or before the given expiry is
// removed, one expiring after it stays.
func TestRemoveUntil(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := New[string, int](4, time.Minute, clk)
	c.AddUntil("a", 1, clk.Now().Add(time.Minute))
	c.RemoveUntil("a", clk.Now().Add(time.Minute-time.Nanosecond))
	if !c.Contains("a") {
		t.Fatal("an entry expiring after the given expiry was removed")
	}
	c.RemoveUntil("a", clk.Now().Add(time.Minute))
	if c.Contains("a") {
		t.Fatal("an entry expiring at the given expiry stayed")
	}
	c.RemoveUntil("absent", clk.Now())
}

// TestAddUnless: it sets a key unless a live value keep keeps holds it.
func TestAddUnless(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := New[string, int](8, time.Minute, clk)
	keepOver := func(n int) func(int) bool { return func(v int) bool { return v > n } }
	c.AddUntil("k", 5, clk.Now().Add(time.Second))
	if c.AddUnless("k", 3, clk.Now().Add(time.Hour), keepOver(3)) {
		t.Fatal("a value keep keeps was replaced")
	}
	if !c.AddUnless("k", 7, clk.Now().Add(time.Second), keepOver(7)) {
		t.Fatal("a value keep does not keep was not replaced")
	}
	clk.Advance(time.Second)
	if !c.AddUnless("k", 1, clk.Now().Add(time.Second), keepOver(1)) {
		t.Fatal("an expired value was kept")
	}
	if v, _ := c.Get("k"); v != 1 {
		t.Fatalf("k = %d, want 1", v)
	}
}
