package telegram

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"

	"connector/contract"
	"connector/platform"
	"connector/platform/telegram/telegramtest"
	"connector/store"
)

// onState builds a platform against fake whose topic names are kept in st,
// as another instance or a later start would be.
func onState(t *testing.T, fake *telegramtest.Server, st store.Store) *Platform {
	t.Helper()
	p, err := New(Config{BotToken: testToken, APIServerURL: fake.URL, Chats: testChats,
		GlobalPerSecond: -1, ChatPerSecond: -1, GroupPerMinute: -1},
		platform.Deps{Log: slog.New(slog.DiscardHandler), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.transport.CloseIdleConnections)
	return p
}

func execute(t *testing.T, p *Platform, a contract.Action) contract.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	return p.Execute(ctx, "t1", &a)
}

// TestTopicNamesSharedAndKeptAcrossRestarts: a topic one instance created
// is known to another instance on the same store, which honours
// only_if_connector_created for it; the name it gave is known after a
// restart on the embedded store, where only_if_current_name holds for it
// and a rename by a member (forum_topic_edited) is remembered too.
func TestTopicNamesSharedAndKeptAcrossRestarts(t *testing.T) {
	fake := telegramtest.New(t, testToken)
	fake.AddForum(-1001112223334)
	dir := t.TempDir()
	open := func() store.Store {
		st, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: dir})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open()
	i0, i1 := onState(t, fake, st), onState(t, fake, st)
	created := execute(t, i0, contract.Action{Op: contract.OpThreadCreate, ChatID: chatDevForum, ThreadName: "Handoff"})
	if !created.Success {
		t.Fatalf("thread_create = %+v", created)
	}
	rename := contract.Action{Op: contract.OpThreadRename, ChatID: chatDevForum, MessageID: contract.ID(created.ThreadID),
		ThreadName: "Fix the build", OnlyIfConnectorCreated: true}
	if r := execute(t, i1, rename); !r.Success {
		t.Fatalf("only_if_connector_created on the other instance = %+v", r)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = open()
	t.Cleanup(func() { _ = st.Close() })
	restarted := onState(t, fake, st)
	current := "Fix the build"
	rename.ThreadName, rename.OnlyIfConnectorCreated, rename.OnlyIfCurrentName = "Deploy", false, &current
	if r := execute(t, restarted, rename); !r.Success {
		t.Fatalf("only_if_current_name after a restart = %+v", r)
	}
	topic, _ := strconv.Atoi(created.ThreadID)
	if name, _ := fake.Topic(-1001112223334, topic); name != "Deploy" {
		t.Fatalf("topic %q", name)
	}

	// A member's rename, seen by the restarted instance, reaches the store.
	edited, err := fake.RenameTopic(1, map[string]any{"id": int64(-1001112223334), "type": "supergroup", "is_forum": true}, topic, "Grace's",
		map[string]any{"id": int64(31337), "is_bot": false, "first_name": "Grace"})
	if err != nil {
		t.Fatal(err)
	}
	rec := newSink()
	var sink platform.Sink = rec
	restarted.sink.Store(&sink)
	var u models.Update
	if err := json.Unmarshal(edited, &u); err != nil {
		t.Fatal(err)
	}
	if err := restarted.handle(context.Background(), &u, time.Now()); err != nil {
		t.Fatal(err)
	}
	rec.Empty(t)
	rename.OnlyIfCurrentName, rename.OnlyIfConnectorCreated = nil, true
	if r := execute(t, onState(t, fake, st), rename); r.Code != contract.CodeNameChanged {
		t.Fatalf("only_if_connector_created after a member's rename = %+v, want name_changed", r)
	}
}

