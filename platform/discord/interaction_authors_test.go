package discord

import (
	"encoding/json"
	"testing"
	"time"

	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/vault"
)

// byUser rewrites an interaction body so that user invoked it.
func byUser(t *testing.T, body []byte, user string) []byte {
	t.Helper()
	var in map[string]any
	if err := json.Unmarshal(body, &in); err != nil {
		t.Fatal(err)
	}
	u := map[string]any{"id": user, "username": "u" + user}
	if m, ok := in["member"].(map[string]any); ok {
		m["user"] = u
	} else {
		in["user"] = u
	}
	b, _ := json.Marshal(in)
	return b
}

// TestInteractionsRouteByAuthor: tenants a and b share guildLab (bound to
// c) by author binding, over the signed interactions webhook and the
// Gateway. Ada's (a's) slash command and button press reach only a, with
// the interaction token in a's vault alone; Bob's (b's) slash command
// reaches only b and his DM slash command too; an unbound user's slash
// command falls back to the guild's tenant c; in a channel c claimed with
// the default owner-only principal an unbound user's is dropped.
func TestInteractionsRouteByAuthor(t *testing.T) {
	const userBob, userEve, chanDMBob = "502", "503", "302"
	e := newEnv(t, discordtest.Options{}, nil)
	e.fake.AddChannel(discordtest.Channel{ID: chanDMBob, Type: 1})
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "c"},
		{Kind: platform.BindUser, ID: userAda, Tenant: "a"}, {Kind: platform.BindUser, ID: userBob, Tenant: "b"},
		{Kind: platform.BindScope, ID: chanRandom, Tenant: "c"}}); err != nil {
		t.Fatal(err)
	}
	url := e.webhookServer(t)
	now := time.Now()
	expect := func(what, tenant, text string) platform.Delivery {
		t.Helper()
		d := e.sink.Next(t)
		if d.Tenant != tenant || d.Event == nil || d.Event.Text != text {
			t.Fatalf("%s: delivery to %q %+v, want %q to %q", what, d.Tenant, d.Event, text, tenant)
		}
		return d
	}
	slash := func(id, user, guild, channel string) {
		t.Helper()
		body := byUser(t, slashBody(id, "tok-"+id, guild, channel), user)
		if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, now, body)); code != 200 || ack != `{"type":5}` {
			t.Fatalf("slash %s by %s = %d %s", id, user, code, ack)
		}
	}

	slash("8201", userAda, guildLab, chanGeneral)
	d := expect("Ada's slash command", "a", "/model gpt")
	key := vault.Key{SessionKey: d.SessionKey, Kind: vault.KindDiscordInteractionToken}
	for tenant, want := range map[string]bool{"a": true, "b": false, "c": false} {
		key.Tenant = tenant
		if e2, ok := e.vault.Get(t.Context(), key); ok != want || (ok && e2.Value.Reveal() != "tok-8201") {
			t.Fatalf("Ada's token in %s's vault: %v, want %v", tenant, ok, want)
		}
	}
	slash("8202", userBob, guildLab, chanGeneral)
	expect("Bob's slash command", "b", "/model gpt")
	slash("8203", userBob, "", chanDMBob)
	expect("Bob's DM slash command", "b", "/model gpt")
	slash("8204", userEve, guildLab, chanGeneral)
	expect("an unbound user's slash command", "c", "/model gpt")

	// Ada's button press, webhook then Gateway.
	comp := byUser(t, []byte(`{"id":"8205","application_id":"9000","type":3,"token":"tok-c","guild_id":"100","channel_id":"101",
		"channel":{"id":"101","type":0,"guild_id":"100","name":"general"},
		"message":{"id":"7777","channel_id":"101"},
		"data":{"custom_id":"hp1:a1b2c3.0000beef:once","component_type":2},
		"member":{"nick":null,"roles":[]}}`), userAda)
	if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, now, comp)); code != 200 || ack != `{"type":6}` {
		t.Fatalf("Ada's button = %d %s", code, ack)
	}
	expect("Ada's button press", "a", "/once")
	var gw map[string]any
	_ = json.Unmarshal(byUser(t, slashBody("8206", "tok-8206", guildLab, chanGeneral), userBob), &gw)
	e.dispatch(t, "INTERACTION_CREATE", gw)
	expect("Bob's slash command over the Gateway", "b", "/model gpt")

	// c claimed chanRandom (owner-only): Eve is not admitted there.
	body := byUser(t, slashBody("8207", "tok-8207", guildLab, chanRandom), userEve)
	if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, now, body)); code != 200 || ack == `{"type":5}` {
		t.Fatalf("Eve's slash command in c's claimed channel = %d %s, want the not-connected answer", code, ack)
	}
	e.metrics.waitDrop(t, platform.DropPrincipal, 1)
	e.sink.Empty(t)
}
