package discord

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
)

// newStandbyEnv is a platform of several instances whose Gateway lease is
// held elsewhere for the whole test, on clk (nil: the real clock; a fake one
// holds REST calls past the global burst).
func newStandbyEnv(t *testing.T, clk clock.Clock) *env {
	t.Helper()
	standby := func(ctx context.Context, _ string, _ func(context.Context) error) error {
		<-ctx.Done() // the lease never comes to this instance
		return nil
	}
	e := newEnvDeps(t, platform.Deps{Clock: clk, Exclusive: standby}, discordtest.Options{}, nil)
	e.start(t)
	return e
}

// channelLookups counts the GET /channels/{id} the fake answered since the
// request numbered from.
func channelLookups(e *env, from int, id string) int {
	n := 0
	for _, r := range e.fake.Requests()[from:] {
		if r.Method == http.MethodGet && r.Path == "/api/v9/channels/"+id {
			n++
		}
	}
	return n
}

// TestStandbyAsksDiscordForChatOwners: on an instance without the Gateway,
// a tenant's own channel, thread and DM channel are looked up once with
// GET /channels/{id} and the op reaches Discord; the answer is kept, so the
// next op makes no lookup; another tenant's channel is declined.
func TestStandbyAsksDiscordForChatOwners(t *testing.T) {
	t.Parallel()
	e := newStandbyEnv(t, nil)
	for _, chat := range []string{chanGeneral, threadPlan, chanDMAda} {
		before := len(e.fake.Requests())
		for i, text := range []string{"first", "second"} {
			r := execute(t, e, "t1", `{"op":"send","chat_id":"`+chat+`","content":"`+text+`","reply_to":null,"metadata":{}}`)
			if !r.Success {
				t.Fatalf("send %d to %s from the standby = %+v", i, chat, r)
			}
		}
		if n := channelLookups(e, before, chat); n != 1 {
			t.Fatalf("%s: %d lookups for two sends, want 1", chat, n)
		}
		if got := e.fake.Messages(chat); len(got) != 2 || got[0].Content != "first" || got[1].Content != "second" {
			t.Fatalf("%s: the fake has %+v", chat, got)
		}
	}
	owner, err := e.p.ChatTenant(platform.WithTenant(waitCtx(t), "t2"), chanOther)
	if err != nil || owner != "t2" {
		t.Fatalf("t2's ChatTenant of its channel = %q, %v", owner, err)
	}
	if r := execute(t, e, "t1", `{"op":"typing","chat_id":"`+chanOther+`","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1 in t2's channel = %+v, want the decline", r)
	}
}

// TestStandbyDeclineDoesNotRevealExistence: on a standby, a tenant's first
// ask of a chat that is not its own costs exactly one lookup whatever the
// chat is (another tenant's, even one the standby has cached, or nothing),
// the decline is the same, and a repeated ask is answered from the
// tenant's decline memory with no lookup until standbyDeclineTTL has passed
// on the injected clock.
func TestStandbyDeclineDoesNotRevealExistence(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newStandbyEnv(t, clk)
	e.fake.AddChannel(discordtest.Channel{ID: chanOtherLate, Type: 0, GuildID: guildOther, Name: "late"})
	// t2 uses its channel first, so the standby has it cached as t2's.
	if r := execute(t, e, "t2", `{"op":"typing","chat_id":"`+chanOther+`","metadata":{}}`); !r.Success {
		t.Fatalf("t2 in its channel = %+v", r)
	}
	declined := contract.Declined(platformName)
	ask := func(probe string) int {
		t.Helper()
		before := len(e.fake.Requests())
		r := execute(t, e, "t1", `{"op":"get_chat_info","chat_id":"`+probe+`"}`)
		if r.Success || r.Code != declined.Code || r.Error != declined.Error {
			t.Fatalf("%s: get_chat_info = %+v, want the uniform decline", probe, r)
		}
		if _, err := e.p.ChatTenant(platform.WithTenant(waitCtx(t), "t1"), probe); !errors.Is(err, platform.ErrUnknownChat) {
			t.Fatalf("%s: ChatTenant for t1 = %v, want ErrUnknownChat", probe, err)
		}
		return len(e.fake.Requests()) - before
	}
	for _, probe := range declineProbes {
		if n := ask(probe.chat); n != 1 {
			t.Fatalf("%s: first decline made %d REST calls, want 1 (the lookup)", probe.name, n)
		}
	}
	clk.Advance(standbyDeclineTTL - 1)
	for _, probe := range declineProbes {
		if n := ask(probe.chat); n != 0 {
			t.Fatalf("%s: repeated decline made %d REST calls, want 0", probe.name, n)
		}
	}
	clk.Advance(1)
	for _, probe := range declineProbes {
		if n := ask(probe.chat); n != 1 {
			t.Fatalf("%s: decline after its memory expired made %d REST calls, want 1", probe.name, n)
		}
	}
}

// TestStandbyBindForgetsDeclines: a standby's decline of a chat is not
// answered from memory once Bind changed the bindings: t2's guild, bound
// to t1 since, is t1's at its next ask, within standbyDeclineTTL on the
// injected clock. Before, t1's own actions there were declined for up to
// 30 s after the binding.
func TestStandbyBindForgetsDeclines(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newStandbyEnv(t, clk)
	typing := `{"op":"typing","chat_id":"` + chanOther + `","metadata":{}}`
	if r := execute(t, e, "t1", typing); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1 in t2's channel = %+v, want the decline", r)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"}, {Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if owner, err := e.p.ChatTenant(platform.WithTenant(waitCtx(t), "t1"), chanOther); err != nil || owner != "t1" {
		t.Fatalf("t1's ChatTenant of the guild bound to it since = %q, %v", owner, err)
	}
	if r := execute(t, e, "t1", typing); !r.Success {
		t.Fatalf("t1 in the channel bound to it since = %+v", r)
	}
}

// TestStandbyLookupFailureIsUnavailable: a lookup Discord answers with a
// server error is unavailable (retryable), not a decline, made once per
// ask (ChatTenant is not asked to make it again), and is not remembered:
// the next ask looks up again and goes through.
func TestStandbyLookupFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	e := newStandbyEnv(t, nil)
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method != http.MethodGet || r.URL.Path != "/api/v9/channels/"+chanGeneral {
			return false
		}
		w.WriteHeader(http.StatusInternalServerError)
		return true
	})
	before := len(e.fake.Requests())
	r := execute(t, e, "t1", `{"op":"typing","chat_id":"`+chanGeneral+`","metadata":{}}`)
	if r.Success || r.Code != contract.CodeUnavailable {
		t.Fatalf("typing while Discord fails the lookup = %+v, want unavailable", r)
	}
	if n := channelLookups(e, before, chanGeneral); n != 1 {
		t.Fatalf("%d lookups of the chat for one typing while Discord fails, want 1", n)
	}
	if _, err := e.p.ChatTenant(platform.WithTenant(waitCtx(t), "t1"), chanGeneral); !errors.Is(err, platform.ErrUnavailable) {
		t.Fatalf("ChatTenant while Discord fails = %v, want ErrUnavailable", err)
	}
	e.fake.SetHook(nil)
	if r := execute(t, e, "t1", `{"op":"typing","chat_id":"`+chanGeneral+`","metadata":{}}`); !r.Success {
		t.Fatalf("typing once Discord answers = %+v", r)
	}
}

// TestLeaseHolderAnswersOwnersFromTheCache: the instance holding the
// Gateway lease answers from the cache as a lone instance does, with no
// lookup for a declined chat.
func TestLeaseHolderAnswersOwnersFromTheCache(t *testing.T) {
	t.Parallel()
	holder := func(ctx context.Context, _ string, run func(context.Context) error) error { return run(ctx) }
	e := newEnvDeps(t, platform.Deps{Exclusive: holder}, discordtest.Options{}, nil)
	e.startReady(t)
	before := len(e.fake.Requests())
	for _, probe := range declineProbes {
		if r := execute(t, e, "t1", `{"op":"get_chat_info","chat_id":"`+probe.chat+`"}`); r.Code != contract.CodeEgressDeclined {
			t.Fatalf("%s on the lease holder = %+v", probe.name, r)
		}
	}
	if n := len(e.fake.Requests()) - before; n != 0 {
		t.Fatalf("%d REST calls on the lease holder for declined chats", n)
	}
}

// TestNewLeaseHolderAsksUntilItsSnapshotLoads: right after taking the
// Gateway lease, before the guild snapshot has loaded, a holder looks owners
// up at Discord as a standby does (not unavailable, as a lone instance
// answers); once the snapshot has loaded it answers from the cache, with no
// lookup for a declined chat.
func TestNewLeaseHolderAsksUntilItsSnapshotLoads(t *testing.T) {
	t.Parallel()
	holder := func(ctx context.Context, _ string, run func(context.Context) error) error { return run(ctx) }
	e := newEnvDeps(t, platform.Deps{Exclusive: holder}, discordtest.Options{}, nil)
	e.p.gwHere.Store(true) // as Run does on taking the lease
	before := len(e.fake.Requests())
	if r := execute(t, e, "t1", `{"op":"typing","chat_id":"`+chanGeneral+`","metadata":{}}`); !r.Success {
		t.Fatalf("typing before the snapshot = %+v", r)
	}
	if n := channelLookups(e, before, chanGeneral); n != 1 {
		t.Fatalf("%d lookups before the snapshot, want 1", n)
	}
	e.p.onDispatch("READY", json.RawMessage(`{"user":{"id":"9000","username":"hermes","bot":true},"guilds":[{"id":"100","unavailable":true}]}`))
	e.p.onDispatch("GUILD_CREATE", json.RawMessage(`{"id":"100","name":"Lab","channels":[{"id":"101","type":0,"name":"general"}]}`))
	before = len(e.fake.Requests())
	if r := execute(t, e, "t1", `{"op":"get_chat_info","chat_id":"424242"}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("an unknown chat after the snapshot = %+v", r)
	}
	if n := len(e.fake.Requests()) - before; n != 0 {
		t.Fatalf("%d REST calls for a declined chat after the snapshot", n)
	}
}

