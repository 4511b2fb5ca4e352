package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"connector/admin"
	"connector/contract"
	"connector/enroll"
	"connector/internal/clock"
	"connector/internal/cluster"
	"connector/internal/loglimit"
	"connector/media"
	"connector/platform"
	"connector/platform/nexscope"
	"connector/registry"
	"connector/registry/change"
	"connector/relay"
	"connector/store"
	"connector/vault"
	"connector/wake"
)

// serveCmd runs the connector until SIGINT or SIGTERM.
func serveCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", "connector [serve] [-config FILE] [-listen ADDR] [-data-dir DIR] [-check]",
		"Runs the connector until SIGINT or SIGTERM (a second signal exits at once). Without -config it\n"+
			"runs on embedded defaults and prints how a local gateway connects.")
	configFlag := fs.String("config", "", "YAML config file (default: $"+envConfigPath+", else ./connector.yaml or /etc/connector/connector.yaml if one exists, else embedded defaults)")
	listen := fs.String("listen", "", "listen address, overriding the config file")
	dataDirFlag := fs.String("data-dir", "", "the data directory: the embedded store, and the secrets embedded defaults generate (default: $"+envDataDir+", store.path, $XDG_STATE_HOME/connector or ~/.local/state/connector)")
	check := fs.Bool("check", false, "validate the config and exit")
	if code := parseFlagsOnly(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	// SIGHUP is caught from here on: while the connector starts (the store
	// may take storeOpenTimeout to open) its default action would end the
	// process, and the file read before it may be older than the signal.
	hangups := make(chan os.Signal, 1)
	signal.Notify(hangups, syscall.SIGHUP)
	defer signal.Stop(hangups)
	path := configPath(*configFlag, defaultConfigSearch, os.LookupEnv)
	cfg, generated, err := loadOrDefault(sources{configPath: path, listen: *listen, dataDir: *dataDirFlag}, os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "connector: %v\n", err)
		return 1
	}
	log := newLogger(cfg.Log, stderr)
	store.LogRedisClient(log)
	logDeprecations(log, cfg.deprecations)
	warnStrayEnv(log, os.Environ())
	if path != "" {
		log.Info("config loaded", "file", path)
	} else {
		log.Info("no config file: running on embedded defaults", "searched", strings.Join(defaultConfigSearch, ", "))
	}
	if *check {
		return checkConfig(cfg, log, stdout, stderr)
	}
	ctx, stop := shutdownSignals(log)
	defer stop()
	reload := &reloader{hangups: hangups, read: func() (*Config, error) {
		cfg, _, err := loadOrDefault(sources{configPath: path, listen: *listen, dataDir: *dataDirFlag}, os.LookupEnv)
		return cfg, err
	}}
	if err := serveReloading(ctx, cfg, generated, log, stdout, nil, reload); err != nil {
		if ctx.Err() != nil { // SIGINT or SIGTERM while it started: stopping is what was asked
			log.Info("connector stopped before it finished starting", "err", err)
			return 0
		}
		log.Error("connector stopped", "err", err)
		return 1
	}
	return 0
}

