package discord

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
	"connector/store"
	"connector/vault"
)

func TestGatewayGuildMessageAutoThreads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.dispatch(t, "MESSAGE_CREATE", msg("7001", chanGeneral, guildLab, "deploy   the <#101> build", true))
	d := e.sink.Next(t)
	if d.Kind != platform.KindInbound || d.Tenant != "t1" || d.Platform != "discord" {
		t.Fatalf("delivery = %+v", d)
	}
	src := d.Event.Source
	if src.ChatID != "7001" || src.ThreadID.Value != "7001" || src.ChatType != "thread" || src.ParentChatID != chanGeneral ||
		src.ScopeID != guildLab || !src.AutoThreadCreated || src.AutoThreadInitialName != "deploy the build" ||
		src.ChatName.Value != "Lab / #general / deploy the build" || src.ChatTopic.Value != "General chat" {
		t.Fatalf("source = %+v", src)
	}
	if d.SessionKey != "agent:main:discord:thread:7001:7001" {
		t.Fatalf("key = %q", d.SessionKey)
	}
	if d.Event.Text != "deploy   the <#101> build" {
		t.Fatalf("text = %q (bot mention must be stripped)", d.Event.Text)
	}
	req, err := e.fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Method == "POST" && r.Path == "/api/v9/channels/101/messages/7001/threads"
	})
	if err != nil || !strings.Contains(string(req.Body), `"name":"deploy the build"`) {
		t.Fatalf("thread creation request = %s, %v", req.Body, err)
	}
}

func TestGatewayDMThreadEditAndUnclaimed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)

	e.dispatch(t, "MESSAGE_CREATE", msg("7002", chanDMAda, "", "hello there", false))
	d := e.sink.Next(t)
	if d.Tenant != "t1" || d.SessionKey != "agent:main:discord:dm:301" || d.Event.Source.ChatName.Value != "ada.l" ||
		d.Event.Source.UserName.Value != "Ada" || d.Event.Source.ScopeID != "" {
		t.Fatalf("DM delivery = %+v / %+v", d, d.Event.Source)
	}

	e.dispatch(t, "MESSAGE_CREATE", msg("7003", threadPlan, guildLab, "status?", true))
	d = e.sink.Next(t)
	src := d.Event.Source
	if src.ChatType != "thread" || src.ChatID != threadPlan || src.ParentChatID != chanGeneral ||
		src.ChatName.Value != "Lab / #general / Deploy plan" || src.ChatTopic.Valid || d.SessionKey != "agent:main:discord:thread:103:103" {
		t.Fatalf("thread source = %+v key %q", src, d.SessionKey)
	}

	edit := msg("7004", chanRandom, guildLab, "fixed typo", true)
	edit["edited_timestamp"] = "2026-01-15T12:05:00.000000+00:00"
	e.dispatch(t, "MESSAGE_UPDATE", edit)
	d = e.sink.Next(t)
	src = d.Event.Source
	if !src.MessageIsEdit || src.ChatType != "group" || src.ChatID != chanRandom || src.AutoThreadCreated ||
		d.SessionKey != "agent:main:discord:group:102:"+userAda {
		t.Fatalf("edit source = %+v key %q", src, d.SessionKey)
	}

	// A guild no tenant claims is dropped, never broadcast.
	e.dispatch(t, "MESSAGE_CREATE", msg("7005", "999", "999", "anyone?", true))
	e.metrics.waitDrop(t, "unclaimed", 1)
	// A guild message without a mention is gated; a system message too.
	e.dispatch(t, "MESSAGE_CREATE", msg("7006", chanRandom, guildLab, "no mention", false))
	e.metrics.waitDrop(t, "not_mentioned", 1)
	e.sink.Empty(t)

	// Tenant t2's guild goes to t2.
	e.dispatch(t, "MESSAGE_CREATE", msg("7007", chanOther, guildOther, "hi", true))
	if d := e.sink.Next(t); d.Tenant != "t2" {
		t.Fatalf("tenant = %q", d.Tenant)
	}
}

