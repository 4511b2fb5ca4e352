package telegram

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/platform/telegram/telegramtest"
	"connector/vault"
)

// TestRoutedUnderTheCreationItsOwnershipWasReadFor: user 505, linked to
// t2, writes in a group no binding covers; the route reads the ownership,
// then grants t2 the group, a store write that waits (a Redis failing
// over). Meanwhile t2 is deleted and made again under its id. The message
// is delivered as routed for the earlier t2 (the relay then drops it), not
// for the new one (before, the creation was read after the grant's store
// calls).
func TestRoutedUnderTheCreationItsOwnershipWasReadFor(t *testing.T) {
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	c := &creations{}
	c.made("t2", first)
	v := &heldGrantVault{Memory: vault.NewMemory(vault.Config{Since: c.since}), chat: "-100888", held: make(chan struct{}), release: make(chan struct{})}
	v.armed.Store(true)
	e := heldEnv(t, v, platform.Binding{Kind: platform.BindUser, ID: "505", Tenant: "t2"})
	posted := e.postAsync(`{"update_id":884100931,"message":{"message_id":1,"date":1767225300,"chat":{"id":-100888,"type":"supergroup","title":"G"},"from":{"id":505,"is_bot":false,"first_name":"U"},"text":"hello"}}`)
	v.await(t, "the grant of the group")
	c.made("t2", again) // t2 deleted and made again, as the registry's apply does it: the creation first
	close(v.release)
	if d := e.sink.Next(t); d.Tenant != "t2" || !d.Created.Equal(first) {
		t.Fatalf("505's message delivered to %q as created %v, want the earlier t2's (%v)", d.Tenant, d.Created, first)
	}
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
}

