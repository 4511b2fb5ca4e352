package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/platform/discord/discordtest"
	"connector/relay/relaytest"
)

// Issue 22 item 1 (scope hijack): a chat that belongs to another tenant by
// configuration, by an admin-API binding or by another tenant's claim can
// never be claimed, routed to or written into by anyone else. These tests
// run the connector binary against the fake Discord and the fake Bot API,
// with the gateways' real wire (relaytest).

// hijackConfig is the YAML of the hijack tests: tenants a and b; b owns
// Discord guild 700 and Telegram group -1001 by configuration. Neither
// tenant's relevance policy holds a guild message back.
const hijackConfig = `listen: 127.0.0.1:0
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
  guilds: {"700": b}
  tenants: {a: {free_response_channels: ["*"]}, b: {free_response_channels: ["*"]}}
telegram:
  api_server_url: %s
  webhook_url: https://connector.example/telegram/webhook
  chats: {"-1001": b}
nexscope:
  rooms: [{name: lab, tenant: b}]
`

// hijackRig is the connector of the hijack tests with its fakes and the
// two tenants' gateways.
type hijackRig struct {
	*adminRig
	dfake *discordtest.Server
	gws   map[string]*relaytest.Client
	// sessions counts the Discord Gateway sessions the connector opened.
	sessions int
	n        int // Discord message ids and Telegram update ids
}

