package telegram

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"
	"go.yaml.in/yaml/v3"

	"connector/contract"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/session"
	"connector/vault"
)

// TestEntitySpan: offsets and lengths count UTF-16 code units; a span
// past the end is cut, one beyond the text or splitting a surrogate pair
// is empty.
func TestEntitySpan(t *testing.T) {
	const text = "😀 @hermes_bot é" // the emoji is 2 units, é 1
	for _, c := range []struct {
		offset, length int
		want           string
		ok             bool
	}{
		{3, 11, "@hermes_bot", true},
		{0, 2, "😀", true},
		{15, 9, "é", true},
		{1, 3, "", false},  // starts inside the emoji
		{0, 1, "", false},  // ends inside it
		{16, 1, "", false}, // starts at the end
		{40, 2, "", false},
		{3, 0, "", false},
		{-1, 4, "", false},
	} {
		got, ok := entitySpan(text, models.MessageEntity{Offset: c.offset, Length: c.length})
		if got != c.want || ok != c.ok {
			t.Errorf("span(%d, %d) = %q %v, want %q %v", c.offset, c.length, got, ok, c.want, c.ok)
		}
	}
}

// TestBareHandles: the native fallback pattern for text without entities.
func TestBareHandles(t *testing.T) {
	for text, want := range map[string][]string{
		"@other_bot hi":                         {"other_bot"},
		"hi @Other_Bot!":                        {"Other_Bot"},
		"é@other_bot":                           {"other_bot"}, // the guard is ASCII only
		"mail x@other_bot":                      nil,
		"`@other_bot`":                          nil,
		"/@other_bot":                           nil,
		"@other_botté":                          nil, // no word boundary
		"@a":                                    nil,
		"@" + strings.Repeat("a", 28) + "bot":   {strings.Repeat("a", 28) + "bot"},
		"@" + strings.Repeat("a", 29) + "bot":   nil, // 32 characters: bot-shaped, but past the pattern's 31
		"@one_bot,@two_bot @three_bot@four_bot": {"one_bot", "two_bot", "three_bot"},
	} {
		var got []string
		bareHandles(text, func(h string) { got = append(got, h) })
		if !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", text, got, want)
		}
	}
}

// TestMentionsWithoutUsername: until getMe answered, only a text mention
// of the bot's user addresses it and nothing counts as another bot's
// exclusive address, as natively.
func TestMentionsWithoutUsername(t *testing.T) {
	m := &mapping{botID: 7012345678}
	if m.mentionsBot(parityUpdate(t, "mention@group", 1).Message) {
		t.Error("@hermes_bot counted before the username is known")
	}
	if !m.mentionsBot(parityUpdate(t, "textmention@group", 1).Message) {
		t.Error("a text mention of the bot's user did not count")
	}
	if m.mentionsOnlyOtherBots(parityUpdate(t, "otherbot@group", 1).Message) {
		t.Error("@other_bot excluded the message before the username is known")
	}
	m.botUsername = "Hermes_Bot" // getMe's spelling; handles compare case-insensitively
	if !m.mentionsBot(parityUpdate(t, "mention@group", 1).Message) || m.mentionsOnlyOtherBots(parityUpdate(t, "both@group", 1).Message) {
		t.Error("the bot's own handle is not recognized")
	}
}

// TestShareSessionText: the sender moves into the text, the name falling
// back to the id and the id to "unknown", as natively.
func TestShareSessionText(t *testing.T) {
	for _, c := range []struct {
		id, name session.Nullable
		want     string
	}{
		{session.Str("123456789"), session.Str("Ada"), "[Ada|123456789]\nhi"},
		{session.Str("123456789"), session.Nullable{}, "[123456789|123456789]\nhi"},
		{session.Nullable{}, session.Nullable{}, "[unknown|unknown]\nhi"},
	} {
		ev := contract.Event{Text: "hi", Source: session.Source{UserID: c.id, UserName: c.name, UserIDAlt: "x"}}
		shareSession(&ev)
		if ev.Text != c.want || ev.Source.UserID.Valid || ev.Source.UserName.Valid || ev.Source.UserIDAlt != "" {
			t.Errorf("%+v: %q %+v, want %q and no user", c, ev.Text, ev.Source, c.want)
		}
	}
}