// TestLeaseTakenBackAsksUntilItsSnapshotLoads: an instance that held
// the Gateway lease, lost it and took it back looks owners up at Discord
// until its new session's snapshot loads, as on its first takeover: a
// channel of t1's made while another instance held the lease, which its
// cache lacks, was declined (egress_declined, final) until READY.
func TestLeaseTakenBackAsksUntilItsSnapshotLoads(t *testing.T) {
	t.Parallel()
	lost, back := make(chan struct{}), make(chan struct{})
	holder := func(ctx context.Context, _ string, run func(context.Context) error) error {
		term, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lost:
			case <-ctx.Done():
			}
			cancel()
		}()
		_ = run(term) // until the lease is lost
		select {
		case <-back:
		case <-ctx.Done():
			return nil
		}
		return run(ctx)
	}
	e := newEnvDeps(t, platform.Deps{Exclusive: holder}, discordtest.Options{}, nil)
	e.startReady(t)
	// The new session waits for Discord's session start limit, so it has
	// no READY while the test acts.
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method != http.MethodGet || r.URL.Path != "/api/v9/gateway/bot" {
			return false
		}
		_, _ = w.Write([]byte(`{"url":"wss://gateway.invalid","shards":1,"session_start_limit":{"total":1000,"remaining":0,"reset_after":3600000}}`))
		return true
	})
	close(lost)
	platformtest.WaitUntil(t, "the lease lost", func() bool { return !e.p.gwHere.Load() })
	const made = "1310000000000000777"
	e.fake.AddChannel(discordtest.Channel{ID: made, Type: 0, GuildID: guildLab, Name: "made-meanwhile"})
	before := len(e.fake.Requests())
	close(back)
	platformtest.WaitUntil(t, "the new session asking for its start limit", func() bool {
		return slices.ContainsFunc(e.fake.Requests()[before:], func(r discordtest.Request) bool { return r.Path == "/api/v9/gateway/bot" })
	})
	if r := execute(t, e, "t1", `{"op":"typing","chat_id":"`+made+`","metadata":{}}`); !r.Success {
		t.Fatalf("typing in t1's channel made while the lease was elsewhere = %+v", r)
	}
	if n := channelLookups(e, before, made); n != 1 {
		t.Fatalf("%d lookups of the channel, want 1", n)
	}
}

