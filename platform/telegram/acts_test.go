package telegram

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/telegram/telegramtest"
	"connector/vault"
)

// Chats of testChats used by the op tests.
const (
	chatAda      = telegramtest.ChatAda
	chatDevForum = telegramtest.ChatDevForum
)

func promptAction(chat string, options ...contract.PromptOption) contract.Action {
	return contract.Action{Op: contract.OpPrompt, ChatID: contract.ID(chat), Content: "Run **make deploy**?",
		PromptID: "f00dba.1234abcd", Options: options}
}

func TestPromptInlineKeyboard(t *testing.T) {
	e := newEnv(t, nil)
	a := promptAction(chatDevForum, contract.PromptOption{ID: "once", Label: "Approve once", Style: "primary"},
		contract.PromptOption{ID: "deny", Label: "Deny", Style: "danger"})
	a.Metadata.ThreadID = "42"
	a.ReplyTo = "3004"
	r := e.act(t, "t1", a)
	if !r.Success || r.MessageID == "" {
		t.Fatalf("prompt = %+v", r)
	}
	calls := e.fake.Calls("sendMessage")
	if len(calls) != 1 {
		t.Fatalf("%d sendMessage calls", len(calls))
	}
	f := calls[0].Form
	if f["reply_markup"] != `{"inline_keyboard":[[{"text":"Approve once","style":"primary","callback_data":"hp1:f00dba.1234abcd:once"}],[{"text":"Deny","style":"danger","callback_data":"hp1:f00dba.1234abcd:deny"}]]}` ||
		f["message_thread_id"] != "42" || f["reply_parameters"] != `{"message_id":3004,"allow_sending_without_reply":true}` ||
		visible(t, calls[0]) != "Run make deploy?" {
		t.Fatalf("sendMessage %v", f)
	}

	// A long question: the keyboard rides the last part, whose id answers.
	long := promptAction(chatAda, contract.PromptOption{ID: "ok", Label: "OK"})
	long.Content = strings.Repeat("word ", 1000)
	r = e.act(t, "t1", long)
	calls = e.fake.Calls("sendMessage")
	if !r.Success || len(calls) != 3 || calls[1].Form["reply_markup"] != "" || calls[2].Form["reply_markup"] == "" {
		t.Fatalf("long prompt = %+v, %d calls", r, len(calls))
	}
	if first, _ := strconv.Atoi(r.MessageID); first != 103 {
		t.Errorf("message_id %s, want the last part's (103)", r.MessageID)
	}

	bad := map[string]contract.Action{
		"bad option id": promptAction(chatAda, contract.PromptOption{ID: "no way", Label: "x"}),
		"no options":    promptAction(chatAda),
		"blank label":   promptAction(chatAda, contract.PromptOption{ID: "a", Label: " "}),
	}
	long64 := promptAction(chatAda, contract.PromptOption{ID: strings.Repeat("o", 32), Label: "x"})
	long64.PromptID = strings.Repeat("p", 28) // hp1: + 28 + : + 32 = 65 bytes
	bad["over 64 bytes"] = long64
	tooMany := promptAction(chatAda)
	for i := range 26 {
		tooMany.Options = append(tooMany.Options, contract.PromptOption{ID: "o" + strconv.Itoa(i), Label: "x"})
	}
	bad["26 options"] = tooMany
	noQuestion := promptAction(chatAda, contract.PromptOption{ID: "a", Label: "A"})
	noQuestion.Content = ""
	bad["no question"] = noQuestion
	for name, a := range bad {
		if r := e.act(t, "t1", a); r.Success || r.Code != contract.CodeBadRequest {
			t.Errorf("%s: %+v, want bad_request", name, r)
		}
	}
	if r := e.act(t, "t2", promptAction(chatAda, contract.PromptOption{ID: "a", Label: "A"})); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2 prompt into t1's chat = %+v", r)
	}
	if r := e.act(t, "t1", promptAction("not-a-chat", contract.PromptOption{ID: "a", Label: "A"})); r.Code != contract.CodeBadRequest {
		t.Errorf("prompt into a non-chat = %+v", r)
	}
	if n := len(e.fake.Calls("sendMessage")); n != 3 {
		t.Errorf("refused prompts sent messages: %d calls", n)
	}
}

