package store_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/internal/leakcheck"
	"connector/internal/redistest"
	"connector/store"
	"connector/store/storetest"
)

func TestMain(m *testing.M) {
	leakcheck.Main(m, 5*time.Second, "connector/store.")
}

// opener returns a storetest.Opener over cfg that closes what it opens
// when t ends.
func opener(t testing.TB, cfg store.Config) storetest.Opener {
	return func(c clock.Clock) store.Store {
		cfg := cfg
		cfg.Clock = c
		s, err := store.Open(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Open(%s): %v", cfg.Backend, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

func TestMemory(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		Fresh: func(t *testing.T) storetest.Opener {
			return opener(t, store.Config{Backend: store.BackendMemory})
		},
	})
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	cases := map[string]store.Config{
		"unknown backend":   {Backend: "etcd"},
		"redis without url": {Backend: store.BackendRedis},
		"redis bad url":     {Backend: store.BackendRedis, RedisURL: "redis://:hunter2@host:notaport/x"},
	}
	for name, cfg := range cases {
		_, err := store.Open(ctx, cfg)
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
	}
	// A server that is not there: a clear error, not a hang.
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := store.Open(dctx, store.Config{Backend: store.BackendRedis, RedisURL: "redis://127.0.0.1:1/0"}); err == nil {
		t.Fatal("Open of redis on a closed port succeeded")
	}
}

func TestDefaultPath(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/var/state")
	if p, err := store.DefaultPath(); err != nil || p != "/var/state/connector" {
		t.Fatalf("DefaultPath with XDG_STATE_HOME = %q, %v", p, err)
	}
	t.Setenv("XDG_STATE_HOME", "relative") // not absolute: ignored, as the XDG spec says
	t.Setenv("HOME", "/home/op")
	if p, err := store.DefaultPath(); err != nil || p != "/home/op/.local/state/connector" {
		t.Fatalf("DefaultPath with HOME = %q, %v", p, err)
	}
}

// BenchmarkAppend measures durable appends of single 512-byte records to
// one tenant by parallel appenders (b.SetParallelism × GOMAXPROCS
// goroutines), in events per second.
func BenchmarkAppend(b *testing.B) {
	backends := []struct {
		name string
		cfg  func(b *testing.B) store.Config
	}{
		{"memory", func(*testing.B) store.Config { return store.Config{Backend: store.BackendMemory} }},
		{"embedded", func(b *testing.B) store.Config {
			return store.Config{Backend: store.BackendEmbedded, Path: b.TempDir()}
		}},
		{"redis-nopersist", func(b *testing.B) store.Config {
			return redisConfig(redistest.Start(b, redistest.Options{}))
		}},
		{"redis-everysec", func(b *testing.B) store.Config {
			return redisConfig(redistest.Start(b, redistest.Options{AppendFsync: "everysec"}))
		}},
		{"redis-always", func(b *testing.B) store.Config {
			return redisConfig(redistest.Start(b, redistest.Options{AppendFsync: "always"}))
		}},
	}
	payload := make([]byte, 512)
	for _, be := range backends {
		for _, par := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/appenders=%d", be.name, par*runtime.GOMAXPROCS(0)), func(b *testing.B) {
				cfg := be.cfg(b)
				s, err := store.Open(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				l := s.Ledger()
				b.SetBytes(int64(len(payload)))
				b.SetParallelism(par)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					recs := []store.Record{{Kind: 1, Platform: "discord", SessionKey: "agent:main:discord:group:1", ChatID: "1", Payload: payload}}
					for pb.Next() {
						if _, err := l.Append(context.Background(), "t1", recs); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkRead measures the read of a tenant's newest records on Redis, as
// a driver reads what other instances stored (relay/ledger's Tail): each
// read returns the `records` 512-byte records after a seq, asking for up
// to 1,024.
func BenchmarkRead(b *testing.B) {
	cfg := redisConfig(redistest.Start(b, redistest.Options{}))
	s, err := store.Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := s.Ledger()
	payload := make([]byte, 512)
	recs := make([]store.Record, 1024)
	for i := range recs {
		recs[i] = store.Record{Kind: 1, Platform: "discord", SessionKey: "agent:main:discord:group:1", ChatID: "1", Payload: payload}
	}
	if _, err := l.Append(context.Background(), "t1", recs); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				got, err := l.Read(context.Background(), "t1", uint64(len(recs)-n), 1024, 64<<20)
				if err != nil || len(got) != n {
					b.Fatalf("Read returned %d records (%v), want %d", len(got), err, n)
				}
			}
		})
	}
}
