package admin_test

import (
	"encoding/json"
	"strings"
	"testing"
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