// observeEnv is a platform whose tenant t1 observes the group -4001234567.
func observeEnv(t *testing.T) (*Platform, *platformtest.Sink) {
	t.Helper()
	cfg := Config{BotToken: testToken, Chats: testChats}
	if err := yaml.Unmarshal([]byte("{tenants: {t1: {require_mention: true, observe_unmentioned_group_messages: true, group_allowed_chats: -4001234567}}}"), &cfg); err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg, platform.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.transport.CloseIdleConnections)
	m := *p.mapping.Load()
	m.botUsername = parityBotUsername
	p.mapping.Store(&m)
	rec := newSink()
	var sink platform.Sink = rec
	p.sink.Store(&sink)
	return p, rec
}

// TestObservedContextSurvivesRefusalAndRedelivery: a redelivered observed
// update is kept once, and a delivery the relay refuses keeps the context
// for the retry.
func TestObservedContextSurvivesRefusalAndRedelivery(t *testing.T) {
	p, rec := observeEnv(t)
	ctx := context.Background()
	held := parityUpdate(t, "plain@group", 1)
	for range 2 {
		if err := p.handle(ctx, held, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	mention := parityUpdate(t, "mention@group", 2)
	rec.Refuse(1)
	if err := p.handle(ctx, mention, time.Now()); err == nil {
		t.Fatal("a refused delivery was not reported")
	}
	if err := p.handle(ctx, mention, time.Now()); err != nil {
		t.Fatal(err)
	}
	d := rec.Next(t)
	want := []contract.ContextMessage{{Text: "hi", Source: contract.ContextAuthor{UserName: "Ada", UserID: "123456789"}}}
	if !reflect.DeepEqual(d.Event.Context, want) || d.Event.Text != "[Ada|123456789]\nhi" {
		t.Fatalf("delivered %q with context %+v, want the held-back message once", d.Event.Text, d.Event.Context)
	}
	shared := session.Key(&session.Source{Platform: "telegram", ChatID: "-4001234567", ChatType: session.ChatTypeGroup}, session.DefaultOptions)
	if d.SessionKey != shared {
		t.Errorf("session key %s, want the chat's shared %s", d.SessionKey, shared)
	}
	rec.Empty(t)
}

// TestGateEndToEnd: long polling against the fake Bot API, the gates use
// the username getMe answered (hermes_test_bot): with the native defaults
// a message for another bot is dropped and one for this bot delivered;
// the tenant's require_mention drops the unaddressed one.
func TestGateEndToEnd(t *testing.T) {
	e := pollingEnv(t, func(c *Config) {
		c.Tenants = map[string]TenantConfig{"t1": {RequireMention: new(true)}}
	})
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
	e.fake.Enqueue(parityRaw(t, "otherbot@group", 1))
	e.fake.Enqueue(parityRaw(t, "plain@group", 2))
	e.fake.Enqueue(parityRaw(t, "say(@hermes_test_bot hi)@group", 3))
	e.fake.Enqueue(parityRaw(t, "otherbot@dm", 4))
	// The group and the DM are ingested side by side: in any order.
	seen := map[string]bool{}
	for range 2 {
		d := e.sink.Next(t)
		seen[d.Event.Source.ChatType] = true
		if d.Event.Source.ChatType != session.ChatTypeDM && (d.Event.MessageID != "43" || d.Event.Text != "hi") {
			t.Fatalf("group delivery %s %q, want the message for this bot (43), its mention removed", d.Event.MessageID, d.Event.Text)
		}
	}
	if !seen[session.ChatTypeDM] || len(seen) != 2 {
		t.Fatalf("delivered chat types %v, want the group's message and the DM (DMs are not gated)", seen)
	}
}

// storeAll is a platform.BatchSink that takes a batch as Deliver takes
// each of its deliveries.
type storeAll struct{ *platformtest.Sink }

// DeliverAll implements platform.BatchSink.
func (s storeAll) DeliverAll(ctx context.Context, ds []platform.Delivery) []error {
	errs := make([]error, len(ds))
	for i, d := range ds {
		errs[i] = s.Deliver(ctx, d)
	}
	return errs
}

// TestObservedAfterADeliveryInOneAnswer: in one getUpdates answer, a
// message observe mode holds back after a delivered message of its chat
// stays kept, and rides the chat's next delivered message as context; the
// delivered message forgets only the context it carried.
func TestObservedAfterADeliveryInOneAnswer(t *testing.T) {
	p, rec := observeEnv(t)
	var sink platform.Sink = storeAll{rec}
	p.sink.Store(&sink)
	ctx := context.Background()
	answer := func(us ...*models.Update) {
		var pus []polledUpdate
		for _, u := range us {
			in, ok := p.prepare(ctx, u)
			if !ok {
				t.Fatalf("update %d dropped before its turn", u.ID)
			}
			pus = append(pus, polledUpdate{u: u, in: in, received: time.Now()})
		}
		p.ingestAnswer(ctx, pus)
	}
	answer(parityUpdate(t, "plain@group", 1), parityUpdate(t, "mention@group", 2), parityUpdate(t, "plain@group", 3))
	if d := rec.Next(t); d.Event.MessageID != "42" || len(d.Event.Context) != 1 {
		t.Fatalf("first delivery %s with context %+v, want 42 with the message held before it", d.Event.MessageID, d.Event.Context)
	}
	answer(parityUpdate(t, "mention@group", 4))
	d := rec.Next(t)
	want := []contract.ContextMessage{{Text: "hi", Source: contract.ContextAuthor{UserName: "Ada", UserID: "123456789"}}}
	if d.Event.MessageID != "44" || !reflect.DeepEqual(d.Event.Context, want) {
		t.Fatalf("second delivery %s with context %+v, want 44 with the message held after the first (43)", d.Event.MessageID, d.Event.Context)
	}
	rec.Empty(t)
}

// TestRemadeTenantGetsNoEarlierObservedContext: a group message observe
// mode held back for the earlier t1 must not reach t1 made again under its
// id (it was received before the new t1's creation), while one held back
// for the new t1 still does. Long polling against the fake Bot API.
func TestRemadeTenantGetsNoEarlierObservedContext(t *testing.T) {
	var deps platform.Deps
	created := &creations{}
	created.vault(&deps)
	e := newEnvDeps(t, deps, func(c *Config) {
		if err := yaml.Unmarshal([]byte("{tenants: {t1: {require_mention: true, observe_unmentioned_group_messages: true, group_allowed_chats: -4001234567}}}"), c); err != nil {
			t.Fatal(err)
		}
	})
	e.run(t)
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	created.made("t1", first)
	chatter := func(id int, text string) {
		e.fake.Enqueue(parityRaw(t, "say("+text+")@group", id))
		held := `"reason":"observed","chat_id":-4001234567,"update_id":` + strconv.Itoa(id) + "}"
		platformtest.WaitUntil(t, "update "+strconv.Itoa(id)+" held back as context", func() bool {
			return strings.Contains(e.logs.String(), held)
		})
	}
	chatter(1, "the earlier t1's chatter")
	created.made("t1", again)
	chatter(2, "the new t1's chatter")
	e.fake.Enqueue(parityRaw(t, "say(@hermes_test_bot hi)@group", 3))
	d := e.sink.Next(t)
	if d.Event == nil || len(d.Event.Context) != 1 || d.Event.Context[0].Text != "the new t1's chatter" {
		t.Fatalf("the new t1's inbound carries context %+v, want its own chatter only", d.Event)
	}
}

// TestChatterRoutedToAnEarlierTenant: a group message observe mode holds
// back is routed to t1, then t1 is deleted and made again under its id
// (the vault first, as the registry's apply does) before it is kept. It is
// the earlier t1's: the new t1's next inbound carries no context. Before,
// it was kept under the creation read as it was kept, the new t1's.
func TestChatterRoutedToAnEarlierTenant(t *testing.T) {
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	created := &creations{}
	created.made("t1", first)
	var remake atomic.Bool // the next creation read is route's: t1 is made again right after it
	since := func(tenant string) time.Time {
		at := created.since(tenant)
		if remake.CompareAndSwap(true, false) {
			created.made("t1", again)
		}
		return at
	}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{Since: since})}, func(c *Config) {
		if err := yaml.Unmarshal([]byte("{tenants: {t1: {require_mention: true, observe_unmentioned_group_messages: true, group_allowed_chats: -4001234567}}}"), c); err != nil {
			t.Fatal(err)
		}
	})
	e.run(t)
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
	remake.Store(true)
	e.fake.Enqueue(parityRaw(t, "say(the earlier t1's chatter)@group", 1))
	platformtest.WaitUntil(t, "update 1 held back as context", func() bool {
		return strings.Contains(e.logs.String(), `"reason":"observed","chat_id":-4001234567,"update_id":1}`)
	})
	if remake.Load() {
		t.Fatal("t1 was not made again as its chatter was routed")
	}
	e.fake.Enqueue(parityRaw(t, "say(@hermes_test_bot hi)@group", 2))
	if d := e.sink.Next(t); d.Event == nil || len(d.Event.Context) != 0 {
		t.Fatalf("the new t1's inbound carries context %+v, want none (the earlier t1's chatter)", d.Event)
	}
}
