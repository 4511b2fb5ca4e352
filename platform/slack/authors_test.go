package slack

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"weak"

	"connector/contract"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/slack/slacktest"
	"connector/store"
	"connector/vault"
)

// Ownership world: besides the fixture world, workspace C, installed and
// bound to no tenant, with its channel and users.
const (
	chanNew = "C0NEW00001" // in C
	userCat = "U0CAT00001" // of C
	userDan = "U0DAN00002" // of C
	dmCat   = "D0CAT00001" // Cat's DM with the app in C
)

// ownershipEnv is the fixture world plus workspace C, with bindings
// (besides the fixture's), on deps as newEnv's.
func ownershipEnv(t *testing.T, deps *platform.Deps, bindings ...platform.Binding) *env {
	t.Helper()
	e := newEnv(t, nil, deps)
	e.fake.AddTeam(teamC)
	e.fake.AddChannel(teamC.ID, slacktest.Channel{ID: chanNew, Name: "new-general"})
	e.fake.AddChannel(teamC.ID, slacktest.Channel{ID: dmCat, IsIM: true, Peer: userCat})
	e.fake.AddUser(teamC.ID, slacktest.User{ID: userCat, Name: "cat"})
	e.fake.AddUser(teamC.ID, slacktest.User{ID: userDan, Name: "dan"})
	if err := e.p.works.install(context.Background(), teamC.ID, installRecord{Token: teamC.Token, BotUser: teamC.BotUser}); err != nil {
		t.Fatal(err)
	}
	base := []platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindChannel, ID: chanOps, Tenant: "t3"},
	}
	if err := e.p.Bind(append(base, bindings...)); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestOwnershipOrder: a bound workspace or channel takes its messages
