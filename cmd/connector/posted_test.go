package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
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
	const slackSecret, team, slackChat = "posted-slack-secret", "TPOSTED01", "CPOSTED01"
	sfake := slacktest.New(t)
	sfake.AddTeam(slacktest.Team{ID: team, Name: "shared", Token: "xoxb-posted", BotUser: "UPOSTBOT1", BotID: "BPOSTBOT1"})
	sfake.AddChannel(team, slacktest.Channel{ID: slackChat, Name: "general"})
	r := &hijackRig{adminRig: newAdminRig(t), dfake: discordtest.New(t, discordtest.Options{Token: crashDiscordToken})}
	r.dfake.AddGuild(discordtest.Guild{ID: "800", Name: "Unbound"},
		discordtest.Channel{ID: "801", Type: 0, GuildID: "800", Name: "open"})
	pub, _, _ := ed25519.GenerateKey(nil)
	doc := fmt.Sprintf(postedConfig, hex.EncodeToString(pub), r.dfake.URL, r.dfake.GatewayURL, r.tfake.URL, sfake.URL)
	if err := os.WriteFile(r.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env = append(r.env, "DISCORD_BOT_TOKEN="+crashDiscordToken, "SLACK_SIGNING_SECRET="+slackSecret, "SLACK_BOT_TOKEN=xoxb-posted")
	r.restart(t)
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	for _, gw := range r.gws {
		if _, err := gw.Hello(ctx, "slack", ""); err != nil {
			t.Fatalf("hello slack: %v", err)
		}
	}
	waitMetrics(t, "http://"+r.child.ops+"/metrics", `connector_platform_ready{platform="slack"} 1`)
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
