package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/redistest"
	"connector/registry/change"
	"connector/relay/relaytest"
)

// TestStockGatewayPolicyThenHello plays the stock gateway's boot against a
// running connector and the fake Discord: POST /relay/policy with its
// upgrade token (a wrong token is refused 401 with a Bearer challenge, a
// body with more than one JSON value 400), then the upgrade and
// hello. The declared policy decides which Discord messages reach the
// tenant: with requireAddress an unaddressed message is dropped and an
// addressed one delivered; a later boot declaring requireAddress false
// lets the unaddressed one through. The tenant's YAML makes every channel
// free-response, so the declaration is what drops.
func TestStockGatewayPolicyThenHello(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newCrashRig(t, connectorBinary(t), false)
	r.start(t)

	declare := func(token, body string, want int) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+"/relay/policy", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		post(t, req, want, "POST /relay/policy "+body)
	}
	token := relaytest.Token("gw1", crashGatewaySecret, time.Now())
	// A refused bearer is told the scheme (RFC 9110 §11.6.1).
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+"/relay/policy", strings.NewReader(`{"platform":"discord","requireAddress":true}`))
	req.Header.Set("Authorization", "Bearer "+relaytest.Token("gw1", "wrong-secret", time.Now()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /relay/policy with a wrong secret: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Bearer realm="connector relay"` {
		t.Fatalf("POST /relay/policy with a wrong secret: %d WWW-Authenticate %q, want 401 with a Bearer challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	// One JSON value, as on every other JSON route: anything after it is refused.
	declare(token, `{"platform":"discord","requireAddress":false} {"platform":"discord"}`, http.StatusBadRequest)
	declare(token, `{"platform":"discord","requireAddress":false}garbage`, http.StatusBadRequest)
	declare(token, `{"platform":"discord","requireAddress":true,"freeResponseScopes":[],"allowOtherBots":false}`, http.StatusOK)
	gw := r.gateway(t)

	say := func(id int, text string, mention bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), crashWait)
		defer cancel()
		mentions := []any{}
		if mention {
			text = "<@9000> " + text
			mentions = append(mentions, map[string]any{"id": "9000", "username": "hermes", "bot": true})
		}
		m := map[string]any{
			"id": strconv.Itoa(id), "channel_id": "501", "guild_id": "500", "content": text,
			"type": 0, "timestamp": "2026-01-15T12:00:00.000000+00:00", "author": map[string]any{"id": "71", "username": "u71"},
			"member": map[string]any{"roles": []any{}}, "mentions": mentions, "attachments": []any{}, "embeds": []any{},
		}
		if err := r.dfake.Dispatch(ctx, "MESSAGE_CREATE", m); err != nil {
			t.Fatalf("dispatch %q: %v", text, err)
		}
	}
	next := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), crashWait)
		defer cancel()
		f, err := gw.Next(ctx, contract.TypeInbound)
		if err != nil {
			t.Fatalf("waiting for inbound: %v", err)
		}
		_ = gw.Ack(ctx, f.BufferID)
		return f.Event.Text
	}

	say(7001, "unaddressed 1", false)
	say(7002, "addressed", true)
	if got := next(); !strings.Contains(got, "addressed") || strings.Contains(got, "unaddressed") {
		t.Fatalf("first inbound %q, want the addressed message (the unaddressed one dropped)", got)
	}

	declare(token, `{"platform":"discord","requireAddress":false,"freeResponseScopes":[],"allowOtherBots":false}`, http.StatusOK)
	say(7003, "unaddressed 2", false)
	if got := next(); got != "unaddressed 2" {
		t.Fatalf("inbound %q after requireAddress false, want %q", got, "unaddressed 2")
	}
	if !strings.Contains(r.child.stderr.String(), `"msg":"relevance policy declared","op":"relay_policy","outcome":"ok","tenant":"t1","gateway_id":"gw1"`) {
		t.Error("the declaration was not logged")
	}
}

// TestStockGatewayTelegramPolicy plays the stock gateway's boot for
// Telegram against a running connector and the fake Bot API (webhook
// mode): POST /relay/policy, then the upgrade and hello. The declared
// policy decides which messages of the tenant's group (-4001, ungated by
// its YAML) reach it: with requireAddress an unaddressed message is
// dropped and a reply to the bot delivered; with the group among the
// freeResponseScopes, or a later boot declaring requireAddress false, the
// unaddressed one gets through.
func TestStockGatewayTelegramPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newCrashRig(t, connectorBinary(t), false)
	r.start(t)

	token := relaytest.Token("gw1", crashGatewaySecret, time.Now())
	declare := func(body string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+"/relay/policy", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		post(t, req, http.StatusOK, "POST /relay/policy "+body)
	}
	declare(`{"platform":"telegram","requireAddress":true,"freeResponseScopes":[],"allowOtherBots":false}`)
	gw := r.gateway(t)

	say := func(id int, text string, replyToBot bool) {
		t.Helper()
		reply := ""
		if replyToBot {
			reply = `,"reply_to_message":{"message_id":1,"date":1767225200,"chat":{"id":-4001,"type":"group"},"from":{"id":123456,"is_bot":true,"first_name":"Hermes"},"text":"earlier"}`
		}
		body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1767225300,"chat":{"id":-4001,"type":"group","title":"Lab"},"from":{"id":71,"is_bot":false,"first_name":"U"},"text":%q%s}}`,
			id, id, text, reply)
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+"/telegram/webhook", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", crashWebhookSecret)
		post(t, req, http.StatusOK, fmt.Sprintf("telegram webhook update %d", id))
	}
	next := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), crashWait)
		defer cancel()
		f, err := gw.Next(ctx, contract.TypeInbound)
		if err != nil {
			t.Fatalf("waiting for inbound: %v", err)
		}
		_ = gw.Ack(ctx, f.BufferID)
		return f.Event.Text
	}

	say(5001, "unaddressed 1", false)
	say(5002, "a reply to the bot", true)
	if got := next(); got != "a reply to the bot" {
		t.Fatalf("first inbound %q, want the reply to the bot (the unaddressed message dropped)", got)
	}
	declare(`{"platform":"telegram","requireAddress":true,"freeResponseScopes":["-4001"],"allowOtherBots":false}`)
	say(5003, "unaddressed 2", false)
	if got := next(); got != "unaddressed 2" {
		t.Fatalf("inbound %q in a declared free-response chat, want %q", got, "unaddressed 2")
	}
	declare(`{"platform":"telegram","requireAddress":true,"freeResponseScopes":[],"allowOtherBots":false}`)
	say(5004, "unaddressed 3", false)
	declare(`{"platform":"telegram","requireAddress":false,"freeResponseScopes":[],"allowOtherBots":false}`)
	say(5005, "unaddressed 4", false)
	if got := next(); got != "unaddressed 4" {
		t.Fatalf("inbound %q after requireAddress false, want %q (3 dropped)", got, "unaddressed 4")
	}
}

