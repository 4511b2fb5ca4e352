package loglimit

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
)

// lines is a text logger that keeps what it writes.
type lines struct{ buf bytes.Buffer }

func (l *lines) logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(&l.buf, &slog.HandlerOptions{Level: level}))
}

// take returns the lines written since the last take.
func (l *lines) take() []string {
	s := strings.TrimSuffix(l.buf.String(), "\n")
	l.buf.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestBucketLetsABurstThroughThenOnePerInterval(t *testing.T) {
	clk := clocktest.New(time.Unix(1767225600, 0))
	var out lines
	log := out.logger(slog.LevelInfo)
	b := NewBucket(Rate{Burst: 3, Every: time.Minute}, clk)

	for range 10 {
		b.Log(log, slog.LevelWarn, "bad frame", "n", 1)
	}
	if got := out.take(); len(got) != 3 || strings.Contains(strings.Join(got, ""), SuppressedKey) {
		t.Fatalf("a burst of 10 wrote %q, want the first 3 lines, none reporting suppressed ones", got)
	}

	clk.Advance(59 * time.Second)
	b.Log(log, slog.LevelWarn, "bad frame")
	if got := out.take(); len(got) != 0 {
		t.Fatalf("before the interval passed, wrote %q", got)
	}
	clk.Advance(time.Second)
	b.Log(log, slog.LevelWarn, "bad frame")
	b.Log(log, slog.LevelWarn, "bad frame")
	if got := out.take(); len(got) != 1 || !strings.HasSuffix(got[0], " suppressed=8") {
		t.Fatalf("after one interval wrote %q, want one line reporting the 8 held back", got)
	}

	// Tokens saved up never exceed the burst.
	clk.Advance(time.Hour)
	for range 10 {
		b.Log(log, slog.LevelWarn, "bad frame")
	}
	if got := out.take(); len(got) != 3 || !strings.HasSuffix(got[0], " suppressed=1") {
		t.Fatalf("after an hour, 10 lines wrote %q, want 3, the first reporting 1 held back", got)
	}
	if n := b.TakeSuppressed(); n != 7 {
		t.Fatalf("TakeSuppressed = %d, want 7", n)
	}
	if n := b.TakeSuppressed(); n != 0 {
		t.Fatalf("TakeSuppressed again = %d, want 0", n)
	}
}

func TestBucketIgnoresLinesTheLoggerWouldDrop(t *testing.T) {
	clk := clocktest.New(time.Unix(1767225600, 0))
	var out lines
	log := out.logger(slog.LevelInfo)
	b := NewBucket(Rate{Burst: 2, Every: time.Minute}, clk)
	for range 100 {
		b.Log(log, slog.LevelDebug, "noise")
	}
	b.Log(log, slog.LevelInfo, "one")
	b.Log(log, slog.LevelInfo, "two")
	if got := out.take(); len(got) != 2 || strings.Contains(got[0], SuppressedKey) {
		t.Fatalf("debug lines took tokens or counted as suppressed: %q", got)
	}
}

func TestLimiterBoundsEachKeyAndAllKeys(t *testing.T) {
	clk := clocktest.New(time.Unix(1767225600, 0))
	var out lines
	log := out.logger(slog.LevelInfo)
	l := NewLimiter(Rate{Burst: 2, Every: time.Minute}, Rate{Burst: 3, Every: 10 * time.Second}, 2, clk)

	for range 5 {
		l.Log(log, slog.LevelInfo, "a", "refused", "remote", "a")
	}
	for range 5 {
		l.Log(log, slog.LevelInfo, "b", "refused", "remote", "b")
	}
	if got := out.take(); len(got) != 3 || strings.Count(strings.Join(got, "\n"), "remote=a") != 2 {
		t.Fatalf("wrote %q, want a's 2 lines and 1 of b's (3 overall)", got)
	}

	// After a minute both have tokens again and report what they held back.
	clk.Advance(time.Minute)
	l.Log(log, slog.LevelInfo, "a", "refused", "remote", "a")
	l.Log(log, slog.LevelInfo, "b", "refused", "remote", "b")
	got := out.take()
	if len(got) != 2 || !strings.HasSuffix(got[0], "remote=a suppressed=3") || !strings.HasSuffix(got[1], "remote=b suppressed=4") {
		t.Fatalf("wrote %q, want a reporting 3 held back and b 4", got)
	}

	// Only 2 keys are remembered: c pushes out a, which starts afresh.
	l.Log(log, slog.LevelInfo, "c", "refused", "remote", "c")
	clk.Advance(time.Minute)
	l.Log(log, slog.LevelInfo, "a", "refused", "remote", "a")
	l.Log(log, slog.LevelInfo, "a", "refused", "remote", "a")
	l.Log(log, slog.LevelInfo, "a", "refused", "remote", "a")
	if got := out.take(); len(got) != 3 || strings.Count(strings.Join(got, "\n"), "remote=a") != 2 {
		t.Fatalf("wrote %q, want c's line and 2 of a's", got)
	}
}

// TestSourcesShareOneAllowancePerSource: LogFrom keys by the remote's
// source (netsource.Of), so a host changing its port or its address within
// its IPv6 /64 keeps one allowance. Before, each address had its own: 20
// addresses of one /64 wrote 20 lines.
func TestSourcesShareOneAllowancePerSource(t *testing.T) {
	var out lines
	log := out.logger(slog.LevelInfo)
	l := NewSources(clocktest.New(time.Unix(1767225600, 0)))
	for i := range 20 {
		l.LogFrom(log, slog.LevelInfo, fmt.Sprintf("[2001:db8:1:2::%x]:%d", i+1, 40000+i), "refused")
	}
	if got := out.take(); len(got) != 10 {
		t.Fatalf("20 addresses of one /64 wrote %d lines, want 10", len(got))
	}
}
