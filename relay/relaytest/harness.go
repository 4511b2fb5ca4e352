package relaytest

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/contract"
	"connector/descriptor"
	"connector/platform"
	"connector/relay"
)

// Timeout bounds every wait of a Gateway; a test that hits it fails.
const Timeout = 10 * time.Second

// Harness is a relay.Server serving /relay and its platforms' routes on a
// loopback httptest server, with the platforms' ingest running.
type Harness struct {
	// URL is the server's http:// base URL; the relay is at URL+"/relay" and
	// platform routes at their patterns (URL+"/telegram/webhook", ...).
	URL    string
	Server *relay.Server
}

// Start runs a relay for tenants and platforms until the test ends. Each
// platform's Run is started with the relay's sink, and its Routes (if any)
// are mounted next to /relay. Logs go to t.Log.
func Start(t testing.TB, tenants []relay.Tenant, platforms ...platform.Platform) *Harness {
	t.Helper()
	return StartConfig(t, relay.Config{Tenants: tenants, Platforms: platforms, Log: TestLogger(t)})
}

// StartConfig is Start with a full relay.Config.
func StartConfig(t testing.TB, cfg relay.Config) *Harness {
	t.Helper()
	return StartWith(t, cfg, Options{})
}

// Options are what StartWith adds to StartConfig.
type Options struct {
	// Listener, when set, is where the harness serves (so a test can know
	// the URL before building platforms, e.g. a media store's PublicURL).
	Listener net.Listener
	// Routes, when set, returns more routes to mount next to /relay, built
	// with the relay server (e.g. the media routes, which authenticate
	// with it).
	Routes func(*relay.Server) map[string]http.Handler
}

// StartWith is StartConfig with Options.
func StartWith(t testing.TB, cfg relay.Config, opts Options) *Harness {
	t.Helper()
	srv, err := relay.New(cfg)
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/relay", srv)
	for _, p := range cfg.Platforms {
		if r, ok := p.(platform.Routes); ok {
			for pattern, h := range r.Routes() {
				mux.Handle(pattern, h)
			}
		}
	}
	if opts.Routes != nil {
		for pattern, h := range opts.Routes(srv) {
			mux.Handle(pattern, h)
		}
	}
	ts := httptest.NewUnstartedServer(mux)
	if opts.Listener != nil {
		ts.Listener.Close()
		ts.Listener = opts.Listener
	}
	ts.Start()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, p := range cfg.Platforms {
		wg.Go(func() {
			if err := p.Run(ctx, srv); err != nil {
				t.Logf("platform %s stopped: %v", p.Name(), err)
			}
		})
	}
	t.Cleanup(func() {
		cancel()
		stopped := make(chan struct{})
		go func() { wg.Wait(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(Timeout):
			t.Errorf("timed out after %v waiting for the platforms' Run to return after cancel", Timeout)
		}
		sctx, scancel := context.WithTimeout(context.Background(), Timeout)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("relay shutdown: %v", err)
		}
		ts.Close()
	})
	return &Harness{URL: ts.URL, Server: srv}
}

// RelayURL is the ws:// address gateways dial.
func (h *Harness) RelayURL() string { return "ws" + strings.TrimPrefix(h.URL, "http") + "/relay" }

// Dial connects as gatewayID with a fresh token signed by secret.
func (h *Harness) Dial(t testing.TB, gatewayID, secret string) *Gateway {
	t.Helper()
	return h.DialToken(t, Token(gatewayID, secret, time.Now()))
}

// DialToken connects with an explicit bearer token ("" sends none).
func (h *Harness) DialToken(t testing.TB, token string) *Gateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	c, err := Dial(ctx, h.RelayURL(), token)
	if err != nil {
		t.Fatalf("dial relay: %v", err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return &Gateway{Client: c}
}

// Gateway is a Client whose calls fail the test instead of returning errors,
// each bounded by Timeout.
type Gateway struct {
	*Client
}

func (g *Gateway) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), Timeout)
}

// Send writes one frame, Python-formatted.
func (g *Gateway) Send(t testing.TB, frame any) {
	t.Helper()
	ctx, cancel := g.ctx()
	defer cancel()
	if err := g.Client.Send(ctx, frame); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// SendRaw writes msg as one text message.
func (g *Gateway) SendRaw(t testing.TB, msg string) {
	t.Helper()
	ctx, cancel := g.ctx()
	defer cancel()
	if err := g.Client.SendRaw(ctx, []byte(msg)); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// Next returns the next frame of one of types (any when none given).
func (g *Gateway) Next(t testing.TB, types ...string) Frame {
	t.Helper()
	ctx, cancel := g.ctx()
	defer cancel()
	f, err := g.Client.Next(ctx, types...)
	if err != nil {
		t.Fatalf("next frame: %v", err)
	}
	return f
}

// Hello sends hello and returns the answering descriptor.
func (g *Gateway) Hello(t testing.TB, platform, botID string) descriptor.Descriptor {
	t.Helper()
	ctx, cancel := g.ctx()
	defer cancel()
	d, err := g.Client.Hello(ctx, platform, botID)
	if err != nil {
		t.Fatalf("hello %s: %v", platform, err)
	}
	return d
}

// NextInbound returns the next inbound event and its bufferId.
func (g *Gateway) NextInbound(t testing.TB) (contract.Event, string) {
	t.Helper()
	f := g.Next(t, contract.TypeInbound)
	return f.Event, f.BufferID
}

// NextInboundWithin is NextInbound waiting up to d instead of Timeout, for
// an inbound that follows a transfer of many MiB (the race detector on a
// loaded machine slows one past Timeout).
func (g *Gateway) NextInboundWithin(t testing.TB, d time.Duration) (contract.Event, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	f, err := g.Client.Next(ctx, contract.TypeInbound)
	if err != nil {
		t.Fatalf("next inbound, waiting up to %v: %v", d, err)
	}
	return f.Event, f.BufferID
}

// Outbound sends an action (tagged with platform unless "") and returns its result.
func (g *Gateway) Outbound(t testing.TB, platform string, action map[string]any) contract.Result {
	t.Helper()
	ctx, cancel := g.ctx()
	defer cancel()
	r, err := g.Client.Outbound(ctx, platform, action)
	if err != nil {
		t.Fatalf("outbound %v: %v", action["op"], err)
	}
	return r
}

// Ack acknowledges a buffered inbound.
func (g *Gateway) Ack(t testing.TB, bufferID string) {
	t.Helper()
	ctx, cancel := g.ctx()
	defer cancel()
	if err := g.Client.Ack(ctx, bufferID); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

// Closed waits for the connector to close the connection and returns the
// close code and reason (-1 when it closed without a close frame).
func (g *Gateway) Closed(t testing.TB) (int, string) {
	t.Helper()
	ctx, cancel := g.ctx()
	defer cancel()
	code, reason, err := g.Client.Closed(ctx)
	if err != nil {
		t.Fatalf("waiting for close: %v", err)
	}
	return int(code), reason
}

// TestLogger returns a slog.Logger writing to t.Log at debug level.
func TestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
