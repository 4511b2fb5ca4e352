package slack

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/slack/slacktest"
	"connector/store"
	"connector/vault"
)

// TestReactionTurns: with reaction_triggers on, a reaction to the bot's
// message becomes the reactor's message "reaction:<added|removed>:<emoji>"
// in that message's thread, past the mention gate, with the reaction's
// event ts as its id (a retry of it is a duplicate); a reaction the
// native map does not know keeps its name.
func TestReactionTurns(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Tenants["t1"] = TenantConfig{ReactionTriggers: &[]string{}} }, nil)
	const root, reply = "1768400000.000100", "1768400000.000200"
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: root, User: userAda, Text: "deploy?"})
	e.fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: chanGeneral, TS: reply, ThreadTS: root, User: teamA.BotUser, BotID: teamA.BotID, Text: "deployed"})
	react := func(id, typ, name, ts string) {
		t.Helper()
		e.event(t, teamA, id, map[string]any{"type": typ, "user": userAda, "reaction": name, "item_user": teamA.BotUser,
			"item": map[string]any{"type": "message", "channel": chanGeneral, "ts": reply}, "event_ts": ts}, http.StatusOK)
	}
	react("Ev1", "reaction_added", "+1", "1768400100.000100")
	d := e.sink.Next(t)
	src := d.Event.Source
	if d.Tenant != "t1" || d.Event.Text != "reaction:added:👍" || d.Event.MessageID != "1768400100.000100" || d.Event.ReplyToMessageID != root ||
		src.UserID.Value != userAda || src.ThreadID.Value != root || src.ChatType != "group" {
		t.Fatalf("%+v %+v", d.Event, src)
	}
	react("Ev1", "reaction_added", "+1", "1768400100.000100") // Slack's retry
	e.sink.Empty(t)
	react("Ev2", "reaction_removed", "warning", "1768400200.000100")
	if d := e.sink.Next(t); d.Event.Text != "reaction:removed:⚠\ufe0f" {
		t.Fatalf("%q", d.Event.Text)
	}
	react("Ev3", "reaction_added", "party-parrot", "1768400300.000100")
	if d := e.sink.Next(t); d.Event.Text != "reaction:added:party-parrot" {
		t.Fatalf("%q", d.Event.Text)
	}
}

// TestReactionToAnotherTenantsAnswerStartsNoTurn: in a channel no binding
// or claim holds, where t1 and t2 both answer by author link (rule 3),
// reaction_triggers without an allowlist start a turn only on the tenant's
// own answer: Dan, linked to t2, reacting to t1's answer starts no t2 turn
// in t1's thread; to t2's it does.
func TestReactionToAnotherTenantsAnswerStartsNoTurn(t *testing.T) {
	on := TenantConfig{ReactionTriggers: &[]string{}}
	e := newEnv(t, func(c *Config) { c.Tenants["t1"], c.Tenants["t2"] = on, on }, nil)
	e.fake.AddTeam(teamC)
	e.fake.AddChannel(teamC.ID, slacktest.Channel{ID: chanNew, Name: "new-general"})
	e.fake.AddUser(teamC.ID, slacktest.User{ID: userCat, Name: "cat"})
	e.fake.AddUser(teamC.ID, slacktest.User{ID: userDan, Name: "dan"})
	if err := e.p.works.install(t.Context(), teamC.ID, installRecord{Token: teamC.Token, BotUser: teamC.BotUser}); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: userCat, Tenant: "t1"}, {Kind: platform.BindUser, ID: userDan, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	e.event(t, teamC, "Ev1", slacktest.MessageEvent(teamC.ID, chanNew, userCat, "1768490900.000100", "", "status?"), http.StatusOK)
	e.event(t, teamC, "Ev2", slacktest.MessageEvent(teamC.ID, chanNew, userDan, "1768490900.000200", "", "status?"), http.StatusOK)
	posted := map[string]string{}
	for _, tenant := range []string{"t1", "t2"} {
		if d := e.sink.Next(t); d.Tenant != tenant {
			t.Fatalf("delivered to %s, want %s", d.Tenant, tenant)
		}
		r := e.execute(t, tenant, `{"op":"send","chat_id":"`+chanNew+`","content":"`+tenant+`'s answer"}`)
		if !r.Success {
			t.Fatalf("%s's send: %+v", tenant, r)
		}
		posted[tenant] = r.MessageID
	}
	react := func(id, ts, eventTS string) {
		t.Helper()
		e.event(t, teamC, id, map[string]any{"type": "reaction_added", "user": userDan, "reaction": "+1", "item_user": teamC.BotUser,
			"item": map[string]any{"type": "message", "channel": chanNew, "ts": ts}, "event_ts": eventTS}, http.StatusOK)
	}
	react("Ev3", posted["t1"], "1768490900.000300") // handled before its 200: dropped
	react("Ev4", posted["t2"], "1768490900.000400")
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.MessageID != "1768490900.000400" || d.Event.ReplyToMessageID != posted["t2"] {
		t.Fatalf("delivered %s's %s in reply to %s; want t2's reaction to its own answer %s alone", d.Tenant, d.Event.MessageID, d.Event.ReplyToMessageID, posted["t2"])
	}
	e.sink.Empty(t)
}

