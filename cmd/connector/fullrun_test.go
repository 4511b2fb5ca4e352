package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/platform/discord/discordtest"
	"connector/platform/telegram/telegramtest"
	"connector/relay/relaytest"
	"connector/session"
)

// Every secret the full run configures; none may appear in any log line.
const (
	fullGatewaySecret    = "gw-secret-2f9c1e7a55d04b1c"
	fullDiscordToken     = "MTQwMDAwMDAwMDAwMDAwMDAw.discord-bot-token-8c1f"
	fullTelegramToken    = "123456:TELEGRAM-bot-token-9d3e0a4c"
	fullTelegramSecret   = "tg-webhook-secret-5b7d2c"
	fullNexscopeToken    = "nexscope-shared-token-a61e3f"
	fullInteractionToken = "aW50ZXJhY3Rpb246ZnVsbC1ydW4-interaction-token-7e"
)

// TestFullRunLogsNoSecret runs the connector from a config file with every
// platform against local fakes, drives an event in and an action out on each
// platform plus refused credentials of every kind, and then scans every log
// line (debug level) and the stdout banner for every configured secret.
func TestFullRunLogsNoSecret(t *testing.T) {
	dfake := discordtest.New(t, discordtest.Options{Token: fullDiscordToken})
	dfake.AddGuild(discordtest.Guild{ID: "500", Name: "Lab"},
		discordtest.Channel{ID: "501", Type: 0, GuildID: "500", Name: "general"})
	dfake.AddInteractionToken(fullInteractionToken)
	tfake := telegramtest.New(t, fullTelegramToken)
	pub, priv, _ := ed25519.GenerateKey(nil)

	doc := fmt.Sprintf(`listen: 127.0.0.1:0
log: {level: debug, format: json}
tenants:
  - id: t1
    gateways:
      - id: gw1
        secrets: [%q]
discord:
  public_key: %s
  application_id: "9000"
  api_base_url: %s
  gateway_url: %s
  guilds: {"500": t1}
telegram:
  api_server_url: %s
  webhook_url: https://connector.example/telegram/webhook
  chats: {"42": t1}
nexscope:
  rooms: [{name: default, tenant: t1}]
`, fullGatewaySecret, hex.EncodeToString(pub), dfake.URL, dfake.GatewayURL, tfake.URL)
	path := filepath.Join(t.TempDir(), "connector.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"DISCORD_BOT_TOKEN": fullDiscordToken, "TELEGRAM_BOT_TOKEN": fullTelegramToken,
		"TELEGRAM_WEBHOOK_SECRET": fullTelegramSecret, "NEXSCOPE_TOKEN": fullNexscopeToken,
	}
	cfg, gen, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	var logs, banner syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, randomOpsPort(cfg), gen, log, &banner, func(a listenAddrs) { addrCh <- a.Addr })
	}()
	addr := listening(t, addrCh, done)
	base := "http://" + addr
	wctx, wcancel := context.WithTimeout(context.Background(), serveWait)
	defer wcancel()

	// Refused credentials of every kind.
	bad, err := relaytest.Dial(wctx, "ws://"+addr+"/relay", relaytest.Token("gw1", "not-"+fullGatewaySecret, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := bad.Closed(wctx); code != 4401 {
		t.Fatalf("bad gateway token closed %d", code)
	}
	if m, _, err := websocket.Dial(wctx, "ws://"+addr+"/ws?name=mallory&v=1&token=wrong-"+fullNexscopeToken, nil); err == nil {
		if _, _, err := m.Read(wctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Fatalf("nexscope with a wrong token: %v, want close 1008", err)
		}
	}
	post := func(url string, hdr map[string]string, body string) int {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(base+"/telegram/webhook", map[string]string{"X-Telegram-Bot-Api-Secret-Token": "wrong"}, `{"update_id":1}`); code != 401 {
		t.Fatalf("telegram webhook with a wrong secret: %d", code)
	}
	badSig := discordtest.InteractionRequest(base+"/discord/interactions", priv, time.Now(), []byte(`{"type":1}`))
	badSig.Header.Set("X-Signature-Ed25519", strings.Repeat("00", 64))
	if resp, err := http.DefaultClient.Do(badSig); err != nil || resp.StatusCode != 401 {
		t.Fatalf("discord interaction with a bad signature: %v %v", resp, err)
	}

	gw, err := relaytest.Dial(wctx, "ws://"+addr+"/relay", relaytest.Token("gw1", fullGatewaySecret, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	defer gw.CloseNow()
	for _, p := range []string{"discord", "telegram", "nexscope"} {
		if d, err := gw.Hello(wctx, p, ""); err != nil || d.Platform != p {
			t.Fatalf("hello %s: %+v %v", p, d, err)
		}
	}
	next := func(what string) relaytest.Frame {
		t.Helper()
		f, err := gw.Next(wctx, contract.TypeInbound)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := gw.Ack(wctx, f.BufferID); err != nil {
			t.Fatal(err)
		}
		return f
	}

	// Telegram: a webhook update in, a sendMessage out.
	update := `{"update_id":7,"message":{"message_id":5,"date":1767225300,"chat":{"id":42,"type":"private","first_name":"Ada"},"from":{"id":42,"is_bot":false,"first_name":"Ada"},"text":"hi telegram"}}`
	if code := post(base+"/telegram/webhook", map[string]string{"X-Telegram-Bot-Api-Secret-Token": fullTelegramSecret, "Content-Type": "application/json"}, update); code != 200 {
		t.Fatalf("telegram webhook: %d", code)
	}
	if f := next("telegram inbound"); f.Event.Text != "hi telegram" || f.Event.Source.ChatID != "42" {
		t.Fatalf("telegram inbound %+v", f.Event)
	}
	if res, err := gw.Outbound(wctx, "telegram", map[string]any{"op": "send", "chat_id": "42", "content": "hello Ada", "reply_to": nil, "metadata": map[string]any{}}); err != nil || !res.Success {
		t.Fatalf("telegram send: %+v %v", res, err)
	}
	if _, err := tfake.WaitCalls(wctx, "sendMessage", 1); err != nil {
		t.Fatal(err)
	}

	// Discord: a signed slash command in (its token into the vault), a
	// follow_up out.
	slash := `{"type":2,"id":"8300","application_id":"9000","token":"` + fullInteractionToken + `","guild_id":"500","channel_id":"501",` +
		`"channel":{"id":"501","type":0,"guild_id":"500","name":"general"},"member":{"user":{"id":"77","username":"ada","global_name":"Ada"}},` +
		`"data":{"id":"1","name":"status","type":1}}`
	req := discordtest.InteractionRequest(base+"/discord/interactions", priv, time.Now(), []byte(slash))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("discord interaction: %v %v", resp, err)
	}
	f := next("discord inbound")
	if f.Event.Text != "/status" || strings.Contains(string(f.Raw), fullInteractionToken) {
		t.Fatalf("discord inbound %s", f.Raw)
	}
	key := session.Key(&f.Event.Source, session.DefaultOptions)
	// The interaction came by webhook: the Gateway's guilds may not have
	// loaded yet, and chat owners are unknown until then (unavailable, sent
	// again as a gateway would).
	for {
		res, err := gw.Outbound(wctx, "discord", map[string]any{"op": "follow_up", "session_key": key, "kind": "discord.interaction_token", "content": "all good", "metadata": map[string]any{}})
		if err == nil && res.Code == contract.CodeUnavailable && strings.Contains(res.Error, "until the Gateway has loaded the guilds") {
			select {
			case <-wctx.Done():
				t.Fatalf("discord follow_up: still %+v when the wait for the Gateway's guilds ended", res)
			case <-time.After(20 * time.Millisecond): // polling interval of the guilds' loading
			}
			continue
		}
		if err != nil || !res.Success {
			t.Fatalf("discord follow_up: %+v %v", res, err)
		}
		break
	}

	// nexscope: a member's msg to the bot in, the bot's reply out.
	member, _, err := websocket.Dial(wctx, "ws://"+addr+"/ws?name=ada&v=1&token="+fullNexscopeToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer member.CloseNow()
	if _, _, err := member.Read(wctx); err != nil { // presence
		t.Fatal(err)
	}
	msg := `{"type":"msg","msgId":"m1","from":"ada","to":["hermes"],"role":"user","threadId":"t1","text":"hi nexscope"}`
	if err := member.Write(wctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	if f := next("nexscope inbound"); f.Event.Text != "hi nexscope" {
		t.Fatalf("nexscope inbound %+v", f.Event)
	}
	if res, err := gw.Outbound(wctx, "nexscope", map[string]any{"op": "send", "chat_id": "default", "content": "hi ada", "reply_to": "m1", "metadata": map[string]any{}}); err != nil || !res.Success {
		t.Fatalf("nexscope send: %+v %v", res, err)
	}
	for {
		_, data, err := member.Read(wctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"hi ada"`) {
			break
		}
	}
	_ = member.CloseNow()

	cancel()
	served(t, done)
	all := logs.String() + banner.String()
	if !strings.Contains(all, "gateway connected") || strings.Count(all, "\n") < 10 {
		t.Fatalf("the run logged too little to be a meaningful scan:\n%s", all)
	}
	for name, secret := range map[string]string{
		"gateway secret": fullGatewaySecret, "discord bot token": fullDiscordToken,
		"telegram bot token": fullTelegramToken, "telegram webhook secret": fullTelegramSecret,
		"nexscope token": fullNexscopeToken, "interaction token": fullInteractionToken,
	} {
		if strings.Contains(all, secret) {
			t.Errorf("the %s appears in the logs", name)
		}
		// Also its distinctive half, in case a secret was cut or wrapped.
		if half := secret[len(secret)/2:]; strings.Contains(all, half) {
			t.Errorf("part of the %s appears in the logs", name)
		}
	}
}
