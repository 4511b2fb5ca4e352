package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connector/internal/cluster"
	"connector/internal/wsconn"
	"connector/platform"
	"connector/relay"
	"connector/store"
)

// connector is the in-process connector: the relay and one driver's
// platform on a loopback listener, wired as cmd/connector's serve does
// (/relay plus the platform's routes, the platform's Run feeding the relay's
// sink), plus the echo baseline on a listener of its own. With -instances N
// it is N such relays, each with its own store client on one shared Redis
// and its own listener, cooperating as separate processes would
// (relay/cluster.go); they share the platform, which ingests on each.
type connector struct {
	Relays    []*relay.Server
	RelayURLs []string // ws://…/relay of each instance
	BaseURL   string   // http://… for the platform's routes (instance 0)
	EchoURL   string   // ws://…/echo
	Metrics   *ledgerMetrics
	Tenants   []relay.Tenant

	servers     []*http.Server
	stop        context.CancelFunc
	ingest      sync.WaitGroup
	closeStores []func()
}

// tenantIDs returns the ids of n benchmark tenants.
func tenantIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "tenant-" + strconv.Itoa(i)
	}
	return ids
}

// relayTenants spreads the gateways of o over its tenants, round-robin.
func relayTenants(o *options) []relay.Tenant {
	ids := tenantIDs(o.Tenants)
	ts := make([]relay.Tenant, len(ids))
	for i, id := range ids {
		ts[i].ID = id
	}
	for i := range o.Gateways {
		t := &ts[i%len(ts)]
		t.Gateways = append(t.Gateways, relay.Gateway{ID: o.gatewayID(i), Secrets: []string{o.Secret}})
	}
	return ts
}

// startConnector runs the relay with platforms (built by newPlatform for the
// tenants) on 127.0.0.1.
func startConnector(o *options, newPlatform func([]relay.Tenant) (platform.Platform, error)) (*connector, error) {
	tenants := relayTenants(o)
	var platforms []platform.Platform
	if newPlatform != nil {
		p, err := newPlatform(tenants)
		if err != nil {
			return nil, err
		}
		platforms = append(platforms, p)
	}
	ids := make([]string, len(tenants))
	for i, t := range tenants {
		ids[i] = t.ID
	}
	c := &connector{Metrics: newLedgerMetrics(ids), Tenants: tenants}
	prefix := "relaybench-" + randomToken() + ":"
	for i := range o.Instances {
		if err := c.startInstance(o, i, prefix, platforms); err != nil {
			c.close()
			return nil, err
		}
	}
	echoMux := http.NewServeMux()
	echoMux.Handle("/echo", echoHandler())
	echoAddr, err := c.listen(echoMux)
	if err != nil {
		c.close()
		return nil, err
	}
	c.EchoURL = "ws://" + echoAddr + "/echo"

	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	for _, srv := range c.Relays {
		for _, p := range platforms {
			c.ingest.Go(func() { _ = p.Run(ctx, srv) })
		}
	}
	return c, nil
}

// startInstance starts relay instance i on its own store client (keys
// under prefix) and listener.
func (c *connector) startInstance(o *options, i int, prefix string, platforms []platform.Platform) error {
	st, closeStore, err := openStore(o, prefix)
	if err != nil {
		return err
	}
	cfg := relay.Config{
		Tenants: c.Tenants, Platforms: platforms, Metrics: c.Metrics, Log: slog.New(slog.DiscardHandler),
		// The whole run's events may wait in one tenant's ledger.
		BufferEntries: max(10_000, 2*o.Window),
		Store:         st,
	}
	if o.Instances > 1 {
		node, err := cluster.New(cluster.Config{Instance: "relaybench-" + strconv.Itoa(i), PubSub: st.PubSub(), ResendWindow: store.ResendWindow(st)})
		if err != nil {
			closeStore()
			return err
		}
		cfg.Cluster = node
		closeStore = func(closeStore func()) func() { return func() { node.Close(); closeStore() } }(closeStore)
	}
	srv, err := relay.New(cfg)
	if err != nil {
		closeStore()
		return err
	}
	c.Relays = append(c.Relays, srv)
	c.closeStores = append(c.closeStores, closeStore)
	mux := http.NewServeMux()
	mux.Handle("/relay", srv)
	for _, p := range platforms {
		if r, ok := p.(platform.Routes); ok {
			for pattern, h := range r.Routes() {
				mux.Handle(pattern, h)
			}
		}
	}
	addr, err := c.listen(mux)
	if err != nil {
		return err
	}
	c.RelayURLs = append(c.RelayURLs, "ws://"+addr+"/relay")
	if i == 0 {
		c.BaseURL = "http://" + addr
	}
	return nil
}

