package wake_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"

	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/store"
	"connector/wake"
)

// distinctURLs is how many wake URLs the forgetting tests poke: one
// tenant's gateways whose URLs changed at every boot (a tunnel's).
const distinctURLs = 20

// pokeDistinctURLs has p poke distinctURLs wake URLs of tenant acme on ws,
// one Away per URL (the registry answers the next one each time), and
// checks each got its GET.
func pokeDistinctURLs(t *testing.T, ws *wakeServer, clk *clocktest.Fake, claims store.Claims, cooldown time.Duration) {
	t.Helper()
	n := 0
	targets := func(context.Context, string) ([]wake.Target, error) {
		return []wake.Target{{Tenant: "acme", Gateway: "gw1", URL: fmt.Sprintf("%s/boot-%d", ws.URL, n)}}, nil
	}
	m := &counter{}
	p, err := wake.New(wake.Config{Targets: targets, Claims: claims, Clock: clk, Cooldown: cooldown, PerHost: distinctURLs, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	for n = range distinctURLs {
		p.Away("acme")
		p.Wait()
		clk.Advance(cooldown) // the next boot: the per-tenant and per-host cooldowns passed
	}
	if got := ws.hits.Load(); got != distinctURLs {
		t.Fatalf("wake GETs to %d distinct URLs: %d, want one each (results %v)", distinctURLs, got, m.n)
	}
}

// TestEmbeddedStoreForgetsLapsedWakeCooldowns: once the cooldowns of many
// distinct wake URLs passed, the embedded store holds nothing for them
// (the sweep removed them): URLs that change at every boot do not grow
// the data file.
func TestEmbeddedStoreForgetsLapsedWakeCooldowns(t *testing.T) {
	ws := newWakeServer(t, http.StatusOK)
	clk := clocktest.New(time.Unix(1_000_000, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendEmbedded, Path: filepath.Join(t.TempDir(), "connector.db"), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	empty := embeddedEntries(t, st)
	const cooldown = 30 * time.Second
	pokeDistinctURLs(t, ws, clk, st.Claims(), cooldown)
	clk.Advance(time.Minute) // past every cooldown, and a sweep's period
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := embeddedEntries(t, st)
		if got == empty {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for the sweep to forget %d lapsed wake cooldowns: the store holds %d entries, %d when empty", distinctURLs, got, empty)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// embeddedEntries counts the keys in every bucket of a backup of st.
func embeddedEntries(t *testing.T, st store.Store) int {
	t.Helper()
	var buf bytes.Buffer
	_, err := st.(store.Backuper).Backup(context.Background(), func(int64) (io.Writer, error) { return &buf, nil })
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			n += b.Stats().KeyN
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRedisForgetsLapsedWakeCooldowns: on a real Redis, every key the wake
// cooldowns of many distinct URLs leave expires by itself within the
// cooldown and the store's expiry slack: none is kept for ever.
func TestRedisForgetsLapsedWakeCooldowns(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ws := newWakeServer(t, http.StatusOK)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const prefix = "waketest:"
	clk := clocktest.New(time.Now())
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), RedisPrefix: prefix, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	opened, err := rc.Keys(ctx, prefix+"*").Result() // the store's own (its layout)
	if err != nil {
		t.Fatal(err)
	}
	const cooldown = 30 * time.Second
	pokeDistinctURLs(t, ws, clk, st.Claims(), cooldown)
	keys, err := rc.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return slices.Contains(opened, k) })
	if len(keys) < distinctURLs {
		t.Fatalf("%d keys under the prefix after %d pokes: the cooldowns were not stored where this test looks", len(keys), distinctURLs)
	}
	for _, k := range keys {
		ttl, err := rc.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < 0 || ttl > cooldown+2*time.Minute {
			t.Errorf("key %s: PTTL %v, want an expiry within the cooldown and the expiry slack", k, ttl)
		}
	}
}
