package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/descriptor"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
)

// chanOtherLate is a channel of t2's guild created while the connector was
// not looking: Discord knows it, the cache does not.
const chanOtherLate = "202"

// declineProbes are the chats t1 has no right to: a cached channel of t2,
// a channel of t2 the cache never saw, and an id nothing has.
var declineProbes = []struct{ name, chat string }{
	{"other tenant's channel", chanOther},
	{"other tenant's uncached channel", chanOtherLate},
	{"nonexistent id", "424242"},
}

// TestDeclineDoesNotRevealExistence: an action on a chat that is not the
// caller's is declined with the same result and without a single REST call,
// whether the chat is another tenant's (cached or not) or does not exist;
// the relay's ChatTenant makes no call either. The decline times are logged
// as a figure only, never asserted.
func TestDeclineDoesNotRevealExistence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.AddChannel(discordtest.Channel{ID: chanOtherLate, Type: 0, GuildID: guildOther, Name: "late"})

	const rounds = 300
	declined := contract.Declined(platformName)
	for _, probe := range declineProbes {
		before := len(e.fake.Requests())
		took := make([]time.Duration, 0, rounds)
		for range rounds {
			a := contract.Action{Op: contract.OpGetChatInfo, ChatID: contract.ID(probe.chat)}
			start := time.Now()
			r := e.p.Execute(waitCtx(t), "t1", &a)
			took = append(took, time.Since(start))
			if r.Success || r.Code != declined.Code || r.Error != declined.Error {
				t.Fatalf("%s: get_chat_info = %+v, want the uniform decline", probe.name, r)
			}
		}
		if _, err := e.p.ChatTenant(waitCtx(t), probe.chat); probe.chat != chanOther && !errors.Is(err, platform.ErrUnknownChat) {
			t.Fatalf("%s: ChatTenant = %v, want ErrUnknownChat", probe.name, err)
		}
		slices.Sort(took)
		t.Logf("%-32s decline p50 %v p90 %v p99 %v max %v", probe.name,
			took[rounds/2], took[rounds*9/10], took[rounds*99/100], took[rounds-1])
		if calls := e.fake.Requests()[before:]; len(calls) != 0 {
			t.Fatalf("%s: %d REST calls for a declined chat, first %s %s", probe.name, len(calls), calls[0].Method, calls[0].Path)
		}
	}
}

// TestOwnersUnknownUntilGuildSnapshot: before the Gateway's guild snapshot
// has loaded, every chat, the caller's own included, is answered
// unavailable (retryable), never declined, and without a REST call.
func TestOwnersUnknownUntilGuildSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	for _, chat := range []string{chanGeneral, chanOther, "424242"} {
		r := execute(t, e, "t1", `{"op":"get_chat_info","chat_id":"`+chat+`"}`)
		if r.Success || r.Code != contract.CodeUnavailable || r.Error != ownersUnknownResult().Error {
			t.Fatalf("%s before the snapshot = %+v", chat, r)
		}
		if _, err := e.p.ChatTenant(waitCtx(t), chat); !errors.Is(err, platform.ErrUnavailable) {
			t.Fatalf("%s: ChatTenant before the snapshot = %v, want ErrUnavailable", chat, err)
		}
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("%d REST calls before the snapshot", n)
	}
	e.startReady(t)
	if r := execute(t, e, "t1", `{"op":"get_chat_info","chat_id":"101"}`); !r.Success {
		t.Fatalf("own chat after the snapshot = %+v", r)
	}
}

// TestGuildSnapshotWaitIsBounded: a claimed guild READY lists whose
// GUILD_CREATE never comes (an outage) holds owners unknown for
// guildSnapshotTimeout on the injected clock, then owners are answered from
// the guilds that loaded.
func TestGuildSnapshotWaitIsBounded(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, discordtest.Options{}, nil)
	e.p.onDispatch("READY", json.RawMessage(`{"user":{"id":"9000","username":"hermes","bot":true},
		"guilds":[{"id":"100","unavailable":true},{"id":"200","unavailable":true},{"id":"999","unavailable":true}]}`))
	e.p.onDispatch("GUILD_CREATE", json.RawMessage(`{"id":"100","name":"Lab","channels":[{"id":"101","type":0,"name":"general"}]}`))
	// 999 is claimed by no tenant: not waited for. 200 never arrives.
	if _, err := e.p.ChatTenant(waitCtx(t), chanGeneral); !errors.Is(err, platform.ErrUnavailable) {
		t.Fatalf("ChatTenant with guild 200 pending = %v", err)
	}
	clk.Advance(guildSnapshotTimeout - time.Nanosecond)
	if _, err := e.p.ChatTenant(waitCtx(t), chanGeneral); !errors.Is(err, platform.ErrUnavailable) {
		t.Fatalf("ChatTenant before the timeout = %v", err)
	}
	clk.Advance(time.Nanosecond)
	if owner, err := e.p.ChatTenant(waitCtx(t), chanGeneral); err != nil || owner != "t1" {
		t.Fatalf("ChatTenant after the timeout = %q, %v", owner, err)
	}
	if _, err := e.p.ChatTenant(waitCtx(t), chanOther); !errors.Is(err, platform.ErrUnknownChat) {
		t.Fatalf("a channel of the guild that never loaded = %v, want ErrUnknownChat", err)
	}
	e.logs.WaitFor(t, "discord guild snapshot incomplete")
	if !strings.Contains(e.logs.Text(), "missing_guilds=1") {
		t.Fatalf("log does not count the missing guild:\n%s", e.logs.Text())
	}
}

