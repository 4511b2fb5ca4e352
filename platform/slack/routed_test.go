package slack

import (
	"context"
	"strings"
	"sync"
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