// checkConfig is serve -check: it checks that the data and media
// directories can be created (creatable: nothing is left behind), builds
// everything serve builds, without listening (nor opening a media store in
// the directory a running connector may use), and says "config ok".
func checkConfig(cfg *Config, log *slog.Logger, stdout, stderr io.Writer) int {
	for _, d := range []struct{ key, dir string }{{"store.path", cfg.Store.Path}, {"media.dir", cfg.Media.Dir}} {
		if d.dir == "" || (d.key == "store.path" && cfg.Store.Backend == store.BackendRedis) { // redis: no data file
			continue
		}
		if err := creatable(d.dir); err != nil {
			fmt.Fprintf(stderr, "connector: %s: %s cannot be created or written: %v\n", d.key, d.dir, err)
			return 1
		}
	}
	st := store.NewMemory(nil)
	defer st.Close()
	tmp, err := os.MkdirTemp("", "connector-check-media-")
	if err != nil {
		fmt.Fprintf(stderr, "connector: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	cfg.Media.Dir = tmp
	c, err := build(cfg, log, st)
	if err != nil {
		fmt.Fprintf(stderr, "connector: %v\n", err)
		return 1
	}
	// Stop what build started (the relay's store writer, the cluster
	// node), so nothing logs after -check has answered.
	_ = c.relay.Shutdown(context.Background())
	if c.node != nil {
		c.node.Close()
	}
	c.media.Close()
	fmt.Fprintln(stdout, "config ok")
	return 0
}

// generatedSecrets are the credentials the embedded defaults make up on
// first start and keep in the data directory; they are printed to stdout so
// a local gateway can connect.
type generatedSecrets struct {
	GatewayID, GatewaySecret string
	NexscopeToken            string
	// DataDir is the data directory holding them.
	DataDir string
}

// sources are serve's flags that say where its configuration comes from.
type sources struct {
	configPath string // the YAML file; empty: embedded defaults
	listen     string // overrides the listen address when set
	dataDir    string // overrides the data directory when set
}

// loadOrDefault reads the config file, or builds the embedded defaults when
// there is none, then applies the environment and the flags, fills the
// defaults and validates.
func loadOrDefault(src sources, lookup func(string) (string, bool)) (*Config, *generatedSecrets, error) {
	var defaults *Config
	var gen *generatedSecrets
	if src.configPath == "" {
		dir, err := dataDir(src.dataDir, "", lookup)
		if err != nil {
			return nil, nil, err
		}
		// The embedded defaults' secrets, generated on first use.
		gen = &generatedSecrets{GatewayID: "local", DataDir: dir}
		if gen.GatewaySecret, err = storedSecret(dir, gatewaySecretFile); err != nil {
			return nil, nil, err
		}
		if gen.NexscopeToken, err = storedSecret(dir, nexscopeTokenFile); err != nil {
			return nil, nil, err
		}
		defaults = &Config{Store: StoreConfig{Path: dir}, Tenants: []TenantConfig{{
			ID:       "local",
			Gateways: []GatewayConfig{{ID: gen.GatewayID, Secrets: []string{gen.GatewaySecret}}},
		}}}
		// The generated token, and the default room bound to the one tenant.
		defaults.Nexscope = &nexscope.Config{Token: gen.NexscopeToken, Rooms: []nexscope.Room{{Name: nexscope.DefaultRoom, Tenant: defaults.Tenants[0].ID}}}
	}
	cfg, err := readConfig(src.configPath, defaults, lookup)
	if err != nil {
		return nil, nil, err
	}
	if src.listen != "" {
		cfg.Listen = src.listen
	}
	cfg.applyGatewaySecrets(lookup)
	base, err := dataDir(src.dataDir, cfg.Store.Path, lookup)
	if cfg.Store.Backend != store.BackendRedis {
		if err != nil {
			return nil, nil, err
		}
		cfg.Store.Path = base
	}
	if cfg.Media.Dir == "" && err == nil { // in the data directory (on redis it holds only media); none: no media store
		cfg.Media.Dir = filepath.Join(base, "media")
	}
	if gen != nil {
		gen.NexscopeToken = cfg.Nexscope.Token // as the environment left it
	}
	if err := cfg.normalize(); err != nil {
		return nil, nil, inFile(src.configPath, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, inFile(src.configPath, err)
	}
	return cfg, gen, nil
}

// inFile names the config file path (none: embedded defaults) in err,
// which reading or checking its configuration returned: "config: x"
// becomes "config <path>: x". A value may also have come from the
// environment; an error about one names its variable.
func inFile(path string, err error) error {
	var pe *fs.PathError
	if path == "" || errors.As(err, &pe) { // reading it failed: the error names it
		return err
	}
	return &fileError{path: path, err: err}
}

// fileError is an error of the config file path.
type fileError struct {
	path string
	err  error
}

func (e *fileError) Error() string {
	return "config " + e.path + ": " + strings.TrimPrefix(e.err.Error(), "config: ")
}

func (e *fileError) Unwrap() error { return e.err }

// newLogger returns the slog logger log configures: text on a terminal,
// JSON otherwise, unless the format is set. Durations print as "30s" in
// both formats.
func newLogger(c LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cmp.Or(c.Level, "info")))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationAsString}
	format := cmp.Or(c.Format, "auto")
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

// durationAsString renders a time.Duration attribute as its String form; the
// JSON handler would print it as an integer count of nanoseconds.
func durationAsString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// connector is everything serve runs, built from a config but not yet
// listening.
type connector struct {
	cfg       *Config
	log       *slog.Logger
	metrics   *metrics
	platforms []platform.Platform
	relay     *relay.Server
	handler   http.Handler // the public listener's routes
	// publicPatterns are the ServeMux patterns of handler, sorted: the
	// routes TestAuthorizationMatrix must have rows for.
	publicPatterns []string
	opsHandler     http.Handler // the operations listener's routes
	tls            *tls.Config  // nil: plain HTTP
	// live keeps the relay and platforms in step with the registry.
	live *live
	// admin is the admin API's handler; nil when admin.listen is unset.
	admin http.Handler
	// reload re-reads the config on SIGHUP; nil ignores SIGHUP.
	reload *reloader
	// draining is set when shutdown starts: /readyz answers 503 from then.
	draining atomic.Bool
	// media is the media store (nil without media.dir); run sweeps its
	// expired objects every minute.
	media *media.Store
	// poker sends the wake pokes; run waits for those under way.
	poker *wake.Poker
	// changes limits the registry changes of each gateway credential
	// (/manage/*, POST /relay/policy, POST /relay/provision).
	changes *change.Limiter
	// refusals bounds the log lines of requests the public listener's
	// HTTP routes refuse before they authenticate, per remote host.
	refusals *loglimit.Limiter
	// node is this instance among those sharing the redis backend
	// (internal/cluster); nil for one instance. serveReloading closes it
	// once the relay and the platforms stopped.
	node *cluster.Node
}

// openStore opens the store cfg.Store selects.
func openStore(ctx context.Context, cfg *Config) (store.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	sc, err := cfg.Store.storeConfig()
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, sc)
	switch {
	case errors.Is(err, store.ErrDamaged):
		return nil, err // it names the file and what to do
	case err != nil:
		return nil, fmt.Errorf("store (%s): %w", cfg.Store.describe(), err)
	}
	return st, nil
}

