package discord

import (
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/platform/discord/discordtest"
)

// followUpAction is a follow_up of session key with content.
func followUpAction(key, content string) string {
	return `{"op":"follow_up","session_key":"` + key + `","kind":"discord.interaction_token","content":"` + content + `","metadata":{}}`
}

// TestFollowUpAfterRebindDeclined: Ada's slash command in guildLab, bound
// to t1, leaves t1 a follow-up token for 15 minutes; guildLab is then
// rebound to t2. t1's follow_up would be a message in what is now t2's
// channel: it is declined as a send there is, with the uniform text, and
// reaches no webhook (before, the token alone let it through).
func TestFollowUpAfterRebindDeclined(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.AddInteractionTokenIn("tok-8401", chanGeneral)
	body := slashBody("8401", "tok-8401", guildLab, chanGeneral)
	if code, ack := post(t, discordtest.InteractionRequest(e.webhookServer(t), e.priv, time.Now(), body)); code != 200 || ack != `{"type":5}` {
		t.Fatalf("Ada's slash command = %d %s", code, ack)
	}
	d := e.sink.Next(t)
	if d.Tenant != "t1" {
		t.Fatalf("Ada's slash command delivered as %+v, want to t1", d)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t2"},
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	before := len(e.fake.Requests())
	if r := execute(t, e, "t1", followUpAction(d.SessionKey, "t1 after the rebind")); r != contract.Declined(platformName) {
		t.Fatalf("t1's follow_up into t2's channel = %+v, want %+v", r, contract.Declined(platformName))
	}
	for _, q := range e.fake.Requests()[before:] {
		if strings.Contains(q.Path, "/webhooks/") {
			t.Fatalf("t1's declined follow_up reached Discord: %s %s", q.Method, q.Path)
		}
	}
	if ms := e.fake.Messages(chanGeneral); len(ms) != 0 {
		t.Fatalf("t2's channel holds %+v, want nothing of t1's", ms)
	}
}

// TestDMFollowUpByDMTenant: Ada, linked to nobody, runs a slash command in
// her DM with the bot; rule 4 routes it to dm_tenant t1 and records no
// grant. t1's follow_up is posted, on the instance that took the
// interaction and on another sharing its vault whose cache never saw the
// DM channel; once Ada is linked to t2, rule 4 no longer gives t1 her DM
// and its follow_up is declined.
func TestDMFollowUpByDMTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.AddInteractionTokenIn("tok-8402", chanDMAda)
	body := slashBody("8402", "tok-8402", "", chanDMAda)
	if code, ack := post(t, discordtest.InteractionRequest(e.webhookServer(t), e.priv, time.Now(), body)); code != 200 || ack != `{"type":5}` {
		t.Fatalf("Ada's DM slash command = %d %s", code, ack)
	}
	d := e.sink.Next(t)
	if d.Tenant != "t1" {
		t.Fatalf("Ada's DM slash command delivered as %+v, want to dm_tenant t1", d)
	}
	if r := execute(t, e, "t1", followUpAction(d.SessionKey, "done here")); !r.Success || r.MessageID == "" {
		t.Fatalf("t1's DM follow_up = %+v", r)
	}
	other := newEnvDeps(t, platform.Deps{Vault: e.vault}, discordtest.Options{}, nil)
	other.startReady(t)
	other.fake.AddInteractionTokenIn("tok-8402", chanDMAda)
	if _, cached := other.p.cache.cachedChannel(chanDMAda); cached {
		t.Fatal("the other instance has the DM channel cached; the test needs it not to")
	}
	if r := execute(t, other, "t1", followUpAction(d.SessionKey, "done there")); !r.Success || r.MessageID == "" {
		t.Fatalf("t1's DM follow_up on another instance = %+v", r)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"},
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"}, {Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	if r := execute(t, e, "t1", followUpAction(d.SessionKey, "after the link")); r != contract.Declined(platformName) {
		t.Fatalf("t1's follow_up in the DM of a user linked to t2 = %+v, want %+v", r, contract.Declined(platformName))
	}
}
