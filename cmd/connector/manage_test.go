package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/idtoken/idtokentest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/relay"
	"connector/relay/relaytest"
)

// TestManageLinkFlow drives the management plane against a running
// connector, the fake Discord and the fake Bot API, without a restart:
// gateways of tenants a and b ask /manage/link for codes; users 71 and 72
// DM "/link <code>" to the bot on Discord, user 81 on Telegram; the DMs
// are consumed (answered in the DM, never delivered) and link each user,
// so that in guild 500, which no tenant is bound to, user 71's messages
// reach only a and 72's only b, each user's DM reaches their own tenant,
// and an unlinked user's message reaches nobody. A used code is refused.
// A scope claimed with the principal any takes unlinked authors (once the
// claimant's relevance policy lets them through), and another tenant's
// linked author there too (claims come before links); a second claim is
// 409, and a claim of a channel Discord does not show in the named guild
// is 403.
// /manage/deprovision, called by the Portal with an identity token naming
// gw-b (a's token naming it is 404), closes b's socket 4401, refuses its
// next upgrade and drops its links.
func TestManageLinkFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newAdminRig(t)
	dfake := discordtest.New(t, discordtest.Options{Token: crashDiscordToken})
	dfake.AddGuild(discordtest.Guild{ID: "500", Name: "Shared"},
		discordtest.Channel{ID: "501", Type: 0, GuildID: "500", Name: "general"},
		discordtest.Channel{ID: "502", Type: 0, GuildID: "500", Name: "b-desk"})
	for _, dm := range []string{"601", "602", "603"} {
		dfake.AddChannel(discordtest.Channel{ID: dm, Type: 1})
	}
	pub, _, _ := ed25519.GenerateKey(nil)
	idKey := idtokentest.Key(t)
	keyFile := filepath.Join(t.TempDir(), "authority.pem")
	if err := os.WriteFile(keyFile, idtokentest.PublicPEM(t, idKey), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
ops: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
log: {level: debug, format: json}
tenants:
  - {id: a, gateways: [{id: gw-a, secrets: [sa]}]}
  - id: b
discord:
  public_key: %s
  application_id: "9000"
  api_base_url: %s
  gateway_url: %s
telegram:
  api_server_url: %s
  webhook_url: https://connector.example/telegram/webhook
enroll: {public_key_file: %q, audience: connector}
`, hex.EncodeToString(pub), dfake.URL, dfake.GatewayURL, r.tfake.URL, keyFile)
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
	// b's gateway is made through the admin API: deprovision revokes it.
	bSecret := envLine(t, r.cli(t, "gateway", "add", "b", "gw-b"), "GATEWAY_RELAY_SECRET")
	secrets := map[string]string{"a": "sa", "b": bSecret}

	gws := map[string]*relaytest.Client{}
	for _, id := range []string{"a", "b"} {
		c := r.dial(t, "gw-"+id, secrets[id])
		for _, p := range []string{"discord", "telegram"} {
			if _, err := c.Hello(ctx, p, ""); err != nil {
				t.Fatalf("gw-%s hello %s: %v", id, p, err)
			}
		}
		gws[id] = c
	}
	manageAs := func(bearer, path, body string, want int) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+bearer)
		var out map[string]any
		if err := json.Unmarshal([]byte(post(t, req, want, path+" "+body)), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	manage := func(tenant, path, body string, want int) map[string]any {
		t.Helper()
		return manageAs(relaytest.Token("gw-"+tenant, secrets[tenant], time.Now()), path, body, want)
	}
	// portal is the Portal's identity token of tenant for gateway.
	portal := func(tenant, gateway string) string {
		return idtokentest.Sign(t, idKey, map[string]any{"tid": tenant, "aud": "agent:" + gateway, "sub": "owner-of-" + tenant,
			"exp": time.Now().Add(5 * time.Minute).Unix()})
	}
	codeOf := func(out map[string]any) string {
		t.Helper()
		code, _ := out["code"].(string)
		if code == "" || out["command"] != "/link "+code {
			t.Fatalf("link answer %v", out)
		}
		return code
	}
	n := 0
	say := func(user, channel, guild, text string) {
		t.Helper()
		n++
		m := map[string]any{
			"id": strconv.Itoa(8000 + n), "channel_id": channel, "content": text,
			"type": 0, "timestamp": "2026-01-15T12:00:00.000000+00:00", "author": map[string]any{"id": user, "username": "u" + user},
			"mentions": []any{}, "attachments": []any{}, "embeds": []any{},
		}
		if guild != "" {
			m["guild_id"] = guild
			m["member"] = map[string]any{"roles": []any{}}
		}
		if err := dfake.Dispatch(ctx, "MESSAGE_CREATE", m); err != nil {
			t.Fatalf("dispatch %q: %v", text, err)
		}
	}
	replied := func(channel, want string) {
		t.Helper()
		_, err := dfake.WaitRequest(ctx, func(q discordtest.Request) bool {
			return q.Method == http.MethodPost && q.Path == "/api/v9/channels/"+channel+"/messages" && strings.Contains(string(q.Body), want)
		})
		if err != nil {
			t.Fatalf("no reply %q in DM %s: %v", want, channel, err)
		}
	}

	codeA := codeOf(manage("a", "/manage/link", `{"instanceId":"b"}`, http.StatusOK)) // the body's instance is ignored
	codeB := codeOf(manage("b", "/manage/link", `{"platform":"discord"}`, http.StatusOK))
	codeT := codeOf(manage("a", "/manage/link", `{"platform":"telegram","ttlSeconds":300}`, http.StatusOK))
	say("71", "601", "", "/link "+strings.ToLower(codeA))
	replied("601", platform.LinkedReply)
	say("72", "602", "", "/link "+codeB)
	replied("602", platform.LinkedReply)
	say("73", "603", "", "/link "+codeA) // used
	replied("603", platform.LinkFailReply)
	r.telegram(t, 1, 81, "/link "+codeT)
	calls, err := r.tfake.WaitCalls(ctx, "sendMessage", 1)
	if err != nil {
		t.Fatalf("waiting for the Telegram /link reply: %v", err)
	}
	if calls[0].Form["chat_id"] != "81" || calls[0].Form["text"] != platform.LinkedReply {
		t.Fatalf("telegram /link reply %v", calls[0].Form)
	}

	say("71", "501", "500", "71 in the guild")
	say("72", "501", "500", "72 in the guild")
	say("73", "501", "500", "73 in the guild") // unlinked, unbound guild: nobody
	say("71", "601", "", "71 in a DM")
	say("72", "602", "", "72 in a DM")
	r.telegram(t, 2, 81, "81 in a telegram DM")
	tgGroup := `{"update_id":3,"message":{"message_id":3,"date":1767225300,"chat":{"id":-100500,"type":"group","title":"G"},"from":{"id":81,"is_bot":false,"first_name":"U"},"text":"81 in a telegram group"}}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+"/telegram/webhook", strings.NewReader(tgGroup))
	req.Header.Set("X-Telegram-Bot-Api-Secret-Token", adminTGSecret)
	post(t, req, http.StatusOK, "telegram group message")
	// Messages of different chats may arrive in any order; a /link DM
	// delivered to a gateway would show up here.
	for tenant, want := range map[string][]string{
		"a": {"71 in the guild", "71 in a DM", "81 in a telegram DM", "81 in a telegram group"},
		"b": {"72 in the guild", "72 in a DM"},
	} {
		var got []string
		for range want {
			got = append(got, nextText(t, gws[tenant]))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("tenant %s got %q, want %q", tenant, got, want)
		}
	}
	// a may answer its users' DMs, b may not.
	for _, c := range []struct {
		tenant, platform, chat string
		ok                     bool
	}{{"a", "discord", "601", true}, {"b", "discord", "601", false}, {"a", "telegram", "81", true}, {"b", "telegram", "81", false}} {
		res, err := gws[c.tenant].Outbound(ctx, c.platform, map[string]any{"op": "send", "chat_id": c.chat, "content": "hi", "reply_to": nil, "metadata": map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Success != c.ok {
			t.Fatalf("tenant %s send to %s %s: success %v (%s), want %v", c.tenant, c.platform, c.chat, res.Success, res.Error, c.ok)
		}
	}

	// b claims channel 502 for any author: unlinked 73 reaches b there.
	manage("b", "/manage/scope", `{"platform":"discord","guildId":"500","channelId":"502"}`, http.StatusOK)
	manage("b", "/manage/principal", `{"platform":"discord","principal":"any"}`, http.StatusOK)
	manage("a", "/manage/scope", `{"platform":"discord","guildId":"500","channelId":"502"}`, http.StatusConflict)
	// The visibility floor: Discord's own view of the channel (the fake's
	// GET /channels/{id}) must put it in the claimed guild.
	for _, body := range []string{
		`{"platform":"discord","channelId":"501"}`,                 // no guild named
		`{"platform":"discord","guildId":"999","channelId":"501"}`, // another guild
		`{"platform":"discord","guildId":"500","channelId":"777"}`, // no such channel
		`{"platform":"discord","channelId":"601"}`,                 // a DM channel
		`{"platform":"discord","guildId":"500","channelId":"abc"}`, // not a channel id
	} {
		manage("a", "/manage/scope", body, http.StatusForbidden)
	}
	// Relevance still applies to non-owners: b drops the mention rule.
	manage("b", "/relay/policy", `{"platform":"discord","requireAddress":false,"freeResponseScopes":[],"allowOtherBots":false}`, http.StatusOK)
	say("73", "502", "500", "73 at b's desk")
	say("71", "502", "500", "71 at b's desk") // a's user, in b's claim: b's
	for _, want := range []string{"73 at b's desk", "71 at b's desk"} {
		if got := nextText(t, gws["b"]); got != want {
			t.Fatalf("b got %q, want %q", got, want)
		}
	}

	// Deprovision b, as the Portal does with its identity token: its socket
	// closes 4401 at once, the next upgrade too, and 72 reaches nobody
	// (a's next inbound is 71's next message). a's token cannot name gw-b.
	manageAs(portal("a", "gw-b"), "/manage/deprovision", `{}`, http.StatusNotFound)
	// "At once": the deprovision closes it before its answer (the relay
	// logs the revocation before the change's audit line), not the
	// registry's periodic look later; the close's transit is not timed.
	from := len(r.child.stderr.String())
	manageAs(portal("b", "gw-b"), "/manage/deprovision", `{"instanceId":"gw-a"}`, http.StatusOK)
	r.child.waitLogOrder(t, from, `"msg":"gateway revoked: its connections closed","tenant":"b","gateway_id":"gw-b"`, `"op":"manage_deprovision","outcome":"ok"`)
	cctx, ccancel := context.WithTimeout(context.Background(), crashWait)
	defer ccancel()
	code, reason, err := gws["b"].Closed(cctx)
	if err != nil {
		t.Fatalf("timed out after %v waiting for gw-b's socket to close after the deprovision: %v", crashWait, err)
	}
	if code != websocket.StatusCode(contract.CloseUnauthorized) || reason != relay.ReasonRevoked {
		t.Fatalf("gw-b closed %d %q, want 4401 %q", code, reason, relay.ReasonRevoked)
	}
	c := r.dial(t, "gw-b", bSecret)
	if _, err := c.Hello(ctx, "discord", ""); err == nil {
		t.Fatal("a deprovisioned gateway's upgrade was accepted")
	}
	if code, _, _ := c.Closed(ctx); code != websocket.StatusCode(contract.CloseUnauthorized) {
		t.Fatalf("deprovisioned gw-b's upgrade closed %d, want 4401", code)
	}
	say("72", "501", "500", "72 after deprovision")
	say("71", "501", "500", "71 after deprovision")
	if got := nextText(t, gws["a"]); got != "71 after deprovision" {
		t.Fatalf("a got %q", got)
	}
	r.child.waitLog(t, `"op":"manage_deprovision","outcome":"ok","tenant":"b","gateway_id":"gw-b","auth":"identity"`)
	for _, secret := range []string{codeA, codeB, codeT, bSecret} {
		if strings.Contains(r.child.stderr.String(), secret) {
			t.Fatal("the log shows a link code or secret")
		}
	}
}
