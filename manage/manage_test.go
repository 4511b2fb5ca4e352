package manage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/manage"
	"connector/platform"
	"connector/registry"
	"connector/registry/change"
	"connector/store"
)

// bearers authenticates "Bearer <gateway>" for the gateways it names, with
// the secret it knows them by, as relay.Server.Authenticate does for real
// tokens (cmd/connector's black-box tests use the real one).
type bearers map[string]bearer

// bearer is a gateway's tenant and secret, as an instance last applied them.
type bearer struct{ tenant, secret string }

func (b bearers) Authenticate(header string) (string, string, []byte, error) {
	gw, _ := strings.CutPrefix(header, "Bearer ")
	if t, ok := b[gw]; ok {
		return t.tenant, gw, []byte(t.secret), nil
	}
	return "", "", nil, contract.ErrTokenExpired
}

type rig struct {
	reg     *registry.Registry
	auth    bearers
	mux     *http.ServeMux
	h       *manage.Handler
	applied int
	logs    *bytes.Buffer
}

func newRig(t *testing.T) *rig {
	t.Helper()
	st := store.NewMemory(clock.System)
	t.Cleanup(func() { _ = st.Close() })
	return newRigOn(t, st)
}

// newRigOn is newRig on st.
func newRigOn(t *testing.T, st store.Store) *rig {
	t.Helper()
	r := &rig{reg: registry.New(st, clock.System), auth: bearers{}, mux: http.NewServeMux(), logs: &bytes.Buffer{}}
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := r.reg.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
		secret, err := r.reg.CreateGateway(ctx, id, "gw-"+id)
		if err != nil {
			t.Fatal(err)
		}
		r.auth["gw-"+id] = bearer{id, secret}
	}
	r.h = manage.New(manage.Config{
		Registry: r.reg, Auth: r.auth,
		Apply:     func(context.Context) error { r.applied++; return nil },
		Platforms: []string{"discord", "telegram"},
		Log:       slog.New(slog.NewJSONHandler(r.logs, nil)),
	})
	for p, h := range r.h.Routes() {
		r.mux.Handle(p, h)
	}
	return r
}

func (r *rig) post(t *testing.T, gw, path, body string, want int) map[string]any {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+gw)
	w := httptest.NewRecorder()
	r.mux.ServeHTTP(w, req)
	var out map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: answer %q is not JSON", path, body, w.Body.String())
	}
	if w.Code != want {
		t.Fatalf("%s %s: %d %v, want %d", path, body, w.Code, out, want)
	}
	return out
}

