package platform_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/platform"
	"connector/store"
)

// dedupeInstances opens a store on backend (memory, or a real
// redis-server) and returns two instances' Dedupes on it, and lapse, which
// lets every claim of a key run out: clk passes by, and on redis, whose
// claims lapse by the server's clock, their keys are removed as the
// server's expiry would.
func dedupeInstances(t *testing.T, backend string, clk *clocktest.Fake) (a, b *platform.Dedupe, lapse func(key string, by time.Duration)) {
	t.Helper()
	cfg := store.Config{Backend: backend, Clock: clk}
	lapse = func(_ string, by time.Duration) { clk.Advance(by) }
	if backend == store.BackendRedis {
		srv := redistest.Start(t, redistest.Options{})
		cfg.RedisURL = srv.URL()
		rc := srv.Client(t)
		lapse = func(key string, by time.Duration) {
			t.Helper()
			clk.Advance(by)
			ctx := context.Background()
			keys, err := rc.Keys(ctx, "*claim:test/*/"+key).Result()
			if err != nil || len(keys) == 0 {
				t.Fatalf("the claims of %q on the server: %q, %v; want one at least", key, keys, err)
			}
			if err := rc.Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	d := func() *platform.Dedupe {
		return &platform.Dedupe{Claims: st.Claims(), Clock: clk, Prefix: "test/", Pending: time.Minute, Window: time.Hour,
			Log: slog.New(slog.DiscardHandler)}
	}
	return d(), d(), lapse
}

// TestDedupeAcrossInstances: two instances on one store (memory, and a
// real redis-server) handle a key once; a copy the other instance is
// handling is ErrBusy, a failed one is handled again, a key left pending
// by a crashed instance is free after Pending, and a handled key is a
// duplicate for Window.
func TestDedupeAcrossInstances(t *testing.T) {
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			clk := clocktest.New(time.Now())
			a, b, lapse := dedupeInstances(t, backend, clk)
			ctx := t.Context()
			handled := 0
			handle := func() error { handled++; return nil }
			once := func(d *platform.Dedupe, key string, wantDup bool, wantErr error) {
				t.Helper()
				if dup, err := d.Once(ctx, key, handle); dup != wantDup || !errors.Is(err, wantErr) {
					t.Fatalf("%s: duplicate %v, err %v; want %v, %v", key, dup, err, wantDup, wantErr)
				}
			}
			_, err := a.Once(ctx, "k1", func() error {
				once(b, "k1", false, platform.ErrBusy) // a copy while a handles it
				return handle()
			})
			if err != nil || handled != 1 {
				t.Fatalf("first copy: %v, handled %d", err, handled)
			}
			once(b, "k1", true, nil) // a retry after a handled it
			once(a, "k1", true, nil)

			refused := errors.New("not stored")
			if _, err := a.Once(ctx, "k2", func() error { return refused }); !errors.Is(err, refused) {
				t.Fatalf("failed copy: %v", err)
			}
			once(b, "k2", false, nil) // the retry is handled
			if handled != 2 {
				t.Fatalf("handled %d, want 2", handled)
			}

			if pending, err := a.Begin(ctx, "k3"); pending.IsZero() || err != nil { // a crashes while handling k3
				t.Fatalf("begin: %v, %v", pending, err)
			}
			once(b, "k3", false, platform.ErrBusy)
			lapse("k3", a.Pending+time.Second)
			once(b, "k3", false, nil)
			lapse("k3", a.Window+time.Second)
			once(a, "k3", false, nil) // past the window: handled again
			if handled != 4 {
				t.Fatalf("handled %d, want 4", handled)
			}
		})
	}
}

// TestDedupeDoneAfterTheCallerGaveUp: an event handled while its
// caller's context ended (the source stopped waiting for the answer, as
// Telegram and Slack do past their timeouts, and will retry) is still
// marked done, so the retry, on the other instance, is a duplicate rather
// than busy until the pending claim expires and then handled again.
func TestDedupeDoneAfterTheCallerGaveUp(t *testing.T) {
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			a, b, _ := dedupeInstances(t, backend, clocktest.New(time.Now()))
			ctx, gaveUp := context.WithCancel(t.Context())
			if _, err := a.Once(ctx, "k", func() error { gaveUp(); return nil }); err != nil {
				t.Fatal(err)
			}
			dup, err := b.Once(t.Context(), "k", func() error { return errors.New("handled twice") })
			if !dup || err != nil {
				t.Fatalf("the retry: duplicate %v, err %v; want a duplicate", dup, err)
			}
		})
	}
}

