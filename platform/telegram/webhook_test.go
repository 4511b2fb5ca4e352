package telegram

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/telegram/telegramtest"
	"connector/store"
)

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
			cfg := store.Config{Backend: backend}
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
				return newEnvDeps(t, platform.Deps{Store: st, Cluster: n}, func(c *Config) {
					c.WebhookURL = "https://connector.example" + WebhookPath
					c.WebhookSecret = testSecret
				})
			}
			a, b := instance("i0"), instance("i1")
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
