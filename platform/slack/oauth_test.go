package slack

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/slack/slacktest"
	"connector/store"
	"connector/vault"
)

var teamC = slacktest.Team{ID: "T0CCC00003", Name: "Newco", Token: "xoxb-3-newco-token", BotUser: "U0BOTC0003", BotID: "B0BOTC0003"}

// install begins an install (GET /slack/install) and returns its state
// and the cookie the browser was given.
func (e *env) install(t *testing.T) (string, *http.Cookie) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(e.srv.URL + InstallPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil || !strings.HasPrefix(loc.String(), strings.TrimSuffix(e.fake.URL, "/")+"/oauth/v2/authorize") ||
		loc.Query().Get("client_id") != "1.2" || !strings.Contains(loc.Query().Get("scope"), "chat:write") {
		t.Fatalf("install: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].Value != loc.Query().Get("state") {
		t.Fatalf("cookies %+v", cookies)
	}
	return loc.Query().Get("state"), cookies[0]
}

// callback is Slack's redirect back with code and state, from a browser
// holding cookie (nil: none).
func (e *env) callback(t *testing.T, code, state string, cookie *http.Cookie) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+OAuthCallbackPath+"?"+url.Values{"code": {code}, "state": {state}}.Encode(), nil)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	return e.do(t, req)
}

// TestOAuthInstallThenEvent: the install flow stores a new workspace's
// token; its events then reach the tenant it is bound to, and egress uses
// its token. Its state is single-use, bound to the browser, and expires;
// app_uninstalled forgets the token.
func TestOAuthInstallThenEvent(t *testing.T) {
	// The install is a minute before the uninstall's event_time (the
	// real clock's, slacktest.Envelope's).
	clk := clocktest.New(time.Now().Add(-time.Minute))
	e := newEnv(t, func(c *Config) { c.Teams[teamC.ID] = "t3" }, &platform.Deps{Clock: clk})
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindTeam, ID: teamC.ID, Tenant: "t3"}}); err != nil {
		t.Fatal(err)
	}
	e.fake.AddChannel(teamC.ID, slacktest.Channel{ID: "C0NEW00001", Name: "new-general"})
	e.fake.AddUser(teamC.ID, slacktest.User{ID: "U0CAT00001", Name: "cat"})
	state, cookie := e.install(t)
	e.fake.AddOAuthCode("code-1", teamC)
	if code, body := e.callback(t, "code-1", state, nil); code != http.StatusBadRequest {
		t.Fatalf("a callback without the browser's cookie: %d %s", code, body)
	}
	if code, body := e.callback(t, "code-1", state, cookie); code != http.StatusOK || !strings.Contains(body, "Newco") || strings.Contains(body, teamC.Token) {
		t.Fatalf("callback: %d %s", code, body)
	}
	if code, _ := e.callback(t, "code-1", state, cookie); code != http.StatusBadRequest {
		t.Fatalf("a used state: %d", code)
	}
	if strings.Contains(e.logs.String(), teamC.Token) {
		t.Fatal("the installed token was logged")
	}
	e.event(t, teamC, "Ev1", slacktest.MessageEvent(teamC.ID, "C0NEW00001", "U0CAT00001", "1768490100.000100", "", "<@U0BOTC0003> hi"), http.StatusOK)
	d := e.sink.Next(t)
	if d.Tenant != "t3" || d.Event.Text != "hi" || d.Event.Source.ChatName.Value != "new-general" {
		t.Fatalf("%+v", d)
	}
	if r := e.execute(t, "t3", `{"op":"send","chat_id":"C0NEW00001","content":"welcome","metadata":{"scope_id":"T0CCC00003"}}`); !r.Success {
		t.Fatalf("%+v", r)
	}
	if c := e.lastCall(t, "chat.postMessage"); c.Team != teamC.ID {
		t.Fatalf("posted as %s", c.Team)
	}
	// Uninstalled: the token is forgotten; egress there is unavailable.
	e.event(t, teamC, "Ev2", map[string]any{"type": "app_uninstalled"}, http.StatusOK)
	if _, ok, _ := e.p.works.load(t.Context(), teamC.ID); ok {
		t.Fatal("the install outlived app_uninstalled")
	}
	if r := e.execute(t, "t3", `{"op":"send","chat_id":"C0NEW00001","content":"gone","metadata":{"scope_id":"T0CCC00003"}}`); r.Success {
		t.Fatalf("egress after the uninstall: %+v", r)
	}
	// An expired state and a forged one are refused.
	state, cookie = e.install(t)
	clk.Advance(stateTTL)
	e.fake.AddOAuthCode("code-2", teamC)
	if code, _ := e.callback(t, "code-2", state, cookie); code != http.StatusBadRequest {
		t.Fatalf("an expired state: %d", code)
	}
	forged := state[:len(state)-2] + "AA"
	if code, _ := e.callback(t, "code-2", forged, &http.Cookie{Name: stateCookie, Value: forged}); code != http.StatusBadRequest {
		t.Fatalf("a forged state: %d", code)
	}
}