// listen serves h on a new loopback port and returns its address.
func (c *connector) listen(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	c.servers = append(c.servers, s)
	go func() { _ = s.Serve(ln) }()
	return ln.Addr().String(), nil
}

// close shuts the connector down as serve does: ingest first, then the
// relay (gateways closed 1001), then the listeners.
func (c *connector) close() {
	if c.stop != nil {
		c.stop()
		c.ingest.Wait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, r := range c.Relays {
		_ = r.Shutdown(ctx)
	}
	for _, s := range c.servers {
		_ = s.Shutdown(ctx)
	}
	for _, closeStore := range c.closeStores {
		closeStore()
	}
}

// openStore opens the store backend o names, empty and for this run only:
// the embedded one in a fresh data directory, removed by closeStore; the
// redis one under prefix, fresh for the run and shared by its instances
// (the records the run leaves are acknowledged and deleted, the prefix's
// few bookkeeping keys stay).
func openStore(o *options, prefix string) (st store.Store, closeStore func(), err error) {
	cfg := store.Config{Backend: o.Store, RedisURL: o.RedisURL, RedisMinReplicas: o.RedisMinReplicas, RedisPrefix: prefix}
	var dir string
	if o.Store == store.BackendEmbedded {
		if dir, err = os.MkdirTemp(o.StoreDir, "relaybench-store-"); err != nil {
			return nil, nil, err
		}
		cfg.Path = dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err = store.Open(ctx, cfg)
	if err != nil {
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
		return nil, nil, fmt.Errorf("open the %s store: %w", o.Store, err)
	}
	return st, func() {
		_ = st.Close()
		if dir != "" {
			_ = os.RemoveAll(dir)
		}
	}, nil
}

// waitConns waits until the relay serves exactly n gateway connections.
func (c *connector) waitConns(n int, limit time.Duration) error {
	if drain(func() bool { return c.Metrics.conns.Load() == int64(n) }, c.Metrics.connsChanged, limit) {
		return nil
	}
	return fmt.Errorf("relay serves %d gateway connections, want %d", c.Metrics.conns.Load(), n)
}

// ledgerMetrics implements relay.Metrics to follow the relay from outside:
// live connections, inbound acknowledged (every tenant ledger's shrinking),
// and inbound the relay dropped.
type ledgerMetrics struct {
	conns        atomic.Int64
	connsChanged chan struct{}
	ledger       map[string]*atomic.Int64 // per tenant; read-only map
	acked        atomic.Int64
	dropped      atomic.Int64
	progress     chan struct{}
}

func newLedgerMetrics(tenants []string) *ledgerMetrics {
	m := &ledgerMetrics{
		connsChanged: make(chan struct{}, 1),
		ledger:       make(map[string]*atomic.Int64, len(tenants)),
		progress:     make(chan struct{}, 1),
	}
	for _, t := range tenants {
		m.ledger[t] = new(atomic.Int64)
	}
	return m
}

// ConnOpened implements relay.Metrics.
func (m *ledgerMetrics) ConnOpened(string) { m.conns.Add(1); wsconn.Signal(m.connsChanged) }

// ConnClosed implements relay.Metrics.
func (m *ledgerMetrics) ConnClosed(string) { m.conns.Add(-1); wsconn.Signal(m.connsChanged) }

// Refused implements relay.Metrics.
func (m *ledgerMetrics) Refused(string) {}

// FrameIgnored implements relay.Metrics.
func (m *ledgerMetrics) FrameIgnored(string, string) {}

// Inbound implements relay.Metrics: it counts what the relay dropped.
func (m *ledgerMetrics) Inbound(_, _, outcome string) {
	if outcome != "queued" && outcome != "truncated" {
		m.dropped.Add(1)
		wsconn.Signal(m.progress)
	}
}

// Delivered implements relay.Metrics.
func (m *ledgerMetrics) Delivered(string, time.Duration) {}

// Outbound implements relay.Metrics.
func (m *ledgerMetrics) Outbound(string, string, string, time.Duration) {}

// Buffered implements relay.Metrics. The relay reports a tenant's ledger
// size under the tenant's lock after each change, so one tenant's reports
// arrive in order; a ledger that shrank had entries acknowledged (dropped
// entries are counted by Inbound and only ever make room for a new one, so
// they never shrink the reported size).
func (m *ledgerMetrics) Buffered(tenant string, n int) {
	l := m.ledger[tenant]
	if l == nil {
		return
	}
	if old := l.Swap(int64(n)); int64(n) < old {
		m.acked.Add(old - int64(n))
		wsconn.Signal(m.progress)
	}
}
