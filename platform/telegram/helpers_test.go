package telegram

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/leakcheck"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/telegram/telegramtest"
	"connector/vault"
)

// TestMain fails the package when a goroutine of this package or of the
// Bot API library outlives the tests.
func TestMain(m *testing.M) {
	leakcheck.Main(m, 5*time.Second, "connector/platform/telegram.", "go-telegram/bot.")
}

const (
	testToken  = telegramtest.Token
	testSecret = telegramtest.Secret
	waitFor    = 10 * time.Second
)

// The fixture world and helpers of telegramtest, under this package's names.
var (
	testChats    = telegramtest.Chats()
	withUpdateID = telegramtest.WithUpdateID
	visible      = telegramtest.Visible
	fixture      = telegramtest.Fixture
)

// newSink is the sink a test's platform delivers into.
func newSink() *platformtest.Sink { return platformtest.NewSink(1024) }

// env is a platform wired to a fake Bot API.
type env struct {
	p    *Platform
	fake *telegramtest.Server
	sink *platformtest.Sink
	logs *telegramtest.LogBuffer
	// hook is the webhook endpoint (webhook mode only).
	hook string
	// created are the tenants' creations its vault gives, nil without
	// one of sharedStoreEnv's.
	created *creations
}

// newEnv builds a platform against a fake Bot API; configure adjusts the
// config (limits are off unless it turns them on).
func newEnv(t *testing.T, configure func(*Config)) *env {
	t.Helper()
	return newEnvOn(t, nil, configure)
}

// newEnvOn is newEnv with the platform, and the fake's call stamps, on clk
// (nil: the real clock).
func newEnvOn(t *testing.T, clk *clocktest.Fake, configure func(*Config)) *env {
	t.Helper()
	deps := platform.Deps{}
	if clk != nil {
		deps.Clock = clk
	}
	return newEnvDeps(t, deps, configure)
}

// newEnvDeps is newEnv with the platform built on deps (its Log is the
// env's; a fake Clock stamps the fake's calls too).
func newEnvDeps(t *testing.T, deps platform.Deps, configure func(*Config)) *env {
	t.Helper()
	fake := telegramtest.New(t, testToken)
	if clk, ok := deps.Clock.(*clocktest.Fake); ok {
		fake.SetClock(clk)
	}
	cfg := Config{
		BotToken: testToken, APIServerURL: fake.URL, Chats: testChats,
		GlobalPerSecond: -1, ChatPerSecond: -1, GroupPerMinute: -1, PollTimeout: 2 * time.Second,
	}
	if configure != nil {
		configure(&cfg)
	}
	logs := &telegramtest.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	deps.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.transport.CloseIdleConnections)
	return &env{p: p, fake: fake, sink: newSink(), logs: logs}
}

// creations are the tenants' creations a test's vaults give
// (vault.Config.Since), as the registry's apply sets them before anything
// else learns of them.
type creations struct {
	mu sync.Mutex
	at map[string]time.Time
}

// vault gives deps a vault (on deps.Store, else in memory) whose tenants
// were created as c says.
func (c *creations) vault(deps *platform.Deps) {
	cfg := vault.Config{Clock: deps.Clock, Since: c.since}
	if deps.Store != nil {
		deps.Vault = vault.NewDurable(deps.Store.Capabilities(), cfg)
	} else {
		deps.Vault = vault.NewMemory(cfg)
	}
}

// since is vault.Config.Since.
func (c *creations) since(tenant string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at[tenant]
}

// made records tenant as (deleted and) created at at.
func (c *creations) made(tenant string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at == nil {
		c.at = map[string]time.Time{}
	}
	c.at[tenant] = at
}

// webhookEnv runs a webhook-mode platform with its route on a loopback
// server, registered with the fake.
func webhookEnv(t *testing.T, configure func(*Config)) *env {
	t.Helper()
	e := newWebhookEnv(t, configure)
	e.startWebhook(t)
	return e
}

// newWebhookEnv builds a webhook-mode platform; startWebhook runs it.
func newWebhookEnv(t *testing.T, configure func(*Config)) *env {
	t.Helper()
	return newEnv(t, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
		if configure != nil {
			configure(c)
		}
	})
}

// startWebhook serves the platform's route on a loopback server, runs the
// platform and waits until the fake has its webhook.
func (e *env) startWebhook(t *testing.T) {
	t.Helper()
	mux := http.NewServeMux()
	for pattern, h := range e.p.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e.hook = srv.URL + WebhookPath
	e.run(t)
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
}

// pollingEnv runs a long-polling platform.
func pollingEnv(t *testing.T, configure func(*Config)) *env {
	t.Helper()
	e := newEnv(t, configure)
	e.run(t)
	return e
}

// run starts Run until the test ends.
func (e *env) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, e.sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitFor):
			t.Error("Run did not return after cancel")
		}
	})
}

// post delivers raw to the webhook with the right secret and returns the status.
func (e *env) post(t *testing.T, raw []byte) int {
	t.Helper()
	return e.postSecret(t, raw, testSecret)
}

func (e *env) postSecret(t *testing.T, raw []byte, secret string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	code, err := telegramtest.PostUpdate(ctx, http.DefaultClient, e.hook, secret, raw)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

// waitStatus waits until Status satisfies ok.
func (e *env) waitStatus(t *testing.T, ok func(platform.Status) bool) platform.Status {
	t.Helper()
	return telegramtest.WaitStatus(t, e.p, ok)
}

// calls waits for n calls of method on the fake.
func (e *env) calls(t *testing.T, method string, n int) []telegramtest.Call {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	calls, err := e.fake.WaitCalls(ctx, method, n)
	if err != nil {
		t.Fatal(err)
	}
	return calls
}
