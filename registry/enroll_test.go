package registry_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"connector/registry"
	"connector/store"
)

// TestEnrollTokenSingleUse: a token is redeemed once, by its tenant, before
// its expiry; a second enrollment of the same gateway rotates its secret.
func TestEnrollTokenSingleUse(t *testing.T) {
	ctx := context.Background()
	r, c := newRegistry(t)
	for _, id := range []string{"acme", "other"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := r.MintEnrollToken(ctx, "nobody", 0); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("token for an unknown tenant: %v, want ErrNotFound", err)
	}
	tok, exp, err := r.MintEnrollToken(ctx, "acme", time.Hour)
	if err != nil || !exp.Equal(c.t.Add(time.Hour)) {
		t.Fatalf("MintEnrollToken = %v, %v", exp, err)
	}
	if _, err := r.Enroll(ctx, "other", tok, "gw1"); !errors.Is(err, registry.ErrEnrollToken) {
		t.Fatalf("another tenant's token: %v, want ErrEnrollToken", err)
	}
	if _, err := r.Enroll(ctx, "acme", tok+"x", "gw1"); !errors.Is(err, registry.ErrEnrollToken) {
		t.Fatalf("a wrong token: %v, want ErrEnrollToken", err)
	}
	first, err := r.Enroll(ctx, "acme", tok, "gw1")
	if err != nil || first == "" {
		t.Fatalf("Enroll = %q, %v", first, err)
	}
	if _, err := r.Enroll(ctx, "acme", tok, "gw2"); !errors.Is(err, registry.ErrEnrollToken) {
		t.Fatalf("a spent token: %v, want ErrEnrollToken", err)
	}
	s, _ := effective(t, r)
	if got := secretsOf(s, "gw1"); len(got) != 1 || got[0] != first {
		t.Fatalf("gw1 secrets %d after enrollment, want the one returned", len(got))
	}

	// Enrolling gw1 again rotates: the old secret keeps the grace.
	tok2, _, _ := r.MintEnrollToken(ctx, "acme", 0)
	second, err := r.Enroll(ctx, "acme", tok2, "gw1")
	if err != nil || second == first {
		t.Fatalf("re-enrollment = %v; want a new secret", err)
	}
	s, _ = effective(t, r)
	if got := secretsOf(s, "gw1"); len(got) != 2 || got[0] != second || got[1] != first {
		t.Fatalf("after re-enrollment gw1 has %d secrets, want the new then the old", len(got))
	}
	// Another tenant cannot take gw1 over with its own token.
	tok3, _, _ := r.MintEnrollToken(ctx, "other", 0)
	if _, err := r.Enroll(ctx, "other", tok3, "gw1"); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("enrolling another tenant's gateway id: %v, want ErrConflict", err)
	}
	// Expiry.
	tok4, _, _ := r.MintEnrollToken(ctx, "acme", time.Minute)
	c.t = c.t.Add(time.Minute)
	if _, err := r.Enroll(ctx, "acme", tok4, "gw3"); !errors.Is(err, registry.ErrEnrollToken) {
		t.Fatalf("an expired token: %v, want ErrEnrollToken", err)
	}
}

// TestProvisionIdempotent: provisioning creates the gateway once and then
// answers the same secret (one secret for every fronted platform).
func TestProvisionIdempotent(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	if _, _, err := r.Provision(ctx, "acme", "gw1"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("provision for an unknown tenant: %v, want ErrNotFound", err)
	}
	for _, id := range []string{"acme", "other"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	s1, created, err := r.Provision(ctx, "acme", "gw1")
	if err != nil || !created || s1 == "" {
		t.Fatalf("first Provision = created %v, %v", created, err)
	}
	s2, created, err := r.Provision(ctx, "acme", "gw1")
	if err != nil || created || s2 != s1 {
		t.Fatalf("second Provision = created %v, same secret %v, %v", created, s2 == s1, err)
	}
	if _, _, err := r.Provision(ctx, "other", "gw1"); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("another tenant provisioning gw1: %v, want ErrConflict", err)
	}
	if _, _, err := r.Provision(ctx, "acme", "bad id"); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("a malformed gateway id: %v, want ErrInvalid", err)
	}
}