// whoever wrote them (a link elsewhere does not move them); in a workspace
// nobody binds, a claimed channel is its claimant's (for authors its
// principal admits), and a linked author's message reaches the author's
// tenant under the owner floor (no mention needed), which may then answer
// there; nobody else may.
func TestOwnershipOrder(t *testing.T) {
	e := ownershipEnv(t, nil,
		platform.Binding{Kind: platform.BindUser, ID: userAda, Tenant: "t2"},
		platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t2"},
		platform.Binding{Kind: platform.BindScope, ID: "C0CLM00001", Tenant: "t3", Space: teamC.ID},
		platform.Binding{Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "t3"},
	)
	e.fake.AddChannel(teamC.ID, slacktest.Channel{ID: "C0CLM00001", Name: "claimed"})
	mention := "<@" + teamC.BotUser + "> "
	// Rule 1: workspace A is t1's, Ada's link to t2 notwithstanding.
	e.event(t, teamA, "Ev1", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490100.000100", "", "<@"+teamA.BotUser+"> hi"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t1" {
		t.Fatalf("bound workspace's message went to %s", d.Tenant)
	}
	// Rule 3: in C, Cat (linked to t2) needs no mention, and t2 may answer.
	e.event(t, teamC, "Ev2", slacktest.MessageEvent(teamC.ID, chanNew, userCat, "1768490100.000200", "", "status?"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.Text != "status?" {
		t.Fatalf("linked author's message: %+v", d)
	}
	if r := e.execute(t, "t2", `{"op":"send","chat_id":"`+chanNew+`","content":"ok","metadata":{}}`); !r.Success {
		t.Fatalf("t2 answering where its author spoke: %+v", r)
	}
	if c := e.lastCall(t, "chat.postMessage"); c.Team != teamC.ID {
		t.Fatalf("posted with %s's token", c.Team)
	}
	for _, tenant := range []string{"t1", "t3"} {
		if r := e.execute(t, tenant, `{"op":"send","chat_id":"`+chanNew+`","content":"x","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
			t.Fatalf("%s in t2's granted channel: %+v", tenant, r)
		}
	}
	// Dan is linked to nobody: his message in C reaches nobody.
	e.event(t, teamC, "Ev3", slacktest.MessageEvent(teamC.ID, chanNew, userDan, "1768490100.000300", "", mention+"hello?"), http.StatusOK)
	e.sink.Empty(t)
	// Rule 2: t3's claimed channel admits anyone (principal any); only t3
	// may act there.
	e.event(t, teamC, "Ev4", slacktest.MessageEvent(teamC.ID, "C0CLM00001", userDan, "1768490100.000400", "", mention+"deploy"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t3" {
		t.Fatalf("claimed channel's message went to %s", d.Tenant)
	}
	if r := e.execute(t, "t3", `{"op":"send","chat_id":"C0CLM00001","content":"ok","metadata":{}}`); !r.Success {
		t.Fatalf("claimant: %+v", r)
	}
	if r := e.execute(t, "t2", `{"op":"send","chat_id":"C0CLM00001","content":"x","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("another tenant in the claimed channel: %+v", r)
	}
	// Cat's DM reaches the tenant Cat is linked to.
	e.event(t, teamC, "Ev5", slacktest.MessageEvent(teamC.ID, dmCat, userCat, "1768490100.000500", "", "hey"), http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.Source.ChatType != "dm" {
		t.Fatalf("linked DM: %+v", d)
	}
}

// TestGrantYieldsToALaterBinding: a channel t2 was granted by its author
// stops being t2's once its workspace is bound to another tenant, and
// t1's edit or delete there of t2's answer is declined, and bad_request
// with its ts spelt otherwise than Slack's ("0…", "….0001"; before, such
// a spelling named no posted record and reached Slack).
func TestGrantYieldsToALaterBinding(t *testing.T) {
	link := platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t2"}
	e := ownershipEnv(t, nil, link)
	e.event(t, teamC, "Ev1", slacktest.MessageEvent(teamC.ID, chanNew, userCat, "1768490100.000100", "", "status?"), http.StatusOK)
	e.sink.Next(t)
	if granted, _ := e.p.ChatGranted(context.Background(), chanNew, "t2"); granted != platform.HoldGrant {
		t.Fatal("no grant after the linked author's message")
	}
	theirs := e.execute(t, "t2", `{"op":"send","chat_id":"`+chanNew+`","content":"t2's answer","metadata":{}}`)
	if !theirs.Success || !strings.HasSuffix(string(theirs.MessageID), "00") {
		t.Fatalf("t2's answer by grant: %+v", theirs)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindTeam, ID: teamC.ID, Tenant: "t1"}, link}); err != nil {
		t.Fatal(err)
	}
	if r := e.execute(t, "t2", `{"op":"send","chat_id":"`+chanNew+`","content":"x","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 in a channel of a workspace bound to t1: %+v", r)
	}
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"`+chanNew+`","content":"ok","metadata":{}}`); !r.Success {
		t.Fatalf("t1 in its workspace: %+v", r)
	}
	ts := string(theirs.MessageID)
	for _, id := range []string{ts, "0" + ts, strings.TrimSuffix(ts, "00")} {
		want := contract.CodeBadRequest
		if id == ts {
			want = contract.CodeEgressDeclined
		}
		for _, op := range []string{`{"op":"edit","chat_id":"` + chanNew + `","message_id":"` + id + `","content":"hijacked"}`, `{"op":"delete","chat_id":"` + chanNew + `","message_id":"` + id + `"}`} {
			if r := e.execute(t, "t1", op); r.Success || r.Code != want {
				t.Errorf("t1's %s: %+v, want %s", op, r, want)
			}
		}
	}
	if n := len(e.fake.Calls("chat.update")) + len(e.fake.Calls("chat.delete")); n != 0 {
		t.Errorf("%d edits and deletes of t2's answer reached Slack, want none", n)
	}
}

// TestLocateChat: a claim places a channel in the workspace this
// instance saw it in, else in one of the asking tenant's workspaces; a
// channel in none of them is unknown, as is a non-Slack id.
func TestLocateChat(t *testing.T) {
	e := ownershipEnv(t, nil)
	e.p.seenIn(chanNew, teamC.ID)
	if c, err := e.p.LocateChat(platform.WithTenant(context.Background(), "t1"), chanNew); err != nil || c.Space != teamC.ID || c.DM {
		t.Fatalf("seen channel: %+v %v", c, err)
	}
	if c, err := e.p.LocateChat(platform.WithTenant(context.Background(), "t1"), chanGeneral); err != nil || c.Space != teamA.ID {
		t.Fatalf("t1's channel: %+v %v", c, err)
	}
	for _, chat := range []string{chanAcme, "C0NOWHERE1", "general"} {
		if _, err := e.p.LocateChat(platform.WithTenant(context.Background(), "t1"), chat); !errors.Is(err, platform.ErrUnknownChat) {
			t.Errorf("%s: %v", chat, err)
		}
	}
	if c, err := e.p.LocateChat(platform.WithTenant(context.Background(), "t1"), dmAda); err != nil || !c.DM {
		t.Fatalf("a DM: %+v %v", c, err)
	}
}

// TestGrantPlacedOnEveryInstance: a grant is judged where the channel is,
// on every instance sharing the store, whether it saw the channel or not:
// the instance places the channel with conversations.info (the grant's
// workspace's token) before it lets the grant stand. A grant made while
// its workspace was bound to nobody stops counting on every instance once
// the workspace is bound to another tenant, and a grant in a Slack Connect
// channel also shared with a workspace bound to another tenant never
// counts; meanwhile the granted tenant acts with the token of the
// workspace the channel is in.
func TestGrantPlacedOnEveryInstance(t *testing.T) {
	st := newSharedStore(t)
	fake := newFake(t)
	fake.AddTeam(teamC)
	fake.AddChannel(teamC.ID, slacktest.Channel{ID: chanNew, Name: "new-general"})
	const shared = "C0SHR00001" // C's, shared with A (t1's)
	fake.AddChannel(teamC.ID, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamC.ID, teamA.ID}})
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamC.ID, teamA.ID}})
	fake.AddUser(teamC.ID, slacktest.User{ID: userCat, Name: "cat"})
	link := platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t2"}
	base := []platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindChannel, ID: chanOps, Tenant: "t3"}, link,
	}
	instance := func(name string, bindings []platform.Binding) *env {
		e := newEnvOn(t, fake, nil, &platform.Deps{Store: st, Vault: vault.NewDurable(st.Capabilities(), vault.Config{}),
			Cluster: newNode(t, st, name)})
		if err := e.p.works.install(context.Background(), teamC.ID, installRecord{Token: teamC.Token, BotUser: teamC.BotUser}); err != nil {
			t.Fatal(err)
		}
		if err := e.p.Bind(bindings); err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := instance("i0", base), instance("i1", base)
	send := func(e *env, tenant, chat string) contract.Result {
		return e.execute(t, tenant, `{"op":"send","chat_id":"`+chat+`","content":"ok","metadata":{}}`)
	}
	// Cat (linked to t2) speaks in C's channels on a: t2 is granted them.
	for i, chat := range []string{chanNew, shared} {
		a.event(t, teamC, "Ev"+strconv.Itoa(i), slacktest.MessageEvent(teamC.ID, chat, userCat, "1768490100.00010"+strconv.Itoa(i), "", "status?"), http.StatusOK)
		if d := a.sink.Next(t); d.Tenant != "t2" {
			t.Fatalf("%s: %+v", chat, d)
		}
	}
	// b never saw the channel: it places it in C and t2 posts there with
	// C's token.
	if r := send(b, "t2", chanNew); !r.Success {
		t.Fatalf("t2 on the other instance: %+v", r)
	}
	if c := b.lastCall(t, "chat.postMessage"); c.Team != teamC.ID {
		t.Fatalf("posted with %q's token", c.Team)
	}
	// The Slack Connect channel is also in A, t1's: t2's grant does not
	// stand there, on either instance.
	for _, e := range []*env{a, b} {
		if granted, err := e.p.ChatGranted(platform.WithTenant(context.Background(), "t2"), shared, "t2"); granted != platform.HoldNone || err != nil {
			t.Fatalf("t2's grant stands in a channel shared with t1's workspace: %v %v", granted, err)
		}
	}
	// C is bound to t1: t2's grant stops counting on both instances and on
	// one that never saw the channel; t1 may act there.
	rebound := append(slices.Clone(base), platform.Binding{Kind: platform.BindTeam, ID: teamC.ID, Tenant: "t1"})
	c := instance("i2", rebound)
	for _, e := range []*env{a, b} {
		if err := e.p.Bind(rebound); err != nil {
			t.Fatal(err)
		}
	}
	for name, e := range map[string]*env{"a": a, "b": b, "c": c} {
		if granted, err := e.p.ChatGranted(platform.WithTenant(context.Background(), "t2"), chanNew, "t2"); granted != platform.HoldNone || err != nil {
			t.Fatalf("%s: t2's grant stands in a channel of t1's workspace: %v %v", name, granted, err)
		}
		if r := send(e, "t2", chanNew); r.Code != contract.CodeEgressDeclined {
			t.Fatalf("%s: t2 in t1's workspace: %+v", name, r)
		}
	}
	if r := send(c, "t1", chanNew); !r.Success {
		t.Fatalf("t1 in its workspace: %+v", r)
	}
}