func TestGatewayStopBecomesInterrupt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.dispatch(t, "MESSAGE_CREATE", msg("7010", threadPlan, guildLab, "/stop", true))
	d := e.sink.Next(t)
	if d.Kind != platform.KindInterrupt || d.SessionKey != "agent:main:discord:thread:103:103" || d.ChatID != threadPlan || d.Event != nil {
		t.Fatalf("delivery = %+v", d)
	}
}

func TestGatewayTerminalCloseCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts discordtest.Options
		cfg  func(*Config)
		code int
	}{
		{"bad token 4004", discordtest.Options{Token: "another-token"}, nil, 4004},
		{"disallowed intents 4014", discordtest.Options{DisallowedIntents: 1 << 15}, nil, 4014},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.opts, tc.cfg)
			e.start(t)
			var err error
			select {
			case err = <-e.done:
			case <-waitCtx(t).Done():
				t.Fatal("Run kept retrying a terminal close code")
			}
			e.done <- nil // for the cleanup
			var refused *RefusedError
			if !errors.As(err, &refused) || refused.Code != tc.code {
				t.Fatalf("Run = %v, want RefusedError %d", err, tc.code)
			}
			st := e.p.Status()
			if st.Ready || !st.Terminal || !strings.Contains(st.Detail, "refused") {
				t.Fatalf("status = %+v", st)
			}
			if n := e.fake.Identifies(); n != 0 {
				t.Fatalf("identifies = %d", n)
			}
			if n := e.fake.Dials(); n != 1 {
				t.Fatalf("the Gateway was dialled %d times, want 1: a terminal close code must end Run without a retry", n)
			}
		})
	}
}