// TestDedupeCheck: Check tells, without taking the key, a key free (it is
// then still free to Begin), one being handled (ErrBusy) and one handled
// (a duplicate), on memory and a real redis-server.
func TestDedupeCheck(t *testing.T) {
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			clk := clocktest.New(time.Now())
			a, b, _ := dedupeInstances(t, backend, clk)
			ctx := t.Context()
			check := func(wantDup bool, wantErr error) {
				t.Helper()
				if dup, err := b.Check(ctx, "k"); dup != wantDup || !errors.Is(err, wantErr) {
					t.Fatalf("duplicate %v, err %v; want %v, %v", dup, err, wantDup, wantErr)
				}
			}
			check(false, nil)
			if pending, err := a.Begin(ctx, "k"); pending.IsZero() || err != nil {
				t.Fatalf("Begin after Check: pending %v, err %v", pending, err)
			}
			check(false, platform.ErrBusy)
			a.Finish(ctx, "k")
			check(true, nil)
		})
	}
}

// TestDedupeProbesAcrossClockSkew: an instance whose clock is ahead of the
// store's and the other instance's checks a key (Check) and begins another
// that it then fails (Begin, Release); the other instance then takes both
// keys. The probes (a claim that only tells whether a live one holds its
// key) leave nothing the other clock still sees live: before, a probe
// stored a claim until the prober's now, so the other instance dropped its
// copy as a duplicate (or answered it busy) for as long as the skew.
func TestDedupeProbesAcrossClockSkew(t *testing.T) {
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			clk := clocktest.New(time.Now())
			a, b, _ := dedupeInstances(t, backend, clk)
			a.Clock = clocktest.New(clk.Now().Add(10 * time.Second)) // a's clock is ahead
			ctx := t.Context()
			if dup, err := a.Check(ctx, "k1"); dup || err != nil {
				t.Fatalf("a's check of k1: duplicate %v, err %v; want neither", dup, err)
			}
			pending, err := a.Begin(ctx, "k2")
			if pending.IsZero() || err != nil {
				t.Fatalf("a's begin of k2: pending %v, err %v; want taken", pending, err)
			}
			a.Release("k2", pending) // its handling failed
			for _, key := range []string{"k1", "k2"} {
				if pending, err := b.Begin(ctx, key); pending.IsZero() || err != nil {
					t.Fatalf("b's begin of %s: pending %v, err %v; want taken (no copy of it was handled)", key, pending, err)
				}
			}
		})
	}
}

// TestDedupeLateReleaseKeepsAnotherClaim: an instance whose handling
// outlasts its pending claim, and then fails, releases its claim after
// another instance took the key; the other's claim stays, so a third copy
// is busy rather than handled beside the second. Before, the release
// deleted whatever claim held the key. On memory, a real redis-server, and
// a local state (one process).
func TestDedupeLateReleaseKeepsAnotherClaim(t *testing.T) {
	for _, backend := range []string{store.BackendMemory, store.BackendRedis, "local"} {
		t.Run(backend, func(t *testing.T) {
			clk := clocktest.New(time.Now())
			var a, b *platform.Dedupe
			var lapse func(string, time.Duration)
			if backend == "local" {
				a, b, lapse = dedupeInstances(t, store.BackendMemory, clk)
				a.Claims = platform.NewLocalState(100, clk)
				b.Claims = a.Claims
			} else {
				a, b, lapse = dedupeInstances(t, backend, clk)
			}
			ctx := t.Context()
			_, err := a.Once(ctx, "k", func() error {
				// a's claim lapses while it handles k
				lapse("k", a.Pending)
				if pending, err := b.Begin(ctx, "k"); pending.IsZero() || err != nil {
					t.Fatalf("b's begin once a's claim lapsed: pending %v, err %v; want taken", pending, err)
				}
				return errors.New("not stored")
			})
			if err == nil {
				t.Fatal("a's failed copy: no error")
			}
			if dup, err := a.Once(ctx, "k", func() error { return errors.New("handled beside b") }); dup || !errors.Is(err, platform.ErrBusy) {
				t.Fatalf("a third copy while b handles k: duplicate %v, err %v; want ErrBusy", dup, err)
			}
		})
	}
}
