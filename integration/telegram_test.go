package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/media"
	"connector/media/mediatest"
	"connector/platform"
	"connector/platform/telegram"
	"connector/platform/telegram/telegramtest"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/store"
	"connector/vault"
)

// devForum is the Dev Forum chat of the fixture world, as an update carries it.
var devForum = map[string]any{"id": int64(-1001112223334), "title": "Dev Forum", "type": "supergroup", "is_forum": true}

// telegramLoop is a polling platform behind the real relay with t1's gateway
// (gw) and t2's (gw2) hello'd for telegram.
type telegramLoop struct {
	fake *telegramtest.Server
	gw   *relaytest.Gateway
	gw2  *relaytest.Gateway
}

func startTelegramLoop(t *testing.T) *telegramLoop {
	t.Helper()
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	fake := telegramtest.New(t, telegramtest.Token)
	logs := &telegramtest.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	p, err := telegram.New(telegram.Config{BotToken: telegramtest.Token, APIServerURL: fake.URL, Chats: telegramtest.Chats(), PollTimeout: 2 * time.Second,
		GlobalPerSecond: -1, ChatPerSecond: -1, GroupPerMinute: -1},
		platform.Deps{Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	telegramtest.WaitStatus(t, p, func(st platform.Status) bool { return st.Ready })
	l := &telegramLoop{fake: fake, gw: h.Dial(t, "gw1", "s1"), gw2: h.Dial(t, "gw2", "s2")}
	l.gw.Hello(t, "telegram", "")
	l.gw2.Hello(t, "telegram", "")
	return l
}

func (l *telegramLoop) inbound(t *testing.T, gw *relaytest.Gateway) contract.Event {
	t.Helper()
	ev, buf := gw.NextInbound(t)
	if buf != "" {
		gw.Ack(t, buf)
	}
	return ev
}

// TestTelegramPromptRoundTrip: the gateway's prompt becomes an inline keyboard on
// the fake Telegram; Grace's press arrives as a callback_query update, is
// answered (answerCallbackQuery) and reaches t1's gateway as a
// prompt_response inbound whose source is Grace, in the topic. A press on
// another integration's button is answered but never delivered.
func TestTelegramPromptRoundTrip(t *testing.T) {
	l := startTelegramLoop(t)
	res := l.gw.Outbound(t, "telegram", map[string]any{"op": "prompt", "chat_id": telegramtest.ChatDevForum, "content": "Run `make deploy`?",
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
	if s := ev.Source; s.UserID.Value != "31337" || s.UserName.Value != "Grace Hopper" || s.ChatID != telegramtest.ChatDevForum {
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
	if r := l.gw2.Outbound(t, "telegram", map[string]any{"op": "prompt", "chat_id": telegramtest.ChatDevForum, "content": "q", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "a", "label": "A"}}, "reply_to": nil, "metadata": map[string]any{}}); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 prompt = %+v", r)
	}
	l.fake.Enqueue(telegramtest.WithUpdateID(t, telegramtest.Fixture(t, "telegram_shared_channel_post").Raw, 884100502))
	if ev := l.inbound(t, l.gw2); ev.PromptResponse != nil {
		t.Fatalf("t2 got a press: %+v", ev)
	}
}

// TestTelegramActsThroughRelay drives react and delete from gateway sockets.
func TestTelegramActsThroughRelay(t *testing.T) {
	l := startTelegramLoop(t)
	sent := l.gw.Outbound(t, "telegram", map[string]any{"op": "send", "chat_id": telegramtest.ChatAda, "content": "hi", "reply_to": nil, "metadata": map[string]any{}})
	if !sent.Success {
		t.Fatalf("send = %+v", sent)
	}
	id, _ := strconv.Atoi(sent.MessageID)
	react := map[string]any{"op": "react", "chat_id": telegramtest.ChatAda, "message_id": sent.MessageID, "emoji": "👀", "remove": false, "metadata": map[string]any{}}
	if r := l.gw2.Outbound(t, "telegram", react); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 react = %+v", r)
	}
	if r := l.gw.Outbound(t, "telegram", react); !r.Success || len(l.fake.Reactions(123456789, id)) != 1 {
		t.Fatalf("react = %+v", r)
	}
	del := map[string]any{"op": "delete", "chat_id": telegramtest.ChatAda, "message_id": sent.MessageID, "metadata": map[string]any{}}
	if r := l.gw2.Outbound(t, "telegram", del); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 delete = %+v", r)
	}
	if r := l.gw.Outbound(t, "telegram", del); !r.Success || l.fake.HasMessage(123456789, id) {
		t.Fatalf("delete = %+v", r)
	}
	if r := l.gw.Outbound(t, "telegram", map[string]any{"op": "follow_up", "session_key": "agent:main:telegram:dm:123456789", "kind": "telegram.x", "content": "x", "metadata": map[string]any{}}); r.Code != contract.CodeUnsupportedOp {
		t.Fatalf("follow_up on telegram = %+v, want unsupported_op", r)
	}

	// Forum topics: created, renamed unguarded, a guarded rename of a topic
	// the connector did not create fails safe.
	l.fake.AddForum(-1001112223334)
	create := map[string]any{"op": "thread_create", "chat_id": telegramtest.ChatDevForum, "thread_name": "Handoff", "metadata": map[string]any{}}
	if r := l.gw2.Outbound(t, "telegram", create); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 thread_create = %+v", r)
	}
	created := l.gw.Outbound(t, "telegram", create)
	topic, _ := strconv.Atoi(created.ThreadID)
	if name, ok := l.fake.Topic(-1001112223334, topic); !created.Success || !ok || name != "Handoff" {
		t.Fatalf("thread_create = %+v, topic %q", created, name)
	}
	rename := func(id string, guarded bool) contract.Result {
		a := map[string]any{"op": "thread_rename", "chat_id": telegramtest.ChatDevForum, "message_id": id, "thread_name": "Deploy",
			"metadata": map[string]any{}}
		if guarded {
			a["only_if_connector_created"] = true
		}
		return l.gw.Outbound(t, "telegram", a)
	}
	human := strconv.Itoa(l.fake.CreateTopic(-1001112223334, "Questions"))
	if r := rename(human, true); r.Code != contract.CodeNameChanged {
		t.Fatalf("guarded rename of a member's topic = %+v, want name_changed", r)
	}
	if r := rename(human, false); !r.Success {
		t.Fatalf("rename = %+v", r)
	}
	if name, _ := l.fake.Topic(-1001112223334, topic); name != "Handoff" {
		t.Fatalf("the connector's topic renamed to %q", name)
	}
	if id, _ := strconv.Atoi(human); true {
		if name, _ := l.fake.Topic(-1001112223334, id); name != "Deploy" {
			t.Fatalf("the member's topic renamed to %q", name)
		}
	}
}