// TestGatewayBadTokenAtSessionStartLimit: Discord answers GET /gateway/bot
// with 401 for a wrong bot token. That 401 pauses REST (GET /gateway
// included), so the Gateway would never get to close with 4004: Run must
// end at once with the same terminal refusal, dialling nothing.
func TestGatewayBadTokenAtSessionStartLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.URL.Path != "/api/v9/gateway/bot" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"message":"401: Unauthorized","code":0}`))
		return true
	})
	e.start(t)
	var err error
	select {
	case err = <-e.done:
	case <-waitCtx(t).Done():
		t.Fatal("Run kept retrying after Discord answered 401 for the bot token")
	}
	e.done <- nil // for the cleanup
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Code != 4004 {
		t.Fatalf("Run = %v, want RefusedError 4004", err)
	}
	if st := e.p.Status(); st.Ready || !st.Terminal || !strings.Contains(st.Detail, "bot_token") {
		t.Fatalf("status = %+v", st)
	}
	if n := e.fake.Dials(); n != 0 {
		t.Fatalf("the Gateway was dialled %d times, want 0", n)
	}
}

func TestGatewayReconnectResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.fake.CloseGateway(4000, "Unknown error"); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.WaitSession(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	if e.fake.Resumes() != 1 || e.fake.Identifies() != 1 {
		t.Fatalf("identifies %d resumes %d, want 1 and 1", e.fake.Identifies(), e.fake.Resumes())
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("7020", threadPlan, guildLab, "still there?", true))
	if d := e.sink.Next(t); d.Event.Source.MessageID != "7020" {
		t.Fatalf("delivery after resume = %+v", d)
	}
}

// TestGatewayZombieConnectionResumes: a connection whose heartbeats go
// unanswered is closed by discordgo itself (after five intervals), with
// 1000, which would end the session at Discord: the next open's RESUME
// refused, an identify spent and the events in between lost. The session
// must survive it: the next HELLO is answered with a RESUME that Discord
// accepts.
func TestGatewayZombieConnectionResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{HeartbeatInterval: 50}, nil)
	e.startReady(t)
	// A loaded machine may delay an ACK past discordgo's patience on its
	// own: that connection resumes too, so sessions are counted from here.
	sessions := e.fake.Identifies() + e.fake.Resumes()
	if err := e.fake.Zombie(); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.WaitSession(waitCtx(t), sessions+1); err != nil {
		t.Fatal(err)
	}
	if i := e.fake.Identifies(); i != 1 {
		t.Fatalf("%d identifies after a zombie connection, want 1: the session must be resumed (HELLOs answered with %v)", i, e.fake.Handshakes())
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("7022", threadPlan, guildLab, "back?", true))
	if d := e.sink.Next(t); d.Event.Source.MessageID != "7022" {
		t.Fatalf("delivery after the zombie's resume = %+v", d)
	}
}

// TestGatewayNewSessionAfterRefusedResume: Discord closes a RESUME with 4007
// (invalid seq) or 4009 (session timed out) to say "reconnect and start a
// new session". discordgo keeps its session id and sequence, so reconnecting
// it would RESUME the dead session again, forever, each attempt charged to
// the identify budget; the next HELLO must be answered with IDENTIFY.
func TestGatewayNewSessionAfterRefusedResume(t *testing.T) {
	t.Parallel()
	for _, code := range []int{4007, 4009} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, discordtest.Options{}, nil)
			e.startReady(t)
			e.fake.RefuseResumes(code)
			if err := e.fake.CloseGateway(4000, "Unknown error"); err != nil { // resumable
				t.Fatal(err)
			}
			platformtest.WaitUntil(t, "three Gateway handshakes", func() bool { return len(e.fake.Handshakes()) >= 3 })
			if got := e.fake.Handshakes()[:3]; !slices.Equal(got, []int{2, 6, 2}) {
				t.Fatalf("HELLOs answered with ops %v, want [2 6 2]: after close %d the session must be started anew, not resumed", got, code)
			}
			if err := e.fake.WaitSession(waitCtx(t), 2); err != nil {
				t.Fatal(err)
			}
			e.dispatch(t, "MESSAGE_CREATE", msg("7021", threadPlan, guildLab, "new session?", true))
			if d := e.sink.Next(t); d.Event.Source.MessageID != "7021" {
				t.Fatalf("delivery on the new session = %+v", d)
			}
		})
	}
}

// TestGatewayHonoursDiscordSessionStartLimit: the identify budget lives in
// memory, so a process restarted in a crash loop starts it empty; Discord's
// own count (GET /gateway/bot session_start_limit) spans every process. A
// new process finding 950 of 1,000 spent (past MaxIdentifiesPerDay, 900)
// must wait, neither dialling nor IDENTIFYing, until Discord's count
// leaves room.
func TestGatewayHonoursDiscordSessionStartLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	var spent atomic.Bool
	spent.Store(true)
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.URL.Path != "/api/v9/gateway/bot" || !spent.Load() {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"url":"wss://unused","shards":1,"session_start_limit":{"total":1000,"remaining":50,"reset_after":1,"max_concurrency":1}}`))
		return true
	})
	e.start(t)
	asks := func() int {
		n := 0
		for _, r := range e.fake.Requests() {
			if r.Path == "/api/v9/gateway/bot" {
				n++
			}
		}
		return n
	}
	platformtest.WaitUntil(t, "Discord's session start limit asked three times", func() bool { return asks() >= 3 })
	if d, i := e.fake.Dials(), e.fake.Identifies(); d != 0 || i != 0 {
		t.Fatalf("%d dials and %d IDENTIFYs with 950 of Discord's 1000 session starts spent, want none", d, i)
	}
	if st := e.p.Status(); st.Ready || !strings.Contains(st.Detail, "identify budget") {
		t.Fatalf("status while Discord's session starts are spent = %+v", st)
	}
	spent.Store(false)
	if err := e.fake.WaitSession(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
}

