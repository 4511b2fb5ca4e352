package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"connector/platform"
	"connector/relay"
	"connector/vault"
)

// serveCmd runs the connector until SIGINT or SIGTERM.
func serveCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML config file (default: embedded defaults)")
	listen := fs.String("listen", "", "listen address, overriding the config file")
	check := fs.Bool("check", false, "validate the config and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "connector serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, generated, err := loadOrDefault(*configPath, os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "connector: %v\n", err)
		return 1
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *check {
		if _, err := buildPlatforms(cfg, platform.Deps{Log: slog.New(slog.DiscardHandler)}); err != nil {
			fmt.Fprintf(stderr, "connector: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, "config ok")
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := newLogger(cfg.Log, stderr)
	if err := serve(ctx, cfg, generated, log, stdout, nil); err != nil {
		log.Error("connector stopped", "err", err)
		return 1
	}
	return 0
}

// generatedSecrets are the credentials the embedded defaults make up at
// start; they are printed once to stdout so a local gateway can connect.
type generatedSecrets struct {
	GatewayID, GatewaySecret string
	NexscopeToken            string
}

// loadOrDefault reads the config file, or builds the embedded defaults when
// path is empty, then applies the environment and validates.
func loadOrDefault(path string, lookup func(string) (string, bool)) (*Config, *generatedSecrets, error) {
	var cfg *Config
	var gen *generatedSecrets
	if path == "" {
		gen = &generatedSecrets{GatewayID: "local", GatewaySecret: randomSecret(), NexscopeToken: randomSecret()}
		cfg = &Config{Tenants: []TenantConfig{{
			ID:       "local",
			Gateways: []GatewayConfig{{ID: gen.GatewayID, Secrets: []string{gen.GatewaySecret}}},
		}}}
	} else {
		var err error
		if cfg, err = LoadConfig(path); err != nil {
			return nil, nil, err
		}
	}
	cfg.ApplyEnv(lookup)
	if err := applyPlatformEnv(cfg, gen, lookup); err != nil {
		return nil, nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	return cfg, gen, nil
}

func randomSecret() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newLogger returns the slog logger log configures: text on a terminal,
// JSON otherwise, unless the format is set.
func newLogger(c LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(orDefault(c.Level, "info")))
	opts := &slog.HandlerOptions{Level: level}
	format := orDefault(c.Format, "auto")
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// serve runs the connector until ctx is cancelled, then shuts down
// gracefully. ready, if not nil, receives the listener's address once it
// accepts connections.
func serve(ctx context.Context, cfg *Config, gen *generatedSecrets, log *slog.Logger, stdout io.Writer, ready func(addr string)) error {
	tenants := cfg.RelayTenants()
	m := newMetrics()
	deps := platform.Deps{
		Log:     log,
		Vault:   vault.NewMemory(vault.Config{}),
		Key:     relay.KeyFunc(tenants),
		Metrics: m,
	}
	platforms, err := buildPlatforms(cfg, deps)
	if err != nil {
		return err
	}
	m.watchVault(deps.Vault)
	m.watchPlatforms(platforms)
	srv, err := relay.New(relay.Config{
		Tenants: tenants, Platforms: platforms, Log: log, Metrics: m,
		ClockSkew: cfg.Relay.ClockSkew, PingInterval: cfg.Relay.PingInterval,
		WriteTimeout: cfg.Relay.WriteTimeout, OutboundTimeout: cfg.Relay.OutboundTimeout,
		SendQueueBytes: cfg.Relay.SendQueueBytes, AckWindow: cfg.Relay.AckWindow,
		BufferEntries: cfg.Relay.BufferEntries, BufferBytes: int64(cfg.Relay.BufferBytes),
		MaxConnsPerGateway: cfg.Relay.MaxConnsPerGateway,
	})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/relay", srv)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /readyz", readyHandler(platforms))
	mux.Handle("GET /metrics", m.handler())
	for _, p := range platforms {
		if r, ok := p.(platform.Routes); ok {
			for pattern, h := range r.Routes() {
				mux.Handle(pattern, h)
			}
		}
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	httpSrv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	tlsOn := cfg.TLS.CertFile != ""
	serveErr := make(chan error, 1)
	go func() {
		var err error
		if tlsOn {
			err = httpSrv.ServeTLS(ln, cfg.TLS.CertFile, cfg.TLS.KeyFile)
		} else {
			err = httpSrv.Serve(ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		serveErr <- err
	}()

	ingestCtx, stopIngest := context.WithCancel(context.Background())
	var ingest sync.WaitGroup
	for _, p := range platforms {
		ingest.Go(func() {
			err := p.Run(ingestCtx, srv.Sink())
			if err != nil && ingestCtx.Err() == nil {
				log.Error("platform ingest stopped", "platform", p.Name(), "err", err)
				return
			}
			log.Debug("platform ingest stopped", "platform", p.Name())
		})
	}

	addr := ln.Addr().String()
	printBanner(stdout, addr, tlsOn, cfg, gen, platforms)
	log.Info("connector listening", "addr", addr, "tls", tlsOn, "platforms", len(platforms), "tenants", len(tenants))
	if ready != nil {
		ready(addr)
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		stopIngest()
		ingest.Wait()
		return err
	}

	// Shutdown: stop ingest (undelivered platform events stay with the
	// platform), stop accepting, answer in-flight outbound, close gateways
	// with 1001 so they reconnect elsewhere.
	grace := cfg.ShutdownGrace
	if grace == 0 {
		grace = 30 * time.Second
	}
	log.Info("shutting down", "grace", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	stopIngest()
	ingest.Wait()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := httpSrv.Shutdown(sctx); err != nil {
			log.Warn("http shutdown", "err", err)
		}
	})
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("relay shutdown incomplete", "err", err)
	}
	wg.Wait()
	log.Info("connector stopped")
	return <-serveErr
}

// readyHandler answers /readyz: 200 when every configured platform is ready,
// 503 otherwise, with each platform's status as JSON.
func readyHandler(platforms []platform.Platform) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		status := make(map[string]platform.Status, len(platforms))
		ready := true
		for _, p := range platforms {
			st := p.Status()
			status[p.Name()] = st
			ready = ready && st.Ready
		}
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(struct {
			Ready     bool                       `json:"ready"`
			Platforms map[string]platform.Status `json:"platforms"`
		}{ready, status})
	})
}

// printBanner tells the operator, in a few lines, what listens and how a
// gateway (or a nexscope client) connects.
func printBanner(w io.Writer, addr string, tlsOn bool, cfg *Config, gen *generatedSecrets, platforms []platform.Platform) {
	scheme, wsScheme := "http", "ws"
	if tlsOn {
		scheme, wsScheme = "https", "wss"
	}
	base := scheme + "://" + addr
	fmt.Fprintf(w, "connector %s listening on %s (relay at %s://%s/relay)\n", version(), base, wsScheme, addr)
	names := ""
	for i, p := range platforms {
		if i > 0 {
			names += ", "
		}
		names += p.Name()
	}
	if names == "" {
		names = "none (set DISCORD_BOT_TOKEN, TELEGRAM_BOT_TOKEN or NEXSCOPE_TOKEN)"
	}
	fmt.Fprintf(w, "  platforms: %s; tenants: %d\n", names, len(cfg.Tenants))
	if gen != nil {
		fmt.Fprintf(w, "  gateway:   GATEWAY_RELAY_URL=%s GATEWAY_RELAY_ID=%s GATEWAY_RELAY_SECRET=%s\n",
			base, gen.GatewayID, gen.GatewaySecret)
		if cfg.Nexscope != nil {
			fmt.Fprintf(w, "  nexscope:  %s://%s/ws?name=<you>&token=%s&v=1\n", wsScheme, addr, gen.NexscopeToken)
		}
	}
	fmt.Fprintf(w, "  health:    %s/healthz  %s/readyz  %s/metrics\n", base, base, base)
}
