package discord

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/session"
	"connector/vault"
)

const (
	testToken   = "MTAxMDEwMTAxMDEw.fake.bot-token-secret"
	guildLab    = "100"
	chanGeneral = "101"
	chanRandom  = "102"
	threadPlan  = "103"
	chanForum   = "104"
	guildOther  = "200"
	chanOther   = "201"
	chanDMAda   = "301"
	userAda     = "501"
)

// world fills the fake with two tenants' guilds and a DM channel.
func world(f *discordtest.Server) {
	topic := "General chat"
	forumTopic := "Ask here"
	f.AddGuild(discordtest.Guild{ID: guildLab, Name: "Lab"},
		discordtest.Channel{ID: chanGeneral, Type: 0, Name: "general", Topic: &topic},
		discordtest.Channel{ID: chanRandom, Type: 0, Name: "random"},
		discordtest.Channel{ID: threadPlan, Type: 11, Name: "Deploy plan", ParentID: chanGeneral},
		discordtest.Channel{ID: chanForum, Type: 15, Name: "help", Topic: &forumTopic},
	)
	f.AddGuild(discordtest.Guild{ID: guildOther, Name: "Other"},
		discordtest.Channel{ID: chanOther, Type: 0, Name: "lobby"})
	f.AddChannel(discordtest.Channel{ID: chanDMAda, Type: 1})
}

// chanSink collects deliveries; while refuse is set it takes none, as a
// relay whose store fails.
type chanSink struct {
	ch     chan platform.Delivery
	refuse atomic.Bool
}

func newSink() *chanSink { return &chanSink{ch: make(chan platform.Delivery, 1024)} }

// errRefused is what a refusing chanSink answers.
var errRefused = errors.New("sink refuses deliveries")

func (s *chanSink) Deliver(_ context.Context, d platform.Delivery) error {
	if s.refuse.Load() {
		return errRefused
	}
	s.ch <- d
	return nil
}

func (s *chanSink) next(t *testing.T) platform.Delivery {
	t.Helper()
	select {
	case d := <-s.ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery within 10s")
	}
	return platform.Delivery{}
}

// logCapture is a slog handler keeping every record's text, with a way to
// wait for a message.
type logCapture struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
	h       slog.Handler
}

func newLogCapture() *logCapture {
	c := &logCapture{changed: make(chan struct{})}
	c.h = slog.NewTextHandler(lockedWriter{c}, &slog.HandlerOptions{Level: slog.LevelDebug})
	return c
}

type lockedWriter struct{ c *logCapture }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.buf.Write(p)
	close(w.c.changed)
	w.c.changed = make(chan struct{})
	return len(p), nil
}

func (c *logCapture) logger() *slog.Logger { return slog.New(c.h) }

func (c *logCapture) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// waitFor waits until the log contains s.
func (c *logCapture) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		found := strings.Contains(c.buf.String(), s)
		ch := c.changed
		c.mu.Unlock()
		if found {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("log never said %q; log:\n%s", s, c.text())
		}
	}
}

// metricsRecorder records drops and rate-limit counts.
type metricsRecorder struct {
	mu      sync.Mutex
	drops   map[string]int
	limited int
	changed chan struct{}
}

func newMetrics() *metricsRecorder {
	return &metricsRecorder{drops: map[string]int{}, changed: make(chan struct{})}
}

func (m *metricsRecorder) RateLimitWait(string, time.Duration) {}

func (m *metricsRecorder) RateLimited(string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.limited++
}

func (m *metricsRecorder) Dropped(_, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drops[reason]++
	close(m.changed)
	m.changed = make(chan struct{})
}

func (m *metricsRecorder) waitDrop(t *testing.T, reason string, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		m.mu.Lock()
		got := m.drops[reason]
		ch := m.changed
		m.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("drop %q seen %d times, want %d", reason, got, n)
		}
	}
}

// env is a platform wired to a fake Discord.
type env struct {
	fake    *discordtest.Server
	p       *Platform
	sink    *chanSink
	logs    *logCapture
	metrics *metricsRecorder
	vault   *vault.Memory
	priv    ed25519.PrivateKey
	cfg     Config
	cancel  context.CancelFunc
	done    chan error
}

