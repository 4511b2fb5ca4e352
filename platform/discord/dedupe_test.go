package discord

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
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

// deadlineClaims records the deadline of the latest Claim.
type deadlineClaims struct {
	store.Claims
	mu       sync.Mutex
	deadline time.Time
}

func (c *deadlineClaims) Claim(ctx context.Context, key string, expires time.Time) (bool, error) {
	c.mu.Lock()
	c.deadline, _ = ctx.Deadline()
	c.mu.Unlock()
	return c.Claims.Claim(ctx, key, expires)
}

// deadlineSink takes every delivery and reports the deadline it came with.
type deadlineSink struct{ deadlines chan time.Time }

func (s *deadlineSink) Deliver(ctx context.Context, _ platform.Delivery) error {
	d, _ := ctx.Deadline()
	s.deadlines <- d
	return nil
}

// TestInteractionDeadlineIncludesTheClaim: Discord waits 3 s for an
// interaction's answer from when it sent it, so the 2.5 s processDeadline
// counts from the interaction's arrival, the claim of its id included; a
// processing deadline that started again after a slow claim would confirm
// the interaction after Discord gave up, when its user already saw a
// failure.
func TestInteractionDeadlineIncludesTheClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	claims := &deadlineClaims{Claims: e.p.seen}
	e.p.seen = claims
	sink := &deadlineSink{deadlines: make(chan time.Time, 1)}
	e.startWith(t, sink)
	platformtest.WaitUntil(t, "the Gateway session up and the guild snapshot loaded", func() bool {
		return e.p.Status().Ready && e.p.snap.loaded.Load()
	})
	url := e.webhookServer(t)
	if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, time.Now(), slashBody("8601", "tok-8601", guildLab, chanGeneral))); code != 200 || ack != `{"type":5}` {
		t.Fatalf("slash = %d %s", code, ack)
	}
	var delivered time.Time
	select {
	case delivered = <-sink.deadlines:
	case <-waitCtx(t).Done():
		t.Fatal("the interaction was answered but never delivered")
	}
	claims.mu.Lock()
	claimed := claims.deadline
	claims.mu.Unlock()
	if claimed.IsZero() || delivered.IsZero() || delivered.After(claimed) {
		t.Fatalf("delivery deadline %v, claim deadline %v: the processing must end by the deadline counted from the interaction's arrival, not restart after the claim",
			delivered.Format(time.StampNano), claimed.Format(time.StampNano))
	}
}

// stallingClaims is a claims store that never answers: every Claim waits
// for its context to end, as a hung Redis would, and reports how it ended.
type stallingClaims struct {
	store.Claims
	entered chan struct{}
	ended   chan error
}

func (c *stallingClaims) Claim(ctx context.Context, _ string, _ time.Time) (bool, error) {
	c.entered <- struct{}{}
	<-ctx.Done()
	c.ended <- ctx.Err()
	return false, ctx.Err()
}

// TestStopWhileClaimingAGatewayInteraction: the claim of a Gateway
// interaction's id runs in Run's work (Run waits for it), so stopping the
// platform while the claims store hangs must end the claim at once, not
// hold Run until the claim's 2.5 s deadline.
func TestStopWhileClaimingAGatewayInteraction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	claims := &stallingClaims{Claims: e.p.seen, entered: make(chan struct{}, 1), ended: make(chan error, 1)}
	e.p.seen = claims
	e.startReady(t)
	var in map[string]any
	if err := json.Unmarshal(slashBody(liveID(8620), "tok-8620", guildLab, chanGeneral), &in); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "INTERACTION_CREATE", in)
	select {
	case <-claims.entered:
	case <-waitCtx(t).Done():
		t.Fatal("the Gateway interaction's id was never claimed")
	}
	e.cancel()
	select {
	case err := <-claims.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the claim ended with %v when Run was stopped, want it cancelled with Run", err)
		}
	case <-waitCtx(t).Done():
		t.Fatal("the claim still waits 10 s after Run was stopped")
	}
}