// TestTokensRevokedForgetsTheBotToken: tokens_revoked of the bot token
// forgets the workspace's install; one of user tokens only changes
// nothing.
func TestTokensRevokedForgetsTheBotToken(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.event(t, teamB, "Ev1", map[string]any{"type": "tokens_revoked", "tokens": map[string]any{"oauth": []string{"U0BOB00002"}}}, http.StatusOK)
	if _, ok, _ := e.p.works.load(t.Context(), teamB.ID); !ok {
		t.Fatal("a user token's revocation forgot the bot's install")
	}
	e.event(t, teamB, "Ev2", map[string]any{"type": "tokens_revoked", "tokens": map[string]any{"bot": []string{teamB.BotUser}}}, http.StatusOK)
	if _, ok, _ := e.p.works.load(t.Context(), teamB.ID); ok {
		t.Fatal("the bot token's revocation left the install")
	}
}

// TestOAuthStateSingleUseForItsLife: a state stays used for its whole
// life, however short slack.dedupe_window is: a second callback with it
// and a good code, later than the shortest window (and than an event's
// pending claim, pendingTTL) but within the state's ten minutes, is
// refused and installs nothing.
func TestOAuthStateSingleUseForItsLife(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, func(c *Config) { c.DedupeWindow = signatureWindow }, &platform.Deps{Clock: clk})
	state, cookie := e.install(t)
	e.fake.AddOAuthCode("code-1", teamC)
	if code, body := e.callback(t, "code-1", state, cookie); code != http.StatusOK {
		t.Fatalf("callback: %d %s", code, body)
	}
	if ok, err := e.p.works.remove(t.Context(), teamC.ID); !ok || err != nil {
		t.Fatalf("remove: %v %v", ok, err)
	}
	later := max(pendingTTL, signatureWindow) + time.Minute
	if later >= stateTTL {
		t.Fatalf("%v is not within the state's life %v", later, stateTTL)
	}
	clk.Advance(later)
	e.fake.AddOAuthCode("code-2", teamC)
	if code, body := e.callback(t, "code-2", state, cookie); code != http.StatusBadRequest || !strings.Contains(body, "already used") {
		t.Fatalf("a state used %v ago, dedupe_window %v: %d %s", later, signatureWindow, code, body)
	}
	if _, ok, _ := e.p.works.load(t.Context(), teamC.ID); ok {
		t.Fatal("a used state installed the workspace again")
	}
}

// TestStaleUninstallKeepsANewerInstall: Slack retries an app_uninstalled
// it got no 200 for (the same envelope, its event_time unchanged) for
// minutes. A retry that arrives after the workspace was installed again
// leaves the new install in place; an uninstall after it forgets it.
func TestStaleUninstallKeepsANewerInstall(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, func(c *Config) { c.Teams[teamC.ID] = "t3" }, &platform.Deps{Clock: clk})
	uninstall := func(eventID string, at time.Time) {
		t.Helper()
		var env map[string]any
		if err := json.Unmarshal(slacktest.Envelope(teamC.ID, teamC.BotUser, eventID, map[string]any{"type": "app_uninstalled"}), &env); err != nil {
			t.Fatal(err)
		}
		env["event_time"] = at.Unix()
		body, _ := json.Marshal(env)
		req := slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, clk.Now(), "application/json", body)
		req.Header.Set("X-Slack-Retry-Num", "1")
		if code, text := e.do(t, req); code != http.StatusOK {
			t.Fatalf("app_uninstalled %s: %d %s", eventID, code, text)
		}
	}
	uninstalledAt := clk.Now()
	clk.Advance(2 * time.Minute) // the admin installs the app again
	state, cookie := e.install(t)
	e.fake.AddOAuthCode("code-1", teamC)
	if code, body := e.callback(t, "code-1", state, cookie); code != http.StatusOK {
		t.Fatalf("callback: %d %s", code, body)
	}
	clk.Advance(3 * time.Minute) // Slack's last retry of the uninstall
	uninstall("Ev1", uninstalledAt)
	if _, ok, _ := e.p.works.load(t.Context(), teamC.ID); !ok {
		t.Fatal("a retried uninstall older than the install forgot it")
	}
	uninstall("Ev2", clk.Now())
	if _, ok, _ := e.p.works.load(t.Context(), teamC.ID); ok {
		t.Fatal("an uninstall after the install left it")
	}
}