// storeOpenTimeout bounds opening the store (reaching Redis).
const storeOpenTimeout = 30 * time.Second

// build constructs the platforms, the relay (recovering what st holds),
// the HTTP routes and the TLS certificate cfg describes, without listening
// or starting ingest. serve and serve -check both run it, so -check accepts
// exactly what serve starts with; -check builds on an in-memory store, as a
// running connector holds the real one.
func build(cfg *Config, log *slog.Logger, st store.Store) (_ *connector, err error) {
	reg := registry.New(st, clock.System)
	if err := reg.SetDeclared(cfg.declared()); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	rctx, cancel := context.WithTimeout(context.Background(), storeOpenTimeout)
	defer cancel()
	effective, _, err := reg.Effective(rctx)
	if err != nil {
		return nil, err
	}
	weights := cfg.relayWeights()
	tenants := relayTenants(effective, weights)
	keys := &sessionKeys{}
	keys.set(tenants)
	m := newMetrics()
	am := newAdminMetrics(m)
	m.watchStore(st)
	leased := newLeaseMetrics(m).count(st)
	c := &connector{cfg: cfg, log: log, changes: change.NewLimiter(nil), refusals: loglimit.NewSources(clock.System)}
	leaseTTL := cmp.Or(cfg.Store.LeaseTTL, cluster.DefaultLeaseTTL)
	deps, err := platformDeps(cfg, log, leased, keys, m, leaseTTL)
	if err != nil {
		return nil, err
	}
	c.node, c.media = deps.Cluster, deps.Media
	reg.SetGrantedIn(func(ctx context.Context, platformName, id, tenant string) (bool, error) {
		return platform.GrantedIn(ctx, deps.Vault, platformName, id, tenant)
	})
	defer func() {
		if err != nil && c.node != nil {
			c.node.Close()
		}
		if err != nil && c.media != nil {
			c.media.Close()
		}
	}()
	identity, err := identityVerifier(cfg.Enroll, log)
	if err != nil {
		return nil, err
	}
	mh := newManagePlane(cfg, reg, c, identity, am, log)
	deps.Linker = mh
	platforms, err := buildPlatforms(cfg, deps)
	if err != nil {
		return nil, err
	}
	m.watchVault(deps.Vault)
	m.watchPlatforms(platforms)
	m.preinit(slices.Sorted(maps.Keys(cfg.TenantIDs())), platforms)
	rc := cfg.Relay // the relay section; the rest is wiring
	rc.Tenants, rc.Platforms, rc.Log, rc.Metrics, rc.Store = tenants, platforms, log, m, leased
	rc.Cluster = deps.Cluster
	poker, err := newPoker(cfg, reg, st, log, m)
	if err != nil {
		return nil, err
	}
	rc.Away = poker.Away
	rc.CatchUp = func(ctx context.Context) error { return c.live.catchUp(ctx) } // set below, before any platform runs
	srv, err := relay.New(rc)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil { // stop what relay.New started (its store writer)
			_ = srv.Shutdown(rctx)
		}
	}()
	m.watchLedger(srv)
	c.metrics, c.platforms, c.relay, c.poker = m, platforms, srv, poker
	c.live = newLive(reg, srv, platforms, keys, weights, log, am)
	// A deleted tenant's metric series go with it, and its media.
	c.live.keepers = append(c.live.keepers, m)
	if c.media != nil {
		m.watchMedia(c.media)
		c.live.keepers = append(c.live.keepers, c.media)
	}
	if err := c.live.apply(rctx); err != nil {
		return nil, err
	}
	if cfg.Admin.Listen != "" {
		backup, _ := st.(store.Backuper) // the embedded store; nil for redis
		if c.admin, err = admin.New(admin.Config{Registry: reg, Token: cfg.Admin.Token, Apply: c.live.apply, Log: log, Metrics: c.live.metrics, Backup: backup,
			Platforms: platformNames(platforms)}); err != nil {
			return nil, err
		}
	}
	if t := cfg.TLS; t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: tls: %w", err)
		}
		c.tls = &tls.Config{Certificates: []tls.Certificate{cert}}
	}

	var mediaRoutes map[string]http.Handler
	if deps.Media != nil {
		mediaRoutes = media.Routes(deps.Media.Handler(media.HandlerConfig{Auth: srv, Log: log}))
	}
	routes, err := publicRoutes(srv, platforms, mediaRoutes, map[string]http.Handler{"POST /relay/policy": c.relayPolicyHandler()},
		mh.Routes(), enroll.New(enroll.HandlerConfig{Verifier: identity, Registry: reg, Platforms: platformNames(platforms), Apply: c.live.apply, Log: log,
			Metrics: gatewayChanges{am}, Limiter: c.changes, Refusals: c.refusals}).Routes())
	if err != nil {
		return nil, err
	}
	c.publicPatterns = slices.Sorted(maps.Keys(routes))
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	c.handler = mux
	c.opsHandler = opsMux(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}), &c.draining, platforms)
	return c, nil
}

