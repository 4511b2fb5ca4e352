package discord

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"flag"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/leakcheck"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
	"connector/session"
	"connector/vault"
)

// testParallel is how many tests run at once unless -test.parallel says
// otherwise. Most tests spend their last second idle, not on a CPU: stopping
// the platform closes its Gateway session, and discordgo's Session.Close
// sleeps one second after the close frame before it closes the socket
// (bwmarrin/discordgo#1347), so the GOMAXPROCS default would serialize
// those seconds on a small machine.
const testParallel = 16

// TestMain runs the tests testParallel at a time unless -test.parallel
// was given (or -test.fuzz, whose workers it counts too), and fails the
// package when a goroutine of this package or of discordgo outlives them
// (as Slack's and Telegram's do): with the tests in parallel,
// TestRunLeavesNoGoroutines sees only its own platform.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" || f.Name == "test.fuzz" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(testParallel))
	}
	leakcheck.Main(m, 5*time.Second, "connector/platform/discord.", "bwmarrin/discordgo.")
}

// The fixture world and helpers of discordtest, under this package's names.
const (
	testToken   = discordtest.Token
	guildLab    = discordtest.GuildLab
	chanGeneral = discordtest.ChanGeneral
	chanRandom  = discordtest.ChanRandom
	threadPlan  = discordtest.ThreadPlan
	guildOther  = discordtest.GuildOther
	chanOther   = discordtest.ChanOther
	chanDMAda   = discordtest.ChanDMAda
	userAda     = discordtest.UserAda
)

var (
	world         = discordtest.World
	msg           = discordtest.MessageCreate
	slashBody     = discordtest.SlashCommand
	newLogCapture = discordtest.NewLogCapture
	post          = discordtest.Post
)

// newSink is the sink a test's platform delivers into.
func newSink() *platformtest.Sink { return platformtest.NewSink(1024) }

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
	sink    *platformtest.Sink
	logs    *discordtest.LogCapture
	metrics *metricsRecorder
	vault   *vault.Memory
	priv    ed25519.PrivateKey
	cfg     Config
	cancel  context.CancelFunc
	done    chan error
}

var sharedVault = vault.NewMemory(vault.Config{}) // the tests' common vault

func testConfig(f *discordtest.Server, pub ed25519.PublicKey) Config {
	return Config{
		BotToken: testToken, PublicKey: hex.EncodeToString(pub), ApplicationID: f.Options().AppID,
		Guilds: map[string]string{guildLab: "t1", guildOther: "t2"}, DMTenant: "t1",
		APIBaseURL: f.URL, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		// The handshake deadline is waitCtx's: a handshake slowed by a loaded
		// machine must not be cut and retried, which tests counting dials,
		// HELLOs or IDENTIFYs would see (TestGatewayHandshakeWatchdog sets
		// its own).
		HandshakeTimeout: 10 * time.Second, CommandSyncDebounce: 20 * time.Millisecond,
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
	deps.Log, deps.Metrics = e.logs.Logger(), e.metrics
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
	t.Cleanup(func() {
		if t.Failed() {
			lines := strings.Split(e.logs.Text(), "\n")
			t.Logf("platform log (last 40 lines):\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	return e
}

// start runs the platform until the test ends.
func (e *env) start(t *testing.T) {
	t.Helper()
	e.startWith(t, e.sink)
}

// startWith is start delivering into sink.
func (e *env) startWith(t *testing.T, sink platform.Sink) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan error, 1)
	go func() { e.done <- e.p.Run(ctx, sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-e.done:
		case <-time.After(15 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	// Run takes webhooks once it set its lifecycle (its first step): wait
	// for that, or for Run to return, so a test's first request is not
	// refused 503 for coming before it.
	for deadline := time.Now().Add(10 * time.Second); e.p.running() == nil; runtime.Gosched() {
		select {
		case err := <-e.done: // Run returned: its caller reads why
			e.done <- err
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not start within 10s")
		}
	}
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
	platformtest.WaitUntil(t, "the Gateway session up and the guild snapshot loaded", func() bool {
		return e.p.Status().Ready && e.p.snap.loaded.Load()
	})
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

func sessionStr(s string) session.Nullable { return session.Str(s) }

// ownersUnknownResult is what an op is answered while the owners are
// unknown: errOwnersUnknown's text (platform.Authorize).
func ownersUnknownResult() contract.Result {
	return platform.OwnerUnknown(platformName, errOwnersUnknown)
}

// liveID is a snowflake of now with n in its low bits: the id of an
// interaction Discord sends now (one whose id is older than the answer
// window is dropped when it comes over the Gateway).
func liveID(n int) string { return idAt(time.Now(), n) }

// idAt is a snowflake of at with n in its low bits.
func idAt(at time.Time, n int) string {
	return strconv.FormatUint(uint64(at.UnixMilli()-discordEpochMs)<<22|uint64(n), 10)
}

// discordEpochMs is Discord's snowflake epoch, the first millisecond of 2015.
const discordEpochMs = 1420070400000
