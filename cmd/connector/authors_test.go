package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"connector/contract"
	"connector/platform/discord/discordtest"
	"connector/relay/relaytest"
)

// TestAuthorFirstSharedGuild: tenants a and b share guild 500, which no
// tenant is bound to, through author bindings made with the admin CLI:
// user 71's messages there reach only a, user 72's only b, each user's DM
// reaches their own tenant, an unlinked author's message reaches nobody,
// and a tenant may reply where its author spoke but not in another
// tenant's DM. In guild 700, which the YAML gives to tenant c, every
// message is c's, user 71's too (bindings come before links), and a may
// not post there.
func TestAuthorFirstSharedGuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newAdminRig(t)
	dfake := discordtest.New(t, discordtest.Options{Token: crashDiscordToken})
	dfake.AddGuild(discordtest.Guild{ID: "500", Name: "Shared"},
		discordtest.Channel{ID: "501", Type: 0, GuildID: "500", Name: "general"})
	dfake.AddGuild(discordtest.Guild{ID: "700", Name: "C's"},
		discordtest.Channel{ID: "701", Type: 0, GuildID: "700", Name: "c-general"})
	dfake.AddChannel(discordtest.Channel{ID: "601", Type: 1})
	dfake.AddChannel(discordtest.Channel{ID: "602", Type: 1})
	pub, _, _ := ed25519.GenerateKey(nil)
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
ops: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
log: {level: debug, format: json}
tenants:
  - {id: a, gateways: [{id: gw-a, secrets: [sa]}]}
  - {id: b, gateways: [{id: gw-b, secrets: [sb]}]}
  - {id: c, gateways: [{id: gw-c, secrets: [sc]}]}
discord:
  public_key: %s
  application_id: "9000"
  api_base_url: %s
  gateway_url: %s
  guilds: {"700": c}
  tenants: {c: {free_response_channels: ["*"]}}
`, hex.EncodeToString(pub), dfake.URL, dfake.GatewayURL)
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
	r.cli(t, "bind", "b", "discord", "user", "72")

	gws := map[string]*relaytest.Client{}
	for _, id := range []string{"a", "b", "c"} {
		c, err := relaytest.Dial(ctx, "ws://"+r.child.addr+"/relay", relaytest.Token("gw-"+id, "s"+id, time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CloseNow() })
		if _, err := c.Hello(ctx, "discord", ""); err != nil {
			t.Fatalf("gw-%s hello: %v", id, err)
		}
		gws[id] = c
	}
	say := func(n int, user, channel, guild, text string) {
		t.Helper()
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
	say(1, "71", "501", "500", "71 in the guild")
	say(2, "72", "501", "500", "72 in the guild")
	say(3, "73", "501", "500", "73 in the guild") // reaches nobody
	say(4, "71", "601", "", "71 in a DM")
	say(5, "72", "602", "", "72 in a DM")
	say(9, "71", "701", "700", "71 in c's guild")
	// Messages of different channels may arrive in any order.
	for tenant, want := range map[string][]string{
		"a": {"71 in the guild", "71 in a DM"},
		"b": {"72 in the guild", "72 in a DM"},
		"c": {"71 in c's guild"},
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
	for _, c := range []struct {
		tenant, chat string
		ok           bool
	}{
		{"a", "501", true}, {"b", "501", true}, {"a", "601", true}, {"b", "601", false}, {"c", "602", false},
		{"a", "701", false}, {"c", "701", true},
	} {
		res, err := gws[c.tenant].Outbound(ctx, "discord", map[string]any{"op": "send", "chat_id": c.chat, "content": "hi", "reply_to": nil, "metadata": map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Success != c.ok {
			t.Errorf("tenant %s send to %s: success %v (%s), want %v", c.tenant, c.chat, res.Success, res.Error, c.ok)
		}
		if !c.ok && res.Code != contract.CodeEgressDeclined {
			t.Errorf("tenant %s send to %s: code %q, want the decline", c.tenant, c.chat, res.Code)
		}
	}
	// Nothing else of channel 501 reached anyone: each gateway's next
	// inbound is the next message of its author there.
	say(6, "71", "501", "500", "71 again")
	say(7, "72", "501", "500", "72 again")
	say(8, "73", "701", "700", "73 again")
	for tenant, want := range map[string]string{"a": "71 again", "b": "72 again", "c": "73 again"} {
		if got := nextText(t, gws[tenant]); got != want {
			t.Fatalf("tenant %s got %q, want %q", tenant, got, want)
		}
	}
}

// nextText waits for gw's next inbound, acknowledges it and returns its
// text.
func nextText(t *testing.T, gw *relaytest.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	f, err := gw.Next(ctx, contract.TypeInbound)
	if err != nil {
		t.Fatalf("waiting for inbound: %v", err)
	}
	if err := gw.Ack(ctx, f.BufferID); err != nil {
		t.Fatal(err)
	}
	return f.Event.Text
}
