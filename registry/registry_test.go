package registry_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/registry"
	"connector/store"
)

func newRegistry(t *testing.T) (*registry.Registry, *clocktest.Fake) {
	t.Helper()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(c)
	t.Cleanup(func() { _ = st.Close() })
	return registry.New(st, c), c
}

func effective(t *testing.T, r *registry.Registry) (registry.State, time.Time) {
	t.Helper()
	s, next, err := r.Effective(context.Background())
	if err != nil {
		t.Fatalf("Effective: %v", err)
	}
	return s, next
}

func secretsOf(s registry.State, gateway string) []string {
	for _, g := range s.Gateways {
		if g.ID == gateway {
			var out []string
			for _, sec := range g.Secrets {
				out = append(out, sec.Value)
			}
			return out
		}
	}
	return nil
}

// TestRotateGrace: after a rotation both secrets are effective until the
// grace ends, then only the new one, and Effective reports when that is.
func TestRotateGrace(t *testing.T) {
	ctx := context.Background()
	r, c := newRegistry(t)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	old, err := r.CreateGateway(ctx, "acme", "gw1")
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != 64 {
		t.Fatalf("secret %d chars, want 64", len(old))
	}
	fresh, err := r.Rotate(ctx, "acme", "gw1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s, next := effective(t, r)
	if got := secretsOf(s, "gw1"); len(got) != 2 || got[0] != fresh || got[1] != old {
		t.Fatalf("secrets during the grace = %d entries, want the new then the old", len(got))
	}
	if want := c.Now().Add(time.Minute); !next.Equal(want) {
		t.Fatalf("next expiry %v, want %v", next, want)
	}
	c.Advance(time.Minute)
	s, next = effective(t, r)
	if got := secretsOf(s, "gw1"); len(got) != 1 || got[0] != fresh {
		t.Fatalf("secrets after the grace = %d entries, want the new one only", len(got))
	}
	if !next.IsZero() {
		t.Fatalf("next expiry %v after the grace, want none", next)
	}
}

// TestDeclaredWins: the YAML's entries shadow stored ones and refuse
// changes through the API.
func TestDeclaredWins(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Bind(ctx, registry.Binding{Platform: "telegram", Kind: "chat", ID: "-0100", Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	err := r.SetDeclared(registry.State{
		Tenants:  []registry.Tenant{{ID: "yaml-t"}},
		Gateways: []registry.Gateway{{ID: "gw-yaml", Tenant: "yaml-t", Secrets: []registry.Secret{{Value: "s"}}}},
		Bindings: []registry.Binding{{Platform: "telegram", Kind: "chat", ID: "-100", Tenant: "yaml-t"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := effective(t, r)
	if len(s.Bindings) != 1 || s.Bindings[0].Tenant != "yaml-t" {
		t.Fatalf("bindings %+v, want chat -100 to yaml-t only", s.Bindings)
	}
	for name, err := range map[string]error{
		"create declared tenant":  r.CreateTenant(ctx, registry.Tenant{ID: "yaml-t"}),
		"delete declared tenant":  r.DeleteTenant(ctx, "yaml-t"),
		"delete declared gateway": r.DeleteGateway(ctx, "yaml-t", "gw-yaml"),
		"unbind declared chat":    r.Unbind(ctx, registry.Binding{Platform: "telegram", Kind: "chat", ID: "-100", Tenant: "yaml-t"}),
	} {
		if !errors.Is(err, registry.ErrDeclared) {
			t.Errorf("%s: %v, want ErrDeclared", name, err)
		}
	}
	if _, err := r.CreateGateway(ctx, "yaml-t", "gw-api"); err != nil {
		t.Fatalf("a stored gateway under a declared tenant: %v", err)
	}
}

// TestErrors covers the refusals the admin API maps to statuses.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	room := registry.Binding{Platform: "nexscope", Kind: "room", ID: "lobby", Tenant: "a"}
	if err := r.Bind(ctx, room); err != nil {
		t.Fatal(err)
	}
	_, dupGateway := r.CreateGateway(ctx, "a", "gw")
	_, dupGateway2 := r.CreateGateway(ctx, "b", "gw")
	_, noTenant := r.CreateGateway(ctx, "zz", "gw2")
	_, wrongTenant := r.Rotate(ctx, "b", "gw", 0)
	for name, c := range map[string]struct{ err, want error }{
		"duplicate tenant":       {r.CreateTenant(ctx, registry.Tenant{ID: "a"}), registry.ErrExists},
		"bad tenant id":          {r.CreateTenant(ctx, registry.Tenant{ID: "a/b"}), registry.ErrInvalid},
		"bad declared tenant id": {r.SetDeclared(registry.State{Tenants: []registry.Tenant{{ID: "a/gateways"}}}), registry.ErrInvalid},
		"bad session":            {r.CreateTenant(ctx, registry.Tenant{ID: "c", Session: &registry.Session{NexscopeKeyPlatform: "x"}}), registry.ErrInvalid},
		"first gateway":          {dupGateway, nil},
		"duplicate gateway":      {dupGateway2, registry.ErrExists},
		"gateway of no tenant":   {noTenant, registry.ErrNotFound},
		"rotate under another":   {wrongTenant, registry.ErrNotFound},
		"room of another tenant": {r.Bind(ctx, registry.Binding{Platform: "nexscope", Kind: "room", ID: "lobby", Tenant: "b"}), registry.ErrConflict},
		"bind twice":             {r.Bind(ctx, room), nil},
		"bad kind":               {r.Bind(ctx, registry.Binding{Platform: "telegram", Kind: "room", ID: "1", Tenant: "a"}), registry.ErrInvalid},
		"bad chat id":            {r.Bind(ctx, registry.Binding{Platform: "telegram", Kind: "chat", ID: "x", Tenant: "a"}), registry.ErrInvalid},
		// Telegram has no chat or user 0, and refuses a table with one:
		// stored, it stopped every instance applying Telegram's routing.
		"telegram chat 0":       {r.Bind(ctx, registry.Binding{Platform: "telegram", Kind: "chat", ID: "-0", Tenant: "a"}), registry.ErrInvalid},
		"telegram user 0":       {r.Bind(ctx, registry.Binding{Platform: "telegram", Kind: "user", ID: "0", Tenant: "a"}), registry.ErrInvalid},
		"whatsapp number":       {r.Bind(ctx, registry.Binding{Platform: "whatsapp_cloud", Kind: "phone_number", ID: "106540352242922", Tenant: "a"}), nil},
		"whatsapp number taken": {r.Bind(ctx, registry.Binding{Platform: "whatsapp_cloud", Kind: "phone_number", ID: "106540352242922", Tenant: "b"}), registry.ErrConflict},
		"whatsapp bad number":   {r.Bind(ctx, registry.Binding{Platform: "whatsapp_cloud", Kind: "phone_number", ID: "+1 555", Tenant: "a"}), registry.ErrInvalid},
		"whatsapp scope":        {r.Bind(ctx, registry.Binding{Platform: "whatsapp_cloud", Kind: "scope", ID: "1", Tenant: "a"}), registry.ErrInvalid},
		"unbind unknown":        {r.Unbind(ctx, registry.Binding{Platform: "nexscope", Kind: "room", ID: "other", Tenant: "a"}), registry.ErrNotFound},
		"delete unknown tenant": {r.DeleteTenant(ctx, "zz"), registry.ErrNotFound},
	} {
		if !errors.Is(c.err, c.want) || (c.want == nil && c.err != nil) {
			t.Errorf("%s: %v, want %v", name, c.err, c.want)
		}
	}
	// Deleting a tenant takes its gateways and bindings.
	if err := r.DeleteTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	s, _ := effective(t, r)
	if len(s.Gateways) != 0 || len(s.Bindings) != 0 || len(s.Tenants) != 1 {
		t.Fatalf("after deleting a: %+v, want tenant b alone", s)
	}
}

// TestSurvivesReopen: what the API stored is there after the embedded
// store is closed and opened again (a restart).
func TestSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() store.Store {
		st, err := store.Open(ctx, store.Config{Backend: store.BackendEmbedded, Path: dir})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open()
	r := registry.New(st, clock.System)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	secret, err := r.CreateGateway(ctx, "acme", "gw")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Bind(ctx, registry.Binding{Platform: "nexscope", Kind: "room", ID: "lab", Tenant: "acme"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open()
	defer st.Close()
	s, _, err := registry.New(st, clock.System).Effective(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := secretsOf(s, "gw"); len(got) != 1 || got[0] != secret || len(s.Bindings) != 1 || len(s.Tenants) != 1 {
		t.Fatalf("after reopening: %d tenants, %d bindings, gateway secrets ok=%v", len(s.Tenants), len(s.Bindings), len(got) == 1 && got[0] == secret)
	}
}

// TestPolicies: a declared policy replaces the tenant's earlier one on its
// platform, a "relay" policy covers platforms without their own, and
// oversized declarations are refused.
func TestPolicies(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []registry.Policy{
		{Tenant: "a", Platform: "discord", RequireAddress: true},
		{Tenant: "a", Platform: "discord", RequireAddress: false, FreeResponseScopes: []string{"501"}},
		{Tenant: "a", Platform: "relay", AllowOtherBots: true},
	} {
		if err := r.SetPolicy(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := effective(t, r)
	rel := s.Relevance([]string{"discord", "telegram"})
	if d := rel["discord"]["a"]; d.RequireAddress || len(d.FreeResponseScopes) != 1 || d.AllowOtherBots {
		t.Errorf("discord policy %+v, want the second declaration", d)
	}
	if tg := rel["telegram"]["a"]; !tg.AllowOtherBots {
		t.Errorf("telegram policy %+v, want the relay declaration", tg)
	}
	big := make([]string, registry.MaxPolicyScopes+1)
	for i := range big {
		big[i] = "1"
	}
	for name, p := range map[string]registry.Policy{
		"too many scopes": {Tenant: "a", Platform: "discord", FreeResponseScopes: big},
		"empty scope":     {Tenant: "a", Platform: "discord", FreeResponseScopes: []string{""}},
		"no platform":     {Tenant: "a"},
	} {
		if err := r.SetPolicy(ctx, p); !errors.Is(err, registry.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestCorruptEntryIsPassedOver: a stored entry that does not decode (a
// binding, a gateway, a wake URL another program wrote) stops no apply,
// listing, drop or deletion: Effective names it in Corrupt and merges
// the rest; a claim on its platform is refused (it might hold the chat),
// one on another platform is judged as ever.
func TestCorruptEntryIsPassedOver(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(c)
	t.Cleanup(func() { _ = st.Close() })
	r := registry.New(st, c)
	for _, id := range []string{"a", "b"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Bind(ctx, registry.Binding{Platform: "telegram", Kind: platform.BindChat, ID: "-1001", Tenant: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGateway(ctx, "a", "gw1"); err != nil {
		t.Fatal(err)
	}
	kv := st.Registry()
	for ns, key := range map[string]string{"registry/bindings": "discord/guild/700", "registry/gateways": "gw9", "registry/wake": "gw8"} {
		if _, err := kv.Put(ctx, ns, key, []byte("{not json")); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := effective(t, r)
	if len(s.Bindings) != 1 || len(s.Gateways) != 1 || len(s.Corrupt) != 2 {
		t.Fatalf("effective bindings %+v, gateways %d, corrupt %q: want the telegram binding, gw1 and the two corrupt entries", s.Bindings, len(s.Gateways), s.Corrupt)
	}
	if _, err := r.Wakes(ctx); err != nil {
		t.Fatalf("Wakes: %v", err)
	}
	if err := r.Claim(ctx, "b", "discord", platform.Chat{ID: "701", Space: "700"}); err == nil {
		t.Fatal("a discord claim was judged without the corrupt discord binding")
	}
	if err := r.Claim(ctx, "b", "telegram", platform.Chat{ID: "-1002"}); err != nil {
		t.Fatalf("telegram claim: %v", err)
	}
	if _, err := r.DropManaged(ctx, "b"); err != nil {
		t.Fatalf("DropManaged: %v", err)
	}
	if err := r.DeleteTenant(ctx, "a"); err != nil {
		t.Fatalf("DeleteTenant: %v", err)
	}
}

// TestCorruptTenantCanBeDeleted: a tenant record that does not decode
// holds every platform's claims (its bindings are left out of the merge,
// so a claim might take its chats); DeleteTenant removes it, and claims
// are judged again. Before, DeleteTenant failed on it: no API could.
func TestCorruptTenantCanBeDeleted(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(c)
	t.Cleanup(func() { _ = st.Close() })
	r := registry.New(st, c)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Registry().Put(ctx, "registry/tenants", "a", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	chat := platform.Chat{ID: "-1002"}
	if err := r.Claim(ctx, "b", "telegram", chat); err == nil {
		t.Fatal("a claim was judged without the corrupt tenant's bindings")
	}
	if err := r.DeleteTenant(ctx, "a"); err != nil {
		t.Fatalf("DeleteTenant of the corrupt tenant: %v", err)
	}
	if s, _ := effective(t, r); len(s.Corrupt) != 0 {
		t.Fatalf("corrupt after the deletion: %q", s.Corrupt)
	}
	if err := r.Claim(ctx, "b", "telegram", chat); err != nil {
		t.Fatalf("claim after the corrupt tenant went: %v", err)
	}
}

// TestCorruptBindingOfADeletedTenantIsSwept: DeleteTenant's sweep removes a
// stored binding that does not decode when its key names the tenant (a
// link, an allow-list entry, a principal), which would otherwise hold
// back the platform's claims for good; one whose key names no tenant (a
// scope, a guild) or another tenant stays for the operator, unless its
// value still names the tenant. Before, every corrupt binding stayed.
func TestCorruptBindingOfADeletedTenantIsSwept(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(c)
	t.Cleanup(func() { _ = st.Close() })
	r := registry.New(st, c)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"discord/user/310/a", "slack/allow/U123/a", "telegram/principal/a", "discord/user/311/ab", "discord/scope/700", "dropped/a"} {
		if _, err := st.Registry().Put(ctx, "registry/bindings", key, []byte("{not json")); err != nil {
			t.Fatal(err)
		}
	}
	// One whose value still names its tenant goes, whatever its key.
	if _, err := st.Registry().Put(ctx, "registry/bindings", "discord/scope/701", []byte(`{"platform":"discord","kind":"scope","id":701,"tenant":"a"}`)); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteTenant(ctx, "a"); err != nil {
		t.Fatalf("DeleteTenant: %v", err)
	}
	s, err := r.Stored(ctx)
	if want := []string{"registry/bindings discord/scope/700", "registry/bindings discord/user/311/ab"}; err != nil || !slices.Equal(s.Corrupt, want) {
		t.Fatalf("corrupt %q (%v) after the deletion; want %q", s.Corrupt, err, want)
	}
}

// TestCorruptGatewayCanBeDeleted: a gateway entry that does not decode
// (passed over: its secrets are refused) is removed by DeleteGateway, the
// admin API's, whichever tenant names it. Before, DeleteGateway failed on
// it: no API could remove it.
func TestCorruptGatewayCanBeDeleted(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(c)
	t.Cleanup(func() { _ = st.Close() })
	r := registry.New(st, c)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Registry().Put(ctx, "registry/gateways", "gw9", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if s, _ := effective(t, r); len(s.Gateways) != 0 || len(s.Corrupt) != 1 {
		t.Fatalf("gateways %+v, corrupt %q: want none, and gw9 corrupt", s.Gateways, s.Corrupt)
	}
	if err := r.DeleteGateway(ctx, "a", "gw9"); err != nil {
		t.Fatalf("DeleteGateway of the corrupt gateway: %v", err)
	}
	if s, _ := effective(t, r); len(s.Corrupt) != 0 {
		t.Fatalf("corrupt after the deletion: %q", s.Corrupt)
	}
	if _, err := r.CreateGateway(ctx, "a", "gw9"); err != nil {
		t.Fatalf("CreateGateway of the freed id: %v", err)
	}
}

// TestTenantMadeAgainIsCreatedLater: a tenant made again under a deleted
// tenant's id, on an instance whose clock is an hour behind the one that
// created the deleted tenant, is still created later than it (the vault
// refuses an earlier creation's writes over a later one's).
func TestTenantMadeAgainIsCreatedLater(t *testing.T) {
	ctx := context.Background()
	ahead := clocktest.New(time.Unix(1_700_000_000, 0))
	behind := clocktest.New(ahead.Now().Add(-time.Hour))
	st := store.NewMemory(ahead)
	t.Cleanup(func() { _ = st.Close() })
	a, b := registry.New(st, ahead), registry.New(st, behind)
	created := func(r *registry.Registry) time.Time {
		t.Helper()
		s, _ := effective(t, r)
		for _, tn := range s.Tenants {
			if tn.ID == "acme" {
				return tn.Created
			}
		}
		t.Fatal("tenant acme not effective")
		return time.Time{}
	}
	if err := a.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	first := created(a)
	if err := a.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if again := created(b); again.UnixMicro() <= first.UnixMicro() {
		t.Fatalf("made again at %v, not later than the deleted tenant's creation %v", again, first)
	}
}

// TestTenantMadeAgainAsTheOldOneGoesIsCreatedLater: a creation on an
// instance whose clock is an hour behind, that read the deleted creations
// just before another instance finished deleting the tenant under the id
// (so its write lands once the id is free), is not made earlier than the
// deleted tenant: it is taken back and answered ErrConflict, and made
// again later. Before, it was stored with the earlier creation.
func TestTenantMadeAgainAsTheOldOneGoesIsCreatedLater(t *testing.T) {
	ctx := context.Background()
	ahead := clocktest.New(time.Unix(1_700_000_000, 0))
	behind := clocktest.New(ahead.Now().Add(-time.Hour))
	st := store.NewMemory(ahead)
	t.Cleanup(func() { _ = st.Close() })
	hooked := &hookedStore{Store: st}
	a, b := registry.New(st, ahead), registry.New(hooked, behind)
	if err := a.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	s, _ := effective(t, a)
	first := s.Tenants[0].Created
	deleted := false
	hooked.before = func(op, namespace, key string) {
		if op == "cas" && namespace == "registry/tenants" && !deleted {
			deleted = true // once: the deletion finishes between b's read and its write
			if err := a.DeleteTenant(ctx, "acme"); err != nil {
				t.Errorf("DeleteTenant: %v", err)
			}
		}
	}
	if err := b.CreateTenant(ctx, registry.Tenant{ID: "acme"}); !errors.Is(err, registry.ErrConflict) {
		s, _ := effective(t, b)
		t.Fatalf("creation racing the deletion: %v (tenants %+v), want ErrConflict", err, s.Tenants)
	}
	if err := b.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if s, _ := effective(t, b); len(s.Tenants) != 1 || s.Tenants[0].Created.UnixMicro() <= first.UnixMicro() {
		t.Fatalf("made again as %+v, not once and later than the deleted tenant's creation %v", s.Tenants, first)
	}
}
