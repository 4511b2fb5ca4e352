package discord

import (
	"connector/internal/leakcheck"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
	"connector/vault"
)

// webhookServer serves the platform's routes on loopback.
func (e *env) webhookServer(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	for pattern, h := range e.p.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/discord/interactions"
}

func TestInteractionsWebhook(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	url := e.webhookServer(t)
	now := time.Now()
	token := "aW50ZXJhY3Rpb24-secret-token-1"

	// PING -> PONG.
	ping := []byte(`{"id":"8000","application_id":"9000","type":1,"token":"x","version":1}`)
	if code, body := post(t, discordtest.InteractionRequest(url, e.priv, now, ping)); code != 200 || body != `{"type":1}` {
		t.Fatalf("PING = %d %s", code, body)
	}

	// A valid slash command: deferred ack, inbound without the token, token in the vault.
	body := slashBody("8001", token, guildLab, chanGeneral)
	code, ack := post(t, discordtest.InteractionRequest(url, e.priv, now, body))
	if code != 200 || ack != `{"type":5}` {
		t.Fatalf("slash = %d %s", code, ack)
	}
	d := e.sink.Next(t)
	if d.Kind != platform.KindInbound || d.Tenant != "t1" || d.Event.Text != "/model gpt" || d.Event.MessageType != contract.MessageCommand {
		t.Fatalf("delivery = %+v %+v", d, d.Event)
	}
	src := d.Event.Source
	if src.ChatID != chanGeneral || src.ChatType != "group" || src.ChatName.Value != "Lab / #general" ||
		src.UserName.Value != "Captain" || src.ScopeID != guildLab || src.ChatTopic.Value != "General chat" {
		t.Fatalf("source = %+v", src)
	}
	frame := contract.AppendInboundEvent(nil, "", d.Event.AppendJSON(nil))
	if strings.Contains(string(frame), token) {
		t.Fatalf("inbound frame carries the interaction token: %s", frame)
	}
	entry, ok := e.vault.Get(t.Context(), vault.Key{Tenant: "t1", SessionKey: d.SessionKey, Kind: vault.KindDiscordInteractionToken})
	if !ok || entry.Value.Reveal() != token || entry.Ref != "9000/"+chanGeneral {
		t.Fatalf("vault entry = %v %v", entry, ok)
	}
	if _, ok := e.vault.Get(t.Context(), vault.Key{Tenant: "t2", SessionKey: d.SessionKey, Kind: vault.KindDiscordInteractionToken}); ok {
		t.Fatal("another tenant found the token")
	}

	// Replayed id -> 409 "duplicate interaction" (docs/security.md), no
	// second delivery.
	if code, text := post(t, discordtest.InteractionRequest(url, e.priv, now, body)); code != http.StatusConflict || !strings.Contains(text, "duplicate interaction") {
		t.Fatalf("replay = %d %q", code, text)
	}
	// Bad signature -> 401.
	bad := discordtest.InteractionRequest(url, e.priv, now, slashBody("8002", token, guildLab, chanGeneral))
	bad.Header.Set("X-Signature-Ed25519", strings.Repeat("ab", 64))
	if code, _ := post(t, bad); code != http.StatusUnauthorized {
		t.Fatalf("bad signature = %d", code)
	}
	// Tampered body with the original signature -> 401.
	tampered := discordtest.InteractionRequest(url, e.priv, now, slashBody("8003", token, guildLab, chanGeneral))
	tampered.Body = io.NopCloser(strings.NewReader(string(slashBody("8003", token, guildOther, chanOther))))
	tampered.ContentLength = -1
	if code, _ := post(t, tampered); code != http.StatusUnauthorized {
		t.Fatalf("tampered = %d", code)
	}
	// Stale (6 minutes) and future timestamps -> 401, even when signed.
	for _, at := range []time.Time{now.Add(-6 * time.Minute), now.Add(6 * time.Minute)} {
		if code, _ := post(t, discordtest.InteractionRequest(url, e.priv, at, slashBody("8004", token, guildLab, chanGeneral))); code != http.StatusUnauthorized {
			t.Fatalf("stale/future = %d", code)
		}
	}
	// Missing headers -> 401.
	plain, _ := http.NewRequest("POST", url, strings.NewReader(string(body)))
	if code, _ := post(t, plain); code != http.StatusUnauthorized {
		t.Fatalf("unsigned = %d", code)
	}
	// Oversized -> 413.
	huge := []byte(fmt.Sprintf(`{"id":"8005","type":2,"pad":%q}`, strings.Repeat("x", DefaultMaxInteractionBytes)))
	if code, _ := post(t, discordtest.InteractionRequest(url, e.priv, now, huge)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("huge = %d", code)
	}
	// Signed but not an interaction -> 400.
	if code, _ := post(t, discordtest.InteractionRequest(url, e.priv, now, []byte(`[1,2]`))); code != http.StatusBadRequest {
		t.Fatalf("garbage = %d", code)
	}
	// A guild no tenant claims: ephemeral "not connected", no delivery, no token kept.
	code, ack = post(t, discordtest.InteractionRequest(url, e.priv, now, slashBody("8006", "tok-unclaimed", "999", "998")))
	if code != 200 || !strings.Contains(ack, `"type":4`) || !strings.Contains(ack, `"flags":64`) {
		t.Fatalf("unclaimed = %d %s", code, ack)
	}
	e.metrics.waitDrop(t, "unclaimed", 1)
	e.sink.Empty(t)
}