// TestGatewayNewSessionAfterLeaseReturns: when the Gateway lease is lost,
// run closes its session with 1000, which ends the session at Discord;
// when the lease comes back the instance must IDENTIFY anew (through the
// session start check), not RESUME the session it closed.
func TestGatewayNewSessionAfterLeaseReturns(t *testing.T) {
	t.Parallel()
	lost := make(chan struct{})
	holder := func(ctx context.Context, _ string, run func(context.Context) error) error {
		term, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lost:
			case <-ctx.Done():
			}
			cancel()
		}()
		_ = run(term) // until the lease is lost
		cancel()
		return run(ctx) // the lease is back
	}
	e := newEnvDeps(t, platform.Deps{Exclusive: holder}, discordtest.Options{}, nil)
	e.startReady(t)
	close(lost)
	if err := e.fake.WaitSession(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	if got := e.fake.Handshakes(); !slices.Equal(got, []int{2, 2}) {
		t.Fatalf("HELLOs answered with ops %v, want [2 2]: the session closed when the lease was lost must not be resumed", got)
	}
}

func TestGatewayHandshakeWatchdog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{Silent: true}, func(c *Config) {
		c.HandshakeTimeout = 100 * 1e6 // 100ms
	})
	e.start(t)
	platformtest.WaitUntil(t, "the handshake given up", func() bool { return e.p.Status().Detail == "gateway connect failed; retrying" })
	if st := e.p.Status(); st.Ready || st.Terminal {
		t.Fatalf("status = %+v", st)
	}
}

func TestGatewayAutoThreadThenFollowUpWithoutMention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.dispatch(t, "MESSAGE_CREATE", msg("7030", chanGeneral, guildLab, "start a plan", true))
	first := e.sink.Next(t)
	// The bot takes part in the thread it created: no mention needed there.
	e.dispatch(t, "MESSAGE_CREATE", msg("7031", "7030", guildLab, "and also this", false))
	d := e.sink.Next(t)
	if d.SessionKey != first.SessionKey || d.Event.Source.ChatName.Value != "Lab / #general / start a plan" {
		t.Fatalf("follow-up key %q (want %q), source %+v", d.SessionKey, first.SessionKey, d.Event.Source)
	}
}

func TestGatewayInteractionAcksThroughCallback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	var in map[string]any
	id := liveID(8400)
	if err := json.Unmarshal(slashBody(id, "gateway-delivered-token", guildLab, chanGeneral), &in); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "INTERACTION_CREATE", in)
	req, err := e.fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Method == "POST" && r.Path == "/api/v9/interactions/"+id+"/gateway-delivered-token/callback"
	})
	if err != nil || string(req.Body) != `{"type":5}` {
		t.Fatalf("callback = %s %v", req.Body, err)
	}
	d := e.sink.Next(t)
	if d.Event.Text != "/model gpt" || d.Tenant != "t1" {
		t.Fatalf("delivery = %+v", d.Event)
	}
	if _, ok := e.vault.Get(t.Context(), vault.Key{Tenant: "t1", SessionKey: d.SessionKey, Kind: vault.KindDiscordInteractionToken}); !ok {
		t.Fatal("token not in the vault")
	}
}

func TestGatewayCacheFollowsChannelEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, func(c *Config) {
		c.Tenants = map[string]TenantConfig{"t1": {AutoThread: new(false)}}
	})
	e.startReady(t)
	e.dispatch(t, "CHANNEL_CREATE", map[string]any{"id": "110", "type": 0, "guild_id": guildLab, "name": "fresh", "topic": "new topic"})
	e.dispatch(t, "MESSAGE_CREATE", msg("7040", "110", guildLab, "hello", true))
	d := e.sink.Next(t)
	if d.Event.Source.ChatName.Value != "Lab / #fresh" || d.Event.Source.ChatTopic.Value != "new topic" {
		t.Fatalf("source = %+v", d.Event.Source)
	}
	e.dispatch(t, "CHANNEL_UPDATE", map[string]any{"id": "110", "type": 0, "guild_id": guildLab, "name": "renamed", "topic": "  "})
	e.dispatch(t, "MESSAGE_CREATE", msg("7041", "110", guildLab, "again", true))
	d = e.sink.Next(t)
	if d.Event.Source.ChatName.Value != "Lab / #renamed" || d.Event.Source.ChatTopic.Valid {
		t.Fatalf("source after update = %+v", d.Event.Source)
	}
	for _, r := range e.fake.Requests() {
		if r.Path == "/api/v9/channels/110" {
			t.Fatal("a cached channel was fetched over REST")
		}
	}
}

