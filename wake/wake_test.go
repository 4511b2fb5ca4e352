package wake_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/leakcheck"
	"connector/internal/redistest"
	"connector/store"
	"connector/wake"
)

func TestMain(m *testing.M) { leakcheck.Main(m, 5*time.Second, "connector/wake.") }

// counter is a Metrics counting results.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) WakePoke(result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[result]++
}

func (c *counter) get(result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[result]
}

// wakeServer is a real HTTP server on loopback recording the wake GETs.
type wakeServer struct {
	*httptest.Server
	hits    atomic.Int32
	mu      sync.Mutex
	methods []string
	bodies  []int64
	auth    []string
}

func newWakeServer(t *testing.T, status int) *wakeServer {
	ws := &wakeServer{}
	ws.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws.mu.Lock()
		ws.methods = append(ws.methods, r.Method)
		ws.bodies = append(ws.bodies, r.ContentLength)
		ws.auth = append(ws.auth, r.Header.Get("Authorization"))
		ws.mu.Unlock()
		ws.hits.Add(1)
		if status == http.StatusFound {
			http.Redirect(w, r, "/elsewhere", status)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(ws.Close)
	return ws
}

func targetsOf(ts ...wake.Target) func(context.Context, string) ([]wake.Target, error) {
	return func(_ context.Context, tenant string) ([]wake.Target, error) {
		var out []wake.Target
		for _, t := range ts {
			if t.Tenant == tenant {
				out = append(out, t)
			}
		}
		return out, nil
	}
}

// TestPokeOncePerCooldown: a burst of buffered inbound pokes the gateway
// once, with a payload-free, unsigned GET; after the cooldown on the fake
// clock, the next buffered inbound pokes it again.
func TestPokeOncePerCooldown(t *testing.T) {
	ws := newWakeServer(t, http.StatusNoContent)
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	defer st.Close()
	m := &counter{}
	p, err := wake.New(wake.Config{
		Targets: targetsOf(wake.Target{Tenant: "acme", Gateway: "gw1", URL: ws.URL + "/wake?k=1"}),
		Claims:  st.Claims(), Clock: clk, Cooldown: time.Minute, Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		p.Away("acme")
		p.Away("other") // a tenant without wake URLs
	}
	p.Wait()
	if got := ws.hits.Load(); got != 1 {
		t.Fatalf("wake GETs after a burst: got %d, want 1", got)
	}
	ws.mu.Lock()
	if ws.methods[0] != http.MethodGet || ws.bodies[0] > 0 || ws.auth[0] != "" {
		t.Errorf("poke: method %s, body %d bytes, Authorization %q; want an unsigned GET without a body", ws.methods[0], ws.bodies[0], ws.auth[0])
	}
	ws.mu.Unlock()

	clk.Advance(59 * time.Second)
	p.Away("acme")
	p.Wait()
	if got := ws.hits.Load(); got != 1 {
		t.Fatalf("wake GETs within the cooldown: got %d, want 1", got)
	}
	clk.Advance(time.Second)
	p.Away("acme")
	p.Away("acme")
	p.Wait()
	if got := ws.hits.Load(); got != 2 {
		t.Fatalf("wake GETs after the cooldown: got %d, want 2", got)
	}
	if got := m.get(wake.ResultOK); got != 2 {
		t.Errorf("connector_wake_pokes_total{result=ok} = %d, want 2", got)
	}
}

// TestOnePokeAcrossInstances: two instances sharing a store, each seeing
// the buffered inbound, poke the gateway once per cooldown between them.
func TestOnePokeAcrossInstances(t *testing.T) {
	ws := newWakeServer(t, http.StatusOK)
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	defer st.Close()
	targets := targetsOf(wake.Target{Tenant: "acme", Gateway: "gw1", URL: ws.URL})
	var pokers []*wake.Poker
	for range 2 {
		p, err := wake.New(wake.Config{Targets: targets, Claims: st.Claims(), Clock: clk, Cooldown: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		pokers = append(pokers, p)
	}
	for round := 1; round <= 3; round++ {
		for _, p := range pokers {
			p.Away("acme")
		}
		for _, p := range pokers {
			p.Wait()
		}
		if got := ws.hits.Load(); int(got) != round {
			t.Fatalf("round %d: wake GETs %d, want %d (one per cooldown across the instances)", round, got, round)
		}
		clk.Advance(30 * time.Second)
	}
}

// TestPokeOutcomes: redirects are not followed, errors and unreachable
// hosts are counted, and nothing of the URL's path or query is logged.
func TestPokeOutcomes(t *testing.T) {
	redirect := newWakeServer(t, http.StatusFound)
	failing := newWakeServer(t, http.StatusServiceUnavailable)
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL
	gone.Close() // connection refused
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	defer st.Close()
	m := &counter{}
	var logs strings.Builder
	var logMu sync.Mutex
	p, err := wake.New(wake.Config{
		Targets: targetsOf(
			wake.Target{Tenant: "acme", Gateway: "redirect", URL: redirect.URL + "/w?token=SECRETQUERY"},
			wake.Target{Tenant: "acme", Gateway: "failing", URL: failing.URL},
			wake.Target{Tenant: "acme", Gateway: "gone", URL: goneURL},
		),
		Claims: st.Claims(), Clock: clk, Metrics: m, Log: newLogger(&logs, &logMu),
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Away("acme")
	p.Wait()
	if got := redirect.hits.Load(); got != 1 {
		t.Errorf("redirecting wake URL: %d requests, want 1 (the redirect is not followed)", got)
	}
	for result, want := range map[string]int{wake.ResultOK: 1, wake.ResultHTTPError: 1, wake.ResultUnreachable: 1} {
		if got := m.get(result); got != want {
			t.Errorf("result %s counted %d, want %d", result, got, want)
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), "SECRETQUERY") || strings.Contains(logs.String(), "/w?") {
		t.Errorf("the log shows the wake URL's path or query:\n%s", logs.String())
	}
}

// TestPokeTimeout: a wake URL that never answers is given up after the
// timeout, and does not hold up the next poke of another tenant.
func TestPokeTimeout(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	ok := newWakeServer(t, http.StatusOK)
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	defer st.Close()
	m := &counter{}
	p, err := wake.New(wake.Config{
		Targets: targetsOf(wake.Target{Tenant: "slow", Gateway: "g1", URL: hang.URL}, wake.Target{Tenant: "fast", Gateway: "g2", URL: ok.URL}),
		Claims:  st.Claims(), Clock: clk, Metrics: m, Timeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Away("slow")
	p.Away("fast")
	p.Wait()
	if ok.hits.Load() != 1 || m.get(wake.ResultUnreachable) != 1 {
		t.Fatalf("fast tenant poked %d times, timeouts counted %d; want 1 and 1", ok.hits.Load(), m.get(wake.ResultUnreachable))
	}
}

// TestPokeStoreError: a registry that cannot be read is counted, not
// retried before the cooldown.
func TestPokeStoreError(t *testing.T) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	defer st.Close()
	m := &counter{}
	p, err := wake.New(wake.Config{
		Targets: func(context.Context, string) ([]wake.Target, error) { return nil, errors.New("down") },
		Claims:  st.Claims(), Clock: clk, Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Away("acme")
	p.Away("acme")
	p.Wait()
	if got := m.get(wake.ResultStoreError); got != 1 {
		t.Fatalf("store errors counted %d, want 1", got)
	}
	if _, err := wake.New(wake.Config{}); err == nil {
		t.Fatal("New without Targets and Claims: want an error")
	}
}

// TestOnePokeAcrossInstancesOnRedis: two instances, each with its own
// connection to one real Redis, both seeing a burst of buffered inbound:
// the gateway gets one GET between them.
func TestOnePokeAcrossInstancesOnRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ws := newWakeServer(t, http.StatusOK)
	targets := targetsOf(wake.Target{Tenant: "acme", Gateway: "gw1", URL: ws.URL})
	var pokers []*wake.Poker
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), RedisPrefix: "waketest:"})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		p, err := wake.New(wake.Config{Targets: targets, Claims: st.Claims(), Cooldown: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		pokers = append(pokers, p)
	}
	var wg sync.WaitGroup
	for range 5 {
		for _, p := range pokers {
			wg.Go(func() { p.Away("acme") })
		}
	}
	wg.Wait()
	for _, p := range pokers {
		p.Wait()
	}
	if got := ws.hits.Load(); got != 1 {
		t.Fatalf("wake GETs from two instances on one Redis: %d, want 1", got)
	}
}

// TestGatewaysSharingAWakeURLShareOnePoke (issue 22): 500 gateways of one
// tenant registered one wake URL; a burst of buffered inbound makes one
// GET to it per cooldown, not one per gateway.
func TestGatewaysSharingAWakeURLShareOnePoke(t *testing.T) {
	ws := newWakeServer(t, http.StatusOK)
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	defer st.Close()
	var targets []wake.Target
	for i := range 500 {
		targets = append(targets, wake.Target{Tenant: "acme", Gateway: "gw" + strconv.Itoa(i), URL: ws.URL + "/wake"})
	}
	p, err := wake.New(wake.Config{Targets: targetsOf(targets...), Claims: st.Claims(), Clock: clk, Cooldown: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ {
		for range 10 {
			p.Away("acme")
		}
		p.Wait()
		if got := ws.hits.Load(); int(got) != round {
			t.Fatalf("cooldown %d: %d wake GETs from 500 gateways sharing one URL, want %d", round, got, round)
		}
		clk.Advance(time.Minute)
	}
}

// TestWakePokesPerHostAreBounded: a tenant's 20 gateways with distinct
// wake URLs on one host (other paths and ports) get Config.PerHost GETs
// per cooldown between two instances; the others are counted host_limit
// and go in a later cooldown. Another host keeps its own budget.
func TestWakePokesPerHostAreBounded(t *testing.T) {
	servers := []*wakeServer{newWakeServer(t, http.StatusOK), newWakeServer(t, http.StatusOK)} // one host, two ports
	other := newWakeServer(t, http.StatusOK)
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	defer st.Close()
	var targets []wake.Target
	for i := range 20 {
		targets = append(targets, wake.Target{Tenant: "acme", Gateway: "gw" + strconv.Itoa(i), URL: servers[i%2].URL + "/wake/" + strconv.Itoa(i)})
	}
	targets = append(targets, wake.Target{Tenant: "acme", Gateway: "elsewhere", URL: strings.Replace(other.URL, "127.0.0.1", "localhost", 1) + "/w"})
	m := &counter{}
	var pokers []*wake.Poker
	for range 2 {
		p, err := wake.New(wake.Config{Targets: targetsOf(targets...), Claims: st.Claims(), Clock: clk, Cooldown: time.Minute, PerHost: 3, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		pokers = append(pokers, p)
	}
	round := func() {
		for _, p := range pokers {
			p.Away("acme")
		}
		for _, p := range pokers {
			p.Wait()
		}
	}
	hostHits := func() int32 { return servers[0].hits.Load() + servers[1].hits.Load() }
	round()
	if got := hostHits(); got != 3 {
		t.Fatalf("GETs to one host from 20 wake URLs: %d, want 3 (PerHost) between the instances", got)
	}
	if got := other.hits.Load(); got != 1 {
		t.Fatalf("GETs to the other host: %d, want 1", got)
	}
	// Each of the 17 URLs without a slot is counted by every instance that
	// took its cooldown lease to look: at least one, and both unless one
	// looked while the other held it (then it skips the URL as poked).
	if got := m.get(wake.ResultHostLimit); got < 17 || got > 2*17 {
		t.Fatalf("host_limit counted %d, want 17 to 34 (the 17 URLs without a slot, once or on each instance)", got)
	}
	clk.Advance(time.Minute)
	round()
	if got := hostHits(); got != 6 {
		t.Fatalf("after a cooldown: %d GETs to the host, want 6", got)
	}
}

// TestWakePerHostBudgetSeesThroughAddressSpellings: wake URLs naming one
// IP address spelled differently ([::ffff:127.0.0.1], [::ffff:7f00:1],
// [0:0::ffff:7f00:1] ... are all 127.0.0.1) share the host's budget;
// otherwise a tenant multiplies Config.PerHost by the spellings it
// registers.
func TestWakePerHostBudgetSeesThroughAddressSpellings(t *testing.T) {
	ws := newWakeServer(t, http.StatusOK)
	port := ws.URL[strings.LastIndexByte(ws.URL, ':'):]
	spellings := []string{"127.0.0.1", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0::ffff:7f00:1]", "[0::ffff:7f00:0001]", "[0:0:0:0:0:ffff:127.0.0.1]"}
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	defer st.Close()
	var targets []wake.Target
	for i := range 18 {
		url := "http://" + spellings[i%len(spellings)] + port + "/wake/" + strconv.Itoa(i)
		if _, err := wake.ValidateURL(url); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		targets = append(targets, wake.Target{Tenant: "acme", Gateway: "gw" + strconv.Itoa(i), URL: url})
	}
	p, err := wake.New(wake.Config{Targets: targetsOf(targets...), Claims: st.Claims(), Clock: clk, Cooldown: time.Minute, PerHost: 3})
	if err != nil {
		t.Fatal(err)
	}
	p.Away("acme")
	p.Wait()
	if got := ws.hits.Load(); got != 3 {
		t.Fatalf("GETs to 127.0.0.1 from 18 wake URLs in %d spellings: %d, want 3 (PerHost)", len(spellings), got)
	}
}