// TestInteractionRoutedUnderItsCreation: t1 is deleted and created again
// while a slash command routed to the earlier t1 waits for a processing
// slot: it is delivered as routed under the earlier t1's creation (which
// the relay drops), not the new t1's.
func TestInteractionRoutedUnderItsCreation(t *testing.T) {
	clk := clocktest.New(time.Now())
	earlier, again := clk.Now().Add(-2*time.Hour), clk.Now().Add(-time.Hour)
	var created atomic.Pointer[time.Time]
	created.Store(&earlier)
	since := func(tenant string) time.Time {
		if tenant == "t1" {
			return *created.Load()
		}
		return time.Time{}
	}
	e := newEnvDeps(t, platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: since})}, discordtest.Options{}, nil)
	e.startReady(t)
	url := e.webhookServer(t)
	for range cap(e.p.slots) {
		e.p.slots <- struct{}{}
	}
	done := make(chan string, 1)
	go func() {
		_, ack := post(t, discordtest.InteractionRequest(url, e.priv, time.Now(), slashBody("8101", "tok-8101", guildLab, chanGeneral)))
		done <- ack
	}()
	// The slot wait signals nothing (and other timers arm on the clock
	// meanwhile): the test waits until the request's goroutine is parked
	// in it, its route decided.
	deadline := time.Now().Add(10 * time.Second)
	for !leakcheck.Parked("connector/platform/discord.(*Platform).acquireSlot(") {
		if time.Now().After(deadline) {
			t.Fatal("timed out after 10s waiting for the slash command to wait for a processing slot")
		}
		time.Sleep(time.Millisecond) // polling: a goroutine parking signals nothing
	}
	created.Store(&again)
	<-e.p.slots
	if d := e.sink.Next(t); !d.Created.Equal(earlier) {
		t.Fatalf("delivered as routed under t1's creation %v, want %v (the earlier t1's, it was routed to)", d.Created, earlier)
	}
	if ack := <-done; ack != `{"type":5}` {
		t.Fatalf("the slash command was answered %s", ack)
	}
	for range cap(e.p.slots) - 1 {
		<-e.p.slots
	}
}

func TestInteractionComponentsAndDM(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	url := e.webhookServer(t)
	now := time.Now()

	comp := []byte(`{"id":"8100","application_id":"9000","type":3,"token":"tok-c","guild_id":"100","channel_id":"103",
		"channel":{"id":"103","type":11,"guild_id":"100","parent_id":"101","name":"Deploy plan"},
		"message":{"id":"7777","channel_id":"103"},
		"data":{"custom_id":"hp1:a1b2c3.0000beef:once","component_type":2},
		"member":{"nick":null,"roles":[],"user":{"id":"501","username":"ada.l","global_name":"Ada"}}}`)
	code, ack := post(t, discordtest.InteractionRequest(url, e.priv, now, comp))
	if code != 200 || ack != `{"type":6}` {
		t.Fatalf("component = %d %s", code, ack)
	}
	d := e.sink.Next(t)
	pr := d.Event.PromptResponse
	if pr == nil || pr.PromptID != "a1b2c3.0000beef" || pr.OptionID != "once" || pr.PromptMessageID != "7777" || d.Event.Text != "/once" {
		t.Fatalf("prompt response = %+v text %q", pr, d.Event.Text)
	}
	if d.SessionKey != "agent:main:discord:thread:103:103" || d.Event.Source.ChatName.Value != "Lab / #Deploy plan" {
		t.Fatalf("key %q source %+v", d.SessionKey, d.Event.Source)
	}

	code, _ = post(t, discordtest.InteractionRequest(url, e.priv, now, slashBody("8101", "tok-dm", "", chanDMAda)))
	if code != 200 {
		t.Fatalf("dm slash = %d", code)
	}
	d = e.sink.Next(t)
	if d.Tenant != "t1" || d.SessionKey != "agent:main:discord:dm:301" || d.Event.Source.ChatName != (sessionStr("")) {
		t.Fatalf("dm = %+v %+v", d, d.Event.Source)
	}
}

func TestInteractionsNotRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	url := e.webhookServer(t)
	code, _ := post(t, discordtest.InteractionRequest(url, e.priv, time.Now(), slashBody("8200", "tok", guildLab, chanGeneral)))
	if code != http.StatusServiceUnavailable {
		t.Fatalf("before Run = %d", code)
	}
}

// An interaction is confirmed to Discord (the deferred response) only once
// it was delivered: when the sink refuses it, the webhook answers 503 and a
// Gateway interaction gets no callback.
func TestInteractionConfirmedOnlyOnceDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	url := e.webhookServer(t)
	e.sink.RefuseAll(true)
	body := slashBody("8101", "refused-webhook-token", guildLab, chanGeneral)
	if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, time.Now(), body)); code != http.StatusServiceUnavailable {
		t.Fatalf("undeliverable slash = %d %s, want 503", code, ack)
	}

	var in map[string]any
	if err := json.Unmarshal(slashBody(liveID(8102), "refused-gateway-token", guildLab, chanRandom), &in); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "INTERACTION_CREATE", in)
	platformtest.WaitUntil(t, "the Gateway interaction's delivery", func() bool { return e.sink.Calls() == 2 })
	e.p.work.Wait() // its processing ended: it would have called back by now
	for _, r := range e.fake.Requests() {
		if strings.HasSuffix(r.Path, "/callback") {
			t.Fatalf("an undelivered Gateway interaction was acknowledged: %s %s", r.Method, r.Path)
		}
	}
}

// stallingGrants is a vault whose chat-grant writes hang until their
// context ends, as a store that stopped answering would.
type stallingGrants struct {
	*vault.Memory
	bounded chan bool // whether each stalled write had a deadline
}

func (v *stallingGrants) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if k.Kind != vault.KindChatGrant {
		return v.Memory.Put(ctx, k, e)
	}
	_, ok := ctx.Deadline()
	v.bounded <- ok
	<-ctx.Done()
	return ctx.Err()
}

// TestInteractionAnsweredWithinDiscordsWait: everything before an
// interaction's answer (routing, with the grant an author link writes; the
// wait for a slot; the processing) runs under the one deadline Discord's
// 3 s leave, so a store that hangs never holds the answer past it.
func TestInteractionAnsweredWithinDiscordsWait(t *testing.T) {
	t.Parallel()
	sv := &stallingGrants{Memory: vault.NewMemory(vault.Config{}), bounded: make(chan bool, 4)}
	e := newEnvDeps(t, platform.Deps{Vault: sv}, discordtest.Options{}, nil)
	e.startReady(t)
	// guildLab is no tenant's now: Ada's interaction there reaches her
	// tenant by author link, which grants it the channel.
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	url := e.webhookServer(t)
	req := discordtest.InteractionRequest(url, e.priv, time.Now(), byUser(t, slashBody("8420", "stalled-grant-token", guildLab, chanGeneral), userAda))
	answered := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	select {
	case code := <-answered:
		if code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Fatalf("answer = %d", code)
		}
	case <-time.After(10 * time.Second):
		e.cancel() // ends the stalled write, so the server can close
		t.Fatal("no answer to the interaction after 10 s: its grant write is not bounded by Discord's wait")
	}
	if !<-sv.bounded {
		t.Fatal("the grant was written without a deadline")
	}
}

