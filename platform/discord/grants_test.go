package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
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

// TestThreadCreatedOnAGrant: in guild Lab, which no tenant is bound to
// and nobody claims, Ada (linked to t2) and Bea (linked to t3) speak in
// one channel, so t2 and t3 both hold it by grant. A thread t2 creates
// there, plain or from Ada's message, is t2's at once: its first send
// goes in, before anyone wrote in the thread. t3, which holds the
// channel too, may neither send into t2's thread nor rename it, and t2
// may not send into the thread t3 created.
func TestThreadCreatedOnAGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	const userBea = "502"
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"},
		{Kind: platform.BindUser, ID: userAda, Tenant: "t2"},
		{Kind: platform.BindUser, ID: userBea, Tenant: "t3"},
	}); err != nil {
		t.Fatal(err)
	}
	act := func(tenant string, a map[string]any) contract.Result {
		t.Helper()
		a["metadata"] = map[string]any{}
		body, _ := json.Marshal(a)
		return execute(t, e, tenant, string(body))
	}
	send := func(tenant, chat, text string) contract.Result {
		t.Helper()
		return act(tenant, map[string]any{"op": "send", "chat_id": chat, "content": text, "reply_to": nil})
	}

	e.dispatch(t, "MESSAGE_CREATE", msg("7101", chanGeneral, guildLab, "ada to her agent", false))
	if d := e.sink.Next(t); d.Event == nil || d.Tenant != "t2" {
		t.Fatalf("delivery %+v, want Ada's message to t2", d)
	}
	bea := msg("7102", chanGeneral, guildLab, "bea to hers", false)
	bea["author"] = map[string]any{"id": userBea, "username": "bea", "global_name": "Bea", "discriminator": "0"}
	e.dispatch(t, "MESSAGE_CREATE", bea)
	if d := e.sink.Next(t); d.Event == nil || d.Tenant != "t3" {
		t.Fatalf("delivery %+v, want Bea's message to t3", d)
	}

	plain := act("t2", map[string]any{"op": "thread_create", "chat_id": chanGeneral, "thread_name": "t2's"})
	anchored := act("t2", map[string]any{"op": "thread_create", "chat_id": chanGeneral, "message_id": "7101", "thread_name": "Ada's"})
	theirs := act("t3", map[string]any{"op": "thread_create", "chat_id": chanGeneral, "thread_name": "t3's"})
	for _, r := range []contract.Result{plain, anchored, theirs} {
		if !r.Success || r.ThreadID == "" {
			t.Fatalf("thread_create on a grant = %+v", r)
		}
	}
	for _, th := range []string{plain.ThreadID, anchored.ThreadID} {
		if r := send("t2", th, "first words"); !r.Success {
			t.Errorf("t2's first send into its own thread %s = %+v", th, r)
		}
		if r := send("t3", th, "not mine"); r.Code != contract.CodeEgressDeclined {
			t.Errorf("t3's send into t2's thread %s = %+v, want egress_declined", th, r)
		}
		if r := act("t3", map[string]any{"op": "thread_rename", "chat_id": chanGeneral, "message_id": th, "thread_name": "hijack"}); r.Code != contract.CodeEgressDeclined {
			t.Errorf("t3's rename of t2's thread %s = %+v, want egress_declined", th, r)
		}
	}
	if r := send("t3", theirs.ThreadID, "mine"); !r.Success {
		t.Errorf("t3's first send into its own thread = %+v", r)
	}
	if r := send("t2", theirs.ThreadID, "not mine"); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2's send into t3's thread = %+v, want egress_declined", r)
	}
	if got := e.fake.Messages(plain.ThreadID); len(got) != 1 || got[0].Content != "first words" {
		t.Errorf("t2's thread holds %+v", got)
	}
}