var sharedVault = vault.NewMemory(vault.Config{}) // one per process: each owns sweeper goroutines

func testConfig(f *discordtest.Server, pub ed25519.PublicKey) Config {
	return Config{
		BotToken: testToken, PublicKey: hex.EncodeToString(pub), ApplicationID: f.Options().AppID,
		Guilds: map[string]string{guildLab: "t1", guildOther: "t2"}, DMTenant: "t1",
		APIBaseURL: f.URL, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		HandshakeTimeout: 2 * time.Second, CommandSyncDebounce: 20 * time.Millisecond,
	}
}

// newEnv builds a platform against a fresh fake; mutate adjusts the config.
func newEnv(t *testing.T, opts discordtest.Options, mutate func(*Config)) *env {
	t.Helper()
	return newEnvOn(t, nil, opts, mutate)
}

// newEnvOn is newEnv with the platform on clk (nil: the real clock).
func newEnvOn(t *testing.T, clk clock.Clock, opts discordtest.Options, mutate func(*Config)) *env {
	t.Helper()
	return newEnvDeps(t, platform.Deps{Clock: clk}, opts, mutate)
}

// newEnvDeps is newEnv with deps (its Log and Metrics are the env's; an
// unset Vault is a new vault.Memory).
func newEnvDeps(t *testing.T, deps platform.Deps, opts discordtest.Options, mutate func(*Config)) *env {
	t.Helper()
	if opts.Token == "" {
		opts.Token = testToken
	}
	f := discordtest.New(t, opts)
	world(f)
	pub, priv, _ := ed25519.GenerateKey(nil)
	cfg := testConfig(f, pub)
	if mutate != nil {
		mutate(&cfg)
	}
	e := &env{fake: f, sink: newSink(), logs: newLogCapture(), metrics: newMetrics(), priv: priv, cfg: cfg}
	deps.Log, deps.Metrics = e.logs.logger(), e.metrics
	if deps.Vault == nil {
		// A vault per env: a chat grant one test makes must not open a
		// chat to a tenant in another.
		deps.Vault = vault.NewMemory(vault.Config{})
	}
	e.vault, _ = deps.Vault.(*vault.Memory) // nil for another kind of vault
	p, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	return e
}

// start runs the platform until the test ends.
func (e *env) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan error, 1)
	go func() { e.done <- e.p.Run(ctx, e.sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-e.done:
		case <-time.After(15 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
}

// startReady runs the platform and waits for its Gateway session.
func (e *env) startReady(t *testing.T) {
	t.Helper()
	e.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.fake.WaitSession(ctx, 1); err != nil {
		t.Fatal(err)
	}
	e.logs.waitFor(t, "discord gateway connected")
	e.logs.waitFor(t, "discord guild snapshot loaded")
}

func (e *env) dispatch(t *testing.T, typ string, d any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.fake.Dispatch(ctx, typ, d); err != nil {
		t.Fatal(err)
	}
}

func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// msg builds a MESSAGE_CREATE payload.
func msg(id, channel, guild, content string, mentionBot bool) map[string]any {
	m := map[string]any{
		"id": id, "channel_id": channel, "content": content, "type": 0, "tts": false,
		"timestamp": "2026-01-15T12:00:00.000000+00:00", "edited_timestamp": nil, "flags": 0,
		"author":      map[string]any{"id": userAda, "username": "ada.l", "global_name": "Ada", "discriminator": "0"},
		"mentions":    []any{},
		"attachments": []any{}, "embeds": []any{}, "mention_roles": []any{}, "pinned": false, "mention_everyone": false,
	}
	if guild != "" {
		m["guild_id"] = guild
		m["member"] = map[string]any{"nick": nil, "roles": []any{}}
	}
	if mentionBot {
		m["mentions"] = []any{map[string]any{"id": "9000", "username": "hermes", "bot": true}}
		m["content"] = "<@9000> " + content
	}
	return m
}

func sessionStr(s string) session.Nullable { return session.Str(s) }
