package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"connector/admin"
	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/registry"
	"connector/store"
)

const token = "test-admin-token-0123456789"

// counts records AdminChange and AdminRefused calls.
type counts struct {
	changes map[string]int
	refused int
}

func (c *counts) AdminChange(op, outcome string) { c.changes[op+"/"+outcome]++ }
func (c *counts) AdminRefused()                  { c.refused++ }

func newHandler(t testing.TB) (*admin.Handler, *counts, *int) {
	t.Helper()
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	applied := new(int)
	m := &counts{changes: map[string]int{}}
	h, err := admin.New(admin.Config{
		Registry: registry.New(st, clock.System), Token: token, Metrics: m,
		Apply: func(context.Context) error { *applied++; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return h, m, applied
}

func do(h http.Handler, method, path, auth, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestStatuses walks the routes through their answers: each change is
// applied and counted, each refusal has its status and no apply.
func TestStatuses(t *testing.T) {
	h, m, applied := newHandler(t)
	bearer := "Bearer " + token
	steps := []struct {
		method, path, auth, body string
		want                     int
	}{
		{"GET", "/admin/v1/tenants", "", "", 401},
		{"GET", "/admin/v1/tenants", "Bearer " + token + "x", "", 401},
		{"GET", "/admin/v1/tenants", "Basic " + token, "", 401},
		{"POST", "/admin/v1/tenants", bearer, `{"id":"acme"}`, 201},
		{"POST", "/admin/v1/tenants", bearer, `{"id":"acme"}`, 409},
		{"POST", "/admin/v1/tenants", bearer, `{"id":"acme","extra":1}`, 400},
		{"POST", "/admin/v1/tenants", bearer, `{"id":"a b"}`, 400},
		{"POST", "/admin/v1/tenants", bearer, `{"id":"x"} {}`, 400},
		{"POST", "/admin/v1/tenants/acme/gateways", bearer, `{"id":"gw"}`, 201},
		{"POST", "/admin/v1/tenants/nope/gateways", bearer, `{"id":"gw2"}`, 404},
		{"POST", "/admin/v1/tenants/acme/gateways/gw/rotate", bearer, `{"grace":"-1s"}`, 400},
		{"POST", "/admin/v1/tenants/acme/gateways/gw/rotate", bearer, "", 200},
		{"PUT", "/admin/v1/tenants/acme/bindings", bearer, `{"platform":"telegram","kind":"chat","id":"42"}`, 204},
		{"PUT", "/admin/v1/tenants/acme/bindings", bearer, `{"platform":"telegram","kind":"guild","id":"42"}`, 400},
		{"PUT", "/admin/v1/tenants/acme/session", bearer, `{"group_sessions_per_user":false}`, 204},
		{"DELETE", "/admin/v1/tenants/acme/bindings", bearer, `{"platform":"telegram","kind":"chat","id":"43"}`, 404},
		{"DELETE", "/admin/v1/tenants/acme/gateways/gw", bearer, "", 204},
		{"DELETE", "/admin/v1/tenants/acme", bearer, "", 204},
		{"POST", "/admin/v1/tenants", bearer, `{"id":"` + strings.Repeat("x", 70<<10) + `"}`, 400},
	}
	for i, s := range steps {
		if w := do(h, s.method, s.path, s.auth, s.body); w.Code != s.want {
			t.Fatalf("step %d %s %s: %d %s, want %d", i, s.method, s.path, w.Code, w.Body, s.want)
		}
	}
	if *applied != 7 {
		t.Errorf("applied %d times, want once per successful change (7)", *applied)
	}
	if m.refused != 3 || m.changes["create_tenant/ok"] != 1 || m.changes["create_tenant/exists"] != 1 || m.changes["unbind/not_found"] != 1 {
		t.Errorf("metrics %+v refused %d", m.changes, m.refused)
	}
}

// TestSecretShownOnce: the create answer holds the secret, the listing
// never does.
func TestSecretShownOnce(t *testing.T) {
	h, _, _ := newHandler(t)
	bearer := "Bearer " + token
	do(h, "POST", "/admin/v1/tenants", bearer, `{"id":"acme"}`)
	w := do(h, "POST", "/admin/v1/tenants/acme/gateways", bearer, `{"id":"gw"}`)
	var created struct{ ID, Secret string }
	if err := json.Unmarshal(w.Body.Bytes(), &created); err != nil || len(created.Secret) != 64 {
		t.Fatalf("create answer %s", w.Body)
	}
	list := do(h, "GET", "/admin/v1/tenants", bearer, "").Body.String()
	if strings.Contains(list, created.Secret) || !strings.Contains(list, `"secrets":1`) {
		t.Fatalf("listing %s", list)
	}
}

// FuzzHandler feeds arbitrary paths and bodies with a valid token: every
// answer is a documented status, never a panic.
func FuzzHandler(f *testing.F) {
	methods := []string{"GET", "POST", "PUT", "DELETE", "PATCH"}
	f.Add(uint8(1), "/admin/v1/tenants", `{"id":"a"}`)
	f.Add(uint8(2), "/admin/v1/tenants/a/bindings", `{"platform":"nexscope","kind":"room","id":"r"}`)
	f.Add(uint8(1), "/admin/v1/tenants/a/gateways/g/rotate", `{"grace":"1h"}`)
	f.Add(uint8(2), "/admin/v1/tenants/a/session", `{"nexscope_key_platform":"x"}`)
	h, _, _ := newHandler(f)
	f.Fuzz(func(t *testing.T, m uint8, path, body string) {
		if _, err := url.ParseRequestURI(path); err != nil || !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " ?#%") {
			return // not a request line an HTTP client sends
		}
		method := methods[int(m)%len(methods)]
		w := do(h, method, path, "Bearer "+token, body)
		switch w.Code {
		case 200, 201, 204, 301, 307, 308, 400, 404, 405, 409: // 30x: the mux cleaning a path
		default:
			t.Fatalf("%s %s %q: status %d %s", method, path, body, w.Code, w.Body)
		}
	})
}

// TestBindingOnAPlatformNotRunningIsRefused: a binding on a platform the
// connector does not run would route nothing, so it is refused (400) with
// what to do, and stored nowhere; unbinding stays possible.
func TestBindingOnAPlatformNotRunningIsRefused(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	reg := registry.New(st, clock.System)
	h, err := admin.New(admin.Config{Registry: reg, Token: token, Platforms: []string{"nexscope"},
		Apply: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	bearer := "Bearer " + token
	if w := do(h, "POST", "/admin/v1/tenants", bearer, `{"id":"acme"}`); w.Code != 201 {
		t.Fatalf("create tenant: %d %s", w.Code, w.Body)
	}
	w := do(h, "PUT", "/admin/v1/tenants/acme/bindings", bearer, `{"platform":"telegram","kind":"chat","id":"-100123"}`)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `platform \"telegram\" is not enabled on this connector`) {
		t.Fatalf("bind on telegram, not running: %d %s", w.Code, w.Body)
	}
	if s, err := reg.Stored(context.Background()); err != nil || len(s.Bindings) != 0 {
		t.Fatalf("stored bindings %+v (%v)", s.Bindings, err)
	}
	if w := do(h, "PUT", "/admin/v1/tenants/acme/bindings", bearer, `{"platform":"nexscope","kind":"room","id":"lab"}`); w.Code != http.StatusNoContent {
		t.Fatalf("bind on nexscope, running: %d %s", w.Code, w.Body)
	}
}

// TestCorruptBindingIsRemovedByTheOperator: a stored binding that does not
// decode holds back its platform's claims and routing table. The admin
// API's unbind removes it, whichever tenant the path names; the tenant's
// release (the registry's Unbind, /manage/scope/release's) leaves it, as
// it may have been another tenant's. Before, only the store could.
func TestCorruptBindingIsRemovedByTheOperator(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	reg := registry.New(st, clock.System)
	h, err := admin.New(admin.Config{Registry: reg, Token: token, Apply: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.CreateTenant(ctx, registry.Tenant{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Registry().Put(ctx, "registry/bindings", "telegram/scope/-1002", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	scope := registry.Binding{Platform: "telegram", Kind: "scope", ID: "-1002", Tenant: "b"}
	if err := reg.Unbind(ctx, scope); err == nil {
		t.Fatal("the tenant's release removed a corrupt binding")
	}
	if s, err := reg.Stored(ctx); err != nil || len(s.Corrupt) != 1 {
		t.Fatalf("corrupt %q (%v): want the binding kept by the release", s.Corrupt, err)
	}
	if w := do(h, "DELETE", "/admin/v1/tenants/b/bindings", "Bearer "+token, `{"platform":"telegram","kind":"scope","id":"-1002"}`); w.Code != http.StatusNoContent {
		t.Fatalf("admin unbind of the corrupt binding: %d %s", w.Code, w.Body)
	}
	if s, err := reg.Stored(ctx); err != nil || len(s.Corrupt) != 0 {
		t.Fatalf("corrupt %q (%v) after the admin unbind", s.Corrupt, err)
	}
	if err := reg.Claim(ctx, "b", "telegram", platform.Chat{ID: "-1002"}); err != nil {
		t.Fatalf("claim after the corrupt binding went: %v", err)
	}
}

// TestCorruptEntriesAreListed: a stored binding that does not decode (a
// guild binding, a scope claim: their keys name no tenant) is listed apart
// from the tenants, with the key admin unbind takes, and under no tenant.
// Before, the listing left it out, and only the logs named it.
func TestCorruptEntriesAreListed(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	reg := registry.New(st, clock.System)
	h, err := admin.New(admin.Config{Registry: reg, Token: token, Apply: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.CreateTenant(ctx, registry.Tenant{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"discord/guild/123", "telegram/scope/-1002"} {
		if _, err := st.Registry().Put(ctx, "registry/bindings", key, []byte(`{"tenant":`)); err != nil {
			t.Fatal(err)
		}
	}
	w := do(h, "GET", "/admin/v1/tenants", "Bearer "+token, "")
	var got struct {
		Tenants []admin.TenantView `json:"tenants"`
		Corrupt []string           `json:"corrupt"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusOK {
		t.Fatalf("list: %d %s (%v)", w.Code, w.Body, err)
	}
	if want := []string{"registry/bindings discord/guild/123", "registry/bindings telegram/scope/-1002"}; !slices.Equal(got.Corrupt, want) {
		t.Errorf("corrupt %q; want %q", got.Corrupt, want)
	}
	if len(got.Tenants) != 1 || len(got.Tenants[0].Bindings) != 0 {
		t.Errorf("tenants %+v: want b with no binding", got.Tenants)
	}
}

// TestSecretAnswersAreNotCached: over HTTP, the answers that carry a
// gateway secret (create, rotate) or an enrollment token forbid any cache
// to keep them (Cache-Control: no-store), as /relay/enroll's do.
func TestSecretAnswersAreNotCached(t *testing.T) {
	h, _, _ := newHandler(t)
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, s := range []struct {
		path, body string
		want       int
	}{
		{"/admin/v1/tenants", `{"id":"acme"}`, http.StatusCreated},
		{"/admin/v1/tenants/acme/gateways", `{"id":"gw"}`, http.StatusCreated},
		{"/admin/v1/tenants/acme/gateways/gw/rotate", ``, http.StatusOK},
		{"/admin/v1/tenants/acme/enroll-tokens", `{"ttl":"1h"}`, http.StatusCreated},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+s.path, strings.NewReader(s.body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", s.path, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != s.want || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("POST %s: %d Cache-Control %q, want %d no-store", s.path, resp.StatusCode, resp.Header.Get("Cache-Control"), s.want)
		}
	}
}

// failingStore fails every registry write and listing with an error that
// names an internal address, as a Redis that went away does.
type failingStore struct{ store.Store }

const failingAddr = "10.9.8.7:6379"

var errFailing = errors.New("dial tcp " + failingAddr + ": connect: connection refused")

func (s failingStore) Registry() store.Registry { return failingRegistry{s.Store.Registry()} }

type failingRegistry struct{ store.Registry }

func (failingRegistry) Put(context.Context, string, string, []byte) (uint64, error) {
	return 0, errFailing
}
func (failingRegistry) List(context.Context, string) ([]store.Entry, uint64, error) {
	return nil, 0, errFailing
}
func (failingRegistry) CompareAndSwap(context.Context, string, string, []byte, []byte) (bool, error) {
	return false, errFailing
}

// TestStoreErrorIsNotAnswered: a request that fails for its store
// answers 500 {"error":"internal"}, never the store's error, which can
// name an internal address (a Redis host); the log has it. Before, the
// answer was the error's text.
func TestStoreErrorIsNotAnswered(t *testing.T) {
	mem := store.NewMemory(nil)
	t.Cleanup(func() { _ = mem.Close() })
	var logs bytes.Buffer
	h, err := admin.New(admin.Config{Registry: registry.New(failingStore{mem}, clock.System), Token: token,
		Log: slog.New(slog.NewJSONHandler(&logs, nil)), Apply: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ method, path, body string }{
		{"POST", "/admin/v1/tenants", `{"id":"acme"}`},
		{"GET", "/admin/v1/tenants", ``},
	} {
		w := do(h, s.method, s.path, "Bearer "+token, s.body)
		if w.Code != http.StatusInternalServerError || strings.TrimSpace(w.Body.String()) != `{"error":"internal"}` {
			t.Errorf("%s %s with a failing store: %d %s, want 500 {\"error\":\"internal\"}", s.method, s.path, w.Code, w.Body)
		}
	}
	if strings.Count(logs.String(), failingAddr) != 2 {
		t.Errorf("the log does not name the store's error twice: %s", logs.String())
	}
}

// TestRefusedTokenFloodLogsBoundedLines: requests with a wrong token are
// each answered 401 and counted, but their log lines are bounded per
// remote host (loglimit.NewSources: 10 at once). Before, every one logged
// a line.
func TestRefusedTokenFloodLogsBoundedLines(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	var logs bytes.Buffer
	m := &counts{changes: map[string]int{}}
	h, err := admin.New(admin.Config{Registry: registry.New(st, clock.System), Token: token, Metrics: m,
		Log: slog.New(slog.NewJSONHandler(&logs, nil)), Apply: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		if w := do(h, "GET", "/admin/v1/tenants", "Bearer wrong", ""); w.Code != http.StatusUnauthorized {
			t.Fatalf("a wrong token answered %d", w.Code)
		}
	}
	if n := strings.Count(logs.String(), "admin request refused"); n < 1 || n > 10 || m.refused != 200 {
		t.Fatalf("200 wrong tokens from one host logged %d lines (want 1 to 10) and counted %d (want 200)", n, m.refused)
	}
}

// TestActorIsCutBetweenCharacters: the actor a change is logged with is
// bounded at 64 bytes without cutting a character in half. Before, a
// name whose 64th byte fell inside a character was logged ending in a
// replacement character.
func TestActorIsCutBetweenCharacters(t *testing.T) {
	var log bytes.Buffer
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	h, err := admin.New(admin.Config{Registry: registry.New(st, clock.System), Token: token,
		Log: slog.New(slog.NewJSONHandler(&log, nil)), Apply: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("POST", "/admin/v1/tenants", strings.NewReader(`{"id":"acme"}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(admin.ActorHeader, strings.Repeat("a", 63)+"é")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var line struct{ Actor string }
	if err := json.Unmarshal(log.Bytes(), &line); err != nil || w.Code != http.StatusCreated {
		t.Fatalf("create: %d; log %q (%v)", w.Code, log.String(), err)
	}
	if want := strings.Repeat("a", 63); line.Actor != want {
		t.Fatalf("actor %q, want %q", line.Actor, want)
	}
}

// steppingClock is a clock that moves on by step at each reading: time
// passing while a request runs.
type steppingClock struct {
	*clocktest.Fake
	step time.Duration
}

func (c steppingClock) Now() time.Time {
	c.Advance(c.step)
	return c.Fake.Now()
}

// TestRotationAnswerIsNoLaterThanTheStoredExpiry: previous_valid_until
// is never later than the expiry the rotation stored for the previous
// secret, however long the rotation took. Before, the answer read the
// clock after the rotation, which had moved on (here 1.5 s a reading).
func TestRotationAnswerIsNoLaterThanTheStoredExpiry(t *testing.T) {
	ctx := context.Background()
	c := steppingClock{clocktest.New(time.Unix(1_700_000_000, 0)), 1500 * time.Millisecond}
	st := store.NewMemory(c.Fake)
	t.Cleanup(func() { _ = st.Close() })
	reg := registry.New(st, c)
	h, err := admin.New(admin.Config{Registry: reg, Token: token, Apply: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CreateGateway(ctx, "acme", "gw"); err != nil {
		t.Fatal(err)
	}
	w := do(h, "POST", "/admin/v1/tenants/acme/gateways/gw/rotate", "Bearer "+token, `{"grace":"1h"}`)
	var answer struct {
		Until string `json:"previous_valid_until"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &answer); err != nil || w.Code != http.StatusOK {
		t.Fatalf("rotate: %d %s", w.Code, w.Body)
	}
	until, err := time.Parse(time.RFC3339, answer.Until)
	if err != nil {
		t.Fatal(err)
	}
	s, err := reg.Stored(ctx)
	if err != nil || len(s.Gateways) != 1 || len(s.Gateways[0].Secrets) != 2 {
		t.Fatalf("stored %+v (%v), want gw with two secrets", s.Gateways, err)
	}
	if stored := s.Gateways[0].Secrets[1].Expires; until.After(stored) {
		t.Fatalf("previous_valid_until %s is later than the stored expiry %s", answer.Until, stored.UTC().Format(time.RFC3339Nano))
	}
}

// TestRotationAnswerIsOnTheRegistrysClock: previous_valid_until is on the
// clock of the expiry Rotate stores, the registry's. Before, the answer
// read the wall clock while the registry ran on its own.
func TestRotationAnswerIsOnTheRegistrysClock(t *testing.T) {
	ctx := context.Background()
	fake := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(fake)
	t.Cleanup(func() { _ = st.Close() })
	reg := registry.New(st, fake)
	h, err := admin.New(admin.Config{Registry: reg, Token: token, Apply: func(context.Context) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CreateGateway(ctx, "acme", "gw"); err != nil {
		t.Fatal(err)
	}
	w := do(h, "POST", "/admin/v1/tenants/acme/gateways/gw/rotate", "Bearer "+token, `{"grace":"1h"}`)
	var answer struct {
		Until string `json:"previous_valid_until"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &answer); err != nil || w.Code != http.StatusOK {
		t.Fatalf("rotate: %d %s", w.Code, w.Body)
	}
	if want := fake.Now().Add(time.Hour).UTC().Format(time.RFC3339); answer.Until != want {
		t.Fatalf("previous_valid_until %s, want %s (the registry's clock plus the grace)", answer.Until, want)
	}
}
