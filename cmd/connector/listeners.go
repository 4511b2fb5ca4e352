package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connector/internal/connlimit"
	"connector/internal/httpjson"
	"connector/platform"
)

// listenAddrs is where a running connector accepts connections.
type listenAddrs struct {
	// Addr is the public listener (/relay, webhooks, nexscope, /healthz).
	Addr string
	// OpsAddr is the operations listener (/metrics, /readyz, /platforms,
	// /healthz).
	OpsAddr string
	// AdminAddr is the admin API's listener; empty when it is off.
	AdminAddr string
}

// publicServer returns the http.Server of the public listener ln, with the
// http section's timeouts and limits, and ln wrapped to bound the
// connections that have not authenticated.
func (c *connector) publicServer(ln net.Listener) (*http.Server, net.Listener, error) {
	h := c.cfg.HTTP
	limited, err := connlimit.New(ln, connlimit.Config{
		Max: h.MaxUnauthenticatedConns, MaxPerSource: h.MaxUnauthenticatedConnsPerSource,
		Log: c.log, Refused: c.metrics.HTTPRefused,
	})
	if err != nil {
		return nil, nil, err
	}
	c.metrics.watchListener(limited)
	return &http.Server{
		Handler:           withBodyDeadline(c.handler, h.BodyTimeout),
		TLSConfig:         c.tls,
		ReadHeaderTimeout: h.ReadHeaderTimeout,
		IdleTimeout:       h.IdleTimeout,
		MaxHeaderBytes:    h.MaxHeaderBytes,
		ConnState:         limited.ConnState,
		ConnContext:       limited.ConnContext,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
	}, limited, nil
}

// opsServer returns the http.Server of the operations listener. Its clients
// are the operator's own tools, so only the timeouts apply.
func (c *connector) opsServer() *http.Server {
	h := c.cfg.HTTP
	return &http.Server{
		Handler:           c.opsHandler,
		ReadHeaderTimeout: h.ReadHeaderTimeout,
		ReadTimeout:       h.BodyTimeout,
		IdleTimeout:       h.IdleTimeout,
		MaxHeaderBytes:    h.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
	}
}

// withBodyDeadline gives every request that is not a WebSocket upgrade d to
// deliver its body, from when its handler starts: a webhook body trickled
// in byte by byte is cut off instead of holding the connection. net/http
// lifts the deadline once the body has been read to its end (it starts
// its background read then), so a handler that goes on longer (a delivery
// waiting for the store) keeps its request's context. WebSocket routes are
// long-lived and bound their own reads; a request without a body has
// nothing to wait for (and a deadline would only cancel its context).
func withBodyDeadline(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != http.NoBody && !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		next.ServeHTTP(w, r)
	})
}

// publicRoutes maps every route of the public listener, ServeMux pattern
// to handler: /relay, /healthz for load balancers, every platform's routes
// and extra (the media, relevance policy, management and credential
// routes). A pattern given twice is an error. TestAuthorizationMatrix reads
// the patterns (connector.publicPatterns): each route must have its rows
// in that test's table.
func publicRoutes(relayHandler http.Handler, platforms []platform.Platform, extra ...map[string]http.Handler) (map[string]http.Handler, error) {
	routes := map[string]http.Handler{"/relay": relayHandler, "GET /healthz": http.HandlerFunc(healthz)}
	for _, p := range platforms {
		if r, ok := p.(platform.Routes); ok {
			extra = append(extra, r.Routes())
		}
	}
	for _, more := range extra {
		for pattern, h := range more {
			if _, dup := routes[pattern]; dup {
				return nil, fmt.Errorf("public listener: route %q registered twice", pattern)
			}
			routes[pattern] = h
		}
	}
	return routes, nil
}

// opsMux serves the operations routes.
func opsMux(metrics http.Handler, draining *atomic.Bool, platforms []platform.Platform) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /readyz", statusHandler(platforms, draining))
	mux.Handle("GET /platforms", statusHandler(platforms, nil))
	mux.Handle("GET /metrics", metrics)
	return mux
}

// healthz answers liveness: the process serves HTTP.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// statusHandler answers /readyz (draining set) or /platforms (draining
// nil) with each platform's status.
//
// /readyz is 200 while the connector can serve gateways (it listens and is
// not shutting down), 503 once it drains. Platform health is reported in
// the body but does not change the status: a gateway still gets nexscope
// and buffered inbound while Discord or Telegram is unreachable, so an
// orchestrator must not pull the instance for it (/platforms and
// connector_platform_ready report it).
//
// /platforms is 200 when every configured platform is connected and
// ready, 503 otherwise; for alerting, not for readiness.
func statusHandler(platforms []platform.Platform, draining *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		status, ready := make(map[string]platform.Status, len(platforms)), true // every platform's, and whether all are ready
		for _, p := range platforms {
			st := p.Status()
			status[p.Name()] = st
			ready = ready && st.Ready
		}
		drain := draining != nil && draining.Load()
		if draining != nil {
			ready = !drain
		}
		code := http.StatusOK
		if !ready {
			code = http.StatusServiceUnavailable
		}
		httpjson.Write(w, code, struct {
			Ready     bool                       `json:"ready"`
			Draining  bool                       `json:"draining,omitempty"`
			Platforms map[string]platform.Status `json:"platforms"`
		}{ready, drain, status})
	})
}
