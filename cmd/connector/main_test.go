package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/relay/relaytest"
)

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestConformanceKeysPassesEveryFixture(t *testing.T) {
	code, out, errOut := runCmd(t, "conformance", "keys", "../../session/testdata/session_keys.json")
	if code != 0 || !strings.HasSuffix(out, "254 passed, 0 failed\n") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

func TestConformanceReportsFailuresWithExpectedAndGot(t *testing.T) {
	bad := `[{"name": "tampered", "source": {"platform": "telegram", "chat_id": "1", "chat_type": "dm"}, "options": {}, "key": "agent:main:telegram:dm:2"}]`
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCmd(t, "conformance", "keys", path)
	if code != 1 || !strings.Contains(out, "expected key agent:main:telegram:dm:2") ||
		!strings.Contains(out, "got      key agent:main:telegram:dm:1") || !strings.HasSuffix(out, "0 passed, 1 failed\n") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

// TestConformanceRefusesAnEmptyFixture: a fixture without a case (an
// oracle run that wrote none, a JSON null) checks nothing, so it is not
// a pass: exit 2, as for a fixture that cannot be read.
func TestConformanceRefusesAnEmptyFixture(t *testing.T) {
	for _, kind := range []string{"keys", "events"} {
		for _, body := range []string{"[]", "null"} {
			path := filepath.Join(t.TempDir(), "empty.json")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if code, out, errOut := runCmd(t, "conformance", kind, path); code != 2 || !strings.Contains(errOut, "no case") {
				t.Errorf("conformance %s of %s: exit %d, stdout %q, stderr %q; want 2 saying it holds no case", kind, body, code, out, errOut)
			}
		}
	}
}

func TestConformanceEventsPassesEveryFixture(t *testing.T) {
	code, out, errOut := runCmd(t, "conformance", "events", "../../testdata/platform_events.json")
	if code != 0 || !strings.HasSuffix(out, "62 passed, 0 failed\n") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

func TestTokenCommandMintsTheGatewaysToken(t *testing.T) {
	code, out, _ := runCmd(t, "token", "-gateway-id", "gw-example", "-secret", "s3cr3t-example-secret")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	tok, err := contract.ParseToken(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := contract.NewTokenKeys([]string{"s3cr3t-example-secret"})
	if tok.GatewayID != "gw-example" || !verified(tok, &keys) {
		t.Fatalf("token %q does not verify", out)
	}
	stdin = strings.NewReader("") // no secret piped in either
	if code, _, _ := runCmd(t, "token", "-gateway-id", "x"); code != 2 {
		t.Fatalf("missing secret: exit %d", code)
	}
	// A lifetime the connector refuses is refused at mint time.
	t.Setenv(envTokenSecret, "s1")
	if code, out, errOut := runCmd(t, "token", "-gateway-id", "gw1", "-ttl", "2h"); code != 2 || out != "" || !strings.Contains(errOut, "at most 1h0m0s") {
		t.Fatalf("-ttl 2h: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = runCmd(t, "token", "-gateway-id", "gw1", "-ttl", "1h")
	tok, err = contract.ParseToken(strings.TrimSpace(out))
	keys, _ = contract.NewTokenKeys([]string{"s1"})
	if code != 0 || err != nil || !verified(tok, &keys) {
		t.Fatalf("-ttl 1h: exit %d, token %q does not verify (%v)", code, out, err)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	cases := map[string]string{
		"listen: 127.0.0.1:1\nlisten_typo: x\n":                                       `unknown key "listen_typo"`,
		"tenants:\n  - id: t1\n    gateways:\n      - id: gw1\n        secret: [s]\n": `unknown key "secret"`,
		"tenants:\n  - id: t1\n    gateways:\n      - id: gw1\n":                      "tenants[0].gateways[0].secrets",
		"tenants:\n  - gateways: []\n":                                                "tenants[0].id",
		"log:\n  level: loud\n":                                                       "log.level",
		"relay:\n  ping_interval: soon\n":                                             "soon",
		"tls:\n  cert_file: a.pem\n":                                                  "tls",
		"tenants:\n  - id: t1\n    session: {nexscope_key_platform: nexscop}\n":       "tenants[0].session.nexscope_key_platform",
		"tenants:\n  - id: t1\n    max_gateways: 10001\n":                             "tenants[0].max_gateways",
		"enroll: {max_token_lifetime: -1s}\n":                                         "enroll.max_token_lifetime: must not be negative",
	}
	for doc, want := range cases {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCmd(t, "serve", "-config", path, "-check")
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("config %q: exit %d, stderr %q, want mention of %q", doc, code, errOut, want)
		}
	}
}

func TestPinnedConfigChecksAndEnvAddsSecrets(t *testing.T) {
	doc := "listen: 127.0.0.1:8080\ntenants:\n  - id: t1\n    gateways:\n      - id: gw1\n        secrets: [\"s1\"]\n"
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "serve", "-config", path, "-check"); code != 0 || out != "config ok\n" {
		t.Fatalf("exit %d %q %q", code, out, errOut)
	}
	cfg, _, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, func(k string) (string, bool) {
		if k == "CONNECTOR_GATEWAY_SECRETS_GW1" {
			return "rotated-1, rotated-2", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Tenants[0].Gateways[0].Secrets; strings.Join(got, ",") != "s1,rotated-1,rotated-2" {
		t.Fatalf("secrets %v", got)
	}
}

// TestServeDefaultsEndToEnd runs the connector on its embedded defaults,
// connects a gateway with the printed credentials, and shuts it down the way
// SIGTERM does: the gateway sees 1001.
func TestServeDefaultsEndToEnd(t *testing.T) {
	cfg, gen, err := loadOrDefault(sources{dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	addrCh, opsCh := make(chan string, 1), make(chan string, 1)
	var banner bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, randomOpsPort(cfg), gen, relaytest.TestLogger(t), &banner, func(a listenAddrs) { opsCh <- a.OpsAddr; addrCh <- a.Addr })
	}()
	addr := listening(t, addrCh, done)
	opsAddr := <-opsCh
	if !strings.Contains(banner.String(), "GATEWAY_RELAY_SECRET="+gen.GatewaySecret) {
		t.Fatalf("banner does not say how to connect:\n%s", banner.String())
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Fatalf("healthz %d %q", resp.StatusCode, body)
	}

	resp, err = http.Get("http://" + opsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("metrics %d: %.200s", resp.StatusCode, body)
	}

	dctx, dcancel := context.WithTimeout(context.Background(), serveWait)
	defer dcancel()
	gw, err := relaytest.Dial(dctx, "ws://"+addr+"/relay", relaytest.Token(gen.GatewayID, gen.GatewaySecret, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	defer gw.CloseNow()
	if d, err := gw.Hello(dctx, "relay", ""); err != nil || d.Platform != "relay" || d.ContractVersion != 1 {
		t.Fatalf("hello: %+v %v", d, err)
	}
	// A nexscope member talks to the local gateway through the bot.
	member, _, err := websocket.Dial(dctx, "ws://"+addr+"/ws?name=alice&v=1&token="+gen.NexscopeToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer member.CloseNow()
	if _, msg, err := member.Read(dctx); err != nil || !strings.Contains(string(msg), `"presence"`) || !strings.Contains(string(msg), `"hermes"`) {
		t.Fatalf("presence: %s %v", msg, err)
	}
	err = member.Write(dctx, websocket.MessageText, []byte(`{"type":"msg","msgId":"m1","from":"alice","to":["hermes"],"role":"user","threadId":"t1","text":"hello bot"}`))
	if err != nil {
		t.Fatal(err)
	}
	in, err := gw.Next(dctx, contract.TypeInbound)
	if err != nil || in.Event.Text != "hello bot" || in.Event.Source.Platform != "nexscope" {
		t.Fatalf("inbound from nexscope: %+v %v", in.Event, err)
	}

	// The frame reaches the gateway while its store commit is under way;
	// the event is counted once the commit is done.
	waitMetrics(t, "http://"+opsAddr+"/metrics",
		`connector_gateway_connections{tenant="local"} 1`,
		`connector_inbound_events_total{outcome="queued",platform="nexscope",tenant="local"} 1`)
	_ = member.CloseNow()
	cancel()
	code, _, err := gw.Closed(dctx)
	if err != nil || code != 1001 {
		t.Fatalf("gateway closed with %d (%v), want 1001", code, err)
	}
	served(t, done)
}

// serve is serveReloading without a reload (SIGHUP ignored).
func serve(ctx context.Context, cfg *Config, gen *generatedSecrets, log *slog.Logger, stdout io.Writer, ready func(listenAddrs)) error {
	return serveReloading(ctx, cfg, gen, log, stdout, ready, nil)
}

// verified reports whether tok verifies against keys now.
func verified(tok contract.Token, keys *contract.TokenKeys) bool {
	_, err := tok.Match(keys, time.Now(), contract.TokenWindow{})
	return err == nil
}