// TestFollowUpOnAGrant: a and b both hold chanOther by grant (Ada, a's,
// ran a slash command there; Bob, b's, wrote there). a's follow_up to
// Ada's command is a message of chanOther: a may edit and delete it there
// (before, a follow_up names no chat and was not remembered as a's, so its
// edit was declined), and b may not.
func TestFollowUpOnAGrant(t *testing.T) {
	t.Parallel()
	const userBob = "502"
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "c"},
		{Kind: platform.BindUser, ID: userAda, Tenant: "a"}, {Kind: platform.BindUser, ID: userBob, Tenant: "b"}}); err != nil {
		t.Fatal(err)
	}
	e.fake.AddInteractionTokenIn("tok-8301", chanOther)
	body := byUser(t, slashBody("8301", "tok-8301", guildOther, chanOther), userAda)
	if code, ack := post(t, discordtest.InteractionRequest(e.webhookServer(t), e.priv, time.Now(), body)); code != 200 || ack != `{"type":5}` {
		t.Fatalf("Ada's slash command = %d %s", code, ack)
	}
	d := e.sink.Next(t)
	if d.Tenant != "a" {
		t.Fatalf("Ada's slash command delivered as %+v, want to a", d)
	}
	bob := msg("7301", chanOther, guildOther, "bob to his agent", false)
	bob["author"] = map[string]any{"id": userBob, "username": "bob"}
	e.dispatch(t, "MESSAGE_CREATE", bob)
	if d := e.sink.Next(t); d.Tenant != "b" {
		t.Fatalf("Bob's message delivered as %+v, want to b", d)
	}
	r := execute(t, e, "a", `{"op":"follow_up","session_key":"`+d.SessionKey+`","kind":"discord.interaction_token","content":"done","metadata":{}}`)
	if !r.Success || r.MessageID == "" {
		t.Fatalf("a's follow_up = %+v", r)
	}
	followUp := r.MessageID
	for _, op := range []string{
		`{"op":"edit","chat_id":"` + chanOther + `","message_id":"` + followUp + `","content":"b rewrote it","metadata":{}}`,
		`{"op":"delete","chat_id":"` + chanOther + `","message_id":"` + followUp + `","metadata":{}}`,
	} {
		if r := execute(t, e, "b", op); r.Code != contract.CodeEgressDeclined {
			t.Fatalf("b on a's follow_up: %s = %+v, want egress_declined", op, r)
		}
	}
	if r := execute(t, e, "a", `{"op":"edit","chat_id":"`+chanOther+`","message_id":"`+followUp+`","content":"done, edited","metadata":{}}`); !r.Success {
		t.Fatalf("a editing its follow_up = %+v", r)
	}
	if ms := e.fake.Messages(chanOther); len(ms) != 1 || ms[0].ID != followUp || ms[0].Content != "done, edited" {
		t.Fatalf("chanOther holds %+v, want a's follow_up edited by a", ms)
	}
	if r := execute(t, e, "a", `{"op":"delete","chat_id":"`+chanOther+`","message_id":"`+followUp+`","metadata":{}}`); !r.Success {
		t.Fatalf("a deleting its follow_up = %+v", r)
	}
}