// TestPressOfALinkedAuthorAfterItsGrantLapsed: in a workspace nobody
// binds, a linked author's DM reaches its tenant by grant, which lapses a
// day after the author last wrote; the prompt the tenant posted there is
// remembered for 7 days. The author's press a day later is delivered, as
// the author's message would be (and renews the grant: the tenant may
// update its prompt), never dropped as prompt_not_owned.
func TestPressOfALinkedAuthorAfterItsGrantLapsed(t *testing.T) {
	e := ownershipEnv(t, nil, platform.Binding{Kind: platform.BindUser, ID: userCat, Tenant: "t2"})
	e.event(t, teamC, "Ev1", slacktest.MessageEvent(teamC.ID, dmCat, userCat, "1768490100.000100", "", "deploy?"), http.StatusOK)
	e.sink.Next(t)
	r := e.execute(t, "t2", `{"op":"prompt","chat_id":"`+dmCat+`","content":"Deploy?","prompt_id":"p1","options":[{"id":"once","label":"Approve once"}]}`)
	if !r.Success {
		t.Fatalf("prompt: %+v", r)
	}
	// The grant lapses (requests are signed at the time of day: the clock
	// cannot move a day on, so the grant, platform.Grants' key, goes).
	e.p.deps.Vault.Delete(context.Background(), vault.Key{Tenant: "t2", SessionKey: "5:slack/" + dmCat, Kind: vault.KindChatGrant})
	if _, granted, _ := e.p.grants.Granted(context.Background(), dmCat, "t2"); granted {
		t.Fatal("the grant is still held")
	}
	body := slacktest.Press(teamC.ID, dmCat, userCat, r.MessageID, "", "hp1:p1:once", "Approve once")
	if code, text := e.post(t, InteractionsPath, "application/x-www-form-urlencoded", body); code != http.StatusOK {
		t.Fatalf("press: %d %s", code, text)
	}
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "p1" {
		t.Fatalf("the press delivered to %s as %+v", d.Tenant, d.Event)
	}
	e.stop() // waits for the prompt's update
	e.stop = func() {}
	if updates := e.fake.Calls("chat.update"); len(updates) != 1 {
		t.Fatalf("prompt updates %+v, want one", updates)
	}
}