// platformDeps are the services the platforms are built with. With the
// redis backend several instances may share the store: each tenant's
// delivery, the Discord Gateway session, the Telegram long poll and each
// nexscope room then run on one of them at a time, under a lease of
// leaseTTL.
func platformDeps(cfg *Config, log *slog.Logger, st store.Store, keys *sessionKeys, m *metrics, leaseTTL time.Duration) (platform.Deps, error) {
	deps := platform.Deps{
		Log:     log,
		Vault:   vault.NewDurable(st.Capabilities(), vault.Config{Since: keys.since, Known: keys.known}),
		Key:     keys.key,
		Metrics: m,
		Store:   st,
	}
	if cfg.Media.Dir != "" {
		ms, err := media.New(cfg.Media)
		if err != nil {
			return deps, fmt.Errorf("media.dir: %w", err)
		}
		deps.Media = ms
	}
	if cfg.Store.Backend != store.BackendRedis {
		return deps, nil
	}
	instance := cfg.Store.Instance
	if instance == "" {
		host, _ := os.Hostname()
		instance = host + "-" + rand.Text()[:8]
	}
	deps.Exclusive = func(ctx context.Context, name string, run func(context.Context) error) error {
		return store.RunExclusive(ctx, clock.System, st.Leases(), "ingest/"+name, instance, leaseTTL, run)
	}
	// nexscope rooms: a home per room under such a lease, the other
	// instances proxying their members to it.
	node, err := cluster.New(cluster.Config{Instance: instance, PubSub: st.PubSub(), LeaseTTL: leaseTTL, ResendWindow: store.ResendWindow(st), Log: log, Refused: m.OutboxRefused})
	if err != nil {
		return deps, fmt.Errorf("store: join the other instances: %w", err)
	}
	deps.Cluster = node
	log.Info("sharing the store with other instances", "instance", instance, "lease_ttl", leaseTTL)
	return deps, nil
}

