package nexscope

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/nexscope/nexscopetest"
	"connector/platform/platformtest"
	"connector/vault"
)

// The member client, waits and fixtures of nexscopetest, under this
// package's names.
const (
	testTimeout = nexscopetest.Timeout
	testToken   = nexscopetest.Token
)

type (
	client     = nexscopetest.Member
	syncBuffer = nexscopetest.SyncBuffer
	received   = nexscopetest.Received
)

var (
	newFakeClock         = nexscopetest.NewClock
	waitFor              = platformtest.WaitUntil
	dialMember           = nexscopetest.Dial
	containsUser         = nexscopetest.ContainsUser
	users                = nexscopetest.Users
	decodeFrame          = nexscopetest.DecodeFrame
	fileStart            = nexscopetest.FileStart
	fileEnd              = nexscopetest.FileEnd
	newChunkSource       = nexscopetest.NewChunkSource
	sha256Of             = nexscopetest.SHA256Of
	receiveFile          = nexscopetest.ReceiveFile
	receiveFileStreaming = nexscopetest.ReceiveFileStreaming
	sendFile             = nexscopetest.SendFile
)

// testRelay is a Platform served on a loopback httptest server, Run started
// with a recording sink.
type testRelay struct {
	p     *Platform
	srv   *httptest.Server
	clock *clocktest.Fake
	sink  *platformtest.Sink
	logs  *syncBuffer
	url   string // ws:// base
	// created are the tenants' creations the Platform's vault knows
	// (vault.Config.Since), under mu: setTenants sets them.
	mu      sync.Mutex
	created map[string]time.Time
}

// since is the vault's vault.Config.Since.
func (tr *testRelay) since(tenant string) time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.created[tenant]
}

// setTenants applies tenants as the registry's apply does: the vault
// learns their creations first, then the Platform (SetTenants).
func (tr *testRelay) setTenants(tenants map[string]time.Time) {
	tr.recreate(tenants)
	tr.p.SetTenants(tenants)
}

// recreate sets the creations the vault knows, and nothing else: the
// window of an apply before it reaches the Platform.
func (tr *testRelay) recreate(tenants map[string]time.Time) {
	tr.mu.Lock()
	tr.created = tenants
	tr.mu.Unlock()
}

// newRelay builds a Platform with a fake clock and captured logs.
func newRelay(t testing.TB, cfg Config) *testRelay {
	t.Helper()
	return newRelayOn(t, cfg, nil)
}

// newRelayOn is newRelay with the Platform's clock the fake one as wrap
// returns it (wrap nil: the fake itself).
func newRelayOn(t testing.TB, cfg Config, wrap func(*clocktest.Fake) clock.Clock) *testRelay {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	fake := newFakeClock()
	var clk clock.Clock = fake
	if wrap != nil {
		clk = wrap(fake)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tr := &testRelay{clock: fake, logs: logs}
	p, err := New(cfg, platform.Deps{Log: log, Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk, Since: tr.since})})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	mux := http.NewServeMux()
	for pattern, h := range p.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tr.p, tr.srv, tr.url = p, srv, "ws"+strings.TrimPrefix(srv.URL, "http")
	return tr
}

// startRelay is newRelay with Run started on a recording sink until the
// test ends.
func startRelay(t testing.TB, cfg Config) *testRelay {
	t.Helper()
	return startRelayOn(t, cfg, nil)
}

// startRelayOn is startRelay on the clock wrap makes of the fake one (see
// newRelayOn).
func startRelayOn(t testing.TB, cfg Config, wrap func(*clocktest.Fake) clock.Clock) *testRelay {
	t.Helper()
	tr := newRelayOn(t, cfg, wrap)
	tr.sink = platformtest.NewSink(64)
	stop := tr.run(t, tr.sink)
	t.Cleanup(stop)
	return tr
}

