package telegram

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/platform/telegram/telegramtest"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/vault"
)

// Chats of testChats used by the op tests.
const (
	chatAda      = "123456789"      // t1, private
	chatDevForum = "-1001112223334" // t1, forum supergroup
	chatT2       = "-1001234567890" // t2
)

var devForum = map[string]any{"id": int64(-1001112223334), "title": "Dev Forum", "type": "supergroup", "is_forum": true}

// actsLoop is a polling platform behind the real relay with t1's gateway
// (gw) and t2's (gw2) hello'd for telegram.
type actsLoop struct {
	fake *telegramtest.Server
	gw   *relaytest.Gateway
	gw2  *relaytest.Gateway
}

func startActsLoop(t *testing.T) *actsLoop {
	t.Helper()
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	fake := telegramtest.New(t, testToken)
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	p, err := New(Config{BotToken: testToken, APIServerURL: fake.URL, Chats: testChats, PollTimeout: 2 * time.Second,
		GlobalPerSecond: -1, ChatPerSecond: -1, GroupPerMinute: -1},
		platform.Deps{Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.transport.CloseIdleConnections)
	h := relaytest.Start(t, tenants, p)
	e := &env{p: p, fake: fake, logs: logs}
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })
	l := &actsLoop{fake: fake, gw: h.Dial(t, "gw1", "s1"), gw2: h.Dial(t, "gw2", "s2")}
	l.gw.Hello(t, "telegram", "")
	l.gw2.Hello(t, "telegram", "")
	return l
}

func (l *actsLoop) inbound(t *testing.T, gw *relaytest.Gateway) contract.Event {
	t.Helper()
	ev, buf := gw.NextInbound(t)
	if buf != "" {
		gw.Ack(t, buf)
	}
	return ev
}

func promptAction(chat string, options ...contract.PromptOption) contract.Action {
	return contract.Action{Op: contract.OpPrompt, ChatID: contract.ID(chat), Content: "Run **make deploy**?",
		PromptKind: "approval", PromptID: "f00dba.1234abcd", Options: options}
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
	if r := e.act(t, "t1", promptAction("not-a-chat", contract.PromptOption{ID: "a", Label: "A"})); r.Code != contract.CodeEgressDeclined {
		t.Errorf("prompt into a non-chat = %+v", r)
	}
	if n := len(e.fake.Calls("sendMessage")); n != 3 {
		t.Errorf("refused prompts sent messages: %d calls", n)
	}
}