// TestSharedChannelOnOneTokenReactionToAnotherTenantsAnswer: without
// slack.client_id, in a Slack Connect channel shared by A (t1's) and B
// (t2's), where each tenant acts as on a grant (sharedOnOneToken), Ada
// of A reacting to t2's answer starts no t1 turn in t2's thread; to t1's
// it does. Before, the channel counted as held by A's binding there, so
// any reaction to the one bot user's messages was t1's turn.
func TestSharedChannelOnOneTokenReactionToAnotherTenantsAnswer(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	on := TenantConfig{ReactionTriggers: &[]string{}}
	e := newEnvOn(t, fake, func(c *Config) {
		c.ClientID, c.ClientSecret = "", ""
		c.Tenants["t1"], c.Tenants["t2"] = on, on
	}, nil)
	posted := map[string]string{}
	for _, tenant := range []string{"t1", "t2"} {
		r := e.execute(t, tenant, `{"op":"send","chat_id":"`+shared+`","content":"`+tenant+`'s answer","metadata":{}}`)
		if !r.Success || r.MessageID == "" {
			t.Fatalf("%s's send: %+v", tenant, r)
		}
		posted[tenant] = r.MessageID
	}
	react := func(id, ts, eventTS string) {
		t.Helper()
		e.event(t, teamA, id, map[string]any{"type": "reaction_added", "user": userAda, "reaction": "+1", "item_user": teamA.BotUser,
			"item": map[string]any{"type": "message", "channel": shared, "ts": ts}, "event_ts": eventTS}, http.StatusOK)
	}
	react("Ev1", posted["t2"], "1768490900.000300") // handled before its 200: dropped
	react("Ev2", posted["t1"], "1768490900.000400")
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.MessageID != "1768490900.000400" || d.Event.ReplyToMessageID != posted["t1"] {
		t.Fatalf("delivered %s's %s in reply to %s; want t1's reaction to its own answer %s alone", d.Tenant, d.Event.MessageID, d.Event.ReplyToMessageID, posted["t1"])
	}
	e.sink.Empty(t)
}

// TestSharedChannelReactionAsksSlackOnItsTenantsShare: the
// conversations.info a reaction in a Slack Connect channel on one token
// makes (whether the channel is shared: heldAlone) waits on the share of
// the tenant the reaction reached, t1, not on the share no tenant's call
// spends. Before, it was charged to no tenant, so t2's users' reactions
// spent the share every tenant's untagged calls wait on.
func TestSharedChannelReactionAsksSlackOnItsTenantsShare(t *testing.T) {
	const shared = "C0SHR00001"
	clk := clocktest.New(time.Now())
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	on := TenantConfig{ReactionTriggers: &[]string{}}
	e := newEnvOn(t, fake, func(c *Config) {
		c.ClientID, c.ClientSecret = "", ""
		c.Tenants["t1"], c.Tenants["t2"] = on, on
	}, &platform.Deps{Clock: clk})
	_, tokens, err := e.p.works.client(context.Background(), teamA.ID)
	if err != nil {
		t.Fatal(err)
	}
	info := e.p.limits.budget(tokens, "conversations.info")
	info.Pause(time.Hour)                            // on the platform's clock, which stands still: every call waits
	t.Cleanup(func() { clk.Advance(2 * time.Hour) }) // before the env's stop, should the wait below fail
	body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", map[string]any{"type": "reaction_added", "user": userAda, "reaction": "+1",
		"item_user": teamA.BotUser, "item": map[string]any{"type": "message", "channel": shared, "ts": "1768490900.000100"}, "event_ts": "1768490900.000300"})
	codes := e.postAsync(t, EventsPath, "application/json", body)
	platformtest.WaitUntil(t, "the reaction's conversations.info waiting on t1's share", func() bool { return info.Waiting("t1") == 1 })
	clk.Advance(2 * time.Hour) // the budget's pause and the call's deadline pass
	answered(t, codes, "the reaction")
}

