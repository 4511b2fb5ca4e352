package vault_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/store"
	"connector/vault"
)

const token = "aW50ZXJhY3Rpb246c2VjcmV0LXRva2Vu"

// testStore is the conformance suite every Store implementation must pass.
func testStore(t *testing.T, newStore func(c clock.Clock) vault.Store) {
	clock := clocktest.New(time.Unix(1_767_225_300, 0))
	s := newStore(clock)
	k := vault.Key{Tenant: "t1", SessionKey: "agent:main:discord:dm:1", Kind: vault.KindDiscordInteractionToken}
	if err := s.Put(t.Context(), k, vault.Entry{Value: vault.NewSecret(token), Ref: "app-1"}); err != nil {
		t.Fatal(err)
	}

	t.Run("same tenant finds it", func(t *testing.T) {
		e, ok := s.Get(t.Context(), k)
		if !ok || e.Value.Reveal() != token || e.Ref != "app-1" {
			t.Fatalf("Get = %v, %v", e, ok)
		}
	})
	t.Run("other tenant finds nothing", func(t *testing.T) {
		other := k
		other.Tenant = "t2"
		if _, ok := s.Get(t.Context(), other); ok {
			t.Fatal("tenant t2 read tenant t1's capability")
		}
	})
	t.Run("other session finds nothing", func(t *testing.T) {
		other := k
		other.SessionKey = "agent:main:discord:dm:2"
		if _, ok := s.Get(t.Context(), other); ok {
			t.Fatal("found a capability under another session")
		}
	})
	t.Run("unknown kind refused", func(t *testing.T) {
		bad := k
		bad.Kind = "teams.reply_url"
		if err := s.Put(t.Context(), bad, vault.Entry{Value: vault.NewSecret(token)}); err == nil {
			t.Fatal("Put accepted an unknown kind")
		} else if strings.Contains(err.Error(), token) {
			t.Fatal("error leaks the value")
		}
	})
	t.Run("missing tenant refused", func(t *testing.T) {
		bad := k
		bad.Tenant = ""
		if err := s.Put(t.Context(), bad, vault.Entry{Value: vault.NewSecret(token)}); err == nil {
			t.Fatal("Put accepted an empty tenant")
		}
	})
	t.Run("expires after its kind's TTL", func(t *testing.T) {
		clock.Advance(14*time.Minute + 59*time.Second)
		if _, ok := s.Get(t.Context(), k); !ok {
			t.Fatal("expired early")
		}
		clock.Advance(time.Second)
		if _, ok := s.Get(t.Context(), k); ok {
			t.Fatal("still valid after 15 minutes")
		}
	})
	t.Run("delete", func(t *testing.T) {
		k2 := k
		k2.SessionKey = "agent:main:discord:dm:3"
		_ = s.Put(t.Context(), k2, vault.Entry{Value: vault.NewSecret(token)})
		s.Delete(t.Context(), k2)
		if _, ok := s.Get(t.Context(), k2); ok {
			t.Fatal("found after Delete")
		}
	})
}

func TestMemory(t *testing.T) {
	testStore(t, func(c clock.Clock) vault.Store {
		return vault.NewMemory(vault.Config{MaxEntries: 100, Clock: c})
	})
}

func TestDurable(t *testing.T) {
	testStore(t, func(c clock.Clock) vault.Store {
		st := store.NewMemory(c)
		t.Cleanup(func() { _ = st.Close() })
		return vault.NewDurable(st.Capabilities(), vault.Config{MaxEntries: 100, Clock: c})
	})
}

