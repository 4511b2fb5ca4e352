package manage_test

import (
	"bytes"
	"context"
	"crypto/rsa"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connector/idtoken"
	"connector/idtoken/idtokentest"
	"connector/internal/clock/clocktest"
	"connector/manage"
	"connector/registry/change"
)

// counts records AdminChange calls as "op outcome".
type counts map[string]int

func (c counts) AdminChange(op, outcome string) { c[op+" "+outcome]++ }

// identityNow is the verifier's clock in these tests.
var identityNow = time.Unix(1_800_000_000, 0)

// withIdentity rebuilds r's handler to also admit identity tokens signed
// by key; it returns the metrics it counts into.
func (r *rig) withIdentity(t *testing.T, key *rsa.PrivateKey) counts {
	t.Helper()
	v, err := idtoken.New(idtoken.Config{Keys: []idtoken.Key{{Public: &key.PublicKey}}, Issuer: "https://portal.example", Audience: "connector",
		Clock: clocktest.New(identityNow)})
	if err != nil {
		t.Fatal(err)
	}
	m := counts{}
	r.logs.Reset()
	r.h = manage.New(manage.Config{
		Registry: r.reg, Auth: r.auth, Identity: v,
		Apply:     func(context.Context) error { r.applied++; return nil },
		Platforms: []string{"discord", "telegram"},
		Log:       slog.New(slog.NewJSONHandler(r.logs, nil)),
		Metrics:   m,
	})
	r.mux = http.NewServeMux()
	for p, h := range r.h.Routes() {
		r.mux.Handle(p, h)
	}
	return m
}

// portalToken is an identity token of tenant for gateway (aud
// agent:gateway), signed by key, expiring at exp.
func portalToken(t *testing.T, key *rsa.PrivateKey, tenant, gateway string, exp time.Time) string {
	t.Helper()
	return idtokentest.Sign(t, key, map[string]any{"iss": "https://portal.example", "aud": "agent:" + gateway,
		"sub": "owner-9", "tid": tenant, "exp": exp.Unix()})
}

// TestIdentityToken: with an identity verifier, an identity token of the
// Portal or hermes CLI manages the gateway its aud names, within its
// tenant; a token of another key, an expired one, or one naming another
// tenant's gateway changes nothing; the gateway's own bearer still works.
func TestIdentityToken(t *testing.T) {
	r := newRig(t)
	key := idtokentest.Key(t)
	m := r.withIdentity(t, key)
	later := identityNow.Add(5 * time.Minute)

	valid := portalToken(t, key, "a", "gw-a", later)
	out := r.post(t, valid, "/manage/link", `{"instanceId":"gw-b"}`, http.StatusOK)
	code, _ := out["code"].(string)
	if tenant, _, err := r.h.Link(context.Background(), "telegram", "71", code); err != nil || tenant != "a" {
		t.Fatalf("a code issued for an identity token links to %q, %v; want tenant a", tenant, err)
	}
	r.post(t, valid, "/manage/scope", `{"platform":"telegram","channelId":"-1001"}`, http.StatusOK)
	r.post(t, "gw-a", "/manage/principal", `{"platform":"telegram","principal":"any"}`, http.StatusOK)

	refused := map[string]string{
		"another key": portalToken(t, idtokentest.Key(t), "a", "gw-a", later),
		"expired":     portalToken(t, key, "a", "gw-a", identityNow.Add(-2*time.Minute)),
		"no agent": idtokentest.Sign(t, key, map[string]any{"iss": "https://portal.example", "aud": "connector",
			"tid": "a", "exp": later.Unix()}),
	}
	for name, tok := range refused {
		out := r.post(t, tok, "/manage/deprovision", `{}`, http.StatusUnauthorized)
		if out["error"] != "unauthorized" {
			t.Errorf("%s: answer %v", name, out)
		}
	}
	if m["manage_deprovision unauthorized"] != len(refused) {
		t.Fatalf("metrics %v, want %d unauthorized deprovisions", m, len(refused))
	}

	// Tenant a's token naming b's gateway: 404, as a gateway that does
	// not exist, and b keeps its gateway and claims.
	r.post(t, "gw-b", "/manage/scope", `{"platform":"telegram","channelId":"-1002"}`, http.StatusOK)
	r.post(t, portalToken(t, key, "a", "gw-b", later), "/manage/deprovision", `{}`, http.StatusNotFound)
	r.post(t, portalToken(t, key, "a", "gw-zz", later), "/manage/deprovision", `{}`, http.StatusNotFound)
	if ok, err := r.reg.GatewayOf(context.Background(), "b", "gw-b"); err != nil || !ok {
		t.Fatalf("gw-b after a's token named it: %v %v", ok, err)
	}
	if m["manage_deprovision not_found"] != 2 {
		t.Fatalf("metrics %v, want 2 not_found deprovisions", m)
	}

	out = r.post(t, valid, "/manage/deprovision", `{"instanceId":"gw-b"}`, http.StatusOK)
	if out["dropped"] != float64(3) { // a's link, claim and principal
		t.Fatalf("deprovision by identity token dropped %v", out["dropped"])
	}
	for gw, tenant := range map[string]string{"gw-a": "a", "gw-b": "b"} {
		ok, err := r.reg.GatewayOf(context.Background(), tenant, gw)
		if err != nil || ok != (gw == "gw-b") {
			t.Fatalf("after a's deprovision: %s of %s is %v (%v)", gw, tenant, ok, err)
		}
	}
	// The deprovisioned gateway's identity token no longer manages anything.
	r.post(t, valid, "/manage/link", `{}`, http.StatusNotFound)

	logs := r.logs.String()
	for name, tok := range refused {
		if strings.Contains(logs, tok) || strings.Contains(logs, strings.Split(tok, ".")[2]) {
			t.Fatalf("the log shows the %s token", name)
		}
	}
	if strings.Contains(logs, valid[len(valid)-20:]) {
		t.Fatal("the log shows the valid token")
	}
	for _, want := range []string{`"auth":"identity"`, `"subject":"owner-9"`, `"auth":"gateway"`, `"reason":"unauthorized"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log has no %s", want)
		}
	}
}

// TestIdentityTokenNotConfigured: without a verifier an identity token is
// refused 401, as any bearer the gateway check refuses.
func TestIdentityTokenNotConfigured(t *testing.T) {
	r := newRig(t)
	key := idtokentest.Key(t)
	tok := portalToken(t, key, "a", "gw-a", time.Now().Add(time.Hour))
	r.post(t, tok, "/manage/link", `{}`, http.StatusUnauthorized)
	r.post(t, tok, "/manage/deprovision", `{}`, http.StatusUnauthorized)
	if ok, _ := r.reg.GatewayOf(context.Background(), "a", "gw-a"); !ok {
		t.Fatal("gw-a was deprovisioned by an unverified token")
	}
	if bytes.Contains(r.logs.Bytes(), []byte(tok)) {
		t.Fatal("the log shows the token")
	}
}

// TestLongSubjectIsCut: an identity token's sub claim is logged cut to
// the bound of a request's fields: a signed token may carry one of
// several KiB (the token is at most 8 KiB), which was logged whole with
// every request.
func TestLongSubjectIsCut(t *testing.T) {
	r := newRig(t)
	key := idtokentest.Key(t)
	r.withIdentity(t, key)
	sub := strings.Repeat("s", 5<<10)
	token := idtokentest.Sign(t, key, map[string]any{"iss": "https://portal.example", "aud": "agent:gw-a",
		"sub": sub, "tid": "a", "exp": identityNow.Add(time.Minute).Unix()})
	r.post(t, token, "/manage/link", `{}`, http.StatusOK)
	if logged := r.logs.String(); strings.Contains(logged, sub[:1024]) || !strings.Contains(logged, `"subject":"`+sub[:100]) {
		t.Errorf("the log holds %d bytes: the subject not cut to a prefix", len(logged))
	}
}