// run starts Run on sink and returns the function that stops it and checks
// it returned nil.
func (tr *testRelay) run(t testing.TB, sink platform.Sink) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.p.Run(ctx, sink) }()
	waitFor(t, "Run started", func() bool { return tr.p.Status().Ready })
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(testTimeout):
			t.Error("Run did not return")
		}
	}
}

// advance moves the relay's clock by d once no member has a frame queued or
// being written. A member's write watchdog runs on that clock, armed only
// while a write is under way, and a frame a client already read may still
// be finishing its write: the clock moved then would fire its watchdog.
func (tr *testRelay) advance(t testing.TB, d time.Duration) {
	t.Helper()
	tr.writesDone(t)
	tr.clock.Advance(d)
}

// writesDone waits until no member, not even one that just left, has a
// frame queued or being written, so that no write watchdog is armed.
func (tr *testRelay) writesDone(t testing.TB) {
	t.Helper()
	waitFor(t, "every member's frames written (no write watchdog armed)", func() bool {
		for _, m := range tr.members() {
			if m.q.Queued() != 0 {
				return false
			}
		}
		return true
	})
}

// armedWatchdogs counts the members' write watchdogs whose timer is
// pending (a write within the last WriteTimeout on the clock).
func (tr *testRelay) armedWatchdogs() int {
	n := 0
	for _, m := range tr.members() {
		if m.watch.Armed() {
			n++
		}
	}
	return n
}

// members returns every member the relay serves, those that left their
// room included until their goroutines have finished.
func (tr *testRelay) members() []*member {
	tr.p.mu.Lock()
	defer tr.p.mu.Unlock()
	ms := make([]*member, 0, len(tr.p.members))
	for m := range tr.p.members {
		ms = append(ms, m)
	}
	return ms
}

// dialURL opens a WebSocket to path with query; it does not read.
func (tr *testRelay) dialURL(t testing.TB, path, query string, opts *websocket.DialOptions) *client {
	t.Helper()
	return dialMember(t, tr.url+path+"?"+query, opts)
}

// join connects name to the default room (or /ws/room) and checks that the
// first frame is a presence listing it.
func (tr *testRelay) join(t testing.TB, room, name string) *client {
	t.Helper()
	return tr.joinOpts(t, room, name, nil)
}

func (tr *testRelay) joinOpts(t testing.TB, room, name string, opts *websocket.DialOptions) *client {
	t.Helper()
	path := "/ws"
	if room != "" {
		path += "/" + room
	}
	c := tr.dialURL(t, path, "name="+name+"&token="+testToken+"&v=1", opts)
	c.Name = name
	p := c.Expect("presence")
	if !containsUser(p, name) {
		t.Fatalf("%s: first presence %v does not list itself", name, p["users"])
	}
	return c
}

// expectError reads the next frame and checks it is an error with code.
func expectError(c *client, code ErrorCode) map[string]any {
	c.T.Helper()
	m := c.Expect("error")
	if m["code"] != string(code) {
		c.T.Fatalf("%s: got error %v, want code %s", c.Name, m, code)
	}
	return m
}

// expectClose reads until the connection ends and checks that it ended with
// want, code and reason.
func expectClose(c *client, want Close) {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for {
		typ, b, err := c.WS.Read(ctx)
		if err != nil {
			if !endedWith(err, want) {
				c.T.Fatalf("%s: connection ended with %v, want %v", c.Name, err, want)
			}
			return
		}
		if typ == websocket.MessageText {
			c.T.Fatalf("%s: got %s before %v", c.Name, b, want)
		}
	}
}

// endedWith reports whether err, a read error of a client connection, is the
// close frame of want: its code and its reason.
func endedWith(err error, want Close) bool {
	var ce websocket.CloseError
	return errors.As(err, &ce) && int(ce.Code) == int(want.Code) && ce.Reason == want.Reason
}

// msg is a client msg frame.
func msg(id, from string, to []string, text string) map[string]any {
	return map[string]any{
		"type": "msg", "msgId": id, "from": from, "to": to, "role": "user",
		"threadId": "t1", "text": text, "hopCount": 0, "attachments": []any{},
	}
}
