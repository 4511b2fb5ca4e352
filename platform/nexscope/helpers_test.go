package nexscope

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/internal/clock/clocktest"
	"connector/platform"
)

// testTimeout bounds every wait in these tests; hitting it fails the test.
const testTimeout = 20 * time.Second

const testToken = "s3cret-shared-token-for-tests"

// newFakeClock returns the fake clock of these tests: timers fire only when
// the test advances it.
func newFakeClock() *clocktest.Fake {
	return clocktest.New(time.Date(2026, 4, 28, 12, 0, 0, 0, time.UTC))
}

// recordingSink is a platform.Sink that hands deliveries to the test.
type recordingSink struct{ ch chan platform.Delivery }

func (s *recordingSink) Deliver(_ context.Context, d platform.Delivery) error {
	s.ch <- d
	return nil
}

func (s *recordingSink) next(t testing.TB) platform.Delivery {
	t.Helper()
	select {
	case d := <-s.ch:
		return d
	case <-time.After(testTimeout):
		t.Fatal("no delivery")
		return platform.Delivery{}
	}
}

// testRelay is a Platform served on a loopback httptest server, Run started
// with a recording sink.
type testRelay struct {
	p     *Platform
	srv   *httptest.Server
	clock *clocktest.Fake
	sink  *recordingSink
	logs  *syncBuffer
	url   string // ws:// base
}

// syncBuffer collects log output from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newRelay builds a Platform with a fake clock and captured logs.
func newRelay(t testing.TB, cfg Config) *testRelay {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	clock := newFakeClock()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := New(cfg, platform.Deps{Log: log, Clock: clock})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	mux := http.NewServeMux()
	for pattern, h := range p.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testRelay{p: p, srv: srv, clock: clock, logs: logs, url: "ws" + strings.TrimPrefix(srv.URL, "http")}
}

// startRelay is newRelay with Run started on a recording sink until the
// test ends.
func startRelay(t testing.TB, cfg Config) *testRelay {
	t.Helper()
	tr := newRelay(t, cfg)
	tr.sink = &recordingSink{ch: make(chan platform.Delivery, 64)}
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

// waitFor polls cond until it holds, failing the test after testTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", testTimeout, what)
		}
		<-tick.C
	}
}

// client is a member's WebSocket, as a nexscope plugin would hold it.
type client struct {
	t    testing.TB
	ws   *websocket.Conn
	name string
}

// dialURL opens a WebSocket to path with query; it does not read.
func (tr *testRelay) dialURL(t testing.TB, path, query string, opts *websocket.DialOptions) *client {
	t.Helper()
	return dialMember(t, tr.url+path+"?"+query, opts)
}

// dialMember opens a member WebSocket to url (ws://...); it does not read.
func dialMember(t testing.TB, url string, opts *websocket.DialOptions) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	ws.SetReadLimit(-1)
	c := &client{t: t, ws: ws}
	t.Cleanup(func() { _ = ws.CloseNow() })
	return c
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
	c.name = name
	p := c.expect("presence")
	if !containsUser(p, name) {
		t.Fatalf("%s: first presence %v does not list itself", name, p["users"])
	}
	return c
}

func containsUser(presence map[string]any, name string) bool {
	users, _ := presence["users"].([]any)
	for _, u := range users {
		if u == name {
			return true
		}
	}
	return false
}

// users returns a presence frame's list.
func users(presence map[string]any) []string {
	var out []string
	for _, u := range presence["users"].([]any) {
		out = append(out, u.(string))
	}
	return out
}

// discardInBackground reads and discards c's frames until its connection
// ends, as a live client's library does: only a client that reads answers
// WebSocket pings.
func (c *client) discardInBackground() {
	go func() {
		for {
			if _, _, err := c.ws.Read(context.Background()); err != nil {
				return
			}
		}
	}()
}

// sendText writes one text frame.
func (c *client) sendText(s string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
}

// sendJSON marshals v into one text frame.
func (c *client) sendJSON(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendText(string(b))
}

func (c *client) sendBinary(b []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageBinary, b); err != nil {
		c.t.Fatalf("%s: write binary: %v", c.name, err)
	}
}

// read returns the next message.
func (c *client) read() (websocket.MessageType, []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	typ, b, err := c.ws.Read(ctx)
	if err != nil {
		c.t.Fatalf("%s: read: %v", c.name, err)
	}
	return typ, b
}

// readRaw returns the next text frame's bytes.
func (c *client) readRaw() []byte {
	c.t.Helper()
	typ, b := c.read()
	if typ != websocket.MessageText {
		c.t.Fatalf("%s: got a binary frame of %d bytes, want text", c.name, len(b))
	}
	return b
}

// next decodes the next text frame.
func (c *client) next() map[string]any {
	c.t.Helper()
	b := c.readRaw()
	m, err := decodeFrame(b)
	if err != nil {
		c.t.Fatalf("%s: %v", c.name, err)
	}
	return m
}

// decodeFrame decodes a relay frame, which must be one line of JSON.
func decodeFrame(b []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("frame %q is not JSON: %w", b, err)
	}
	return m, nil
}

// expect reads the next text frame and checks its type.
func (c *client) expect(typ string) map[string]any {
	c.t.Helper()
	m := c.next()
	if m["type"] != typ {
		c.t.Fatalf("%s: got %v, want a %s frame", c.name, m, typ)
	}
	return m
}

// expectError reads the next frame and checks it is an error with code.
func (c *client) expectError(code ErrorCode) map[string]any {
	c.t.Helper()
	m := c.expect("error")
	if m["code"] != string(code) {
		c.t.Fatalf("%s: got error %v, want code %s", c.name, m, code)
	}
	return m
}

// expectPresence reads the next frame and checks it is presence with users.
func (c *client) expectPresence(want ...string) {
	c.t.Helper()
	m := c.expect("presence")
	if got := fmt.Sprint(users(m)); got != fmt.Sprint(want) {
		c.t.Fatalf("%s: presence %s, want %v", c.name, got, want)
	}
	if _, ok := m["ts"].(float64); !ok {
		c.t.Fatalf("%s: presence without ts: %v", c.name, m)
	}
}

// expectClose reads until the connection ends and checks that it ended with
// want, code and reason.
func (c *client) expectClose(want Close) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for {
		typ, b, err := c.ws.Read(ctx)
		if err != nil {
			if !endedWith(err, want) {
				c.t.Fatalf("%s: connection ended with %v, want %v", c.name, err, want)
			}
			return
		}
		if typ == websocket.MessageText {
			c.t.Fatalf("%s: got %s before %v", c.name, b, want)
		}
	}
}

// endedWith reports whether err, a read error of a client connection, is the
// close frame of want: its code and its reason.
func endedWith(err error, want Close) bool {
	var ce websocket.CloseError
	return errors.As(err, &ce) && ce.Code == want.Code && ce.Reason == want.Reason
}

// msg is a client msg frame.
func msg(id, from string, to []string, text string) map[string]any {
	return map[string]any{
		"type": "msg", "msgId": id, "from": from, "to": to, "role": "user",
		"threadId": "t1", "text": text, "hopCount": 0, "attachments": []any{},
	}
}
