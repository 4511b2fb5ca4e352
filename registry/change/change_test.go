package change

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"connector/platform"
	"connector/registry"
)

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		err     error
		outcome string
		status  int
	}{
		{nil, "ok", http.StatusOK},
		{Invalid("bad %s", "body"), "invalid", http.StatusBadRequest},
		{fmt.Errorf("wrapped: %w", Refuse(http.StatusForbidden, "forbidden", "no")), "forbidden", http.StatusForbidden},
		{fmt.Errorf("%w: x", registry.ErrInvalid), "invalid", http.StatusBadRequest},
		{registry.ErrNotFound, "not_found", http.StatusNotFound},
		{registry.ErrExists, "exists", http.StatusConflict},
		{registry.ErrDeclared, "declared", http.StatusConflict},
		{registry.ErrConflict, "conflict", http.StatusConflict},
		{registry.ErrLimit, "limit", http.StatusTooManyRequests},
		{errors.Join(errors.New("timeout"), platform.ErrUnavailable), "unavailable", http.StatusServiceUnavailable},
		{errors.New("disk full"), "error", http.StatusInternalServerError},
	} {
		if outcome, status := Outcome(tc.err); outcome != tc.outcome || status != tc.status {
			t.Errorf("Outcome(%v) = %s %d, want %s %d", tc.err, outcome, status, tc.outcome, tc.status)
		}
	}
	if got := Invalid("ttl %q", "x").Error(); got != `ttl "x"` {
		t.Errorf("Invalid's message = %q", got)
	}
}

type counts map[string]int

func (c counts) AdminChange(op, outcome string) { c[op+" "+outcome]++ }

func TestRecordAppliesOnlyWhatSucceeded(t *testing.T) {
	var logs bytes.Buffer
	applied, m := 0, counts{}
	rec := Recorder{
		Apply:   func(context.Context) error { applied++; return errors.New("relay busy") },
		Log:     slog.New(slog.NewJSONHandler(&logs, nil)),
		Line:    "test change",
		Metrics: m,
	}
	rec.Record(context.Background(), "bind", "ok", nil, "tenant", "acme")
	rec.Record(context.Background(), "bind", "conflict", registry.ErrConflict, "tenant", "acme")
	if applied != 1 || m["bind ok"] != 1 || m["bind conflict"] != 1 {
		t.Fatalf("applied %d times, counted %v; want 1 apply, one ok and one conflict", applied, m)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d log lines, want the failed apply and two changes:\n%s", len(lines), logs.String())
	}
	for i, want := range []string{`"op":"bind","err":"relay busy"`, `"msg":"test change","op":"bind","outcome":"ok","tenant":"acme"}`,
		`"outcome":"conflict","tenant":"acme","err":"registry: bound to another tenant"}`} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("log line %d = %s, want it to hold %s", i, lines[i], want)
		}
	}
}