// A delivery that hangs in one channel delays that channel's later
// messages only: a channel of the same former ingest shard (102 and 201
// both hashed to shard 2 of 4) is delivered meanwhile, and each channel's
// messages keep Gateway order.
func TestSlowChannelDelaysOnlyItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	held, release := make(chan struct{}), make(chan struct{})
	e.sink.Check = func(d platform.Delivery) error {
		if d.Event != nil && d.Event.MessageID == "7101" {
			close(held)
			<-release
		}
		return nil
	}
	e.startReady(t)
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before Run's cleanup waits for the ingest
	e.dispatch(t, "MESSAGE_CREATE", msg("7101", chanRandom, guildLab, "first", true))
	e.dispatch(t, "MESSAGE_CREATE", msg("7102", chanRandom, guildLab, "second", true))
	e.dispatch(t, "MESSAGE_CREATE", msg("7103", chanOther, guildOther, "elsewhere", true))
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first message of #random was not delivered")
	}
	if d := e.sink.Next(t); d.Event.MessageID != "7103" {
		t.Fatalf("delivered %s while #random's delivery hangs, want 7103 of another channel", d.Event.MessageID)
	}
	free()
	for _, want := range []string{"7101", "7102"} {
		if d := e.sink.Next(t); d.Event.MessageID != want {
			t.Fatalf("delivered %s, want %s: #random's messages in Gateway order", d.Event.MessageID, want)
		}
	}
}

// stallingSink holds every delivery until its context ends, as a relay
// whose store hangs would, and reports how each ended.
type stallingSink struct{ ended chan error }

func (s *stallingSink) Deliver(ctx context.Context, _ platform.Delivery) error {
	<-ctx.Done()
	s.ended <- ctx.Err()
	return ctx.Err()
}

// TestGatewayInteractionProcessingIsBounded: an interaction that arrived
// over the Gateway is processed within the deadline a webhook one is
// (Discord wants its answer within 3 s): a delivery that hangs is given up,
// its slot freed, and the interaction never acknowledged late.
func TestGatewayInteractionProcessingIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	sink := &stallingSink{ended: make(chan error, 1)}
	e.startWith(t, sink)
	platformtest.WaitUntil(t, "the Gateway session up and the guild snapshot loaded", func() bool {
		return e.p.Status().Ready && e.p.snap.loaded.Load()
	})
	var in map[string]any
	if err := json.Unmarshal(slashBody(liveID(8410), "stalled-gateway-token", guildLab, chanGeneral), &in); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "INTERACTION_CREATE", in)
	select {
	case err := <-sink.ended:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the stalled delivery ended with %v, want its processing deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("after 10 s a Gateway interaction's delivery still waits: its processing has no deadline")
	}
	e.p.work.Wait()
	for _, r := range e.fake.Requests() {
		if strings.HasSuffix(r.Path, "/callback") {
			t.Fatalf("an interaction whose delivery was given up was acknowledged: %s %s", r.Method, r.Path)
		}
	}
	if n := len(e.p.slots); n != 0 {
		t.Fatalf("%d processing slots still taken", n)
	}
}

