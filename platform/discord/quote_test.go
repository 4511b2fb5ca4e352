package discord

import (
	"strings"
	"testing"
	"time"

	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/vault"
)

// reply is author's MESSAGE_CREATE id in channel of guild, mentioning
// the bot and replying to the bot's message quoted, whose text is
// quotedText.
func reply(id, channel, guild, author, quoted, quotedText string) map[string]any {
	m := msg(id, channel, guild, "about that", true)
	m["author"] = map[string]any{"id": author, "username": "u" + author, "global_name": "U" + author, "discriminator": "0"}
	m["message_reference"] = map[string]any{"message_id": quoted, "channel_id": channel}
	m["referenced_message"] = map[string]any{
		"id": quoted, "channel_id": channel, "content": quotedText, "type": 0,
		"timestamp": "2026-01-15T12:00:00.000000+00:00", "mentions": []any{}, "attachments": []any{}, "embeds": []any{},
		"author": map[string]any{"id": "9000", "username": "hermes", "bot": true, "discriminator": "0"},
	}
	return m
}

// TestQuoteOfAnotherTenantsAnswer: in chanGeneral, which t2 (Ada's) and
// t3 (Bea's) both hold by grant, a reply quoting the bot's answer for t2
// reaches t3 with the quote's text but not as t3's own (before, is_own
// was true for any bot message, so t3's agent took t2's answer for its
// own turn); a reply quoting t3's answer, or either part of t2's answer
// split in two, is its tenant's own.
func TestQuoteOfAnotherTenantsAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	const userBea = "502"
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindUser, ID: userAda, Tenant: "t2"},
		{Kind: platform.BindUser, ID: userBea, Tenant: "t3"},
	}); err != nil {
		t.Fatal(err)
	}
	for i, user := range []string{userAda, userBea} {
		m := msg("710"+string(rune('1'+i)), chanGeneral, guildLab, "hello", false)
		m["author"] = map[string]any{"id": user, "username": "u" + user, "discriminator": "0"}
		e.dispatch(t, "MESSAGE_CREATE", m)
		e.sink.Next(t)
	}
	long := strings.Repeat("a", 1500) + "\n\n" + strings.Repeat("b", 1500)
	if r := execute(t, e, "t2", `{"op":"send","chat_id":"`+chanGeneral+`","content":"`+strings.ReplaceAll(long, "\n", `\n`)+`","reply_to":null,"metadata":{}}`); !r.Success {
		t.Fatalf("t2's send = %+v", r)
	}
	if r := execute(t, e, "t3", `{"op":"send","chat_id":"`+chanGeneral+`","content":"t3's answer","reply_to":null,"metadata":{}}`); !r.Success {
		t.Fatalf("t3's send = %+v", r)
	}
	posted := e.fake.Messages(chanGeneral)
	if len(posted) != 3 {
		t.Fatalf("the channel holds %d messages, want t2's two parts and t3's", len(posted))
	}
	for i, c := range []struct {
		author, quoted, tenant string
		own                    bool
	}{
		{userBea, posted[0].ID, "t3", false},
		{userBea, posted[1].ID, "t3", false},
		{userBea, posted[2].ID, "t3", true},
		{userAda, posted[0].ID, "t2", true},
		{userAda, posted[1].ID, "t2", true},
		{userAda, posted[2].ID, "t2", false},
	} {
		e.dispatch(t, "MESSAGE_CREATE", reply(idAt(time.Now(), 100+i), chanGeneral, guildLab, c.author, c.quoted, "quoted"))
		d := e.sink.Next(t)
		if d.Tenant != c.tenant || d.Event == nil || d.Event.ReplyTo == nil || d.Event.ReplyTo.Text != "quoted" || d.Event.ReplyTo.IsOwn != c.own {
			t.Errorf("reply %d quoting %s reached %q with %+v, want %s with the text and is_own %v", i, c.quoted, d.Tenant, d.Event, c.tenant, c.own)
		}
	}
}

