// Package nexscopetest is a nexscope member for tests: a WebSocket client of
// the relay protocol v1 as a nexscope plugin holds it (frames, presence,
// file transfers), the shared room token, the fake clock and the waits the
// platform's tests and the integration tests share.
package nexscopetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"

	"connector/internal/clock/clocktest"
)

// Timeout bounds every wait of a Member; hitting it fails the test.
const Timeout = 20 * time.Second

// Token is the shared room token of the tests.
const Token = "s3cret-shared-token-for-tests"

// TB is the part of testing.TB a Member uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// NewClock returns the fake clock of the tests: timers fire only when the
// test advances it.
func NewClock() *clocktest.Fake {
	return clocktest.New(time.Date(2026, 4, 28, 12, 0, 0, 0, time.UTC))
}

// SyncBuffer collects log output from many goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Member is a member's WebSocket, as a nexscope plugin would hold it. Its
// methods fail the test (T) on an error or after Timeout.
type Member struct {
	T    TB
	WS   *websocket.Conn
	Name string
}

// Dial opens a member WebSocket to url (ws://...), closed when the test
// ends; it does not read.
func Dial(tb TB, url string, opts *websocket.DialOptions) *Member {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	ws.SetReadLimit(-1)
	tb.Cleanup(func() { _ = ws.CloseNow() })
	return &Member{T: tb, WS: ws}
}

// ContainsUser reports whether a presence frame lists name.
func ContainsUser(presence map[string]any, name string) bool {
	users, _ := presence["users"].([]any)
	for _, u := range users {
		if u == name {
			return true
		}
	}
	return false
}

// Users returns a presence frame's list.
func Users(presence map[string]any) []string {
	var out []string
	for _, u := range presence["users"].([]any) {
		out = append(out, u.(string))
	}
	return out
}

// DecodeFrame decodes a relay frame, which must be one line of JSON.
func DecodeFrame(b []byte) (map[string]any, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("frame %q is not JSON: %w", b, err)
	}
	return m, nil
}

// DiscardInBackground reads and discards c's frames until its connection
// ends, as a live client's library does: only a client that reads answers
// WebSocket pings.
func (c *Member) DiscardInBackground() {
	go func() {
		for {
			if _, _, err := c.WS.Read(context.Background()); err != nil {
				return
			}
		}
	}()
}

// SendText writes one text frame.
func (c *Member) SendText(s string) {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := c.WS.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		c.T.Fatalf("%s: write: %v", c.Name, err)
	}
}

// SendJSON marshals v into one text frame.
func (c *Member) SendJSON(v any) {
	c.T.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.T.Fatalf("%s: %v", c.Name, err)
	}
	c.SendText(string(b))
}

// SendBinary writes one binary frame.
func (c *Member) SendBinary(b []byte) {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := c.WS.Write(ctx, websocket.MessageBinary, b); err != nil {
		c.T.Fatalf("%s: write binary: %v", c.Name, err)
	}
}

// Read returns the next message.
func (c *Member) Read() (websocket.MessageType, []byte) {
	c.T.Helper()
	return c.read("the next frame")
}

// read returns the next message; what names it in a failure.
func (c *Member) read(what string) (websocket.MessageType, []byte) {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	typ, b, err := c.WS.Read(ctx)
	if err != nil {
		c.T.Fatalf("%s: waiting up to %v for %s: read: %v", c.Name, Timeout, what, err)
	}
	return typ, b
}

// ReadRaw returns the next text frame's bytes.
func (c *Member) ReadRaw() []byte {
	c.T.Helper()
	return c.readRaw("the next text frame")
}

func (c *Member) readRaw(what string) []byte {
	c.T.Helper()
	typ, b := c.read(what)
	if typ != websocket.MessageText {
		c.T.Fatalf("%s: got a binary frame of %d bytes, want %s", c.Name, len(b), what)
	}
	return b
}

// Next decodes the next text frame.
func (c *Member) Next() map[string]any {
	c.T.Helper()
	return c.next("the next text frame")
}

func (c *Member) next(what string) map[string]any {
	c.T.Helper()
	b := c.readRaw(what)
	m, err := DecodeFrame(b)
	if err != nil {
		c.T.Fatalf("%s: %v", c.Name, err)
	}
	return m
}

// Expect reads the next text frame and checks its type.
func (c *Member) Expect(typ string) map[string]any {
	c.T.Helper()
	m := c.next(`a frame of type "` + typ + `"`)
	if m["type"] != typ {
		c.T.Fatalf("%s: got %v, want a %s frame", c.Name, m, typ)
	}
	return m
}

// ExpectPresence reads the next frame and checks it is presence with users.
func (c *Member) ExpectPresence(want ...string) {
	c.T.Helper()
	m := c.Expect("presence")
	if got := fmt.Sprint(Users(m)); got != fmt.Sprint(want) {
		c.T.Fatalf("%s: presence %s, want %v", c.Name, got, want)
	}
	if _, ok := m["ts"].(float64); !ok {
		c.T.Fatalf("%s: presence without ts: %v", c.Name, m)
	}
}