// TestRoutes: each route's success and error answers, the tenant taken
// from the bearer and never the body.
func TestRoutes(t *testing.T) {
	r := newRig(t)
	r.post(t, "nobody", "/manage/link", "", http.StatusUnauthorized)
	out := r.post(t, "gw-a", "/manage/link", `{"instanceId":"b"}`, http.StatusOK)
	code, _ := out["code"].(string)
	if len(code) != registry.LinkCodeLen || out["command"] != "/link "+code || out["ttlSeconds"] != float64(600) {
		t.Fatalf("link answer %v", out)
	}
	if strings.Contains(r.logs.String(), code) {
		t.Fatal("the log shows a link code")
	}
	tenant, _, err := r.h.Link(context.Background(), "discord", "71", code)
	if err != nil || tenant != "a" {
		t.Fatalf("Link: %q %v (the body's instanceId must be ignored)", tenant, err)
	}
	if _, _, err := r.h.Link(context.Background(), "discord", "72", code); !errors.Is(err, platform.ErrLinkRefused) {
		t.Fatalf("second Link: %v", err)
	}
	r.post(t, "gw-a", "/manage/link", `{"ttlSeconds":7200}`, http.StatusBadRequest)
	r.post(t, "gw-a", "/manage/link", `{"platform":"slack"}`, http.StatusBadRequest)
	r.post(t, "gw-a", "/manage/link", `{`, http.StatusBadRequest)

	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","guildId":"500","channelId":"501"}`, http.StatusOK)
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","channelId":501}`, http.StatusOK) // idempotent, an integer id
	r.post(t, "gw-b", "/manage/scope", `{"platform":"discord","channelId":"501"}`, http.StatusConflict)
	r.post(t, "gw-b", "/manage/scope/release", `{"platform":"discord","channelId":"501"}`, http.StatusNotFound)
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord"}`, http.StatusBadRequest)
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","channelId":"general"}`, http.StatusBadRequest)
	r.post(t, "gw-a", "/manage/scope/release", `{"platform":"discord","channelId":"501"}`, http.StatusOK)
	r.post(t, "gw-b", "/manage/scope", `{"platform":"discord","channelId":"501"}`, http.StatusOK)

	r.post(t, "gw-b", "/manage/principal", `{"platform":"discord","principal":"allow-list","allow":["80",81]}`, http.StatusOK)
	r.post(t, "gw-b", "/manage/principal", `{"platform":"discord","principal":"all"}`, http.StatusBadRequest)

	r.post(t, "gw-b", "/manage/dm-default", `{"platform":"discord","userId":"71"}`, http.StatusNotFound)
	r.post(t, "gw-a", "/manage/dm-default", `{"platform":"discord","userId":"71"}`, http.StatusOK)
	r.post(t, "gw-a", "/manage/dm-default", `{"platform":"discord"}`, http.StatusBadRequest)

	out = r.post(t, "gw-b", "/manage/deprovision", `{"instanceId":"a"}`, http.StatusOK)
	if out["dropped"] != float64(4) { // the scope, the principal, two allow entries
		s, _, _ := r.reg.Effective(context.Background())
		t.Fatalf("deprovision dropped %v; left %+v", out["dropped"], s.Bindings)
	}
	s, _, err := r.reg.Effective(context.Background())
	if err != nil {
		t.Fatalf("Effective after deprovision: %v", err)
	}
	for _, g := range s.Gateways {
		if g.ID == "gw-b" {
			t.Fatal("gw-b is still a gateway after deprovision")
		}
	}
	for _, b := range s.Bindings {
		if b.Tenant == "b" {
			t.Fatalf("b's binding %+v survived deprovision", b)
		}
	}
	if len(s.Bindings) != 2 { // a's link and DM default
		t.Fatalf("bindings after b's deprovision: %+v", s.Bindings)
	}
	if r.applied == 0 {
		t.Fatal("no change was applied")
	}
}

// FuzzParseRequest: any body parses or is refused with a request error,
// without panicking, and what parses is bounded.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"", "{}", `{"platform":"discord","channelId":501,"guildId":"500"}`,
		`{"principal":"allow-list","allow":["1",2,null]}`, `{"ttlSeconds":-1}`, `{"userId":1e99}`, `[]`, `{} {}`, `{"allow":{}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := manage.ParseRequest(body)
		if err != nil {
			if req != nil {
				t.Fatal("a request with an error")
			}
			return
		}
		for _, v := range append([]string{req.Platform, req.GuildID, req.ChannelID, req.Principal, req.UserID}, req.Allow...) {
			if len(v) > 128 {
				t.Fatalf("field of %d bytes", len(v))
			}
		}
		if len(req.Allow) > registry.MaxAllowList || req.TTLSeconds < 0 {
			t.Fatalf("unbounded request %+v", req)
		}
	})
}

// locator places chats from a table (channel -> guild; absent: not
// visible; "": a DM channel; "!": the platform could not be asked) and
// records who asked.
type locator struct {
	guilds map[string]string
	askers []string
	// before, when set, runs once before a lookup: another request's
	// change while a claim is being placed.
	before func()
}

func (l *locator) LocateChat(ctx context.Context, chatID string) (platform.Chat, error) {
	if before := l.before; before != nil {
		l.before = nil
		before()
	}
	l.askers = append(l.askers, platform.TenantOf(ctx))
	g, ok := l.guilds[chatID]
	switch {
	case !ok:
		return platform.Chat{}, platform.ErrUnknownChat
	case g == "!":
		return platform.Chat{}, errors.Join(errors.New("discord: lookup timed out"), platform.ErrUnavailable)
	}
	return platform.Chat{ID: chatID, Space: g, DM: g == ""}, nil
}

// placeDiscordWith rebuilds r's handler with loc as Discord's
// platform.ScopeLocator (Telegram has none here).
func (r *rig) placeDiscordWith(loc *locator) {
	r.h = manage.New(manage.Config{
		Registry: r.reg, Auth: r.auth, Apply: func(context.Context) error { return nil },
		Platforms: []string{"discord", "telegram"},
		Locator: func(name string) platform.ScopeLocator {
			if name == "discord" {
				return loc
			}
			return nil
		},
	})
	r.mux = http.NewServeMux()
	for p, h := range r.h.Routes() {
		r.mux.Handle(p, h)
	}
}

// TestScopeVisibilityFloor: a Discord claim is stored only when the
// platform sees the channel in the guild the claim names (asked on the
// claimant's behalf); an invisible channel, a DM channel and another
// guild's channel get the same 403, an unanswered lookup 503, and a claim
// on a platform without a locator (Telegram in this rig) is taken as it
// is.
func TestScopeVisibilityFloor(t *testing.T) {
	r := newRig(t)
	loc := &locator{guilds: map[string]string{"501": "500", "601": "", "502": "!"}}
	r.placeDiscordWith(loc)
	var forbidden []string
	for _, body := range []string{
		`{"platform":"discord","guildId":"999","channelId":"501"}`,
		`{"platform":"discord","channelId":"501"}`,
		`{"platform":"discord","guildId":"500","channelId":"777"}`,
		`{"platform":"discord","channelId":"601"}`,
	} {
		out := r.post(t, "gw-a", "/manage/scope", body, http.StatusForbidden)
		msg, _ := out["error"].(string)
		forbidden = append(forbidden, strings.SplitN(msg, ":", 2)[0])
	}
	for _, m := range forbidden {
		if m != "forbidden" {
			t.Fatalf("403 answers %q, want the same reason for each", forbidden)
		}
	}
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","guildId":"500","channelId":"502"}`, http.StatusServiceUnavailable)
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","guildId":"500","channelId":"501"}`, http.StatusOK)
	r.post(t, "gw-a", "/manage/scope", `{"platform":"telegram","channelId":"-100777"}`, http.StatusOK)
	if len(loc.askers) != 6 || slices.ContainsFunc(loc.askers, func(a string) bool { return a != "a" }) {
		t.Fatalf("the locator was asked by %q, want a six times", loc.askers)
	}
	st, err := r.reg.Stored(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	scopes := 0
	for _, b := range st.Bindings {
		if b.Kind == platform.BindScope {
			scopes++
		}
	}
	if scopes != 2 {
		t.Fatalf("%d scopes stored, want the two accepted claims", scopes)
	}
}

