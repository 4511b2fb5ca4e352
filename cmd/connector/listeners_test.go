package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/descriptor"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/relay"
	"connector/relay/relaytest"
)

// randomOpsPort moves cfg's operations listener to a free loopback port, so
// tests never contend for the default 127.0.0.1:9090.
func randomOpsPort(cfg *Config) *Config {
	cfg.Ops.Listen = "127.0.0.1:0"
	return cfg
}

// startServe runs serve on cfg until the test ends and returns its
// listeners.
func startServe(t *testing.T, cfg *Config, gen *generatedSecrets) listenAddrs {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan listenAddrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, randomOpsPort(cfg), gen, relaytest.TestLogger(t), &syncBuffer{}, func(a listenAddrs) { ready <- a })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("timed out after 30s waiting for serve to return")
		}
	})
	select {
	case a := <-ready:
		return a
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("timed out after 30s waiting for serve to listen")
	}
	return listenAddrs{}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestOperationalEndpointsAreOnTheOpsListenerOnly: /metrics, /readyz and
// /platforms expose tenant ids and counts, so the public listener (beside
// the webhooks) serves none of them, only /healthz.
func TestOperationalEndpointsAreOnTheOpsListenerOnly(t *testing.T) {
	cfg, gen, err := loadOrDefault(sources{dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Ops.Listen != "127.0.0.1:9090" {
		t.Fatalf("default ops.listen %q, want 127.0.0.1:9090", cfg.Ops.Listen)
	}
	cfg.Listen = "127.0.0.1:0"
	a := startServe(t, cfg, gen)
	pub, ops := "http://"+a.Addr, "http://"+a.OpsAddr
	for _, path := range []string{"/metrics", "/readyz", "/platforms"} {
		if code, _ := httpGet(t, pub+path); code != http.StatusNotFound {
			t.Errorf("public %s answered %d, want 404", path, code)
		}
	}
	if code, body := httpGet(t, pub+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("public /healthz %d %q", code, body)
	}
	code, body := httpGet(t, ops+"/metrics")
	if code != 200 {
		t.Fatalf("ops /metrics %d", code)
	}
	for _, want := range []string{
		`connector_build_info{commit="`,
		`connector_gateway_connections{tenant="local"} 0`, // before any gateway
		`connector_http_unauthenticated_connections `,
		`connector_http_connections_refused_total{reason="over_limit"} 0`,
		`connector_inbound_events_total{outcome="queued",platform="nexscope",tenant="local"} 0`,
		`connector_outbound_ops_total{op="send",platform="nexscope",result="platform_error"} 0`,
		`connector_outbound_seconds_bucket{op="send",platform="nexscope",le="0.00025"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("ops /metrics lacks %s", want)
		}
	}
	if strings.Contains(body, "0.00010936") {
		t.Error("histogram buckets are not rounded")
	}
	for _, path := range []string{"/readyz", "/platforms", "/healthz"} {
		if code, _ := httpGet(t, ops+path); code != 200 {
			t.Errorf("ops %s answered %d, want 200", path, code)
		}
	}
}

// downPlatform is a platform that cannot reach its service.
type downPlatform struct{}

func (downPlatform) Name() string                      { return "discord" }
func (downPlatform) Descriptor() descriptor.Descriptor { return descriptor.Descriptor{} }
func (downPlatform) Run(ctx context.Context, _ platform.Sink) error {
	<-ctx.Done()
	return nil
}
func (downPlatform) ChatTenant(context.Context, string) (string, error) {
	return "", platform.ErrUnavailable
}
func (downPlatform) Execute(context.Context, string, *contract.Action) contract.Result {
	return contract.Failed(contract.CodeUnavailable, "down")
}
func (downPlatform) Status() platform.Status {
	return platform.Status{Ready: false, Detail: "gateway unreachable"}
}

// TestReadinessMeansServingGateways: an unreachable platform leaves /readyz
// 200 (reported in its body and on /platforms), draining makes it 503.
func TestReadinessMeansServingGateways(t *testing.T) {
	var draining atomic.Bool
	mux := opsMux(http.NotFoundHandler(), &draining, []platform.Platform{downPlatform{}})
	get := func(path string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v: %s", path, err, rec.Body.String())
		}
		return rec.Code, body
	}
	code, body := get("/readyz")
	if code != 200 || body["ready"] != true || !strings.Contains(fmt.Sprint(body["platforms"]), "gateway unreachable") {
		t.Fatalf("/readyz with discord down: %d %v", code, body)
	}
	if code, body := get("/platforms"); code != 503 || body["ready"] != false {
		t.Fatalf("/platforms with discord down: %d %v", code, body)
	}
	draining.Store(true)
	if code, body := get("/readyz"); code != 503 || body["draining"] != true {
		t.Fatalf("/readyz while draining: %d %v", code, body)
	}
}

// TestSlowRequestsAndIdleConnectionsAreCutOff: a webhook body trickled in,
// headers never finished and an idle keep-alive connection are all closed
// by the server once their (here short) timeouts pass.
func TestSlowRequestsAndIdleConnectionsAreCutOff(t *testing.T) {
	dfake := discordtest.New(t, discordtest.Options{Token: fullDiscordToken})
	pub, _, _ := ed25519.GenerateKey(nil)
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
http: {read_header_timeout: 300ms, body_timeout: 300ms, idle_timeout: 300ms}
tenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}]
discord:
  public_key: %s
  application_id: "9000"
  api_base_url: %s
  gateway_url: %s
`, hex.EncodeToString(pub), dfake.URL, dfake.GatewayURL)
	path := filepath.Join(t.TempDir(), "connector.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, gen, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, func(k string) (string, bool) {
		if k == "DISCORD_BOT_TOKEN" {
			return fullDiscordToken, true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	a := startServe(t, cfg, gen)

	for _, tc := range []struct{ name, send string }{
		{"slow body to /discord/interactions",
			"POST /discord/interactions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"type\":"},
		{"unfinished headers", "GET /healthz HTTP/1.1\r\nHost: x\r\n"},
		{"idle keep-alive", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", a.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			// Whatever the server answers, it must then close.
			r := bufio.NewReader(c)
			_, err = io.Copy(io.Discard, r)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("timed out after 20s waiting for the server to close a connection with %s (timeouts are 300ms)", tc.name)
			}
		})
	}
}

// TestBodyDeadlineIsLiftedOnceTheBodyIsRead: a handler that read its whole
// body in time and then works longer than the body timeout (a delivery
// waiting for the store) keeps its request context.
func TestBodyDeadlineIsLiftedOnceTheBodyIsRead(t *testing.T) {
	const bodyTimeout = 100 * time.Millisecond
	result := make(chan string, 1)
	srv := httptest.NewServer(withBodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			result <- "body: " + err.Error()
			return
		}
		// An observation window four times the body timeout, not a
		// synchronization: the context must survive it.
		select {
		case <-r.Context().Done():
			result <- "request context cancelled after the body was read"
		case <-time.After(4 * bodyTimeout):
			result <- "ok"
		}
	}), bodyTimeout))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"update_id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case got := <-result:
		if got != "ok" {
			t.Fatal(got)
		}
	case <-time.After(serveWait):
		t.Fatalf("timed out after %v waiting for the handler", serveWait)
	}
}