// TestGatewayStopWhileAskingForTheGatewayURL: discordgo's Open asks GET
// /gateway with no context of its own; stopping the platform (shutdown, or
// the Gateway lease lost) while Discord has not answered must end Run at
// once, not after RequestTimeout.
func TestGatewayStopWhileAskingForTheGatewayURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.RequestTimeout = time.Hour })
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.URL.Path != "/api/v9/gateway" {
			return false
		}
		select {
		case asked <- struct{}{}:
		default:
		}
		select { // Discord not answering
		case <-r.Context().Done():
		case <-release:
		}
		return true
	})
	e.start(t)
	t.Cleanup(func() { close(release) }) // before the fake closes
	select {
	case <-asked:
	case <-waitCtx(t).Done():
		t.Fatal("timed out after 10s waiting for GET /gateway")
	}
	e.cancel()
	select {
	case err := <-e.done:
		e.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-waitCtx(t).Done():
		t.Fatal("Run did not return within 10s of its context's end: GET /gateway outlived it")
	}
}

// hangingClaims is an interaction-id store whose Claim hangs until release
// is closed, whatever the caller's deadline, as a stalled Redis's would.
type hangingClaims struct {
	store.Claims
	entered chan string
	release chan struct{}
}

func (c *hangingClaims) Claim(ctx context.Context, key string, expires time.Time) (bool, error) {
	c.entered <- key
	<-c.release
	return c.Claims.Claim(ctx, key, expires)
}

func (c *hangingClaims) waitEntered(t *testing.T, key string) {
	t.Helper()
	select {
	case k := <-c.entered:
		if k != key {
			t.Fatalf("claimed %q, want %q", k, key)
		}
	case <-waitCtx(t).Done():
		t.Fatalf("%s never claimed", key)
	}
}

// TestGatewayInteractionAdmissionOffTheReader: an interaction's admission
// (its id claimed in the store, a grant, the wait for a slot) must not run
// on the Gateway reader, or a slow store stalls every message behind it.
// Past the admission bound a further interaction is dropped, counted and
// logged (Discord then shows its user a failure), and never claimed.
func TestGatewayInteractionAdmissionOffTheReader(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	claims := &hangingClaims{Claims: e.p.seen, entered: make(chan string, 8), release: make(chan struct{})}
	e.p.seen = claims
	e.p.admitting = make(chan struct{}, 2)
	e.startReady(t)
	var once sync.Once
	release := func() { once.Do(func() { close(claims.release) }) }
	t.Cleanup(release) // before Run's cleanup, which waits for the claims
	interaction := func(n int) string {
		id := liveID(n)
		var in map[string]any
		if err := json.Unmarshal(slashBody(id, "token-"+id, guildLab, chanGeneral), &in); err != nil {
			t.Fatal(err)
		}
		e.dispatch(t, "INTERACTION_CREATE", in)
		return id
	}
	first := interaction(8501)
	claims.waitEntered(t, "discord/interaction/"+first)
	e.dispatch(t, "MESSAGE_CREATE", msg("7031", threadPlan, guildLab, "behind a slow claim?", true))
	if d := e.sink.Next(t); d.Event.Source.MessageID != "7031" {
		t.Fatalf("delivery = %+v, want message 7031 while the interaction's claim hangs", d.Event)
	}
	second := interaction(8502)
	claims.waitEntered(t, "discord/interaction/"+second)
	over := interaction(8503) // over the bound of 2
	e.metrics.waitDrop(t, "overloaded", 1)
	e.logs.WaitFor(t, over)
	release()
	for _, id := range []string{first, second} {
		if _, err := e.fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
			return r.Path == "/api/v9/interactions/"+id+"/token-"+id+"/callback"
		}); err != nil {
			t.Fatalf("interaction %s not acknowledged after its claim: %v", id, err)
		}
	}
	select {
	case k := <-claims.entered:
		t.Fatalf("%s claimed: an interaction past the admission bound must be dropped before its claim", k)
	default:
	}
}

