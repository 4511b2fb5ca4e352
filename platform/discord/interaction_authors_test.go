package discord

import (
	"bytes"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
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

// TestInteractionsRouteByAuthor: tenants a and b share guildOther, which
// no tenant is bound to, by author binding, over the signed interactions
// webhook and the Gateway. Ada's (a's) slash command and button press
// reach only a, with the interaction token in a's vault alone; Bob's (b's)
// slash command reaches only b and his DM slash command too; an unbound
// user's slash command reaches nobody. In guildLab, bound to c, Ada's
// slash command is c's (bindings come before links), its token in c's
// vault alone; in a channel c claimed with the default owner-only
// principal, Eve's and even Ada's are dropped (claims come before links).
func TestInteractionsRouteByAuthor(t *testing.T) {
	t.Parallel()
	const userBob, userEve, chanDMBob, chanDesk = "502", "503", "302", "202"
	e := newEnv(t, discordtest.Options{}, nil)
	e.fake.AddChannel(discordtest.Channel{ID: chanDMBob, Type: 1})
	e.fake.AddChannel(discordtest.Channel{ID: chanDesk, Type: 0, GuildID: guildOther, Name: "desk"})
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "c"},
		{Kind: platform.BindUser, ID: userAda, Tenant: "a"}, {Kind: platform.BindUser, ID: userBob, Tenant: "b"},
		{Kind: platform.BindScope, ID: chanDesk, Tenant: "c", Space: guildOther}}); err != nil {
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
	tokenIn := func(d platform.Delivery, token, owner string) {
		t.Helper()
		key := vault.Key{SessionKey: d.SessionKey, Kind: vault.KindDiscordInteractionToken}
		for _, tenant := range []string{"a", "b", "c"} {
			key.Tenant = tenant
			if e2, ok := e.vault.Get(t.Context(), key); ok != (tenant == owner) || (ok && e2.Value.Reveal() != token) {
				t.Fatalf("token %s in %s's vault: %v, want only in %s's", token, tenant, ok, owner)
			}
		}
	}
	slash := func(id, user, guild, channel, wantAck string) {
		t.Helper()
		body := byUser(t, slashBody(id, "tok-"+id, guild, channel), user)
		if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, now, body)); code != 200 || (ack == `{"type":5}`) != (wantAck == `{"type":5}`) {
			t.Fatalf("slash %s by %s = %d %s, want %s", id, user, code, ack, wantAck)
		}
	}
	const deferred, notConnected = `{"type":5}`, "not connected"

	slash("8201", userAda, guildOther, chanOther, deferred)
	tokenIn(expect("Ada's slash command", "a", "/model gpt"), "tok-8201", "a")
	slash("8202", userBob, guildOther, chanOther, deferred)
	expect("Bob's slash command", "b", "/model gpt")
	slash("8203", userBob, "", chanDMBob, deferred)
	expect("Bob's DM slash command", "b", "/model gpt")
	slash("8204", userEve, guildOther, chanOther, notConnected)
	e.metrics.waitDrop(t, dropUnclaimed, 1)
	slash("8208", userAda, guildLab, chanGeneral, deferred)
	tokenIn(expect("Ada's slash command in c's guild", "c", "/model gpt"), "tok-8208", "c")

	// Ada's button press, webhook then Gateway.
	comp := byUser(t, []byte(`{"id":"8205","application_id":"9000","type":3,"token":"tok-c","guild_id":"200","channel_id":"201",
		"channel":{"id":"201","type":0,"guild_id":"200","name":"lobby"},
		"message":{"id":"7777","channel_id":"201"},
		"data":{"custom_id":"hp1:a1b2c3.0000beef:once","component_type":2},
		"member":{"nick":null,"roles":[]}}`), userAda)
	if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, now, comp)); code != 200 || ack != `{"type":6}` {
		t.Fatalf("Ada's button = %d %s", code, ack)
	}
	expect("Ada's button press", "a", "/once")
	var gw map[string]any
	_ = json.Unmarshal(byUser(t, slashBody(liveID(8206), "tok-8206", guildOther, chanOther), userBob), &gw)
	e.dispatch(t, "INTERACTION_CREATE", gw)
	expect("Bob's slash command over the Gateway", "b", "/model gpt")

	// c claimed chanDesk (owner-only): neither Eve nor a's Ada is admitted.
	slash("8207", userEve, guildOther, chanDesk, notConnected)
	slash("8209", userAda, guildOther, chanDesk, notConnected)
	e.metrics.waitDrop(t, platform.DropPrincipal, 2)
	e.sink.Empty(t)
}

