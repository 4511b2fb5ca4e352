package discord

import (
	"context"
	"testing"

	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/store"
	"connector/vault"
)

// TestGrantsAcrossInstances: two instances of the platform on one store
// (memory, and a real redis-server) and one fake Discord. The instance
// holding the Gateway routes Ada's message in guild Lab, which no tenant
// is bound to, to t2 (Ada is linked to t2); then t2 may send into that
// channel from the other instance, which declined it before the message,
// and t3 still may not. Ada's message in t1's guild Other reaches t1 and
// grants t2 nothing there.
func TestGrantsAcrossInstances(t *testing.T) {
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
			durable := func() vault.Store { return vault.NewDurable(st.Capabilities(), vault.Config{}) }

			holder := newEnvDeps(t, platform.Deps{Vault: durable()}, discordtest.Options{}, nil)
			holder.startReady(t)
			standby := func(ctx context.Context, _ string, _ func(context.Context) error) error {
				<-ctx.Done() // the Gateway lease stays with holder
				return nil
			}
			other := &env{fake: holder.fake, sink: newSink(), logs: newLogCapture(), metrics: newMetrics(), cfg: holder.cfg}
			other.p, err = New(holder.cfg, platform.Deps{Log: other.logs.Logger(), Metrics: other.metrics, Vault: durable(), Exclusive: standby})
			if err != nil {
				t.Fatal(err)
			}
			other.start(t)
			bindings := []platform.Binding{{Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"}, {Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}
			for _, e := range []*env{holder, other} {
				if err := e.p.Bind(bindings); err != nil {
					t.Fatal(err)
				}
			}
			sendInto := func(chat, tenant, text string) bool {
				t.Helper()
				r := execute(t, other, tenant, `{"op":"send","chat_id":"`+chat+`","content":"`+text+`","reply_to":null,"metadata":{}}`)
				return r.Success
			}
			send := func(tenant, text string) bool { t.Helper(); return sendInto(chanGeneral, tenant, text) }
			if send("t2", "too early") {
				t.Fatal("t2 sent into t1's channel before its author spoke there")
			}

			holder.dispatch(t, "MESSAGE_CREATE", msg("7001", chanGeneral, guildLab, "ada to her agent", false))
			if d := holder.sink.Next(t); d.Event == nil || d.Tenant != "t2" || d.Event.Text != "ada to her agent" {
				t.Fatalf("delivery %+v, want Ada's message to t2", d)
			}
			if !send("t2", "reply from the other instance") {
				t.Fatal("t2 may not reply on the other instance where its author spoke")
			}
			if send("t3", "not mine") {
				t.Fatal("t3 sent into t1's channel")
			}
			got := holder.fake.Messages(chanGeneral)
			if len(got) != 1 || got[0].Content != "reply from the other instance" {
				t.Fatalf("the fake has %+v in the channel", got)
			}

			holder.dispatch(t, "MESSAGE_CREATE", msg("7002", chanOther, guildOther, "ada in t1's guild", true))
			if d := holder.sink.Next(t); d.Event == nil || d.Tenant != "t1" || d.Event.Text != "ada in t1's guild" {
				t.Fatalf("delivery %+v, want Ada's message in t1's guild to t1", d)
			}
			if sendInto(chanOther, "t2", "into t1's channel") {
				t.Fatal("t2 sent into t1's channel where its author spoke")
			}
		})
	}
}
