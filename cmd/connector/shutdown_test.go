package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connector/contract"
	"connector/platform/telegram/telegramtest"
	"connector/relay/relaytest"
)

// hangingTelegram is a Bot API whose sendMessage never answers (until the
// test ends): everything else goes to a telegramtest fake.
func hangingTelegram(t *testing.T) (apiURL string, sent <-chan struct{}) {
	t.Helper()
	fake := telegramtest.New(t, fullTelegramToken)
	target, _ := url.Parse(fake.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	ch := make(chan struct{}, 16)
	end := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/sendMessage") {
			ch <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-end:
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { close(end); srv.Close() })
	return srv.URL, ch
}

// startBinary runs the built binary with the config doc and env added to
// the test's environment, and waits for its banner.
func startBinary(t *testing.T, bin, doc string, env ...string) *child {
	t.Helper()
	path := filepath.Join(t.TempDir(), "connector.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return startChild(t, bin, append(os.Environ(), env...), path, t.TempDir(), false)
}

// waitDraining waits until the child's /readyz says it drains (503): it
// took the signal and is shutting down.
func (c *child) waitDraining(t *testing.T) {
	t.Helper()
	c.waitReadyz(t, http.StatusServiceUnavailable, "say the connector drains")
}

// waitReady waits until the child's /readyz answers 200: every platform
// runs and is ready, so its webhooks take events.
func (c *child) waitReady(t *testing.T) {
	t.Helper()
	c.waitReadyz(t, http.StatusOK, "say every platform is ready")
}

// waitReadyz waits until the child's /readyz answers code; what says what
// that means, for the failure.
func (c *child) waitReadyz(t *testing.T, code int, what string) {
	t.Helper()
	deadline := time.Now().Add(crashWait)
	for {
		resp, err := http.Get("http://" + c.ops + "/readyz")
		if err != nil {
			t.Fatalf("waiting for /readyz to %s: %v", what, err)
		}
		resp.Body.Close()
		if resp.StatusCode == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for /readyz to %s (%d)", crashWait, what, resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond) // polling interval of /readyz
	}
}

// TestBuiltBinaryShutdown runs the built connector with a Telegram op
// stuck on the platform: at the end of the grace period the gateway gets
// the op's result (unavailable, ambiguous) and then 1001; and a second
// SIGTERM during the shutdown exits at once instead of waiting out the
// grace period.
func TestBuiltBinaryShutdown(t *testing.T) {
	bin := connectorBinary(t)
	for _, tc := range []struct {
		name  string
		grace string
	}{
		{"grace period ends", "1s"},
		{"second signal", "10m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apiURL, sent := hangingTelegram(t)
			doc := fmt.Sprintf(`listen: 127.0.0.1:0
ops: {listen: 127.0.0.1:0}
shutdown_grace: %s
log: {level: info, format: text}
tenants: [{id: t1, gateways: [{id: gw1, secrets: [%q]}]}]
telegram:
  api_server_url: %s
  chats: {"42": t1}
`, tc.grace, fullGatewaySecret, apiURL)
			r := startBinary(t, bin, doc, "TELEGRAM_BOT_TOKEN="+fullTelegramToken)
			ctx, cancel := context.WithTimeout(context.Background(), serveWait)
			defer cancel()
			gw, err := relaytest.Dial(ctx, "ws://"+r.addr+"/relay", relaytest.Token("gw1", fullGatewaySecret, time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			defer gw.CloseNow()
			if _, err := gw.Hello(ctx, "telegram", ""); err != nil {
				t.Fatal(err)
			}
			id := relaytest.NewRequestID()
			if err := gw.Send(ctx, map[string]any{"type": "outbound", "requestId": id, "action": map[string]any{
				"op": "send", "chat_id": "42", "content": "stuck", "reply_to": nil, "metadata": map[string]any{}}}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-sent:
			case <-ctx.Done():
				t.Fatalf("timed out after %v waiting for the op to reach Telegram", serveWait)
			}
			if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if tc.name == "second signal" {
				r.waitDraining(t) // the first signal was taken
				if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				if code := r.waitExit(t, "after the second SIGTERM"); code != 1 || !strings.Contains(r.stderr.String(), "second signal") {
					t.Fatalf("exit %d, want 1 with a log line:\n%s", code, r.stderr.String())
				}
				return
			}
			f, err := gw.Next(ctx, contract.TypeOutboundResult)
			if err != nil {
				t.Fatalf("no outbound_result before the close: %v", err)
			}
			if f.RequestID != id || f.Result.Success || f.Result.Code != contract.CodeUnavailable || !f.Result.Ambiguous {
				t.Fatalf("result %s, want unavailable and ambiguous for %s", f.Raw, id)
			}
			if code, _, err := gw.Closed(ctx); code != 1001 {
				t.Fatalf("closed %d (%v), want 1001", code, err)
			}
			if code := r.waitExit(t, "after the grace period"); code != 0 {
				t.Fatalf("exit %d:\n%s", code, r.stderr.String())
			}
		})
	}
}

// TestShutdownDelayAnswersNotReadyBeforeTheListenerCloses: with
// shutdown_delay, SIGTERM first turns /readyz to 503 while the public
// listener still serves (a health check and a gateway's upgrade), so a load
// balancer sees the instance leave before its connections are refused; the
// connector then shuts down and exits 0.
func TestShutdownDelayAnswersNotReadyBeforeTheListenerCloses(t *testing.T) {
	bin := connectorBinary(t)
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
ops: {listen: 127.0.0.1:0}
shutdown_delay: 2s
log: {level: info, format: text}
tenants: [{id: t1, gateways: [{id: gw1, secrets: [%q]}]}]
`, fullGatewaySecret)
	r := startBinary(t, bin, doc)
	ops := "http://" + r.ops
	status := func(url string) int {
		resp, err := http.Get(url)
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(ops + "/readyz"); got != http.StatusOK {
		t.Fatalf("/readyz before SIGTERM: %d", got)
	}
	signaled := time.Now()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r.waitDraining(t)
	if got := status("http://" + r.addr + "/healthz"); got != http.StatusOK {
		t.Fatalf("the public listener stopped serving with /readyz at 503: /healthz %d", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), serveWait)
	defer cancel()
	gw, err := relaytest.Dial(ctx, "ws://"+r.addr+"/relay", relaytest.Token("gw1", fullGatewaySecret, time.Now()))
	if err != nil {
		t.Fatalf("a gateway's upgrade during shutdown_delay: %v", err)
	}
	defer gw.CloseNow()
	if _, err := gw.Hello(ctx, "relay", ""); err != nil {
		t.Fatal(err)
	}
	if code, _, err := gw.Closed(ctx); code != 1001 {
		t.Fatalf("closed %d (%v), want 1001 once the delay is over", code, err)
	}
	if code := r.waitExit(t, "after shutdown_delay"); code != 0 {
		t.Fatalf("exit %d:\n%s", code, r.stderr.String())
	}
	if d := time.Since(signaled); d < 2*time.Second {
		t.Fatalf("the shutdown ended %v after SIGTERM, before shutdown_delay", d)
	}
}
