package discord

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/platform/discord/discordtest"
)

// TestClaimInBoundGuildIsSetAside is issue 22's hijack on the platform:
// t2 holds a claim of channel general in t1's guild Lab (stored before
// the fix, without its guild), opened to any author, and Ada is linked to
// t2. Every message in general and its thread still reaches t1 (Ada's
// too), t2 is never granted the channel, and t2's send there is declined
// on the instance with the Gateway and on one without it, while t1's goes
// through. A claim of t2's in its own guild and a grant where no binding
// holds still work.
func TestClaimInBoundGuildIsSetAside(t *testing.T) {
	t.Parallel()
	bindings := []platform.Binding{
		{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"},
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"},
		{Kind: platform.BindScope, ID: chanGeneral, Tenant: "t2"}, // no Space: a claim from before the fix
		{Kind: platform.BindScope, ID: chanOther, Tenant: "t2", Space: guildOther},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "t2"},
		{Kind: platform.BindUser, ID: userAda, Tenant: "t2"},
	}
	e := newEnv(t, discordtest.Options{}, func(c *Config) {
		c.Tenants = map[string]TenantConfig{"t1": {FreeResponseChannels: []string{"*"}}}
	})
	e.startReady(t)
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	by := func(user, id, channel, text string) map[string]any {
		m := msg(id, channel, guildLab, text, false)
		m["author"] = map[string]any{"id": user, "username": "u" + user}
		return m
	}
	for _, m := range []map[string]any{
		by("777", "9101", chanGeneral, "eve in general"),
		by(userAda, "9102", chanGeneral, "ada in general"),
		by(userAda, "9103", threadPlan, "ada in the thread"),
	} {
		e.dispatch(t, "MESSAGE_CREATE", m)
		if d := e.sink.Next(t); d.Tenant != "t1" || d.Event == nil || d.Event.Text != m["content"] {
			t.Fatalf("delivery to %q %+v, want %q to t1", d.Tenant, d.Event, m["content"])
		}
	}
	send := func(e *env, tenant, chat string) contract.Result {
		t.Helper()
		return execute(t, e, tenant, `{"op":"send","chat_id":"`+chat+`","content":"from `+tenant+`","reply_to":null,"metadata":{}}`)
	}
	standby := newStandbyEnv(t, nil)
	if err := standby.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string]*env{"the Gateway's instance": e, "a standby": standby} {
		for _, chat := range []string{chanGeneral, threadPlan} {
			if granted(t, env, chat, "t2") {
				t.Fatalf("%s: t2 is granted %s in t1's guild", name, chat)
			}
			if r := send(env, "t2", chat); r.Success || r.Code != contract.CodeEgressDeclined {
				t.Fatalf("%s: t2's send into %s: %+v, want the decline", name, chat, r)
			}
			if r := send(env, "t1", chat); !r.Success {
				t.Fatalf("%s: t1's send into its %s: %+v", name, chat, r)
			}
		}
		if r := send(env, "t2", chanOther); !r.Success {
			t.Fatalf("%s: t2's send into its own channel: %+v", name, r)
		}
	}
}

// TestClaimantActsInItsThreads: in guild Lab, which no tenant is bound
// to, t3 claimed channel general for any author. t3 may answer in general
// and in its thread (the cache knows the thread's channel), before any
// message and after one routed to it there; t1, whose guild Lab no longer
// is, may not.
func TestClaimantActsInItsThreads(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"},
		{Kind: platform.BindScope, ID: chanGeneral, Tenant: "t3", Space: guildLab},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "t3"},
	}); err != nil {
		t.Fatal(err)
	}
	send := func(tenant, chat string) contract.Result {
		t.Helper()
		return execute(t, e, tenant, `{"op":"send","chat_id":"`+chat+`","content":"from `+tenant+`","reply_to":null,"metadata":{}}`)
	}
	check := func(when string) {
		t.Helper()
		for _, chat := range []string{chanGeneral, threadPlan} {
			if r := send("t3", chat); !r.Success {
				t.Fatalf("%s: t3's send into %s: %+v", when, chat, r)
			}
			if r := send("t1", chat); r.Success || r.Code != contract.CodeEgressDeclined {
				t.Fatalf("%s: t1's send into %s: %+v, want the decline", when, chat, r)
			}
		}
	}
	check("before any message")
	e.dispatch(t, "MESSAGE_CREATE", msg("9201", threadPlan, guildLab, "in the thread", true))
	if d := e.sink.Next(t); d.Tenant != "t3" || d.Event == nil || d.Event.Text != "in the thread" {
		t.Fatalf("delivery to %q %+v, want the thread's message to t3", d.Tenant, d.Event)
	}
	check("after a message")
}