// TestPromptPressInASharedDMReachesItsPoster: Ada is linked to t1 (her
// home) and to t2, which holds her DM by grant (she linked there) and
// prompts her in it. Her press is t2's answer: it went by the DM's route,
// to t1, which got t2's prompt_id and her choice while t2 never did. So
// too a day and an hour later: the poster was known by t2's mark of the
// message, which lasts a day, so the press went to t1 and was dropped
// (prompt_not_owned).
func TestPromptPressInASharedDMReachesItsPoster(t *testing.T) {
	t.Parallel()
	for _, later := range []time.Duration{0, 25 * time.Hour} {
		t.Run(later.String(), func(t *testing.T) {
			t.Parallel()
			clk := clocktest.New(time.Now())
			e := newEnvDeps(t, platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk})}, discordtest.Options{}, nil)
			e.startReady(t)
			if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"}, {Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"},
				{Kind: platform.BindUser, ID: userAda, Tenant: "t1"}, {Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
				t.Fatal(err)
			}
			e.p.spoke.Add(t.Context(), chanDMAda, "", "t2", time.Time{}) // as her /link for t2 in the DM
			r := execute(t, e, "t2", `{"op":"prompt","chat_id":"`+chanDMAda+`","content":"deploy?","prompt_id":"f00dba.1234abcd","options":[{"id":"once","label":"Approve once"}],"metadata":{}}`)
			if !r.Success {
				t.Fatalf("t2's prompt in Ada's DM = %+v", r)
			}
			clk.Advance(later)
			body, err := e.fake.PressButton("8301", "tok-8301", r.MessageID, buttonOf(t, e, chanDMAda, r.MessageID, "once"), userAda, "ada.l")
			if err != nil {
				t.Fatal(err)
			}
			url := e.webhookServer(t)
			if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, clk.Now(), body)); code != 200 || ack != `{"type":6}` {
				t.Fatalf("press = %d %s", code, ack)
			}
			d := e.sink.Next(t)
			if d.Tenant != "t2" || d.Event == nil || d.Event.PromptResponse == nil || d.Event.PromptResponse.OptionID != "once" {
				t.Fatalf("press delivered to %q: %+v, want t2's prompt_response", d.Tenant, d.Event)
			}
		})
	}
}

