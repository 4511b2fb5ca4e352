package discord

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/bwmarrin/discordgo"

	"connector/contract"
	"connector/platform"
	"connector/platform/discord/discordtest"
)

// TestDMTenantKeepsOutOfLinkedUsersDMs: rule 4 gives dm_tenant (t1) only
// the DMs no rule above places. Ada, linked to t2, DMs the bot: t2 acts in
// her DM on its grant, and t1 may not post, edit or delete there, nor
// does any such call reach Discord. Bob, linked to nobody, DMs the bot:
// t1 acts in his DM. A DM channel whose user is not known (cached from an
// answer without recipients) is nobody's until a message in it tells its
// user; unlinking Ada gives her DM back to t1.
func TestDMTenantKeepsOutOfLinkedUsersDMs(t *testing.T) {
	t.Parallel()
	const userBob, chanDMBob, chanDMEve = "502", "302", "303"
	e := newEnv(t, discordtest.Options{}, nil)
	e.fake.AddChannel(discordtest.Channel{ID: chanDMBob, Type: 1, Recipients: []discordtest.Recipient{{ID: userBob, Username: "bob"}}})
	e.startReady(t)
	guilds := []platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"}, {Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"}}
	if err := e.p.Bind(append(guilds, platform.Binding{Kind: platform.BindUser, ID: userAda, Tenant: "t2"})); err != nil {
		t.Fatal(err)
	}
	e.dispatch(t, "MESSAGE_CREATE", msg("7200", chanDMAda, "", "hi from Ada", false))
	if d := e.sink.Next(t); d.ChatID != chanDMAda || d.Tenant != "t2" {
		t.Fatalf("Ada's DM delivered as %+v, want to t2", d)
	}
	sent := execute(t, e, "t2", `{"op":"send","chat_id":"301","content":"t2 answers","reply_to":null,"metadata":{}}`)
	if !sent.Success || sent.MessageID == "" {
		t.Fatalf("t2 in its linked user's DM = %+v", sent)
	}
	before := len(e.fake.Requests())
	for _, op := range []string{
		`{"op":"send","chat_id":"301","content":"t1 intrudes","reply_to":null,"metadata":{}}`,
		`{"op":"edit","chat_id":"301","message_id":"` + sent.MessageID + `","content":"t1 rewrote it","metadata":{}}`,
		`{"op":"delete","chat_id":"301","message_id":"` + sent.MessageID + `","metadata":{}}`,
		`{"op":"typing","chat_id":"301","metadata":{}}`,
	} {
		if r := execute(t, e, "t1", op); r.Code != contract.CodeEgressDeclined {
			t.Fatalf("dm_tenant t1 in a DM of a user linked to t2: %s = %+v, want egress_declined", op, r)
		}
	}
	for _, q := range e.fake.Requests()[before:] {
		if strings.Contains(q.Path, "/channels/"+chanDMAda) {
			t.Fatalf("t1's declined op reached Discord: %s %s", q.Method, q.Path)
		}
	}
	if ms := e.fake.Messages(chanDMAda); len(ms) != 1 || ms[0].Content != "t2 answers" {
		t.Fatalf("Ada's DM holds %+v, want t2's message alone, untouched", ms)
	}

	// Bob is linked to nobody: his DM is t1's by rule 4.
	e.dispatch(t, "MESSAGE_CREATE", func() map[string]any {
		m := msg("7201", chanDMBob, "", "hi from Bob", false)
		m["author"] = map[string]any{"id": userBob, "username": "bob"}
		return m
	}())
	if d := e.sink.Next(t); d.ChatID != chanDMBob || d.Tenant != "t1" {
		t.Fatalf("Bob's DM delivered as %+v, want to t1", d)
	}
	if r := execute(t, e, "t1", `{"op":"send","chat_id":"302","content":"t1 answers Bob","reply_to":null,"metadata":{}}`); !r.Success {
		t.Fatalf("dm_tenant t1 in an unlinked user's DM = %+v", r)
	}
	if r := execute(t, e, "t2", `{"op":"typing","chat_id":"302","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 in Bob's DM = %+v, want egress_declined", r)
	}

	// A DM channel known without its user is nobody's, until a message in
	// it tells who the user is.
	e.p.cache.putChannel(&wireChannel{ID: chanDMEve, Type: discordgo.ChannelTypeDM})
	if _, err := e.p.ChatTenant(waitCtx(t), chanDMEve); !errors.Is(err, platform.ErrUnknownChat) {
		t.Fatalf("a DM channel of an unknown user = %v, want ErrUnknownChat", err)
	}
	e.p.cache.rememberDM(chanDMEve, "504")
	if owner, err := e.p.ChatTenant(waitCtx(t), chanDMEve); err != nil || owner != "t1" {
		t.Fatalf("the DM channel once its unlinked user is known = %q, %v, want t1", owner, err)
	}

	// Unlinked, Ada's DM falls back to t1 again.
	if err := e.p.Bind(guilds); err != nil {
		t.Fatal(err)
	}
	if r := execute(t, e, "t1", `{"op":"typing","chat_id":"301","metadata":{}}`); !r.Success {
		t.Fatalf("dm_tenant t1 in Ada's DM once she is unlinked = %+v", r)
	}
	if _, err := e.fake.WaitRequest(waitCtx(t), func(q discordtest.Request) bool {
		return q.Method == http.MethodPost && q.Path == "/api/v9/channels/"+chanDMAda+"/typing"
	}); err != nil {
		t.Fatalf("t1's typing in Ada's DM never reached Discord: %v", err)
	}
}

// TestDMTenantKeepsToItsMessages: Ada, linked to t2, DMs the bot and t2
// answers her on its grant; then she is unlinked, and her DM falls back to
// dm_tenant t1 while t2's grant there still stands. Two tenants act in the
// DM: t1 may not edit or delete t2's message (before, rule 4 held the DM
// as t1's alone and let it), on the instance holding the Gateway or on a
// standby sharing its vault, nor may t2 edit t1's; each edits its own.
func TestDMTenantKeepsToItsMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	standby := &env{fake: e.fake, sink: newSink(), logs: newLogCapture(), metrics: newMetrics(), cfg: e.cfg}
	var err error
	standby.p, err = New(e.cfg, platform.Deps{Log: standby.logs.Logger(), Metrics: standby.metrics, Vault: e.vault,
		Exclusive: func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // the Gateway lease stays with e
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	standby.start(t)
	bind := func(bindings []platform.Binding) {
		t.Helper()
		for _, x := range []*env{e, standby} {
			if err := x.p.Bind(bindings); err != nil {
				t.Fatal(err)
			}
		}
	}
	guilds := []platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"}, {Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"}}
	bind(append(guilds, platform.Binding{Kind: platform.BindUser, ID: userAda, Tenant: "t2"}))
	e.dispatch(t, "MESSAGE_CREATE", msg("7300", chanDMAda, "", "hi from Ada", false))
	if d := e.sink.Next(t); d.ChatID != chanDMAda || d.Tenant != "t2" {
		t.Fatalf("Ada's DM delivered as %+v, want to t2", d)
	}
	send := func(tenant, text string) string {
		t.Helper()
		r := execute(t, e, tenant, `{"op":"send","chat_id":"`+chanDMAda+`","content":"`+text+`","reply_to":null,"metadata":{}}`)
		if !r.Success || r.MessageID == "" {
			t.Fatalf("%s's send into Ada's DM = %+v", tenant, r)
		}
		return r.MessageID
	}
	edit := func(tenant, id, text string) contract.Result {
		t.Helper()
		return execute(t, e, tenant, `{"op":"edit","chat_id":"`+chanDMAda+`","message_id":"`+id+`","content":"`+text+`","metadata":{}}`)
	}
	t2msg := send("t2", "t2 answers")
	bind(guilds) // Ada unlinked: rule 4
	t1msg := send("t1", "t1 answers")
	for _, x := range []*env{standby, e} {
		for _, op := range []string{
			`{"op":"edit","chat_id":"` + chanDMAda + `","message_id":"` + t2msg + `","content":"t1 rewrote it","metadata":{}}`,
			`{"op":"delete","chat_id":"` + chanDMAda + `","message_id":"` + t2msg + `","metadata":{}}`,
		} {
			if r := execute(t, x, "t1", op); r.Code != contract.CodeEgressDeclined {
				t.Fatalf("dm_tenant t1 on t2's message in Ada's DM (standby %v): %s = %+v, want egress_declined", x == standby, op, r)
			}
		}
	}
	if r := edit("t2", t1msg, "t2 rewrote it"); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 on t1's message in Ada's DM = %+v, want egress_declined", r)
	}
	if r := edit("t1", t1msg, "t1 edited"); !r.Success {
		t.Fatalf("t1 editing its own message = %+v", r)
	}
	if r := edit("t2", t2msg, "t2 edited"); !r.Success {
		t.Fatalf("t2 editing its own message = %+v", r)
	}
	got := map[string]string{}
	for _, m := range e.fake.Messages(chanDMAda) {
		got[m.ID] = m.Content
	}
	if got[t2msg] != "t2 edited" || got[t1msg] != "t1 edited" {
		t.Fatalf("Ada's DM holds %v, want each tenant's message edited by it alone", got)
	}
}