// TestDMChannelAddressableAfterItsMessage: a DM channel Discord could not
// be asked about (its lookup failed) is still the DM tenant's once a message
// in it was delivered, so the reply is not declined.
func TestDMChannelAddressableAfterItsMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method != "GET" || r.URL.Path != "/api/v9/channels/"+chanDMAda {
			return false
		}
		w.WriteHeader(http.StatusInternalServerError)
		return true
	})
	if r := execute(t, e, "t1", `{"op":"typing","chat_id":"301","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("an unseen DM channel = %+v, want the decline", r)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("7100", chanDMAda, "", "hi", false))
	if d := e.sink.Next(t); d.ChatID != chanDMAda || d.Tenant != "t1" {
		t.Fatalf("delivery = %+v", d)
	}
	if r := execute(t, e, "t1", `{"op":"send","chat_id":"301","content":"hello","reply_to":null,"metadata":{}}`); !r.Success {
		t.Fatalf("reply in the DM = %+v", r)
	}
	if r := execute(t, e, "t2", `{"op":"typing","chat_id":"301","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("another tenant in the DM = %+v", r)
	}
}

// TestGuildTheBotLeftBelongsToNoTenant: once the bot has left a guild
// (GUILD_DELETE without unavailable) its cached channels no longer
// resolve to the guild's tenant: an action there is declined with the
// uniform text, without a REST call Discord would refuse with a 403. A
// guild in an outage (unavailable) keeps its channels.
func TestGuildTheBotLeftBelongsToNoTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.dispatch(t, "GUILD_DELETE", map[string]any{"id": guildLab, "unavailable": true})
	e.dispatch(t, "GUILD_DELETE", map[string]any{"id": guildOther})
	// A later event shows the reader has handled both GUILD_DELETEs.
	e.dispatch(t, "CHANNEL_CREATE", map[string]any{"id": "1999", "type": 0, "guild_id": guildLab, "name": "marker"})
	platformtest.WaitUntil(t, "the channel created after the GUILD_DELETEs cached", func() bool {
		_, ok := e.p.cache.cachedChannel("1999")
		return ok
	})
	if tenant, err := e.p.ChatTenant(waitCtx(t), chanGeneral); err != nil || tenant != "t1" {
		t.Fatalf("ChatTenant of a channel of the guild in an outage = %q, %v; want t1", tenant, err)
	}
	if _, err := e.p.ChatTenant(waitCtx(t), chanOther); !errors.Is(err, platform.ErrUnknownChat) {
		t.Fatalf("ChatTenant of a channel of the guild the bot left = %v, want ErrUnknownChat", err)
	}
	before := len(e.fake.Requests())
	a := contract.Action{Op: contract.OpSend, ChatID: chanOther, Content: "hi"}
	if r, declined := e.p.Execute(waitCtx(t), "t2", &a), contract.Declined(platformName); r.Success || r.Code != declined.Code || r.Error != declined.Error {
		t.Fatalf("send into the guild the bot left = %+v, want the uniform decline", r)
	}
	if calls := e.fake.Requests()[before:]; len(calls) != 0 {
		t.Fatalf("%d REST calls for the guild the bot left, first %s %s", len(calls), calls[0].Method, calls[0].Path)
	}
}

