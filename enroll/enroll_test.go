package enroll_test

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/enroll"
	"connector/idtoken"
	"connector/idtoken/idtokentest"
	"connector/registry"
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
	srv     *httptest.Server
	reg     *registry.Registry
	metrics *counts
	logs    *bytes.Buffer
	logMu   *sync.Mutex
	applied int
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
	keyOnce.Do(func() { key = idtokentest.Key(t) })
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	st := store.NewMemory(now)
	t.Cleanup(func() { _ = st.Close() })
	r := &rig{reg: registry.New(st, now), metrics: &counts{n: map[string]int{}}, logs: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	var v *idtoken.Verifier
	if configured {
		pub, err := idtoken.ParsePublicKey(idtokentest.PublicPEM(t, key))
		if err != nil {
			t.Fatal(err)
		}
		if v, err = idtoken.New(idtoken.Config{Key: pub, Audience: "connector", Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	h := enroll.New(enroll.HandlerConfig{
		Verifier: v, Registry: r.reg, Platforms: []string{"discord", "telegram", "nexscope"},
		Apply:   func(context.Context) error { r.applied++; return nil },
		Log:     slog.New(slog.NewJSONHandler(syncWriter{r.logMu, r.logs}, nil)),
		Metrics: r.metrics,
	})
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
		"unknown platform":      {id, body("slack", nil, ""), http.StatusBadRequest},
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
		case http.StatusOK, http.StatusBadRequest, http.StatusForbidden, http.StatusConflict:
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
		now := func() time.Time { return time.Unix(1_700_000_000, 0) }
		st := store.NewMemory(now) // lives for the process
		reg := registry.New(st, now)
		_ = reg.CreateTenant(context.Background(), registry.Tenant{ID: "acme"})
		pub, err := idtoken.ParsePublicKey(idtokentest.PublicPEM(t, key))
		if err != nil {
			t.Fatal(err)
		}
		v, err := idtoken.New(idtoken.Config{Key: pub, Now: now})
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
