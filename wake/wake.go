// Package wake pokes sleeping gateways (Hermes contract §3.3, the wake
// primitive): when an inbound is buffered for a tenant none of whose
// connections can take it (no live socket, or every one went idle), each of
// the tenant's gateways with a registered wake URL gets one unsigned,
// payload-free HTTP GET, so a suspended gateway wakes, re-dials /relay and
// drains its backlog.
//
// The poke is best effort and never holds up delivery: Away returns at
// once, the GETs run on their own goroutines under Config.Timeout,
// redirects are not followed, the answer's body is discarded, and the
// outcome is only counted and logged.
//
// A poke is bounded per target, not per gateway, so that many gateways
// cannot turn one event into many requests to one place:
//
//   - gateways sharing a wake URL share one GET;
//   - each wake URL is poked at most once per Config.Cooldown across every
//     instance sharing the store: an instance pokes only after taking the
//     claim "wake/<tenant>/url/<digest>" until a cooldown from now, so no
//     instance (itself included) takes it again before it lapses;
//   - at most Config.PerHost wake URLs of a tenant on one host (its host
//     name, whatever the scheme and port) are poked per cooldown, counted
//     with the claims "wake/<tenant>/host/<digest>/<slot>" across the
//     instances; the others wait for a later cooldown (result host_limit).
//
// The cooldowns are store.Claims, not leases: they need no holder nor
// fencing token, and the store forgets a lapsed claim (swept on the
// embedded and memory backends, expired by Redis), so wake URLs that
// change (a tunnel's, at every boot) leave nothing behind.
//
// Each instance also keeps a per-tenant cooldown of its own, so a burst of
// buffered inbound costs one registry read and one round of claims per
// tenant, not one per event.
package wake

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"maps"
	mathrand "math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"connector/internal/clock"
	"connector/store"
)

// Defaults of Config.
const (
	DefaultCooldown = time.Minute
	DefaultTimeout  = 5 * time.Second
	DefaultPerHost  = 8
)

// Results counted by Metrics.WakePoke.
const (
	ResultOK          = "ok"          // the wake URL answered (any status below 400)
	ResultHTTPError   = "http_error"  // it answered 4xx or 5xx
	ResultUnreachable = "unreachable" // no answer within the timeout (refused, DNS, TLS, timeout)
	ResultStoreError  = "store_error" // the cooldown claim could not be read or taken
	ResultHostLimit   = "host_limit"  // not sent: the tenant's wake URLs on that host had Config.PerHost pokes this cooldown
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
	// Claims hold each wake URL's cooldown among the instances sharing them.
	Claims store.Claims
	// Cooldown is the least time between two pokes of one wake URL; zero
	// is DefaultCooldown.
	Cooldown time.Duration
	// PerHost is the most wake URLs of one tenant on one host (the URL's
	// host name, whatever its scheme and port) poked per Cooldown; zero is
	// DefaultPerHost.
	PerHost int
	// Timeout bounds one poke of a tenant (the registry read, the claims,
	// the GETs); zero is DefaultTimeout.
	Timeout time.Duration
	// Clock is the time source of the cooldowns (the per-tenant one and
	// the claims' expiry, which the store compares with its own clock);
	// nil is clock.System.
	Clock clock.Clock
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

// New returns a Poker; Targets and Claims are required.
func New(cfg Config) (*Poker, error) {
	if cfg.Targets == nil || cfg.Claims == nil {
		return nil, errors.New("wake: Targets and Claims are required")
	}
	cfg.Cooldown = cmp.Or(max(cfg.Cooldown, 0), DefaultCooldown)
	cfg.Timeout = cmp.Or(max(cfg.Timeout, 0), DefaultTimeout)
	cfg.PerHost = cmp.Or(max(cfg.PerHost, 0), DefaultPerHost)
	cfg.Clock = cmp.Or(cfg.Clock, clock.System)
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	cfg.Metrics = cmp.Or[Metrics](cfg.Metrics, nopMetrics{})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }} // redirects are not followed
	return &Poker{cfg: cfg, client: client, next: make(map[string]time.Time)}, nil
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