// TestQuoteOfAnEarlierTenantsAnswer: in guild Other, bound to t1, a reply
// quoting the bot's message is t1's own when it was posted since t1's
// creation, and not when it was posted before, for the earlier tenant of
// the id (before, it was t1's own too).
func TestQuoteOfAnEarlierTenantsAnswer(t *testing.T) {
	t.Parallel()
	created := time.Now().Add(-time.Hour)
	v := vault.NewMemory(vault.Config{Since: func(string) time.Time { return created }})
	e := newEnvDeps(t, platform.Deps{Vault: v}, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildOther, Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		quoted string
		own    bool
	}{
		{idAt(created.Add(-time.Minute), 1), false},
		{idAt(created.Add(time.Minute), 2), true},
	} {
		e.dispatch(t, "MESSAGE_CREATE", reply(idAt(time.Now(), 200+i), chanOther, guildOther, userAda, c.quoted, "quoted"))
		d := e.sink.Next(t)
		if d.Tenant != "t1" || d.Event == nil || d.Event.ReplyTo == nil || d.Event.ReplyTo.Text != "quoted" || d.Event.ReplyTo.IsOwn != c.own {
			t.Errorf("reply %d reached %q with %+v, want t1 with the text and is_own %v", i, d.Tenant, d.Event, c.own)
		}
	}
}

// TestQuoteOfAThreadsStarterMessage: Ada, linked to t2, replies in
// ThreadPlan to its starter message, t2's answer in the parent channel
// chanGeneral (Discord gives the quote that channel's id): the quote is
// t2's own (before, its mark was looked up in the thread, and no quote of
// a message of another channel was ever own there).
func TestQuoteOfAThreadsStarterMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg(liveID(1), chanGeneral, guildLab, "hello", false))
	e.sink.Next(t)
	sent := execute(t, e, "t2", `{"op":"send","chat_id":"`+chanGeneral+`","content":"t2's answer","reply_to":null,"metadata":{}}`)
	if !sent.Success {
		t.Fatalf("t2's send = %+v", sent)
	}
	m := reply(liveID(2), threadPlan, guildLab, userAda, sent.MessageID, "t2's answer")
	m["message_reference"].(map[string]any)["channel_id"] = chanGeneral
	m["referenced_message"].(map[string]any)["channel_id"] = chanGeneral
	e.dispatch(t, "MESSAGE_CREATE", m)
	if d := e.sink.Next(t); d.Tenant != "t2" || d.ChatID != threadPlan || d.Event == nil || d.Event.ReplyTo == nil || !d.Event.ReplyTo.IsOwn {
		t.Fatalf("Ada's reply to the thread's starter reached %q in %s with %+v, want t2 with is_own", d.Tenant, d.ChatID, d.Event)
	}
}

// TestQuoteInADMAfterAnUnlink: Ada, linked to t2, DMs the bot and t2
// answers; once she is unlinked her DM is dm_tenant t1's (rule 4), and a
// reply there quoting t2's answer reaches t1 not as its own (before, any
// bot message since t1's creation was), while one quoting t1's answer
// there is.
func TestQuoteInADMAfterAnUnlink(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: userAda, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg(liveID(1), chanDMAda, "", "hi", false))
	if d := e.sink.Next(t); d.Tenant != "t2" {
		t.Fatalf("Ada's DM reached %q, want t2", d.Tenant)
	}
	t2s := execute(t, e, "t2", `{"op":"send","chat_id":"`+chanDMAda+`","content":"t2 answers","reply_to":null,"metadata":{}}`)
	if !t2s.Success {
		t.Fatalf("t2's send = %+v", t2s)
	}
	if err := e.p.Bind(nil); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg(liveID(2), chanDMAda, "", "hi again", false))
	if d := e.sink.Next(t); d.Tenant != "t1" {
		t.Fatalf("Ada's DM after the unlink reached %q, want dm_tenant t1", d.Tenant)
	}
	t1s := execute(t, e, "t1", `{"op":"send","chat_id":"`+chanDMAda+`","content":"t1 answers","reply_to":null,"metadata":{}}`)
	if !t1s.Success {
		t.Fatalf("t1's send = %+v", t1s)
	}
	for i, c := range []struct {
		quoted string
		own    bool
	}{{t2s.MessageID, false}, {t1s.MessageID, true}} {
		e.dispatch(t, "MESSAGE_CREATE", reply(liveID(3+i), chanDMAda, "", userAda, c.quoted, "quoted"))
		if d := e.sink.Next(t); d.Tenant != "t1" || d.Event == nil || d.Event.ReplyTo == nil || d.Event.ReplyTo.IsOwn != c.own {
			t.Errorf("reply %d quoting %s reached %q with %+v, want t1 with is_own %v", i, c.quoted, d.Tenant, d.Event, c.own)
		}
	}
}
