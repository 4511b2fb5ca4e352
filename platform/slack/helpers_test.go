package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/internal/leakcheck"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/slack/slacktest"
	"connector/store"
	"connector/vault"
)

// TestMain fails the package when a goroutine of this package or of the
// Slack library outlives the tests.
func TestMain(m *testing.M) {
	leakcheck.Main(m, 5*time.Second, "connector/platform/slack.", "slack-go/slack")
}

// waitFor bounds every wait of these tests.
const waitFor = 10 * time.Second

const testSecret = "test-signing-secret-8f3d"

// The fixture world: workspace A (tenant t1; channel ops bound to t3),
// workspace B (tenant t2).
var (
	teamA = slacktest.Team{ID: "T0AAA00001", Name: "Lab", Token: "xoxb-1-lab-token", BotUser: "U0BOTA0001", BotID: "B0BOTA0001"}
	teamB = slacktest.Team{ID: "T0BBB00002", Name: "Acme", Token: "xoxb-2-acme-token", BotUser: "U0BOTB0002", BotID: "B0BOTB0002"}
)

const (
	chanGeneral = "C0GEN00001" // A, tenant t1 by its workspace
	chanOps     = "C0OPS00002" // A, bound to tenant t3
	dmAda       = "D0ADA00001" // A, Ada's DM with the app
	chanAcme    = "C0ACME0001" // B, tenant t2
	userAda     = "U0ADA00001"
	userBob     = "U0BOB00002" // B
)

// logBuffer collects the platform's log.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// env is a platform wired to a fake Slack.
type env struct {
	p     *Platform
	fake  *slacktest.Server
	sink  *platformtest.Sink
	logs  *logBuffer
	store store.Store
	clock *clocktest.Fake
	srv   *httptest.Server // the platform's routes
	stop  func()
}

// newEnv builds a platform for workspace A (bot_token) and B (installed
// through OAuth), starts Run and serves its routes; configure adjusts the
// config, deps the dependencies.
func newEnv(t testing.TB, configure func(*Config), deps *platform.Deps) *env {
	t.Helper()
	return newEnvOn(t, newFake(t), configure, deps)
}

// newFake is a fake Slack holding the fixture world.
func newFake(t testing.TB) *slacktest.Server {
	t.Helper()
	fake := slacktest.New(t)
	fake.AddTeam(teamA)
	fake.AddTeam(teamB)
	fake.AddUser(teamA.ID, slacktest.User{ID: userAda, Name: "ada", RealName: "Ada Lovelace", DisplayName: "Ada"})
	fake.AddUser(teamB.ID, slacktest.User{ID: userBob, Name: "bob", RealName: "Bob"})
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: chanGeneral, Name: "general"})
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: chanOps, Name: "ops"})
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: dmAda, IsIM: true, Peer: userAda})
	fake.AddChannel(teamB.ID, slacktest.Channel{ID: chanAcme, Name: "acme-general"})
	return fake
}

// newEnvOn is newEnv against fake.
func newEnvOn(t testing.TB, fake *slacktest.Server, configure func(*Config), deps *platform.Deps) *env {
	t.Helper()
	e := startEnvOn(t, fake, configure, deps)
	e.waitReady(t)
	return e
}

// startEnvOn is newEnvOn without its wait for the platform to be ready:
// Run is started, and the platform may still be connecting.
func startEnvOn(t testing.TB, fake *slacktest.Server, configure func(*Config), deps *platform.Deps) *env {
	t.Helper()
	cfg := Config{
		SigningSecret: testSecret, BotToken: teamA.Token, ClientID: "1.2", ClientSecret: "client-secret-7a1c",
		APIURL: fake.URL, Teams: map[string]string{teamA.ID: "t1", teamB.ID: "t2"}, ChannelPerSecond: -1,
		Tenants: map[string]TenantConfig{"t1": {}, "t2": {}, "t3": {}},
	}
	if configure != nil {
		configure(&cfg)
	}
	d := platform.Deps{}
	if deps != nil {
		d = *deps
	}
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	if d.Log == nil {
		d.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if d.Store == nil {
		st := store.NewMemory(nil)
		t.Cleanup(func() { _ = st.Close() })
		d.Store = st
	}
	if d.Vault == nil {
		d.Vault = vault.NewMemory(vault.Config{})
	}
	p, err := New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Bind([]platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindChannel, ID: chanOps, Tenant: "t3"},
	}); err != nil {
		t.Fatal(err)
	}
	if cfg.ClientID != "" {
		if err := p.works.install(context.Background(), teamB.ID, installRecord{Token: teamB.Token, BotUser: teamB.BotUser}); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{p: p, fake: fake, sink: platformtest.NewSink(1024), logs: logs, store: d.Store}
	if c, ok := d.Clock.(*clocktest.Fake); ok {
		e.clock = c
	}
	mux := http.NewServeMux()
	for pattern, h := range p.Routes() {
		mux.Handle(pattern, h)
	}
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, e.sink) }()
	e.stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitFor):
			t.Errorf("timed out after %v waiting for Run to return", waitFor)
		}
		p.http.CloseIdleConnections()
	}
	t.Cleanup(func() { e.stop() })
	return e
}

// waitReady waits until auth.test identified the bot token.
func (e *env) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !e.p.Status().Ready || (e.p.cfg.BotToken != "" && e.p.works.configTeam() == "") {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for the platform to be ready: %+v", waitFor, e.p.Status())
		}
		time.Sleep(2 * time.Millisecond) // the platform signals no readiness
	}
}

// now is the platform's clock.
func (e *env) now() time.Time {
	if e.clock != nil {
		return e.clock.Now()
	}
	return time.Now()
}

// post sends a signed request to path and returns its status and body.
func (e *env) post(t testing.TB, path, contentType string, body []byte) (int, string) {
	t.Helper()
	return e.do(t, slacktest.SignedRequest(e.srv.URL+path, testSecret, e.now(), contentType, body))
}

func (e *env) do(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// event posts an Events API envelope of event for team and wants status.
func (e *env) event(t testing.TB, team slacktest.Team, eventID string, event map[string]any, want int) {
	t.Helper()
	if code, body := e.post(t, EventsPath, "application/json", slacktest.Envelope(team.ID, team.BotUser, eventID, event)); code != want {
		t.Fatalf("event %s: %d %s, want %d", eventID, code, body, want)
	}
}

// execute runs an action (its JSON) for tenant.
func (e *env) execute(t testing.TB, tenant, action string) contract.Result {
	t.Helper()
	a, err := contract.DecodeAction(json.RawMessage(action))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	return e.p.Execute(ctx, tenant, &a)
}

// lastCall returns the last call of method.
func (e *env) lastCall(t testing.TB, method string) slacktest.Call {
	t.Helper()
	calls := e.fake.Calls(method)
	if len(calls) == 0 {
		t.Fatalf("no %s call", method)
	}
	return calls[len(calls)-1]
}

// contextFor is a context ending after waitFor.
func contextFor() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), waitFor)
}

// sprintf is fmt.Sprintf.
func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// newNode is an instance's cluster node on st, closed when t ends.
func newNode(t testing.TB, st store.Store, name string) *cluster.Node {
	t.Helper()
	n, err := cluster.New(cluster.Config{Instance: name, PubSub: st.PubSub()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}