// TestGuildLeftBetweenSessionsBelongsToNoTenant: a guild the bot was
// removed from while no session here saw its GUILD_DELETE is missing from
// the next session's READY: its cached channels no longer resolve to the
// guild's tenant, and an action there is declined without a REST call.
func TestGuildLeftBetweenSessionsBelongsToNoTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.RemoveGuild(guildOther)
	e.fake.RefuseResumes(4009) // the next connection starts a new session
	if err := e.fake.CloseGateway(4000, "Unknown error"); err != nil {
		t.Fatal(err)
	}
	platformtest.WaitUntil(t, "a second session identified", func() bool { return e.fake.Identifies() == 2 })
	if err := e.fake.WaitSession(waitCtx(t), 2); err != nil { // and its connection up
		t.Fatal(err)
	}
	// A later event shows the reader has handled the new session's READY.
	e.dispatch(t, "CHANNEL_CREATE", map[string]any{"id": "1999", "type": 0, "guild_id": guildLab, "name": "marker"})
	platformtest.WaitUntil(t, "the channel created after the new session's READY cached", func() bool {
		_, ok := e.p.cache.cachedChannel("1999")
		return ok
	})
	if tenant, err := e.p.ChatTenant(waitCtx(t), chanGeneral); err != nil || tenant != "t1" {
		t.Fatalf("ChatTenant of a channel of a guild READY listed = %q, %v; want t1", tenant, err)
	}
	if _, err := e.p.ChatTenant(waitCtx(t), chanOther); !errors.Is(err, platform.ErrUnknownChat) {
		t.Fatalf("ChatTenant of a channel of the guild READY no longer lists = %v, want ErrUnknownChat", err)
	}
	before := len(e.fake.Requests())
	a := contract.Action{Op: contract.OpSend, ChatID: chanOther, Content: "hi"}
	if r, declined := e.p.Execute(waitCtx(t), "t2", &a), contract.Declined(platformName); r.Success || r.Code != declined.Code || r.Error != declined.Error {
		t.Fatalf("send into the guild the bot left = %+v, want the uniform decline", r)
	}
	if calls := e.fake.Requests()[before:]; len(calls) != 0 {
		t.Fatalf("%d REST calls for the guild the bot left, first %s %s", len(calls), calls[0].Method, calls[0].Path)
	}
}

// TestChannelCreatedBetweenSessionsIsNotDeclined: a channel created while
// no session here was connected is unknown to the cache until the next
// session's GUILD_CREATE of its guild. Between that session's READY and
// the GUILD_CREATEs an ask for any chat not cached as the asker's waits
// for them (ctx ending first answers unavailable, never a decline, alike
// for every such chat); then the new channel is its guild's tenant's.
func TestChannelCreatedBetweenSessionsIsNotDeclined(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	release := e.fake.HoldGuildCreates()
	defer release()
	const late = "1777"
	e.fake.AddChannel(discordtest.Channel{ID: late, Type: 0, GuildID: guildLab, Name: "late"})
	e.fake.RefuseResumes(4009) // the next connection starts a new session
	if err := e.fake.CloseGateway(4000, "Unknown error"); err != nil {
		t.Fatal(err)
	}
	platformtest.WaitUntil(t, "the second session's READY sent, its GUILD_CREATEs held", e.fake.Holding)
	// A later event shows the reader has handled that READY.
	e.dispatch(t, "CHANNEL_CREATE", map[string]any{"id": "1999", "type": 0, "guild_id": guildLab, "name": "marker"})
	platformtest.WaitUntil(t, "the channel created after the new session's READY cached", func() bool {
		_, ok := e.p.cache.cachedChannel("1999")
		return ok
	})
	asT1 := platform.WithTenant(waitCtx(t), "t1")
	if owner, err := e.p.ChatTenant(asT1, chanGeneral); err != nil || owner != "t1" {
		t.Fatalf("the asker's cached channel while the guilds load = %q, %v; want t1 at once", owner, err)
	}
	ended, cancel := context.WithCancel(asT1)
	cancel()
	for _, chat := range []string{late, chanOther, "424242"} {
		if _, err := e.p.ChatTenant(ended, chat); !errors.Is(err, platform.ErrUnavailable) {
			t.Fatalf("%s while the guilds load, ctx ended: %v, want ErrUnavailable", chat, err)
		}
	}
	got := make(chan error, 1)
	go func() {
		owner, err := e.p.ChatTenant(asT1, late)
		if err == nil && owner != "t1" {
			err = fmt.Errorf("owner %q", owner)
		}
		got <- err
	}()
	release()
	if err := <-got; err != nil {
		t.Fatalf("ChatTenant of the channel created between sessions = %v, want t1", err)
	}
	if r := execute(t, e, "t1", `{"op":"send","chat_id":"`+late+`","content":"hi"}`); !r.Success {
		t.Fatalf("send into the channel created between sessions = %+v", r)
	}
}