// TestIdentityTokenOfNoGatewayIsLimited: an identity token whose aud names
// a gateway that is not its tenant's (another tenant's, or none) is
// refused 404 within that gateway id's and its tenant's allowance of
// changes, as a refused request of a gateway of its own is: before, it was
// never limited, so a tenant's token could make the instance read the
// registry and log a line per request without end. The 404 stays the
// same for another tenant's gateway and for none.
func TestIdentityTokenOfNoGatewayIsLimited(t *testing.T) {
	r := newRig(t)
	key := idtokentest.Key(t)
	clk := clocktest.New(identityNow)
	v, err := idtoken.New(idtoken.Config{Keys: []idtoken.Key{{Public: &key.PublicKey}}, Issuer: "https://portal.example", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	r.h = manage.New(manage.Config{Registry: r.reg, Auth: r.auth, Identity: v,
		Apply: func(context.Context) error { return nil }, Platforms: []string{"discord", "telegram"},
		Limiter: change.NewLimiter(clk)})
	mux := http.NewServeMux()
	for p, h := range r.h.Routes() {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	send := func(token string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/manage/link", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	later := identityNow.Add(5 * time.Minute)
	for _, gw := range []string{"gw-b", "gw-zz"} { // b's gateway, and none
		token := portalToken(t, key, "a", gw, later)
		for i := range change.GatewayBurst {
			if got := send(token); got != http.StatusNotFound {
				t.Fatalf("request %d of a's token naming %s: %d, want 404", i+1, gw, got)
			}
		}
		if got := send(token); got != http.StatusTooManyRequests {
			t.Fatalf("request %d of a's token naming %s: %d, want 429", change.GatewayBurst+1, gw, got)
		}
	}
	if got := send(portalToken(t, key, "a", "gw-a", later)); got != http.StatusOK {
		t.Fatalf("a's token for its own gateway after: %d, want 200", got)
	}
	if got := send(portalToken(t, key, "b", "gw-b", later)); got != http.StatusOK {
		t.Fatalf("b's token for its gateway after a's: %d, want 200", got)
	}
}