// TestLocateChat: a channel as the bot sees it, for the management
// plane's visibility floor: on a standby looked up with GET /channels/{id}
// (then kept), with its guild and parent; a DM channel as a DM;
// ErrUnknownChat for a channel Discord does not show the bot or a
// malformed id, and ErrUnavailable when Discord does not answer. An id
// spelled with leading zeros is placed in its canonical spelling.
func TestLocateChat(t *testing.T) {
	t.Parallel()
	e := newStandbyEnv(t, nil)
	ctx := platform.WithTenant(waitCtx(t), "t2")
	for chat, want := range map[string]platform.Chat{
		chanGeneral: {ID: chanGeneral, Space: guildLab},
		threadPlan:  {ID: threadPlan, Parent: chanGeneral, Space: guildLab},
		chanOther:   {ID: chanOther, Space: guildOther},
		chanDMAda:   {ID: chanDMAda, DM: true},
	} {
		before := len(e.fake.Requests())
		for _, spelled := range []string{chat, "00" + chat} {
			if got, err := e.p.LocateChat(ctx, spelled); err != nil || got != want {
				t.Fatalf("LocateChat(%s) = %+v, %v, want %+v", spelled, got, err, want)
			}
		}
		if n := channelLookups(e, before, chat); n != 1 {
			t.Fatalf("%s: %d lookups for two asks, want 1", chat, n)
		}
	}
	for _, chat := range []string{"999999", "not-an-id", "-5"} {
		if _, err := e.p.LocateChat(ctx, chat); !errors.Is(err, platform.ErrUnknownChat) {
			t.Fatalf("LocateChat(%s) = %v, want ErrUnknownChat", chat, err)
		}
	}
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method != http.MethodGet || r.URL.Path != "/api/v9/channels/"+chanRandom {
			return false
		}
		w.WriteHeader(http.StatusInternalServerError)
		return true
	})
	if _, err := e.p.LocateChat(ctx, chanRandom); !errors.Is(err, platform.ErrUnavailable) {
		t.Fatalf("LocateChat with Discord failing = %v, want ErrUnavailable", err)
	}
}