// TestGatewayChangesAreRateLimited: a gateway's POST /relay/policy and
// /manage/* requests share one allowance on an instance
// (change.GatewayBurst, then one per change.GatewayEvery): beyond it both
// are answered 429 with Retry-After, and nothing is stored or applied.
// Before, every request stored a change that made every instance apply
// the registry again, so one token could keep the fleet applying.
func TestGatewayChangesAreRateLimited(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newCrashRig(t, connectorBinary(t), false)
	r.start(t)
	send := func(path, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+relaytest.Token("gw1", crashGatewaySecret, time.Now()))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		_ = resp.Body.Close()
		return resp
	}
	policy := `{"platform":"discord","requireAddress":true,"freeResponseScopes":[],"allowOtherBots":false}`
	// untilRefused sends path's body until it is answered 429 with a
	// Retry-After, and returns how many were answered 200 before. The
	// allowance earns one more request a GatewayEvery of real time (the
	// binary's clock): a busy machine's slow requests may earn some, so
	// up to that many more 200s are the limit's, and one more is not.
	untilRefused := func(path, body string, allowance int) int {
		t.Helper()
		start := time.Now()
		for ok := 0; ; ok++ {
			resp := send(path, body)
			if resp.StatusCode == http.StatusTooManyRequests {
				if retry, _ := strconv.Atoi(resp.Header.Get("Retry-After")); retry < 1 {
					t.Fatalf("%s past the allowance: 429 with Retry-After %q, want a wait", path, resp.Header.Get("Retry-After"))
				}
				return ok
			}
			if earned := allowance + int(time.Since(start)/change.GatewayEvery) + 1; resp.StatusCode != http.StatusOK || ok+1 > earned {
				t.Fatalf("%s request %d: %d; want 200 within the allowance (%d by now), then 429", path, ok+1, resp.StatusCode, earned)
			}
		}
	}
	if n := untilRefused("/relay/policy", policy, change.GatewayBurst); n < change.GatewayBurst {
		t.Fatalf("/relay/policy refused after %d declarations, want at least the burst of %d", n, change.GatewayBurst)
	}
	// The allowance is spent: /manage/* shares it.
	untilRefused("/manage/principal", `{"platform":"discord","principal":"any"}`, 0)
}

// TestRelayPolicyStoreErrorIsNotAnswered: a declaration whose store write
// fails (Redis gone) answers 500 {"error":"internal"}, never the store's
// error, which names Redis's address. Before, the answer was the error's
// text, and the log line did not have it.
func TestRelayPolicyStoreErrorIsNotAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and a redis-server")
	}
	srv := redistest.Start(t, redistest.Options{})
	r := newCrashRig(t, connectorBinary(t), false)
	doc, err := os.ReadFile(r.config)
	if err != nil {
		t.Fatal(err)
	}
	storeDoc := fmt.Sprintf("store: {backend: redis, redis_url: %q}\n", srv.URL())
	if err := os.WriteFile(r.config, []byte(strings.Replace(string(doc), "tenants:\n", storeDoc+"tenants:\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	r.start(t)
	srv.Kill(t)
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+"/relay/policy", strings.NewReader(`{"platform":"discord","requireAddress":true}`))
	req.Header.Set("Authorization", "Bearer "+relaytest.Token("gw1", crashGatewaySecret, time.Now()))
	body := post(t, req, http.StatusInternalServerError, "POST /relay/policy with Redis gone")
	if strings.TrimSpace(body) != `{"error":"internal"}` {
		t.Fatalf("POST /relay/policy with Redis gone answered %s, want {\"error\":\"internal\"} (never the store's error; Redis is at %s)", body, srv.Addr())
	}
}