func telegramDraft(chat string, id int64, content string, final bool) map[string]any {
	return map[string]any{"op": "draft", "chat_id": chat, "draft_id": id, "content": content, "final": final,
		"metadata": map[string]any{}}
}

// TestTelegramDraftStreaming drives native draft streaming from a gateway socket:
// the descriptor advertises it, each frame replaces the preview through
// sendMessageDraft, a seal becomes one real message whose id a repeated
// seal answers again, and the refusals call nothing.
func TestTelegramDraftStreaming(t *testing.T) {
	l := startTelegramLoop(t)
	if d := l.gw.Hello(t, "telegram", ""); !d.SupportsDraftStreaming || !d.HasOp(contract.OpDraft) {
		t.Fatalf("descriptor does not advertise draft streaming: %+v", d)
	}
	for i, content := range []string{"Thinking about **deploy**", "Thinking about **deploy** now"} {
		if r := l.gw.Outbound(t, "telegram", telegramDraft(telegramtest.ChatAda, 7, content, false)); !r.Success || r.MessageID != "" {
			t.Fatalf("draft frame %d = %+v", i, r)
		}
	}
	if text, ok := l.fake.Draft(123456789, 0, 7); !ok || text != "Thinking about deploy now" {
		t.Fatalf("the draft shows %q (%v)", text, ok)
	}
	calls := l.fake.Calls("sendMessageDraft")
	if len(calls) != 2 || calls[1].Form["draft_id"] != "7" || calls[1].Form["chat_id"] != telegramtest.ChatAda ||
		calls[1].Form["parse_mode"] != "MarkdownV2" {
		t.Fatalf("sendMessageDraft calls %+v", calls)
	}
	// A preview longer than a message shows its first message's worth.
	long := strings.Repeat("word ", 1000)
	if r := l.gw.Outbound(t, "telegram", telegramDraft(telegramtest.ChatAda, 7, long, false)); !r.Success {
		t.Fatalf("long draft = %+v", r)
	}
	if text, _ := l.fake.Draft(123456789, 0, 7); len(text) > telegramtest.MaxTextRunes || !strings.HasPrefix(long, text) {
		t.Fatalf("long draft shows %d characters", len(text))
	}

	sealed := l.gw.Outbound(t, "telegram", telegramDraft(telegramtest.ChatAda, 7, "Deploy **done**.", true))
	id, _ := strconv.Atoi(sealed.MessageID)
	if !sealed.Success || !l.fake.HasMessage(123456789, id) {
		t.Fatalf("seal = %+v", sealed)
	}
	if again := l.gw.Outbound(t, "telegram", telegramDraft(telegramtest.ChatAda, 7, "Deploy **done**.", true)); !again.Success || again.MessageID != sealed.MessageID {
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
		"zero draft_id":      {l.gw, telegramDraft(telegramtest.ChatAda, 0, "x", false), contract.CodeBadRequest},
		"blank content":      {l.gw, telegramDraft(telegramtest.ChatAda, 9, " ", false), contract.CodeBadRequest},
		"another tenant's":   {l.gw, telegramDraft(telegramtest.ChatT2, 9, "x", false), contract.CodeEgressDeclined},
		"from t2's gateway":  {l.gw2, telegramDraft(telegramtest.ChatAda, 9, "x", false), contract.CodeEgressDeclined},
		"seal another's too": {l.gw2, telegramDraft(telegramtest.ChatAda, 7, "x", true), contract.CodeEgressDeclined},
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
	if r := l.gw.Outbound(t, "telegram", telegramDraft(telegramtest.ChatAda, 11, "plain *fallback*", false)); !r.Success {
		t.Fatalf("draft after refused entities = %+v", r)
	}
	if text, _ := l.fake.Draft(123456789, 0, 11); text != "plain *fallback*" {
		t.Fatalf("fallback draft shows %q", text)
	}
	// A private-chat topic (metadata.thread_id) gets its own draft.
	inTopic := telegramDraft(telegramtest.ChatAda, 12, "in the topic", false)
	inTopic["metadata"] = map[string]any{"thread_id": "5"}
	if r := l.gw.Outbound(t, "telegram", inTopic); !r.Success {
		t.Fatalf("draft in a topic = %+v", r)
	}
	if text, ok := l.fake.Draft(123456789, 5, 12); !ok || text != "in the topic" {
		t.Fatalf("topic draft %q %v", text, ok)
	}
	l.fake.Fail("sendMessageDraft", telegramtest.Failure{Code: 403, Description: "Forbidden: bot was blocked by the user"})
	if r := l.gw.Outbound(t, "telegram", telegramDraft(telegramtest.ChatAda, 10, "x", false)); r.Success || r.Code != contract.CodePlatformError {
		t.Errorf("blocked draft = %+v, want platform_error", r)
	}
}

// TestTelegramProfileRoundTrip: a send naming metadata.profile makes it the chat's
// profile; the chat's next inbound carries it as source.profile; another
// tenant's declined send stamps nothing.
func TestTelegramProfileRoundTrip(t *testing.T) {
	l := startTelegramLoop(t)
	if r := l.gw2.Outbound(t, "telegram", map[string]any{"op": "send", "chat_id": telegramtest.ChatAda, "content": "x", "reply_to": nil,
		"metadata": map[string]any{"profile": "intruder"}}); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 send = %+v", r)
	}
	l.fake.Enqueue([]byte(`{"update_id":884100700,"message":{"message_id":70,"date":1767268800,
		"chat":{"id":123456789,"type":"private","first_name":"Ada"},"from":{"id":123456789,"is_bot":false,"first_name":"Ada"},"text":"before"}}`))
	if ev := l.inbound(t, l.gw); ev.Source.Profile != "" {
		t.Fatalf("profile %q before any send named one", ev.Source.Profile)
	}
	if r := l.gw.Outbound(t, "telegram", map[string]any{"op": "send", "chat_id": telegramtest.ChatAda, "content": "hi", "reply_to": nil,
		"metadata": map[string]any{"profile": "work"}}); !r.Success {
		t.Fatalf("send = %+v", r)
	}
	l.fake.Enqueue([]byte(`{"update_id":884100701,"message":{"message_id":71,"date":1767268801,
		"chat":{"id":123456789,"type":"private","first_name":"Ada"},"from":{"id":123456789,"is_bot":false,"first_name":"Ada"},"text":"after"}}`))
	if ev := l.inbound(t, l.gw); ev.Text != "after" || ev.Source.Profile != "work" {
		t.Fatalf("inbound %q with profile %q, want work", ev.Text, ev.Source.Profile)
	}
}

