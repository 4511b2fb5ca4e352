package telegramtest

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"connector/platform"
	"connector/session"
)

// TB is the part of testing.TB the fixture helpers use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// The bot token and webhook secret of the fixture platform.
const (
	Token  = "7012345678:AAH-test_SECRET_part_0123456789abcdef"
	Secret = "wh_Secret-0123456789"
)

// MaxTextRunes is the limit of a message text the fake accepts: 4,096 code
// points after entity parsing, as on Telegram.
const MaxTextRunes = 4096

// Chats of the fixture world used by the op tests.
const (
	ChatAda      = "123456789"      // t1, private
	ChatDevForum = "-1001112223334" // t1, forum supergroup
	ChatT2       = "-1001234567890" // t2
)

// Chats returns the chats of testdata/platform_events.json's Telegram
// cases, claimed by tenants t1 and t2; -1007778889990 is unclaimed.
func Chats() map[string]string {
	return map[string]string{
		"123456789":      "t1", // Ada's DM
		"987654321":      "t1", // Bob's DM
		"555666777":      "t1", // Ñandú's DM
		"-4001234567":    "t1", // Book Club (group)
		"-1001112223334": "t1", // Dev Forum (forum supergroup)
		"-1001234567890": "t2", // Hermes Users (supergroup)
		"-1009876543210": "t2", // Hermes News (channel)
	}
}

// Fixtures returns the Telegram cases of testdata/platform_events.json.
func Fixtures(tb TB) []session.EventCase {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	cases, err := session.LoadEventCases(filepath.Join(filepath.Dir(file), "../../../testdata/platform_events.json"), "telegram")
	if err != nil {
		tb.Fatalf("fixtures: %v", err)
	}
	return cases
}

// Fixture returns the named case of Fixtures.
func Fixture(tb TB, name string) session.EventCase {
	tb.Helper()
	for _, c := range Fixtures(tb) {
		if c.Name == name {
			return c
		}
	}
	tb.Fatalf("no fixture %q", name)
	return session.EventCase{}
}

// WithUpdateID returns the update raw with its update_id set to id.
func WithUpdateID(tb TB, raw []byte, id int64) []byte {
	tb.Helper()
	var u map[string]any
	if err := json.Unmarshal(raw, &u); err != nil {
		tb.Fatalf("update: %v", err)
	}
	u["update_id"] = id
	out, err := json.Marshal(u)
	if err != nil {
		tb.Fatalf("update: %v", err)
	}
	return out
}

// Visible is a recorded call's text as Telegram shows it (MarkdownV2
// parsed); a parse mode other than MarkdownV2, or text that does not parse,
// fails the test.
func Visible(tb TB, c Call) string {
	tb.Helper()
	if c.Form["parse_mode"] == "" {
		return c.Form["text"]
	}
	if c.Form["parse_mode"] != "MarkdownV2" {
		tb.Fatalf("parse_mode %q", c.Form["parse_mode"])
	}
	v, err := ParseMarkdownV2(c.Form["text"])
	if err != nil {
		tb.Fatalf("sent text %q does not parse: %v", c.Form["text"], err)
	}
	return v
}

// LogBuffer is a concurrency-safe log capture.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// StatusWatcher is a platform whose status can be watched without polling:
// the telegram Platform.
type StatusWatcher interface {
	// StatusChanges returns the status and a channel closed at its next change.
	StatusChanges() (platform.Status, <-chan struct{})
}

// WaitStatus waits up to 10 s until p's status satisfies ok, and returns it.
func WaitStatus(tb TB, p StatusWatcher, ok func(platform.Status) bool) platform.Status {
	tb.Helper()
	timeout := time.After(10 * time.Second)
	for {
		st, ch := p.StatusChanges()
		if ok(st) {
			return st
		}
		select {
		case <-ch:
		case <-timeout:
			tb.Fatalf("status stayed %+v", st)
		}
	}
}