// TestPressAfterTheLinkMovedRenewsNoGrant: t2 prompts Ada in her DM,
// which it holds by grant (she linked there); her link then moves to t3.
// Her press 13 hours later still answers t2's prompt, while t2's grant
// lives, but does not renew that grant: 25 hours after her link t2 may no
// longer send into her DM (before, each press of its old prompt kept t2
// in the DM of a user linked elsewhere).
func TestPressAfterTheLinkMovedRenewsNoGrant(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Now())
	e := newEnvDeps(t, platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk})}, discordtest.Options{}, nil)
	e.startReady(t)
	guilds := []platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"}, {Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"}}
	if err := e.p.Bind(append(guilds, platform.Binding{Kind: platform.BindUser, ID: userAda, Tenant: "t2"})); err != nil {
		t.Fatal(err)
	}
	e.p.spoke.Add(t.Context(), chanDMAda, "", "t2", time.Time{}) // as her /link for t2 in the DM
	r := execute(t, e, "t2", `{"op":"prompt","chat_id":"`+chanDMAda+`","content":"deploy?","prompt_id":"f00dba.1234abcd","options":[{"id":"once","label":"Approve once"}],"metadata":{}}`)
	if !r.Success {
		t.Fatalf("t2's prompt in Ada's DM = %+v", r)
	}
	if err := e.p.Bind(append(guilds, platform.Binding{Kind: platform.BindUser, ID: userAda, Tenant: "t3"})); err != nil {
		t.Fatal(err)
	}
	clk.Advance(13 * time.Hour)
	body, err := e.fake.PressButton("8311", "tok-8311", r.MessageID, buttonOf(t, e, chanDMAda, r.MessageID, "once"), userAda, "ada.l")
	if err != nil {
		t.Fatal(err)
	}
	if code, ack := post(t, discordtest.InteractionRequest(e.webhookServer(t), e.priv, clk.Now(), body)); code != 200 || ack != `{"type":6}` {
		t.Fatalf("press = %d %s", code, ack)
	}
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event == nil || d.Event.PromptResponse == nil {
		t.Fatalf("press delivered to %q: %+v, want t2's prompt_response", d.Tenant, d.Event)
	}
	clk.Advance(12 * time.Hour)
	if r := execute(t, e, "t2", `{"op":"send","chat_id":"`+chanDMAda+`","content":"still here","reply_to":null,"metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2's send into the DM of a user linked to t3, 25 h on = %+v, want egress_declined", r)
	}
}

// TestPressOfAnEarlierTenantsPrompt: t1 posted a prompt, and is deleted and
// created again under its id: a press of the earlier t1's prompt is
// dropped, not delivered to the new t1 as its prompt's answer; a press of
// the new t1's own prompt is. So too when the instance that made t1 again
// has a clock 5 s behind Discord's (skewed): the press was judged by the
// message's snowflake time against the creation, which that skew put
// before it, and went to the new t1. A prompt's buttons posted by an
// earlier version (untagged) are still judged by that time. A t1 declared
// in the YAML over the stored one (no creation now) is that t1 and gets
// the press (declared), as the vault judges its entries.
func TestPressOfAnEarlierTenantsPrompt(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		skew   time.Duration
		legacy bool
		drop   string
	}{
		{"tagged", 0, false, "earlier_tenant_prompt"},
		{"skewed", -5 * time.Second, false, "earlier_tenant_prompt"},
		{"untagged", 0, true, "earlier_tenant_prompt"},
		{"declared", 0, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pressOfAnEarlierTenantsPrompt(t, c.skew, c.legacy, c.drop)
		})
	}
}

// pressOfAnEarlierTenantsPrompt is TestPressOfAnEarlierTenantsPrompt with
// the new t1 created by a clock skew off Discord's, its buttons pressed
// without their tag when legacy, the earlier t1's press dropped as drop
// ("": t1 declared in the YAML instead, and the press delivered).
func pressOfAnEarlierTenantsPrompt(t *testing.T, skew time.Duration, legacy bool, drop string) {
	var began atomic.Int64
	since := func(tenant string) time.Time {
		if us := began.Load(); tenant == "t1" && us != 0 {
			return time.UnixMicro(us)
		}
		return time.Time{}
	}
	began.Store(time.Now().Add(-time.Hour).UnixMicro()) // the earlier t1's creation
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{Since: since})}, discordtest.Options{}, nil)
	e.startReady(t)
	url := e.webhookServer(t)
	press := func(id string) {
		t.Helper()
		r := execute(t, e, "t1", `{"op":"prompt","chat_id":"`+chanGeneral+`","content":"deploy?","prompt_id":"`+id+`","options":[{"id":"once","label":"Approve once"}],"metadata":{}}`)
		if !r.Success {
			t.Fatalf("t1's prompt %s = %+v", id, r)
		}
		if id == "f00dba.00000001" { // posted by the earlier t1; t1 is made again a millisecond later
			posted, err := discordgo.SnowflakeTimestamp(r.MessageID)
			if err != nil {
				t.Fatal(err)
			}
			began.Store(posted.Add(time.Millisecond + skew).UnixMicro())
			if drop == "" {
				began.Store(0) // no creation: declared in the YAML
			}
			platformtest.WaitUntil(t, "the wall clock past the new t1's creation", func() bool {
				return time.Now().UnixMicro() > began.Load()+1000
			})
		}
		button := buttonOf(t, e, chanGeneral, r.MessageID, "once")
		body, err := e.fake.PressButton("840"+id[len(id)-1:], "tok-"+id, r.MessageID, button, userAda, "ada.l")
		if err != nil {
			t.Fatal(err)
		}
		if legacy {
			body = bytes.ReplaceAll(body, []byte(button), []byte("hp1:"+id+":once"))
		}
		if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, time.Now(), body)); code != 200 || ack != `{"type":6}` {
			t.Fatalf("press of %s = %d %s", id, code, ack)
		}
	}
	press("f00dba.00000001")
	if drop == "" {
		if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "f00dba.00000001" {
			t.Fatalf("the declared t1's press delivered to %s as %+v", d.Tenant, d.Event)
		}
	} else {
		e.metrics.waitDrop(t, drop, 1)
		e.sink.Empty(t)
	}
	press("f00dba.00000002")
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "f00dba.00000002" {
		t.Fatalf("the new t1's press delivered to %s as %+v", d.Tenant, d.Event)
	}
}

// TestPressAfterTheChatMoved: t1 prompts in its guild's channel and in
// Ada's DM (she is linked to it); then the guild is rebound to t2, and
// Ada's link moves to t2. A press of t1's prompt in the channel is dropped
// (prompt_not_owned): it went by the chat's route of the moment, to t2,
// which got t1's prompt_id and Ada's choice. A press of t1's prompt in
// the DM, which t1 still holds by grant, reaches t1 (it was dropped too,
// though t1 may still act there: nothing named the poster once Ada's link
// no longer did). t2's own prompt in the channel is answered.
func TestPressAfterTheChatMoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.DMTenant = "" })
	e.startReady(t)
	url := e.webhookServer(t)
	bind := func(tenant string) {
		t.Helper()
		if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: tenant}, {Kind: platform.BindUser, ID: userAda, Tenant: tenant}}); err != nil {
			t.Fatal(err)
		}
	}
	prompt := func(tenant, chat, id string) (msgID, button string) {
		t.Helper()
		r := execute(t, e, tenant, `{"op":"prompt","chat_id":"`+chat+`","content":"deploy?","prompt_id":"`+id+`","options":[{"id":"once","label":"Approve once"}],"metadata":{}}`)
		if !r.Success {
			t.Fatalf("%s's prompt in %s = %+v", tenant, chat, r)
		}
		return r.MessageID, buttonOf(t, e, chat, r.MessageID, "once")
	}
	press := func(interaction, msgID, button string) {
		t.Helper()
		body, err := e.fake.PressButton(interaction, "tok-"+interaction, msgID, button, userAda, "ada.l")
		if err != nil {
			t.Fatal(err)
		}
		if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, time.Now(), body)); code != 200 || ack != `{"type":6}` {
			t.Fatalf("press %s = %d %s", interaction, code, ack)
		}
	}
	bind("t1")
	e.p.spoke.Add(t.Context(), chanDMAda, "", "t1", time.Time{}) // as her /link for t1 in the DM
	inGuild, guildButton := prompt("t1", chanGeneral, "f00dba.00000001")
	inDM, dmButton := prompt("t1", chanDMAda, "f00dba.00000002")
	bind("t2")
	press("8501", inGuild, guildButton)
	e.metrics.waitDrop(t, "prompt_not_owned", 1)
	press("8502", inDM, dmButton)
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "f00dba.00000002" {
		t.Fatalf("the press in the DM delivered to %s as %+v, want t1's answer", d.Tenant, d.Event)
	}
	e.sink.Empty(t)
	msgID, button := prompt("t2", chanGeneral, "f00dba.00000003")
	press("8503", msgID, button)
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "f00dba.00000003" {
		t.Fatalf("t2's press delivered to %s as %+v", d.Tenant, d.Event)
	}
}

// buttonOf is the custom_id of option's button on the prompt message
// msgID in channel.
func buttonOf(t *testing.T, e *env, channel, msgID, option string) string {
	t.Helper()
	for _, m := range e.fake.Messages(channel) {
		for _, row := range m.Components {
			for _, b := range row.Components {
				if _, o, _, ok := promptPress(b.CustomID); ok && o == option && m.ID == msgID {
					return b.CustomID
				}
			}
		}
	}
	t.Fatalf("no button %q on message %s in %s", option, msgID, channel)
	return ""
}
