package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestLogDurationsReadAsDurations: a duration logs as "30s" in both
// formats, never as a count of nanoseconds.
func TestLogDurationsReadAsDurations(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var out bytes.Buffer
		log := newLogger(LogConfig{Format: format}, &out)
		log.Info("shutting down", "grace", 30*time.Second)
		log.WithGroup("relay").Info("tuned", "ping_interval", 1500*time.Millisecond)
		want := map[string][]string{
			"json": {`"grace":"30s"`, `"ping_interval":"1.5s"`},
			"text": {"grace=30s", "relay.ping_interval=1.5s"},
		}[format]
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s log does not contain %s:\n%s", format, w, out.String())
			}
		}
	}
}