// serveReloading builds the connector cfg describes and runs it until ctx
// is cancelled, then shuts down gracefully. ready, if not nil, receives the
// listeners' addresses once they accept connections. On SIGHUP it re-reads
// the config with reload and applies its tenants and routing (nil reload
// ignores SIGHUP).
func serveReloading(ctx context.Context, cfg *Config, gen *generatedSecrets, log *slog.Logger, stdout io.Writer, ready func(listenAddrs), reload *reloader) error {
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Warn("store close", "err", err)
		}
	}()
	c, err := build(cfg, log, st)
	if err != nil {
		return err
	}
	c.reload = reload
	if c.node != nil {
		defer c.node.Close()
	}
	if c.media != nil {
		defer c.media.Close()
	}
	return c.run(ctx, gen, stdout, ready)
}

// run listens, starts ingest and serves until ctx is cancelled, then shuts
// down. Returning otherwise (cancelled before it listened, a failed start
// or serve) it shuts the relay build started down too, so its goroutines
// stop and, with Redis, its tenant leases are given up before the store
// closes.
func (c *connector) run(ctx context.Context, gen *generatedSecrets, stdout io.Writer, ready func(listenAddrs)) error {
	stopped := false
	defer func() {
		if !stopped {
			_ = c.relay.Shutdown(context.Background())
		}
	}()
	if ctx.Err() != nil { // SIGINT or SIGTERM while it was built: stop before listening
		c.log.Info("connector stopped before it finished starting")
		return nil
	}
	l, err := c.listen()
	if err != nil {
		return err
	}
	defer l.stop()
	liveCtx, stopLive := context.WithCancel(context.Background())
	defer stopLive()
	if err := c.live.start(liveCtx); err != nil {
		l.raw.Close()
		return fmt.Errorf("registry: %w", err)
	}
	defer c.live.stop()
	defer c.reloadOnHangup(liveCtx)()
	serveErr := c.servePublic(l)
	stopIngest := c.startIngest()
	c.announce(stdout, gen, l.addrs, ready)
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		stopIngest()
		return err
	}
	c.shutdown(l.public, stopIngest)
	stopped = true
	return <-serveErr
}

// listeners are the connector's bound listeners: the operations and admin
// ones already serving, the public one not yet.
type listeners struct {
	addrs  listenAddrs
	public *http.Server
	ln     net.Listener // the public listener as public serves it
	raw    net.Listener // the bound socket under ln; closed when public never serves
	stop   func()       // stops the admin and operations servers
}

// listen binds the operations, public and admin listeners and serves the
// operations and admin ones; on an error nothing stays open.
func (c *connector) listen() (*listeners, error) {
	opsLn, err := bind("ops.listen", c.cfg.Ops.Listen)
	if err != nil {
		return nil, err
	}
	opsSrv := c.opsServer()
	go func() { _ = opsSrv.Serve(opsLn) }()
	raw, err := bind("listen", c.cfg.Listen)
	if err != nil {
		opsSrv.Close()
		return nil, err
	}
	l := &listeners{raw: raw}
	if l.public, l.ln, err = c.publicServer(raw); err == nil {
		var stopAdmin func()
		if l.addrs.AdminAddr, stopAdmin, err = c.serveAdmin(); err == nil {
			l.stop = func() { stopAdmin(); opsSrv.Close() }
		}
	}
	if err != nil {
		raw.Close()
		opsSrv.Close()
		return nil, err
	}
	l.addrs.Addr, l.addrs.OpsAddr = l.ln.Addr().String(), opsLn.Addr().String()
	return l, nil
}