// A capability put before a restart is found after it, on the embedded
// store, until its kind's TTL ends.
func TestDurableSurvivesARestart(t *testing.T) {
	clock := clocktest.New(time.Unix(1_767_225_300, 0))
	dir := t.TempDir()
	open := func() store.Store {
		st, err := store.Open(context.Background(), store.Config{Path: dir, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	k := vault.Key{Tenant: "t1", SessionKey: "agent:main:discord:dm:1", Kind: vault.KindDiscordInteractionToken}
	st := open()
	if err := vault.NewDurable(st.Capabilities(), vault.Config{Clock: clock}).Put(t.Context(), k, vault.Entry{Value: vault.NewSecret(token), Ref: "app-1"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = open()
	defer st.Close()
	v := vault.NewDurable(st.Capabilities(), vault.Config{Clock: clock})
	clock.Advance(10 * time.Minute)
	e, ok := v.Get(t.Context(), k)
	if !ok || e.Value.Reveal() != token || e.Ref != "app-1" {
		t.Fatalf("after a restart Get = %v, %v", e, ok)
	}
	other := k
	other.Tenant = "t2"
	if _, ok := v.Get(t.Context(), other); ok {
		t.Fatal("tenant t2 read tenant t1's capability after a restart")
	}
	clock.Advance(5 * time.Minute)
	v = vault.NewDurable(st.Capabilities(), vault.Config{Clock: clock})
	if _, ok := v.Get(t.Context(), k); ok {
		t.Fatal("still valid 15 minutes after it was stored")
	}
	if s := v.Stats(); s.Hits != 0 || s.Misses != 1 || s.StoreErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Tenant and session are parts of the key that cannot run into each other.
func TestDurableKeysDoNotCollide(t *testing.T) {
	st := store.NewMemory(nil)
	defer st.Close()
	v := vault.NewDurable(st.Capabilities(), vault.Config{})
	a := vault.Key{Tenant: "t1/x", SessionKey: "s", Kind: vault.KindDiscordInteractionToken}
	b := vault.Key{Tenant: "t1", SessionKey: "x/s", Kind: vault.KindDiscordInteractionToken}
	if err := v.Put(t.Context(), a, vault.Entry{Value: vault.NewSecret(token)}); err != nil {
		t.Fatal(err)
	}
	fresh := vault.NewDurable(st.Capabilities(), vault.Config{})
	if _, ok := fresh.Get(t.Context(), b); ok {
		t.Fatal("a key of another tenant found the capability")
	}
}

func TestMemoryBounded(t *testing.T) {
	m := vault.NewMemory(vault.Config{MaxEntries: 10})
	for i := range 25 {
		k := vault.Key{Tenant: "t1", SessionKey: fmt.Sprint("s", i), Kind: vault.KindDiscordInteractionToken}
		if err := m.Put(t.Context(), k, vault.Entry{Value: vault.NewSecret(token)}); err != nil {
			t.Fatal(err)
		}
	}
	if st := m.Stats(); st.Size != 10 || st.Evicted != 15 {
		t.Fatalf("stats = %+v, want size 10, evicted 15", st)
	}
	k := vault.Key{Tenant: "t1", SessionKey: "s24", Kind: vault.KindDiscordInteractionToken}
	if _, ok := m.Get(t.Context(), k); !ok {
		t.Fatal("newest entry evicted")
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := vault.NewSecret(token)
	e := vault.Entry{Value: s, Ref: "app"}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "secret", s, "entry", e)
	js, _ := json.Marshal(e)
	outs := []string{
		fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q %x", s, s, s, s, s, s),
		fmt.Sprintf("%v %+v %#v", e, e, e), string(js), logged.String(),
	}
	for _, out := range outs {
		if strings.Contains(out, token) {
			t.Errorf("secret leaked: %s", out)
		}
	}
	if s.Reveal() != token {
		t.Fatal("Reveal lost the value")
	}
}

// stallingCaps is a store.Capabilities that answers nothing until its
// caller's context ends, as an unreachable Redis does. It reports on calls
// whether it was called under the context marked with callerKey.
type stallingCaps struct{ calls chan bool }

type callerKey struct{}

func (c stallingCaps) stall(ctx context.Context) error {
	c.calls <- ctx.Value(callerKey{}) != nil
	<-ctx.Done()
	return ctx.Err()
}

func (c stallingCaps) Put(ctx context.Context, _ string, _ []byte, _ time.Time) error {
	return c.stall(ctx)
}

func (c stallingCaps) PutUnlessLater(ctx context.Context, _ string, _ []byte, _ int64, _ time.Time) (bool, error) {
	return false, c.stall(ctx)
}

func (c stallingCaps) Get(ctx context.Context, _ string) ([]byte, bool, error) {
	return nil, false, c.stall(ctx)
}

func (c stallingCaps) Delete(ctx context.Context, _ string) error { return c.stall(ctx) }

// A Durable vault's calls to its store end with the caller's context, so a
// lookup on the way to a platform call (a chat grant inside Authorize) is
// bounded by that call's deadline, not by a deadline of its own.
func TestDurableRunsUnderTheCallersContext(t *testing.T) {
	caps := stallingCaps{calls: make(chan bool, 1)}
	v := vault.NewDurable(caps, vault.Config{})
	k := vault.Key{Tenant: "t1", SessionKey: "chat", Kind: vault.KindChatGrant}
	for name, call := range map[string]func(ctx context.Context){
		"get":    func(ctx context.Context) { v.Get(ctx, k) },
		"put":    func(ctx context.Context) { _ = v.Put(ctx, k, vault.Entry{}) },
		"delete": func(ctx context.Context) { v.Delete(ctx, k) },
	} {
		ctx, cancel := context.WithCancel(context.WithValue(t.Context(), callerKey{}, true))
		done := make(chan struct{})
		go func() {
			defer close(done)
			call(ctx)
		}()
		select {
		case underCaller := <-caps.calls:
			if !underCaller {
				t.Errorf("%s: the store was called under a context of its own, not the caller's", name)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the store was not called within 10s", name)
		}
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still waiting for the store 10s after its caller's context ended", name)
		}
	}
	if s := v.Stats(); s.StoreErrors != 3 || s.Misses != 1 {
		t.Fatalf("stats %+v, want 3 store errors and the get's miss", s)
	}
}

// A Memory forgets expired values by its clock without a sweeper: a Put
// removes those that are the least recently used of their kind.
func TestMemoryForgetsExpiredOnPut(t *testing.T) {
	clk := clocktest.New(time.Unix(1_767_225_300, 0))
	m := vault.NewMemory(vault.Config{Clock: clk})
	put := func(session string) {
		k := vault.Key{Tenant: "t1", SessionKey: session, Kind: vault.KindDiscordInteractionToken}
		if err := m.Put(t.Context(), k, vault.Entry{Value: vault.NewSecret(token)}); err != nil {
			t.Fatal(err)
		}
	}
	put("a")
	put("b")
	clk.Advance(15 * time.Minute)
	put("c")
	if s := m.Stats(); s.Size != 1 || s.Evicted != 2 {
		t.Fatalf("stats %+v, want the two expired values gone and c kept", s)
	}
}

// Two Durable vaults on one store are two instances: what one replaces or
// deletes while it is live (a later interaction's token, a WhatsApp
// conversation's number, a prompt a tap answered) is what the other then
// finds, even when its in-memory front already held the value.
func TestDurableSeesAnotherInstancesChanges(t *testing.T) {
	st := store.NewMemory(nil)
	defer st.Close()
	a := vault.NewDurable(st.Capabilities(), vault.Config{})
	b := vault.NewDurable(st.Capabilities(), vault.Config{})
	conv := vault.Key{Tenant: "t1", SessionKey: "15550001", Kind: vault.KindWhatsAppConversation}
	prompt := vault.Key{Tenant: "t1", SessionKey: "15550001:p1", Kind: vault.KindWhatsAppPrompt}
	for _, k := range []vault.Key{conv, prompt} {
		if err := a.Put(t.Context(), k, vault.Entry{Ref: "first"}); err != nil {
			t.Fatal(err)
		}
		if e, ok := b.Get(t.Context(), k); !ok || e.Ref != "first" {
			t.Fatalf("%s: the other instance found %v, %v", k.Kind, e, ok)
		}
	}
	tok := vault.Key{Tenant: "t1", SessionKey: "agent:main:discord:dm:1", Kind: vault.KindDiscordInteractionToken}
	for _, k := range []vault.Key{conv, tok} {
		if err := a.Put(t.Context(), k, vault.Entry{Ref: "first"}); err != nil {
			t.Fatal(err)
		}
		if _, ok := b.Get(t.Context(), k); !ok {
			t.Fatalf("%s: the other instance found nothing", k.Kind)
		}
		if err := a.Put(t.Context(), k, vault.Entry{Ref: "second"}); err != nil {
			t.Fatal(err)
		}
		if e, ok := b.Get(t.Context(), k); !ok || e.Ref != "second" {
			t.Fatalf("%s: after it was replaced the other instance found %v, %v", k.Kind, e, ok)
		}
	}
	a.Delete(t.Context(), prompt)
	if _, ok := b.Get(t.Context(), prompt); ok {
		t.Fatal("the other instance still found the prompt a tap answered")
	}
}

// A Durable vault whose store does not answer finds what this process
// holds itself, of every kind.
func TestDurableFallsBackOnWhatItHolds(t *testing.T) {
	st := store.NewMemory(nil)
	v := vault.NewDurable(st.Capabilities(), vault.Config{})
	k := vault.Key{Tenant: "t1", SessionKey: "agent:main:discord:dm:1", Kind: vault.KindDiscordInteractionToken}
	if err := v.Put(t.Context(), k, vault.Entry{Value: vault.NewSecret(token)}); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	if e, ok := v.Get(t.Context(), k); !ok || e.Value.Reveal() != token {
		t.Fatalf("with the store closed Get = %v, %v; want the token this process stored", e, ok)
	}
	if s := v.Stats(); s.StoreErrors != 1 || s.Hits != 1 {
		t.Fatalf("stats %+v, want the store's error and a hit", s)
	}

	// What another instance deleted meanwhile is not answered so.
	st = store.NewMemory(nil)
	a, b := vault.NewDurable(st.Capabilities(), vault.Config{}), vault.NewDurable(st.Capabilities(), vault.Config{})
	if err := a.Put(t.Context(), k, vault.Entry{Value: vault.NewSecret(token)}); err != nil {
		t.Fatal(err)
	}
	b.Get(t.Context(), k)
	a.Delete(t.Context(), k)
	b.Get(t.Context(), k)
	_ = st.Close()
	if _, ok := b.Get(t.Context(), k); ok {
		t.Fatal("with the store closed Get found a token another instance had deleted")
	}
}

// TestSinceHidesAnEarlierTenantsEntries: a tenant deleted and made again
// under its id (Config.Since moves to the new tenant's start) finds none
// of the entries stored for the earlier one, of any kind, neither in a
// Memory, nor in a Durable's in-memory front, nor in its store as another
// instance reads it; what is stored for the new tenant is found.
func TestSinceHidesAnEarlierTenantsEntries(t *testing.T) {
	clk := clocktest.New(time.Unix(1_767_225_300, 0))
	var since time.Time
	cfg := vault.Config{Clock: clk, Since: func(tenant string) time.Time {
		if tenant == "t1" {
			return since
		}
		return time.Time{}
	}}
	st := store.NewMemory(clk)
	defer st.Close()
	stores := map[string]vault.Store{"memory": vault.NewMemory(cfg), "durable": vault.NewDurable(st.Capabilities(), cfg)}
	kinds := []vault.Kind{vault.KindChatGrant, vault.KindPostedMessage, vault.KindDiscordInteractionToken, vault.KindWhatsAppConversation}
	for _, s := range stores {
		for _, kind := range kinds {
			for _, tenant := range []string{"t1", "t2"} {
				if err := s.Put(t.Context(), vault.Key{Tenant: tenant, SessionKey: "s", Kind: kind}, vault.Entry{Ref: "earlier"}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	clk.Advance(time.Second)
	since = clk.Now() // t1 deleted and made again
	other := vault.NewDurable(st.Capabilities(), cfg)
	stores["durable, another instance"] = other
	for name, s := range stores {
		for _, kind := range kinds {
			if e, ok := s.Get(t.Context(), vault.Key{Tenant: "t1", SessionKey: "s", Kind: kind}); ok {
				t.Errorf("%s: the new t1 found the earlier t1's %s: %+v", name, kind, e)
			}
			if _, ok := s.Get(t.Context(), vault.Key{Tenant: "t2", SessionKey: "s", Kind: kind}); !ok {
				t.Errorf("%s: t2 lost its %s", name, kind)
			}
		}
	}
	clk.Advance(time.Second)
	for name, s := range stores {
		k := vault.Key{Tenant: "t1", SessionKey: "s", Kind: vault.KindPostedMessage}
		if err := s.Put(t.Context(), k, vault.Entry{}); err != nil {
			t.Fatal(err)
		}
		if _, ok := s.Get(t.Context(), k); !ok {
			t.Errorf("%s: the new t1 lost its own mark", name)
		}
	}
}

// TestDurableKeepsALaterCreationsEntry: an instance that still knows the
// earlier creation of a tenant made again under its id (a /link
// redemption or an inbound message of the earlier tenant in flight) writes
// a grant or conversation marked as that creation's: it does not replace
// the one the new tenant wrote meanwhile, on any backend, as another
// instance finds it.
func TestDurableKeepsALaterCreationsEntry(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	backends := map[string]store.Config{
		"memory":   {Backend: store.BackendMemory},
		"embedded": {Backend: store.BackendEmbedded, Path: t.TempDir()},
		"redis":    {Backend: store.BackendRedis, RedisURL: srv.URL(), RedisPrefix: "later:"},
	}
	for name, cfg := range backends {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			earlier, later := time.UnixMicro(1_767_225_300_000_000), time.UnixMicro(1_767_225_301_000_000)
			at := func(created time.Time) *vault.Durable {
				return vault.NewDurable(st.Capabilities(), vault.Config{Since: func(string) time.Time { return created }})
			}
			stale, current := at(earlier), at(later)
			for _, kind := range []vault.Kind{vault.KindChatGrant, vault.KindWhatsAppConversation} {
				k := vault.Key{Tenant: "t1", SessionKey: "chat-1", Kind: kind}
				if err := current.Put(t.Context(), k, vault.Entry{Ref: "new"}); err != nil {
					t.Fatal(err)
				}
				if err := stale.Put(t.Context(), k, vault.Entry{Ref: "old"}); err != nil {
					t.Fatal(err)
				}
				// The refused entry is not kept in memory either: the
				// instance reads what the store holds, the later creation's.
				if e, ok := stale.Get(t.Context(), k); ok {
					t.Errorf("%s: the earlier creation's instance found %+v, which the store refused", kind, e)
				}
				// The caller judged the earlier creation (a link code's).
				if err := current.Put(t.Context(), k, vault.Entry{Ref: "old", Created: earlier}); err != nil {
					t.Fatal(err)
				}
				for name, v := range map[string]*vault.Durable{"this": current, "another": at(later)} {
					if e, ok := v.Get(t.Context(), k); !ok || e.Ref != "new" {
						t.Errorf("%s: the new tenant found %+v, %v on %s instance; want its own entry, not replaced by the earlier creation's", kind, e, ok, name)
					}
				}
				if err := current.Put(t.Context(), k, vault.Entry{Ref: "renewed"}); err != nil {
					t.Fatal(err)
				}
				if e, ok := at(later).Get(t.Context(), k); !ok || e.Ref != "renewed" {
					t.Errorf("%s: after a renewal the new tenant found %+v, %v", kind, e, ok)
				}
			}
		})
	}
}