// TestFollowUpOnAGrantMarkedAfterItsCtxEnded: a's follow_up to Ada's
// command in chanOther, which a holds by grant, is posted and its action's
// ctx ends as the post returns (its deadline, its caller gone), on a vault
// whose lookups, as a store's round trip, find nothing once ctx ended. It
// is still remembered as a's, so a may edit it: before, the grant was
// looked up again after the post, under the ended ctx, and the mark was
// lost.
func TestFollowUpOnAGrantMarkedAfterItsCtxEnded(t *testing.T) {
	t.Parallel()
	e := newEnvDeps(t, platform.Deps{Vault: endedVault{vault.NewMemory(vault.Config{})}}, discordtest.Options{}, nil)
	ctx, end := context.WithTimeout(context.Background(), 10*time.Second)
	defer end()
	tr := e.p.sess.Client.Transport.(*transport)
	tr.base = endAfterPost{base: tr.base, end: end}
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "c"},
		{Kind: platform.BindUser, ID: userAda, Tenant: "a"}}); err != nil {
		t.Fatal(err)
	}
	e.fake.AddInteractionTokenIn("tok-8302", chanOther)
	body := byUser(t, slashBody("8302", "tok-8302", guildOther, chanOther), userAda)
	if code, ack := post(t, discordtest.InteractionRequest(e.webhookServer(t), e.priv, time.Now(), body)); code != 200 || ack != `{"type":5}` {
		t.Fatalf("Ada's slash command = %d %s", code, ack)
	}
	d := e.sink.Next(t)
	if d.Tenant != "a" {
		t.Fatalf("Ada's slash command delivered as %+v, want to a", d)
	}
	a, err := contract.DecodeAction(json.RawMessage(`{"op":"follow_up","session_key":"` + d.SessionKey + `","kind":"discord.interaction_token","content":"done","metadata":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	r := e.p.Execute(ctx, "a", &a)
	if !r.Success || r.MessageID == "" || ctx.Err() == nil {
		t.Fatalf("a's follow_up = %+v (ctx ended: %v)", r, ctx.Err())
	}
	if r := execute(t, e, "a", `{"op":"edit","chat_id":"`+chanOther+`","message_id":"`+r.MessageID+`","content":"done, edited","metadata":{}}`); !r.Success {
		t.Fatalf("a editing its follow_up = %+v", r)
	}
}

// endedVault is a vault whose lookups find nothing once their ctx ended,
// as a Durable's store round trip for a value its front does not hold.
type endedVault struct{ vault.Store }

func (v endedVault) Get(ctx context.Context, k vault.Key) (vault.Entry, bool) {
	if ctx.Err() != nil {
		return vault.Entry{}, false
	}
	return v.Store.Get(ctx, k)
}

// endAfterPost is a transport that ends an action's ctx (end) once a
// webhook post was answered, its answer read.
type endAfterPost struct {
	base http.RoundTripper
	end  context.CancelFunc
}

func (t endAfterPost) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost || !strings.Contains(req.URL.Path, "/webhooks/") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	t.end()
	return resp, err
}

// TestAutoThreadOnAGrant: Ada, linked to t2, mentions the bot in a channel
// no binding covers, so her turn reaches t2 by author link, keyed on the
// thread auto-threading made of her message. t2 must be able to answer in
// that thread (it was declined: the grant was of the channel only); t3,
// which holds the channel by grant too (Bea spoke there), must not.
func TestAutoThreadOnAGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	const userBea = "502"
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"},
		{Kind: platform.BindUser, ID: userAda, Tenant: "t2"},
		{Kind: platform.BindUser, ID: userBea, Tenant: "t3"},
	}); err != nil {
		t.Fatal(err)
	}
	bea := msg("7111", chanGeneral, guildLab, "bea to hers", true)
	bea["author"] = map[string]any{"id": userBea, "username": "bea", "global_name": "Bea", "discriminator": "0"}
	e.dispatch(t, "MESSAGE_CREATE", bea)
	if d := e.sink.Next(t); d.Tenant != "t3" {
		t.Fatalf("Bea's message delivered to %q, want t3", d.Tenant)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("7112", chanGeneral, guildLab, "ada to her agent", true))
	d := e.sink.Next(t)
	thread := d.Event.Source.ChatID
	if d.Tenant != "t2" || !d.Event.Source.AutoThreadCreated || thread != "7112" {
		t.Fatalf("Ada's message delivered to %q in %+v, want t2 in its auto-thread", d.Tenant, d.Event.Source)
	}
	send := func(tenant string) contract.Result {
		return execute(t, e, tenant, `{"op":"send","chat_id":"`+thread+`","content":"on it","metadata":{}}`)
	}
	if r := send("t2"); !r.Success {
		t.Fatalf("t2's answer in the auto-thread of its author's message = %+v", r)
	}
	if r := send("t3"); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t3's send into t2's auto-thread = %+v, want egress_declined", r)
	}
}

// TestAutoThreadGrantedOnce: the auto-thread of Ada's message is granted
// to her tenant once, when it is made: her later messages in it cost the
// store no grant write (a fresh grant is not stored again, as Grants.Add
// promises). It was copied onto itself at every message in the thread
// (the thread, which the connector made, counted as auto-threaded again).
func TestAutoThreadGrantedOnce(t *testing.T) {
	t.Parallel()
	v := &grantWrites{Memory: vault.NewMemory(vault.Config{})}
	e := newEnvDeps(t, platform.Deps{Vault: v}, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"}, {Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("7121", chanGeneral, guildLab, "ada to her agent", true))
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.Source.ChatID != "7121" {
		t.Fatalf("Ada's message delivered to %q in %+v, want t2 in its auto-thread", d.Tenant, d.Event.Source)
	}
	for _, id := range []string{"7122", "7123", "7124"} {
		e.dispatch(t, "MESSAGE_CREATE", msg(id, "7121", guildLab, "and this", false))
		if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.Source.ChatID != "7121" || !d.Event.Source.AutoThreadCreated {
			t.Fatalf("Ada's message %s delivered to %q in %+v, want t2 in her auto-thread", id, d.Tenant, d.Event.Source)
		}
	}
	if n := v.writes("7121"); n != 1 {
		t.Fatalf("the auto-thread's grant was written %d times, want once", n)
	}
}

// grantWrites is a vault that counts the writes of chat grants, by chat.
type grantWrites struct {
	*vault.Memory
	mu sync.Mutex
	n  map[string]int
}

func (g *grantWrites) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if k.Kind == vault.KindChatGrant {
		g.mu.Lock()
		if g.n == nil {
			g.n = map[string]int{}
		}
		g.n[k.SessionKey[strings.LastIndexByte(k.SessionKey, '/')+1:]]++
		g.mu.Unlock()
	}
	return g.Memory.Put(ctx, k, e)
}

// writes is how many grants of chat were written.
func (g *grantWrites) writes(chat string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n[chat]
}

// TestGrantUnknownWhileTheStoreIsDown: t2 holds chanGeneral by grant (Ada,
// linked to t2, spoke there), kept in Redis. With Redis down, another
// instance, which never held the grant, answers t2's send there
// unavailable, which the gateway may retry (before, a grant that could not
// be looked up counted as none, and the send was declined); t1's send into
// its bound guild still goes out, and t3's there gets t2's answer.
func TestGrantUnknownWhileTheStoreIsDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	bindings := []platform.Binding{{Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"}, {Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}
	var envs []*env
	for range 2 {
		e := newEnvDeps(t, platform.Deps{Vault: vault.NewDurable(st.Capabilities(), vault.Config{})}, discordtest.Options{}, nil)
		e.startReady(t)
		if err := e.p.Bind(bindings); err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	holder, other := envs[0], envs[1]
	holder.dispatch(t, "MESSAGE_CREATE", msg("7001", chanGeneral, guildLab, "ada to her agent", false))
	if d := holder.sink.Next(t); d.Event == nil || d.Tenant != "t2" {
		t.Fatalf("delivery %+v, want Ada's message to t2", d)
	}
	srv.Kill(t)
	send := func(tenant, chat string) contract.Result {
		t.Helper()
		return execute(t, other, tenant, `{"op":"send","chat_id":"`+chat+`","content":"hi","reply_to":null,"metadata":{}}`)
	}
	if r := send("t2", chanGeneral); r.Code != contract.CodeUnavailable {
		t.Errorf("t2's send on its grant with the store down = %+v, want unavailable", r)
	}
	if r := send("t1", chanOther); !r.Success {
		t.Errorf("t1's send into its bound guild with the store down = %+v", r)
	}
	if r := send("t3", chanOther); r != send("t2", chanGeneral) {
		t.Errorf("t3's send into t1's guild with the store down = %+v, want t2's answer: it tells nothing of whose the chat is", r)
	}
}

// TestOwnChatActedInWithoutAGrantLookup: t1 acts in a channel of its
// own bound guild, and t3 in the channel it claimed and in a thread of
// it, without a lookup of the vault (on Redis, a store round trip per
// action): the binding or the claim settles the chat's holder, and no
// grant counts there. A tenant acting where the binding is another's is
// still looked up (TestGrantUnknownWhileTheStoreIsDown).
func TestOwnChatActedInWithoutAGrantLookup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"},
		{Kind: platform.BindScope, ID: chanGeneral, Tenant: "t3", Space: guildLab},
	}); err != nil {
		t.Fatal(err)
	}
	lookups := func() uint64 { s := e.vault.Stats(); return s.Hits + s.Misses + s.Expiries }
	for _, c := range []struct{ tenant, chat string }{{"t1", chanOther}, {"t3", chanGeneral}, {"t3", threadPlan}} {
		before := lookups()
		if r := execute(t, e, c.tenant, `{"op":"send","chat_id":"`+c.chat+`","content":"hi","reply_to":null,"metadata":{}}`); !r.Success {
			t.Fatalf("%s's send into %s = %+v", c.tenant, c.chat, r)
		}
		if n := lookups() - before; n != 0 {
			t.Errorf("%s's send into %s looked the vault up %d times, want none", c.tenant, c.chat, n)
		}
	}
}

// TestRoutedUnderTheCreationItsOwnershipWasReadFor: Ada, linked to t2,
// speaks in a channel no binding covers; the route reads the ownership,
// then grants t2 the channel, a store write that waits (a Redis failing
// over). Meanwhile t2 is deleted and made again under its id. The message
// is delivered as routed for the earlier t2 (the relay then drops it), not
// for the new one, which Ada never linked to, and the grant stored is the
// earlier t2's (before, both took the creation read after the grant's
// store calls).
func TestRoutedUnderTheCreationItsOwnershipWasReadFor(t *testing.T) {
	t.Parallel()
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var created sync.Map
	created.Store("t2", first)
	since := func(tenant string) time.Time { c, _ := created.Load(tenant); at, _ := c.(time.Time); return at }
	v := newHeldGrantVault(since, chanGeneral)
	e := newEnvDeps(t, platform.Deps{Vault: v}, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("7001", chanGeneral, guildLab, "ada to her agent", false))
	select {
	case <-v.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the grant of Ada's channel was never stored")
	}
	created.Store("t2", again) // t2 deleted and made again, as the registry's apply does it: the creation first
	if err := e.p.Bind(nil); err != nil {
		t.Fatal(err)
	}
	close(v.release)
	if d := e.sink.Next(t); d.Tenant != "t2" || !d.Created.Equal(first) {
		t.Fatalf("Ada's message delivered to %q as created %v, want the earlier t2's (%v)", d.Tenant, d.Created, first)
	}
	if e.p.spoke.Has(t.Context(), chanGeneral, "t2") {
		t.Fatal("the new t2 holds a grant of the channel where the earlier t2's author spoke")
	}
}

// heldGrantVault is a vault.Memory whose first store of a grant of chat
// waits until release, telling held once it does.
type heldGrantVault struct {
	*vault.Memory
	chat          string
	once          sync.Once
	held, release chan struct{}
}

func newHeldGrantVault(since func(string) time.Time, chat string) *heldGrantVault {
	return &heldGrantVault{Memory: vault.NewMemory(vault.Config{Since: since}), chat: chat, held: make(chan struct{}), release: make(chan struct{})}
}

func (v *heldGrantVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if k.Kind == vault.KindChatGrant && strings.HasSuffix(k.SessionKey, "/"+v.chat) {
		v.once.Do(func() { close(v.held); <-v.release })
	}
	return v.Memory.Put(ctx, k, e)
}

// TestThreadGrantOfTheCreationItWasMadeUnder: TestAutoThreadOnAGrant
// while the store write of the auto-thread's grant waits and t2 is deleted
// and made again meanwhile: the grant stored is the earlier t2's, which
// the new t2 does not hold (it took the creation read as the write ended).
func TestThreadGrantOfTheCreationItWasMadeUnder(t *testing.T) {
	t.Parallel()
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var created sync.Map
	created.Store("t2", first)
	since := func(tenant string) time.Time { c, _ := created.Load(tenant); at, _ := c.(time.Time); return at }
	const thread = "7112" // auto-threading names the thread after the message
	v := newHeldGrantVault(since, thread)
	e := newEnvDeps(t, platform.Deps{Vault: v}, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"}, {Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg(thread, chanGeneral, guildLab, "ada to her agent", true))
	select {
	case <-v.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the grant of the auto-thread was never stored")
	}
	created.Store("t2", again)
	close(v.release)
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.Source.ChatID != thread {
		t.Fatalf("Ada's message delivered to %q in %+v, want t2 in its auto-thread", d.Tenant, d.Event.Source)
	}
	if e.p.spoke.Has(t.Context(), thread, "t2") {
		t.Fatal("the new t2 holds a grant of the earlier t2's auto-thread")
	}
}

// TestAutoThreadInABoundGuildLooksUpNoGrant: Ada's mention in t1's bound
// guild is auto-threaded and delivered to t1 without a lookup of the
// vault (on Redis, a store round trip per auto-thread): the thread is t1's
// by the binding, and there is no grant of the channel to copy onto it.
func TestAutoThreadInABoundGuildLooksUpNoGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	lookups := func() uint64 { s := e.vault.Stats(); return s.Hits + s.Misses + s.Expiries }
	before := lookups()
	e.dispatch(t, "MESSAGE_CREATE", msg("7113", chanGeneral, guildLab, "ada to t1", true))
	if d := e.sink.Next(t); d.Tenant != "t1" || !d.Event.Source.AutoThreadCreated {
		t.Fatalf("Ada's mention in t1's guild delivered to %q in %+v, want t1 in its auto-thread", d.Tenant, d.Event.Source)
	}
	if n := lookups() - before; n != 0 {
		t.Errorf("the auto-thread in t1's bound guild looked the vault up %d times, want none", n)
	}
}

// TestPressGrantsNoTenantMadeAgainWhileItsPosterWasRead: Ada, linked to
// t2, presses t2's prompt in her DM, which t2 holds by grant; the route
// reads the prompt's poster from the store, a read that waits (a Redis
// failing over), and meanwhile t2 is deleted and made again under its id.
// The new t2 is not granted Ada's DM (before, the press renewed the grant
// under the creation read after that wait: the new t2 could post into the
// DM of a user linked to the earlier one).
func TestPressGrantsNoTenantMadeAgainWhileItsPosterWasRead(t *testing.T) {
	t.Parallel()
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var created sync.Map
	created.Store("t2", first)
	since := func(tenant string) time.Time { c, _ := created.Load(tenant); at, _ := c.(time.Time); return at }
	v := &heldPosterVault{Memory: vault.NewMemory(vault.Config{Since: since}), held: make(chan struct{}), release: make(chan struct{})}
	e := newEnvDeps(t, platform.Deps{Vault: v}, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"}, {Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	e.p.spoke.Add(t.Context(), chanDMAda, "", "t2", time.Time{}) // as her /link for t2 in the DM
	r := execute(t, e, "t2", `{"op":"prompt","chat_id":"`+chanDMAda+`","content":"deploy?","prompt_id":"f00dba.1234abcd","options":[{"id":"once","label":"Approve once"}],"metadata":{}}`)
	if !r.Success {
		t.Fatalf("t2's prompt in Ada's DM = %+v", r)
	}
	body, err := e.fake.PressButton("8401", "tok-8401", r.MessageID, buttonOf(t, e, chanDMAda, r.MessageID, "once"), userAda, "ada.l")
	if err != nil {
		t.Fatal(err)
	}
	req := discordtest.InteractionRequest(e.webhookServer(t), e.priv, time.Now(), body)
	v.armed.Store(true)
	posted := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		posted <- err
	}()
	select {
	case <-v.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the prompt's poster was never looked up")
	}
	created.Store("t2", again)
	close(v.release)
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	if e.p.spoke.Has(t.Context(), chanDMAda, "t2") {
		t.Fatal("the new t2 holds a grant of the DM of Ada, who was linked to the earlier t2")
	}
}

// heldPosterVault is a vault.Memory whose first look-up of a prompt's
// poster once armed waits until release, telling held once it does.
type heldPosterVault struct {
	*vault.Memory
	armed         atomic.Bool
	once          sync.Once
	held, release chan struct{}
}

func (v *heldPosterVault) Get(ctx context.Context, k vault.Key) (vault.Entry, bool) {
	if k.Kind == vault.KindPromptPoster && v.armed.Load() {
		v.once.Do(func() { close(v.held); <-v.release })
	}
	return v.Memory.Get(ctx, k)
}

// TestPressWhosePosterIsUnreadable: Ada, linked to t2, presses t2's
// prompt in her DM, which t2 holds by grant, on an instance whose store
// cannot give the prompt's poster record (its reads of it fail; it
// answers everything else). The press is refused with 503 (Discord tells
// her it failed; she may press again) and reaches no tenant. Before, the
// store's error was taken for no record and the press went to the tenant
// her messages reach, whoever posted the prompt.
func TestPressWhosePosterIsUnreadable(t *testing.T) {
	t.Parallel()
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	unreadable := &unreadablePosters{Capabilities: st.Capabilities()}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewDurable(unreadable, vault.Config{})}, discordtest.Options{}, nil)
	e.startReady(t)
	standby := func(ctx context.Context, _ string, _ func(context.Context) error) error {
		<-ctx.Done() // the Gateway lease stays with e
		return nil
	}
	// The prompt is posted on another instance: e's vault does not
	// remember its poster, and reads it from the store.
	other := &env{fake: e.fake, sink: newSink(), logs: newLogCapture(), metrics: newMetrics(), cfg: e.cfg}
	var err error
	other.p, err = New(e.cfg, platform.Deps{Log: other.logs.Logger(), Metrics: other.metrics, Vault: vault.NewDurable(st.Capabilities(), vault.Config{}), Exclusive: standby})
	if err != nil {
		t.Fatal(err)
	}
	other.start(t)
	for _, e := range []*env{e, other} {
		if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
			t.Fatal(err)
		}
	}
	other.p.spoke.Add(t.Context(), chanDMAda, "", "t2", time.Time{}) // as her /link for t2 in the DM
	r := execute(t, other, "t2", `{"op":"prompt","chat_id":"`+chanDMAda+`","content":"deploy?","prompt_id":"f00dba.1234abcd","options":[{"id":"once","label":"Approve once"}],"metadata":{}}`)
	if !r.Success {
		t.Fatalf("t2's prompt in Ada's DM = %+v", r)
	}
	body, err := e.fake.PressButton("8402", "tok-8402", r.MessageID, buttonOf(t, e, chanDMAda, r.MessageID, "once"), userAda, "ada.l")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(discordtest.InteractionRequest(e.webhookServer(t), e.priv, time.Now(), body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the press whose poster the store could not tell answered %d, want 503", resp.StatusCode)
	}
	e.sink.Empty(t)
}

// unreadablePosters fails every read of a prompt poster's record.
type unreadablePosters struct{ store.Capabilities }

func (u *unreadablePosters) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if strings.Contains(key, "prompt_poster") {
		return nil, false, errors.New("store: get capability: unreadable")
	}
	return u.Capabilities.Get(ctx, key)
}

// TestTokenOfAnInteractionRoutedToAnEarlierTenant: a slash command in t1's
// guild is routed to t1, then t1 is deleted and made again under its id
// just before the interaction's token is stored (the vault first, as the
// registry's apply does). The token is the earlier t1's: the new t1 finds
// none for the session (before, it was stored under the new creation, and
// the new t1 could answer the earlier one's interaction, and then edit
// that answer as its own).
func TestTokenOfAnInteractionRoutedToAnEarlierTenant(t *testing.T) {
	t.Parallel()
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var created sync.Map
	created.Store("t1", first)
	since := func(tenant string) time.Time { c, _ := created.Load(tenant); at, _ := c.(time.Time); return at }
	v := &recreatingVault{Memory: vault.NewMemory(vault.Config{Since: since}), recreate: func() { created.Store("t1", again) }}
	e := newEnvDeps(t, platform.Deps{Vault: v}, discordtest.Options{}, nil)
	e.startReady(t)
	resp, err := http.DefaultClient.Do(discordtest.InteractionRequest(e.webhookServer(t), e.priv, time.Now(), slashBody(liveID(8403), "tok-8403", guildLab, chanGeneral)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	d := e.sink.Next(t)
	if d.Tenant != "t1" {
		t.Fatalf("delivery to %q, want t1", d.Tenant)
	}
	if _, ok := v.Get(t.Context(), vault.Key{Tenant: "t1", SessionKey: d.SessionKey, Kind: vault.KindDiscordInteractionToken}); ok {
		t.Fatal("the new t1 finds the token of an interaction routed to the earlier t1")
	}
}

// recreatingVault is a vault.Memory that calls recreate before it stores
// an interaction token.
type recreatingVault struct {
	*vault.Memory
	recreate func()
}

func (v *recreatingVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if k.Kind == vault.KindDiscordInteractionToken {
		v.recreate()
	}
	return v.Memory.Put(ctx, k, e)
}

// TestClaimantMayNotRenameAThreadMadeByGrant: t2, holding channel general
// by grant (Ada wrote there), starts a thread from Ada's message and a
// plain one; t3 then claims general. Neither thread is t3's to rename:
// the anchored one, whose id is Ada's message's, is marked in itself
// (before, only the plain one was marked, and t3 renamed t2's anchored
// thread).
func TestClaimantMayNotRenameAThreadMadeByGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	bind := func(extra ...platform.Binding) {
		t.Helper()
		if err := e.p.Bind(append([]platform.Binding{
			{Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"},
			{Kind: platform.BindUser, ID: userAda, Tenant: "t2"},
		}, extra...)); err != nil {
			t.Fatal(err)
		}
	}
	act := func(tenant string, a map[string]any) contract.Result {
		t.Helper()
		a["metadata"] = map[string]any{}
		body, _ := json.Marshal(a)
		return execute(t, e, tenant, string(body))
	}
	bind()
	e.dispatch(t, "MESSAGE_CREATE", msg("7101", chanGeneral, guildLab, "ada to her agent", false))
	if d := e.sink.Next(t); d.Event == nil || d.Tenant != "t2" {
		t.Fatalf("delivery %+v, want Ada's message to t2", d)
	}
	plain := act("t2", map[string]any{"op": "thread_create", "chat_id": chanGeneral, "thread_name": "t2's"})
	anchored := act("t2", map[string]any{"op": "thread_create", "chat_id": chanGeneral, "message_id": "7101", "thread_name": "Ada's"})
	for _, r := range []contract.Result{plain, anchored} {
		if !r.Success || r.ThreadID == "" {
			t.Fatalf("thread_create on a grant = %+v", r)
		}
	}
	bind(platform.Binding{Kind: platform.BindScope, ID: chanGeneral, Tenant: "t3", Space: guildLab},
		platform.Binding{Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "t3"})
	for _, th := range []string{plain.ThreadID, anchored.ThreadID} {
		if r := act("t3", map[string]any{"op": "thread_rename", "chat_id": chanGeneral, "message_id": th, "thread_name": "hijack"}); r.Code != contract.CodeEgressDeclined {
			t.Errorf("claimant t3's rename of t2's thread %s = %+v, want egress_declined", th, r)
		}
		if ch, _ := e.fake.Channel(th); ch.Name == "hijack" {
			t.Errorf("thread %s renamed %q", th, ch.Name)
		}
	}
}