func newHijackRig(t *testing.T) *hijackRig {
	t.Helper()
	r := &hijackRig{adminRig: newAdminRig(t), dfake: discordtest.New(t, discordtest.Options{Token: crashDiscordToken})}
	r.dfake.AddGuild(discordtest.Guild{ID: "700", Name: "B's guild"},
		discordtest.Channel{ID: "701", Type: 0, GuildID: "700", Name: "b-general"})
	r.dfake.AddGuild(discordtest.Guild{ID: "800", Name: "Unbound"},
		discordtest.Channel{ID: "801", Type: 0, GuildID: "800", Name: "open"})
	pub, _, _ := ed25519.GenerateKey(nil)
	doc := fmt.Sprintf(hijackConfig, hex.EncodeToString(pub), r.dfake.URL, r.dfake.GatewayURL, r.tfake.URL)
	if err := os.WriteFile(r.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env = append(r.env, "DISCORD_BOT_TOKEN="+crashDiscordToken)
	r.restart(t)
	return r
}

// restart starts the connector (again, on the same data directory), waits
// for its Discord Gateway session and connects both tenants' gateways.
func (r *hijackRig) restart(t *testing.T) {
	t.Helper()
	if r.child != nil {
		_ = r.child.cmd.Process.Kill()
		<-r.child.exited
		for _, gw := range r.gws {
			_ = gw.CloseNow()
		}
	}
	r.start(t)
	r.sessions++
	sctx, scancel := r.child.alive()
	defer scancel()
	if r.dfake.WaitSession(sctx, r.sessions) != nil {
		t.Fatalf("waiting for Discord Gateway session %d: %v", r.sessions, context.Cause(sctx))
	}
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	r.gws = map[string]*relaytest.Client{}
	for _, id := range []string{"a", "b"} {
		c := r.dial(t, "gw-"+id, "s"+id)
		for _, p := range []string{"discord", "telegram", "relay"} {
			if _, err := c.Hello(ctx, p, ""); err != nil {
				t.Fatalf("gw-%s hello %s: %v", id, p, err)
			}
		}
		r.gws[id] = c
	}
}

// manage posts body to the management route path with tenant's upgrade
// token and returns the answer's status and body.
func (r *hijackRig) manage(t *testing.T, tenant, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+relaytest.Token("gw-"+tenant, "s"+tenant, time.Now()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", path, body, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// mustManage is manage expecting status want.
func (r *hijackRig) mustManage(t *testing.T, tenant, path, body string, want int) {
	t.Helper()
	if got, answer := r.manage(t, tenant, path, body); got != want {
		t.Fatalf("tenant %s %s %s: %d %s, want %d", tenant, path, body, got, answer, want)
	}
}

// discordSay posts user's message in channel of guild through the fake
// Discord Gateway.
func (r *hijackRig) discordSay(t *testing.T, user, channel, guild, text string) {
	t.Helper()
	r.n++
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	m := map[string]any{
		"id": strconv.Itoa(9000 + r.n), "channel_id": channel, "guild_id": guild, "content": text,
		"type": 0, "timestamp": "2026-01-15T12:00:00.000000+00:00", "author": map[string]any{"id": user, "username": "u" + user},
		"member": map[string]any{"roles": []any{}}, "mentions": []any{}, "attachments": []any{}, "embeds": []any{},
	}
	if err := r.dfake.Dispatch(ctx, "MESSAGE_CREATE", m); err != nil {
		t.Fatalf("dispatch %q: %v", text, err)
	}
}

// telegramSay posts user's message in the Telegram group chat to the
// webhook and waits for its 200.
func (r *hijackRig) telegramSay(t *testing.T, user, chat int64, text string) {
	t.Helper()
	if !r.telegramReady {
		waitMetrics(t, "http://"+r.child.ops+"/metrics", `connector_platform_ready{platform="telegram"} 1`)
		r.telegramReady = true
	}
	r.n++
	body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1767225300,"chat":{"id":%d,"type":"supergroup","title":"G"},"from":{"id":%d,"is_bot":false,"first_name":"U"},"text":%q}}`,
		r.n, r.n, chat, user, text)
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+"/telegram/webhook", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Telegram-Bot-Api-Secret-Token", adminTGSecret)
	post(t, req, http.StatusOK, "telegram webhook "+text)
}

// send has tenant's gateway send text into chat on platform.
func (r *hijackRig) send(t *testing.T, tenant, platform, chat, text string) contract.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	res, err := r.gws[tenant].Outbound(ctx, platform, map[string]any{"op": "send", "chat_id": chat, "content": text, "reply_to": nil, "metadata": map[string]any{}})
	if err != nil {
		t.Fatalf("tenant %s send into %s %s: %v", tenant, platform, chat, err)
	}
	return res
}

// declined checks that tenant's send into chat is the uniform decline.
func (r *hijackRig) declined(t *testing.T, tenant, platform, chat string) {
	t.Helper()
	if res := r.send(t, tenant, platform, chat, "hijacked by "+tenant); res.Success || res.Code != contract.CodeEgressDeclined {
		t.Fatalf("tenant %s send into %s %s: %+v, want %s", tenant, platform, chat, res, contract.CodeEgressDeclined)
	}
}

// expect checks the next inbound of tenant's gateway, in order.
func (r *hijackRig) expect(t *testing.T, tenant string, want ...string) {
	t.Helper()
	for _, w := range want {
		if got := nextText(t, r.gws[tenant]); got != w {
			t.Fatalf("tenant %s got %q, want %q", tenant, got, w)
		}
	}
}

// sentinel proves that nothing reached tenant's gateway before: user's
// message in an unbound chat (user linked to tenant) is its very next
// inbound.
func (r *hijackRig) sentinel(t *testing.T, tenant, platform, user, chat string) {
	t.Helper()
	text := "sentinel for " + tenant + " on " + platform
	if platform == "discord" {
		r.discordSay(t, user, chat, "800", text)
	} else {
		u, _ := strconv.ParseInt(user, 10, 64)
		id, _ := strconv.ParseInt(chat, 10, 64)
		r.telegramSay(t, u, id, text)
	}
	r.expect(t, tenant, text)
}

// TestScopeHijackOfConfiguredChats is issue 22's attack: tenant a, with
// only its own upgrade token, claims b's configured Telegram group and a
// channel of b's configured Discord guild, opens them to any author, and
// links users of its own who then post there. Every claim is refused 409
// (400 for b's nexscope room: rooms take no claims); every message there
// still reaches b and nothing reaches a; a's sends there, and into b's
// room, are declined; an admin-API binding of b's is as safe as the
// YAML's.
func TestScopeHijackOfConfiguredChats(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newHijackRig(t)
	r.cli(t, "bind", "b", "telegram", "chat", "-1002")
	r.cli(t, "bind", "a", "telegram", "user", "93")
	r.cli(t, "bind", "a", "discord", "user", "94")
	for _, body := range []string{
		`{"platform":"telegram","channelId":"-1001"}`,                 // b's by the YAML
		`{"platform":"telegram","channelId":"-1002"}`,                 // b's by the admin API
		`{"platform":"discord","guildId":"700","channelId":"701"}`,    // in b's guild
		`{"platform":"telegram","channelId":"-001001"}`,               // another spelling of b's group
		`{"platform":"discord","guildId":"700","channelId":"000701"}`, // and of b's channel
	} {
		r.mustManage(t, "a", "/manage/scope", body, http.StatusConflict)
	}
	for _, p := range []string{"discord", "telegram"} {
		r.mustManage(t, "a", "/manage/principal", `{"platform":"`+p+`","principal":"any"}`, http.StatusOK)
	}
	r.mustManage(t, "a", "/manage/scope", `{"platform":"nexscope","channelId":"lab"}`, http.StatusBadRequest) // rooms take no claims

	r.telegramSay(t, 91, -1001, "91 in b's group")
	r.telegramSay(t, 93, -1001, "a's linked 93 in b's group")
	r.telegramSay(t, 91, -1002, "91 in b's admin-bound group")
	r.expect(t, "b", "91 in b's group", "a's linked 93 in b's group", "91 in b's admin-bound group")
	r.discordSay(t, "92", "701", "700", "92 in b's channel")
	r.discordSay(t, "94", "701", "700", "a's linked 94 in b's channel")
	r.expect(t, "b", "92 in b's channel", "a's linked 94 in b's channel")

	for _, c := range [][2]string{{"telegram", "-1001"}, {"telegram", "-1002"}, {"discord", "701"}, {"relay", "lab"}} {
		r.declined(t, "a", c[0], c[1])
		// b's own send passes the check: delivered, or for the room (where
		// nobody is online) unavailable.
		if res := r.send(t, "b", c[0], c[1], "b answers"); !res.Success && (c[0] != "relay" || res.Code != contract.CodeUnavailable) {
			t.Fatalf("b's send into its own %s %s: %+v", c[0], c[1], res)
		}
	}
	if got := r.dfake.Messages("701"); len(got) != 1 || got[0].Content != "b answers" {
		t.Fatalf("Discord channel 701 holds %+v, want b's answer alone", got)
	}
	for _, call := range r.tfake.Calls("sendMessage") {
		if strings.Contains(call.Form["text"], "hijacked") {
			t.Fatalf("a's message reached Telegram: %v", call.Form)
		}
	}
	// a's own linked user in an unbound group still reaches a: nothing of
	// b's came before.
	r.sentinel(t, "a", "telegram", "93", "-1009")
	r.sentinel(t, "a", "discord", "94", "801")
}

// TestClaimSetAsideByBindingYields: a's claims of a Telegram group and of
// a Discord channel, made while nobody owned them (as a claim stored
// before the fix is), are set aside once the operator binds the group and
// the channel's guild to b through the admin API: the set-aside claims
// are reported in the log, b receives and answers there and a is declined,
// also after a restart (the claims are still stored); b claiming them
// replaces a's (a's release is then 404).
func TestClaimSetAsideByBindingYields(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newHijackRig(t)
	r.cli(t, "bind", "a", "telegram", "user", "93")
	r.mustManage(t, "a", "/manage/scope", `{"platform":"telegram","channelId":"-1003"}`, http.StatusOK)
	r.mustManage(t, "a", "/manage/scope", `{"platform":"discord","guildId":"800","channelId":"801"}`, http.StatusOK)
	for _, p := range []string{"discord", "telegram"} {
		r.mustManage(t, "a", "/manage/principal", `{"platform":"`+p+`","principal":"any"}`, http.StatusOK)
	}
	r.cli(t, "bind", "b", "telegram", "chat", "-1003")
	r.cli(t, "bind", "b", "discord", "guild", "800")
	waitMetrics(t, "http://"+r.child.ops+"/metrics",
		`connector_scope_claims_set_aside{platform="discord"} 1`, `connector_scope_claims_set_aside{platform="telegram"} 1`)
	// The documented warning names the claim and both tenants.
	r.child.waitLog(t, `"msg":"scope claim set aside","platform":"telegram","chat_id":"-1003","claimant":"a","owner":"b"`)
	r.child.waitLog(t, `"msg":"scope claim set aside","platform":"discord","chat_id":"801","claimant":"a","owner":"b"`)

	check := func(round string) {
		t.Helper()
		r.telegramSay(t, 91, -1003, "91 in -1003 "+round)
		r.expect(t, "b", "91 in -1003 "+round)
		r.discordSay(t, "92", "801", "800", "92 in 801 "+round)
		r.expect(t, "b", "92 in 801 "+round)
		r.declined(t, "a", "telegram", "-1003")
		r.declined(t, "a", "discord", "801")
		for _, c := range [][2]string{{"telegram", "-1003"}, {"discord", "801"}} {
			if res := r.send(t, "b", c[0], c[1], "b answers"); !res.Success {
				t.Fatalf("b's send into %s %s: %+v", c[0], c[1], res)
			}
		}
		r.sentinel(t, "a", "telegram", "93", "-1009")
	}
	check("before b claims")
	r.mustManage(t, "b", "/manage/scope", `{"platform":"telegram","channelId":"-1003"}`, http.StatusOK)
	r.mustManage(t, "a", "/manage/scope/release", `{"platform":"telegram","channelId":"-1003"}`, http.StatusNotFound)
	r.mustManage(t, "a", "/manage/scope", `{"platform":"telegram","channelId":"-1003"}`, http.StatusConflict)

	r.restart(t) // a's claim of 801 is still stored
	check("after a restart")
	r.mustManage(t, "b", "/manage/scope", `{"platform":"discord","guildId":"800","channelId":"801"}`, http.StatusOK)
	r.mustManage(t, "a", "/manage/scope/release", `{"platform":"discord","guildId":"800","channelId":"801"}`, http.StatusNotFound)
	check("after b claimed both")
}
