package main

// Black-box test of the stock gateway's credential routes and the wake
// poke against a running connector: enrollment and self-provision as
// hermes gateway enroll and the gateway's boot post them, then /relay with
// the returned credentials; a gateway that went idle is woken by a GET to
// its wake URL.

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/idtoken/idtokentest"
)

// stockPost posts body as the stock gateway does (urllib: JSON, bearer,
// Accept) and decodes the JSON answer.
func stockPost(t *testing.T, url, bearer string, body any, want int) map[string]any {
	t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+bearer)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	var out map[string]any
	if err := json.Unmarshal([]byte(post(t, req, want, "POST "+url)), &out); err != nil {
		t.Fatalf("POST %s: the answer is not JSON: %v", url, err)
	}
	return out
}

// startEnrollRig starts an admin rig whose connector verifies identity
// tokens of a new authority key (audience connector), with a wake
// cooldown of 1 h, and returns the rig and the key.
func startEnrollRig(t *testing.T) (*adminRig, *rsa.PrivateKey) {
	t.Helper()
	key := idtokentest.Key(t)
	keyFile := filepath.Join(t.TempDir(), "authority.pem")
	if err := os.WriteFile(keyFile, idtokentest.PublicPEM(t, key), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newAdminRig(t)
	cfg, err := os.ReadFile(r.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg = append(cfg, fmt.Sprintf("enroll: {public_key_file: %q, audience: connector}\nrelay: {wake_cooldown: 1h}\n", keyFile)...)
	if err := os.WriteFile(r.config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	r.start(t)
	return r, key
}

// TestStockGatewayEnrollProvisionWake: an operator onboards a tenant and
// mints an enrollment token with the CLI; the gateway enrolls with it and
// its identity token, and connects with the returned credentials. A
// managed gateway self-provisions twice (two platforms, one secret) with
// route keys and a wake URL, receives inbound of its routed chat, goes
// idle, and the next inbound pokes its wake URL once per cooldown.
func TestStockGatewayEnrollProvisionWake(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	var wakes atomic.Int32
	wakeSeen := make(chan string, 10)
	wakeSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		wakes.Add(1)
		wakeSeen <- fmt.Sprintf("%s %s body=%d auth=%q", r.Method, r.URL.Path, len(body), r.Header.Get("Authorization"))
	}))
	defer wakeSrv.Close()
	r, key := startEnrollRig(t)
	base := "http://" + r.child.addr
	identity := func(tenant string) string {
		return idtokentest.Sign(t, key, map[string]any{"tid": tenant, "aud": "connector", "sub": "owner-of-" + tenant,
			"exp": time.Now().Add(5 * time.Minute).Unix()})
	}

	// Self-hosted: enroll with a token the operator minted.
	r.cli(t, "tenant", "add", "acme")
	enrollToken := envLine(t, r.cli(t, "enroll-token", "acme", "1h"), "GATEWAY_RELAY_ENROLL_TOKEN")
	creds := stockPost(t, base+"/relay/enroll", identity("acme"), map[string]string{"enrollmentToken": enrollToken, "gatewayId": "gw-laptop"}, http.StatusOK)
	if creds["gatewayId"] != "gw-laptop" || creds["tenant"] != "acme" || creds["secret"] == "" {
		t.Fatalf("enroll answered %v", creds)
	}
	r.connect(t, "gw-laptop", creds["secret"].(string)) // hello, descriptor
	// The token was single use.
	again := stockPost(t, base+"/relay/enroll", identity("acme"), map[string]string{"enrollmentToken": enrollToken, "gatewayId": "gw-laptop"}, http.StatusForbidden)
	if again["error"] == "" {
		t.Fatal("a refused enrollment carries no error")
	}
	stockPost(t, base+"/relay/enroll", "not-a-jwt", map[string]string{"enrollmentToken": "x", "gatewayId": "g"}, http.StatusUnauthorized)

	// Managed: self-provision, one POST per fronted platform, all with the
	// identity token the boot resolved once.
	r.cli(t, "tenant", "add", "fleet")
	boot := identity("fleet")
	provision := func(platform string, keys []string) map[string]any {
		return stockPost(t, base+"/relay/provision", boot, map[string]any{
			"gatewayId": "gw-fly", "platform": platform, "botId": "", "gatewayEndpoint": "",
			"routeKeys": keys, "instanceId": "inst-1", "wakeUrl": wakeSrv.URL + "/wake"}, http.StatusOK)
	}
	first := provision("telegram", []string{"0777"})
	second := provision("relay", nil)
	if first["secret"] == "" || second["secret"] != first["secret"] || first["tenant"] != "fleet" {
		t.Fatalf("provision answered %v then %v; want one secret for both", first, second)
	}
	if keys, _ := first["routeKeys"].([]any); len(keys) != 1 || keys[0] != "777" {
		t.Fatalf("routeKeys answered %v", first["routeKeys"])
	}
	fly := r.connect(t, "gw-fly", first["secret"].(string))
	r.telegram(t, 10, 777, "to the fleet")
	inbound(t, fly, "to the fleet")

	// The gateway drains (going_idle, ack) and sleeps: the next inbound is
	// buffered and pokes the wake URL with a bare GET, once per cooldown.
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if err := fly.Send(ctx, map[string]string{"type": contract.TypeGoingIdle}); err != nil {
		t.Fatal(err)
	}
	if _, err := fly.Next(ctx, contract.TypeGoingIdleAck); err != nil {
		t.Fatalf("waiting for going_idle_ack: %v", err)
	}
	_ = fly.Close()
	r.telegram(t, 11, 777, "while asleep")
	select {
	case got := <-wakeSeen:
		if got != `GET /wake body=0 auth=""` {
			t.Fatalf("wake request %s, want an unsigned GET without a body", got)
		}
	case <-ctx.Done():
		t.Fatalf("timed out after %v waiting for the wake GET", crashWait)
	}
	r.telegram(t, 12, 777, "still asleep") // within the cooldown: no second GET
	woken := r.connect(t, "gw-fly", first["secret"].(string))
	inbound(t, woken, "while asleep")
	inbound(t, woken, "still asleep")
	if n := wakes.Load(); n != 1 {
		t.Fatalf("wake GETs %d, want 1 per cooldown", n)
	}
	metrics := scrape(t, r)
	// Enrollments and provisions are gateways' changes, not the admin API's.
	if !strings.Contains(metrics, `connector_wake_pokes_total{result="ok"} 1`) ||
		!strings.Contains(metrics, `connector_gateway_changes_total{op="relay_provision",outcome="ok"} 2`) ||
		!strings.Contains(metrics, `connector_gateway_changes_total{op="relay_enroll",outcome="ok"} 1`) ||
		strings.Contains(metrics, `connector_admin_changes_total{op="relay_`) {
		t.Fatalf("metrics lack the pokes, provisions or enrollment, or count them as admin changes:\n%s", grepLines(metrics, "wake_pokes|relay_"))
	}

	// The operator sets and clears a wake URL with the CLI.
	r.cli(t, "gateway", "wake", "acme", "gw-laptop", wakeSrv.URL+"/laptop")
	r.cli(t, "gateway", "wake", "acme", "gw-laptop")

	logs := r.child.stderr.String()
	for _, secret := range []string{enrollToken, creds["secret"].(string), first["secret"].(string)} {
		if strings.Contains(logs, secret) {
			t.Fatal("the connector log shows a secret or token")
		}
	}
	if !strings.Contains(logs, `"subject":"owner-of-fleet"`) {
		t.Fatal("the log does not say who provisioned")
	}
}