// TestSharedChannelClaimedReactionToAnotherTenantsAnswer: without
// slack.client_id, in a Slack Connect channel shared by A (t1's by its
// binding) and C (bound to nobody), which t2 claimed and whose Dan is
// linked to t2, reaction_triggers without an allowlist start a t2 turn on
// an answer the bot posted for t2, not on one it posted for t1. Before,
// t2 read as holding the channel alone (heldAlone: C is bound to nobody),
// so Dan's reaction to t1's answer was t2's turn in t1's thread.
func TestSharedChannelClaimedReactionToAnotherTenantsAnswer(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	fake.AddTeam(teamC)
	for _, team := range []string{teamA.ID, teamC.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamC.ID}})
	}
	e := newEnvOn(t, fake, func(c *Config) {
		c.ClientID, c.ClientSecret = "", ""
		c.Tenants["t2"] = TenantConfig{ReactionTriggers: &[]string{}}
	}, nil)
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindScope, ID: shared, Tenant: "t2", Space: teamC.ID},
		{Kind: platform.BindUser, ID: userDan, Tenant: "t2"},
	}); err != nil {
		t.Fatal(err)
	}
	answers := map[string]string{"t1": "1768400000.000100", "t2": "1768400000.000200"}
	ctx, cancel := contextFor()
	defer cancel()
	for tenant, ts := range answers {
		fake.AddMessage(slacktest.Message{Team: teamA.ID, Channel: shared, TS: ts, User: teamA.BotUser, BotID: teamA.BotID, Text: tenant + "'s answer"})
		e.p.grants.Posted(ctx, shared, ts, tenant, time.Time{})
	}
	react := func(id, ts, eventTS string) {
		t.Helper()
		e.event(t, teamC, id, map[string]any{"type": "reaction_added", "user": userDan, "reaction": "+1", "item_user": teamA.BotUser,
			"item": map[string]any{"type": "message", "channel": shared, "ts": ts}, "event_ts": eventTS}, http.StatusOK)
	}
	react("Ev1", answers["t1"], "1768490900.000300") // handled before its 200: dropped
	react("Ev2", answers["t2"], "1768490900.000400")
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.MessageID != "1768490900.000400" || d.Event.ReplyToMessageID != answers["t2"] {
		t.Fatalf("delivered %s's %s in reply to %s; want t2's reaction to its own answer %s alone", d.Tenant, d.Event.MessageID, d.Event.ReplyToMessageID, answers["t2"])
	}
}

// TestReactionToTheEarlierHoldersAnswerStartsNoTurn: t1 answered in a
// channel bound to it, which is bound to t2 since; with reaction_triggers
// without an allowlist, Ada's reaction to t1's answer starts no t2 turn in
// t1's thread (the answer is remembered as t1's, as a quote of it is not
// t2's own); her reaction to t2's answer does. Before, every bot message
// of a channel held by one tenant counted as that tenant's.
func TestReactionToTheEarlierHoldersAnswerStartsNoTurn(t *testing.T) {
	on := TenantConfig{ReactionTriggers: &[]string{}}
	e := newEnv(t, func(c *Config) { c.Tenants["t1"], c.Tenants["t2"] = on, on }, nil)
	answer := func(tenant string) string {
		t.Helper()
		r := e.execute(t, tenant, `{"op":"send","chat_id":"`+chanGeneral+`","content":"`+tenant+`'s answer"}`)
		if !r.Success {
			t.Fatalf("%s's send: %+v", tenant, r)
		}
		return r.MessageID
	}
	earlier := answer("t1")
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindChannel, ID: chanGeneral, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	own := answer("t2")
	react := func(id, ts, eventTS string) {
		t.Helper()
		e.event(t, teamA, id, map[string]any{"type": "reaction_added", "user": userAda, "reaction": "+1", "item_user": teamA.BotUser,
			"item": map[string]any{"type": "message", "channel": chanGeneral, "ts": ts}, "event_ts": eventTS}, http.StatusOK)
	}
	react("Ev1", earlier, "1768491000.000100") // handled before its 200: dropped
	react("Ev2", own, "1768491000.000200")
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.MessageID != "1768491000.000200" || d.Event.ReplyToMessageID != own {
		t.Fatalf("delivered %s's %s in reply to %s; want t2's reaction to its own answer %s alone", d.Tenant, d.Event.MessageID, d.Event.ReplyToMessageID, own)
	}
	e.sink.Empty(t)
}

