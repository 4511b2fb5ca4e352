package slack

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/platform"
	"connector/platform/slack/slacktest"
	"connector/vault"
)

// TestRoutedUnderTheCreationItsOwnershipWasReadFor: Cat, linked to t2,
// speaks in a channel of a workspace no binding covers; the route reads
// the ownership, then grants t2 the channel, a store write that waits (a
// Redis failing over). Meanwhile t2 is deleted and made again under its
// id. The message is delivered as routed for the earlier t2 (the relay
// then drops it), not for the new one, which Cat never linked to (before,
// the creation was read after the grant's store calls).
func TestRoutedUnderTheCreationItsOwnershipWasReadFor(t *testing.T) {
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var created sync.Map
	created.Store("t2", first)
	since := func(tenant string) time.Time { c, _ := created.Load(tenant); at, _ := c.(time.Time); return at }
	v := &heldGrantVault{Memory: vault.NewMemory(vault.Config{Since: since}), chat: chanNew, held: make(chan struct{}), release: make(chan struct{})}
	e := ownershipEnv(t, &platform.Deps{Vault: v}, platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t2"})
	posted := make(chan error, 1)
	go func() {
		body := slacktest.Envelope(teamC.ID, teamC.BotUser, "Ev1", slacktest.MessageEvent(teamC.ID, chanNew, userCat, "1768490100.000100", "", "status?"))
		resp, err := e.srv.Client().Do(slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, e.now(), "application/json", body))
		if err == nil {
			resp.Body.Close()
		}
		posted <- err
	}()
	select {
	case <-v.held:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the grant of Cat's channel to be stored", waitFor)
	}
	created.Store("t2", again) // t2 deleted and made again, as the registry's apply does it: the creation first
	close(v.release)
	if d := e.sink.Next(t); d.Tenant != "t2" || !d.Created.Equal(first) {
		t.Fatalf("Cat's message delivered to %q as created %v, want the earlier t2's (%v)", d.Tenant, d.Created, first)
	}
	if err := <-posted; err != nil {
		t.Fatal(err)
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

func (v *heldGrantVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if k.Kind == vault.KindChatGrant && strings.HasSuffix(k.SessionKey, "/"+v.chat) {
		v.once.Do(func() { close(v.held); <-v.release })
	}
	return v.Memory.Put(ctx, k, e)
}

// TestClaimantActsWithoutAGrantLookup: t3 acts in the channel it claimed
// without a lookup of the vault (on Redis, a store round trip per action):
// the claim settles the chat's holder, and no grant counts there.
func TestClaimantActsWithoutAGrantLookup(t *testing.T) {
	v := vault.NewMemory(vault.Config{})
	e := ownershipEnv(t, &platform.Deps{Vault: v}, platform.Binding{Kind: platform.BindScope, ID: "C0CLM00001", Tenant: "t3", Space: teamC.ID})
	e.fake.AddChannel(teamC.ID, slacktest.Channel{ID: "C0CLM00001", Name: "claimed"})
	lookups := func() uint64 { s := v.Stats(); return s.Hits + s.Misses + s.Expiries }
	before := lookups()
	if r := e.execute(t, "t3", `{"op":"send","chat_id":"C0CLM00001","content":"ok","metadata":{}}`); !r.Success {
		t.Fatalf("the claimant's send into its channel = %+v", r)
	}
	if n := lookups() - before; n != 0 {
		t.Errorf("the claimant's send looked the vault up %d times, want none", n)
	}
}

// TestReactionGrantsNoTenantMadeAgain: Ada, linked to t2, reacts (a
// trigger of t2's) to the bot's message in a channel no binding covers; while Slack is asked for
// the message reacted to (conversations.replies), t2 is deleted and made
// again under its id. The new t2 is not granted the channel (before, the
// reaction's grant was stored under the creation read after that call).
func TestReactionGrantsNoTenantMadeAgain(t *testing.T) {
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var created sync.Map
	created.Store("t2", first)
	since := func(tenant string) time.Time { c, _ := created.Load(tenant); at, _ := c.(time.Time); return at }
	fake := newFake(t)
	upstream, err := url.Parse(fake.URL)
	if err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	forward := httputil.NewSingleHostReverseProxy(upstream)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/conversations.replies" && armed.CompareAndSwap(true, false) {
			close(held)
			<-release
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	e := newEnvOn(t, fake, func(c *Config) {
		c.APIURL = proxy.URL + "/"
		c.Tenants["t2"] = TenantConfig{ReactionTriggers: &[]string{"+1"}} // on any message: t2 did not post the bot's
	}, &platform.Deps{Vault: vault.NewMemory(vault.Config{Since: since})})
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	const root, reply = "1768400000.000100", "1768400000.000200"
	fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: root, User: userAda, Text: "deploy?"})
	fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: reply, ThreadTS: root, User: teamA.BotUser, BotID: teamA.BotID, Text: "deployed"})
	armed.Store(true)
	posted := make(chan error, 1)
	go func() {
		body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", map[string]any{"type": "reaction_added", "user": userAda, "reaction": "+1", "item_user": teamA.BotUser,
			"item": map[string]any{"type": "message", "channel": chanGeneral, "ts": reply}, "event_ts": "1768400100.000100"})
		resp, err := e.srv.Client().Do(slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, e.now(), "application/json", body))
		if err == nil {
			resp.Body.Close()
		}
		posted <- err
	}()
	select {
	case <-held:
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the reacted message to be asked for", waitFor)
	}
	created.Store("t2", again)
	close(release)
	if d := e.sink.Next(t); d.Tenant != "t2" || !d.Created.Equal(first) {
		t.Fatalf("Ada's reaction delivered to %q as created %v, want the earlier t2's (%v)", d.Tenant, d.Created, first)
	}
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	if e.p.grants.Has(t.Context(), chanGeneral, "t2") {
		t.Fatal("the new t2 holds a grant of the channel where Ada, linked to the earlier t2, reacted")
	}
}
