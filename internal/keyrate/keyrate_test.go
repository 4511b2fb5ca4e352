package keyrate_test

import (
	"strconv"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/keyrate"
)

// TestBurstThenOnePerEvery: a key gets Burst requests at once, then one
// per Every, with the wait until the next one reported; another key has
// its own allowance.
func TestBurstThenOnePerEvery(t *testing.T) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	l := keyrate.New(keyrate.Config{Burst: 3, Every: 10 * time.Second, MaxKeys: 10, Clock: clk})
	for i := range 3 {
		if ok, _ := l.Allow("u1"); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := l.Allow("u1")
	if ok || wait != 10*time.Second {
		t.Fatalf("4th request: ok %v, retry after %v; want refused, 10s", ok, wait)
	}
	if ok, _ := l.Allow("u2"); !ok {
		t.Fatal("another key was refused")
	}
	clk.Advance(4 * time.Second)
	if ok, wait := l.Allow("u1"); ok || wait != 6*time.Second {
		t.Fatalf("after 4s: ok %v, retry after %v; want refused, 6s", ok, wait)
	}
	clk.Advance(6 * time.Second)
	if ok, _ := l.Allow("u1"); !ok {
		t.Fatal("after 10s: refused, want one more")
	}
	if ok, _ := l.Allow("u1"); ok {
		t.Fatal("two requests earned in 10s")
	}
}

// TestKeysAreBounded: past MaxKeys the least recently used key is
// forgotten (and starts again with a full bucket); memory holds MaxKeys.
func TestKeysAreBounded(t *testing.T) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	l := keyrate.New(keyrate.Config{Burst: 1, Every: time.Hour, MaxKeys: 2, Clock: clk})
	l.Allow("a")
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("a's second request within the hour allowed")
	}
	for i := range 1000 {
		l.Allow("k" + strconv.Itoa(i))
	}
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("a was not forgotten after 1,000 other keys")
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New with Burst 0: want a panic")
		}
	}()
	keyrate.New(keyrate.Config{Every: time.Second, MaxKeys: 1})
}

// TestCheckThenSpend: Check spends nothing; Spend spends, past the burst
// into debt that Check then waits out.
func TestCheckThenSpend(t *testing.T) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	l := keyrate.New(keyrate.Config{Burst: 2, Every: 10 * time.Second, MaxKeys: 10, Clock: clk})
	for range 5 {
		if ok, _ := l.Check("u1"); !ok {
			t.Fatal("Check refused a key that spent nothing")
		}
	}
	l.Spend("u1")
	l.Spend("u1")
	l.Spend("u1") // one into debt
	if ok, wait := l.Check("u1"); ok || wait != 20*time.Second {
		t.Fatalf("after 3 spent of 2: ok %v, retry after %v; want refused, 20s", ok, wait)
	}
	clk.Advance(20 * time.Second)
	if ok, _ := l.Check("u1"); !ok {
		t.Fatal("the debt earned back: still refused")
	}
	if ok, _ := l.Check("u2"); !ok {
		t.Fatal("another key was refused")
	}
}
