// Package wake pokes sleeping gateways (Hermes contract §3.3, the wake
// primitive): when an inbound is buffered for a tenant none of whose
// connections can take it (no live socket, or every one went idle), each of
// the tenant's gateways with a registered wake URL gets one unsigned,
// payload-free HTTP GET, so a suspended gateway wakes, re-dials /relay and
// drains its backlog.
//
// The poke is best effort and never holds up delivery: Away returns at
// once, the GET runs on its own goroutine under Config.Timeout, redirects
// are not followed, the answer's body is discarded, and the outcome is only
// counted and logged. Each gateway is poked at most once per
// Config.Cooldown across every instance sharing the store: an instance
// pokes only after taking the lease "wake/<gateway>" for the cooldown, with
// a holder name of its own for each attempt, so no instance (itself
// included) takes it again before it lapses. Each instance also keeps a
// per-tenant cooldown of its own, so a burst of buffered inbound costs one
// registry read and one lease attempt per gateway, not one per event.
package wake

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"time"

	"connector/internal/clock"
	"connector/store"
)

// Defaults of Config.
const (
	DefaultCooldown = time.Minute
	DefaultTimeout  = 5 * time.Second
)

// Results counted by Metrics.WakePoke.
const (
	ResultOK          = "ok"          // the wake URL answered (any status below 400)
	ResultHTTPError   = "http_error"  // it answered 4xx or 5xx
	ResultUnreachable = "unreachable" // no answer within the timeout (refused, DNS, TLS, timeout)
	ResultStoreError  = "store_error" // the cooldown lease could not be read or taken
)

// Target is one gateway's wake URL.
type Target struct {
	Tenant, Gateway, URL string
}

// Metrics counts pokes.
type Metrics interface {
	// WakePoke counts one poke by result (the Result constants).
	WakePoke(result string)
}

// Config configures a Poker.
type Config struct {
	// Targets returns the wake URLs of tenant's gateways (the registry).
	Targets func(ctx context.Context, tenant string) ([]Target, error)
	// Leases hold each gateway's cooldown among the instances sharing them.
	Leases store.Leases
	// Instance names this instance in lease holders; empty is "local".
	Instance string
	// Cooldown is the least time between two pokes of one gateway; zero is
	// DefaultCooldown.
	Cooldown time.Duration
	// Timeout bounds one poke of a tenant (the registry read, the leases,
	// the GETs); zero is DefaultTimeout.
	Timeout time.Duration
	// Clock is the time source of the per-tenant cooldown; nil is
	// clock.System. (The lease follows the store's clock.)
	Clock clock.Clock
	// Client sends the GETs; nil is a client that does not follow
	// redirects. Its CheckRedirect is replaced to refuse them either way.
	Client *http.Client
	// Log receives one line per poke; nil discards.
	Log *slog.Logger
	// Metrics counts pokes; nil discards.
	Metrics Metrics
}

// Poker sends wake pokes. Its methods are safe for concurrent use.
type Poker struct {
	cfg    Config
	client *http.Client

	mu   sync.Mutex
	next map[string]time.Time // tenant -> earliest next look
	wg   sync.WaitGroup
}

// New returns a Poker; Targets and Leases are required.
func New(cfg Config) (*Poker, error) {
	if cfg.Targets == nil || cfg.Leases == nil {
		return nil, errors.New("wake: Targets and Leases are required")
	}
	cfg.Cooldown = cmp.Or(max(cfg.Cooldown, 0), DefaultCooldown)
	cfg.Timeout = cmp.Or(max(cfg.Timeout, 0), DefaultTimeout)
	cfg.Instance = cmp.Or(cfg.Instance, "local")
	cfg.Clock = cmp.Or(cfg.Clock, clock.System)
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	cfg.Metrics = cmp.Or[Metrics](cfg.Metrics, nopMetrics{})
	client := *cmp.Or(cfg.Client, &http.Client{}) // a copy: its CheckRedirect is replaced
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Poker{cfg: cfg, client: &client, next: make(map[string]time.Time)}, nil
}

type nopMetrics struct{}

func (nopMetrics) WakePoke(string) {}

// Away reports that an inbound was buffered for tenant with no connection
// to take it. It never blocks: unless this instance looked at the tenant
// less than a cooldown ago, it pokes the tenant's gateways on a goroutine.
func (p *Poker) Away(tenant string) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	if next, ok := p.next[tenant]; ok && now.Before(next) {
		p.mu.Unlock()
		return
	}
	// Forget lapsed tenants: the map stays small.
	maps.DeleteFunc(p.next, func(_ string, next time.Time) bool { return !now.Before(next) })
	p.next[tenant] = now.Add(p.cfg.Cooldown)
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		p.pokeTenant(tenant)
	}()
}

// Wait returns once every poke started so far is done.
func (p *Poker) Wait() { p.wg.Wait() }

// pokeTenant pokes each of tenant's gateways whose cooldown lease it takes.
func (p *Poker) pokeTenant(tenant string) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Timeout)
	defer cancel()
	targets, err := p.cfg.Targets(ctx, tenant)
	if err != nil {
		p.cfg.Metrics.WakePoke(ResultStoreError)
		p.cfg.Log.Warn("wake poke skipped: cannot read the wake URLs", "tenant", tenant, "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, t := range targets {
		if t.Tenant != tenant || t.URL == "" {
			continue
		}
		wg.Go(func() { p.poke(ctx, t) })
	}
	wg.Wait()
}

// poke takes t's cooldown lease and, if it got it, sends the GET.
func (p *Poker) poke(ctx context.Context, t Target) {
	holder := p.cfg.Instance + "/" + nonce()
	_, acquired, err := p.cfg.Leases.Acquire(ctx, "wake/"+t.Gateway, holder, p.cfg.Cooldown)
	if err != nil {
		p.cfg.Metrics.WakePoke(ResultStoreError)
		p.cfg.Log.Warn("wake poke skipped: cannot take the cooldown lease", "tenant", t.Tenant, "gateway_id", t.Gateway, "err", err)
		return
	}
	if !acquired {
		return // poked less than a cooldown ago, here or by another instance
	}
	result, status := p.get(ctx, t.URL)
	p.cfg.Metrics.WakePoke(result)
	p.cfg.Log.Info("wake poke sent", "tenant", t.Tenant, "gateway_id", t.Gateway, "host", Host(t.URL), "result", result, "status", status)
}

// get sends the payload-free GET and classifies its outcome.
func (p *Poker) get(ctx context.Context, url string) (result string, status int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ResultUnreachable, 0
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return ResultUnreachable, 0
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode >= 400 {
		return ResultHTTPError, resp.StatusCode
	}
	return ResultOK, resp.StatusCode
}

// nonce is a fresh random lease-holder suffix.
func nonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
