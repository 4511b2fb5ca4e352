package telegram

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/telegram/telegramtest"
	"connector/store"
)

// webhookInstances builds two webhook-mode instances sharing a store on
// backend (memory, or a real redis-server), the store and both platforms
// on clk (nil: the real clock).
func webhookInstances(t *testing.T, backend string, clk *clocktest.Fake) (a, b *env) {
	t.Helper()
	cfg := store.Config{Backend: backend}
	deps := platform.Deps{}
	if clk != nil {
		cfg.Clock, deps.Clock = clk, clk
	}
	if backend == store.BackendRedis {
		cfg.RedisURL = redistest.Start(t, redistest.Options{}).URL()
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	instance := func(name string) *env {
		n, err := cluster.New(cluster.Config{Instance: name, PubSub: st.PubSub()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		deps.Store, deps.Cluster = st, n
		return newEnvDeps(t, deps, func(c *Config) {
			c.WebhookURL = "https://connector.example" + WebhookPath
			c.WebhookSecret = testSecret
		})
	}
	return instance("i0"), instance("i1")
}

// TestWebhookRetryWithinTelegramsRetryPeriod: Telegram retries an
// unconfirmed webhook update for up to 24 hours. A retry 23 hours after
// the first copy was stored (its 200 lost), reaching the other instance,
// is answered 200 and not delivered again (memory store, and a real
// redis-server, on the fake clock).
func TestWebhookRetryWithinTelegramsRetryPeriod(t *testing.T) {
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			clk := clocktest.New(time.Now())
			a, b := webhookInstances(t, backend, clk)
			a.startWebhook(t)
			b.startWebhook(t)
			raw := withUpdateID(t, fixture(t, "telegram_shared_private_text").Raw, 884200003)
			if code := a.post(t, raw); code != http.StatusOK {
				t.Fatalf("first copy: status %d", code)
			}
			a.sink.Next(t)
			clk.Advance(23 * time.Hour)
			if code := b.post(t, raw); code != http.StatusOK {
				t.Fatalf("retry 23 h later: status %d, want 200", code)
			}
			b.sink.Empty(t)
		})
	}
}

// TestWebhookUpdateOnceAcrossInstances: two instances behind one webhook
// URL share a store (memory, and a real redis-server), and Telegram's
// retry of an update reaches the other instance than its first copy. An
// update the first instance is still handling is answered 503 by the
// other (Telegram retries), and once it is stored the retry is answered
// 200 and not delivered again: the gateway gets the update once. An
// update whose delivery one instance could not store is delivered by the
// other on the retry.
func TestWebhookUpdateOnceAcrossInstances(t *testing.T) {
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			a, b := webhookInstances(t, backend, nil)
			// a's first delivery waits until the test lets it go: the
			// update is being handled on a.
			handling, letGo := make(chan struct{}), make(chan struct{})
			var first, release sync.Once
			a.sink.Check = func(platform.Delivery) error {
				first.Do(func() {
					close(handling)
					<-letGo
				})
				return nil
			}
			a.startWebhook(t)
			b.startWebhook(t)
			// Before the servers close, which waits for a's request.
			t.Cleanup(func() { release.Do(func() { close(letGo) }) })

			raw := withUpdateID(t, fixture(t, "telegram_shared_private_text").Raw, 884200001)
			codes := make(chan int, 1)
			go func() {
				code, _ := telegramtest.PostUpdate(ctx, http.DefaultClient, a.hook, testSecret, raw)
				codes <- code
			}()
			select {
			case <-handling:
			case <-time.After(waitFor):
				t.Fatal("the first copy did not reach a's sink")
			}
			if code := b.post(t, raw); code != http.StatusServiceUnavailable {
				t.Fatalf("copy while a handles it: status %d, want 503", code)
			}
			release.Do(func() { close(letGo) })
			if code := <-codes; code != http.StatusOK {
				t.Fatalf("first copy: status %d", code)
			}
			if code := b.post(t, raw); code != http.StatusOK { // Telegram's retry
				t.Fatalf("retry after a stored it: status %d, want 200", code)
			}
			a.sink.Next(t)
			a.sink.Empty(t)
			b.sink.Empty(t)

			// Not stored on a: the retry on b is delivered.
			raw = withUpdateID(t, fixture(t, "telegram_shared_private_text").Raw, 884200002)
			a.sink.Refuse(1)
			if code := a.post(t, raw); code != http.StatusServiceUnavailable {
				t.Fatalf("refused delivery: status %d, want 503", code)
			}
			if code := b.post(t, raw); code != http.StatusOK {
				t.Fatalf("retry on b: status %d", code)
			}
			b.sink.Next(t)
			if code := a.post(t, raw); code != http.StatusOK {
				t.Fatalf("retry on a after b stored it: status %d", code)
			}
			a.sink.Empty(t)
			if n := a.sink.Taken() + b.sink.Taken(); n != 2 {
				t.Fatalf("the gateways took %d deliveries of 2 updates", n)
			}
		})
	}
}