// TestTakenAddressNamesTheSetting: when another process holds a listener's
// address (9090 is a popular port), the error names the key and its
// environment variable, so the operator knows what to change.
func TestTakenAddressNamesTheSetting(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for key, set := range map[string]func(*Config){
		"ops.listen":   func(c *Config) { c.Listen = "127.0.0.1:0"; c.Ops.Listen = addr },
		"listen":       func(c *Config) { c.Listen = addr; c.Ops.Listen = "127.0.0.1:0" },
		"admin.listen": func(c *Config) { c.Listen, c.Ops.Listen, c.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0", addr },
	} {
		cfg, gen, err := loadOrDefault(sources{dataDir: t.TempDir()}, noEnv)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Admin.Token = "admin-token-0123456789"
		set(cfg)
		err = serve(context.Background(), cfg, gen, slog.New(slog.DiscardHandler), io.Discard, nil)
		want := fmt.Sprintf("%s: %s is taken by another process; set %s in the config file, or $%s, to a free address", key, addr, key, envVariable(key))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s taken: %v, want %q", key, err, want)
		}
	}
}

// TestListenersOnOnePortRefused: two listeners on one port (of one
// address, or of every address and any) are refused by -check, naming
// both keys; before, -check said "config ok" and serve stopped saying that
// "another process" held the port. Port 0 and distinct ports pass.
func TestListenersOnOnePortRefused(t *testing.T) {
	token := "admin: {token: " + strings.Repeat("0123456789abcdef", 4) + ", listen: "
	for doc, want := range map[string]string{
		"listen: 127.0.0.1:18790\nops: {listen: 127.0.0.1:18790}\n":                        `ops.listen: "127.0.0.1:18790" is also listen`,
		"listen: 127.0.0.1:18790\n" + token + "\"127.0.0.1:18790\"}\n":                     `admin.listen: "127.0.0.1:18790" is also listen`,
		"ops: {listen: \":9090\"}\n" + token + "\"127.0.0.1:9090\"}\n":                     `admin.listen: "127.0.0.1:9090" is also ops.listen`,
		"listen: 0.0.0.0:8080\nops: {listen: 127.0.0.1:8080}\n":                            `ops.listen: "127.0.0.1:8080" is also listen`,
		"listen: 127.0.0.1:0\nops: {listen: 127.0.0.1:0}\n" + token + "\"127.0.0.1:0\"}\n": "",
		"listen: 127.0.0.1:8080\nops: {listen: 127.0.0.2:8080}\n":                          "",
	} {
		_, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", strings.TrimSpace(doc), err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error saying %q", strings.TrimSpace(doc), err, want)
		}
	}
}