// pokeTenant pokes each distinct wake URL of tenant's gateways whose
// cooldown claim it takes, host by host, within each host's budget.
func (p *Poker) pokeTenant(tenant string) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Timeout)
	defer cancel()
	targets, err := p.cfg.Targets(ctx, tenant)
	if err != nil {
		p.cfg.Metrics.WakePoke(ResultStoreError)
		p.cfg.Log.Warn("wake poke skipped: cannot read the wake URLs", "tenant", tenant, "err", err)
		return
	}
	// Gateways sharing a URL share its poke: one GET wakes them all.
	byURL := map[string][]string{}
	for _, t := range targets {
		if t.Tenant == tenant && t.URL != "" {
			byURL[t.URL] = append(byURL[t.URL], t.Gateway)
		}
	}
	byHost := map[string][]string{}
	for url := range byURL {
		h := hostKey(url)
		byHost[h] = append(byHost[h], url)
	}
	var wg sync.WaitGroup
	for host, urls := range byHost {
		mathrand.Shuffle(len(urls), func(i, j int) { urls[i], urls[j] = urls[j], urls[i] }) // no URL is always last
		wg.Go(func() { p.pokeHost(ctx, &wg, tenant, host, urls, byURL) })
	}
	wg.Wait()
}

// pokeHost pokes urls, all on host, each unless it was poked less than a
// cooldown ago: at most Config.PerHost of them per cooldown, across the
// instances sharing the claims. The GETs run on wg.
func (p *Poker) pokeHost(ctx context.Context, wg *sync.WaitGroup, tenant, host string, urls []string, gateways map[string][]string) {
	slot, limited := 0, 0
	for _, url := range urls {
		name := "wake/" + tenant + "/url/" + digest(url)
		until := p.cfg.Clock.Now().Add(p.cfg.Cooldown)
		acquired, err := p.cfg.Claims.Claim(ctx, name, until)
		if err != nil {
			p.storeError(tenant, gateways[url], err)
			return
		}
		if !acquired {
			continue // poked less than a cooldown ago, here or by another instance
		}
		got := false
		for ; slot < p.cfg.PerHost && !got; slot++ {
			got, err = p.cfg.Claims.Claim(ctx, "wake/"+tenant+"/host/"+digest(host)+"/"+strconv.Itoa(slot), until)
			if err != nil {
				p.storeError(tenant, gateways[url], err)
				return
			}
		}
		if !got {
			// The host had its pokes this cooldown: free the URL for a
			// later look, unless the claim lapsed meanwhile (a store
			// slower than the cooldown) and another instance took it.
			_ = p.cfg.Claims.Release(ctx, name, until)
			p.cfg.Metrics.WakePoke(ResultHostLimit)
			limited++
			continue
		}
		wg.Go(func() {
			result, status := p.get(ctx, url)
			p.cfg.Metrics.WakePoke(result)
			p.cfg.Log.Info("wake poke sent", "tenant", tenant, "gateway_ids", gateways[url], "host", Host(url), "result", result, "status", status)
		})
	}
	if limited > 0 {
		p.cfg.Log.Warn("wake pokes held back: the tenant's wake URLs on this host had theirs this cooldown", "tenant", tenant, "host", Host(urls[0]), "held_back", limited, "per_host", p.cfg.PerHost)
	}
}

// storeError counts and logs a claim the store could not give.
func (p *Poker) storeError(tenant string, gateways []string, err error) {
	p.cfg.Metrics.WakePoke(ResultStoreError)
	p.cfg.Log.Warn("wake poke skipped: cannot take the cooldown claim", "tenant", tenant, "gateway_ids", gateways, "err", err)
}

// hostKey is the host a wake URL targets, as the per-host budget counts
// it: the host name in lower case without a trailing dot, whatever the
// scheme and port (ports of one machine share its budget); an IP address
// in its one canonical spelling (IPv4-mapped IPv6 as IPv4, no zone), so
// [::ffff:7f00:1] and 127.0.0.1 share one budget.
func hostKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().WithZone("").String()
	}
	return host
}

// digest names a URL or host in a claim key: a wake URL may carry a
// token, which the store must not hold.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
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