// TestSharedChannelOnOneTokenKeepsToItsMessages: without slack.client_id
// the one bot_token serves every workspace, so in a Slack Connect channel
// shared by A (t1's) and B (t2's) the bot posts for both tenants as one
// bot user, and Slack would let either's edit or delete change the
// other's message. There each tenant edits and deletes only the messages
// the bot posted for it, as where tenants act on grants (platform.Execute):
// another's is egress_declined, and nothing reaches Slack.
func TestSharedChannelOnOneTokenKeepsToItsMessages(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	e := newEnvOn(t, fake, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, nil)
	posted := map[string]string{}
	for _, tenant := range []string{"t1", "t2"} {
		r := e.execute(t, tenant, `{"op":"send","chat_id":"`+shared+`","content":"from `+tenant+`","metadata":{}}`)
		if !r.Success || r.MessageID == "" {
			t.Fatalf("%s's send: %+v", tenant, r)
		}
		posted[tenant] = r.MessageID
	}
	for _, c := range [][2]string{{"t1", "t2"}, {"t2", "t1"}} {
		tenant, other := c[0], c[1]
		updates, deletes := len(fake.Calls("chat.update")), len(fake.Calls("chat.delete"))
		edit := `{"op":"edit","chat_id":"` + shared + `","message_id":"` + posted[other] + `","content":"hijacked"}`
		del := `{"op":"delete","chat_id":"` + shared + `","message_id":"` + posted[other] + `"}`
		for _, op := range []string{edit, del} {
			if r := e.execute(t, tenant, op); r.Code != contract.CodeEgressDeclined {
				t.Fatalf("%s on %s's message: %+v, want egress_declined", tenant, other, r)
			}
		}
		if len(fake.Calls("chat.update")) != updates || len(fake.Calls("chat.delete")) != deletes {
			t.Fatalf("%s changed %s's message", tenant, other)
		}
		if r := e.execute(t, tenant, `{"op":"edit","chat_id":"`+shared+`","message_id":"`+posted[tenant]+`","content":"edited"}`); !r.Success {
			t.Fatalf("%s editing its own message: %+v", tenant, r)
		}
	}
}

