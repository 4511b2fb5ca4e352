package integration

import (
	"crypto/ed25519"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/platform/discord"
	"connector/platform/discord/discordtest"
	"connector/platform/nexscope"
	"connector/platform/nexscope/nexscopetest"
	"connector/platform/telegram"
	"connector/platform/telegram/telegramtest"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/vault"
)

// TestEgressAnswersAlikeOnEveryPlatform puts one situation to every
// platform behind one relay and expects one answer from all of them: the
// order of checks of platform.Execute (docs/contract.md). Each platform
// names its own chats: t1's, t2's, one nobody claims, and a chat_id that is
// no chat id of the platform at all.
func TestEgressAnswersAlikeOnEveryPlatform(t *testing.T) {
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secretGW1}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{secretGW2}}}},
	}
	logs := discordtest.NewLogCapture()
	deps := platform.Deps{Log: logs.Logger(), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)}

	fake := discordtest.New(t, discordtest.Options{Token: discordtest.Token})
	discordtest.World(fake)
	pub, _, _ := ed25519.GenerateKey(nil)
	dc, err := discord.New(discordConfig(fake, pub), deps)
	if err != nil {
		t.Fatal(err)
	}
	tgFake := telegramtest.New(t, telegramtest.Token)
	tg, err := telegram.New(telegram.Config{BotToken: telegramtest.Token, APIServerURL: tgFake.URL, Chats: telegramtest.Chats(),
		PollTimeout: 2 * time.Second}, deps)
	if err != nil {
		t.Fatal(err)
	}
	nxDeps := deps
	nxDeps.Clock = nexscopetest.NewClock()
	nx, err := nexscope.New(nexscope.Config{Token: nexscopetest.Token, Rooms: []nexscope.Room{
		{Name: "lab", Tenant: "t1"}, {Name: "den", Tenant: "t2"}, {Name: "plain"},
	}}, nxDeps)
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{dc, tg, nx}, Log: logs.Logger()})
	if err := fake.WaitSession(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	discordtest.WaitOwners(t, dc)
	gw := h.Dial(t, "gw1", secretGW1)
	for _, name := range []string{"discord", "telegram", "nexscope"} {
		gw.Hello(t, name, "")
	}

	type chats struct{ own, theirs, unclaimed, malformed string }
	for name, c := range map[string]chats{
		"discord":  {discordtest.ChanGeneral, discordtest.ChanOther, "999000111222333444", "general"},
		"telegram": {"123456789", "-1001234567890", "-1005550001112", "@hermes"},
		"nexscope": {"lab", "den", "plain", "no such room!"},
	} {
		act := func(fields map[string]any) contract.Result {
			a := map[string]any{"metadata": map[string]any{}, "content": "x", "reply_to": nil}
			for k, v := range fields {
				a[k] = v
			}
			return gw.Outbound(t, name, a)
		}
		for situation, want := range map[string]struct {
			action map[string]any
			code   string
		}{
			"an op outside the contract":     {map[string]any{"op": "teleport", "chat_id": c.own}, contract.CodeUnsupportedOp},
			"an op the platform has not":     {map[string]any{"op": contract.OpTaskCard, "chat_id": c.own, "card_id": "turn:1"}, contract.CodeUnsupportedOp},
			"no chat_id":                     {map[string]any{"op": contract.OpSend}, contract.CodeBadRequest},
			"no chat_id, op it has not":      {map[string]any{"op": contract.OpTaskCard}, contract.CodeBadRequest},
			"a follow_up without a session":  {map[string]any{"op": contract.OpFollowUp, "kind": "x.y"}, contract.CodeBadRequest},
			"a chat_id of no chat":           {map[string]any{"op": contract.OpSend, "chat_id": c.malformed}, contract.CodeBadRequest},
			"another tenant's chat":          {map[string]any{"op": contract.OpSend, "chat_id": c.theirs}, contract.CodeEgressDeclined},
			"a chat nobody claims":           {map[string]any{"op": contract.OpSend, "chat_id": c.unclaimed}, contract.CodeEgressDeclined},
			"another tenant's chat, no text": {map[string]any{"op": contract.OpTyping, "chat_id": c.theirs}, contract.CodeEgressDeclined},
		} {
			r := act(want.action)
			if r.Success || r.Code != want.code {
				t.Errorf("%s, %s: %+v, want %s", name, situation, r, want.code)
			}
			if want.code == contract.CodeEgressDeclined && r != contract.Declined(name) {
				t.Errorf("%s, %s: %+v, want the uniform decline", name, situation, r)
			}
		}
	}
	if n := len(tgFake.Calls("sendMessage")) + len(tgFake.Calls("sendChatAction")); n != 0 {
		t.Errorf("%d refused actions reached Telegram", n)
	}
	for _, r := range fake.Requests() {
		if r.Method == "POST" {
			t.Errorf("a refused action reached Discord: %s %s", r.Method, r.Path)
		}
	}
}