// scrape returns the running connector's /metrics.
func scrape(t *testing.T, r *adminRig) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+r.child.ops+"/metrics", nil)
	return post(t, req, http.StatusOK, "GET /metrics")
}

// grepLines keeps the lines of s matching pattern.
func grepLines(s, pattern string) string {
	re := regexp.MustCompile(pattern)
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if re.MatchString(line) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestProvisionFloodWakesOncePerCooldown (issue 22): one identity token
// provisions 500 gateways of one tenant as fast as it can, all with one
// wake URL. The tenant's max_gateways (100) stops them at 100 (429 after);
// a buffered inbound then makes one GET to the wake URL per cooldown, not
// one per gateway. The figures are logged.
func TestProvisionFloodWakesOncePerCooldown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	var wakes atomic.Int32
	wakeSrv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { wakes.Add(1) }))
	defer wakeSrv.Close()
	r, key := startEnrollRig(t)
	r.cli(t, "tenant", "add", "fleet")
	token := idtokentest.Sign(t, key, map[string]any{"tid": "fleet", "aud": "connector", "sub": "mallory", "exp": time.Now().Add(5 * time.Minute).Unix()})
	status := map[int]int{}
	started := time.Now()
	for i := range 500 {
		body := map[string]any{"gatewayId": fmt.Sprintf("gw-%03d", i), "platform": "telegram", "routeKeys": []string{"777"}, "wakeUrl": wakeSrv.URL + "/wake"}
		data, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+"/relay/provision", bytes.NewReader(data))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		status[resp.StatusCode]++
	}
	took := time.Since(started)
	r.telegram(t, 10, 777, "while every gateway sleeps")
	r.telegram(t, 11, 777, "and again")
	// The pokes are done once the counter has the wake server's count and
	// keeps it for three scrapes in a row.
	okPokes := regexp.MustCompile(`connector_wake_pokes_total\{result="ok"\} (\d+)`)
	deadline := time.Now().Add(crashWait)
	for same, last := 0, -1; same < 3; {
		n := -1
		if m := okPokes.FindStringSubmatch(scrape(t, r)); m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		switch {
		case n > 0 && n == last && n == int(wakes.Load()):
			same++
		default:
			same, last = 0, n
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d wake pokes counted, %d GETs seen", crashWait, n, wakes.Load())
		}
		time.Sleep(100 * time.Millisecond) // polling interval of the metrics page
	}
	t.Logf("500 provisions in %v: %v (status: count); wake GETs after 2 buffered inbound: %d", took.Round(time.Millisecond), status, wakes.Load())
	if status[http.StatusOK] != 100 || status[http.StatusTooManyRequests] != 400 {
		t.Errorf("provisions answered %v, want 100 200s and 400 429s", status)
	}
	if n := wakes.Load(); n != 1 {
		t.Errorf("wake GETs %d, want 1 per cooldown", n)
	}
}