// bind listens on addr, the value of the config key; an error names the
// key and, when another process holds the address, how to choose another.
func bind(key, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%s: %s is taken by another process; set %s in the config file, or $%s, to a free address (%w)",
			key, addr, key, envVariable(key), err)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return ln, nil
}

// servePublic serves the public listener (TLS when configured); the channel
// receives how serving ended (nil after Shutdown).
func (c *connector) servePublic(l *listeners) <-chan error {
	serveErr := make(chan error, 1)
	go func() {
		var err error
		if c.tls != nil {
			err = l.public.ServeTLS(l.ln, "", "")
		} else {
			err = l.public.Serve(l.ln)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		serveErr <- err
	}()
	return serveErr
}

// startIngest runs every platform's ingest into the relay, and the media
// sweeper, until stop is called; stop returns once they have all returned,
// or after shutdown_grace, logging the platforms that did not.
func (c *connector) startIngest() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var ingest sync.WaitGroup
	var mu sync.Mutex
	running := make(map[string]bool, len(c.platforms))
	for _, p := range c.platforms {
		running[p.Name()] = true
		ingest.Go(func() {
			defer func() { mu.Lock(); delete(running, p.Name()); mu.Unlock() }()
			err := p.Run(ctx, c.relay)
			if err != nil && ctx.Err() == nil {
				c.log.Error("platform ingest stopped", "platform", p.Name(), "err", err)
				return
			}
			c.log.Debug("platform ingest stopped", "platform", p.Name())
		})
	}
	if c.media != nil {
		ingest.Go(func() { clock.Every(ctx, clock.System, time.Minute, func(context.Context) { c.media.Sweep() }) }) // expired objects, abandoned uploads
	}
	return func() {
		cancel()
		done := make(chan struct{})
		go func() { ingest.Wait(); close(done) }()
		grace := cmp.Or(c.cfg.ShutdownGrace, defaultShutdownGrace)
		select {
		case <-done:
		case <-time.After(grace):
			mu.Lock()
			defer mu.Unlock()
			c.log.Error("platform ingest did not stop within shutdown_grace; going on without it", "platforms", slices.Sorted(maps.Keys(running)), "grace", grace)
		}
	}
}

// announce prints the banner, logs that the connector listens and hands the
// addresses to ready (when not nil).
func (c *connector) announce(stdout io.Writer, gen *generatedSecrets, addrs listenAddrs, ready func(listenAddrs)) {
	tlsOn := c.tls != nil
	tenants := int(c.live.tenants.Load())
	printBanner(stdout, addrs, tlsOn, c.cfg, gen, c.platforms, tenants)
	c.log.Info("connector listening", "addr", addrs.Addr, "ops_addr", addrs.OpsAddr, "tls", tlsOn, "platforms", len(c.platforms), "tenants", tenants)
	if ready != nil {
		ready(addrs)
	}
}

// defaultShutdownGrace is shutdown_grace's default.
const defaultShutdownGrace = 30 * time.Second

// shutdown drains within shutdown_grace, after shutdown_delay of serving
// as usual while /readyz answers 503: stop ingest (undelivered platform
// events stay with the platform), stop accepting, answer in-flight
// outbound, close gateways with 1001 so they reconnect elsewhere.
func (c *connector) shutdown(public *http.Server, stopIngest func()) {
	grace := cmp.Or(c.cfg.ShutdownGrace, defaultShutdownGrace)
	c.draining.Store(true)
	if d := c.cfg.ShutdownDelay; d > 0 {
		c.log.Info("draining: /readyz answers 503; the shutdown starts after shutdown_delay", "shutdown_delay", d)
		<-time.After(d)
	}
	c.log.Info("shutting down", "grace", grace)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	stopIngest()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := public.Shutdown(sctx); err != nil {
			c.log.Warn("http shutdown", "err", err)
		}
	})
	if err := c.relay.Shutdown(sctx); err != nil {
		c.log.Warn("relay shutdown incomplete", "err", err)
	}
	wg.Wait()
	c.poker.Wait()
	c.log.Info("connector stopped")
}

