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
	p, err := New(Config{Token: testToken, APIServerURL: fake.URL, Chats: testChats, PollTimeout: 2 * time.Second,
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