// TestTopicOfAnotherTenantOnAGrant (docs/security.md rule 3): in a forum
// group no tenant binds or claims, t1's user 501 and t2's user 505 both
// wrote, so both act there on their grants. t1 creates a topic; t2's
// rename of it, guarded by only_if_connector_created or not, is the
// uniform decline and reaches no Telegram call, while t1 renames its own.
// t2 used to rename it: the guard only asks whether the connector, for any
// tenant, created the topic. Once t2 claims the group, its rename of t1's
// topic is still refused, also with the id spelt "0…" or "+…" (before,
// those spellings named no posted record, and Telegram renamed the topic).
func TestTopicOfAnotherTenantOnAGrant(t *testing.T) {
	e := webhookEnv(t, nil)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}, {Kind: platform.BindUser, ID: "505", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	const group = -100777
	e.fake.AddForum(group)
	for i, u := range []struct{ user, tenant string }{{"501", "t1"}, {"505", "t2"}} {
		say := `{"update_id":88410090` + strconv.Itoa(i) + `,"message":{"message_id":` + strconv.Itoa(i+1) +
			`,"date":1767225300,"chat":{"id":-100777,"type":"supergroup","title":"G","is_forum":true},"from":{"id":` + u.user + `,"is_bot":false,"first_name":"U"},"text":"hello"}}`
		if code := e.post(t, []byte(say)); code != http.StatusOK {
			t.Fatalf("%s's user's message: status %d", u.tenant, code)
		}
		if d := e.sink.Next(t); d.Tenant != u.tenant {
			t.Fatalf("%s's user's message delivered to %q", u.tenant, d.Tenant)
		}
	}
	chat := contract.ID(strconv.Itoa(group))
	created := e.act(t, "t1", contract.Action{Op: contract.OpThreadCreate, ChatID: chat, ThreadName: "t1's topic"})
	if !created.Success {
		t.Fatalf("t1's thread_create on its grant: %+v", created)
	}
	rename := contract.Action{Op: contract.OpThreadRename, ChatID: chat, MessageID: contract.ID(created.ThreadID), ThreadName: "t2's now"}
	for _, guarded := range []bool{true, false} {
		rename.OnlyIfConnectorCreated = guarded
		if r := e.act(t, "t2", rename); r != contract.Declined(platformName) {
			t.Errorf("t2's rename of t1's topic (only_if_connector_created %v): %+v, want the decline", guarded, r)
		}
	}
	if n := len(e.fake.Calls("editForumTopic")); n != 0 {
		t.Fatalf("t2's renames made %d editForumTopic calls", n)
	}
	rename.ThreadName = "t1's renamed"
	if r := e.act(t, "t1", rename); !r.Success {
		t.Fatalf("t1's rename of its own topic: %+v", r)
	}
	topic, _ := strconv.Atoi(created.ThreadID)
	if name, _ := e.fake.Topic(group, topic); name != "t1's renamed" {
		t.Fatalf("topic named %q", name)
	}
	// t2 claims the group: t1's topic stays t1's, however its id is spelt.
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}, {Kind: platform.BindUser, ID: "505", Tenant: "t2"}, {Kind: platform.BindScope, ID: string(chat), Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	rename.ThreadName = "t2's now"
	for _, id := range []string{created.ThreadID, "0" + created.ThreadID, "+" + created.ThreadID} {
		rename.MessageID = contract.ID(id)
		if r := e.act(t, "t2", rename); r.Success || r.Code != contract.CodeEgressDeclined && r.Code != contract.CodeBadRequest {
			t.Errorf("t2's rename of t1's topic as %q in its claimed group: %+v, want the decline or bad_request", id, r)
		}
	}
	if name, _ := e.fake.Topic(group, topic); name != "t1's renamed" {
		t.Fatalf("topic named %q after t2's claim, want t1's name", name)
	}
}

// TestUnguardedRenameKeepsAnUnreadTopicRecord: an unguarded rename while
// the store cannot give the topic's record goes ahead and leaves the
// record as it is, so a later only_if_connector_created rename of the
// topic the connector created still goes through. The rename used to write
// back a record of the new name alone, which lost Created: the guarded
// rename was refused with name_changed ever after.
func TestUnguardedRenameKeepsAnUnreadTopicRecord(t *testing.T) {
	fake := telegramtest.New(t, testToken)
	fake.AddForum(-1001112223334)
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	p := onState(t, fake, st)
	topics := &unreadableCaps{Capabilities: p.topics, part: "telegram/topic/"}
	p.topics = topics
	created := execute(t, p, contract.Action{Op: contract.OpThreadCreate, ChatID: chatDevForum, ThreadName: "Handoff"})
	if !created.Success {
		t.Fatalf("thread_create = %+v", created)
	}
	rename := contract.Action{Op: contract.OpThreadRename, ChatID: chatDevForum, MessageID: contract.ID(created.ThreadID), ThreadName: "Fix the build"}
	topics.failing.Store(true)
	if r := execute(t, p, rename); !r.Success {
		t.Fatalf("unguarded rename with the store unreadable = %+v", r)
	}
	topics.failing.Store(false)
	rename.ThreadName, rename.OnlyIfConnectorCreated = "Deploy", true
	if r := execute(t, p, rename); !r.Success {
		t.Fatalf("only_if_connector_created after an unguarded rename the store could not read for = %+v", r)
	}
	topic, _ := strconv.Atoi(created.ThreadID)
	if name, _ := fake.Topic(-1001112223334, topic); name != "Deploy" {
		t.Fatalf("topic %q, want Deploy", name)
	}
}