// TestWakeURLs: a wake URL is set for a gateway of the tenant, checked,
// replaced, cleared, and forgotten with its gateway.
func TestWakeURLs(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	if err := r.SetDeclared(registry.State{
		Tenants:  []registry.Tenant{{ID: "yaml"}},
		Gateways: []registry.Gateway{{ID: "ygw", Tenant: "yaml", Secrets: []registry.Secret{{Value: "s"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateGateway(ctx, "acme", "gw1"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetWake(ctx, "acme", "gw1", "ftp://x/"); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("ftp wake URL: %v, want ErrInvalid", err)
	}
	if err := r.SetWake(ctx, "acme", "ygw", "https://x/"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("another tenant's gateway: %v, want ErrNotFound", err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.SetWake(ctx, "acme", "gw1", "https://a.example/wake"))
	must(r.SetWake(ctx, "acme", "gw1", "https://b.example/wake"))
	must(r.SetWake(ctx, "yaml", "ygw", "http://127.0.0.1:9/"))
	targets := func(tenant string) []string {
		t.Helper()
		ts, err := r.WakeTargets(ctx, tenant)
		must(err)
		var out []string
		for _, x := range ts {
			out = append(out, x.Gateway+"="+x.URL)
		}
		return out
	}
	if got := targets("acme"); len(got) != 1 || got[0] != "gw1=https://b.example/wake" {
		t.Fatalf("acme targets %q", got)
	}
	if got := targets("yaml"); len(got) != 1 || got[0] != "ygw=http://127.0.0.1:9/" {
		t.Fatalf("yaml targets %q", got)
	}
	must(r.SetWake(ctx, "yaml", "ygw", ""))
	if got := targets("yaml"); len(got) != 0 {
		t.Fatalf("after clearing: %q", got)
	}
	must(r.DeleteGateway(ctx, "acme", "gw1"))
	if _, err := r.CreateGateway(ctx, "acme", "gw1"); err != nil {
		t.Fatal(err)
	}
	if got := targets("acme"); len(got) != 0 {
		t.Fatalf("a re-created gateway inherited the wake URL: %q", got)
	}
}

// TestEnrollTokenLifetimeIsBounded (issue 22): an enrollment token lives
// at most 24 h. Minting a longer one is refused (ErrInvalid), and a stored
// token whose expiry lies further ahead (minted by an older connector
// before the bound, with a 100-year lifetime) is refused when redeemed,
// and not spent. A 24 h token works.
func TestEnrollTokenLifetimeIsBounded(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	st := store.NewMemory(func() time.Time { return now })
	t.Cleanup(func() { _ = st.Close() })
	r := registry.New(st, func() time.Time { return now })
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{100 * 365 * 24 * time.Hour, 24*time.Hour + time.Second} {
		if tok, exp, err := r.MintEnrollToken(ctx, "acme", ttl); !errors.Is(err, registry.ErrInvalid) || tok != "" {
			t.Errorf("MintEnrollToken(%v) = %q expiring %v, %v; want ErrInvalid", ttl, tok, exp, err)
		}
	}
	tok, exp, err := r.MintEnrollToken(ctx, "acme", 24*time.Hour)
	if err != nil || !exp.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("MintEnrollToken(24h) = %v, %v", exp, err)
	}
	if _, err := r.Enroll(ctx, "acme", tok, "gw1"); err != nil {
		t.Fatalf("redeeming a 24 h token: %v", err)
	}

	const old = "enr_minted-by-an-older-connector"
	sum := sha256.Sum256([]byte(old))
	rec, _ := json.Marshal(map[string]any{"tenant": "acme", "expires": now.Add(100 * 365 * 24 * time.Hour)})
	if _, err := st.Registry().Put(ctx, "registry/enroll", hex.EncodeToString(sum[:]), rec); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enroll(ctx, "acme", old, "gw2"); !errors.Is(err, registry.ErrEnrollToken) {
		t.Fatalf("redeeming a stored 100-year token: %v, want ErrEnrollToken", err)
	}
	if s, _, _ := r.Effective(ctx); slices.ContainsFunc(s.Gateways, func(g registry.Gateway) bool { return g.ID == "gw2" }) {
		t.Fatal("a 100-year token created a gateway")
	}
}