// TestStandbyClaimantActsInItsThreads: TestClaimantActsInItsThreads on an
// instance without the Gateway (its channel cache empty), before any
// message: t3, which claimed channel general, may answer in general's
// thread at once, the thread placed by its parent with one GET
// /channels/{id} and the next send asking no more; t1 is declined there
// with one lookup and then from its decline memory; t2 still acts in its
// own guild.
func TestStandbyClaimantActsInItsThreads(t *testing.T) {
	t.Parallel()
	e := newStandbyEnv(t, nil)
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"},
		{Kind: platform.BindScope, ID: chanGeneral, Tenant: "t3", Space: guildLab},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "t3"},
	}); err != nil {
		t.Fatal(err)
	}
	send := func(tenant, chat string) contract.Result {
		t.Helper()
		return execute(t, e, tenant, `{"op":"send","chat_id":"`+chat+`","content":"from `+tenant+`","reply_to":null,"metadata":{}}`)
	}
	for i, want := range []int{1, 0} {
		before := len(e.fake.Requests())
		if r := send("t3", threadPlan); !r.Success {
			t.Fatalf("send %d: t3's send into its claimed channel's thread: %+v", i, r)
		}
		if n := channelLookups(e, before, threadPlan); n != want {
			t.Fatalf("send %d: t3's send made %d lookups of the thread, want %d", i, n, want)
		}
	}
	if got := e.fake.Messages(threadPlan); len(got) != 2 {
		t.Fatalf("the thread has %d messages, want t3's 2", len(got))
	}
	if r := send("t3", chanGeneral); !r.Success {
		t.Fatalf("t3's send into its claimed channel: %+v", r)
	}
	e.p.cache.chans.Remove(threadPlan) // t1's first ask looks the thread up
	for i, want := range []int{1, 0} {
		before := len(e.fake.Requests())
		if r := send("t1", threadPlan); r.Success || r.Code != contract.CodeEgressDeclined {
			t.Fatalf("ask %d: t1's send into t3's thread: %+v, want the decline", i, r)
		}
		if n := channelLookups(e, before, threadPlan); n != want {
			t.Fatalf("ask %d: t1's decline made %d lookups of the thread, want %d", i, n, want)
		}
	}
	if r := send("t2", chanOther); !r.Success {
		t.Fatalf("t2's send into its own channel: %+v", r)
	}
}

// TestStandbyInteractionInAClaimedThread: an instance without the Gateway
// (its channel cache empty) places an interaction in a thread by the
// parent the interaction names, so a thread of a claimed channel is the
// claimant's there too: Ada, linked to t1, reaches t3, which claimed the
// thread's channel, not her own tenant by author link.
func TestStandbyInteractionInAClaimedThread(t *testing.T) {
	t.Parallel()
	e := newStandbyEnv(t, nil)
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"},
		{Kind: platform.BindScope, ID: chanGeneral, Tenant: "t3", Space: guildLab},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "t3"},
		{Kind: platform.BindUser, ID: userAda, Tenant: "t1"},
	}); err != nil {
		t.Fatal(err)
	}
	var in map[string]any
	if err := json.Unmarshal(slashBody("8430", "thread-token", guildLab, threadPlan), &in); err != nil {
		t.Fatal(err)
	}
	in["channel"] = map[string]any{"id": threadPlan, "type": 11, "guild_id": guildLab, "name": "Deploy plan", "parent_id": chanGeneral}
	body, _ := json.Marshal(in)
	url := e.webhookServer(t)
	if code, ack := post(t, discordtest.InteractionRequest(url, e.priv, time.Now(), body)); code != http.StatusOK || ack != `{"type":5}` {
		t.Fatalf("slash in the claimed channel's thread = %d %s", code, ack)
	}
	if d := e.sink.Next(t); d.Tenant != "t3" {
		t.Fatalf("the interaction in t3's claimed channel's thread reached %q", d.Tenant)
	}
}

// TestMessageInAnUncachedThreadOfAClaimedChannel: a message in a thread the
// channel cache does not hold (pushed out of it) is placed by the thread's
// parent all the same, so it reaches the claimant of the parent channel,
// not its author's own tenant by author link.
func TestMessageInAnUncachedThreadOfAClaimedChannel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"},
		{Kind: platform.BindScope, ID: chanGeneral, Tenant: "t3", Space: guildLab},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "t3"},
		{Kind: platform.BindUser, ID: userAda, Tenant: "t1"},
	}); err != nil {
		t.Fatal(err)
	}
	e.p.cache.chans.Remove(threadPlan)
	e.dispatch(t, "MESSAGE_CREATE", msg("9301", threadPlan, guildLab, "in the thread", true))
	if d := e.sink.Next(t); d.Tenant != "t3" {
		t.Fatalf("the message in t3's claimed channel's thread reached %q", d.Tenant)
	}
}

// TestCategoryClaimHoldsNoChannel: a scope claim holds the claimed chat and
// the threads of a claimed channel (docs/security.md, rule 2), nothing
// more. A Discord category is a channel the bot sees, so a tenant can
// claim it, but the channels filed under it are not its threads: t3,
// which claimed category Projects in guild Lab (bound to nobody), may not
// act in channel "plans" under it, which it never claimed (nor would a
// later channel filed there be its), and a message there does not reach it.
func TestCategoryClaimHoldsNoChannel(t *testing.T) {
	t.Parallel()
	const category, filed = "150", "151"
	e := newEnv(t, discordtest.Options{}, nil)
	e.fake.AddChannel(discordtest.Channel{ID: category, Type: 4, GuildID: guildLab, Name: "Projects"})
	e.fake.AddChannel(discordtest.Channel{ID: filed, Type: 0, GuildID: guildLab, Name: "plans", ParentID: category})
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"},
		{Kind: platform.BindScope, ID: category, Tenant: "t3", Space: guildLab},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "t3"},
	}); err != nil {
		t.Fatal(err)
	}
	if r := execute(t, e, "t3", `{"op":"send","chat_id":"`+filed+`","content":"mine?","reply_to":null,"metadata":{}}`); r.Success || r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t3's send into a channel of the category it claimed = %+v, want the decline", r)
	}
	if got := e.fake.Messages(filed); len(got) != 0 {
		t.Fatalf("the channel holds %+v", got)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("9301", filed, guildLab, "hello plans", true))
	e.metrics.waitDrop(t, "unclaimed", 1)
	e.sink.Empty(t)
}
