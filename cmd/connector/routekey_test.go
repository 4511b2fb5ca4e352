package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"connector/contract"
	"connector/idtoken/idtokentest"
	"connector/platform/discord/discordtest"
	"connector/platform/whatsapp/whatsapptest"
	"connector/relay/relaytest"
)

// TestRouteKeyYieldsToAGrant: user 71, linked to tenant a, talks in
// channel 501 of guild 500, which nobody binds, so a holds the channel by
// grant. Tenant b's provision naming guild 500 as a route key is refused
// 409, and 71's messages there still reach a, which may still post
// there. Before, the route key was bound: 71's messages in the guild
// reached b and a's sends there were declined. b's provision of 50 free
// guilds and 500, sent again, reads a's grants of 500 alone (before, it
// read every key's again: 101 vault misses). In the other order the
// first route key holds the guild: b binds guild 800 first, and 71's
// message there reaches b.
func TestRouteKeyYieldsToAGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	key := idtokentest.Key(t)
	keyFile := filepath.Join(t.TempDir(), "authority.pem")
	if err := os.WriteFile(keyFile, idtokentest.PublicPEM(t, key), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newAdminRig(t)
	dfake := discordtest.New(t, discordtest.Options{Token: crashDiscordToken})
	dfake.AddGuild(discordtest.Guild{ID: "500", Name: "Shared"},
		discordtest.Channel{ID: "501", Type: 0, GuildID: "500", Name: "general"})
	dfake.AddGuild(discordtest.Guild{ID: "800", Name: "B's"},
		discordtest.Channel{ID: "801", Type: 0, GuildID: "800", Name: "b-general"})
	pub, _, _ := ed25519.GenerateKey(nil)
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
ops: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
log: {level: debug, format: json}
tenants:
  - {id: a, gateways: [{id: gw-a, secrets: [sa]}]}
  - {id: b, gateways: [{id: gw-b, secrets: [sb]}]}
discord:
  public_key: %s
  application_id: "9000"
  api_base_url: %s
  gateway_url: %s
  tenants: {b: {free_response_channels: ["*"]}}
enroll: {public_key_file: %q, audience: connector}
`, hex.EncodeToString(pub), dfake.URL, dfake.GatewayURL, keyFile)
	if err := os.WriteFile(r.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env = append(r.env, "DISCORD_BOT_TOKEN="+crashDiscordToken)
	r.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if err := dfake.WaitSession(ctx, 1); err != nil {
		t.Fatalf("waiting for the Discord Gateway session: %v", err)
	}
	r.cli(t, "bind", "a", "discord", "user", "71")
	dial := func(gateway, secret string) *relaytest.Client {
		t.Helper()
		c, err := relaytest.Dial(ctx, "ws://"+r.child.addr+"/relay", relaytest.Token(gateway, secret, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CloseNow() })
		if _, err := c.Hello(ctx, "discord", ""); err != nil {
			t.Fatalf("%s hello: %v", gateway, err)
		}
		return c
	}
	a := dial("gw-a", "sa")
	say := func(n int, channel, guild, text string) {
		t.Helper()
		if err := dfake.Dispatch(ctx, "MESSAGE_CREATE", map[string]any{
			"id": strconv.Itoa(8000 + n), "channel_id": channel, "guild_id": guild, "content": text,
			"type": 0, "timestamp": "2026-01-15T12:00:00.000000+00:00", "author": map[string]any{"id": "71", "username": "u71"},
			"mentions": []any{}, "attachments": []any{}, "embeds": []any{}, "member": map[string]any{"roles": []any{}},
		}); err != nil {
			t.Fatalf("dispatch %q: %v", text, err)
		}
	}
	say(1, "501", "500", "71 in the shared guild")
	if got := nextText(t, a); got != "71 in the shared guild" {
		t.Fatalf("a got %q", got)
	}

	boot := idtokentest.Sign(t, key, map[string]any{"tid": "b", "aud": "connector", "sub": "owner-of-b", "exp": time.Now().Add(5 * time.Minute).Unix()})
	provisionKeys := func(keys []string, want int) map[string]any {
		return stockPost(t, "http://"+r.child.addr+"/relay/provision", boot, map[string]any{
			"gatewayId": "gw-b-fly", "platform": "discord", "botId": "", "gatewayEndpoint": "",
			"routeKeys": keys, "instanceId": "inst-b"}, want)
	}
	provision := func(guild string, want int) map[string]any { return provisionKeys([]string{guild}, want) }
	provision("500", http.StatusConflict)
	// Keys are judged against the grants as they are bound: a provision
	// refused at its last key, sent again, looks up that key's grants
	// alone (two vault misses at most, a's grant of the chat and of the
	// guild), not every key's again.
	keys := make([]string, 0, 51)
	for i := range 50 {
		keys = append(keys, strconv.Itoa(900+i))
	}
	keys = append(keys, "500")
	provisionKeys(keys, http.StatusConflict)
	misses := r.child.metric(t, "connector_vault_misses_total", "")
	provisionKeys(keys, http.StatusConflict)
	if n := r.child.metric(t, "connector_vault_misses_total", "") - misses; n > 2 {
		t.Fatalf("the repeat of a refused provision missed the vault %v times; want at most 2 (the refused key's grants)", n)
	}
	say(2, "501", "500", "71 again")
	if got := nextText(t, a); got != "71 again" {
		t.Fatalf("a got %q after b's route key of the guild", got)
	}
	res, err := a.Outbound(ctx, "discord", map[string]any{"op": "send", "chat_id": "501", "content": "hi", "reply_to": nil, "metadata": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success {
		t.Fatalf("a's send in its granted channel after b's route key: %s %s", res.Code, res.Error)
	}

	// The first route key of a free guild holds it.
	b := dial("gw-b-fly", provision("800", http.StatusOK)["secret"].(string))
	say(3, "801", "800", "71 in b's guild")
	if got := nextText(t, b); got != "71 in b's guild" {
		t.Fatalf("b got %q", got)
	}
	res, err = a.Outbound(ctx, "discord", map[string]any{"op": "send", "chat_id": "801", "content": "hi", "reply_to": nil, "metadata": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Success || res.Code != contract.CodeEgressDeclined {
		t.Fatalf("a's send in b's guild: success %v, code %q; want the decline", res.Success, res.Code)
	}
}

// TestRouteKeyYieldsToAWhatsAppGrant: user 447700900123, linked to
// tenant a, writes to business number waBiz3, which nobody binds, so the
// message reaches a by the link. Tenant b's provision naming that number
// as a route key is refused 409, and the user's messages there still
// reach a. Before, WhatsApp recorded no grant: the route key was bound and
// the user's next message reached b. A number none of a's linked users
// wrote to is b's by its route key.
func TestRouteKeyYieldsToAWhatsAppGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	key := idtokentest.Key(t)
	keyFile := filepath.Join(t.TempDir(), "authority.pem")
	if err := os.WriteFile(keyFile, idtokentest.PublicPEM(t, key), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newAdminRig(t)
	fake := whatsapptest.New(t, waAccessToken)
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
ops: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
log: {level: debug, format: json}
tenants:
  - {id: a, gateways: [{id: gw-a, secrets: [sa]}]}
  - {id: b, gateways: [{id: gw-b, secrets: [sb]}]}
whatsapp:
  api_url: %s/
  api_version: v20.0
  allow_all_users: true
enroll: {public_key_file: %q, audience: connector}
`, fake.URL, keyFile)
	if err := os.WriteFile(r.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env = append(r.env, "WHATSAPP_APP_SECRET="+waAppSecret, "WHATSAPP_VERIFY_TOKEN="+waVerifyToken, "WHATSAPP_ACCESS_TOKEN="+waAccessToken)
	r.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	const user = "447700900123"
	r.cli(t, "bind", "a", "whatsapp_cloud", "user", user)
	dial := func(gateway, secret string) *relaytest.Client {
		t.Helper()
		c, err := relaytest.Dial(ctx, "ws://"+r.child.addr+"/relay", relaytest.Token(gateway, secret, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CloseNow() })
		if _, err := c.Hello(ctx, "whatsapp_cloud", ""); err != nil {
			t.Fatalf("%s hello: %v", gateway, err)
		}
		return c
	}
	a := dial("gw-a", "sa")
	say := func(biz whatsapptest.Business, n int, text string) {
		t.Helper()
		body := whatsapptest.Text(biz, user, "Ada", "wamid.R"+strconv.Itoa(n), text)
		post(t, whatsapptest.SignedRequest("http://"+r.child.addr+"/whatsapp/webhook", waAppSecret, body), http.StatusOK, "whatsapp webhook")
	}
	say(waBiz3, 1, "to the shared number")
	if got := nextText(t, a); got != "to the shared number" {
		t.Fatalf("a got %q", got)
	}

	boot := idtokentest.Sign(t, key, map[string]any{"tid": "b", "aud": "connector", "sub": "owner-of-b", "exp": time.Now().Add(5 * time.Minute).Unix()})
	provision := func(number string, want int) map[string]any {
		return stockPost(t, "http://"+r.child.addr+"/relay/provision", boot, map[string]any{
			"gatewayId": "gw-b-fly", "platform": "whatsapp_cloud", "botId": "", "gatewayEndpoint": "",
			"routeKeys": []string{number}, "instanceId": "inst-b"}, want)
	}
	provision(waBiz3.PhoneNumberID, http.StatusConflict)
	say(waBiz3, 2, "again")
	if got := nextText(t, a); got != "again" {
		t.Fatalf("a got %q after b's route key of the number", got)
	}

	// The first route key of a number nobody's linked users wrote to holds it.
	b := dial("gw-b-fly", provision(waBiz2.PhoneNumberID, http.StatusOK)["secret"].(string))
	say(waBiz2, 3, "to b's number")
	if got := nextText(t, b); got != "to b's number" {
		t.Fatalf("b got %q", got)
	}
}