// TestGrantUnknownWhileTheStoreIsDown: t2 holds chanNew, in workspace C
// which nobody binds, by grant, made on another instance and kept in
// Redis. With Redis down, this instance, which never held the grant,
// answers t2's send there unavailable, which the gateway may retry
// (before, a grant that could not be looked up counted as none:
// egress_declined, final); t1's send into its workspace still goes out.
func TestGrantUnknownWhileTheStoreIsDown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	elsewhere := platform.NewGrants(platformName, vault.NewDurable(st.Capabilities(), vault.Config{}), nil, nil)
	elsewhere.Add(t.Context(), chanNew, teamC.ID, "t2", time.Time{})
	e := ownershipEnv(t, &platform.Deps{Vault: vault.NewDurable(st.Capabilities(), vault.Config{})})
	srv.Kill(t)
	send := func(tenant, chat string) contract.Result {
		t.Helper()
		return e.execute(t, tenant, `{"op":"send","chat_id":"`+chat+`","content":"hi"}`)
	}
	if r := send("t2", chanNew); r.Code != contract.CodeUnavailable {
		t.Errorf("t2's send on its grant with the store down = %+v, want unavailable", r)
	}
	// An action naming no platform, in t1's channel this instance has not
	// seen: Slack's first ask would wait for conversations.info, so
	// Locate asks it again, waiting, and finds it t1's.
	if found, _, err := platform.Locate(t.Context(), []platform.Platform{e.p, &otherChats{}}, "t1", chanGeneral); err != nil || found != e.p {
		t.Errorf("Locate of t1's channel with the store down = %v, %v; want slack", found, err)
	}
	if r := send("t1", chanGeneral); !r.Success {
		t.Errorf("t1's send into its workspace with the store down = %+v", r)
	}
}

// TestOneTokenActsInItsSeenChannelWhileSlackCannotPlaceIt: without
// slack.client_id, with another tenant's workspace bound, a channel is
// placed (conversations.info) before a tenant acts in it. While Slack does
// not answer that lookup, t1 still sends into #general, seen in its own
// workspace A: held by grant, the stricter hold, whether or not the
// channel is shared with another tenant's workspace. t2, whose workspace
// it was not seen in, is still told unavailable. Before, t1 was told
// unavailable too.
func TestOneTokenActsInItsSeenChannelWhileSlackCannotPlaceIt(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, nil)
	e.p.seenIn(chanGeneral, teamA.ID) // an event of A's there
	e.fake.Fail404("conversations.info", 100)
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"`+chanGeneral+`","content":"x","metadata":{}}`); !r.Success {
		t.Fatalf("t1 in its channel: %+v, want it sent", r)
	}
	if r := e.execute(t, "t2", `{"op":"send","chat_id":"`+chanGeneral+`","content":"x","metadata":{}}`); r.Code != contract.CodeUnavailable {
		t.Fatalf("t2 in t1's channel: %+v, want unavailable", r)
	}
}

// TestBindingAWorkspaceEndsItsTenantsDeclines: t3, bound to no
// workspace, is declined #general (remembered for declineMemory); once A
// is bound to t3 its send there goes through at once. Before, the decline
// remembered before the binding answered for up to declineMemory.
func TestBindingAWorkspaceEndsItsTenantsDeclines(t *testing.T) {
	e := newEnv(t, nil, nil)
	send := `{"op":"send","chat_id":"` + chanGeneral + `","content":"x","metadata":{}}`
	if r := e.execute(t, "t3", send); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t3 bound to no workspace: %+v, want egress_declined", r)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t3"}}); err != nil {
		t.Fatal(err)
	}
	if r := e.execute(t, "t3", send); !r.Success {
		t.Fatalf("t3 once A is bound to it: %+v, want it sent", r)
	}
}

// TestDeclinesHoldNoFormerBindings: a decline remembered under the
// workspaces bound before a change keeps nothing of them alive. Before,
// each held the workspaces map it was made under until read again or
// evicted (the cache expires on reads alone): every change of the
// workspaces bound left a copy of them for each such decline.
func TestDeclinesHoldNoFormerBindings(t *testing.T) {
	e := newEnv(t, nil, nil)
	if r := e.execute(t, "t3", `{"op":"send","chat_id":"`+chanGeneral+`","content":"x","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t3 bound to no workspace: %+v, want egress_declined", r)
	}
	before := weak.Make(e.p.teams.Load())
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t3"}}); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	if before.Value() != nil {
		t.Fatal("the workspaces bound before the change are still held")
	}
}