// postedReads counts the store's reads of the records of whom the bot
// posted a message for (vault.KindPostedMessage).
type postedReads struct {
	vault.Store
	n atomic.Int64
}

func (v *postedReads) Get(ctx context.Context, k vault.Key) (vault.Entry, bool) {
	if k.Kind == vault.KindPostedMessage {
		v.n.Add(1)
	}
	return v.Store.Get(ctx, k)
}

// TestReactionToAUsersMessageReadsNoPoster: with reaction_triggers and no
// allowlist, a reaction whose item_user is not the bot is dropped before
// the store is asked whom the bot posted the message for. Before, in a
// channel its tenant holds, every such reaction read the store first.
func TestReactionToAUsersMessageReadsNoPoster(t *testing.T) {
	v := &postedReads{Store: vault.NewMemory(vault.Config{})}
	e := newEnv(t, func(c *Config) { c.Tenants["t1"] = TenantConfig{ReactionTriggers: &[]string{}} }, &platform.Deps{Vault: v})
	e.event(t, teamA, "Ev1", map[string]any{"type": "reaction_added", "user": userAda, "reaction": "+1", "item_user": userAda,
		"item": map[string]any{"type": "message", "channel": chanGeneral, "ts": "1768400000.000100"}, "event_ts": "1768400100.000100"}, http.StatusOK)
	if n := v.n.Load(); n != 0 { // handled before its 200
		t.Fatalf("a reaction to Ada's message read %d posted records", n)
	}
}

// TestReactionToTheEarlierHoldersOldAnswerStartsNoTurn: as
// TestReactionToTheEarlierHoldersAnswerStartsNoTurn, but the channel is
// bound to t2 a day and more after t1 answered, when the record of t1's
// answer has expired (vault.ChatGrantTTL): its ts, older than the binding
// (Binding.Since), still keeps it from t2. Before, a message with no
// record counted as the holder's.
func TestReactionToTheEarlierHoldersOldAnswerStartsNoTurn(t *testing.T) {
	on := TenantConfig{ReactionTriggers: &[]string{}}
	clk := clocktest.New(time.Now().Add(-vault.ChatGrantTTL - time.Hour)) // the Events API's requests are signed on the real clock
	e := newEnv(t, func(c *Config) { c.Tenants["t1"], c.Tenants["t2"] = on, on }, &platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk})})
	answer := func(tenant string) string {
		t.Helper()
		r := e.execute(t, tenant, `{"op":"send","chat_id":"`+chanGeneral+`","content":"`+tenant+`'s answer"}`)
		if !r.Success {
			t.Fatalf("%s's send: %+v", tenant, r)
		}
		return r.MessageID
	}
	earlier := answer("t1")
	clk.Advance(vault.ChatGrantTTL + time.Hour) // the record of t1's answer has expired
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindChannel, ID: chanGeneral, Tenant: "t2", Since: clk.Now()}}); err != nil {
		t.Fatal(err)
	}
	own := answer("t2")
	react := func(id, ts, eventTS string) {
		t.Helper()
		e.event(t, teamA, id, map[string]any{"type": "reaction_added", "user": userAda, "reaction": "+1", "item_user": teamA.BotUser,
			"item": map[string]any{"type": "message", "channel": chanGeneral, "ts": ts}, "event_ts": eventTS}, http.StatusOK)
	}
	react("Ev1", earlier, "1768491000.000100") // handled before its 200: dropped
	react("Ev2", own, "1768491000.000200")
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.MessageID != "1768491000.000200" || d.Event.ReplyToMessageID != own {
		t.Fatalf("delivered %s's %s in reply to %s; want t2's reaction to its own answer %s alone", d.Tenant, d.Event.MessageID, d.Event.ReplyToMessageID, own)
	}
	e.sink.Empty(t)
}

// TestReactionWhosePosterIsUnreadable: with reaction_triggers and no
// allowlist, a reaction to the bot's message in t1's channel while the
// store cannot tell whom the bot posted it for is answered 503 (Slack
// sends it again), and its retry, the store back, is t1's turn. Before, it
// was answered 200 and dropped as reaction_not_on_bot_message.
func TestReactionWhosePosterIsUnreadable(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	caps := &unreadablePosted{Capabilities: st.Capabilities()}
	caps.failing.Store(true)
	e := newEnv(t, func(c *Config) { c.Tenants["t1"] = TenantConfig{ReactionTriggers: &[]string{}} }, &platform.Deps{Vault: vault.NewDurable(caps, vault.Config{})})
	reaction := map[string]any{"type": "reaction_added", "user": userAda, "reaction": "+1", "item_user": teamA.BotUser,
		"item": map[string]any{"type": "message", "channel": chanGeneral, "ts": "1768400000.000100"}, "event_ts": "1768400100.000100"}
	e.event(t, teamA, "Ev1", reaction, http.StatusServiceUnavailable)
	e.sink.Empty(t)
	caps.failing.Store(false)
	e.event(t, teamA, "Ev1", reaction, http.StatusOK)
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.Text != "reaction:added:👍" {
		t.Fatalf("the retried reaction: %s's %q, want t1's", d.Tenant, d.Event.Text)
	}
}

