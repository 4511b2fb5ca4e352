// Package change is what the HTTP routes that change the registry share
// (package admin, manage and enroll): the outcome label and HTTP status of a
// route's error, the record of every change: applied to this instance
// before the answer, logged and counted; and the rate limit of the changes
// a gateway credential makes (Limiter).
package change

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"connector/platform"
	"connector/registry"
)

// Metrics counts changes.
type Metrics interface {
	// AdminChange counts one change: op names the route, outcome is "ok"
	// or the error class.
	AdminChange(op, outcome string)
}

// Nop is the Metrics of a route built without any: it counts nothing.
type Nop struct{}

// AdminChange implements Metrics.
func (Nop) AdminChange(string, string) {}

// Refusal is a request a route refuses with its own status and outcome
// label; Msg is the answer's error.
type Refusal struct {
	Status  int
	Outcome string
	Msg     string
	// RetryAfter, when set, is the answer's Retry-After (SetRetryAfter).
	RetryAfter time.Duration
}

func (r *Refusal) Error() string { return r.Msg }

// Refuse returns a Refusal whose message is format with args.
func Refuse(status int, outcome, format string, args ...any) *Refusal {
	return &Refusal{Status: status, Outcome: outcome, Msg: fmt.Sprintf(format, args...)}
}

// Invalid is a malformed request: 400, outcome invalid.
func Invalid(format string, args ...any) *Refusal {
	return Refuse(http.StatusBadRequest, "invalid", format, args...)
}

// Decode reads one JSON value from r into v, refusing as Invalid a body
// that is not one, has more after it, or, when strict, has a field v does
// not.
func Decode(r io.Reader, v any, strict bool) error {
	dec := json.NewDecoder(r)
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return Invalid("malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Invalid("malformed JSON body: more than one value")
	}
	return nil
}

// Outcome maps err to its outcome label and HTTP status: a *Refusal its
// own, a registry or platform error its class, anything else error 500.
func Outcome(err error) (string, int) {
	var r *Refusal
	switch {
	case err == nil:
		return "ok", http.StatusOK
	case errors.As(err, &r):
		return r.Outcome, r.Status
	case errors.Is(err, registry.ErrInvalid):
		return "invalid", http.StatusBadRequest
	case errors.Is(err, registry.ErrNotFound):
		return "not_found", http.StatusNotFound
	case errors.Is(err, registry.ErrExists):
		return "exists", http.StatusConflict
	case errors.Is(err, registry.ErrDeclared):
		return "declared", http.StatusConflict
	case errors.Is(err, registry.ErrConflict):
		return "conflict", http.StatusConflict
	case errors.Is(err, registry.ErrLimit):
		return "limit", http.StatusTooManyRequests
	case errors.Is(err, platform.ErrUnavailable):
		return "unavailable", http.StatusServiceUnavailable
	}
	return "error", http.StatusInternalServerError
}

// Internal is the answer's error of a route's error that Outcome classes
// error 500 (a store that failed): its text, which can name an internal
// address such as a Redis host's, is logged (Recorder.Record), never
// answered.
const Internal = "internal"

// Message is the answer's error for err: Internal when Outcome classes it
// error, else its text.
func Message(err error) string {
	if outcome, _ := Outcome(err); outcome == "error" {
		return Internal
	}
	return err.Error()
}

// Recorder records the changes of one API; every field is required.
type Recorder struct {
	// Apply applies the registry to this instance.
	Apply func(ctx context.Context) error
	// Log receives one line per change, with message Line.
	Log  *slog.Logger
	Line string
	// Metrics counts changes.
	Metrics Metrics
}

// Record records change op: when outcome is ok it applies the registry to
// this instance first (a failure is logged: the change is stored, and every
// instance applies it on its next look); then it counts the outcome and
// logs it with args (what changed and who asked, never a secret) and err,
// when set.
func (c Recorder) Record(ctx context.Context, op, outcome string, err error, args ...any) {
	if outcome == "ok" {
		if aerr := c.Apply(ctx); aerr != nil {
			c.Log.Warn("change stored but not applied here yet", "op", op, "err", aerr)
		}
	}
	c.Metrics.AdminChange(op, outcome)
	args = append([]any{"op", op, "outcome", outcome}, args...)
	if err != nil {
		args = append(args, "err", err)
	}
	c.Log.Info(c.Line, args...)
}