// TestGatewayInteractionCallbackIsBounded: Discord honours an
// interaction's callback only within 3 s of the interaction, so a
// callback to a Discord that does not answer is given up then, whether it
// carries the deferred answer (a slash command) or the only one (an
// autocomplete), not held until RequestTimeout or shutdown.
func TestGatewayInteractionCallbackIsBounded(t *testing.T) {
	t.Parallel()
	for name, kind := range map[string]int{"deferred": 2, "autocomplete": 4} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, discordtest.Options{}, func(c *Config) { c.RequestTimeout = time.Hour })
			ended := make(chan struct{})
			release := make(chan struct{})
			e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
				if !strings.HasSuffix(r.URL.Path, "/callback") {
					return false
				}
				select { // Discord not answering
				case <-r.Context().Done():
					close(ended)
				case <-release:
				}
				return true
			})
			e.startReady(t)
			t.Cleanup(func() { close(release) }) // before the fake closes
			var in map[string]any
			if err := json.Unmarshal(slashBody(liveID(8420), "token-8420", guildLab, chanGeneral), &in); err != nil {
				t.Fatal(err)
			}
			in["type"] = kind // an application command, or its autocomplete
			e.dispatch(t, "INTERACTION_CREATE", in)
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("after 10 s the interaction's callback still waits for Discord: it has no deadline of its own")
			}
			if e.p.running() == nil {
				t.Fatal("Run stopped: the callback must have been given up by its own deadline")
			}
		})
	}
}

// TestGatewayNewSessionAfterLiveClose: Discord closes a live session with
// 4009 (session timed out) or 4007 (invalid seq), which ends it at Discord.
// The Disconnect event carries no close code, so the next HELLO is answered
// with a RESUME; Discord answers that with op 9, which discordgo answers
// with IDENTIFY on the same connection: a new session that delivers.
func TestGatewayNewSessionAfterLiveClose(t *testing.T) {
	t.Parallel()
	for _, code := range []int{4007, 4009} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, discordtest.Options{}, nil)
			e.startReady(t)
			if err := e.fake.CloseGateway(code, "gone"); err != nil {
				t.Fatal(err)
			}
			if err := e.fake.WaitSession(waitCtx(t), 2); err != nil {
				t.Fatal(err)
			}
			if i, r := e.fake.Identifies(), e.fake.Resumes(); i != 2 || r != 0 {
				t.Fatalf("identifies %d resumes %d after a live close %d, want 2 and 0", i, r, code)
			}
			platformtest.WaitUntil(t, "the new session up", func() bool { return e.p.Status().Ready })
			e.dispatch(t, "MESSAGE_CREATE", msg("7023", threadPlan, guildLab, "new session?", true))
			if d := e.sink.Next(t); d.Event.Source.MessageID != "7023" {
				t.Fatalf("delivery on the new session = %+v", d)
			}
		})
	}
}

// TestGatewayInteractionPastItsWindow: an interaction the Gateway delivers
// over 3 s after Discord made it (replayed after a RESUME) can no longer
// be acknowledged, and its user, shown a failure, may have tried again: it
// is dropped (interaction_expired), neither delivered nor called back. It
// was delivered, so the agent got the turn twice. A live one is delivered.
func TestGatewayInteractionPastItsWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	var in map[string]any
	stale := idAt(time.Now().Add(-4*time.Second), 8430)
	if err := json.Unmarshal(slashBody(stale, "stale-token", guildLab, chanGeneral), &in); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "INTERACTION_CREATE", in)
	e.metrics.waitDrop(t, "interaction_expired", 1)
	live := liveID(8431)
	if err := json.Unmarshal(slashBody(live, "live-token", guildLab, chanGeneral), &in); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "INTERACTION_CREATE", in)
	if d := e.sink.Next(t); d.Event == nil || d.Event.MessageID != live {
		t.Fatalf("delivery = %+v, want the live interaction %s alone", d.Event, live)
	}
	if _, err := e.fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Path == "/api/v9/interactions/"+live+"/live-token/callback"
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.fake.Requests() {
		if strings.Contains(r.Path, stale) {
			t.Fatalf("the expired interaction called back: %s %s", r.Method, r.Path)
		}
	}
}