// gatewayKnows lists the connector's platforms that the Hermes gateway knows
// by name; it files events of any other platform (nexscope) under "relay"
// (docs/hermes-wire.md §6.2).
var gatewayKnows = map[string]bool{"discord": true, "telegram": true, "slack": true, "whatsapp_cloud": true}

// gatewayPlatforms is the GATEWAY_RELAY_PLATFORMS value a gateway of this
// connector should run with: one hello per platform it knows by name, so
// each gets that platform's own descriptor (edit, follow_up, Discord's
// command manifest), then "relay" for the others, whose descriptor is the
// capabilities they share. Unset, the gateway says hello relay alone and is
// held to what every platform supports.
func gatewayPlatforms(platforms []platform.Platform) string {
	var names []string
	relay := len(platforms) == 0
	for _, p := range platforms {
		if gatewayKnows[p.Name()] {
			names = append(names, p.Name())
		} else {
			relay = true
		}
	}
	if relay {
		names = append(names, contract.PlatformRelay)
	}
	return strings.Join(names, ",")
}

// printBanner tells the operator, in a few lines, what listens and how a
// gateway (or a nexscope client) connects. tenants is how many tenants are
// served: the config's and those the admin API added.
func printBanner(w io.Writer, addrs listenAddrs, tlsOn bool, cfg *Config, gen *generatedSecrets, platforms []platform.Platform, tenants int) {
	scheme, wsScheme := "http", "ws"
	if tlsOn {
		scheme, wsScheme = "https", "wss"
	}
	addr := addrs.Addr
	base := scheme + "://" + addr
	fmt.Fprintf(w, "connector %s listening on %s (relay at %s://%s/relay)\n", version(), base, wsScheme, addr)
	names := cmp.Or(strings.Join(platformNames(platforms), ", "), "none (set DISCORD_BOT_TOKEN, TELEGRAM_BOT_TOKEN, SLACK_BOT_TOKEN, WHATSAPP_ACCESS_TOKEN or NEXSCOPE_TOKEN)")
	counted := strconv.Itoa(tenants)
	if added := tenants - len(cfg.Tenants); added > 0 {
		counted += fmt.Sprintf(" (%d from the config, %d added with the admin API)", len(cfg.Tenants), added)
	}
	fmt.Fprintf(w, "  platforms: %s; tenants: %s\n", names, counted)
	fmt.Fprintf(w, "  store:     %s (unacknowledged inbound, interaction tokens, and the tenants, gateways, secrets and\n"+
		"             bindings added with the admin API; restoring a backup rolls all of them back)\n", cfg.Store.describe())
	if gen != nil {
		fmt.Fprintf(w, "  gateway:   GATEWAY_RELAY_URL=%s GATEWAY_RELAY_PLATFORMS=%s GATEWAY_RELAY_ID=%s GATEWAY_RELAY_SECRET=%s\n",
			base, gatewayPlatforms(platforms), gen.GatewayID, gen.GatewaySecret)
		fmt.Fprintf(w, "  secrets:   kept in the data directory %s, the same after a restart\n", gen.DataDir)
		if cfg.Nexscope != nil {
			fmt.Fprintf(w, "  nexscope:  %s://%s/ws?name=<you>&token=%s&v=1\n", wsScheme, addr, gen.NexscopeToken)
		}
	} else {
		fmt.Fprintf(w, "  gateway:   GATEWAY_RELAY_URL=%s GATEWAY_RELAY_PLATFORMS=%s (GATEWAY_RELAY_ID and GATEWAY_RELAY_SECRET: a gateway of the tenants section)\n",
			base, gatewayPlatforms(platforms))
	}
	ops := "http://" + addrs.OpsAddr
	fmt.Fprintf(w, "  health:    %s/healthz; operations (keep private): %s/readyz  %s/platforms  %s/metrics\n", base, ops, ops, ops)
	if addrs.AdminAddr != "" {
		token := "admin.token of the config file"
		if name := cfg.fromEnv["admin.token"]; name != "" {
			token = "$" + name
		}
		fmt.Fprintf(w, "  admin:     http://%s/admin/v1/ (bearer %s; keep private)\n", addrs.AdminAddr, token)
	}
}