// TestGuildReloadWaitIsBounded: a later session's claimed guild whose
// GUILD_CREATE never comes holds an ask for a chat not cached as the
// asker's for at most guildSnapshotTimeout on the injected clock; then it
// is answered from the cache.
func TestGuildReloadWaitIsBounded(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, discordtest.Options{}, nil)
	ready := json.RawMessage(`{"user":{"id":"9000","username":"hermes","bot":true},
		"guilds":[{"id":"100","unavailable":true},{"id":"200","unavailable":true}]}`)
	e.p.onDispatch("READY", ready)
	e.p.onDispatch("GUILD_CREATE", json.RawMessage(`{"id":"100","name":"Lab","channels":[{"id":"101","type":0,"name":"general"}]}`))
	e.p.onDispatch("GUILD_CREATE", json.RawMessage(`{"id":"200","name":"Other","channels":[{"id":"201","type":0,"name":"other"}]}`))
	e.p.onDispatch("READY", ready) // a new session; guild 200 never arrives
	e.p.onDispatch("GUILD_CREATE", json.RawMessage(`{"id":"100","name":"Lab","channels":[{"id":"101","type":0,"name":"general"}]}`))
	timers := clk.Pending()
	got := make(chan error, 1)
	go func() {
		owner, err := e.p.ChatTenant(platform.WithTenant(waitCtx(t), "t1"), chanOther)
		if err == nil && owner != "t2" {
			err = fmt.Errorf("owner %q", owner)
		}
		got <- err
	}()
	if err := clk.WaitPending(waitCtx(t), timers+1); err != nil { // the ask waits on its timer
		t.Fatal(err)
	}
	clk.Advance(guildSnapshotTimeout)
	if err := <-got; err != nil {
		t.Fatalf("ChatTenant after the wait = %v, want t2", err)
	}
}

// TestGuildDeletedBeforeItsSnapshot: a claimed guild READY listed whose
// GUILD_DELETE comes instead of its GUILD_CREATE (the bot left it, or it
// is in an outage, which Discord reports so after READY) is waited for no
// longer: owners are known once the others have loaded.
func TestGuildDeletedBeforeItsSnapshot(t *testing.T) {
	t.Parallel()
	for _, del := range []string{`{"id":"200"}`, `{"id":"200","unavailable":true}`} {
		clk := clocktest.New(epoch)
		e := newEnvOn(t, clk, discordtest.Options{}, nil)
		e.p.onDispatch("READY", json.RawMessage(`{"user":{"id":"9000","username":"hermes","bot":true},
			"guilds":[{"id":"100","unavailable":true},{"id":"200","unavailable":true}]}`))
		e.p.onDispatch("GUILD_DELETE", json.RawMessage(del))
		e.p.onDispatch("GUILD_CREATE", json.RawMessage(`{"id":"100","name":"Lab","channels":[{"id":"101","type":0,"name":"general"}]}`))
		if owner, err := e.p.ChatTenant(platform.WithTenant(waitCtx(t), "t1"), chanGeneral); err != nil || owner != "t1" {
			t.Fatalf("GUILD_DELETE %s: ChatTenant once the other guild has loaded = %q, %v; want t1", del, owner, err)
		}
	}
}

// otherChats is another platform (a Telegram, say) owning chats whose ids
// look like Discord's; an ask whose ctx ended cannot be answered, as a
// platform that asks the network could not.
type otherChats struct{ owners map[string]string }

func (o *otherChats) Name() string                                   { return "other" }
func (o *otherChats) Descriptor() descriptor.Descriptor              { return descriptor.Descriptor{} }
func (o *otherChats) Run(ctx context.Context, _ platform.Sink) error { <-ctx.Done(); return nil }
func (o *otherChats) Status() platform.Status                        { return platform.Status{Ready: true} }
func (o *otherChats) Execute(context.Context, string, *contract.Action) contract.Result {
	return contract.OK("")
}

func (o *otherChats) ChatTenant(ctx context.Context, chat string) (string, error) {
	if ctx.Err() != nil {
		return "", platform.UnavailableError("other: no answer before the deadline")
	}
	if t, ok := o.owners[chat]; ok {
		return t, nil
	}
	return "", platform.ErrUnknownChat
}