// TestPressRoutedUnderThePostersCreation:
// TestPromptPressInASharedGroupReachesItsPoster while the look-up of t2's
// grant of the group, which the press renews (501 is linked to t2), waits
// and t2 is deleted and made again meanwhile: the press is delivered as
// t2's prompt was posted, under the earlier t2's creation (the relay then
// drops it), not the new t2's, which posted no prompt (before, the
// creation was read after the route's store calls).
func TestPressRoutedUnderThePostersCreation(t *testing.T) {
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	c := &creations{}
	c.made("t2", first)
	v := &heldGrantVault{Memory: vault.NewMemory(vault.Config{Since: c.since}), chat: "-100888", get: true, held: make(chan struct{}), release: make(chan struct{})}
	e := heldEnv(t, v,
		platform.Binding{Kind: platform.BindUser, ID: "501", Tenant: "t1"},
		platform.Binding{Kind: platform.BindUser, ID: "501", Tenant: "t2"},
		platform.Binding{Kind: platform.BindUser, ID: "505", Tenant: "t2"})
	say := `{"update_id":884100932,"message":{"message_id":1,"date":1767225300,"chat":{"id":-100888,"type":"supergroup","title":"G"},"from":{"id":505,"is_bot":false,"first_name":"U"},"text":"hello"}}`
	if code := e.post(t, []byte(say)); code != http.StatusOK {
		t.Fatalf("t2's user's message: status %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t2" {
		t.Fatalf("t2's user's message delivered to %q", d.Tenant)
	}
	r := e.act(t, "t2", promptAction("-100888", contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("t2's prompt: %+v", r)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	press, err := e.fake.PressButton(884100933, map[string]any{"id": int64(-100888), "type": "supergroup", "title": "G"}, msgID,
		"hp1:f00dba.1234abcd:once", map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"})
	if err != nil {
		t.Fatal(err)
	}
	v.armed.Store(true)
	posted := e.postAsync(string(press))
	v.await(t, "the look-up of t2's grant of the group")
	c.made("t2", again)
	close(v.release)
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.PromptResponse == nil || !d.Created.Equal(first) {
		t.Fatalf("the press delivered to %q as created %v: %+v, want the earlier t2's prompt_response (%v)", d.Tenant, d.Created, d.Event, first)
	}
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
}

// heldEnv is a webhook env on v, bound as bindings say.
func heldEnv(t *testing.T, v vault.Store, bindings ...platform.Binding) *env {
	t.Helper()
	e := newEnvDeps(t, platform.Deps{Vault: v}, func(c *Config) {
		c.WebhookURL, c.WebhookSecret = "https://connector.example"+WebhookPath, testSecret
	})
	e.startWebhook(t)
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	return e
}

// postAsync posts update to the webhook in the background; the channel
// gets the post's error once it is answered.
func (e *env) postAsync(update string) <-chan error {
	posted := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_, err := telegramtest.PostUpdate(ctx, http.DefaultClient, e.hook, testSecret, []byte(update))
		posted <- err
	}()
	return posted
}

// heldGrantVault is a vault.Memory whose first store (get: look-up) of a
// grant of chat once armed waits until release, telling held once it does.
type heldGrantVault struct {
	*vault.Memory
	chat          string
	get           bool
	armed         atomic.Bool
	once          sync.Once
	held, release chan struct{}
}

func (v *heldGrantVault) hold(k vault.Key, get bool) {
	if get == v.get && v.armed.Load() && k.Kind == vault.KindChatGrant && strings.HasSuffix(k.SessionKey, "/"+v.chat) {
		v.once.Do(func() { close(v.held); <-v.release })
	}
}

func (v *heldGrantVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	v.hold(k, false)
	return v.Memory.Put(ctx, k, e)
}

func (v *heldGrantVault) Get(ctx context.Context, k vault.Key) (vault.Entry, bool) {
	v.hold(k, true)
	return v.Memory.Get(ctx, k)
}

// await waits until the store call of what is held.
func (v *heldGrantVault) await(t *testing.T, what string) {
	t.Helper()
	select {
	case <-v.held:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for %s to be stored or looked up", waitFor, what)
	}
}

// TestPressRoutedUnderItsRecordsCreation:
// TestPromptPressInASharedGroupReachesItsPoster while t2 is deleted and
// made again right after its prompt's record was judged (the vault's
// Since moves on its next read of t2): the press is delivered under the
// creation the record keeps, the earlier t2's (the relay then drops it),
// not the new t2's, which posted no prompt (before, the creation was read
// again after the record was judged).
func TestPressRoutedUnderItsRecordsCreation(t *testing.T) {
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var judged atomic.Bool // the prompt's record was read
	var reads atomic.Int32 // t2's creation read since
	since := func(tenant string) time.Time {
		if tenant == "t2" && judged.Load() && reads.Add(1) > 1 {
			return again
		}
		return first
	}
	v := &judgedPosterVault{Memory: vault.NewMemory(vault.Config{Since: since}), judged: &judged}
	e := heldEnv(t, v,
		platform.Binding{Kind: platform.BindUser, ID: "501", Tenant: "t1"},
		platform.Binding{Kind: platform.BindUser, ID: "501", Tenant: "t2"},
		platform.Binding{Kind: platform.BindUser, ID: "505", Tenant: "t2"})
	say := `{"update_id":884100934,"message":{"message_id":1,"date":1767225300,"chat":{"id":-100888,"type":"supergroup","title":"G"},"from":{"id":505,"is_bot":false,"first_name":"U"},"text":"hello"}}`
	if code := e.post(t, []byte(say)); code != http.StatusOK {
		t.Fatalf("t2's user's message: status %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t2" {
		t.Fatalf("t2's user's message delivered to %q", d.Tenant)
	}
	r := e.act(t, "t2", promptAction("-100888", contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("t2's prompt: %+v", r)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	press, err := e.fake.PressButton(884100935, map[string]any{"id": int64(-100888), "type": "supergroup", "title": "G"}, msgID,
		"hp1:f00dba.1234abcd:once", map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"})
	if err != nil {
		t.Fatal(err)
	}
	v.armed.Store(true)
	if code := e.post(t, press); code != http.StatusOK {
		t.Fatalf("press: status %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.PromptResponse == nil || !d.Created.Equal(first) {
		t.Fatalf("the press delivered to %q as created %v: %+v, want the earlier t2's prompt_response (%v)", d.Tenant, d.Created, d.Event, first)
	}
	// Nor does the new t2 take the group's grant from the press, as on Discord.
	if e.p.grants.Has(t.Context(), "-100888", "t2") {
		t.Fatal("the new t2 was granted the group by a press of the earlier t2's prompt")
	}
}

// judgedPosterVault is a vault.Memory that, once armed, sets judged as it
// reads a prompt poster's record.
type judgedPosterVault struct {
	*vault.Memory
	armed  atomic.Bool
	judged *atomic.Bool
}

func (v *judgedPosterVault) Get(ctx context.Context, k vault.Key) (vault.Entry, bool) {
	e, ok := v.Memory.Get(ctx, k)
	if k.Kind == vault.KindPromptPoster && v.armed.Load() {
		v.judged.Store(true)
	}
	return e, ok
}