// unreadablePosted fails every read of a record of whom the bot posted a
// message for while failing is set.
type unreadablePosted struct {
	store.Capabilities
	failing atomic.Bool
}

func (u *unreadablePosted) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if u.failing.Load() && strings.Contains(key, "posted_message") {
		return nil, false, errors.New("store: get capability: unreadable")
	}
	return u.Capabilities.Get(ctx, key)
}

// TestReactionPlacesTheChannelWithinItsDeadline: while Slack does not
// answer conversations.info, a reaction in t1's channel waits for the
// channel's placement (heldAlone) no longer than placeDeadline, and is
// then judged as in a channel not held alone (its answer remembered as
// t1's: t1's turn). Before, the placement waited on the ingest's context,
// up to the request timeout, with the chat's turns held behind it.
func TestReactionPlacesTheChannelWithinItsDeadline(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, func(c *Config) { c.Tenants["t1"] = TenantConfig{ReactionTriggers: &[]string{}} }, &platform.Deps{Clock: clk})
	const answer = "1768400000.000100"
	ctx, cancel := contextFor()
	defer cancel()
	e.p.grants.Posted(ctx, chanGeneral, answer, "t1", time.Time{})
	// A turn first: the channel's name is known then.
	e.event(t, teamA, "Ev0", slacktest.MessageEvent(teamA.ID, chanGeneral, userAda, "1768490900.000050", "", "<@"+teamA.BotUser+"> hi"), http.StatusOK)
	e.sink.Next(t)
	started := make(chan string, 16)
	e.fake.StallMethod("conversations.info", started)
	body := slacktest.Envelope(teamA.ID, teamA.BotUser, "Ev1", map[string]any{"type": "reaction_added", "user": userAda, "reaction": "+1",
		"item_user": teamA.BotUser, "item": map[string]any{"type": "message", "channel": chanGeneral, "ts": answer}, "event_ts": "1768490900.000300"})
	codes := e.postAsync(t, EventsPath, "application/json", body)
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatal("the channel was not placed")
	}
	clk.Advance(placeDeadline)
	answered(t, codes, "the reaction")
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.Text != "reaction:added:👍" {
		t.Fatalf("the reaction: %s's %q, want t1's", d.Tenant, d.Event.Text)
	}
}

// TestReactionWhosePosterIsUnreadableByGrant: as
// TestReactionWhosePosterIsUnreadable, in a channel no binding or claim
// holds, where Cat's messages reach t1 by her link (rule 3): the reaction
// is answered 503 while the store cannot tell whom the bot posted the
// message for. Before, it was answered 200 and dropped as
// reaction_not_on_bot_message.
func TestReactionWhosePosterIsUnreadableByGrant(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	caps := &unreadablePosted{Capabilities: st.Capabilities()}
	e := newEnv(t, func(c *Config) { c.Tenants["t1"] = TenantConfig{ReactionTriggers: &[]string{}} }, &platform.Deps{Vault: vault.NewDurable(caps, vault.Config{})})
	e.fake.AddTeam(teamC)
	e.fake.AddChannel(teamC.ID, slacktest.Channel{ID: chanNew, Name: "new-general"})
	e.fake.AddUser(teamC.ID, slacktest.User{ID: userCat, Name: "cat"})
	if err := e.p.works.install(t.Context(), teamC.ID, installRecord{Token: teamC.Token, BotUser: teamC.BotUser}); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: userCat, Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	caps.failing.Store(true)
	reaction := map[string]any{"type": "reaction_added", "user": userCat, "reaction": "+1", "item_user": teamC.BotUser,
		"item": map[string]any{"type": "message", "channel": chanNew, "ts": "1768400000.000100"}, "event_ts": "1768400100.000100"}
	e.event(t, teamC, "Ev1", reaction, http.StatusServiceUnavailable)
	e.sink.Empty(t)
}