// TestLocateDoesNotWaitOnGuildsForAnotherPlatformsChat: while a new
// session's guilds load, an action that names no platform, for a chat of
// another platform whose id looks like a Discord id, is located there at
// once: Discord's wait (awaitGuilds) is not made for it. A chat no other
// platform places is still waited for on Discord, every such chat alike
// (one the asker cannot see, another tenant's, one that exists nowhere),
// so a decline still tells nothing; a channel created between sessions is
// found once its guild has arrived.
func TestLocateDoesNotWaitOnGuildsForAnotherPlatformsChat(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, discordtest.Options{}, nil)
	ready := json.RawMessage(`{"user":{"id":"9000","username":"hermes","bot":true},
		"guilds":[{"id":"100","unavailable":true},{"id":"200","unavailable":true}]}`)
	e.p.onDispatch("READY", ready)
	e.p.onDispatch("GUILD_CREATE", json.RawMessage(`{"id":"100","name":"Lab","channels":[{"id":"101","type":0,"name":"general"}]}`))
	e.p.onDispatch("GUILD_CREATE", json.RawMessage(`{"id":"200","name":"Other","channels":[{"id":"201","type":0,"name":"other"}]}`))
	e.p.onDispatch("READY", ready) // a new session; its GUILD_CREATEs are slow
	const telegramChat = "5551234567"
	other := &otherChats{owners: map[string]string{telegramChat: "t1"}}
	ps := []platform.Platform{e.p, other}
	timers := clk.Pending()
	if found, _, err := platform.Locate(waitCtx(t), ps, "t1", telegramChat); err != nil || found != other {
		t.Fatalf("Locate of the other platform's chat while the guilds load = %v, %v; want the other platform at once", found, err)
	}
	if found, _, err := platform.Locate(waitCtx(t), ps, "t1", chanGeneral); err != nil || found != e.p {
		t.Fatalf("Locate of the asker's cached channel = %v, %v; want Discord at once", found, err)
	}
	// Chats no other platform places wait for the guilds alike.
	const late = "1777"
	type answer struct {
		found platform.Platform
		err   error
	}
	chats := []string{late, chanOther, "424242"}
	got := make([]chan answer, len(chats))
	for i, chat := range chats {
		got[i] = make(chan answer, 1)
		go func() {
			found, _, err := platform.Locate(waitCtx(t), ps, "t1", chat)
			got[i] <- answer{found, err}
		}()
	}
	if err := clk.WaitPending(waitCtx(t), timers+len(chats)); err != nil { // each ask waits on its timer
		t.Fatal(err)
	}
	for i := range chats {
		if len(got[i]) != 0 {
			t.Fatalf("Locate of %s answered before the guilds arrived", chats[i])
		}
	}
	e.p.onDispatch("GUILD_CREATE", json.RawMessage(`{"id":"100","name":"Lab","channels":[{"id":"101","type":0,"name":"general"},{"id":"1777","type":0,"name":"late"}]}`))
	e.p.onDispatch("GUILD_CREATE", json.RawMessage(`{"id":"200","name":"Other","channels":[{"id":"201","type":0,"name":"other"}]}`))
	if a := <-got[0]; a.err != nil || a.found != e.p {
		t.Fatalf("Locate of the channel created between sessions = %v, %v; want Discord", a.found, a.err)
	}
	for i, chat := range chats[1:] {
		if a := <-got[i+1]; !errors.Is(a.err, platform.ErrUnknownChat) {
			t.Fatalf("Locate of %s = %v, %v; want ErrUnknownChat", chat, a.found, a.err)
		}
	}
}

// TestOwnChannelUnknownUntilGuildSnapshot: a channel of t1's guild that an
// event cached before the first guild snapshot loaded is, like every chat
// then, answered unavailable for t1 too, without a REST call.
func TestOwnChannelUnknownUntilGuildSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	release := e.fake.HoldGuildCreates()
	defer release()
	e.start(t)
	platformtest.WaitUntil(t, "the first session's READY sent, its GUILD_CREATEs held", e.fake.Holding)
	e.dispatch(t, "CHANNEL_CREATE", map[string]any{"id": "1999", "type": 0, "guild_id": guildLab, "name": "early"})
	platformtest.WaitUntil(t, "the channel created before the snapshot cached", func() bool {
		_, ok := e.p.cache.cachedChannel("1999")
		return ok
	})
	before := len(e.fake.Requests())
	if r := execute(t, e, "t1", `{"op":"send","chat_id":"1999","content":"hi"}`); r.Code != contract.CodeUnavailable || r.Error != ownersUnknownResult().Error {
		t.Fatalf("t1's send into its cached channel before the snapshot = %+v, want unavailable", r)
	}
	if calls := e.fake.Requests()[before:]; len(calls) != 0 {
		t.Fatalf("%d REST calls before the snapshot, first %s %s", len(calls), calls[0].Method, calls[0].Path)
	}
}
