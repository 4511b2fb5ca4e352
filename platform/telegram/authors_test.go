package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/telegram/telegramtest"
	"connector/store"
	"connector/vault"
)

// TestOwnershipOrder: in a chat bound to a tenant (t2's group) every
// message is that tenant's: its own linked user's without the mention it
// requires (the owner floor), a user linked to t1 gated as anyone (never
// t1's), and t3's claim of the group is set aside; elsewhere a linked
// user's group message and DM reach their tenant (t1), which may then act
// there; in a chat claimed with an allow-list only the listed user reaches
// the claimant, others (a user linked to t1 included) are dropped.
func TestOwnershipOrder(t *testing.T) {
	e := webhookEnv(t, func(c *Config) {
		c.Tenants = map[string]TenantConfig{"t2": {RequireMention: new(true)}}
	})
	bindings := []platform.Binding{
		{Kind: platform.BindUser, ID: "501", Tenant: "t1"},
		{Kind: platform.BindUser, ID: "505", Tenant: "t2"},
		{Kind: platform.BindScope, ID: "-100777", Tenant: "t3"},
		{Kind: platform.BindScope, ID: "-1001234567890", Tenant: "t3"}, // t2's group
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAllowList, Tenant: "t3"},
		{Kind: platform.BindAllow, ID: "502", Tenant: "t3"},
		{Kind: platform.BindAllow, ID: "506", Tenant: "t3"},
	}
	for chat, tenant := range testChats {
		bindings = append(bindings, platform.Binding{Kind: platform.BindChat, ID: chat, Tenant: tenant})
	}
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	granted := func(chat, tenant string) bool {
		t.Helper()
		ok, err := e.p.ChatGranted(ctx, chat, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return ok != platform.HoldNone
	}
	// Before any message: a linked user's DM and a claimed chat are
	// granted from the table alone (any instance, after a restart); a
	// claim of t2's group is not.
	if !granted("501", "t1") || !granted("-100777", "t3") || granted("-100777", "t1") || granted("503", "t1") || granted("-1001234567890", "t3") {
		t.Fatal("grants from the ownership table are wrong")
	}
	n := 0
	say := func(chat int64, typ string, from int64, text string) {
		t.Helper()
		n++
		raw := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1767225300,"chat":{"id":%d,"type":%q,"title":"G","first_name":"U"},"from":{"id":%d,"is_bot":false,"first_name":"U"},"text":%q}}`,
			n, n, chat, typ, from, text)
		if code := e.post(t, []byte(raw)); code != http.StatusOK {
			t.Fatalf("webhook answered %d", code)
		}
	}
	expect := func(tenant, text string) {
		t.Helper()
		d := e.sink.Next(t)
		if d.Tenant != tenant || d.Event == nil || d.Event.Text != text {
			t.Fatalf("delivery %s %+v, want %q to %s", d.Tenant, d.Event, text, tenant)
		}
		e.sink.Empty(t)
	}
	say(-1001234567890, "supergroup", 505, "t2's user, no mention")
	expect("t2", "t2's user, no mention")
	say(-1001234567890, "supergroup", 501, "t1's user in t2's group, no mention")
	say(-1001234567890, "supergroup", 506, "t3's allowed user in t2's group, no mention")
	say(-1001234567890, "supergroup", 503, "unlinked, no mention")
	e.sink.Empty(t)
	say(-100888, "supergroup", 501, "t1's user in an unbound group")
	expect("t1", "t1's user in an unbound group")
	say(501, "private", 501, "my DM")
	expect("t1", "my DM")
	say(-100777, "group", 502, "allowed")
	expect("t3", "allowed")
	say(-100777, "group", 504, "not allowed")
	say(-100777, "group", 501, "t1's user in t3's claim")
	e.sink.Empty(t)
	if !granted("501", "t1") || granted("501", "t2") || !granted("-100888", "t1") || granted("-100888", "t2") {
		t.Fatal("t1 is not granted its user's DM and group, or t2 is")
	}
	if granted("-100777", "t1") || granted("-1001234567890", "t1") {
		t.Fatal("t1 is granted a chat claimed by t3 or bound to t2")
	}
}

// stalledLinker is a Linker whose redemptions wait until release is
// closed (a store that answers slowly), telling entered of each.
type stalledLinker struct {
	entered chan string
	release chan struct{}
}

func (l *stalledLinker) Link(ctx context.Context, _, user, _ string) (string, time.Time, error) {
	l.entered <- user
	select {
	case <-l.release:
	case <-ctx.Done():
	}
	return "", time.Time{}, platform.ErrLinkRefused
}

// TestLinkDMsDoNotHoldUpOtherTenants (issue 22): while a "/link" DM's
// redemption is stalled, the webhook has already answered it, and another
// tenant's update, in a chat that shares its delivery stripe (chat ids
// equal modulo 64), is delivered at once; the link is answered in the DM
// once the redemption returns.
func TestLinkDMsDoNotHoldUpOtherTenants(t *testing.T) {
	linker := &stalledLinker{entered: make(chan string, 4), release: make(chan struct{})}
	e := newWebhookEnv(t, nil)
	e.p.deps.Linker = linker
	e.startWebhook(t)
	released := false
	release := func() {
		if !released {
			released = true
			close(linker.release)
		}
	}
	t.Cleanup(release) // before Run's cleanup: a stalled redemption ends

	const linkUser = 64*1000 + 46 // its DM shares stripe 46 with t2's chat -1001234567890
	dm := fmt.Sprintf(`{"update_id":1,"message":{"message_id":1,"date":1767225300,"chat":{"id":%d,"type":"private","first_name":"M"},"from":{"id":%d,"is_bot":false,"first_name":"M"},"text":"/link NOT-A-CODE"}}`, linkUser, linkUser)
	answered := make(chan int, 1)
	go func() {
		code, _ := telegramtest.PostUpdate(context.Background(), http.DefaultClient, e.hook, testSecret, []byte(dm))
		answered <- code
	}()
	select {
	case <-linker.entered:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the /link DM's redemption to start", waitFor)
	}
	other := `{"update_id":2,"message":{"message_id":2,"date":1767225300,"chat":{"id":-1001234567890,"type":"supergroup","title":"Hermes Users"},"from":{"id":777,"is_bot":false,"first_name":"B"},"text":"@hermes_test_bot hello from t2"}}`
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if code, err := telegramtest.PostUpdate(ctx, http.DefaultClient, e.hook, testSecret, []byte(other)); err != nil || code != http.StatusOK {
		t.Fatalf("t2's update while a /link redemption is stalled: %d, %v; want 200 at once", code, err)
	}
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event == nil || !strings.Contains(d.Event.Text, "hello from t2") {
		t.Fatalf("delivery %s %+v, want t2's update", d.Tenant, d.Event)
	}
	select {
	case code := <-answered:
		if code != http.StatusOK {
			t.Fatalf("the /link DM was answered %d, want 200", code)
		}
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the webhook to answer the /link DM", waitFor)
	}
	release()
	if calls := e.calls(t, "sendMessage", 1); calls[0].Form["chat_id"] != strconv.Itoa(linkUser) || calls[0].Form["text"] != platform.LinkFailReply {
		t.Fatalf("reply %v, want the refusal in the DM", calls[0].Form)
	}
	e.sink.Empty(t)
}

// TestGrantUnknownWhileTheStoreIsDown: t2 holds the unclaimed group by
// grant, made on another instance and kept in Redis. With Redis down, this
// instance, which never held the grant, answers t2's send there
// unavailable, which the gateway may retry (before, a grant that could not
// be looked up counted as none: egress_declined, final); t1's send into
// its own chat still goes out. t2's send into t1's chat is answered as
// into the group, so the answer tells t2 nothing of whose a chat is.
func TestGrantUnknownWhileTheStoreIsDown(t *testing.T) {
	const group = "-1007778889990"
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	elsewhere := platform.NewGrants(platformName, vault.NewDurable(st.Capabilities(), vault.Config{}), nil, nil)
	elsewhere.Add(t.Context(), group, "", "t2", time.Time{})
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewDurable(st.Capabilities(), vault.Config{})}, nil)
	srv.Kill(t)
	if r := e.act(t, "t2", sendAction(group, "hi")); r.Code != contract.CodeUnavailable {
		t.Errorf("t2's send on its grant with the store down = %+v, want unavailable", r)
	}
	if r := e.act(t, "t1", sendAction(telegramtest.ChatDevForum, "hi")); !r.Success {
		t.Errorf("t1's send into its own chat with the store down = %+v", r)
	}
	if r := e.act(t, "t2", sendAction(telegramtest.ChatDevForum, "hi")); r.Code != contract.CodeUnavailable {
		t.Errorf("t2's send into t1's chat with the store down = %+v, want unavailable as into the group", r)
	}
}

// TestPressWhosePosterIsUnknownWhileTheStoreIsDown: t1 prompted in a
// group no binding or claim covers (on another instance, which recorded
// its poster in Redis), and user 501, linked to t1, presses it here while
// Redis is down. The webhook answers 503, so Telegram retries, and once
// Redis is back the press is t1's answer. Before, it was dropped for good
// (prompt_not_owned) and answered 200, while every message then was
// retried.
func TestPressWhosePosterIsUnknownWhileTheStoreIsDown(t *testing.T) {
	const group = -1007778889991
	srv := redistest.Start(t, redistest.Options{AppendFsync: "always"})
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	elsewhere := platform.NewGrants(platformName, vault.NewDurable(st.Capabilities(), vault.Config{}), nil, nil)
	elsewhere.Prompted(t.Context(), strconv.Itoa(group), "77", "t1", time.Time{})
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewDurable(st.Capabilities(), vault.Config{})}, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	e.startWebhook(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	press := groupPress(e, 884300001, group, 77)
	srv.Kill(t)
	if code := e.post(t, press); code != http.StatusServiceUnavailable {
		t.Fatalf("the press with the store down was answered %d, want 503 (retried)", code)
	}
	e.sink.Empty(t)
	srv.Restart(t)
	if code := e.post(t, press); code != http.StatusOK {
		t.Fatalf("the press again with the store back was answered %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil {
		t.Fatalf("the press delivered to %q as %+v, want t1's answer", d.Tenant, d.Event)
	}
}

// groupPress is update id: user 501's press of the hp1 button of message
// msgID, which the bot posted in the supergroup group.
func groupPress(e *env, id int64, group, msgID int) []byte {
	return fmt.Appendf(nil, `{"update_id":%d,"callback_query":{"id":"cq%d","chat_instance":"-4817263540","data":"hp1:f00dba.1234abcd:once",`+
		`"from":{"id":501,"is_bot":false,"first_name":"Ada"},"message":{"message_id":%d,"date":%d,"chat":{"id":%d,"type":"supergroup","title":"G"},`+
		`"text":"Run?","from":{"id":%d,"is_bot":true,"first_name":"Hermes"}}}}`, id, id, msgID, time.Now().Unix(), group, e.fake.BotID)
}

// TestPolledPressWhosePosterIsUnknownWhileTheStoreIsDown: as above, when
// polling, with the press in one getUpdates answer with a DM: the DM is
// delivered, and the press is retried until Redis is back, then t1's
// answer. Before, it was dropped and confirmed by the next poll.
func TestPolledPressWhosePosterIsUnknownWhileTheStoreIsDown(t *testing.T) {
	const group = -1007778889992
	srv := redistest.Start(t, redistest.Options{AppendFsync: "always"})
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	elsewhere := platform.NewGrants(platformName, vault.NewDurable(st.Capabilities(), vault.Config{}), nil, nil)
	elsewhere.Prompted(t.Context(), strconv.Itoa(group), "78", "t1", time.Time{})
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewDurable(st.Capabilities(), vault.Config{})}, nil)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	close(release)
	sink := &batchSink{Sink: e.sink, batches: make(chan [2]int, 4), release: release, polls: func() int { return 0 }}
	srv.Kill(t)
	e.fake.Enqueue([]byte(`{"update_id":884300010,"message":{"message_id":5,"date":1767225300,"chat":{"id":501,"type":"private","first_name":"Ada"},` +
		`"from":{"id":501,"is_bot":false,"first_name":"Ada"},"text":"hi"}}`))
	e.fake.Enqueue(groupPress(e, 884300011, group, 78))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Error("Run did not return after cancel")
		}
	})
	if d := e.sink.Next(t); d.Event == nil || d.Event.Text != "hi" {
		t.Fatalf("first delivery %+v, want the DM", d.Event)
	}
	e.sink.Empty(t)
	srv.Restart(t)
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil {
		t.Fatalf("the press delivered to %q as %+v, want t1's answer", d.Tenant, d.Event)
	}
}

// TestPolledPressWhosePosterIsUnreadable: the record of t1's prompt's
// poster cannot be read from the store, which answers everything else. The polled press is retried for a
// minute (posterWait), then dropped (poster_unknown), and the next poll's
// DM is delivered. Before, the press was retried for as long as the
// connector ran, and the long poll, every chat's updates, waited for it.
func TestPolledPressWhosePosterIsUnreadable(t *testing.T) {
	const group = -1007778889993
	caps, _ := unreadablePoster(t, group, "79")
	start := time.Now()
	clk := clocktest.New(start)
	m := &countingMetrics{}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewDurable(caps, vault.Config{}), Clock: clk, Metrics: m}, nil)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	e.fake.Enqueue(groupPress(e, 884300020, group, 79))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, e.sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Error("Run did not return after cancel")
		}
	})
	minute := func() int { return int(clk.Now().Sub(start) / posterWait) } // the clock read start as the press was received
	none := func() int { return 0 }
	clk.Settle(t, 1, minute, none) // the press is retried: it sleeps on the clock
	e.fake.Enqueue([]byte(`{"update_id":884300021,"message":{"message_id":6,"date":1767225300,"chat":{"id":501,"type":"private","first_name":"Ada"},` +
		`"from":{"id":501,"is_bot":false,"first_name":"Ada"},"text":"hi"}}`))
	e.sink.Empty(t)
	// Each retry runs at the instant it is due, until the minute is over:
	// one Advance over the minute would wake the first retry mid-Advance,
	// free to read the clock at its own deadline (50 ms on), judge the
	// press too young to drop, and sleep again past the Advance's end.
	clk.Drive(t, 1, minute, none)
	platformtest.WaitUntil(t, "the press dropped as poster_unknown", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.dropped[dropPosterUnknown] == 1
	})
	if d := e.sink.Next(t); d.Event == nil || d.Event.Text != "hi" {
		t.Fatalf("the next poll's delivery %+v, want the DM", d.Event)
	}
}

// TestPolledPressBehindAPressWhosePosterIsUnreadable: one getUpdates
// answer holds two presses of user 501 (linked to t1) in a group, of two
// prompts of t1's; the first one's poster record holds a foreign value
// until it is written again. The first press is retried, the second waits
// behind it: the chat's two answers reach t1 in order. Before, the second
// went into the answer's batch and reached t1 first.
func TestPolledPressBehindAPressWhosePosterIsUnreadable(t *testing.T) {
	const group = -1007778889994
	caps, writeBack := unreadablePoster(t, group, "80")
	platform.NewGrants(platformName, vault.NewDurable(caps, vault.Config{}), nil, nil).Prompted(t.Context(), strconv.Itoa(group), "81", "t1", time.Time{})
	clk := clocktest.New(time.Now())
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewDurable(caps, vault.Config{}), Clock: clk}, nil)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	close(release)
	sink := &batchSink{Sink: e.sink, batches: make(chan [2]int, 4), release: release, polls: func() int { return 0 }}
	e.fake.Enqueue(groupPress(e, 884300030, group, 80))
	e.fake.Enqueue(groupPress(e, 884300031, group, 81))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Error("Run did not return after cancel")
		}
	})
	wctx, wcancel := context.WithTimeout(t.Context(), waitFor)
	defer wcancel()
	if err := clk.WaitSleepers(wctx, 1); err != nil {
		t.Fatalf("the first press was not retried: %v", err)
	}
	writeBack()
	clk.Advance(time.Second)
	for _, want := range []string{"80", "81"} {
		if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptMessageID != want {
			t.Fatalf("delivered to %q: %+v, want t1's answer of prompt %s", d.Tenant, d.Event, want)
		}
	}
}

// TestPressWhosePosterIsUnreadable: as TestPolledPressWhosePosterIsUnreadable,
// through the webhook: the press is answered 503 (Telegram retries, and
// sends the chat's later updates only once it is answered) for a minute
// from its first arrival, then 200 and dropped (poster_unknown). Before,
// every retry was answered 503, for as long as Telegram retried.
func TestPressWhosePosterIsUnreadable(t *testing.T) {
	const group = -1007778889995
	caps, _ := unreadablePoster(t, group, "82")
	clk := clocktest.New(time.Now())
	m := &countingMetrics{}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewDurable(caps, vault.Config{}), Clock: clk, Metrics: m}, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	e.startWebhook(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	press := groupPress(e, 884300040, group, 82)
	for range 2 {
		if code := e.post(t, press); code != http.StatusServiceUnavailable {
			t.Fatalf("the press within a minute was answered %d, want 503", code)
		}
		clk.Advance(posterWait / 2)
	}
	if code := e.post(t, press); code != http.StatusOK {
		t.Fatalf("the press a minute on was answered %d, want 200", code)
	}
	e.sink.Empty(t)
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.dropped[dropPosterUnknown]; n != 1 {
		t.Fatalf("%d presses dropped as poster_unknown, want 1", n)
	}
}

// TestUndatedPressWhosePosterIsUnreadableAfterABinding: group is bound
// to t1 lately and t1's prompt's record (written on another instance)
// cannot be read; an undated press of it is answered 503 (Telegram
// retries), and once the record reads again it reaches t1. Before, it
// was dropped as prompt_not_owned at once: the store's failure was taken
// for a record naming no one.
func TestUndatedPressWhosePosterIsUnreadableAfterABinding(t *testing.T) {
	const group = -1007778889996
	caps, writeBack := unreadablePoster(t, group, "83")
	clk := clocktest.New(time.Now())
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewDurable(caps, vault.Config{}), Clock: clk}, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	e.startWebhook(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindChat, ID: strconv.Itoa(group), Tenant: "t1", Since: clk.Now()}}); err != nil {
		t.Fatal(err)
	}
	var u map[string]any
	if err := json.Unmarshal(groupPress(e, 884300050, group, 83), &u); err != nil {
		t.Fatal(err)
	}
	u["callback_query"].(map[string]any)["message"].(map[string]any)["date"] = 0 // inaccessible: undated
	press, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	if code := e.post(t, press); code != http.StatusServiceUnavailable {
		t.Fatalf("the undated press whose poster is unreadable was answered %d, want 503", code)
	}
	writeBack()
	if code := e.post(t, press); code != http.StatusOK {
		t.Fatalf("the press again was answered %d, want 200", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil {
		t.Fatalf("the press delivered to %q as %+v, want t1's answer", d.Tenant, d.Event)
	}
}

// unreadablePoster records t1 as the poster of prompt msgID in group,
// as another instance would, in a store whose reads of that record fail
// (as a store that cannot give it does; it answers everything else) until
// writeBack.
func unreadablePoster(t *testing.T, group int64, msgID string) (caps store.Capabilities, writeBack func()) {
	t.Helper()
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	platform.NewGrants(platformName, vault.NewDurable(st.Capabilities(), vault.Config{}), nil, nil).Prompted(t.Context(), strconv.FormatInt(group, 10), msgID, "t1", time.Time{})
	u := &unreadableCaps{Capabilities: st.Capabilities(), part: "prompt_poster"}
	u.failing.Store(true)
	return u, func() { u.failing.Store(false) }
}

// unreadableCaps fails every read of a key containing part (a prompt
// poster's record, a topic's) while failing is set.
type unreadableCaps struct {
	store.Capabilities
	part    string
	failing atomic.Bool
}

func (u *unreadableCaps) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if u.failing.Load() && strings.Contains(key, u.part) {
		return nil, false, errors.New("store: get capability: unreadable")
	}
	return u.Capabilities.Get(ctx, key)
}