func TestReactAndDelete(t *testing.T) {
	e := newEnv(t, nil)
	// Ada's message the gateway reacts to, as Telegram delivered it.
	e.fake.Saw([]byte(`{"update_id":1,"message":{"message_id":3004,"date":1767268800,"chat":{"id":-1001112223334,"type":"supergroup"},"text":"deploy?"}}`))
	react := func(tenant, msg, emoji string, remove bool) contract.Result {
		return e.act(t, tenant, contract.Action{Op: contract.OpReact, ChatID: chatDevForum, MessageID: contract.ID(msg), Emoji: emoji, Remove: remove})
	}
	if r := react("t1", "3004", "👀", false); !r.Success {
		t.Fatalf("react = %+v", r)
	}
	if got := e.fake.Reactions(-1001112223334, 3004); len(got) != 1 || got[0] != "👀" {
		t.Fatalf("reactions = %v", got)
	}
	call := e.fake.Calls("setMessageReaction")[0].Form
	if call["reaction"] != `[{"type":"emoji","emoji":"👀"}]` || call["message_id"] != "3004" || call["chat_id"] != chatDevForum {
		t.Fatalf("setMessageReaction %v", call)
	}
	if r := react("t1", "3004", "👍", false); !r.Success || strings.Join(e.fake.Reactions(-1001112223334, 3004), "") != "👍" {
		t.Fatalf("replacing reaction = %+v %v", r, e.fake.Reactions(-1001112223334, 3004))
	}
	if r := react("t1", "3004", "👍", true); !r.Success || len(e.fake.Reactions(-1001112223334, 3004)) != 0 {
		t.Fatalf("remove = %+v %v", r, e.fake.Reactions(-1001112223334, 3004))
	}
	for name, c := range map[string]struct {
		msg, emoji, code string
	}{
		"outside the curated set": {"3004", "✅", contract.CodePlatformError},
		"blank emoji":             {"3004", "", contract.CodeBadRequest},
		"callback id":             {"callback:abc", "👀", contract.CodeBadRequest},
		"unknown message":         {"999999", "👀", contract.CodePlatformError},
	} {
		if r := react("t1", c.msg, c.emoji, false); r.Success || r.Code != c.code {
			t.Errorf("%s: %+v, want %s", name, r, c.code)
		}
	}
	if r := e.act(t, "t2", contract.Action{Op: contract.OpReact, ChatID: chatDevForum, MessageID: "3004", Emoji: "👀"}); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2 react = %+v", r)
	}

	del := func(tenant, chat, msg string) contract.Result {
		return e.act(t, tenant, contract.Action{Op: contract.OpDelete, ChatID: contract.ID(chat), MessageID: contract.ID(msg)})
	}
	if r := del("t2", chatDevForum, "3004"); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2 delete = %+v", r)
	}
	if r := del("t1", chatDevForum, "x"); r.Code != contract.CodeBadRequest {
		t.Errorf("bad id delete = %+v", r)
	}
	if r := del("t1", chatDevForum, "3004"); !r.Success || e.fake.HasMessage(-1001112223334, 3004) {
		t.Fatalf("delete = %+v", r)
	}
	if r := del("t1", chatDevForum, "3004"); !r.Success {
		t.Errorf("repeated delete = %+v, want success (already gone)", r)
	}
	e.fake.Fail("deleteMessage", telegramtest.Failure{Code: 400, Description: "Bad Request: message can't be deleted for everyone"})
	if r := del("t1", chatDevForum, "3005"); r.Code != contract.CodePlatformError {
		t.Errorf("undeletable = %+v", r)
	}
}

func TestForumTopics(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.AddForum(-1001112223334)
	act := func(tenant string, a contract.Action) contract.Result { return e.act(t, tenant, a) }
	created := act("t1", contract.Action{Op: contract.OpThreadCreate, ChatID: chatDevForum, ThreadName: " Handoff: deploy "})
	if !created.Success || created.ThreadID == "" || created.MessageID != created.ThreadID {
		t.Fatalf("thread_create = %+v", created)
	}
	id, _ := strconv.Atoi(created.ThreadID)
	if name, ok := e.fake.Topic(-1001112223334, id); !ok || name != "Handoff: deploy" {
		t.Fatalf("topic %q %v", name, ok)
	}
	// The topic takes sends by metadata.thread_id.
	send := sendAction(chatDevForum, "continuing here")
	send.Metadata.ThreadID = contract.ID(created.ThreadID)
	if r := act("t1", send); !r.Success || e.fake.Calls("sendMessage")[0].Form["message_thread_id"] != created.ThreadID {
		t.Fatalf("send into the topic = %+v", r)
	}
	if r := act("t1", contract.Action{Op: contract.OpThreadCreate, ChatID: chatAda, ThreadName: "x"}); r.Code != contract.CodePlatformError {
		t.Errorf("thread_create outside a forum = %+v", r)
	}
	if r := act("t1", contract.Action{Op: contract.OpThreadCreate, ChatID: chatDevForum, ThreadName: "  "}); r.Code != contract.CodeBadRequest {
		t.Errorf("blank name = %+v", r)
	}
	if r := act("t2", contract.Action{Op: contract.OpThreadCreate, ChatID: chatDevForum, ThreadName: "x"}); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2 thread_create = %+v", r)
	}

	rename := contract.Action{Op: contract.OpThreadRename, ChatID: chatDevForum, MessageID: contract.ID(created.ThreadID), ThreadName: "Deploy v2.1"}
	if r := act("t1", rename); !r.Success {
		t.Fatalf("rename = %+v", r)
	}
	if name, _ := e.fake.Topic(-1001112223334, id); name != "Deploy v2.1" {
		t.Fatalf("renamed to %q", name)
	}
	if r := act("t1", rename); !r.Success {
		t.Errorf("rename to the same name = %+v, want success", r)
	}
	// The connector named the topic, so it knows its name: a guard that
	// holds renames, a stale one does not.
	current := "Deploy v2.1"
	guarded := rename
	guarded.ThreadName, guarded.OnlyIfCurrentName = "LLM title", &current
	if r := act("t1", guarded); !r.Success {
		t.Fatalf("only_if_current_name with the current name = %+v", r)
	}
	if r := act("t1", guarded); r.Success || r.Code != contract.CodeNameChanged {
		t.Errorf("a stale only_if_current_name = %+v, want name_changed", r)
	}
	if name, _ := e.fake.Topic(-1001112223334, id); name != "LLM title" {
		t.Fatalf("topic %q after the guarded renames", name)
	}
	bad := rename
	bad.MessageID = "callback:1"
	if r := act("t1", bad); r.Code != contract.CodeBadRequest {
		t.Errorf("rename of a bad id = %+v", r)
	}
	if r := act("t2", rename); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2 rename = %+v", r)
	}
	unknown := rename
	unknown.MessageID = "999"
	if r := act("t1", unknown); r.Code != contract.CodePlatformError {
		t.Errorf("rename of an unknown topic = %+v", r)
	}
}

