package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRefusedBearerFloodLogsBoundedLines: requests with a bad bearer on
// the public listener's HTTP routes (POST /relay/policy, /manage/*,
// /relay/enroll), as anyone on the internet can send, are each answered,
// but their log lines share one allowance per remote host
// (loglimit.NewSources: 10 at once). Before, every one logged a line.
func TestRefusedBearerFloodLogsBoundedLines(t *testing.T) {
	cfg, _, err := loadOrDefault(sources{dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	c, err := build(cfg, slog.New(slog.NewJSONHandler(&logs, nil)), memStore(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.relay.Shutdown(context.Background())
		c.media.Close()
	})
	from := logs.Len()
	for i := range 300 {
		path := []string{"/relay/policy", "/manage/link", "/relay/enroll"}[i%3]
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{}`))
		req.Header.Set("Authorization", "Bearer not-a-token")
		w := httptest.NewRecorder()
		c.handler.ServeHTTP(w, req)
		if w.Code != http.StatusUnauthorized && w.Code != http.StatusNotFound { // enroll: not configured
			t.Fatalf("POST %s with a bad bearer answered %d", path, w.Code)
		}
	}
	lines := strings.Count(logs.String()[from:], "\n")
	if lines < 1 || lines > 10 {
		t.Fatalf("300 refused requests from one host logged %d lines, want 1 to 10:\n%s", lines, logs.String()[from:])
	}
}
