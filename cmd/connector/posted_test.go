package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/platform/discord/discordtest"
	"connector/platform/slack/slacktest"
)

// postedConfig is the YAML of TestGrantedTenantsKeepToTheirMessages:
// tenants a and b, and no binding of any chat, so a Discord channel, a
// Telegram group and a Slack channel are open to both by author link.
const postedConfig = `listen: 127.0.0.1:0
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
telegram:
  api_server_url: %s
  webhook_url: https://connector.example/telegram/webhook
slack:
  api_url: %s
`

// The Slack workspace of postedConfig's rig (newPostedRig).
const postedSlackSecret, postedTeam, postedSlackChat = "posted-slack-secret", "TPOSTED01", "CPOSTED01"

// newPostedRig runs the connector on postedConfig with Discord channel
// 801 (guild 800) and Slack channel postedSlackChat, and both tenants'
// gateways ready on Slack too.
func newPostedRig(t *testing.T) (*hijackRig, *slacktest.Server) {
	t.Helper()
	sfake := slacktest.New(t)
	sfake.AddTeam(slacktest.Team{ID: postedTeam, Name: "shared", Token: "xoxb-posted", BotUser: "UPOSTBOT1", BotID: "BPOSTBOT1"})
	sfake.AddChannel(postedTeam, slacktest.Channel{ID: postedSlackChat, Name: "general"})
	r := &hijackRig{adminRig: newAdminRig(t), dfake: discordtest.New(t, discordtest.Options{Token: crashDiscordToken})}
	r.dfake.AddGuild(discordtest.Guild{ID: "800", Name: "Unbound"},
		discordtest.Channel{ID: "801", Type: 0, GuildID: "800", Name: "open"})
	pub, _, _ := ed25519.GenerateKey(nil)
	doc := fmt.Sprintf(postedConfig, hex.EncodeToString(pub), r.dfake.URL, r.dfake.GatewayURL, r.tfake.URL, sfake.URL)
	if err := os.WriteFile(r.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env = append(r.env, "DISCORD_BOT_TOKEN="+crashDiscordToken, "SLACK_SIGNING_SECRET="+postedSlackSecret, "SLACK_BOT_TOKEN=xoxb-posted")
	r.restart(t)
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	for _, gw := range r.gws {
		if _, err := gw.Hello(ctx, "slack", ""); err != nil {
			t.Fatalf("hello slack: %v", err)
		}
	}
	waitMetrics(t, "http://"+r.child.ops+"/metrics", `connector_platform_ready{platform="slack"} 1`)
	return r, sfake
}

// TestGrantedTenantsKeepToTheirMessages (docs/security.md "Author links"):
// in a Discord channel, a Telegram group and a Slack channel nobody is
// bound to nor claims, user 71 (linked to a) and user 72 (linked to b)
// both speak, so a and b both act there on their grants. Each tenant's
// gateway posts a message there over its real wire; the other tenant's
// edit and delete of it are the uniform decline and reach no platform,
// while each tenant edits and deletes its own. A Discord thread a creates
// there is a's alone (docs/security.md rule 3). b's turn entering a Slack
// thread of a's answer carries none of a's conversation as its context.
func TestGrantedTenantsKeepToTheirMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	const slackSecret, team, slackChat = postedSlackSecret, postedTeam, postedSlackChat
	r, sfake := newPostedRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	for tenant, user := range map[string]string{"a": "71", "b": "72"} {
		r.cli(t, "bind", tenant, "discord", "user", user)
		r.cli(t, "bind", tenant, "telegram", "user", user)
		r.cli(t, "bind", tenant, "slack", "user", "U"+user)
	}
	for i, s := range []struct{ tenant, user string }{{"a", "71"}, {"b", "72"}} {
		r.discordSay(t, s.user, "801", "800", s.tenant+"'s author in discord")
		r.expect(t, s.tenant, s.tenant+"'s author in discord")
		r.telegramSay(t, 70+int64(i+1), -1005, s.tenant+"'s author in telegram")
		r.expect(t, s.tenant, s.tenant+"'s author in telegram")
		ev := slacktest.MessageEvent(team, slackChat, "U"+s.user, fmt.Sprintf("1768490000.00000%d", i+1), "", s.tenant+"'s author in slack")
		body := slacktest.Envelope(team, "UPOSTBOT1", fmt.Sprintf("EvPosted%d", i), ev)
		post(t, slacktest.SignedRequest("http://"+r.child.addr+"/slack/events", slackSecret, time.Now(), "application/json", body), http.StatusOK, "slack event")
		r.expect(t, s.tenant, s.tenant+"'s author in slack")
	}
	// In a Slack thread of a's answer, where 71 went on with a, b's turn
	// (72's reply, entering the thread) carries neither as its context.
	answer := r.send(t, "a", "slack", slackChat, "a's answer in slack")
	if !answer.Success {
		t.Fatalf("tenant a's send into slack %s: %+v", slackChat, answer)
	}
	for i, s := range []struct{ tenant, user, text string }{{"a", "71", "a's author in the thread"}, {"b", "72", "b's author in the thread"}} {
		ts := fmt.Sprintf("1768490900.00000%d", i+1)
		sfake.AddMessage(slacktest.Message{Team: team, Channel: slackChat, TS: ts, ThreadTS: answer.MessageID, User: "U" + s.user, Text: s.text})
		ev := slacktest.MessageEvent(team, slackChat, "U"+s.user, ts, answer.MessageID, s.text)
		post(t, slacktest.SignedRequest("http://"+r.child.addr+"/slack/events", slackSecret, time.Now(), "application/json",
			slacktest.Envelope(team, "UPOSTBOT1", "EvThread"+s.tenant, ev)), http.StatusOK, "slack event")
		f := nextInbound(t, ctx, r.gws[s.tenant])
		if f.Event.Text != s.text || s.tenant == "b" && len(f.Event.Context) != 0 {
			t.Fatalf("tenant %s got %q with context %+v; want %q, and for b no context of a's", s.tenant, f.Event.Text, f.Event.Context, s.text)
		}
	}

	act := func(tenant, platform, chat string, action map[string]any) contract.Result {
		t.Helper()
		action["chat_id"], action["metadata"] = chat, map[string]any{}
		res, err := r.gws[tenant].Outbound(ctx, platform, action)
		if err != nil {
			t.Fatalf("tenant %s %v in %s %s: %v", tenant, action["op"], platform, chat, err)
		}
		return res
	}
	for _, c := range []struct{ platform, chat string }{{"discord", "801"}, {"telegram", "-1005"}, {"slack", slackChat}} {
		posted := map[string]string{}
		for _, tenant := range []string{"a", "b"} {
			res := r.send(t, tenant, c.platform, c.chat, tenant+" answers")
			if !res.Success || res.MessageID == "" {
				t.Fatalf("tenant %s's send into %s %s, granted: %+v", tenant, c.platform, c.chat, res)
			}
			posted[tenant] = res.MessageID
		}
		for _, x := range []struct{ attacker, victim string }{{"a", "b"}, {"b", "a"}} {
			for _, op := range []string{contract.OpEdit, contract.OpDelete} {
				res := act(x.attacker, c.platform, c.chat, map[string]any{"op": op, "message_id": posted[x.victim], "content": "hijacked by " + x.attacker})
				if res.Success || res.Code != contract.CodeEgressDeclined {
					t.Errorf("tenant %s's %s of tenant %s's message %s in %s %s: %+v, want %s",
						x.attacker, op, x.victim, posted[x.victim], c.platform, c.chat, res, contract.CodeEgressDeclined)
				}
			}
		}
		for _, tenant := range []string{"a", "b"} {
			for _, op := range []string{contract.OpEdit, contract.OpDelete} {
				if res := act(tenant, c.platform, c.chat, map[string]any{"op": op, "message_id": posted[tenant], "content": tenant + " edits"}); !res.Success {
					t.Errorf("tenant %s's %s of its own message %s in %s %s: %+v", tenant, op, posted[tenant], c.platform, c.chat, res)
				}
			}
		}
	}
	// A thread a creates in the Discord channel it holds by grant is a's at
	// once: its first send goes in before anyone wrote there. b, which
	// holds the channel too, is declined in it.
	thread := act("a", "discord", "801", map[string]any{"op": "thread_create", "thread_name": "a's conversation"})
	if !thread.Success || thread.ThreadID == "" {
		t.Fatalf("tenant a's thread_create in discord 801, granted: %+v", thread)
	}
	if res := r.send(t, "a", "discord", thread.ThreadID, "a in its thread"); !res.Success {
		t.Errorf("tenant a's first send into its own thread %s: %+v", thread.ThreadID, res)
	}
	r.declined(t, "b", "discord", thread.ThreadID)
	if got := r.dfake.Messages(thread.ThreadID); len(got) != 1 || got[0].Content != "a in its thread" {
		t.Errorf("a's thread holds %+v, want a's one message", got)
	}
	// Only the owners' own edits and deletes reached the platforms.
	var discordEdits, discordDeletes int
	for _, req := range r.dfake.Requests() {
		if strings.HasPrefix(req.Path, "/api/v9/channels/801/messages/") {
			discordEdits += b2i(req.Method == http.MethodPatch)
			discordDeletes += b2i(req.Method == http.MethodDelete)
		}
	}
	for what, n := range map[string]int{
		"Discord edits": discordEdits, "Discord deletes": discordDeletes,
		"Telegram edits": len(r.tfake.Calls("editMessageText")), "Telegram deletes": len(r.tfake.Calls("deleteMessage")),
		"Slack edits": len(sfake.Calls("chat.update")), "Slack deletes": len(sfake.Calls("chat.delete")),
	} {
		if n != 2 {
			t.Errorf("%d %s reached the platform, want the owners' 2", n, what)
		}
	}
}

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestClaimKeepsAnotherTenantsAnswers (docs/security.md rule 3): user 71,
// linked to a, speaks in Discord channel 801, which nobody binds nor
// claims, and a answers there and starts a thread by grant. Then b claims
// the channel over /manage/scope. b's edit and delete of a's answer, and
// its rename of a's thread, are the uniform decline, and bad_request with
// the id spelt with a leading zero (before, that spelling named no posted
// record, and the edit and delete reached Discord, which may take it for
// the same id); a's answer is unchanged on Discord; a reply of b's user 75 quoting it reaches b as
// not b's own. b edits its own answer there, and a reply quoting that is
// b's own.
// Before, the claim gave b every bot message of the channel.
func TestClaimKeepsAnotherTenantsAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r, _ := newPostedRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	r.cli(t, "bind", "a", "discord", "user", "71")
	r.discordSay(t, "71", "801", "800", "a's author")
	r.expect(t, "a", "a's author")
	act := func(tenant string, action map[string]any) contract.Result {
		t.Helper()
		action["chat_id"], action["metadata"] = "801", map[string]any{}
		res, err := r.gws[tenant].Outbound(ctx, "discord", action)
		if err != nil {
			t.Fatalf("tenant %s %v in discord 801: %v", tenant, action["op"], err)
		}
		return res
	}
	theirs := r.send(t, "a", "discord", "801", "a's answer")
	thread := act("a", map[string]any{"op": "thread_create", "thread_name": "a's thread"})
	if !theirs.Success || !thread.Success {
		t.Fatalf("tenant a's send and thread_create in discord 801, granted: %+v, %+v", theirs, thread)
	}
	r.mustManage(t, "b", "/manage/scope", `{"platform":"discord","channelId":"801","guildId":"800"}`, http.StatusOK)
	r.cli(t, "bind", "b", "discord", "user", "75") // the claim admits b's own users
	for _, action := range []map[string]any{
		{"op": contract.OpEdit, "message_id": theirs.MessageID, "content": "hijacked"},
		{"op": contract.OpDelete, "message_id": theirs.MessageID},
		{"op": contract.OpThreadRename, "message_id": thread.ThreadID, "thread_name": "hijacked"},
	} {
		if res := act("b", action); res.Success || res.Code != contract.CodeEgressDeclined {
			t.Errorf("tenant b's %v of tenant a's %v in its claimed channel: %+v, want %s", action["op"], action["message_id"], res, contract.CodeEgressDeclined)
		}
		// Spelt with a leading zero, the id is no Discord id: it names no posted record.
		action["message_id"] = "0" + action["message_id"].(string)
		if res := act("b", action); res.Success || res.Code != contract.CodeBadRequest {
			t.Errorf("tenant b's %v of tenant a's %v in its claimed channel: %+v, want %s", action["op"], action["message_id"], res, contract.CodeBadRequest)
		}
	}
	for _, req := range r.dfake.Requests() {
		if req.Method != http.MethodGet && (slices.Contains([]string{"/api/v9/channels/801/messages/" + theirs.MessageID, "/api/v9/channels/801/messages/0" + theirs.MessageID, "/api/v9/channels/" + thread.ThreadID, "/api/v9/channels/0" + thread.ThreadID}, req.Path)) {
			t.Errorf("tenant b's %s %s reached Discord", req.Method, req.Path)
		}
	}
	mine := r.send(t, "b", "discord", "801", "b's answer")
	if !mine.Success {
		t.Fatalf("tenant b's send into its claimed channel: %+v", mine)
	}
	if res := act("b", map[string]any{"op": contract.OpEdit, "message_id": mine.MessageID, "content": "b edits"}); !res.Success {
		t.Errorf("tenant b's edit of its own answer: %+v", res)
	}
	for i, c := range []struct {
		quoted string
		own    bool
	}{{theirs.MessageID, false}, {mine.MessageID, true}} {
		m := discordtest.MessageCreate(strconv.Itoa(9500+i), "801", "800", "about that", true)
		m["author"] = map[string]any{"id": "75", "username": "u75", "discriminator": "0"}
		m["message_reference"] = map[string]any{"message_id": c.quoted, "channel_id": "801"}
		m["referenced_message"] = map[string]any{
			"id": c.quoted, "channel_id": "801", "content": "quoted", "type": 0,
			"timestamp": "2026-01-15T12:00:00.000000+00:00", "mentions": []any{}, "attachments": []any{}, "embeds": []any{},
			"author": map[string]any{"id": "9000", "username": "hermes", "bot": true, "discriminator": "0"},
		}
		if err := r.dfake.Dispatch(ctx, "MESSAGE_CREATE", m); err != nil {
			t.Fatal(err)
		}
		f := nextInbound(t, ctx, r.gws["b"])
		if q := f.Event.ReplyTo; q == nil || q.IsOwn != c.own {
			t.Errorf("a reply quoting %s reached b with reply_to %+v, want is_own %v", c.quoted, q, c.own)
		}
	}
	if got := r.dfake.Messages("801"); len(got) < 1 || got[0].ID != theirs.MessageID || got[0].Content != "a's answer" {
		t.Errorf("discord 801 holds %+v, want a's answer first and unchanged", got)
	}
}