// TestPromptPressInASharedDMReachesItsPoster: user 501 is linked to t1
// (the DM's home) and t2, which prompts the user in the DM. The press is
// t2's answer: it used to go by the DM's route, to t1, which got t2's
// prompt_id and the user's choice while t2 never did.
func TestPromptPressInASharedDMReachesItsPoster(t *testing.T) {
	e := webhookEnv(t, nil)
	bindings := []platform.Binding{
		{Kind: platform.BindUser, ID: "501", Tenant: "t1"},
		{Kind: platform.BindUser, ID: "501", Tenant: "t2"},
	}
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	r := e.act(t, "t2", promptAction("501", contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("t2's prompt: %+v", r)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	user := map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"}
	chat := map[string]any{"id": int64(501), "type": "private", "first_name": "Ada"}
	press, err := e.fake.PressButton(884100900, chat, msgID, "hp1:f00dba.1234abcd:once", user)
	if err != nil {
		t.Fatal(err)
	}
	if code := e.post(t, press); code != http.StatusOK {
		t.Fatalf("press: status %d", code)
	}
	d := e.sink.Next(t)
	if d.Tenant != "t2" || d.Event == nil || d.Event.PromptResponse == nil || d.Event.PromptResponse.OptionID != "once" {
		t.Fatalf("press delivered to %q: %+v, want t2's prompt_response", d.Tenant, d.Event)
	}
}

// TestPromptPressAfterTheLinkMoved: user 501, linked to t1, writes t1 in
// the DM and t1 prompts there; then 501's link moves to t2. A press of
// t1's prompt in the DM, which t1 still holds by grant, is t1's answer
// (the DM records its prompts' poster), not t2's.
func TestPromptPressAfterTheLinkMoved(t *testing.T) {
	e := webhookEnv(t, nil)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	say := `{"update_id":884100910,"message":{"message_id":1,"date":1767225300,"chat":{"id":501,"type":"private","first_name":"Ada"},"from":{"id":501,"is_bot":false,"first_name":"Ada"},"text":"hello"}}`
	if code := e.post(t, []byte(say)); code != http.StatusOK {
		t.Fatalf("Ada's message: status %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t1" {
		t.Fatalf("Ada's message delivered to %q, want t1", d.Tenant)
	}
	r := e.act(t, "t1", promptAction("501", contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("t1's prompt: %+v", r)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	user := map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"}
	chat := map[string]any{"id": int64(501), "type": "private", "first_name": "Ada"}
	press, err := e.fake.PressButton(884100911, chat, msgID, "hp1:f00dba.1234abcd:once", user)
	if err != nil {
		t.Fatal(err)
	}
	if code := e.post(t, press); code != http.StatusOK {
		t.Fatalf("press: status %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event == nil || d.Event.PromptResponse == nil {
		t.Fatalf("press delivered to %q: %+v, want t1's prompt_response", d.Tenant, d.Event)
	}
}

// TestPressAfterTheLinkMovedRenewsNoGrant: user 501, linked to t1, writes
// t1 in the DM and t1 prompts there; then 501's link moves to t2. Her press
// 13 hours later still answers t1's prompt, while t1's grant lives, but
// does not renew that grant: 25 hours after her message t1 may no longer
// send into her DM (before, each press of its old prompt kept t1 in the
// DM of a user linked elsewhere).
func TestPressAfterTheLinkMovedRenewsNoGrant(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnvDeps(t, platform.Deps{Clock: clk}, func(c *Config) {
		c.WebhookURL, c.WebhookSecret = "https://connector.example"+WebhookPath, testSecret
	})
	e.startWebhook(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	say := `{"update_id":884100920,"message":{"message_id":1,"date":1767225300,"chat":{"id":501,"type":"private","first_name":"Ada"},"from":{"id":501,"is_bot":false,"first_name":"Ada"},"text":"hello"}}`
	if code := e.post(t, []byte(say)); code != http.StatusOK {
		t.Fatalf("Ada's message: status %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t1" {
		t.Fatalf("Ada's message delivered to %q, want t1", d.Tenant)
	}
	r := e.act(t, "t1", promptAction("501", contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("t1's prompt: %+v", r)
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(13 * time.Hour)
	msgID, _ := strconv.Atoi(r.MessageID)
	user := map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"}
	chat := map[string]any{"id": int64(501), "type": "private", "first_name": "Ada"}
	press, err := e.fake.PressButton(884100921, chat, msgID, "hp1:f00dba.1234abcd:once", user)
	if err != nil {
		t.Fatal(err)
	}
	if code := e.post(t, press); code != http.StatusOK {
		t.Fatalf("press: status %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event == nil || d.Event.PromptResponse == nil {
		t.Fatalf("press delivered to %q: %+v, want t1's prompt_response", d.Tenant, d.Event)
	}
	clk.Advance(12 * time.Hour)
	send := contract.Action{Op: contract.OpSend, ChatID: "501", Content: "still here"}
	if r := e.act(t, "t1", send); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1's send into the DM of a user linked to t2, 25 h on = %+v, want egress_declined", r)
	}
}

// TestPromptPressInASharedGroupReachesItsPoster: in a group no tenant
// binds or claims, t2 holds the chat by grant (its user 505 wrote there)
// and prompts there; user 501, linked to t1 (501's home) and t2, presses.
// The press is t2's answer, as in a shared DM: it went by the author's
// route, to t1, which got t2's prompt_id and the choice while t2 never
// did. Once t3 claims the group, a press of t2's prompt is dropped
// (prompt_not_owned) and answered: it was t3's, with t2's prompt_id.
func TestPromptPressInASharedGroupReachesItsPoster(t *testing.T) {
	e := webhookEnv(t, nil)
	bindings := []platform.Binding{
		{Kind: platform.BindUser, ID: "501", Tenant: "t1"},
		{Kind: platform.BindUser, ID: "501", Tenant: "t2"},
		{Kind: platform.BindUser, ID: "505", Tenant: "t2"},
	}
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	const group = -100888
	chat := map[string]any{"id": int64(group), "type": "supergroup", "title": "G"}
	say := `{"update_id":884100901,"message":{"message_id":1,"date":1767225300,"chat":{"id":-100888,"type":"supergroup","title":"G"},"from":{"id":505,"is_bot":false,"first_name":"U"},"text":"hello"}}`
	if code := e.post(t, []byte(say)); code != http.StatusOK {
		t.Fatalf("t2's user's message: status %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t2" {
		t.Fatalf("t2's user's message delivered to %q", d.Tenant)
	}
	r := e.act(t, "t2", promptAction(strconv.Itoa(group), contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("t2's prompt: %+v", r)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	user := map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"}
	press, err := e.fake.PressButton(884100902, chat, msgID, "hp1:f00dba.1234abcd:once", user)
	if err != nil {
		t.Fatal(err)
	}
	if code := e.post(t, press); code != http.StatusOK {
		t.Fatalf("press: status %d", code)
	}
	d := e.sink.Next(t)
	if d.Tenant != "t2" || d.Event == nil || d.Event.PromptResponse == nil || d.Event.PromptResponse.OptionID != "once" {
		t.Fatalf("press delivered to %q: %+v, want t2's prompt_response", d.Tenant, d.Event)
	}
	// t3 claims the group since, and 501 is linked to it too: t2 may no
	// longer act there, and its prompt is not t3's to answer.
	bindings = append(bindings, platform.Binding{Kind: platform.BindUser, ID: "501", Tenant: "t3"},
		platform.Binding{Kind: platform.BindScope, ID: strconv.Itoa(group), Tenant: "t3"})
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	if press, err = e.fake.PressButton(884100903, chat, msgID, "hp1:f00dba.1234abcd:once", user); err != nil {
		t.Fatal(err)
	}
	if code := e.post(t, press); code != http.StatusOK {
		t.Fatalf("press in the claimed group: status %d", code)
	}
	if calls := e.calls(t, "answerCallbackQuery", 2); calls[1].Form["callback_query_id"] != "cq884100903" {
		t.Errorf("answerCallbackQuery %v, want the dropped press's", calls[1].Form)
	}
	e.sink.Empty(t)
}

// TestPressOfAnEarlierTenantsPrompt: t1 prompted user 501 in the DM bound
// to it, and is deleted and created again under its id: a press of the earlier t1's
// prompt (its message dated a second before the new t1's creation) is
// dropped and its spinner stopped, not delivered to the new t1 as its
// prompt's answer; so is one dated after the creation (the record of its
// poster names the earlier t1's creation). A press of a message Telegram
// no longer shows the bot (no date), whose day-long mark is gone, is the
// new t1's once t1 is older than datelessPressWindow; before, that press is dropped too: it was
// delivered, undated, to the new t1. A press of the new t1's own prompt is
// its answer, undated or dated before the creation (clocks apart): the
// prompt's poster is recorded with its creation. It was dropped.
func TestPressOfAnEarlierTenantsPrompt(t *testing.T) {
	var creation atomic.Int64 // Unix nanoseconds: the vault reads it in the ingest
	created := time.Now().Truncate(time.Second).Add(-time.Minute + 300*time.Millisecond)
	creation.Store(created.Add(-time.Hour).UnixNano()) // the earlier t1's
	since := func(tenant string) time.Time {
		if tenant == "t1" {
			return time.Unix(0, creation.Load())
		}
		return time.Time{}
	}
	m := &countingMetrics{}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{Since: since}), Metrics: m}, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	e.startWebhook(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindChat, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	r := e.act(t, "t1", promptAction("501", contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("t1's prompt: %+v", r)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	creation.Store(created.UnixNano()) // t1 deleted and made again
	unmarked := 0                      // the message_id pressed, when not msgID's
	press := func(update int64, posted time.Time) {
		t.Helper()
		body, err := e.fake.PressButton(update, map[string]any{"id": int64(501), "type": "private", "first_name": "Ada"}, msgID,
			"hp1:f00dba.1234abcd:once", map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"})
		if err != nil {
			t.Fatal(err)
		}
		var u map[string]any
		if err := json.Unmarshal(body, &u); err != nil {
			t.Fatal(err)
		}
		u["callback_query"].(map[string]any)["message"].(map[string]any)["date"] = posted.Unix()
		if unmarked != 0 {
			u["callback_query"].(map[string]any)["message"].(map[string]any)["message_id"] = unmarked
		}
		if body, err = json.Marshal(u); err != nil {
			t.Fatal(err)
		}
		if code := e.post(t, body); code != http.StatusOK {
			t.Fatalf("press: status %d", code)
		}
	}
	press(884100910, created.Add(-time.Second))
	platformtest.WaitUntil(t, "the earlier t1's press dropped", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.dropped[dropEarlierTenantPrompt] == 1
	})
	if calls := e.calls(t, "answerCallbackQuery", 1); calls[0].Form["callback_query_id"] != "cq884100910" {
		t.Errorf("answerCallbackQuery %v, want the dropped press's", calls[0].Form)
	}
	e.sink.Empty(t)
	press(884100911, created.Add(time.Second))
	platformtest.WaitUntil(t, "the press dated after the creation dropped", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.dropped[dropEarlierTenantPrompt] == 2
	})
	undated := time.Unix(0, 0) // an inaccessible message's date
	press(884100912, undated)
	platformtest.WaitUntil(t, "the undated press dropped", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.dropped[dropEarlierTenantPrompt] == 3
	})
	e.sink.Empty(t)
	creation.Store(time.Now().Add(-datelessPressWindow - time.Minute).UnixNano())
	unmarked = msgID + 1000 // a prompt of the earlier t1's whose day-long mark is gone, as it is for a t1 made that long ago
	press(884100913, undated)
	unmarked = 0
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil {
		t.Fatalf("the undated press of a t1 made long ago delivered to %q as %+v", d.Tenant, d.Event)
	}
	creation.Store(created.UnixNano())
	r = e.act(t, "t1", promptAction("501", contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("the new t1's prompt: %+v", r)
	}
	msgID, _ = strconv.Atoi(r.MessageID)
	for i, posted := range []time.Time{undated, created.Add(-time.Second)} {
		press(884100914+int64(i), posted)
		if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil {
			t.Fatalf("a press (dated %v) of the new t1's prompt delivered to %q as %+v", posted, d.Tenant, d.Event)
		}
	}
}

// TestPressOfAnotherTenantsPromptInAGroup: in a group no tenant binds or
// claims, users 501 (linked to t1) and 505 (linked to t2) both wrote, so
// t1 and t2 hold it by grant, and t1 prompts there. 505's press of t1's
// prompt is dropped (prompt_not_owned) and its spinner stopped: it went
// by 505's route, to t2, with t1's prompt_id and the choice. 501's press
// is t1's, also when Telegram no longer shows the message (no date) and
// t1 was created a minute ago: the record of t1 as the poster, kept under
// its creation, settles that it is no earlier tenant's (it was dropped as
// earlier_tenant_prompt). Once t1 is created again, its earlier
// creation's prompt is nobody's. t1's prompt carries a stray message_id,
// which kept it from being recorded: 501's presses were dropped.
func TestPressOfAnotherTenantsPromptInAGroup(t *testing.T) {
	var creation atomic.Int64 // Unix nanoseconds: the vault reads it in the ingest
	creation.Store(time.Now().Add(-time.Minute).UnixNano())
	since := func(tenant string) time.Time {
		if tenant == "t1" {
			return time.Unix(0, creation.Load())
		}
		return time.Time{}
	}
	m := &countingMetrics{}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{Since: since}), Metrics: m}, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	e.startWebhook(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}, {Kind: platform.BindUser, ID: "505", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	const group = -100888
	chat := map[string]any{"id": int64(group), "type": "supergroup", "title": "G"}
	for i, user := range []string{"501", "505"} {
		say := `{"update_id":88410092` + strconv.Itoa(i) + `,"message":{"message_id":` + strconv.Itoa(i+1) + `,"date":1767225300,"chat":{"id":-100888,"type":"supergroup","title":"G"},"from":{"id":` + user + `,"is_bot":false,"first_name":"U"},"text":"hello"}}`
		if code := e.post(t, []byte(say)); code != http.StatusOK {
			t.Fatalf("%s's message: status %d", user, code)
		}
		e.sink.Next(t)
	}
	a := promptAction(strconv.Itoa(group), contract.PromptOption{ID: "once", Label: "Approve once"})
	a.MessageID = "2" // stray: a prompt names no message
	r := e.act(t, "t1", a)
	if !r.Success {
		t.Fatalf("t1's prompt: %+v", r)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	press := func(update int64, user int64, dated bool) {
		t.Helper()
		body, err := e.fake.PressButton(update, chat, msgID, "hp1:f00dba.1234abcd:once", map[string]any{"id": user, "is_bot": false, "first_name": "U"})
		if err != nil {
			t.Fatal(err)
		}
		if !dated {
			var u map[string]any
			if err := json.Unmarshal(body, &u); err != nil {
				t.Fatal(err)
			}
			u["callback_query"].(map[string]any)["message"] = map[string]any{"chat": chat, "message_id": msgID, "date": 0}
			if body, err = json.Marshal(u); err != nil {
				t.Fatal(err)
			}
		}
		if code := e.post(t, body); code != http.StatusOK {
			t.Fatalf("press: status %d", code)
		}
	}
	dropped := func(want int) {
		t.Helper()
		platformtest.WaitUntil(t, "the press dropped as prompt_not_owned", func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.dropped[dropPromptNotOwned] == want
		})
	}
	press(884100930, 505, true)
	dropped(1)
	if calls := e.calls(t, "answerCallbackQuery", 1); calls[0].Form["callback_query_id"] != "cq884100930" {
		t.Errorf("answerCallbackQuery %v, want the dropped press's", calls[0].Form)
	}
	e.sink.Empty(t)
	press(884100931, 501, true)
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil {
		t.Fatalf("501's press delivered to %q as %+v, want t1's answer", d.Tenant, d.Event)
	}
	press(884100932, 501, false)
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil {
		t.Fatalf("501's undated press delivered to %q as %+v, want t1's answer", d.Tenant, d.Event)
	}
	creation.Store(time.Now().UnixNano())
	press(884100933, 501, false)
	dropped(2)
	e.sink.Empty(t)
}

// TestPressOfADayOldPromptInAGroup: user 501 (linked to t1) wrote in a
// group no tenant binds or claims, and t1 prompted there. 501's press a
// day and an hour later is t1's answer; one over 30 days later is dropped
// (prompt_not_owned) and answered. The first was dropped too: the poster
// was known only by t1's mark of the message, which lasts a day.
func TestPressOfADayOldPromptInAGroup(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	m := &countingMetrics{}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{Clock: clk}), Metrics: m, Clock: clk}, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	e.startWebhook(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	chat := map[string]any{"id": int64(-100889), "type": "supergroup", "title": "G"}
	say := `{"update_id":884200920,"message":{"message_id":1,"date":1767225300,"chat":{"id":-100889,"type":"supergroup","title":"G"},"from":{"id":501,"is_bot":false,"first_name":"U"},"text":"hello"}}`
	if code := e.post(t, []byte(say)); code != http.StatusOK {
		t.Fatalf("501's message: status %d", code)
	}
	e.sink.Next(t)
	r := e.act(t, "t1", promptAction("-100889", contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("t1's prompt: %+v", r)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	press := func(update int64) {
		t.Helper()
		body, err := e.fake.PressButton(update, chat, msgID, "hp1:f00dba.1234abcd:once", map[string]any{"id": 501, "is_bot": false, "first_name": "U"})
		if err != nil {
			t.Fatal(err)
		}
		if code := e.post(t, body); code != http.StatusOK {
			t.Fatalf("press: status %d", code)
		}
	}
	clk.Advance(25 * time.Hour)
	press(884200930)
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil {
		t.Fatalf("the press a day later delivered to %q as %+v, want t1's answer", d.Tenant, d.Event)
	}
	clk.Advance(30 * 24 * time.Hour)
	press(884200931)
	platformtest.WaitUntil(t, "the month-old press dropped as prompt_not_owned", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.dropped[dropPromptNotOwned] == 1
	})
	e.sink.Empty(t)
	if calls := e.calls(t, "answerCallbackQuery", 2); calls[1].Form["callback_query_id"] != "cq884200931" {
		t.Errorf("answerCallbackQuery %v, want the dropped press's", calls[1].Form)
	}
}

// TestPromptInABoundChatRecordedOnlyWhileItsPosterIsYoung: t1's prompt in
// the DM bound to it records its poster (one store write before the
// prompt is answered) only while t1 was made within datelessPressWindow,
// when an undated press there asks for it; one made before writes none
// (it wrote one at every prompt, read by no press). Either writes the
// record of the message posted (platform.Grants.Posted).
func TestPromptInABoundChatRecordedOnlyWhileItsPosterIsYoung(t *testing.T) {
	var creation atomic.Int64 // Unix nanoseconds
	creation.Store(time.Now().Add(-datelessPressWindow - time.Minute).UnixNano())
	mem := vault.NewMemory(vault.Config{Since: func(tenant string) time.Time {
		if tenant == "t1" {
			return time.Unix(0, creation.Load())
		}
		return time.Time{}
	}})
	e := newEnvDeps(t, platform.Deps{Vault: mem}, nil)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindChat, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		created time.Time
		entries int
	}{
		{"established", time.Now().Add(-datelessPressWindow - time.Minute), 1},
		{"young", time.Now().Add(-time.Minute), 3},
	} {
		creation.Store(c.created.UnixNano())
		if r := e.act(t, "t1", promptAction("501", contract.PromptOption{ID: "once", Label: "Approve once"})); !r.Success {
			t.Fatalf("the %s t1's prompt: %+v", c.name, r)
		}
		if n := mem.Stats().Size; n != c.entries {
			t.Fatalf("after the %s t1's prompt the vault holds %d entries, want %d", c.name, n, c.entries)
		}
	}
}

// TestPressAfterTheClaimWent: t1, made long ago, claims a group and
// prompts there; the claim goes, so the group is held by grant. User
// 501's press (linked to t1) is t1's answer; 505's (linked to t2) is
// dropped (prompt_not_owned). 501's was dropped too: a prompt in a chat
// held by claim recorded no poster.
func TestPressAfterTheClaimWent(t *testing.T) {
	m := &countingMetrics{}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{}), Metrics: m}, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	e.startWebhook(t)
	const group = -100890
	links := []platform.Binding{{Kind: platform.BindUser, ID: "501", Tenant: "t1"}, {Kind: platform.BindUser, ID: "505", Tenant: "t2"}}
	if err := e.p.Bind(append(links, platform.Binding{Kind: platform.BindScope, ID: strconv.Itoa(group), Tenant: "t1"})); err != nil {
		t.Fatal(err)
	}
	r := e.act(t, "t1", promptAction(strconv.Itoa(group), contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("t1's prompt in its claimed group: %+v", r)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	if err := e.p.Bind(links); err != nil { // the claim goes
		t.Fatal(err)
	}
	chat := map[string]any{"id": int64(group), "type": "supergroup", "title": "G"}
	press := func(update, user int64) {
		t.Helper()
		body, err := e.fake.PressButton(update, chat, msgID, "hp1:f00dba.1234abcd:once", map[string]any{"id": user, "is_bot": false, "first_name": "U"})
		if err != nil {
			t.Fatal(err)
		}
		if code := e.post(t, body); code != http.StatusOK {
			t.Fatalf("press: status %d", code)
		}
	}
	press(884400001, 505)
	platformtest.WaitUntil(t, "505's press dropped as prompt_not_owned", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.dropped[dropPromptNotOwned] == 1
	})
	e.sink.Empty(t)
	press(884400002, 501)
	if d := e.sink.Next(t); d.Tenant != "t1" || d.Event.PromptResponse == nil {
		t.Fatalf("501's press after the claim went delivered to %q as %+v, want t1's answer", d.Tenant, d.Event)
	}
}

// TestPressOfAPromptThatOutlivedItsTenant: t1's prompt in the DM bound to
// it is being sent (sendMessage held) when t1 is deleted and made again
// under its id; the prompt then goes out, dated after the new t1's
// creation. A press of it is dropped (earlier_tenant_prompt): its record
// names the earlier t1's creation. Before, a dated press was judged by
// its date alone and delivered to the new t1 as its prompt's answer.
func TestPressOfAPromptThatOutlivedItsTenant(t *testing.T) {
	h := holdFirst(t, "sendMessage")
	var creation atomic.Int64 // Unix nanoseconds: the vault reads it in the ingest
	created := time.Now().Truncate(time.Second).Add(-time.Minute)
	creation.Store(created.Add(-time.Hour).UnixNano()) // the earlier t1's
	since := func(tenant string) time.Time {
		if tenant == "t1" {
			return time.Unix(0, creation.Load())
		}
		return time.Time{}
	}
	m := &countingMetrics{}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{Since: since}), Metrics: m}, func(c *Config) {
		c.APIServerURL = h.URL
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	h.to(e.fake.URL)
	e.startWebhook(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindChat, ID: "501", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	sent := make(chan contract.Result, 1)
	go func() {
		sent <- e.act(t, "t1", promptAction("501", contract.PromptOption{ID: "once", Label: "Approve once"}))
	}()
	select {
	case <-h.held:
	case <-time.After(waitFor):
		t.Fatal("the earlier t1's prompt was not sent")
	}
	creation.Store(created.UnixNano()) // t1 deleted and made again
	h.release()
	r := <-sent
	if !r.Success {
		t.Fatalf("the earlier t1's prompt: %+v", r)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	body, err := e.fake.PressButton(884100990, map[string]any{"id": int64(501), "type": "private", "first_name": "Ada"}, msgID,
		"hp1:f00dba.1234abcd:once", map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"})
	if err != nil {
		t.Fatal(err)
	}
	var u map[string]any
	if err := json.Unmarshal(body, &u); err != nil {
		t.Fatal(err)
	}
	u["callback_query"].(map[string]any)["message"].(map[string]any)["date"] = created.Add(5 * time.Second).Unix()
	if body, err = json.Marshal(u); err != nil {
		t.Fatal(err)
	}
	if code := e.post(t, body); code != http.StatusOK {
		t.Fatalf("press: status %d", code)
	}
	platformtest.WaitUntil(t, "the press of the earlier t1's prompt dropped", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.dropped[dropEarlierTenantPrompt] == 1
	})
	e.sink.Empty(t)
}

// TestPressInAYoungTenantsClaimedGroupOfAnotherTenantsPrompt:
// TestPromptPressInASharedGroupReachesItsPoster's second half with t3
// made an hour ago (younger than datelessPressWindow): t2 prompted in a
// group it held by grant, and t3 claims the group since; a press of t2's
// prompt, dated after t3's creation, is dropped as prompt_not_owned, as it
// is for an older t3 (it was t3's, with t2's prompt_id), not as
// earlier_tenant_prompt: the prompt's record names another tenant than t3,
// which is no earlier t3.
func TestPressInAYoungTenantsClaimedGroupOfAnotherTenantsPrompt(t *testing.T) {
	made := time.Now().Add(-time.Hour)
	since := func(tenant string) time.Time {
		if tenant == "t3" {
			return made
		}
		return time.Time{}
	}
	m := &countingMetrics{}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{Since: since}), Metrics: m}, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	e.startWebhook(t)
	bindings := []platform.Binding{{Kind: platform.BindUser, ID: "505", Tenant: "t2"}}
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	const group = -100889
	chat := map[string]any{"id": int64(group), "type": "supergroup", "title": "G"}
	say := `{"update_id":884100941,"message":{"message_id":1,"date":1767225300,"chat":{"id":-100889,"type":"supergroup","title":"G"},"from":{"id":505,"is_bot":false,"first_name":"U"},"text":"hello"}}`
	if code := e.post(t, []byte(say)); code != http.StatusOK {
		t.Fatalf("t2's user's message: status %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t2" {
		t.Fatalf("t2's user's message delivered to %q", d.Tenant)
	}
	r := e.act(t, "t2", promptAction(strconv.Itoa(group), contract.PromptOption{ID: "once", Label: "Approve once"}))
	if !r.Success {
		t.Fatalf("t2's prompt: %+v", r)
	}
	bindings = append(bindings, platform.Binding{Kind: platform.BindUser, ID: "501", Tenant: "t3"},
		platform.Binding{Kind: platform.BindScope, ID: strconv.Itoa(group), Tenant: "t3"})
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	press, err := e.fake.PressButton(884100942, chat, msgID, "hp1:f00dba.1234abcd:once", map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"})
	if err != nil {
		t.Fatal(err)
	}
	if code := e.post(t, press); code != http.StatusOK {
		t.Fatalf("press in the claimed group: status %d", code)
	}
	platformtest.WaitUntil(t, "the press of t2's prompt dropped as prompt_not_owned", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.dropped[dropPromptNotOwned] == 1 && m.dropped[dropEarlierTenantPrompt] == 0
	})
	e.sink.Empty(t)
}

// TestPressAfterTheChatMoved: a group bound to t1, where t1 prompted, is
// bound to t2 since. A press of t1's prompt there is dropped
// (prompt_not_owned) and answered, as on Discord and Slack: it went by
// the chat's route of the moment, to t2, which got t1's prompt_id and the
// choice while t1 never did. t2's own prompt there is answered.
func TestPressAfterTheChatMoved(t *testing.T) {
	m := &countingMetrics{}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{}), Metrics: m}, func(c *Config) {
		c.WebhookURL = "https://connector.example" + WebhookPath
		c.WebhookSecret = testSecret
	})
	e.startWebhook(t)
	const group = -100890
	bind := func(tenant string) {
		t.Helper()
		if err := e.p.Bind([]platform.Binding{{Kind: platform.BindChat, ID: strconv.Itoa(group), Tenant: tenant}}); err != nil {
			t.Fatal(err)
		}
	}
	prompt := func(tenant, id string) int {
		t.Helper()
		a := promptAction(strconv.Itoa(group), contract.PromptOption{ID: "once", Label: "Approve once"})
		a.PromptID = id
		r := e.act(t, tenant, a)
		if !r.Success {
			t.Fatalf("%s's prompt: %+v", tenant, r)
		}
		msgID, _ := strconv.Atoi(r.MessageID)
		return msgID
	}
	chat := map[string]any{"id": int64(group), "type": "supergroup", "title": "G"}
	press := func(update int64, msgID int, id string) {
		t.Helper()
		body, err := e.fake.PressButton(update, chat, msgID, "hp1:"+id+":once", map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"})
		if err != nil {
			t.Fatal(err)
		}
		if code := e.post(t, body); code != http.StatusOK {
			t.Fatalf("press: status %d", code)
		}
	}
	bind("t1")
	earlier := prompt("t1", "f00dba.00000001")
	bind("t2")
	press(884100951, earlier, "f00dba.00000001")
	platformtest.WaitUntil(t, "the press of t1's prompt dropped as prompt_not_owned", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.dropped[dropPromptNotOwned] == 1
	})
	if calls := e.calls(t, "answerCallbackQuery", 1); calls[0].Form["callback_query_id"] != "cq884100951" {
		t.Errorf("answerCallbackQuery %v, want the dropped press's", calls[0].Form)
	}
	e.sink.Empty(t)
	own := prompt("t2", "f00dba.00000002")
	press(884100952, own, "f00dba.00000002")
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "f00dba.00000002" {
		t.Fatalf("t2's press delivered to %q as %+v, want t2's answer", d.Tenant, d.Event)
	}
}