// TestStandbyForgetsAGuildTheBotLeft: a standby sees no GUILD_DELETE, so
// what its lookup found for a tenant is trusted for standbyOwnTTL only:
// once the bot was removed from the guild (Discord answers 403), the
// tenant's next action there after that is declined, not sent to Discord
// again and again for a 403 each.
func TestStandbyForgetsAGuildTheBotLeft(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newStandbyEnv(t, clk)
	send := `{"op":"send","chat_id":"` + chanGeneral + `","content":"hi","reply_to":null,"metadata":{}}`
	if r := execute(t, e, "t1", send); !r.Success {
		t.Fatalf("t1's send in its channel = %+v", r)
	}
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.URL.Path != "/api/v9/channels/"+chanGeneral && r.URL.Path != "/api/v9/channels/"+chanGeneral+"/messages" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden) // the bot was removed from the guild
		_, _ = w.Write([]byte(`{"message":"Missing Access","code":50001}`))
		return true
	})
	clk.Advance(standbyOwnTTL)
	before := len(e.fake.Requests())
	if r, declined := execute(t, e, "t1", send), contract.Declined(platformName); r.Success || r.Code != declined.Code || r.Error != declined.Error {
		t.Fatalf("t1's send in the guild the bot left = %+v, want the uniform decline", r)
	}
	for _, r := range e.fake.Requests()[before:] {
		if r.Method == http.MethodPost {
			t.Fatalf("a send reached Discord after the bot left the guild: %s %s", r.Method, r.Path)
		}
	}
}

// TestStandbyLocateAsksDiscordLast: on a standby, an action that names no
// platform, for another platform's chat whose id looks like a Discord id,
// is located there without a lookup at Discord (whose REST calls may be
// slow, or wait for the tenant's share); a chat no other platform places
// is still looked up, once, as any first ask.
func TestStandbyLocateAsksDiscordLast(t *testing.T) {
	t.Parallel()
	e := newStandbyEnv(t, nil)
	const telegramChat = "5551234567"
	other := &otherChats{owners: map[string]string{telegramChat: "t1"}}
	ps := []platform.Platform{e.p, other}
	before := len(e.fake.Requests())
	if found, _, err := platform.Locate(waitCtx(t), ps, "t1", telegramChat); err != nil || found != other {
		t.Fatalf("Locate of the other platform's chat = %v, %v; want the other platform", found, err)
	}
	if n := channelLookups(e, before, telegramChat); n != 0 {
		t.Fatalf("%d lookups at Discord of the other platform's chat, want none", n)
	}
	if found, _, err := platform.Locate(waitCtx(t), ps, "t1", chanGeneral); err != nil || found != e.p {
		t.Fatalf("Locate of t1's channel = %v, %v; want Discord", found, err)
	}
	if _, _, err := platform.Locate(waitCtx(t), ps, "t1", chanOther); !errors.Is(err, platform.ErrUnknownChat) {
		t.Fatalf("Locate of t2's channel for t1 = %v, want ErrUnknownChat", err)
	}
	if n, m := channelLookups(e, before, chanGeneral), channelLookups(e, before, chanOther); n != 1 || m != 1 {
		t.Fatalf("%d and %d lookups of the Discord channels, want one each", n, m)
	}
}
