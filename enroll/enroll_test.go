package enroll_test

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/enroll"
	"connector/idtoken"
	"connector/idtoken/idtokentest"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/registry"
	"connector/registry/change"
	"connector/store"
)

var (
	keyOnce sync.Once
	key     *rsa.PrivateKey
)

type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) AdminChange(op, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[op+"/"+outcome]++
}

type rig struct {
	clk     *clocktest.Fake
	srv     *httptest.Server
	reg     *registry.Registry
	metrics *counts
	logs    *bytes.Buffer
	logMu   *sync.Mutex
	applied int
	// handler is the rig's Handler, which srv serves.
	handler *enroll.Handler
	// changes is its Limiter, as the connector shares it with the
	// gateways' other changes (/relay/policy, /manage/*).
	changes *change.Limiter
}

type syncWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func newRig(t *testing.T, configured bool) *rig {
	t.Helper()
	return newRigOn(t, configured, func(st store.Store) store.Store { return st })
}

// newRigOn is newRig with its memory store wrapped by wrap.
func newRigOn(t *testing.T, configured bool, wrap func(store.Store) store.Store) *rig {
	t.Helper()
	keyOnce.Do(func() { key = idtokentest.Key(t) })
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	r := &rig{clk: clk, reg: registry.New(wrap(st), clk), metrics: &counts{n: map[string]int{}}, logs: &bytes.Buffer{}, logMu: &sync.Mutex{}, changes: change.NewLimiter(clk)}
	var v *idtoken.Verifier
	if configured {
		pub, err := idtoken.ParsePublicKeys(idtokentest.PublicPEM(t, key))
		if err != nil {
			t.Fatal(err)
		}
		if v, err = idtoken.New(idtoken.Config{Keys: pub, Audience: "connector", Clock: clk}); err != nil {
			t.Fatal(err)
		}
	}
	h := enroll.New(enroll.HandlerConfig{
		Verifier: v, Registry: r.reg, Platforms: fronted,
		Apply:   func(context.Context) error { r.applied++; return nil },
		Log:     slog.New(slog.NewJSONHandler(syncWriter{r.logMu, r.logs}, nil)),
		Metrics: r.metrics,
		Clock:   clk,
		Limiter: r.changes,
	})
	r.handler = h
	mux := http.NewServeMux()
	for pattern, handler := range h.Routes() {
		mux.Handle(pattern, handler)
	}
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	if err := r.reg.CreateTenant(context.Background(), registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	return r
}

// fronted is the platforms the rig's connector fronts: all it can.
var fronted = []string{"discord", "telegram", "slack", "whatsapp_cloud", "nexscope"}

func identity(t *testing.T, tenant string) string {
	return idtokentest.Sign(t, key, map[string]any{"tid": tenant, "aud": "connector", "sub": "owner@acme", "exp": 1_700_000_300})
}

// post sends body to path with the bearer and decodes the answer.
func (r *rig) post(t *testing.T, path, bearer string, body any) (int, map[string]any) {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, r.srv.URL+path, bytes.NewReader(data))
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: answer %q is not JSON", path, raw)
	}
	return resp.StatusCode, out
}

func TestNotConfigured(t *testing.T) {
	r := newRig(t, false)
	for _, path := range []string{"/relay/enroll", "/relay/provision"} {
		if code, body := r.post(t, path, "x", map[string]string{}); code != http.StatusNotFound || !strings.Contains(body["error"].(string), "public_key_file") {
			t.Errorf("%s without a key: %d %v, want 404 naming the key", path, code, body)
		}
	}
}