// TestFailedStartShutsTheRelayDown: when the public port is taken, run
// fails and shuts the relay build started down (with Redis its tenant
// leases are given up then, not at their TTL); before, the relay kept
// running while the store closed under it.
func TestFailedStartShutsTheRelayDown(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg, gen, err := loadOrDefault(sources{dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.Ops.Listen = taken.Addr().String(), "127.0.0.1:0"
	c, err := build(cfg, slog.New(slog.DiscardHandler), memStore(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.run(context.Background(), gen, io.Discard, nil); err == nil {
		t.Fatal("run with the public port taken: no error")
	}
	if err := c.relay.Deliver(context.Background(), platform.Delivery{Tenant: "local"}); !errors.Is(err, relay.ErrShuttingDown) {
		t.Fatalf("relay after the failed start: Deliver = %v, want %v", err, relay.ErrShuttingDown)
	}
}

// stuckPlatform is a platform whose ingest does not stop when told to.
type stuckPlatform struct {
	downPlatform
	release chan struct{}
}

func (p stuckPlatform) Run(context.Context, platform.Sink) error {
	<-p.release
	return nil
}

// TestIngestThatDoesNotStopHoldsTheShutdownOnlyForTheGrace: a platform
// whose ingest ignores the shutdown held it for good (no deadline, the
// gateways never told to reconnect elsewhere); stopping the ingest now
// gives up after shutdown_grace and logs which platform did not stop.
func TestIngestThatDoesNotStopHoldsTheShutdownOnlyForTheGrace(t *testing.T) {
	logs := &syncBuffer{}
	release := make(chan struct{})
	defer close(release)
	c := &connector{cfg: &Config{ShutdownGrace: 200 * time.Millisecond}, log: slog.New(slog.NewJSONHandler(logs, nil)),
		platforms: []platform.Platform{stuckPlatform{release: release}}}
	stop := c.startIngest()
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stopping an ingest that does not stop still waits 10 s after it began (shutdown_grace 200ms)")
	}
	if !strings.Contains(logs.String(), `"platforms":["discord"]`) {
		t.Errorf("the log does not name the platform that did not stop: %s", logs.String())
	}
}
