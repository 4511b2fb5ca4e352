package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connector/internal/clock"
	"connector/platform"
	"connector/platform/fairshare"
)

// discordHost is the host discordgo's endpoint variables point at.
const discordHost = "discord.com"

// maxRateLimitRetries bounds how often one call is retried after 429s.
const maxRateLimitRetries = 8

// transport is the http.RoundTripper under discordgo's REST client. It is
// where the connector takes over what discordgo does badly:
//
//   - the request's context rules every wait (discordgo's limiter sleeps
//     without one), and a request without a deadline gets RequestTimeout;
//   - the global budget is granted by the fair-share scheduler, per tenant;
//   - per-route buckets come from the X-RateLimit-* headers;
//   - a 429 (global or not, with or without Reset-After) pauses the right
//     scope and is retried while the deadline allows;
//   - once a call's turn comes, it is made only while the action's tenant
//     may still act in its chat (platform.StillMayAct);
//   - 401/403/429 answers are charged to the tenant that caused them and
//     to the bot (the invalid-request breaker);
//   - rate-limit headers are removed before discordgo sees them, so its own
//     limiter never sleeps.
//
// It also points discord.com at APIBaseURL and answers GET /gateway with
// GatewayURL when those are configured, else asks it under gatewayCtx.
type transport struct {
	base       http.RoundTripper
	api        *url.URL
	gatewayURL string
	gatewayCtx func() context.Context // the Gateway open's (gateway.openContext)
	sched      *fairshare.Scheduler
	routes     *routeLimiter
	breaker    *breaker
	metrics    platform.Metrics
	log        *slog.Logger
	clock      clock.Clock
	timeout    time.Duration
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != discordHost {
		return t.base.RoundTrip(req)
	}
	r := parseRoute(req.Method, req.URL.Path)
	ctx := req.Context()
	if r.gateway {
		if t.gatewayURL != "" {
			return gatewayAnswer(req, t.gatewayURL), nil
		}
		ctx = t.gatewayCtx() // discordgo's Open asks without a context
	}
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, t.timeout)
	}
	resp, err := t.roundTrip(ctx, req, r)
	if err != nil || resp == nil {
		cancel()
		return resp, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

func (t *transport) roundTrip(ctx context.Context, req *http.Request, r route) (*http.Response, error) {
	tenant := platform.TenantOf(ctx) // whose share of the global budget
	for attempt := 0; ; attempt++ {
		if err := t.breaker.admit(tenant); err != nil {
			return nil, err
		}
		start := t.clock.Now()
		if !r.exemptGlobal {
			if err := t.sched.Wait(ctx, tenant); err != nil {
				return nil, waitError(err)
			}
		}
		if err := t.routes.acquire(ctx, r.key); err != nil {
			return nil, waitError(err)
		}
		if waited := t.clock.Now().Sub(start); waited > time.Millisecond {
			t.metrics.RateLimitWait(platformName, waited)
		}
		if err := platform.StillMayAct(ctx); err != nil {
			return nil, err
		}
		out, err := t.outgoing(ctx, req)
		if err != nil {
			return nil, err
		}
		resp, err := t.base.RoundTrip(out)
		if err != nil {
			return nil, err
		}
		rl := readRateHeaders(resp.Header)
		t.routes.update(r.key, rl)
		switch resp.StatusCode {
		case http.StatusTooManyRequests:
			lim := read429(resp, rl)
			t.metrics.RateLimited(platformName)
			switch {
			case lim.global:
				t.breaker.record("") // the bot's whole traffic caused it
			case lim.scope != "shared":
				t.breaker.record(tenant)
			}
			if lim.global {
				t.sched.Pause(lim.retryAfter)
			} else {
				t.routes.limited(r.key, lim.retryAfter)
			}
			t.log.Debug("discord 429", "route", redactRoute(r.key), "retry_after", lim.retryAfter, "global", lim.global, "attempt", attempt)
			dl, ok := ctx.Deadline() // real time: compare what is left of it
			if attempt >= maxRateLimitRetries || (ok && lim.retryAfter > time.Until(dl)) {
				return nil, &platform.RateLimitedError{Wait: lim.retryAfter}
			}
			continue
		case http.StatusUnauthorized:
			t.breaker.record(tenant)
			if !r.exemptGlobal {
				// An interaction webhook's 401 is about its own token (e.g.
				// expired), not the bot's.
				t.breaker.pause(unauthorizedPause)
				t.log.Error("discord answered 401: the bot token is not valid; REST paused", "pause", unauthorizedPause)
			}
		case http.StatusForbidden:
			t.breaker.record(tenant)
		}
		stripRateHeaders(resp.Header)
		return resp, nil
	}
}

// outgoing clones req for one attempt: a fresh body, ctx, and the API base
// rewritten when configured.
func (t *transport) outgoing(ctx context.Context, req *http.Request) (*http.Request, error) {
	out := req.Clone(ctx)
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		out.Body = body
	}
	if t.api != nil {
		out.URL.Scheme = t.api.Scheme
		out.URL.Host = t.api.Host
		out.URL.Path = strings.TrimSuffix(t.api.Path, "/") + out.URL.Path
		out.URL.RawPath = ""
		out.Host = ""
	}
	return out, nil
}