// TestEnroll: the CLI's body and bearer, its single-use token, the answer
// it reads, and the refusals it maps to messages (401, 403).
func TestEnroll(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	tok, _, err := r.reg.MintEnrollToken(ctx, "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]string{"enrollmentToken": tok, "gatewayId": "gw-host", "wakeUrl": "https://gw.example/wake"}
	if code, _ := r.post(t, "/relay/enroll", "", body); code != http.StatusUnauthorized {
		t.Fatalf("no bearer: %d, want 401", code)
	}
	if code, _ := r.post(t, "/relay/enroll", identity(t, "acme")+"x", body); code != http.StatusUnauthorized {
		t.Fatalf("a bad identity token: %d, want 401", code)
	}
	if code, _ := r.post(t, "/relay/enroll", identity(t, "other"), body); code != http.StatusForbidden {
		t.Fatalf("another tenant's identity: %d, want 403", code)
	}
	code, got := r.post(t, "/relay/enroll", identity(t, "acme"), body)
	if code != http.StatusOK || got["secret"] == "" || got["tenant"] != "acme" || got["gatewayId"] != "gw-host" {
		t.Fatalf("enroll: %d %v", code, got)
	}
	if _, ok := got["deliveryKey"]; !ok {
		t.Error("the answer lacks deliveryKey")
	}
	if code, _ := r.post(t, "/relay/enroll", identity(t, "acme"), body); code != http.StatusForbidden {
		t.Fatalf("the token again: %d, want 403", code)
	}
	targets, _ := r.reg.WakeTargets(ctx, "acme")
	if len(targets) != 1 || targets[0].URL != "https://gw.example/wake" {
		t.Fatalf("wake URL after enroll: %+v", targets)
	}
	s, _, _ := r.reg.Effective(ctx)
	if len(s.Gateways) != 1 || s.Gateways[0].Secrets[0].Value != got["secret"] {
		t.Fatal("the answered secret is not the gateway's")
	}
	if r.metrics.n["relay_enroll/ok"] != 1 || r.metrics.n["relay_enroll/unauthorized"] != 2 || r.metrics.n["relay_enroll/forbidden"] != 2 {
		t.Errorf("metrics %v", r.metrics.n)
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	for _, secret := range []string{tok, got["secret"].(string), "/wake"} {
		if strings.Contains(r.logs.String(), secret) {
			t.Errorf("the log shows a secret or the wake URL's path: %q", secret)
		}
	}
	if !strings.Contains(r.logs.String(), `"subject":"owner@acme"`) || !strings.Contains(r.logs.String(), `"gateway_id":"gw-host"`) {
		t.Errorf("the log does not say who and what:\n%s", r.logs)
	}
}

// TestProvision: the self-provision body, once per platform under one
// gateway id and one secret; route keys become bindings; refusals.
func TestProvision(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	id := identity(t, "acme")
	body := func(platform string, keys []string, wake string) map[string]any {
		b := map[string]any{"gatewayId": "gw-fly1", "platform": platform, "botId": "123", "gatewayEndpoint": "",
			"routeKeys": keys, "instanceId": "inst-9", "futureField": true}
		if wake != "" {
			b["wakeUrl"] = wake
		}
		return b
	}
	code, first := r.post(t, "/relay/provision", id, body("discord", []string{"0500", "600"}, "https://app.fly.dev"))
	if code != http.StatusOK || first["secret"] == "" || first["gatewayId"] != "gw-fly1" || first["tenant"] != "acme" {
		t.Fatalf("provision discord: %d %v", code, first)
	}
	if keys, _ := first["routeKeys"].([]any); len(keys) != 2 || keys[0] != "500" || keys[1] != "600" {
		t.Fatalf("routeKeys answered %v, want the canonical guild ids", first["routeKeys"])
	}
	code, second := r.post(t, "/relay/provision", id, body("telegram", []string{"-100"}, "https://app.fly.dev"))
	if code != http.StatusOK || second["secret"] != first["secret"] {
		t.Fatalf("provision telegram: %d, same secret %v", code, second["secret"] == first["secret"])
	}
	s, _, _ := r.reg.Effective(ctx)
	if len(s.Bindings) != 3 {
		t.Fatalf("bindings %+v, want discord 500, 600 and telegram -100", s.Bindings)
	}
	if ts, _ := r.reg.WakeTargets(ctx, "acme"); len(ts) != 1 {
		t.Fatalf("wake targets %+v", ts)
	}
	// A boot without a wake URL clears it (the gateway stores null).
	if code, _ := r.post(t, "/relay/provision", id, body("relay", nil, "")); code != http.StatusOK {
		t.Fatalf("provision relay: %d", code)
	}
	if ts, _ := r.reg.WakeTargets(ctx, "acme"); len(ts) != 0 {
		t.Fatalf("wake targets after a provision without wakeUrl: %+v", ts)
	}

	for name, tc := range map[string]struct {
		bearer string
		body   map[string]any
		want   int
	}{
		"unknown platform":      {id, body("irc", nil, ""), http.StatusBadRequest},
		"route keys on relay":   {id, body("relay", []string{"1"}, ""), http.StatusBadRequest},
		"bad guild id":          {id, body("discord", []string{"abc"}, ""), http.StatusBadRequest},
		"bad wake URL":          {id, body("discord", nil, "ftp://x/"), http.StatusBadRequest},
		"bad gateway id":        {id, map[string]any{"gatewayId": "a b", "platform": "discord"}, http.StatusBadRequest},
		"tenant not onboarded":  {identity(t, "stranger"), body("discord", nil, ""), http.StatusForbidden},
		"no identity":           {"", body("discord", nil, ""), http.StatusUnauthorized},
		"expired identity":      {idtokentest.Sign(t, key, map[string]any{"tid": "acme", "aud": "connector", "exp": 1_699_999_000}), body("discord", nil, ""), http.StatusUnauthorized},
		"wrong audience":        {idtokentest.Sign(t, key, map[string]any{"tid": "acme", "aud": "x", "exp": 1_700_000_300}), body("discord", nil, ""), http.StatusUnauthorized},
		"another tenant's keys": {identity(t, "beta"), body("discord", []string{"500"}, ""), http.StatusConflict},
	} {
		if name == "another tenant's keys" {
			_ = r.reg.CreateTenant(ctx, registry.Tenant{ID: "beta"})
			tc.body["gatewayId"] = "gw-beta"
		}
		if code, got := r.post(t, "/relay/provision", tc.bearer, tc.body); code != tc.want || got["error"] == "" {
			t.Errorf("%s: %d %v, want %d with an error", name, code, got, tc.want)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, r.srv.URL+"/relay/provision", strings.NewReader("{not json"))
	req.Header.Set("Authorization", "Bearer "+id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("malformed body: %d, want 400", resp.StatusCode)
	}
	if r.metrics.n["relay_provision/ok"] != 3 {
		t.Errorf("metrics %v", r.metrics.n)
	}
}

// FuzzProvision feeds arbitrary bodies from an authenticated caller to both
// routes: every answer is a documented status with a JSON body, never a
// panic or a 500.
func FuzzProvision(f *testing.F) {
	f.Add(true, `{"gatewayId":"gw","platform":"discord","routeKeys":["1","0x"],"wakeUrl":"https://x/"}`)
	f.Add(true, `{"gatewayId":"gw","platform":"relay","routeKeys":[]}`)
	f.Add(false, `{"enrollmentToken":"enr_x","gatewayId":"gw","wakeUrl":"http://u@h/"}`)
	f.Add(true, `{"gatewayId":"gw","platform":"telegram","routeKeys":["-0100"],"instanceId":null}`)
	f.Add(false, `[]`)
	f.Fuzz(func(t *testing.T, provision bool, body string) {
		r := fuzzRig(t)
		path := "/relay/enroll"
		if provision {
			path = "/relay/provision"
		}
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+r.bearer)
		w := httptest.NewRecorder()
		r.mux.ServeHTTP(w, req)
		switch w.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusForbidden, http.StatusConflict, http.StatusTooManyRequests:
		default:
			t.Fatalf("%s %q: status %d %s", path, body, w.Code, w.Body)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %q: answer %q is not JSON", path, body, w.Body)
		}
	})
}

// fuzzState is the fuzz target's handler, built once per process.
type fuzzState struct {
	mux    *http.ServeMux
	bearer string
}

var (
	fuzzOnce sync.Once
	fuzzS    *fuzzState
)

func fuzzRig(t *testing.T) *fuzzState {
	fuzzOnce.Do(func() {
		keyOnce.Do(func() { key = idtokentest.Key(t) })
		clk := clocktest.New(time.Unix(1_700_000_000, 0))
		st := store.NewMemory(clk) // lives for the process
		reg := registry.New(st, clk)
		_ = reg.CreateTenant(context.Background(), registry.Tenant{ID: "acme"})
		pub, err := idtoken.ParsePublicKeys(idtokentest.PublicPEM(t, key))
		if err != nil {
			t.Fatal(err)
		}
		v, err := idtoken.New(idtoken.Config{Keys: pub, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		for pattern, h := range enroll.New(enroll.HandlerConfig{Verifier: v, Registry: reg, Platforms: []string{"discord", "telegram", "nexscope"}}).Routes() {
			mux.Handle(pattern, h)
		}
		fuzzS = &fuzzState{mux: mux, bearer: idtokentest.Sign(t, key, map[string]any{"tid": "acme", "exp": 1_700_000_300})}
	})
	return fuzzS
}

// identityOf is an identity token of tenant for subject: another holder of
// an identity token of the same tenant (a token differs by its claims).
func identityOf(t *testing.T, tenant, subject string) string {
	return idtokentest.Sign(t, key, map[string]any{"tid": tenant, "aud": "connector", "sub": subject, "exp": 1_700_000_300})
}

// provisionBody is the stock gateway's provision body for gateway on
// platform with wake.
func provisionBody(gateway, platform, wake string) map[string]any {
	return map[string]any{"gatewayId": gateway, "platform": platform, "botId": "", "gatewayEndpoint": "", "routeKeys": []string{}, "wakeUrl": wake}
}

// TestProvisionNeverHandsOutAnExistingSecret (issue 22): the stock
// gateway's boot (one identity token, one POST per platform) gets one
// secret; anyone else holding an identity token of the tenant, provisioning
// the same gateway id, gets a fresh secret, never the one in use (which
// keeps the rotation grace, so a connected prior instance is not cut
// off). A gateway made by the admin API or by an enrollment is not
// provisioned at all (409, no secret): its secret is pinned where it runs.
func TestProvisionNeverHandsOutAnExistingSecret(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	boot := identityOf(t, "acme", "gw-fly1 boot 1")
	_, first := r.post(t, "/relay/provision", boot, provisionBody("gw-fly1", "discord", ""))
	code, second := r.post(t, "/relay/provision", boot, provisionBody("gw-fly1", "telegram", ""))
	if code != http.StatusOK || first["secret"] == nil || second["secret"] != first["secret"] {
		t.Fatalf("the boot's second platform: %d, same secret %v; want the first answer's", code, second["secret"] == first["secret"])
	}
	code, stolen := r.post(t, "/relay/provision", identityOf(t, "acme", "mallory"), provisionBody("gw-fly1", "discord", ""))
	if code == http.StatusOK && stolen["secret"] == first["secret"] {
		t.Fatal("another identity token of the tenant was answered the gateway's current secret")
	}
	if code != http.StatusOK || stolen["secret"] == "" {
		t.Fatalf("a provision with another token: %d %v, want a fresh secret", code, stolen)
	}
	s, _, _ := r.reg.Effective(ctx)
	var kept []string
	for _, g := range s.Gateways {
		if g.ID == "gw-fly1" {
			for _, sec := range g.Secrets {
				kept = append(kept, sec.Value)
			}
		}
	}
	if len(kept) != 2 || kept[0] != stolen["secret"] || kept[1] != first["secret"] {
		t.Fatalf("gw-fly1 accepts %d secrets, want the new one and the boot's (in its grace)", len(kept))
	}

	if _, err := r.reg.CreateGateway(ctx, "acme", "gw-admin"); err != nil {
		t.Fatal(err)
	}
	enrollTok, _, err := r.reg.MintEnrollToken(ctx, "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.reg.Enroll(ctx, "acme", enrollTok, "gw-laptop", ""); err != nil {
		t.Fatal(err)
	}
	for _, gw := range []string{"gw-admin", "gw-laptop"} {
		code, got := r.post(t, "/relay/provision", boot, provisionBody(gw, "discord", ""))
		if code != http.StatusConflict || got["secret"] != nil {
			t.Errorf("provisioning %s (not made by provision): %d %v, want 409 without a secret", gw, code, got)
		}
	}
}

// TestProvisionCapsGatewaysPerTenant (issue 22): one identity token
// provisions gateways with one wake URL until the tenant has its default
// max_gateways (100); the next is refused (429) and makes no gateway, so
// no further wake target.
func TestProvisionCapsGatewaysPerTenant(t *testing.T) {
	r := newRig(t, true)
	id := identity(t, "acme")
	for i := range 100 {
		if code, got := r.post(t, "/relay/provision", id, provisionBody(fmt.Sprintf("gw-%03d", i), "relay", "https://victim.example/wake")); code != http.StatusOK {
			t.Fatalf("provision %d: %d %v", i, code, got)
		}
	}
	code, got := r.post(t, "/relay/provision", id, provisionBody("gw-100", "relay", "https://victim.example/wake"))
	if msg, _ := got["error"].(string); code != http.StatusTooManyRequests || !strings.Contains(msg, "max_gateways") {
		t.Fatalf("the 101st gateway: %d %v, want 429 naming max_gateways", code, got)
	}
	if ts, _ := r.reg.WakeTargets(context.Background(), "acme"); len(ts) != 100 {
		t.Fatalf("%d wake targets, want 100", len(ts))
	}
}

// TestFleetBootStaysWithinTheChangeAllowance: a tenant's 100 gateways
// (DefaultMaxGateways) booting at once, each provisioning and setting a
// policy (as /relay/policy does, on the shared limiter) for every platform
// the connector fronts, 1,000 changes at one instant on the injected
// clock, are all let through; so is the fleet's restart (the next boot's
// identity token: a rotation each) once the tenant's allowance has
// refilled (change.TenantBurst at change.TenantEvery). The figures rest on
// change.TenantBurst, which had only arithmetic behind it.
func TestFleetBootStaysWithinTheChangeAllowance(t *testing.T) {
	r := newRig(t, true)
	boot := func(bearer string) {
		t.Helper()
		for i := range registry.DefaultMaxGateways {
			gw := fmt.Sprintf("gw-%03d", i)
			for _, p := range fronted {
				if code, got := r.post(t, "/relay/provision", bearer, provisionBody(gw, p, "")); code != http.StatusOK || got["secret"] == nil {
					t.Fatalf("%s's provision on %s: %d %v", gw, p, code, got)
				}
				if err := r.changes.Check("acme", gw); err != nil {
					t.Fatalf("%s's policy on %s: %v", gw, p, err)
				}
				r.changes.Spend("acme", gw)
			}
		}
	}
	boot(identity(t, "acme"))
	if err := r.changes.Check("acme", "gw-000"); err == nil {
		t.Error("a change past the boot's 1,000: let through, want the allowance spent exactly (the test's figures changed)")
	}
	r.clk.Advance(change.TenantBurst * change.TenantEvery)
	boot(identityOf(t, "acme", "next boot"))
	if n := r.metrics.n["relay_provision/rate_limited"]; n != 0 {
		t.Errorf("%d provisions rate-limited, want none", n)
	}
}

// TestProvisionRateLimit: provisions that create or rotate a gateway are
// limited per tenant, ProvisionBurst at once and then one per
// ProvisionEvery (on the handler's clock), answered 429 with Retry-After;
// the same boot's repeat is free, and another tenant has its own
// allowance. A tenant's max_gateways is settable (here 1,000, above the
// burst).
func TestProvisionRateLimit(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	for _, tenant := range []registry.Tenant{{ID: "big", MaxGateways: 1000}, {ID: "small"}} {
		if err := r.reg.CreateTenant(ctx, tenant); err != nil {
			t.Fatal(err)
		}
	}
	id := identity(t, "big")
	for i := range enroll.ProvisionBurst {
		if code, got := r.post(t, "/relay/provision", id, provisionBody(fmt.Sprintf("gw-%03d", i), "relay", "")); code != http.StatusOK {
			t.Fatalf("provision %d of the burst: %d %v", i, code, got)
		}
	}
	limited := func(gateway, bearer string) {
		t.Helper()
		data, _ := json.Marshal(provisionBody(gateway, "relay", ""))
		req, _ := http.NewRequest(http.MethodPost, r.srv.URL+"/relay/provision", bytes.NewReader(data))
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("%s past the burst: %d, Retry-After %q; want 429, 1", gateway, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	limited("gw-new", id)
	limited("gw-000", identityOf(t, "big", "next boot")) // a rotation is a change too
	if code, _ := r.post(t, "/relay/provision", id, provisionBody("gw-000", "discord", "")); code != http.StatusOK {
		t.Fatalf("the same boot's repeat while limited: %d, want 200", code)
	}
	if code, _ := r.post(t, "/relay/provision", identity(t, "small"), provisionBody("gw-small", "relay", "")); code != http.StatusOK {
		t.Fatalf("another tenant while big is limited: %d, want 200", code)
	}
	r.clk.Advance(enroll.ProvisionEvery)
	if code, _ := r.post(t, "/relay/provision", id, provisionBody("gw-new", "relay", "")); code != http.StatusOK {
		t.Fatalf("after %v: %d, want 200", enroll.ProvisionEvery, code)
	}
	limited("gw-newer", id)
	if r.metrics.n["relay_provision/rate_limited"] != 3 {
		t.Errorf("metrics %v, want 3 rate_limited", r.metrics.n)
	}
}

// TestRepeatedProvisionsAreRateLimited: a provision of an existing
// gateway with the token its secret was minted for creates and rotates
// nothing (the provisioning limit lets it through), but stores the wake
// URL and route keys again, which has every instance apply the registry.
// So the provisions of one gateway id share a gateway credential's
// allowance of registry changes (change.Limiter: change.GatewayBurst at
// once, then one per change.GatewayEvery), answered 429 beyond it with
// nothing applied. Before, one identity token could repeat a provision
// without end, each one applied on every instance.
func TestRepeatedProvisionsAreRateLimited(t *testing.T) {
	r := newRig(t, true)
	id := identity(t, "acme")
	for i := range change.GatewayBurst {
		if code, got := r.post(t, "/relay/provision", id, provisionBody("gw", "discord", "")); code != http.StatusOK {
			t.Fatalf("provision %d: %d %v", i+1, code, got)
		}
	}
	applied := r.applied
	if code, got := r.post(t, "/relay/provision", id, provisionBody("gw", "discord", "")); code != http.StatusTooManyRequests ||
		!strings.Contains(fmt.Sprint(got["error"]), "retry after") || r.applied != applied {
		t.Fatalf("provision past the allowance: %d %v, %d applies; want 429 and none", code, got, r.applied-applied)
	}
	if code, got := r.post(t, "/relay/provision", id, provisionBody("gw-other", "discord", "")); code != http.StatusOK {
		t.Fatalf("another gateway id meanwhile: %d %v, want 200", code, got)
	}
	r.clk.Advance(change.GatewayEvery)
	if code, got := r.post(t, "/relay/provision", id, provisionBody("gw", "discord", "")); code != http.StatusOK {
		t.Fatalf("after %v: %d %v, want 200", change.GatewayEvery, code, got)
	}
}

// TestLongIDsAreNotEchoed: the ids a caller sends (gatewayId, platform,
// the wake URL's host, a route key) are logged and answered bounded,
// however long: an
// identity token's holder could otherwise make every request write its
// 64 KiB body into the log twice (an attribute and the error naming it)
// and get it back, with no rate limit on a refused request.
func TestLongIDsAreNotEchoed(t *testing.T) {
	r := newRig(t, true)
	long := strings.Repeat("g", 60<<10)
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/relay/provision", map[string]any{"gatewayId": long, "platform": "relay"}},
		{"/relay/provision", map[string]any{"gatewayId": "gw1", "platform": long}},
		{"/relay/provision", map[string]any{"gatewayId": "gw1", "platform": "relay", "wakeUrl": "https://" + long + ".example/"}},
		{"/relay/provision", map[string]any{"gatewayId": "gw1", "platform": "discord", "routeKeys": []string{long}}},
		{"/relay/enroll", map[string]any{"gatewayId": long, "enrollmentToken": "enr_x"}},
		{"/relay/enroll", map[string]any{"gatewayId": "gw1", "enrollmentToken": "enr_x", "wakeUrl": "https://" + long + ".example/"}},
	} {
		r.logMu.Lock()
		r.logs.Reset()
		r.logMu.Unlock()
		status, answer := r.post(t, c.path, identity(t, "acme"), c.body)
		r.logMu.Lock()
		logged := r.logs.Len()
		r.logMu.Unlock()
		if msg, _ := answer["error"].(string); status != http.StatusBadRequest || len(msg) > 1024 || logged > 2048 {
			t.Errorf("%s with a 60 KiB id: %d, an answer of %d bytes and %d bytes of log; want 400 and both bounded", c.path, status, len(msg), logged)
		}
	}
}

// listCounting is a store whose registry counts the namespaces read
// whole (List).
type listCounting struct {
	store.Store
	lists *atomic.Int64
}

func (s listCounting) Registry() store.Registry {
	return listCountingRegistry{Registry: s.Store.Registry(), lists: s.lists}
}

type listCountingRegistry struct {
	store.Registry
	lists *atomic.Int64
}

func (r listCountingRegistry) List(ctx context.Context, namespace string) ([]store.Entry, uint64, error) {
	r.lists.Add(1)
	return r.Registry.List(ctx, namespace)
}

// TestProvisionReadsTheRegistryOnceForItsRouteKeys: a provision's route
// keys are checked against the ownership order with one read of the
// registry, not one read of every namespace per key. Before, a repeated
// provision (free of the rate limit) with MaxRouteKeys keys read the
// whole registry 1,000 times: 4,000 namespace reads per request.
func TestProvisionReadsTheRegistryOnceForItsRouteKeys(t *testing.T) {
	keyOnce.Do(func() { key = idtokentest.Key(t) })
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	lists := &atomic.Int64{}
	reg := registry.New(listCounting{Store: mem, lists: lists}, clk)
	if err := reg.CreateTenant(context.Background(), registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	pub, err := idtoken.ParsePublicKeys(idtokentest.PublicPEM(t, key))
	if err != nil {
		t.Fatal(err)
	}
	v, err := idtoken.New(idtoken.Config{Keys: pub, Audience: "connector", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	h := enroll.New(enroll.HandlerConfig{Verifier: v, Registry: reg, Platforms: []string{"telegram"}, Clock: clk})
	keys := make([]string, enroll.MaxRouteKeys)
	for i := range keys {
		keys[i] = fmt.Sprint(-1000000 - i)
	}
	body, _ := json.Marshal(map[string]any{"gatewayId": "gw1", "platform": "telegram", "routeKeys": keys})
	for round := range 2 { // the first binds them, the repeat finds them bound
		lists.Store(0)
		req := httptest.NewRequest(http.MethodPost, "/relay/provision", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+identity(t, "acme"))
		w := httptest.NewRecorder()
		h.Routes()["POST /relay/provision"].ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("provision %d: %d %s", round, w.Code, w.Body)
		}
		if n := lists.Load(); n > 16 {
			t.Errorf("provision %d with %d route keys read %d namespaces whole, want a few (one registry read)", round, len(keys), n)
		}
	}
	if s, _, _ := reg.Effective(context.Background()); len(s.Bindings) != len(keys) {
		t.Fatalf("%d bindings, want %d", len(s.Bindings), len(keys))
	}
}

// TestLongSubjectIsCut: the identity token's sub claim is logged cut to
// maxLogIDBytes, as the ids of the body are: a signed token may carry
// one of several KiB (the token is at most 8 KiB), which was logged whole
// with every request.
func TestLongSubjectIsCut(t *testing.T) {
	r := newRig(t, true)
	sub := strings.Repeat("s", 5<<10)
	r.post(t, "/relay/provision", identityOf(t, "acme", sub), map[string]any{"gatewayId": "gw1", "platform": "nowhere"})
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if logged := r.logs.String(); strings.Contains(logged, sub[:1024]) || !strings.Contains(logged, `"subject":"`+sub[:100]) {
		t.Errorf("the log holds %d bytes: the subject not cut to a prefix", len(logged))
	}
}

// TestProvisionRouteKeysBoundPerTenant: a provision whose route keys would
// take its tenant past registry.MaxTenantBindings is 429, as the tenant's
// max_gateways is, and binds none of them; one up to the bound passes, and
// another tenant's provision is unaffected. Before, every provision bound
// up to 1,000 more keys without end.
func TestProvisionRouteKeysBoundPerTenant(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	if err := r.reg.CreateTenant(ctx, registry.Tenant{ID: "globex"}); err != nil {
		t.Fatal(err)
	}
	next := 0
	keys := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			next++
			out[i] = fmt.Sprint(-1_000_000 - next)
		}
		return out
	}
	const filled = registry.MaxTenantBindings - 1
	for held := 0; held < filled; {
		batch := make([]registry.Binding, 0, enroll.MaxRouteKeys)
		for _, k := range keys(min(enroll.MaxRouteKeys, filled-held)) {
			batch = append(batch, registry.Binding{Platform: "telegram", Kind: platform.BindChat, ID: k, Tenant: "acme"})
		}
		if err := r.reg.BindOwn(ctx, batch...); err != nil {
			t.Fatal(err)
		}
		held += len(batch)
	}
	stored := func(tenant string) int {
		t.Helper()
		s, err := r.reg.Stored(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, b := range s.Bindings {
			if b.Tenant == tenant {
				n++
			}
		}
		return n
	}
	provision := func(tenant string, routeKeys []string) (int, map[string]any) {
		return r.post(t, "/relay/provision", identity(t, tenant), map[string]any{"gatewayId": "gw-" + tenant, "platform": "telegram", "routeKeys": routeKeys})
	}
	if code, body := provision("acme", keys(2)); code != http.StatusTooManyRequests || !strings.Contains(fmt.Sprint(body["error"]), "more than 10000 stored bindings") {
		t.Fatalf("2 new keys with %d of %d held: %d %v, want 429 naming the bound", filled, registry.MaxTenantBindings, code, body)
	}
	if n := stored("acme"); n != filled {
		t.Fatalf("after the refused provision acme holds %d bindings, want %d: part of it was bound", n, filled)
	}
	if code, body := provision("acme", keys(1)); code != http.StatusOK {
		t.Fatalf("1 new key up to the bound: %d %v", code, body)
	}
	if code, body := provision("globex", keys(enroll.MaxRouteKeys)); code != http.StatusOK {
		t.Fatalf("globex's provision while acme is at its bound: %d %v", code, body)
	}
	if n := stored("globex"); n != enroll.MaxRouteKeys {
		t.Fatalf("globex holds %d bindings, want %d", n, enroll.MaxRouteKeys)
	}
}

// TestFailedProvisionsThatStoredAreRateLimited: a provision whose route
// keys end in one another tenant holds answers 409, but has stored the
// keys before it, which every instance applies: it spends from the
// gateway id's allowance of registry changes like one that succeeded, and
// past change.GatewayBurst it is 429 with nothing stored. Before, a
// failed provision spent nothing, and one identity token could have the
// fleet apply the registry without end (a fresh key each time).
func TestFailedProvisionsThatStoredAreRateLimited(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	if err := r.reg.CreateTenant(ctx, registry.Tenant{ID: "other"}); err != nil {
		t.Fatal(err)
	}
	if err := r.reg.Bind(ctx, registry.Binding{Platform: "telegram", Kind: "chat", ID: "-1", Tenant: "other"}); err != nil {
		t.Fatal(err)
	}
	id := identity(t, "acme")
	body := func(i int) map[string]any {
		b := provisionBody("gw", "telegram", "")
		b["routeKeys"] = []string{fmt.Sprint(-1000 - i), "-1"}
		return b
	}
	for i := range change.GatewayBurst {
		if code, got := r.post(t, "/relay/provision", id, body(i)); code != http.StatusConflict {
			t.Fatalf("provision %d with another tenant's route key: %d %v, want 409", i+1, code, got)
		}
	}
	if code, got := r.post(t, "/relay/provision", id, body(change.GatewayBurst)); code != http.StatusTooManyRequests {
		t.Fatalf("a provision past the allowance spent by failed ones that stored: %d %v, want 429", code, got)
	}
	s, err := r.reg.Stored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Bindings) != change.GatewayBurst+1 {
		t.Fatalf("%d bindings stored, want %d (the refused provision stored one)", len(s.Bindings), change.GatewayBurst+1)
	}
}

// faulty is a store whose registry calls put, when set, before each Put
// and CompareAndSwap (an error it returns is the write's, which writes
// nothing), and cas, when set, after each CompareAndSwap, with the
// namespace written.
type faulty struct {
	store.Store
	put func(namespace string) error
	cas func(namespace string)
}

func (s *faulty) Registry() store.Registry { return faultyRegistry{s.Store.Registry(), s} }

type faultyRegistry struct {
	store.Registry
	s *faulty
}

func (r faultyRegistry) Put(ctx context.Context, namespace, key string, value []byte) (uint64, error) {
	if r.s.put != nil {
		if err := r.s.put(namespace); err != nil {
			return 0, err
		}
	}
	return r.Registry.Put(ctx, namespace, key, value)
}

func (r faultyRegistry) CompareAndSwap(ctx context.Context, namespace, key string, old, value []byte) (bool, error) {
	if r.s.put != nil {
		if err := r.s.put(namespace); err != nil {
			return false, err
		}
	}
	ok, err := r.Registry.CompareAndSwap(ctx, namespace, key, old, value)
	if r.s.cas != nil {
		r.s.cas(namespace)
	}
	return ok, err
}

// enrollAgain checks that after a failed enrollment of gw-host, the
// gateway is not stored and the same token enrolls it.
func enrollAgain(t *testing.T, r *rig, body map[string]string) {
	t.Helper()
	ctx := context.Background()
	if ok, err := r.reg.GatewayOf(ctx, "acme", "gw-host"); err != nil || ok {
		t.Errorf("after the failed enrollment gw-host is stored (%v, %v): a gateway nobody has the secret of", ok, err)
	}
	code, got := r.post(t, "/relay/enroll", identity(t, "acme"), body)
	if code != http.StatusOK || got["secret"] == "" {
		t.Fatalf("the same token again: %d %v, want 200 (the failed enrollment spent it)", code, got)
	}
	wakes, err := r.reg.Wakes(ctx)
	if err != nil || wakes["acme"]["gw-host"] != body["wakeUrl"] {
		t.Errorf("wake URLs %v (%v), want gw-host's %q", wakes, err, body["wakeUrl"])
	}
}

// TestEnrollWithAFailedWakeWriteSpendsNothing: an enrollment whose
// gateway is written and whose wake URL then is not (a store error) is
// an error and leaves nothing: no gateway, the token unspent. Before, the
// token was spent and the gateway stored, its secret never answered.
func TestEnrollWithAFailedWakeWriteSpendsNothing(t *testing.T) {
	st := &faulty{}
	r := newRigOn(t, true, func(mem store.Store) store.Store { st.Store = mem; return st })
	tok, _, err := r.reg.MintEnrollToken(context.Background(), "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	failed := false
	st.put = func(namespace string) error {
		if namespace != "registry/wake" {
			return nil
		}
		failed = true
		return errors.New("injected store failure")
	}
	body := map[string]string{"enrollmentToken": tok, "gatewayId": "gw-host", "wakeUrl": "https://gw.example/wake"}
	code, got := r.post(t, "/relay/enroll", identity(t, "acme"), body)
	st.put = nil
	if !failed {
		t.Fatal("the enrollment wrote no wake URL")
	}
	if code != http.StatusInternalServerError || got["secret"] != nil {
		t.Fatalf("an enrollment whose wake URL was not written: %d %v, want 500 without a secret", code, got)
	}
	enrollAgain(t, r, body)
}

// TestEnrollGivenUpAfterItsGatewayWriteSpendsNothing: an enrollment
// whose request is given up (its client gone) right after its gateway is
// written is an error and leaves nothing: no gateway, the token unspent,
// so the client enrolls again with it. Before, the token was spent and
// the gateway stored, its secret never answered.
func TestEnrollGivenUpAfterItsGatewayWriteSpendsNothing(t *testing.T) {
	st := &faulty{}
	r := newRigOn(t, true, func(mem store.Store) store.Store { st.Store = mem; return st })
	tok, _, err := r.reg.MintEnrollToken(context.Background(), "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]string{"enrollmentToken": tok, "gatewayId": "gw-host", "wakeUrl": "https://gw.example/wake"}
	data, _ := json.Marshal(body)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st.cas = func(namespace string) {
		if namespace == "registry/gateways" {
			cancel()
		}
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/relay/enroll", bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+identity(t, "acme"))
	w := httptest.NewRecorder()
	r.handler.Routes()["POST /relay/enroll"].ServeHTTP(w, req)
	st.cas = nil
	if ctx.Err() == nil {
		t.Fatal("the enrollment wrote no gateway")
	}
	if w.Code == http.StatusOK {
		t.Fatalf("an enrollment given up after its gateway write: %d %s, want an error", w.Code, w.Body)
	}
	enrollAgain(t, r, body)
}

// TestGatewayTakenMeanwhileIsAConflict: a provision or enrollment whose
// gateway another instance deletes and another tenant makes again under
// the id right after it is written answers 409 conflict (the id changed
// hands), not 403 "not onboarded": before, the wake URL write's not found
// was taken for the tenant's.
func TestGatewayTakenMeanwhileIsAConflict(t *testing.T) {
	for _, path := range []string{"/relay/provision", "/relay/enroll"} {
		t.Run(strings.TrimPrefix(path, "/relay/"), func(t *testing.T) {
			st := &faulty{}
			var other *registry.Registry // another instance on the same store
			r := newRigOn(t, true, func(mem store.Store) store.Store {
				st.Store, other = mem, registry.New(mem, clocktest.New(time.Unix(1_700_000_000, 0)))
				return st
			})
			ctx := context.Background()
			if err := other.CreateTenant(ctx, registry.Tenant{ID: "globex"}); err != nil {
				t.Fatal(err)
			}
			body := map[string]any{"gatewayId": "gw-host", "wakeUrl": "https://gw.example/wake"}
			if path == "/relay/provision" {
				body = provisionBody("gw-host", "relay", "https://gw.example/wake")
			} else {
				tok, _, err := r.reg.MintEnrollToken(ctx, "acme", time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				body["enrollmentToken"] = tok
			}
			taken := false
			st.cas = func(namespace string) {
				if taken || namespace != "registry/gateways" {
					return
				}
				taken = true
				if err := other.DeleteGateway(ctx, "acme", "gw-host"); err != nil {
					t.Errorf("the other instance's delete of acme's gw-host: %v", err)
				}
				if _, err := other.CreateGateway(ctx, "globex", "gw-host"); err != nil {
					t.Errorf("globex's gw-host on the other instance: %v", err)
				}
			}
			code, got := r.post(t, path, identity(t, "acme"), body)
			st.cas = nil
			if !taken {
				t.Fatal("no gateway was written")
			}
			if code != http.StatusConflict || got["secret"] != nil {
				t.Fatalf("a gateway taken by another tenant while written: %d %v, want 409 without a secret", code, got)
			}
			if wakes, err := r.reg.Wakes(ctx); err != nil || len(wakes) != 0 {
				t.Errorf("wake URLs %v (%v), want none", wakes, err)
			}
		})
	}
}

// TestProvisionRouteKeyOfAnotherTenantTellsNotWhere: a provision's route
// key another tenant holds gets one answer whether the YAML declares it
// or the store binds it: 409 with the same text but for the key. Before,
// a key the YAML declares answered "declared in the YAML config; edit the
// file and send SIGHUP", telling a tenant which layer holds another
// tenant's chat (and asking it to edit a file it does not own).
func TestProvisionRouteKeyOfAnotherTenantTellsNotWhere(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	if err := r.reg.SetDeclared(registry.State{
		Tenants:  []registry.Tenant{{ID: "yaml"}},
		Bindings: []registry.Binding{{Platform: "discord", Kind: platform.BindGuild, ID: "700", Tenant: "yaml"}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.reg.CreateTenant(ctx, registry.Tenant{ID: "stored"}); err != nil {
		t.Fatal(err)
	}
	if err := r.reg.Bind(ctx, registry.Binding{Platform: "discord", Kind: platform.BindGuild, ID: "800", Tenant: "stored"}); err != nil {
		t.Fatal(err)
	}
	answer := func(key string) string {
		t.Helper()
		code, got := r.post(t, "/relay/provision", identity(t, "acme"), map[string]any{"gatewayId": "gw-acme", "platform": "discord", "routeKeys": []string{key}})
		if code != http.StatusConflict {
			t.Fatalf("route key %s of another tenant: %d %v, want 409", key, code, got)
		}
		return strings.ReplaceAll(fmt.Sprint(got["error"]), key, "KEY")
	}
	if declared, stored := answer("700"), answer("800"); declared != stored {
		t.Fatalf("a declared key answers %q, a stored one %q: want one answer", declared, stored)
	}
}

// TestUnsetAudienceTakesManageTokensWithinTheirTenant pins what
// enroll.audience's documentation says of leaving it unset: a /manage/*
// token of acme minted for gw-a1 (aud agent:gw-a1) provisions acme's other
// provisioned gateway and is answered its new secret, but never a gateway
// of another tenant (409, no secret: the tenant is the token's). With the
// audience set, the same token is 401.
func TestUnsetAudienceTakesManageTokensWithinTheirTenant(t *testing.T) {
	keyOnce.Do(func() { key = idtokentest.Key(t) })
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	mem := store.NewMemory(clk)
	t.Cleanup(func() { _ = mem.Close() })
	reg := registry.New(mem, clk)
	ctx := context.Background()
	for _, tenant := range []string{"acme", "rival"} {
		if err := reg.CreateTenant(ctx, registry.Tenant{ID: tenant}); err != nil {
			t.Fatal(err)
		}
	}
	pub, err := idtoken.ParsePublicKeys(idtokentest.PublicPEM(t, key))
	if err != nil {
		t.Fatal(err)
	}
	serve := func(audience string) *httptest.Server {
		v, err := idtoken.New(idtoken.Config{Keys: pub, Audience: audience, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		h := enroll.New(enroll.HandlerConfig{Verifier: v, Registry: reg, Platforms: []string{"discord"}, Clock: clk})
		srv := httptest.NewServer(h.Routes()["POST /relay/provision"])
		t.Cleanup(srv.Close)
		return srv
	}
	provision := func(srv *httptest.Server, bearer, gateway string) (int, map[string]any) {
		t.Helper()
		data, _ := json.Marshal(provisionBody(gateway, "discord", ""))
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/relay/provision", bytes.NewReader(data))
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("provision %s: answer not JSON: %v", gateway, err)
		}
		return resp.StatusCode, out
	}
	unset := serve("")
	for tenant, gw := range map[string]string{"acme": "gw-a2", "rival": "gw-r"} {
		if code, out := provision(unset, identityOf(t, tenant, "boot of "+gw), gw); code != http.StatusOK {
			t.Fatalf("%s's own provision of %s: %d %v", tenant, gw, code, out)
		}
	}
	manageToken := idtokentest.Sign(t, key, map[string]any{"tid": "acme", "aud": "agent:gw-a1", "sub": "owner@acme", "exp": 1_700_000_300})
	if code, out := provision(unset, manageToken, "gw-a2"); code != http.StatusOK || out["secret"] == nil {
		t.Errorf("audience unset, acme's agent:gw-a1 token provisioning acme's gw-a2: %d %v, want 200 with a new secret (the documented consequence)", code, out)
	}
	if code, out := provision(unset, manageToken, "gw-r"); code != http.StatusConflict || out["secret"] != nil {
		t.Errorf("audience unset, acme's agent:gw-a1 token provisioning rival's gw-r: %d %v, want 409 without a secret", code, out)
	}
	if code, out := provision(serve("connector"), manageToken, "gw-a2"); code != http.StatusUnauthorized {
		t.Errorf("audience set, an agent:gw-a1 token provisioning: %d %v, want 401", code, out)
	}
}

// TestStoreErrorIsNotAnswered: an enrollment or provision that fails
// for its store answers 500 {"error":"internal"}, never the store's
// error, which can name an internal address (a Redis host); the log has
// it. Before, the answer was the error's text.
func TestStoreErrorIsNotAnswered(t *testing.T) {
	const addr = "10.9.8.7:6379"
	st := &faulty{}
	r := newRigOn(t, true, func(mem store.Store) store.Store { st.Store = mem; return st })
	tok, _, err := r.reg.MintEnrollToken(context.Background(), "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	st.put = func(string) error { return errors.New("dial tcp " + addr + ": connect: connection refused") }
	for _, tc := range []struct {
		path string
		body any
	}{
		{"/relay/enroll", map[string]string{"enrollmentToken": tok, "gatewayId": "gw-host"}},
		{"/relay/provision", provisionBody("gw-prov", "telegram", "")},
	} {
		code, got := r.post(t, tc.path, identity(t, "acme"), tc.body)
		if code != http.StatusInternalServerError || got["error"] != change.Internal {
			t.Errorf("%s with a failing store: %d %v, want 500 {\"error\":%q} (never the store's error)", tc.path, code, got, change.Internal)
		}
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if !strings.Contains(r.logs.String(), addr) {
		t.Errorf("the log does not name the store's error: %s", r.logs)
	}
}

// TestRefusedBearerFloodLogsBoundedLines: requests refused before they
// authenticate (a bad identity token; a connector without enrollment), as
// anyone on the internet can send, are each answered and counted, but
// their log lines are bounded per remote host (loglimit.NewSources: 10 at
// once). Before, every one logged a line.
func TestRefusedBearerFloodLogsBoundedLines(t *testing.T) {
	for _, configured := range []bool{true, false} {
		r := newRig(t, configured)
		want, outcome := http.StatusUnauthorized, "unauthorized"
		if !configured {
			want, outcome = http.StatusNotFound, "not_configured"
		}
		for range 100 {
			if code, _ := r.post(t, "/relay/provision", "not-a-token", map[string]any{"gatewayId": "gw"}); code != want {
				t.Fatalf("configured %v: a bad bearer answered %d, want %d", configured, code, want)
			}
		}
		r.logMu.Lock()
		n := strings.Count(r.logs.String(), `"msg":"relay credential request"`)
		r.logMu.Unlock()
		if n < 1 || n > 10 || r.metrics.n["relay_provision/"+outcome] != 100 {
			t.Fatalf("configured %v: 100 refused requests from one host logged %d lines (want 1 to 10) and counted %d (want 100)",
				configured, n, r.metrics.n["relay_provision/"+outcome])
		}
	}
}

// TestProvisionsOfAnotherTenantsGatewayAreRateLimited: a provision naming
// another tenant's gateway id is 409, having read the registry in its
// tenant's turn and logged a line: it spends from the id's allowance of
// changes as one that stored, and past change.GatewayBurst it is 429.
// Before, it spent nothing, so one identity token could repeat it without
// end. The other tenant's gateway stays its own.
func TestProvisionsOfAnotherTenantsGatewayAreRateLimited(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	if err := r.reg.CreateTenant(ctx, registry.Tenant{ID: "other"}); err != nil {
		t.Fatal(err)
	}
	if code, got := r.post(t, "/relay/provision", identity(t, "other"), provisionBody("gw-other", "discord", "")); code != http.StatusOK {
		t.Fatalf("other's provision: %d %v", code, got)
	}
	id := identity(t, "acme")
	for i := range change.GatewayBurst {
		if code, got := r.post(t, "/relay/provision", id, provisionBody("gw-other", "discord", "")); code != http.StatusConflict {
			t.Fatalf("provision %d of other's gateway id: %d %v, want 409", i+1, code, got)
		}
	}
	if code, got := r.post(t, "/relay/provision", id, provisionBody("gw-other", "discord", "")); code != http.StatusTooManyRequests {
		t.Fatalf("provision %d of other's gateway id: %d %v, want 429", change.GatewayBurst+1, code, got)
	}
	if ok, err := r.reg.GatewayOf(ctx, "other", "gw-other"); err != nil || !ok {
		t.Fatalf("gw-other after acme's provisions: %v %v, want other's", ok, err)
	}
}

// TestRefusedEnrollmentsAreRateLimited: an enrollment refused 403 (an
// enrollment token that is no token of the caller's tenant: another
// tenant's, spent, or guessed) read the registry and logged a line: it
// spends from the gateway id's allowance of changes, and past
// change.GatewayBurst it is 429, a token of the tenant's too. Before,
// enrollments were never limited, so one identity token could repeat them
// without end.
func TestRefusedEnrollmentsAreRateLimited(t *testing.T) {
	r := newRig(t, true)
	tok, _, err := r.reg.MintEnrollToken(context.Background(), "acme", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	id := identity(t, "acme")
	for i := range change.GatewayBurst {
		guess := map[string]string{"enrollmentToken": fmt.Sprint("guess-", i), "gatewayId": "gw"}
		if code, got := r.post(t, "/relay/enroll", id, guess); code != http.StatusForbidden {
			t.Fatalf("enrollment %d with a guessed token: %d %v, want 403", i+1, code, got)
		}
	}
	if code, got := r.post(t, "/relay/enroll", id, map[string]string{"enrollmentToken": tok, "gatewayId": "gw"}); code != http.StatusTooManyRequests {
		t.Fatalf("enrollment %d: %d %v, want 429", change.GatewayBurst+1, code, got)
	}
	r.clk.Advance(change.GatewayEvery)
	if code, got := r.post(t, "/relay/enroll", id, map[string]string{"enrollmentToken": tok, "gatewayId": "gw"}); code != http.StatusOK {
		t.Fatalf("enrollment after %v: %d %v, want 200", change.GatewayEvery, code, got)
	}
}

// TestGatewayIDOfAnotherTenantTellsNotWhere: gateway ids are one
// namespace (the upgrade token names the id, not its tenant), so a
// tenant's provision or enrollment of an id another tenant holds is
// refused; it gets one answer whether the YAML declares the id or the
// store holds it, naming no tenant and no layer. Before, a stored id
// answered "belongs to another tenant" and a declared one "declared in
// the YAML config; edit the file and send SIGHUP".
func TestGatewayIDOfAnotherTenantTellsNotWhere(t *testing.T) {
	r := newRig(t, true)
	ctx := context.Background()
	if err := r.reg.SetDeclared(registry.State{
		Tenants:  []registry.Tenant{{ID: "yaml"}},
		Gateways: []registry.Gateway{{ID: "gw-yaml", Tenant: "yaml", Secrets: []registry.Secret{{Value: "s3cret-s3cret-s3cret"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.reg.CreateTenant(ctx, registry.Tenant{ID: "stored"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.reg.CreateGateway(ctx, "stored", "gw-stored"); err != nil {
		t.Fatal(err)
	}
	answer := func(path, id string) string {
		t.Helper()
		body := any(provisionBody(id, "discord", ""))
		if path == "/relay/enroll" {
			tok, _, err := r.reg.MintEnrollToken(ctx, "acme", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			body = map[string]string{"enrollmentToken": tok, "gatewayId": id}
		}
		code, got := r.post(t, path, identity(t, "acme"), body)
		if code != http.StatusConflict || got["secret"] != nil {
			t.Fatalf("%s of gateway id %s of another tenant: %d %v, want 409", path, id, code, got)
		}
		return strings.ReplaceAll(fmt.Sprint(got["error"]), id, "ID")
	}
	for _, path := range []string{"/relay/provision", "/relay/enroll"} {
		declared, stored := answer(path, "gw-yaml"), answer(path, "gw-stored")
		if declared != stored {
			t.Fatalf("%s: a declared id answers %q, a stored one %q: want one answer", path, declared, stored)
		}
		if strings.Contains(declared, "yaml") || strings.Contains(declared, "stored") {
			t.Fatalf("%s: answer %q names a tenant", path, declared)
		}
	}
}
