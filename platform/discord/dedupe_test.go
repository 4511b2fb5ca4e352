package discord

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/store"
	"connector/vault"
)

// TestInteractionReplayedToAnotherInstance: two instances of the platform
// on one store (memory, and a real redis-server), each serving the signed
// interactions webhook. A slash command accepted by one is refused 409
// "duplicate interaction" when its captured request is replayed to the
// other within the freshness window, and reaches no gateway again; a new
// interaction is accepted by the other instance as usual.
func TestInteractionReplayedToAnotherInstance(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			cfg := store.Config{Backend: backend}
			if backend == store.BackendRedis {
				cfg.RedisURL = redistest.Start(t, redistest.Options{}).URL()
			}
			st, err := store.Open(waitCtx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			node := func(name string) *cluster.Node {
				n, err := cluster.New(cluster.Config{Instance: name, PubSub: st.PubSub()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(n.Close)
				return n
			}
			durable := func() vault.Store { return vault.NewDurable(st.Capabilities(), vault.Config{}) }
			holder := newEnvDeps(t, platform.Deps{Store: st, Cluster: node("i0"), Vault: durable()}, discordtest.Options{}, nil)
			holder.startReady(t)
			standby := func(ctx context.Context, _ string, _ func(context.Context) error) error {
				<-ctx.Done() // the Gateway lease stays with holder
				return nil
			}
			other := &env{fake: holder.fake, sink: newSink(), logs: newLogCapture(), metrics: newMetrics(), priv: holder.priv, cfg: holder.cfg}
			other.p, err = New(holder.cfg, platform.Deps{Log: other.logs.Logger(), Metrics: other.metrics, Store: st, Cluster: node("i1"), Vault: durable(), Exclusive: standby})
			if err != nil {
				t.Fatal(err)
			}
			other.start(t)
			now := time.Now()
			body := slashBody("8101", "tok-8101", guildLab, chanGeneral)
			holder.fake.AddInteractionToken("tok-8101")
			if code, ack := post(t, discordtest.InteractionRequest(holder.webhookServer(t), holder.priv, now, body)); code != http.StatusOK {
				t.Fatalf("slash command on the first instance = %d %s", code, ack)
			}
			if d := holder.sink.Next(t); d.Tenant != "t1" || d.Event == nil || d.Event.Text != "/model gpt" {
				t.Fatalf("delivery on the first instance = %+v", d)
			}
			otherURL := other.webhookServer(t)
			if code, text := post(t, discordtest.InteractionRequest(otherURL, holder.priv, now, body)); code != http.StatusConflict || !strings.Contains(text, "duplicate interaction") {
				t.Fatalf("the request replayed to the other instance = %d %q, want 409 duplicate interaction", code, text)
			}
			other.metrics.waitDrop(t, "duplicate", 1)
			fresh := slashBody("8102", "tok-8102", guildLab, chanGeneral)
			holder.fake.AddInteractionToken("tok-8102")
			if code, ack := post(t, discordtest.InteractionRequest(otherURL, holder.priv, now, fresh)); code != http.StatusOK {
				t.Fatalf("a new slash command on the other instance = %d %s", code, ack)
			}
			if d := other.sink.Next(t); d.Event == nil || d.Event.Text != "/model gpt" {
				t.Fatalf("delivery on the other instance = %+v", d)
			}
			// The webhook answers once the sink took the interaction, so the
			// counts are final: one delivery each, none of the replay.
			if a, b := holder.sink.Taken(), other.sink.Taken(); a != 1 || b != 1 {
				t.Fatalf("deliveries: %d on the first instance, %d on the other, want 1 each", a, b)
			}
		})
	}
}