// TestBindingsLeavingWorkspacesKeepDeclines: a change of the bindings that
// binds no workspace anew (a channel bound) leaves the declines
// remembered: t1, declined B's #acme-general, is declined again with no
// lookup. Before, every change of the bindings had it asked again.
func TestBindingsLeavingWorkspacesKeepDeclines(t *testing.T) {
	e := newEnv(t, nil, nil)
	send := `{"op":"send","chat_id":"` + chanAcme + `","content":"x","metadata":{}}`
	if r := e.execute(t, "t1", send); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1 in B's channel: %+v, want egress_declined", r)
	}
	lookups := len(e.fake.Calls("conversations.info"))
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindChannel, ID: chanOps, Tenant: "t3"}}); err != nil {
		t.Fatal(err)
	}
	if r := e.execute(t, "t1", send); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1 in B's channel again: %+v, want egress_declined", r)
	}
	if n := len(e.fake.Calls("conversations.info")) - lookups; n != 0 {
		t.Fatalf("%d lookups for the decline remembered, want none", n)
	}
}

// TestHeldAloneAfterTheChannelIsEvicted: a Slack Connect channel shared by
// A (t1's) and B (t2's) is not t1's alone; once chanTeamsSize other
// channels pushed it out of the channels' workspaces, and an event of A's
// showed it in A again, it still is not. Before, its placement (placed)
// outlived what it had placed, so the channel read as in A alone and t1's
// thread context showed t2's messages.
func TestHeldAloneAfterTheChannelIsEvicted(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	e := newEnvOn(t, fake, nil, nil)
	ctx, cancel := contextFor()
	defer cancel()
	if e.p.heldAlone(ctx, shared, teamA.ID, "t1") {
		t.Fatal("a channel shared with t2's workspace read as t1's alone")
	}
	for i := range chanTeamsSize {
		e.p.seenIn("C"+strconv.Itoa(100_000_000+i), teamA.ID)
	}
	if e.p.chanTeams.Contains(shared) {
		t.Fatal("the channel was not evicted")
	}
	e.p.seenIn(shared, teamA.ID) // an event of A's there
	if e.p.heldAlone(ctx, shared, teamA.ID, "t1") {
		t.Fatal("after its eviction, a channel shared with t2's workspace read as t1's alone")
	}
}

// TestHeldAloneNotWhereTheChannelIsFoundNowhere: a channel t1 holds by
// A's binding that conversations.info finds in no workspace (the bot left
// it) is not t1's alone; nor, failing closed, is a channel t1 claimed
// whose placement leaves out the event's workspace C (bound to nobody,
// past the maxUnboundTeams others recorded). Before, both read as held
// alone.
func TestHeldAloneNotWhereTheChannelIsFoundNowhere(t *testing.T) {
	e := newEnv(t, nil, nil)
	ctx, cancel := contextFor()
	defer cancel()
	const gone = "C0GONE0001"
	if e.p.heldAlone(ctx, gone, teamA.ID, "t1") {
		t.Fatal("a channel found in no workspace read as t1's alone")
	}
	const shared = "C0SHR00001"
	e.fake.AddTeam(teamC)
	e.fake.AddChannel(teamC.ID, slacktest.Channel{ID: shared, Name: "partners"})
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindScope, ID: shared, Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	for i := range maxUnboundTeams {
		e.p.seenIn(shared, "T0UNB0000"+strconv.Itoa(i))
	}
	e.p.seenIn(shared, teamC.ID) // past the bound: not recorded
	if slices.Contains(e.p.channelTeams(shared), teamC.ID) {
		t.Fatal("C recorded past maxUnboundTeams")
	}
	if e.p.heldAlone(ctx, shared, teamC.ID, "t1") {
		t.Fatal("a channel placed without the event's workspace read as t1's alone")
	}
}