// TestUninstallInTheInstallSecondKeepsIt: event_time is whole seconds, as
// is the install time stored, so an uninstall whose event_time is the
// install's second cannot be told from a retry of an older one. It keeps
// the install: a revoked token left in place is refused by Slack at its
// first use, a new install forgotten is lost without a word.
func TestUninstallInTheInstallSecondKeepsIt(t *testing.T) {
	clk := clocktest.New(time.Now().Truncate(time.Second).Add(900 * time.Millisecond))
	e := newEnv(t, func(c *Config) { c.Teams[teamC.ID] = "t3" }, &platform.Deps{Clock: clk})
	state, cookie := e.install(t)
	e.fake.AddOAuthCode("code-1", teamC)
	if code, body := e.callback(t, "code-1", state, cookie); code != http.StatusOK {
		t.Fatalf("callback: %d %s", code, body)
	}
	var env map[string]any
	if err := json.Unmarshal(slacktest.Envelope(teamC.ID, teamC.BotUser, "Ev1", map[string]any{"type": "app_uninstalled"}), &env); err != nil {
		t.Fatal(err)
	}
	env["event_time"] = clk.Now().Unix() // the install's second, 0.9 s into it
	body, _ := json.Marshal(env)
	req := slacktest.SignedRequest(e.srv.URL+EventsPath, testSecret, clk.Now(), "application/json", body)
	if code, text := e.do(t, req); code != http.StatusOK {
		t.Fatalf("app_uninstalled: %d %s", code, text)
	}
	if _, ok, _ := e.p.works.load(t.Context(), teamC.ID); !ok {
		t.Fatal("an uninstall whose event_time is the install's second forgot the install")
	}
}

// TestRejectedBotTokenKeepsTheInstalls: Slack refusing bot_token (its
// workspace uninstalled the app, the token revoked) stops that
// workspace only: with OAuth installs Run keeps serving, and an
// installed workspace's events still reach their tenant.
func TestRejectedBotTokenKeepsTheInstalls(t *testing.T) {
	fake := newFake(t)
	fake.Revoke(teamA.Token)
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	p, err := New(Config{
		SigningSecret: testSecret, BotToken: teamA.Token, ClientID: "1.2", ClientSecret: "client-secret-7a1c",
		APIURL: fake.URL, Teams: map[string]string{teamA.ID: "t1", teamB.ID: "t2"}, ChannelPerSecond: -1,
	}, platform.Deps{Store: st, Vault: vault.NewMemory(vault.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.works.install(t.Context(), teamB.ID, installRecord{Token: teamB.Token, BotUser: teamB.BotUser}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for pattern, h := range p.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	sink := platformtest.NewSink(16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, sink) }()
	deadline := time.Now().Add(waitFor)
	for !strings.Contains(p.Status().Detail, "rejected bot_token") {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for auth.test's refusal: %+v", waitFor, p.Status())
		}
		time.Sleep(2 * time.Millisecond) // the platform signals no readiness
	}
	body := slacktest.Envelope(teamB.ID, teamB.BotUser, "Ev1", slacktest.MessageEvent(teamB.ID, chanAcme, userBob, "1768490100.000100", "", "<@U0BOTB0002> status?"))
	resp, err := srv.Client().Do(slacktest.SignedRequest(srv.URL+EventsPath, testSecret, time.Now(), "application/json", body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("an installed workspace's event while bot_token is refused: %d", resp.StatusCode)
	}
	if d := sink.Next(t); d.Tenant != "t2" || d.Event.Text != "status?" {
		t.Fatalf("delivery %+v", d)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
