package discord

import (
	"encoding/json"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/vault"
)

// TestRebindKeepsTheEarlierHoldersAnswers (docs/security.md rule 3): guild
// Lab is bound to t2, which answers in its channel; then the binding goes
// to t3. t3's edit and delete of t2's answer, and its rename of t2's
// thread there, are the uniform decline and reach Discord with no call;
// t3 edits its own answer. Before, what t2 posted under its binding had
// no record, so the new holder could rewrite or delete it.
func TestRebindKeepsTheEarlierHoldersAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	act := func(tenant string, a map[string]any) contract.Result {
		t.Helper()
		a["metadata"], a["chat_id"] = map[string]any{}, chanGeneral
		body, _ := json.Marshal(a)
		return execute(t, e, tenant, string(body))
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	theirs := act("t2", map[string]any{"op": "send", "content": "t2's answer", "reply_to": nil})
	thread := act("t2", map[string]any{"op": "thread_create", "thread_name": "t2's"})
	if !theirs.Success || !thread.Success {
		t.Fatalf("t2's send and thread_create in its bound guild: %+v, %+v", theirs, thread)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t3"}}); err != nil {
		t.Fatal(err)
	}
	before := len(e.fake.Requests())
	for _, a := range []map[string]any{
		{"op": contract.OpEdit, "message_id": theirs.MessageID, "content": "hijacked"},
		{"op": contract.OpDelete, "message_id": theirs.MessageID},
		{"op": contract.OpThreadRename, "message_id": thread.ThreadID, "thread_name": "hijacked"},
	} {
		if r := act("t3", a); r != contract.Declined(platformName) {
			t.Errorf("t3's %v of t2's %v after the guild was bound to it = %+v, want the decline", a["op"], a["message_id"], r)
		}
	}
	for _, req := range e.fake.Requests()[before:] {
		if req.Method != "GET" {
			t.Errorf("t3's %s %s reached Discord", req.Method, req.Path)
		}
	}
	mine := act("t3", map[string]any{"op": "send", "content": "t3's answer", "reply_to": nil})
	if !mine.Success {
		t.Fatalf("t3's send = %+v", mine)
	}
	if r := act("t3", map[string]any{"op": contract.OpEdit, "message_id": mine.MessageID, "content": "t3 edits"}); !r.Success {
		t.Errorf("t3's edit of its own answer = %+v", r)
	}
	if got := e.fake.Messages(chanGeneral); len(got) < 1 || got[0].ID != theirs.MessageID || got[0].Content != "t2's answer" {
		t.Errorf("the channel holds %+v, want t2's answer first and unchanged", got)
	}
}

// TestRebindKeepsTheEarlierHoldersOldAnswers: as
// TestRebindKeepsTheEarlierHoldersAnswers, but the guild is bound to t3 a
// day and more after t2 answered, when the record of t2's answer has
// expired (vault.ChatGrantTTL). t2's answer, its snowflake older than the
// binding (Binding.Since), is still not t3's to edit or delete; t3 edits
// its own answer. Before, a message with no record counted as the
// holder's, whenever it was posted.
func TestRebindKeepsTheEarlierHoldersOldAnswers(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Now())
	e := newEnvDeps(t, platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk})}, discordtest.Options{}, nil)
	e.startReady(t)
	act := func(tenant string, a map[string]any) contract.Result {
		t.Helper()
		a["metadata"], a["chat_id"] = map[string]any{}, chanGeneral
		body, _ := json.Marshal(a)
		return execute(t, e, tenant, string(body))
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	theirs := act("t2", map[string]any{"op": "send", "content": "t2's answer", "reply_to": nil})
	if !theirs.Success {
		t.Fatalf("t2's send in its bound guild: %+v", theirs)
	}
	clk.Advance(vault.ChatGrantTTL + time.Hour) // the record of t2's answer has expired
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t3", Since: clk.Now()}}); err != nil {
		t.Fatal(err)
	}
	before := len(e.fake.Requests())
	for _, a := range []map[string]any{
		{"op": contract.OpEdit, "message_id": theirs.MessageID, "content": "hijacked"},
		{"op": contract.OpDelete, "message_id": theirs.MessageID},
	} {
		if r := act("t3", a); r != contract.Declined(platformName) {
			t.Errorf("t3's %v of t2's day-old answer after the guild was bound to it = %+v, want the decline", a["op"], r)
		}
	}
	for _, req := range e.fake.Requests()[before:] {
		if req.Method != "GET" {
			t.Errorf("t3's %s %s reached Discord", req.Method, req.Path)
		}
	}
	mine := act("t3", map[string]any{"op": "send", "content": "t3's answer", "reply_to": nil})
	if !mine.Success {
		t.Fatalf("t3's send = %+v", mine)
	}
	if r := act("t3", map[string]any{"op": contract.OpEdit, "message_id": mine.MessageID, "content": "t3 edits"}); !r.Success {
		t.Errorf("t3's edit of its own answer = %+v", r)
	}
	if got := e.fake.Messages(chanGeneral); len(got) < 1 || got[0].ID != theirs.MessageID || got[0].Content != "t2's answer" {
		t.Errorf("the channel holds %+v, want t2's answer first and unchanged", got)
	}
}
