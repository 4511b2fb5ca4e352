package admin_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"connector/admin"
	"connector/internal/clock"
	"connector/registry"
	"connector/store"
)

// TestWakeAndEnrollTokens: a gateway's wake URL is set (checked), cleared,
// refused for an unknown gateway; an enrollment token is minted for an
// existing tenant only, shown once with its expiry, with a lifetime of at
// most 24 h.
func TestWakeAndEnrollTokens(t *testing.T) {
	h, m, _ := newHandler(t)
	bearer := "Bearer " + token
	steps := []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/admin/v1/tenants", `{"id":"acme"}`, 201},
		{"POST", "/admin/v1/tenants/acme/gateways", `{"id":"gw"}`, 201},
		{"PUT", "/admin/v1/tenants/acme/gateways/gw/wake", `{"url":"https://gw.example/wake"}`, 204},
		{"PUT", "/admin/v1/tenants/acme/gateways/gw/wake", `{"url":"gopher://x/"}`, 400},
		{"PUT", "/admin/v1/tenants/acme/gateways/gw/wake", `{"url":"https://u:p@x/"}`, 400},
		{"PUT", "/admin/v1/tenants/acme/gateways/nope/wake", `{"url":"https://x/"}`, 404},
	}
	for i, s := range steps {
		if w := do(h, s.method, s.path, bearer, s.body); w.Code != s.want {
			t.Fatalf("step %d %s %s: %d %s, want %d", i, s.method, s.path, w.Code, w.Body, s.want)
		}
	}
	if list := do(h, "GET", "/admin/v1/tenants", bearer, "").Body.String(); !strings.Contains(list, `"wake_url":"https://gw.example/wake"`) {
		t.Fatalf("the listing lacks the wake URL: %s", list)
	}
	steps = []struct {
		method, path, body string
		want               int
	}{
		{"PUT", "/admin/v1/tenants/acme/gateways/gw/wake", `{"url":""}`, 204},
		{"POST", "/admin/v1/tenants/nope/enroll-tokens", ``, 404},
		{"POST", "/admin/v1/tenants/acme/enroll-tokens", `{"ttl":"-1h"}`, 400},
		{"POST", "/admin/v1/tenants/acme/enroll-tokens", `{"ttl":"876000h"}`, 400}, // 100 years: at most 24h (issue 22)
		{"POST", "/admin/v1/tenants/acme/enroll-tokens", `{"ttl":"24h1s"}`, 400},
	}
	for i, s := range steps {
		if w := do(h, s.method, s.path, bearer, s.body); w.Code != s.want {
			t.Fatalf("step %d %s %s: %d %s, want %d", i, s.method, s.path, w.Code, w.Body, s.want)
		}
	}
	w := do(h, "POST", "/admin/v1/tenants/acme/enroll-tokens", bearer, `{"ttl":"2h"}`)
	var got struct{ Token, Expires string }
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != 201 || err != nil || len(got.Token) < 32 || got.Expires == "" {
		t.Fatalf("mint: %d %s", w.Code, w.Body)
	}
	if m.changes["set_wake/ok"] != 2 || m.changes["set_wake/invalid"] != 2 || m.changes["mint_enroll_token/ok"] != 1 {
		t.Errorf("metrics %v", m.changes)
	}
}

// TestMaxGateways: a tenant's bound on its gateways is set at creation and
// changed later; a gateway beyond it is 429 and nothing is made; the
// listing shows the bound and each stored gateway's origin.
func TestMaxGateways(t *testing.T) {
	h, m, _ := newHandler(t)
	bearer := "Bearer " + token
	steps := []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/admin/v1/tenants", `{"id":"acme","max_gateways":1}`, 201},
		{"POST", "/admin/v1/tenants", `{"id":"huge","max_gateways":10001}`, 400},
		{"POST", "/admin/v1/tenants/acme/gateways", `{"id":"gw1"}`, 201},
		{"POST", "/admin/v1/tenants/acme/gateways", `{"id":"gw2"}`, 429},
		{"PUT", "/admin/v1/tenants/acme/max-gateways", `{}`, 400},
		{"PUT", "/admin/v1/tenants/acme/max-gateways", `{"max_gateways":-1}`, 400},
		{"PUT", "/admin/v1/tenants/nope/max-gateways", `{"max_gateways":2}`, 404},
		{"PUT", "/admin/v1/tenants/acme/max-gateways", `{"max_gateways":2}`, 204},
		{"POST", "/admin/v1/tenants/acme/gateways", `{"id":"gw2"}`, 201},
	}
	for i, s := range steps {
		if w := do(h, s.method, s.path, bearer, s.body); w.Code != s.want {
			t.Fatalf("step %d %s %s %s: %d %s, want %d", i, s.method, s.path, s.body, w.Code, w.Body, s.want)
		}
	}
	list := do(h, "GET", "/admin/v1/tenants", bearer, "").Body.String()
	if !strings.Contains(list, `"max_gateways":2`) || strings.Count(list, `"origin":"admin"`) != 2 {
		t.Fatalf("the listing lacks the bound or the origins: %s", list)
	}
	if m.changes["create_gateway/limit"] != 1 || m.changes["set_max_gateways/ok"] != 1 {
		t.Errorf("metrics %v", m.changes)
	}
}

// TestWakeURLIsTheTenants: a wake URL set on a YAML gateway is listed
// under that tenant only: after a SIGHUP removes the gateway and declares
// one of the same id for another tenant, the new gateway lists none (and
// wakes nobody). Before, the listing took wake URLs by gateway id alone
// and showed the first tenant's URL under the second's gateway.
func TestWakeURLIsTheTenants(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	reg := registry.New(st, clock.System)
	declare := func(tenant string) {
		t.Helper()
		if err := reg.SetDeclared(registry.State{Tenants: []registry.Tenant{{ID: "a"}, {ID: "b"}},
			Gateways: []registry.Gateway{{ID: "gw1", Tenant: tenant, Secrets: []registry.Secret{{Value: "s"}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	declare("a")
	h, err := admin.New(admin.Config{Registry: reg, Token: token, Apply: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	bearer := "Bearer " + token
	if w := do(h, "PUT", "/admin/v1/tenants/a/gateways/gw1/wake", bearer, `{"url":"https://a.example/wake"}`); w.Code != 204 {
		t.Fatalf("a's wake URL: %d %s", w.Code, w.Body)
	}
	declare("b") // SIGHUP: gw1 is b's now
	var list struct {
		Tenants []admin.TenantView `json:"tenants"`
	}
	if err := json.Unmarshal(do(h, "GET", "/admin/v1/tenants", bearer, "").Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	for _, tv := range list.Tenants {
		for _, g := range tv.Gateways {
			if g.WakeURL != "" {
				t.Errorf("tenant %s gateway %s lists wake URL %q, set for tenant a's gateway of that id", tv.ID, g.ID, g.WakeURL)
			}
		}
	}
	if targets, err := reg.WakeTargets(ctx, "b"); err != nil || len(targets) != 0 {
		t.Fatalf("b's wake targets %v (%v), want none", targets, err)
	}
}