// TestPromptRoundTrip: the gateway's prompt becomes an inline keyboard on
// the fake Telegram; Grace's press arrives as a callback_query update, is
// answered (answerCallbackQuery) and reaches t1's gateway as a
// prompt_response inbound whose source is Grace, in the topic. A press on
// another integration's button is answered but never delivered.
func TestPromptRoundTrip(t *testing.T) {
	l := startActsLoop(t)
	res := l.gw.Outbound(t, "telegram", map[string]any{"op": "prompt", "chat_id": chatDevForum, "content": "Run `make deploy`?",
		"prompt_kind": "approval", "prompt_id": "f00dba.1234abcd", "reply_to": nil, "metadata": map[string]any{"thread_id": "42"},
		"options": []any{map[string]any{"id": "once", "label": "Approve once"}, map[string]any{"id": "deny", "label": "Deny"}}})
	if !res.Success || res.MessageID == "" {
		t.Fatalf("prompt = %+v", res)
	}
	msgID, _ := strconv.Atoi(res.MessageID)

	// Another integration's button first: dropped, but its spinner stopped.
	foreign, _ := json.Marshal(map[string]any{"update_id": 884100500, "callback_query": map[string]any{
		"id": "cq-foreign", "chat_instance": "-1", "data": "poll:vote:2",
		"from":    map[string]any{"id": 42424242, "is_bot": false, "first_name": "Linus"},
		"message": map[string]any{"message_id": 77, "date": 1767268800, "chat": devForum, "text": "Poll"}}})
	l.fake.Enqueue(foreign)

	grace := map[string]any{"id": int64(31337), "is_bot": false, "first_name": "Grace", "last_name": "Hopper", "username": "grace_h"}
	press, err := l.fake.PressButton(884100501, devForum, msgID, "hp1:f00dba.1234abcd:deny", grace)
	if err != nil {
		t.Fatal(err)
	}
	l.fake.Enqueue(press)
	ev := l.inbound(t, l.gw)
	pr := ev.PromptResponse
	if pr == nil || pr.PromptID != "f00dba.1234abcd" || pr.OptionID != "deny" || pr.Label != "Deny" || pr.PromptMessageID != res.MessageID {
		t.Fatalf("prompt_response = %+v (event %+v)", pr, ev)
	}
	if ev.Text != "/deny" || ev.MessageType != contract.MessageCommand || ev.MessageID != "callback:cq884100501" {
		t.Fatalf("event = %+v", ev)
	}
	if s := ev.Source; s.UserID.Value != "31337" || s.UserName.Value != "Grace Hopper" || s.ChatID != chatDevForum {
		t.Fatalf("source = %+v, want Grace in the Dev Forum", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	answered, err := l.fake.WaitCalls(ctx, "answerCallbackQuery", 2)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{answered[0].Form["callback_query_id"], answered[1].Form["callback_query_id"]}
	if !(ids[0] == "cq-foreign" && ids[1] == "cq884100501") {
		t.Errorf("answered %v", ids)
	}

	// t2 neither saw the presses nor may prompt in t1's chat.
	if r := l.gw2.Outbound(t, "telegram", map[string]any{"op": "prompt", "chat_id": chatDevForum, "content": "q", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "a", "label": "A"}}, "reply_to": nil, "metadata": map[string]any{}}); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 prompt = %+v", r)
	}
	l.fake.Enqueue(withUpdateID(t, fixture(t, "telegram_shared_channel_post").Raw, 884100502))
	if ev := l.inbound(t, l.gw2); ev.PromptResponse != nil {
		t.Fatalf("t2 got a press: %+v", ev)
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

// TestActsThroughRelay drives react and delete from gateway sockets.
func TestActsThroughRelay(t *testing.T) {
	l := startActsLoop(t)
	sent := l.gw.Outbound(t, "telegram", map[string]any{"op": "send", "chat_id": chatAda, "content": "hi", "reply_to": nil, "metadata": map[string]any{}})
	if !sent.Success {
		t.Fatalf("send = %+v", sent)
	}
	id, _ := strconv.Atoi(sent.MessageID)
	react := map[string]any{"op": "react", "chat_id": chatAda, "message_id": sent.MessageID, "emoji": "👀", "remove": false, "metadata": map[string]any{}}
	if r := l.gw2.Outbound(t, "telegram", react); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 react = %+v", r)
	}
	if r := l.gw.Outbound(t, "telegram", react); !r.Success || len(l.fake.Reactions(123456789, id)) != 1 {
		t.Fatalf("react = %+v", r)
	}
	del := map[string]any{"op": "delete", "chat_id": chatAda, "message_id": sent.MessageID, "metadata": map[string]any{}}
	if r := l.gw2.Outbound(t, "telegram", del); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 delete = %+v", r)
	}
	if r := l.gw.Outbound(t, "telegram", del); !r.Success || l.fake.HasMessage(123456789, id) {
		t.Fatalf("delete = %+v", r)
	}
	if r := l.gw.Outbound(t, "telegram", map[string]any{"op": "follow_up", "session_key": "agent:main:telegram:dm:123456789", "kind": "telegram.x", "content": "x", "metadata": map[string]any{}}); r.Code != contract.CodeUnsupportedOp {
		t.Fatalf("follow_up on telegram = %+v, want unsupported_op", r)
	}

	// Forum topics: created, renamed unguarded, a guarded rename fails safe.
	l.fake.AddForum(-1001112223334)
	create := map[string]any{"op": "thread_create", "chat_id": chatDevForum, "thread_name": "Handoff", "metadata": map[string]any{}}
	if r := l.gw2.Outbound(t, "telegram", create); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 thread_create = %+v", r)
	}
	created := l.gw.Outbound(t, "telegram", create)
	topic, _ := strconv.Atoi(created.ThreadID)
	if name, ok := l.fake.Topic(-1001112223334, topic); !created.Success || !ok || name != "Handoff" {
		t.Fatalf("thread_create = %+v, topic %q", created, name)
	}
	rename := func(guarded bool) contract.Result {
		a := map[string]any{"op": "thread_rename", "chat_id": chatDevForum, "message_id": created.ThreadID, "thread_name": "Deploy",
			"metadata": map[string]any{}}
		if guarded {
			a["only_if_connector_created"] = true
		}
		return l.gw.Outbound(t, "telegram", a)
	}
	if r := rename(true); r.Code != contract.CodeNameChanged {
		t.Fatalf("guarded rename = %+v, want name_changed", r)
	}
	if r := rename(false); !r.Success {
		t.Fatalf("rename = %+v", r)
	}
	if name, _ := l.fake.Topic(-1001112223334, topic); name != "Deploy" {
		t.Fatalf("topic renamed to %q", name)
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
	current := "Deploy v2.1"
	for name, guard := range map[string]func(*contract.Action){
		"only_if_current_name":      func(a *contract.Action) { a.OnlyIfCurrentName = &current },
		"only_if_connector_created": func(a *contract.Action) { a.OnlyIfConnectorCreated = true },
	} {
		a := rename
		a.ThreadName = "LLM title"
		guard(&a)
		if r := act("t1", a); r.Success || r.Code != contract.CodeNameChanged {
			t.Errorf("%s: %+v, want name_changed (fail safe)", name, r)
		}
	}
	if name, _ := e.fake.Topic(-1001112223334, id); name != "Deploy v2.1" {
		t.Fatalf("a guarded rename changed the topic: %q", name)
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

func draftAction(chat string, id int64, content string, final bool) map[string]any {
	return map[string]any{"op": "draft", "chat_id": chat, "draft_id": id, "content": content, "final": final,
		"metadata": map[string]any{}}
}

// TestDraftStreaming drives native draft streaming from a gateway socket:
// the descriptor advertises it, each frame replaces the preview through
// sendMessageDraft, a seal becomes one real message whose id a repeated
// seal answers again, and the refusals call nothing.
func TestDraftStreaming(t *testing.T) {
	l := startActsLoop(t)
	if d := l.gw.Hello(t, "telegram", ""); !d.SupportsDraftStreaming || !d.HasOp(contract.OpDraft) {
		t.Fatalf("descriptor does not advertise draft streaming: %+v", d)
	}
	for i, content := range []string{"Thinking about **deploy**", "Thinking about **deploy** now"} {
		if r := l.gw.Outbound(t, "telegram", draftAction(chatAda, 7, content, false)); !r.Success || r.MessageID != "" {
			t.Fatalf("draft frame %d = %+v", i, r)
		}
	}
	if text, ok := l.fake.Draft(123456789, 0, 7); !ok || text != "Thinking about deploy now" {
		t.Fatalf("the draft shows %q (%v)", text, ok)
	}
	calls := l.fake.Calls("sendMessageDraft")
	if len(calls) != 2 || calls[1].Form["draft_id"] != "7" || calls[1].Form["chat_id"] != chatAda ||
		calls[1].Form["parse_mode"] != "MarkdownV2" {
		t.Fatalf("sendMessageDraft calls %+v", calls)
	}
	// A preview longer than a message shows its first message's worth.
	long := strings.Repeat("word ", 1000)
	if r := l.gw.Outbound(t, "telegram", draftAction(chatAda, 7, long, false)); !r.Success {
		t.Fatalf("long draft = %+v", r)
	}
	if text, _ := l.fake.Draft(123456789, 0, 7); len(text) > maxMessageRunes || !strings.HasPrefix(long, text) {
		t.Fatalf("long draft shows %d characters", len(text))
	}

	sealed := l.gw.Outbound(t, "telegram", draftAction(chatAda, 7, "Deploy **done**.", true))
	id, _ := strconv.Atoi(sealed.MessageID)
	if !sealed.Success || !l.fake.HasMessage(123456789, id) {
		t.Fatalf("seal = %+v", sealed)
	}
	if again := l.gw.Outbound(t, "telegram", draftAction(chatAda, 7, "Deploy **done**.", true)); !again.Success || again.MessageID != sealed.MessageID {
		t.Fatalf("repeated seal = %+v, want message %s", again, sealed.MessageID)
	}
	if n := len(l.fake.Calls("sendMessage")); n != 1 {
		t.Fatalf("%d sendMessage calls for one sealed stream", n)
	}

	before := len(l.fake.Calls("sendMessageDraft"))
	for name, c := range map[string]struct {
		gw     *relaytest.Gateway
		action map[string]any
		code   string
	}{
		"group chat":         {l.gw, draftAction(chatDevForum, 8, "x", false), contract.CodeBadRequest},
		"zero draft_id":      {l.gw, draftAction(chatAda, 0, "x", false), contract.CodeBadRequest},
		"blank content":      {l.gw, draftAction(chatAda, 9, " ", false), contract.CodeBadRequest},
		"another tenant's":   {l.gw, draftAction(chatT2, 9, "x", false), contract.CodeEgressDeclined},
		"from t2's gateway":  {l.gw2, draftAction(chatAda, 9, "x", false), contract.CodeEgressDeclined},
		"seal another's too": {l.gw2, draftAction(chatAda, 7, "x", true), contract.CodeEgressDeclined},
	} {
		if r := c.gw.Outbound(t, "telegram", c.action); r.Success || r.Code != c.code {
			t.Errorf("%s: %+v, want %s", name, r, c.code)
		}
	}
	if n := len(l.fake.Calls("sendMessageDraft")); n != before {
		t.Errorf("%d sendMessageDraft calls for refused drafts", n-before)
	}
	// Entities Telegram refuses: the preview goes again as plain text.
	l.fake.Fail("sendMessageDraft", telegramtest.Failure{Code: 400, Description: "Bad Request: can't parse entities: unsupported start tag"})
	if r := l.gw.Outbound(t, "telegram", draftAction(chatAda, 11, "plain *fallback*", false)); !r.Success {
		t.Fatalf("draft after refused entities = %+v", r)
	}
	if text, _ := l.fake.Draft(123456789, 0, 11); text != "plain *fallback*" {
		t.Fatalf("fallback draft shows %q", text)
	}
	// A private-chat topic (metadata.thread_id) gets its own draft.
	inTopic := draftAction(chatAda, 12, "in the topic", false)
	inTopic["metadata"] = map[string]any{"thread_id": "5"}
	if r := l.gw.Outbound(t, "telegram", inTopic); !r.Success {
		t.Fatalf("draft in a topic = %+v", r)
	}
	if text, ok := l.fake.Draft(123456789, 5, 12); !ok || text != "in the topic" {
		t.Fatalf("topic draft %q %v", text, ok)
	}
	l.fake.Fail("sendMessageDraft", telegramtest.Failure{Code: 403, Description: "Forbidden: bot was blocked by the user"})
	if r := l.gw.Outbound(t, "telegram", draftAction(chatAda, 10, "x", false)); r.Success || r.Code != contract.CodePlatformError {
		t.Errorf("blocked draft = %+v, want platform_error", r)
	}
}

// TestProfileRoundTrip: a send naming metadata.profile makes it the chat's
// profile; the chat's next inbound carries it as source.profile; another
// tenant's declined send stamps nothing.
func TestProfileRoundTrip(t *testing.T) {
	l := startActsLoop(t)
	if r := l.gw2.Outbound(t, "telegram", map[string]any{"op": "send", "chat_id": chatAda, "content": "x", "reply_to": nil,
		"metadata": map[string]any{"profile": "intruder"}}); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 send = %+v", r)
	}
	l.fake.Enqueue([]byte(`{"update_id":884100700,"message":{"message_id":70,"date":1767268800,
		"chat":{"id":123456789,"type":"private","first_name":"Ada"},"from":{"id":123456789,"is_bot":false,"first_name":"Ada"},"text":"before"}}`))
	if ev := l.inbound(t, l.gw); ev.Source.Profile != "" {
		t.Fatalf("profile %q before any send named one", ev.Source.Profile)
	}
	if r := l.gw.Outbound(t, "telegram", map[string]any{"op": "send", "chat_id": chatAda, "content": "hi", "reply_to": nil,
		"metadata": map[string]any{"profile": "work"}}); !r.Success {
		t.Fatalf("send = %+v", r)
	}
	l.fake.Enqueue([]byte(`{"update_id":884100701,"message":{"message_id":71,"date":1767268801,
		"chat":{"id":123456789,"type":"private","first_name":"Ada"},"from":{"id":123456789,"is_bot":false,"first_name":"Ada"},"text":"after"}}`))
	if ev := l.inbound(t, l.gw); ev.Text != "after" || ev.Source.Profile != "work" {
		t.Fatalf("inbound %q with profile %q, want work", ev.Text, ev.Source.Profile)
	}
}