// waitError turns a failed wait into the error the op reports.
func waitError(err error) error {
	if errors.Is(err, fairshare.ErrQueueFull) {
		return &platform.RateLimitedError{Wait: time.Second}
	}
	return err
}

// rateHeaders are the X-RateLimit-* headers of one answer.
type rateHeaders struct {
	known      bool
	limit      int
	remaining  int
	resetAfter time.Duration
	bucket     string
	global     bool
	scope      string
}

func readRateHeaders(h http.Header) rateHeaders {
	var rl rateHeaders
	rl.bucket = h.Get("X-RateLimit-Bucket")
	rl.global = h.Get("X-RateLimit-Global") != ""
	rl.scope = h.Get("X-RateLimit-Scope")
	rem, err1 := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
	after, err2 := strconv.ParseFloat(h.Get("X-RateLimit-Reset-After"), 64)
	if err1 != nil || err2 != nil || !(after >= 0 && after < maxRetrySeconds) {
		return rl
	}
	rl.known = true
	rl.remaining = rem
	rl.limit, _ = strconv.Atoi(h.Get("X-RateLimit-Limit"))
	rl.resetAfter = seconds(after)
	return rl
}

func stripRateHeaders(h http.Header) {
	maps.DeleteFunc(h, func(k string, _ []string) bool { return strings.HasPrefix(k, "X-Ratelimit-") })
}

// maxRetrySeconds bounds every delay Discord's headers or bodies may ask
// for; a larger (or NaN) value is treated as absent, as a garbled one is.
const maxRetrySeconds = 1e6

// limit429 is what a 429 says about when to retry.
type limit429 struct {
	retryAfter time.Duration
	global     bool
	scope      string
}

// read429 reads (and closes) a 429 body {message, retry_after, global}; the
// body's float seconds win over the Retry-After header, which wins over
// Reset-After; a 429 that says nothing waits one second.
func read429(resp *http.Response, rl rateHeaders) limit429 {
	defer resp.Body.Close()
	lim := limit429{global: rl.global || rl.scope == "global", scope: rl.scope}
	var body struct {
		RetryAfter float64 `json:"retry_after"`
		Global     bool    `json:"global"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(raw, &body) == nil && body.RetryAfter > 0 && body.RetryAfter < maxRetrySeconds {
		lim.retryAfter = seconds(body.RetryAfter)
	}
	lim.global = lim.global || body.Global
	if lim.retryAfter == 0 {
		if s, err := strconv.ParseFloat(resp.Header.Get("Retry-After"), 64); err == nil && s > 0 && s < maxRetrySeconds {
			lim.retryAfter = seconds(s)
		} else if rl.known {
			lim.retryAfter = rl.resetAfter
		}
	}
	if lim.retryAfter <= 0 {
		lim.retryAfter = time.Second
	}
	return lim
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// gatewayAnswer is the synthetic GET /gateway response.
func gatewayAnswer(req *http.Request, gatewayURL string) *http.Response {
	body, _ := json.Marshal(map[string]string{"url": gatewayURL})
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": []string{"application/json"}},
		Body:    io.NopCloser(bytes.NewReader(body)),
		Request: req, ContentLength: int64(len(body)),
	}
}

// cancelBody releases the request's own timeout once the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close closes the body and releases the timeout.
func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// redactRoute is a route key fit for logs (token hashes dropped).
func redactRoute(key string) string {
	f := strings.Fields(key)
	for i, s := range f {
		if strings.HasPrefix(s, "#") {
			f[i] = "{token}"
		}
	}
	return strings.Join(f, " ")
}
