package discord

import (
	"crypto/ed25519"
	"net/http"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/session"
)

const (
	secretGW1       = "gw1-hmac-secret-0123456789abcdef"
	secretGW2       = "gw2-hmac-secret-fedcba9876543210"
	loopInteraction = "aW50ZXJhY3Rpb246MTIzNDU2Nzg5MDEyMzQ1Njc4OTA-full-loop-token"
)

// TestFullLoop runs the platform behind the real relay: a Gateway event and
// a signed slash command reach tenant t1's gateway socket, its replies (send
// and follow_up) reach the fake Discord as the right REST requests, tenant
// t2 can neither see nor act on t1's chats and capabilities, the gateway's
// command manifest is reconciled, and no log line of the whole run holds
// the bot token or the interaction token.
func TestFullLoop(t *testing.T) {
	logs := newLogCapture()
	fake := discordtest.New(t, discordtest.Options{Token: testToken})
	world(fake)
	fake.AddInteractionToken(loopInteraction)
	pub, priv, _ := ed25519.GenerateKey(nil)
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secretGW1}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{secretGW2}}}},
	}
	cfg := testConfig(fake, pub)
	p, err := New(cfg, platform.Deps{Log: logs.logger(), Vault: sharedVault, Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p}, Log: logs.logger()})
	if err := fake.WaitSession(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}

	gw := h.Dial(t, "gw1", secretGW1)
	gw.Send(t, map[string]any{"type": "hello", "platform": "discord", "botId": "9000", "command_manifest": []any{
		map[string]any{"name": "new", "description": "Start a new conversation"},
		map[string]any{"name": "model", "description": "Show or change the model", "options": []any{
			map[string]any{"type": 3, "name": "name", "description": "Model name", "required": false}}},
		map[string]any{"name": "Bad Name!", "description": "dropped"},
	}})
	d := gw.Next(t, contract.TypeDescriptor).Descriptor
	if d.Platform != "discord" || d.MaxMessageLength != 2000 || !d.HasOp("follow_up") || !d.HasOp("get_chat_info") || !d.HasOp("react") || d.HasOp("draft") {
		t.Fatalf("descriptor = %+v", d)
	}
	gw2 := h.Dial(t, "gw2", secretGW2)
	gw2.Hello(t, "discord", "9000")

	// Platform event -> t1's gateway socket -> reply -> fake REST.
	if err := fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", msg("7100", threadPlan, guildLab, "how is the deploy going?", true)); err != nil {
		t.Fatal(err)
	}
	ev, buf := gw.NextInbound(t)
	if buf != "" {
		gw.Ack(t, buf)
	}
	if ev.Source.ChatID != threadPlan || ev.Source.ChatType != "thread" || ev.Source.ScopeID != guildLab || ev.MessageID != "7100" {
		t.Fatalf("inbound = %+v", ev)
	}
	res := gw.Outbound(t, "discord", map[string]any{"op": "send", "chat_id": ev.Source.ChatID, "content": "Deploy is at 80% \U0001F680",
		"reply_to": ev.MessageID, "metadata": map[string]any{}})
	if !res.Success || res.MessageID == "" {
		t.Fatalf("send = %+v", res)
	}
	req, err := fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Method == "POST" && r.Path == "/api/v9/channels/103/messages"
	})
	if err != nil || !strings.Contains(string(req.Body), `"message_reference":{"message_id":"7100"`) ||
		!strings.Contains(string(req.Body), "Deploy is at 80% \U0001F680") {
		t.Fatalf("send request = %s %v", req.Body, err)
	}

	// Slash command via the signed webhook -> inbound without the token ->
	// follow_up resolves the token from the vault.
	body := slashBody("8300", loopInteraction, guildLab, chanGeneral)
	resp, err := http.DefaultClient.Do(discordtest.InteractionRequest(h.URL+"/discord/interactions", priv, time.Now(), body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("webhook status %d", resp.StatusCode)
	}
	f := gw.Next(t, contract.TypeInbound)
	if f.BufferID != "" {
		gw.Ack(t, f.BufferID)
	}
	if strings.Contains(string(f.Raw), loopInteraction) || f.Event.Text != "/model gpt" {
		t.Fatalf("slash inbound = %s", f.Raw)
	}
	key := session.Key(&f.Event.Source, session.DefaultOptions)
	followUp := map[string]any{"op": "follow_up", "session_key": key, "kind": "discord.interaction_token", "content": "Model set to gpt", "metadata": map[string]any{}}
	if res := gw.Outbound(t, "discord", followUp); !res.Success {
		t.Fatalf("follow_up = %+v", res)
	}
	if _, err := fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Method == "POST" && r.Path == "/api/v9/webhooks/9000/"+loopInteraction && strings.Contains(string(r.Body), "Model set to gpt")
	}); err != nil {
		t.Fatal(err)
	}

	// Tenant t2 can neither act on t1's chat nor wield t1's capability.
	if res := gw2.Outbound(t, "discord", map[string]any{"op": "send", "chat_id": threadPlan, "content": "hijack", "reply_to": nil, "metadata": map[string]any{}}); res.Success || res.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 send to t1's chat = %+v", res)
	}
	if res := gw2.Outbound(t, "discord", followUp); res.Success {
		t.Fatalf("t2 follow_up with t1's session = %+v", res)
	}
	// t2 only ever sees its own guild's events.
	if err := fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", msg("7101", chanOther, guildOther, "hello t2", true)); err != nil {
		t.Fatal(err)
	}
	ev2, buf2 := gw2.NextInbound(t)
	if buf2 != "" {
		gw2.Ack(t, buf2)
	}
	if ev2.Source.ScopeID != guildOther || ev2.MessageID != "7101" {
		t.Fatalf("t2's first inbound = %+v", ev2)
	}

	// The manifest was reconciled: a PUT with the valid entries on t1's
	// guild, and globally for DMs (t1 is the DM tenant).
	for _, path := range []string{"/api/v9/applications/9000/guilds/" + guildLab + "/commands", "/api/v9/applications/9000/commands"} {
		put, err := fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
			return r.Method == "PUT" && r.Path == path
		})
		if err != nil || strings.Contains(string(put.Body), "Bad Name") || !strings.Contains(string(put.Body), `"name":"model"`) {
			t.Fatalf("command PUT %s = %s %v", path, put.Body, err)
		}
	}

	// Log scan: the whole run's logs hold neither secret.
	logs.waitFor(t, `msg="discord commands updated" platform=discord scope="guild 100"`)
	all := logs.text()
	for _, secret := range []string{testToken, loopInteraction, secretGW1, secretGW2} {
		if strings.Contains(all, secret) {
			t.Fatalf("a secret appears in the logs")
		}
	}
	if !strings.Contains(all, "discord gateway connected") {
		t.Fatalf("capture missed the platform's logs:\n%s", all)
	}
}
