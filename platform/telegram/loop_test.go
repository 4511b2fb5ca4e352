package telegram

import (
	"context"
	"log/slog"
	"net/http"
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

// TestFullLoop runs the whole path in both ingest modes: a Telegram update
// reaches the fake Bot API (poll) or the connector's webhook, travels
// through the relay to a gateway socket, the gateway replies, and the fake
// receives the right sendMessage. Another tenant's chat stays invisible and
// undeliverable to this gateway.
func TestFullLoop(t *testing.T) {
	for _, mode := range []string{"webhook", "polling"} {
		t.Run(mode, func(t *testing.T) { fullLoop(t, mode == "webhook") })
	}
}

func fullLoop(t *testing.T, webhook bool) {
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	fake := telegramtest.New(t, testToken)
	cfg := Config{
		BotToken: testToken, APIServerURL: fake.URL, Chats: testChats, PollTimeout: 2 * time.Second,
		ChatPerSecond: -1, GroupPerMinute: -1,
	}
	if webhook {
		cfg.WebhookURL, cfg.WebhookSecret = "https://connector.example"+WebhookPath, testSecret
	}
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	p, err := New(cfg, platform.Deps{
		Log:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Vault: vault.NewMemory(vault.Config{}),
		Key:   relay.KeyFunc(tenants),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	e := &env{p: p, fake: fake, logs: logs, hook: h.URL + WebhookPath}
	e.waitStatus(t, func(st platform.Status) bool { return st.Ready })

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
		if code := e.post(t, raw); code != http.StatusOK {
			t.Fatalf("webhook status %d", code)
		}
	}
	// t2's chat first: it must never reach gw1. (Telegram's update_ids grow.)
	inject(withUpdateID(t, fixture(t, "telegram_shared_channel_post").Raw, 884100300))
	inject(withUpdateID(t, fixture(t, "telegram_shared_forum_topic_reply_to_member").Raw, 884100301))

	f := gw.Next(t, contract.TypeInbound)
	for _, secret := range []string{testToken, testSecret} {
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
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	calls, err := fake.WaitCalls(ctx, "sendMessage", 1)
	if err != nil {
		t.Fatal(err)
	}
	form := calls[0].Form
	if form["chat_id"] != "-1001112223334" || form["message_thread_id"] != "42" ||
		form["reply_parameters"] != `{"message_id":3004,"allow_sending_without_reply":true}` ||
		visible(t, calls[0]) != "Roadmap: on track (v2.1)" {
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