// TestReplayAtTheEdgeOfTheWindow: an interaction signed InteractionSkew
// ahead of the clock still verifies InteractionSkew after that timestamp,
// 2×InteractionSkew after it first arrived; its id must still be
// remembered then, so the replay is refused 409.
func TestReplayAtTheEdgeOfTheWindow(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, discordtest.Options{}, nil)
	e.startReady(t)
	url := e.webhookServer(t)
	skew := e.p.cfg.InteractionSkew
	stamp := clk.Now().Add(skew)
	body := slashBody("8440", "edge-token", guildLab, chanGeneral)
	if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, stamp, body)); code != http.StatusOK {
		t.Fatalf("first = %d %s", code, ack)
	}
	e.sink.Next(t)
	clk.Advance(2 * skew)
	if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, stamp, body)); code != http.StatusConflict {
		t.Fatalf("replay %v after the first = %d %s, want 409", 2*skew, code, ack)
	}
}

// parkedGrants is a vault whose first chat-grant write waits for release,
// counting the writes made after Run returned.
type parkedGrants struct {
	*vault.Memory
	parked   chan struct{} // closed when the grant write waits
	release  chan struct{}
	returned atomic.Bool // set once Run returned
	late     atomic.Int32
}

func (v *parkedGrants) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if v.returned.Load() {
		v.late.Add(1)
	}
	if k.Kind == vault.KindChatGrant {
		close(v.parked)
		<-v.release
	}
	return v.Memory.Put(ctx, k, e)
}

// TestRunWaitsForAnInteractionItAdmitted: an interaction taken while Run
// runs and still being routed when Run stops (its grant write hangs) is
// work Run waits for: the grant write goes on once Run waits for it
// (Platform.stop), or once Run returned if it did not, and nothing of the
// interaction (its token's vault write) happens after Run returned.
func TestRunWaitsForAnInteractionItAdmitted(t *testing.T) {
	t.Parallel()
	v := &parkedGrants{Memory: vault.NewMemory(vault.Config{}), parked: make(chan struct{}), release: make(chan struct{})}
	e := newEnvDeps(t, platform.Deps{Vault: v}, discordtest.Options{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = e.p.Run(ctx, e.sink)
		v.returned.Store(true)
	}()
	platformtest.WaitUntil(t, "the guild snapshot loaded", func() bool { return e.p.snap.loaded.Load() })
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	url := e.webhookServer(t)
	req := discordtest.InteractionRequest(url, e.priv, time.Now(), byUser(t, slashBody("8450", "stopping-token", guildLab, chanGeneral), userAda))
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-v.parked
	cancel()
	platformtest.WaitUntil(t, "Run returned or waiting for the interaction", func() bool {
		select {
		case <-ran:
			return true
		default:
			return waitingIn("connector/platform/discord.(*Platform).stop(")
		}
	})
	close(v.release)
	<-answered
	<-ran
	if n := v.late.Load(); n != 0 {
		t.Fatalf("%d vault writes of the interaction after Run returned", n)
	}
}

// waitingIn reports whether a goroutine is blocked in sync.WaitGroup.Wait
// inside fn, a function as goroutine stacks name it.
func waitingIn(fn string) bool {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "[sync.WaitGroup.Wait") && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}

// refusingTokens is a vault that cannot store interaction tokens, as a
// store that is down.
type refusingTokens struct{ *vault.Memory }

func (v refusingTokens) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if k.Kind == vault.KindDiscordInteractionToken {
		return errors.New("store unavailable")
	}
	return v.Memory.Put(ctx, k, e)
}

// TestInteractionNotConfirmedWithoutItsToken: the deferred response goes
// out only once the token is in the vault (docs/durability.md): an
// interaction whose token could not be stored is answered 503 and not
// delivered, since the agent could never answer it.
func TestInteractionNotConfirmedWithoutItsToken(t *testing.T) {
	t.Parallel()
	e := newEnvDeps(t, platform.Deps{Vault: refusingTokens{vault.NewMemory(vault.Config{})}}, discordtest.Options{}, nil)
	e.startReady(t)
	url := e.webhookServer(t)
	body := slashBody("8460", "unstored-token", guildLab, chanGeneral)
	if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, time.Now(), body)); code != http.StatusServiceUnavailable {
		t.Fatalf("slash whose token was not stored = %d %s, want 503", code, ack)
	}
	if n := e.sink.Calls(); n != 0 {
		t.Fatalf("%d deliveries of an interaction whose token was not stored", n)
	}
}