// TestScopeOfAnotherTenantsChat: a claim of a chat bound to another
// tenant, in the YAML or through the admin API (the chat, or the guild the
// platform places the channel in), or claimed by it, is 409 with one text
// for every case; the owner's own claim of it is 200.
func TestScopeOfAnotherTenantsChat(t *testing.T) {
	r := newRig(t)
	if err := r.reg.SetDeclared(registry.State{Bindings: []registry.Binding{
		{Platform: "telegram", Kind: platform.BindChat, ID: "-1001", Tenant: "b"},
		{Platform: "discord", Kind: platform.BindGuild, ID: "700", Tenant: "b"},
	}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.reg.Bind(ctx, registry.Binding{Platform: "telegram", Kind: platform.BindChat, ID: "-1002", Tenant: "b"}); err != nil {
		t.Fatal(err)
	}
	r.placeDiscordWith(&locator{guilds: map[string]string{"701": "700", "801": "800"}})
	r.post(t, "gw-b", "/manage/scope", `{"platform":"discord","guildId":"800","channelId":"801"}`, http.StatusOK)
	var texts []string
	for _, body := range []string{
		`{"platform":"telegram","channelId":"-1001"}`,
		`{"platform":"telegram","channelId":"-1002"}`,
		`{"platform":"discord","guildId":"700","channelId":"701"}`,
		`{"platform":"discord","guildId":"800","channelId":"801"}`,
	} {
		out := r.post(t, "gw-a", "/manage/scope", body, http.StatusConflict)
		msg, _ := out["error"].(string)
		texts = append(texts, msg)
	}
	if len(slices.Compact(slices.Clone(texts))) != 1 {
		t.Fatalf("409 answers %q, want one text", texts)
	}
	r.post(t, "gw-b", "/manage/scope", `{"platform":"telegram","channelId":"-1001"}`, http.StatusOK)
	r.post(t, "gw-b", "/manage/scope", `{"platform":"discord","guildId":"700","channelId":"701"}`, http.StatusOK)
}

// TestGatewayRateLimit: a gateway's requests are limited to
// change.GatewayBurst at once and then one per change.GatewayEvery; past
// them every request is answered 429 with Retry-After; refused requests
// spend too, but not those whose body does not parse, and another gateway
// has its own allowance. Before, one token could make every instance
// apply the registry again with every request, without end, and refused
// requests spent nothing: a gateway repeating a claim of another tenant's
// chat had every binding read, and the platform asked, without end.
func TestGatewayRateLimit(t *testing.T) {
	r := newRig(t)
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	r.h = manage.New(manage.Config{
		Registry: r.reg, Auth: r.auth,
		Apply:     func(context.Context) error { return nil },
		Platforms: []string{"discord", "telegram"},
		Limiter:   change.NewLimiter(clk),
	})
	r.mux = http.NewServeMux()
	for p, h := range r.h.Routes() {
		r.mux.Handle(p, h)
	}
	for range 2 * change.GatewayBurst {
		r.post(t, "gw-a", "/manage/dm-default", `{"platform":"telegram","userId":`, http.StatusBadRequest)
	}
	principal := `{"platform":"telegram","principal":"any"}`
	claim := `{"platform":"telegram","channelId":"-1001"}`
	r.post(t, "gw-b", "/manage/scope", claim, http.StatusOK)
	for range change.GatewayBurst / 2 {
		r.post(t, "gw-a", "/manage/scope", claim, http.StatusConflict)
		r.post(t, "gw-a", "/manage/principal", principal, http.StatusOK)
	}
	req := httptest.NewRequest(http.MethodPost, "/manage/principal", strings.NewReader(principal))
	req.Header.Set("Authorization", "Bearer gw-a")
	w := httptest.NewRecorder()
	r.mux.ServeHTTP(w, req)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("request %d of gw-a: %d, Retry-After %q; want 429, 1", change.GatewayBurst+1, w.Code, w.Header().Get("Retry-After"))
	}
	r.post(t, "gw-a", "/manage/deprovision", `{}`, http.StatusTooManyRequests)
	r.post(t, "gw-b", "/manage/principal", principal, http.StatusOK)
	clk.Advance(change.GatewayEvery)
	r.post(t, "gw-a", "/manage/principal", principal, http.StatusOK)
	r.post(t, "gw-a", "/manage/principal", principal, http.StatusTooManyRequests)
}

// TestReleaseOfAnotherTenantsDeclaredScope: releasing a chat the YAML
// gives another tenant as a scope is 404 with the text of releasing a chat
// nobody holds: before, it was 409 "declared in the YAML config", which
// told a tenant which chats the YAML gives others.
func TestReleaseOfAnotherTenantsDeclaredScope(t *testing.T) {
	r := newRig(t)
	if err := r.reg.SetDeclared(registry.State{Bindings: []registry.Binding{
		{Platform: "telegram", Kind: platform.BindScope, ID: "-1003", Tenant: "b"},
	}}); err != nil {
		t.Fatal(err)
	}
	declared := r.post(t, "gw-a", "/manage/scope/release", `{"platform":"telegram","channelId":"-1003"}`, http.StatusNotFound)
	none := r.post(t, "gw-a", "/manage/scope/release", `{"platform":"telegram","channelId":"-1004"}`, http.StatusNotFound)
	if declared["error"] != none["error"] {
		t.Errorf("release of b's declared scope: %v; of no one's: %v; want one text", declared["error"], none["error"])
	}
	r.post(t, "gw-b", "/manage/scope/release", `{"platform":"telegram","channelId":"-1003"}`, http.StatusConflict)
}

// TestLinkCodeIsNotCached: over HTTP, the /manage/link answer, which
// carries a link code, forbids any cache to keep it.
func TestLinkCodeIsNotCached(t *testing.T) {
	r := newRig(t)
	srv := httptest.NewServer(r.mux)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/manage/link", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer gw-a")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("POST /manage/link: %d Cache-Control %q, want 200 no-store", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
}

// failingStore is a store whose registry's removals of bindings fail
// while fail is set, as a store that cannot be reached does, and which
// calls gatewayGone, when set, before a gateway's removal.
type failingStore struct {
	store.Store
	fail        bool
	gatewayGone func()
}

func (s *failingStore) Registry() store.Registry { return failingRegistry{s.Store.Registry(), s} }

// failingAddr is the internal address failingStore's errors name.
const failingAddr = "10.9.8.7:6379"

type failingRegistry struct {
	store.Registry
	s *failingStore
}

func (r failingRegistry) CompareAndSwap(ctx context.Context, namespace, key string, old, value []byte) (bool, error) {
	if r.s.fail && namespace == "registry/bindings" && value == nil {
		return false, errors.New("dial tcp " + failingAddr + ": connect: connection refused")
	}
	if r.s.gatewayGone != nil && namespace == "registry/gateways" && value == nil {
		r.s.gatewayGone()
	}
	return r.Registry.CompareAndSwap(ctx, namespace, key, old, value)
}

// TestDeprovisionFailingToDropCanBeRetried: a deprovision whose drop of
// the tenant's managed bindings fails (a store error) answers 500 and
// leaves its gateway, so the gateway's retry drops them and removes it.
// Before, the gateway was removed first: its credentials then
// authenticated no more, and no retry could drop the scope claims, links
// and principal left behind.
func TestDeprovisionFailingToDropCanBeRetried(t *testing.T) {
	mem := store.NewMemory(clock.System)
	t.Cleanup(func() { _ = mem.Close() })
	st := &failingStore{Store: mem}
	r := newRigOn(t, st)
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","channelId":"601"}`, http.StatusOK)
	st.fail = true
	r.post(t, "gw-a", "/manage/deprovision", `{}`, http.StatusInternalServerError)
	st.fail = false
	if ok, err := r.reg.GatewayOf(context.Background(), "a", "gw-a"); err != nil || !ok {
		t.Fatalf("gw-a after a deprovision that failed: a gateway %v (%v); its credentials no longer authenticate a retry", ok, err)
	}
	if out := r.post(t, "gw-a", "/manage/deprovision", `{}`, http.StatusOK); out["dropped"] != float64(1) {
		t.Fatalf("the retried deprovision dropped %v, want the scope claim", out["dropped"])
	}
	if ok, _ := r.reg.GatewayOf(context.Background(), "a", "gw-a"); ok {
		t.Fatal("gw-a is still a gateway after the retried deprovision")
	}
}

// TestStoreErrorIsNotAnswered: a change that fails for its store answers
// 500 {"error":"internal"}, never the store's error, which can name an
// internal address (a Redis host); the log has it. Before, the answer
// was the error's text.
func TestStoreErrorIsNotAnswered(t *testing.T) {
	mem := store.NewMemory(clock.System)
	t.Cleanup(func() { _ = mem.Close() })
	st := &failingStore{Store: mem}
	r := newRigOn(t, st)
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","channelId":"601"}`, http.StatusOK)
	st.fail = true
	if out := r.post(t, "gw-a", "/manage/deprovision", `{}`, http.StatusInternalServerError); out["error"] != change.Internal {
		t.Errorf("a deprovision whose store failed answers %v, want {\"error\":%q} (never the store's error)", out, change.Internal)
	}
	if !strings.Contains(r.logs.String(), failingAddr) {
		t.Errorf("the log does not name the store's error: %s", r.logs)
	}
}

// TestDeprovisionDropsWhatItsGatewayWroteMeanwhile: a scope claim of the
// deprovisioned gateway landing after the drop of its tenant's managed
// bindings and before the gateway's removal is not left behind. Before,
// the claim stayed, with no gateway left whose credentials could drop it.
func TestDeprovisionDropsWhatItsGatewayWroteMeanwhile(t *testing.T) {
	mem := store.NewMemory(clock.System)
	t.Cleanup(func() { _ = mem.Close() })
	st := &failingStore{Store: mem}
	r := newRigOn(t, st)
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","channelId":"601"}`, http.StatusOK)
	landed := false
	st.gatewayGone = func() {
		st.gatewayGone = nil
		r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","channelId":"602"}`, http.StatusOK)
		landed = true
	}
	r.post(t, "gw-a", "/manage/deprovision", `{}`, http.StatusOK)
	if !landed {
		t.Fatal("the hook never ran: the deprovision removed no gateway")
	}
	s, err := r.reg.Stored(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range s.Bindings {
		if b.Tenant == "a" {
			t.Fatalf("after gw-a's deprovision, tenant a still holds %+v", b)
		}
	}
}

// TestRefusedBearerFloodLogsBoundedLines: requests with a bad bearer, as
// anyone on the internet can send, are each answered 401, but their log
// lines are bounded per remote host (loglimit.NewSources: 10 at once).
// Before, every one logged a line.
func TestRefusedBearerFloodLogsBoundedLines(t *testing.T) {
	r := newRig(t)
	for range 200 {
		r.post(t, "nobody", "/manage/link", "", http.StatusUnauthorized)
	}
	if n := strings.Count(r.logs.String(), `"msg":"manage request refused"`); n < 1 || n > 10 {
		t.Fatalf("200 refused bearers from one host logged %d lines, want 1 to 10", n)
	}
}

// TestDeprovisionedGatewayOnAStaleInstanceIsRefused: after gw-a's
// deprovision, an instance that has not applied it yet (here the rig's
// Auth, which still takes gw-a's token) refuses gw-a's calls 401, as its
// next upgrade will be, and stores nothing for them. Before, such a call
// stored a scope claim for tenant a that no gateway was left to release.
func TestDeprovisionedGatewayOnAStaleInstanceIsRefused(t *testing.T) {
	r := newRig(t)
	r.post(t, "gw-a", "/manage/deprovision", `{}`, http.StatusOK)
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","channelId":"601"}`, http.StatusUnauthorized)
	s, err := r.reg.Stored(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range s.Bindings {
		if b.Tenant == "a" {
			t.Fatalf("after gw-a's deprovision, its call on a stale instance stored %+v", b)
		}
	}
	r.post(t, "gw-b", "/manage/scope", `{"platform":"discord","channelId":"602"}`, http.StatusOK)
}

// TestGatewayMadeAgainForATenantMadeAgainRefusesTheOldToken: tenant a
// deleted and created again, with a gateway of the same id, on instance
// one; instance two has not applied that yet (its Auth still takes the
// old gw-a's secret), and refuses the old secret 401 on /manage/*, storing
// nothing for the new tenant. Before, GatewayOf could not tell the two
// gw-a apart: the old gateway's token claimed a chat for the new tenant.
func TestGatewayMadeAgainForATenantMadeAgainRefusesTheOldToken(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	open := func() store.Store {
		st, err := store.Open(context.Background(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	ctx := context.Background()
	one, two := newRigOn(t, open()), registry.New(open(), clock.System)
	stale := &rig{reg: two, auth: bearers{"gw-a": one.auth["gw-a"]}, mux: http.NewServeMux(), logs: &bytes.Buffer{}}
	stale.placeDiscordWith(&locator{guilds: map[string]string{"601": "500"}})
	if err := one.reg.DeleteTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := one.reg.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := one.reg.CreateGateway(ctx, "a", "gw-a"); err != nil {
		t.Fatal(err)
	}
	stale.post(t, "gw-a", "/manage/scope", `{"platform":"discord","guildId":"500","channelId":"601"}`, http.StatusUnauthorized)
	s, err := two.Stored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Bindings) != 0 {
		t.Fatalf("the old gw-a's token on a stale instance stored %+v for the new tenant a", s.Bindings)
	}
}

// TestDeprovisionTakesBackAClaimAuthenticatedBefore: a scope claim of
// gw-a authenticated before gw-a's deprovision and written after it (its
// chat placed while the deprovision ran) is taken back and answered 404;
// gw-b's claim of the chat then stands. Before, it stayed: it came after
// the deprovision's second drop, and no gateway was left whose
// credentials could release it.
func TestDeprovisionTakesBackAClaimAuthenticatedBefore(t *testing.T) {
	r := newRig(t)
	loc := &locator{guilds: map[string]string{"601": "500"}}
	r.placeDiscordWith(loc)
	loc.before = func() { r.post(t, "gw-a", "/manage/deprovision", `{}`, http.StatusOK) }
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","guildId":"500","channelId":"601"}`, http.StatusNotFound)
	s, err := r.reg.Stored(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range s.Bindings {
		if b.Tenant == "a" {
			t.Fatalf("after gw-a's deprovision, its claim authenticated before it stored %+v", b)
		}
	}
	r.post(t, "gw-b", "/manage/scope", `{"platform":"discord","guildId":"500","channelId":"601"}`, http.StatusOK)
}

// TestDeprovisionTakesBackAClaimThoughItsGatewayIsMadeAgain: as
// TestDeprovisionTakesBackAClaimAuthenticatedBefore, with gw-a made again
// (its next boot's provision) before the claim is written: the claim of
// the old gw-a's token is taken back all the same, the new gw-a holding
// another secret. Before, the new gw-a passed for the old one.
func TestDeprovisionTakesBackAClaimThoughItsGatewayIsMadeAgain(t *testing.T) {
	r := newRig(t)
	loc := &locator{guilds: map[string]string{"601": "500"}}
	r.placeDiscordWith(loc)
	loc.before = func() {
		r.post(t, "gw-a", "/manage/deprovision", `{}`, http.StatusOK)
		if _, err := r.reg.CreateGateway(context.Background(), "a", "gw-a"); err != nil {
			t.Fatal(err)
		}
	}
	r.post(t, "gw-a", "/manage/scope", `{"platform":"discord","guildId":"500","channelId":"601"}`, http.StatusNotFound)
}