// TestFullLoop runs the whole path in both ingest modes: a Telegram update
// reaches the fake Bot API (poll) or the connector's webhook, travels
// through the relay to a gateway socket, the gateway replies, and the fake
// receives the right sendMessage. Another tenant's chat stays invisible and
// undeliverable to this gateway.
func TestTelegramFullLoop(t *testing.T) {
	for _, mode := range []string{"webhook", "polling"} {
		t.Run(mode, func(t *testing.T) { telegramFullLoop(t, mode == "webhook") })
	}
}

func telegramFullLoop(t *testing.T, webhook bool) {
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	fake := telegramtest.New(t, telegramtest.Token)
	cfg := telegram.Config{
		BotToken: telegramtest.Token, APIServerURL: fake.URL, Chats: telegramtest.Chats(), PollTimeout: 2 * time.Second,
		ChatPerSecond: -1, GroupPerMinute: -1,
	}
	if webhook {
		cfg.WebhookURL, cfg.WebhookSecret = "https://connector.example"+telegram.WebhookPath, telegramtest.Secret
	}
	logs := &telegramtest.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	p, err := telegram.New(cfg, platform.Deps{
		Log:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Vault: vault.NewMemory(vault.Config{}),
		Key:   relay.KeyFunc(tenants),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	telegramtest.WaitStatus(t, p, func(st platform.Status) bool { return st.Ready })

	gw := h.Dial(t, "gw1", "s1")
	d := gw.Hello(t, "telegram", "")
	if d.Platform != "telegram" || strings.Join(d.SupportedOps, ",") != "delete,draft,edit,get_chat_info,prompt,react,send,send_media,thread_create,thread_rename,typing" {
		t.Fatalf("descriptor %+v", d)
	}

	inject := func(raw []byte) {
		t.Helper()
		if !webhook {
			fake.Enqueue(raw)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
		defer cancel()
		code, err := telegramtest.PostUpdate(ctx, http.DefaultClient, h.URL+telegram.WebhookPath, telegramtest.Secret, raw)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusOK {
			t.Fatalf("webhook status %d", code)
		}
	}
	// t2's chat first: it must never reach gw1. (Telegram's update_ids grow.)
	inject(telegramtest.WithUpdateID(t, telegramtest.Fixture(t, "telegram_shared_channel_post").Raw, 884100300))
	inject(telegramtest.WithUpdateID(t, telegramtest.Fixture(t, "telegram_shared_forum_topic_reply_to_member").Raw, 884100301))

	f := gw.Next(t, contract.TypeInbound)
	for _, secret := range []string{telegramtest.Token, telegramtest.Secret} {
		if strings.Contains(string(f.Raw), secret) {
			t.Fatal("a secret reached the gateway")
		}
	}
	ev := f.Event
	if f.BufferID != "" {
		gw.Ack(t, f.BufferID)
	}
	if ev.Source.ChatID != "-1001112223334" || ev.Source.ThreadID.Value != "42" || ev.Text != "agreed" ||
		ev.MessageID != "3004" || ev.ReplyToMessageID != "3003" {
		t.Fatalf("inbound %+v", ev)
	}

	res := gw.Outbound(t, "telegram", map[string]any{
		"op": "send", "chat_id": ev.Source.ChatID, "content": "**Roadmap**: on track (v2.1)",
		"reply_to": ev.MessageID, "metadata": map[string]any{"thread_id": ev.Source.ThreadID.Value},
	})
	if !res.Success || res.MessageID == "" {
		t.Fatalf("send result %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	calls, err := fake.WaitCalls(ctx, "sendMessage", 1)
	if err != nil {
		t.Fatal(err)
	}
	form := calls[0].Form
	if form["chat_id"] != "-1001112223334" || form["message_thread_id"] != "42" ||
		form["reply_parameters"] != `{"message_id":3004,"allow_sending_without_reply":true}` ||
		telegramtest.Visible(t, calls[0]) != "Roadmap: on track (v2.1)" {
		t.Errorf("sendMessage %v", form)
	}

	declined := gw.Outbound(t, "telegram", map[string]any{
		"op": "send", "chat_id": "-1009876543210", "content": "hi", "reply_to": nil, "metadata": map[string]any{},
	})
	if declined.Success || declined.Code != contract.CodeEgressDeclined {
		t.Errorf("send to t2's channel: %+v", declined)
	}
	if n := len(fake.Calls("sendMessage")); n != 1 {
		t.Errorf("%d sendMessage calls, want 1", n)
	}
}

// mediaEnv is a polling Telegram platform behind a relay serving the media
// routes, with a media store on a fake clock (expiry) and a gateway of t1
// and one of t2 connected.
type telegramMediaEnv struct {
	fake     *telegramtest.Server
	store    *media.Store
	clock    *clocktest.Fake
	h        *relaytest.Harness
	gw1, gw2 *relaytest.Gateway
	tok1     string
	tok2     string
}

func newTelegramMediaEnv(t *testing.T) *telegramMediaEnv {
	t.Helper()
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New(time.Now())
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://" + ln.Addr().String(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	fake := telegramtest.New(t, telegramtest.Token)
	p, err := telegram.New(telegram.Config{
		BotToken: telegramtest.Token, APIServerURL: fake.URL, Chats: telegramtest.Chats(), PollTimeout: 2 * time.Second,
		ChatPerSecond: -1, GroupPerMinute: -1,
	}, platform.Deps{
		Log: slog.New(slog.DiscardHandler), Vault: vault.NewMemory(vault.Config{}),
		Key: relay.KeyFunc(tenants), Media: store,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.StartWith(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t)},
		relaytest.Options{Listener: ln, Routes: func(srv *relay.Server) map[string]http.Handler {
			return media.Routes(store.Handler(media.HandlerConfig{Auth: srv}))
		}})
	e := &telegramMediaEnv{fake: fake, store: store, clock: clk, h: h}
	e.gw1, e.gw2 = h.Dial(t, "gw1", "s1"), h.Dial(t, "gw2", "s2")
	e.gw1.Hello(t, "telegram", "")
	e.gw2.Hello(t, "telegram", "")
	e.tok1 = relaytest.Token("gw1", "s1", time.Now())
	e.tok2 = relaytest.Token("gw2", "s2", time.Now())
	return e
}

// upload stores size bytes of seed's content for the gateway of token and
// returns its re-host URL.
func (e *telegramMediaEnv) upload(t *testing.T, token string, seed uint64, size int64, name string) string {
	t.Helper()
	status, id := mediatest.Upload(t, e.h.URL, token, mediatest.Content(seed, size), size, "application/octet-stream", name)
	if status != http.StatusOK {
		t.Fatalf("upload: HTTP %d", status)
	}
	return e.h.URL + "/relay/media/" + id
}

func telegramSendMedia(chat, kind, url, caption string) map[string]any {
	return map[string]any{"op": "send_media", "chat_id": chat, "media_kind": kind, "source_url": url,
		"content": caption, "reply_to": nil, "metadata": map[string]any{}}
}

// TestMediaInbound20MB: a 20 MiB document reaches the gateway as a re-host
// URL whose bytes (fetched with the gateway's bearer) have the sha256 of
// what the fake Bot API served; another tenant's gateway and a wrong bearer
// cannot fetch it; the connector's heap stays far below the file's size.
func TestTelegramMediaInbound20MB(t *testing.T) {
	e := newTelegramMediaEnv(t)
	const size = 20 << 20
	want, _ := mediatest.SHA256(mediatest.Content(7, size))
	e.fake.AddFile("DOC1", "documents/file_7.pdf", size, func() io.Reader { return mediatest.Content(7, size) })
	peak := mediatest.StartHeapPeak(5 * time.Millisecond)
	e.fake.Enqueue([]byte(fmt.Sprintf(`{"update_id":900001,"message":{"message_id":77,"date":1700000000,
		"chat":{"id":123456789,"type":"private","first_name":"Ada"},"from":{"id":123456789,"is_bot":false,"first_name":"Ada"},
		"caption":"the report","document":{"file_id":"DOC1","file_unique_id":"U1","file_name":"report.pdf",
		"mime_type":"application/pdf","file_size":%d}}}`, size)))
	ev, buf := e.gw1.NextInboundWithin(t, time.Minute)
	if buf != "" {
		e.gw1.Ack(t, buf)
	}
	if len(ev.MediaURLs) != 1 || len(ev.Media) != 1 || ev.Text != "the report" || ev.MessageType != contract.MessageDocument {
		t.Fatalf("inbound %+v", ev)
	}
	m := ev.Media[0]
	if m.URL != ev.MediaURLs[0] || !strings.HasPrefix(m.URL, e.h.URL+"/relay/media/") || m.Kind != "document" ||
		m.MIME != "application/pdf" || m.Size != size || m.Filename != "report.pdf" || m.Caption != "the report" {
		t.Fatalf("media %+v", m)
	}
	status, got, n := mediatest.Download(t, m.URL, e.tok1)
	heap := peak.Stop()
	t.Logf("20 MiB inbound (getFile, download, re-host, gateway GET): heap in use peaked %s above baseline", mediatest.MiB(heap))
	if status != 200 || got != want || n != size {
		t.Fatalf("re-host download: HTTP %d, %d bytes, sha256 %s, want %s", status, n, got, want)
	}
	if heap > 12<<20 {
		t.Errorf("heap grew %s during a 20 MiB transfer: the file was held in memory", mediatest.MiB(heap))
	}
	if status, _, _ := mediatest.Download(t, m.URL, e.tok2); status != http.StatusNotFound {
		t.Errorf("another tenant's gateway fetched the re-host: HTTP %d", status)
	}
	if status, _, _ := mediatest.Download(t, m.URL, relaytest.Token("gw1", "wrong", time.Now())); status != http.StatusUnauthorized {
		t.Errorf("wrong bearer: HTTP %d", status)
	}
	e.clock.Advance(media.DefaultTTL)
	if status, _, _ := mediatest.Download(t, m.URL, e.tok1); status != http.StatusNotFound {
		t.Errorf("expired re-host: HTTP %d", status)
	}
}

// TestMediaSendMedia10MB: a gateway uploads 10 MiB and sends it with each
// kind's method; the fake Bot API receives it byte-exact as a multipart
// file with the caption.
func TestTelegramMediaSendMedia10MB(t *testing.T) {
	e := newTelegramMediaEnv(t)
	const size = 10 << 20
	want, _ := mediatest.SHA256(mediatest.Content(9, size))
	peak := mediatest.StartHeapPeak(5 * time.Millisecond)
	url := e.upload(t, e.tok1, 9, size, "clip.bin")
	res := e.gw1.Outbound(t, "telegram", telegramSendMedia("123456789", "document", url, "**here** it is"))
	heap := peak.Stop()
	t.Logf("10 MiB send_media (gateway upload, sendDocument): heap in use peaked %s above baseline", mediatest.MiB(heap))
	if !res.Success || res.MessageID == "" {
		t.Fatalf("send_media result %+v", res)
	}
	calls := e.fake.Calls("sendDocument")
	if len(calls) != 1 {
		t.Fatalf("%d sendDocument calls", len(calls))
	}
	f := calls[0].Files["document"]
	if f.Size != size || f.SHA256 != want || f.Name != "clip.bin" || calls[0].Form["chat_id"] != "123456789" ||
		calls[0].Form["parse_mode"] != "MarkdownV2" || calls[0].Form["caption"] != "*here* it is" {
		t.Fatalf("sendDocument %+v", calls[0])
	}
	if heap > 8<<20 {
		t.Errorf("heap grew %s during a 10 MiB transfer: the file was held in memory", mediatest.MiB(heap))
	}

	small := e.upload(t, e.tok1, 3, 4096, "x.ogg")
	for kind, method := range map[string]string{"image": "sendPhoto", "voice": "sendVoice", "audio": "sendAudio", "video": "sendVideo"} {
		res := e.gw1.Outbound(t, "telegram", telegramSendMedia("123456789", kind, small, ""))
		calls := e.fake.Calls(method)
		if !res.Success || len(calls) != 1 || calls[0].Files[telegramMediaFields(method)].Size != 4096 {
			t.Errorf("%s: result %+v, calls %+v", kind, res, calls)
		}
	}
}

func telegramMediaFields(method string) string {
	return strings.ToLower(strings.TrimPrefix(method, "send"))
}

// TestMediaSendMediaFailures: each refused send_media answers a failure
// result and calls no Telegram method.
func TestTelegramMediaSendMediaFailures(t *testing.T) {
	e := newTelegramMediaEnv(t)
	own := e.upload(t, e.tok1, 1, 1000, "a.png")
	foreign := e.upload(t, e.tok2, 2, 1000, "b.png")
	expiring := e.upload(t, e.tok1, 3, 1000, "c.png")

	// 413 for an upload over 25 MiB (refused from Content-Length).
	if status, _ := mediatest.Upload(t, e.h.URL, e.tok1, mediatest.Content(4, media.DefaultMaxBytes+1), media.DefaultMaxBytes+1, "image/png", "big.png"); status != http.StatusRequestEntityTooLarge {
		t.Errorf("upload over 25 MiB: HTTP %d, want 413", status)
	}
	if status, _ := mediatest.Upload(t, e.h.URL, relaytest.Token("gw1", "wrong", time.Now()), strings.NewReader("x"), 1, "image/png", "x.png"); status != http.StatusUnauthorized {
		t.Errorf("upload with a wrong bearer: HTTP %d, want 401", status)
	}

	check := func(name string, action map[string]any, code string) {
		t.Helper()
		res := e.gw1.Outbound(t, "telegram", action)
		if res.Success || res.Code != code {
			t.Errorf("%s: result %+v, want code %s", name, res, code)
		}
	}
	check("unsupported kind", telegramSendMedia("123456789", "sticker", own, ""), contract.CodeBadRequest)
	check("another tenant's media id", telegramSendMedia("123456789", "image", foreign, ""), contract.CodeBadRequest)
	check("malformed media id", telegramSendMedia("123456789", "image", e.h.URL+"/relay/media/../../etc", ""), contract.CodeBadRequest)
	check("unknown media id", telegramSendMedia("123456789", "image", e.h.URL+"/relay/media/"+strings.Repeat("0", 32), ""), contract.CodeBadRequest)
	check("not http", telegramSendMedia("123456789", "image", "file:///etc/passwd", ""), contract.CodeBadRequest)
	check("another tenant's chat", telegramSendMedia("-1001234567890", "image", own, ""), contract.CodeEgressDeclined)
	e.clock.Advance(media.DefaultTTL)
	check("expired media id", telegramSendMedia("123456789", "image", expiring, ""), contract.CodeBadRequest)
	for _, m := range []string{"sendPhoto", "sendDocument"} {
		if n := len(e.fake.Calls(m)); n != 0 {
			t.Errorf("%d %s calls after refused send_media", n, m)
		}
	}
}

// TestTelegramStockGatewayRenamesTopics plays the stock gateway's
// thread_create and thread_rename frames (relaytest.StockThread*, with the
// guard it always sends) against the fake Bot API. Telegram cannot read a
// topic's name, so the connector remembers the names it gave: both guards
// pass for its own topics, a member's rename (a forum_topic_edited update)
// makes only_if_connector_created refuse and only_if_current_name follow
// the member's name, and a topic the connector never named fails safe.
func TestTelegramStockGatewayRenamesTopics(t *testing.T) {
	l := startTelegramLoop(t)
	const forum = int64(-1001112223334)
	l.fake.AddForum(forum)
	created := l.gw.Outbound(t, "telegram", relaytest.StockThreadCreate(telegramtest.ChatDevForum, "  handoff: deploy  ", nil))
	topic, _ := strconv.Atoi(created.ThreadID)
	if !created.Success || topic == 0 {
		t.Fatalf("thread_create = %+v", created)
	}
	name := func() string { n, _ := l.fake.Topic(forum, topic); return n }
	rename := func(gw *relaytest.Gateway, thread, to string, connectorCreated bool, current *string) contract.Result {
		return gw.Outbound(t, "telegram", relaytest.StockThreadRename(telegramtest.ChatDevForum, thread, to, connectorCreated, current, nil))
	}
	str := func(s string) *string { return &s }

	if r := rename(l.gw, created.ThreadID, "Fix  the\tbuild", true, nil); !r.Success || name() != "Fix the build" {
		t.Fatalf("only_if_connector_created on the connector's topic = %+v, topic %q", r, name())
	}
	if r := rename(l.gw, created.ThreadID, "Deploy v2", false, str("Fix the build")); !r.Success || name() != "Deploy v2" {
		t.Fatalf("only_if_current_name with the current name = %+v, topic %q", r, name())
	}
	if r := rename(l.gw, created.ThreadID, "Deploy v3", true, nil); !r.Success || name() != "Deploy v3" {
		t.Fatalf("only_if_connector_created after the connector's own renames = %+v, topic %q", r, name())
	}
	for what, r := range map[string]contract.Result{
		"a stale only_if_current_name": rename(l.gw, created.ThreadID, "x", false, str("Deploy v2")),
		"another tenant's gateway":     rename(l.gw2, created.ThreadID, "x", true, nil),
	} {
		if r.Success || name() != "Deploy v3" {
			t.Errorf("%s: %+v, topic %q", what, r, name())
		}
	}

	// A member renames the topic in a Telegram client. The update is
	// handled before the DM queued after it reaches the gateway.
	grace := map[string]any{"id": int64(31337), "is_bot": false, "first_name": "Grace"}
	edited, err := l.fake.RenameTopic(884100600, devForum, topic, "Grace's topic", grace)
	if err != nil {
		t.Fatal(err)
	}
	l.fake.Enqueue(edited)
	l.fake.Enqueue(telegramtest.WithUpdateID(t, telegramtest.Fixture(t, "telegram_shared_private_text").Raw, 884100601))
	l.inbound(t, l.gw)
	if r := rename(l.gw, created.ThreadID, "LLM title", true, nil); r.Code != contract.CodeNameChanged || name() != "Grace's topic" {
		t.Fatalf("only_if_connector_created after a member's rename = %+v, topic %q", r, name())
	}
	if r := rename(l.gw, created.ThreadID, "LLM title", false, str("Deploy v3")); r.Code != contract.CodeNameChanged {
		t.Fatalf("only_if_current_name with the connector's old name = %+v", r)
	}
	if r := rename(l.gw, created.ThreadID, "Agreed title", false, str("Grace's topic")); !r.Success || name() != "Agreed title" {
		t.Fatalf("only_if_current_name with the member's name = %+v, topic %q", r, name())
	}

	// A topic a member created: its name was never the connector's.
	other := strconv.Itoa(l.fake.CreateTopic(forum, "Questions"))
	for what, r := range map[string]contract.Result{
		"only_if_connector_created": rename(l.gw, other, "x", true, nil),
		"only_if_current_name":      rename(l.gw, other, "x", false, str("Questions")),
	} {
		if r.Code != contract.CodeNameChanged {
			t.Errorf("%s on a member's topic = %+v, want name_changed", what, r)
		}
	}
	if id, _ := strconv.Atoi(other); true {
		if n, _ := l.fake.Topic(forum, id); n != "Questions" {
			t.Fatalf("a guarded rename renamed the member's topic to %q", n)
		}
	}
}

// TestTelegramStockGatewayStreamsDraftsInGroups plays the stock gateway's
// native draft streaming in a forum topic of a group, as its stream
// consumer sends it: draft frames (final false) with the stream's metadata,
// then the reply as a plain send with the same metadata. Telegram streams
// drafts into private chats only, so the frames show in one message of
// their own, sent once and edited, and the reply replaces it: the topic
// ends with the reply alone. A sealed stream (final true) keeps the preview
// as its message and answers its id, again on a repeated seal.
func TestTelegramStockGatewayStreamsDraftsInGroups(t *testing.T) {
	l := startTelegramLoop(t)
	const forum = int64(-1001112223334)
	meta := map[string]any{"thread_id": "42", "reply_to_message_id": "3003"}
	before := len(l.fake.Messages(forum))
	for i, content := range []string{"Looking at the **build**", "Looking at the **build** logs"} {
		if r := l.gw.Outbound(t, "telegram", relaytest.StockDraft(telegramtest.ChatDevForum, 7, content, false, meta)); !r.Success || r.MessageID != "" {
			t.Fatalf("draft frame %d = %+v, want success without a message_id", i, r)
		}
	}
	sent, edited := l.fake.Calls("sendMessage"), l.fake.Calls("editMessageText")
	if len(sent) != 1 || len(edited) != 1 || sent[0].Form["message_thread_id"] != "42" {
		t.Fatalf("%d sendMessage, %d editMessageText calls for two frames: %+v", len(sent), len(edited), sent)
	}
	if msgs := l.fake.Messages(forum); len(msgs) != before+1 || !hasText(msgs, "Looking at the build logs") {
		t.Fatalf("the topic shows %v", msgs)
	}
	// Another turn's stream in the same topic goes on beside it.
	otherMeta := map[string]any{"thread_id": "42", "reply_to_message_id": "3004"}
	if r := l.gw.Outbound(t, "telegram", relaytest.StockDraft(telegramtest.ChatDevForum, 8, "Other turn", false, otherMeta)); !r.Success {
		t.Fatalf("other stream = %+v", r)
	}
	reply := l.gw.Outbound(t, "telegram", relaytest.StockSend(telegramtest.ChatDevForum, "The build is **fixed**.", "3003", meta))
	if !reply.Success {
		t.Fatalf("reply = %+v", reply)
	}
	// The reply's preview goes once the reply is answered.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.fake.WaitMessages(ctx, forum, func(msgs map[int]string) bool {
		return len(msgs) == before+2 && hasText(msgs, "The build is fixed.") && hasText(msgs, "Other turn") && !hasText(msgs, "Looking at the build logs")
	}); err != nil {
		t.Fatalf("after the reply, want the reply and the other turn's preview: %v", err)
	}
	// A frame of another tenant's gateway into t1's group is declined.
	if r := l.gw2.Outbound(t, "telegram", relaytest.StockDraft(telegramtest.ChatDevForum, 9, "x", false, nil)); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 draft = %+v", r)
	}

	// The other stream is sealed: its preview becomes the message.
	sealed := l.gw.Outbound(t, "telegram", relaytest.StockDraft(telegramtest.ChatDevForum, 8, "Other turn, done", true, otherMeta))
	id, _ := strconv.Atoi(sealed.MessageID)
	if text := l.fake.Messages(forum)[id]; !sealed.Success || text != "Other turn, done" {
		t.Fatalf("seal = %+v, message %q", sealed, text)
	}
	if again := l.gw.Outbound(t, "telegram", relaytest.StockDraft(telegramtest.ChatDevForum, 8, "Other turn, done", true, otherMeta)); !again.Success || again.MessageID != sealed.MessageID {
		t.Fatalf("repeated seal = %+v, want message %s", again, sealed.MessageID)
	}
	if r := l.gw.Outbound(t, "telegram", relaytest.StockDraft(telegramtest.ChatDevForum, 8, "straggler", false, otherMeta)); !r.Success {
		t.Fatalf("a frame after the seal = %+v", r)
	}
	if msgs := l.fake.Messages(forum); len(msgs) != before+2 || l.fake.Messages(forum)[id] != "Other turn, done" {
		t.Fatalf("after the seal the topic shows %v", msgs)
	}
}

// hasText reports whether one of msgs reads text.
func hasText(msgs map[int]string, text string) bool {
	for _, m := range msgs {
		if m == text {
			return true
		}
	}
	return false
}
