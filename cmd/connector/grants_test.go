package main

import (
	"strings"
	"testing"

	"connector/contract"
	"connector/platform/discord/discordtest"
)

// TestGrantPerPlatform: Telegram private chats and Discord channels share
// id space in practice (both are decimal integers), and the connector's
// platforms share one capability vault. Tenant a's linked Discord user 94
// speaks in channel 801 of unbound guild 800 (a is granted Discord 801);
// tenant b's linked Telegram users 801 and 802 write in their private
// chats, whose ids are theirs (b is granted Telegram 801 and 802). Each
// grant counts on its own platform only, through every gateway's real
// send (platform.Execute, Authorize): b may not post into a's Discord
// channel 801 nor into nobody's Discord channel 802, a may not post into
// b's user's Telegram DM 801, and each tenant's own sends pass.
func TestGrantPerPlatform(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newHijackRig(t)
	r.dfake.AddChannel(discordtest.Channel{ID: "802", Type: 0, GuildID: "800", Name: "quiet"})
	r.cli(t, "bind", "a", "discord", "user", "94")
	r.cli(t, "bind", "b", "telegram", "user", "801")
	r.cli(t, "bind", "b", "telegram", "user", "802")

	r.discordSay(t, "94", "801", "800", "a's 94 in discord 801")
	r.expect(t, "a", "a's 94 in discord 801")
	for _, user := range []int64{801, 802} {
		r.n++
		r.telegram(t, r.n, user, "b's user in its telegram DM")
		r.expect(t, "b", "b's user in its telegram DM")
	}

	for _, c := range []struct{ tenant, platform, chat, whose string }{
		{"b", "discord", "801", "a's channel, by a's Discord grant"},
		{"b", "discord", "802", "nobody's channel; b's grant is Telegram's 802"},
		{"a", "telegram", "801", "b's user's DM; a's grant is Discord's 801"},
	} {
		if res := r.send(t, c.tenant, c.platform, c.chat, "hijacked by "+c.tenant); res.Success || res.Code != contract.CodeEgressDeclined {
			t.Errorf("tenant %s's send into %s %s (%s): %+v, want %s", c.tenant, c.platform, c.chat, c.whose, res, contract.CodeEgressDeclined)
		}
	}
	for _, c := range []struct{ tenant, platform, chat string }{
		{"a", "discord", "801"}, {"b", "telegram", "801"}, {"b", "telegram", "802"},
	} {
		if res := r.send(t, c.tenant, c.platform, c.chat, c.tenant+" answers"); !res.Success {
			t.Fatalf("tenant %s's send into its own %s %s: %+v", c.tenant, c.platform, c.chat, res)
		}
	}
	if got := r.dfake.Messages("801"); len(got) != 1 || got[0].Content != "a answers" {
		t.Fatalf("Discord channel 801 holds %+v, want a's answer alone", got)
	}
	if got := r.dfake.Messages("802"); len(got) != 0 {
		t.Fatalf("Discord channel 802 holds %+v, want nothing", got)
	}
	for _, call := range r.tfake.Calls("sendMessage") {
		if strings.Contains(call.Form["text"], "hijacked") {
			t.Fatalf("a's message reached Telegram: %v", call.Form)
		}
	}
}
