package telegram

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.yaml.in/yaml/v3"

	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/telegram/telegramtest"
	"connector/session"
)

// routedToOwner fails t on a delivery p's routing table does not send to
// its tenant, or whose source does not match it.
func routedToOwner(t *testing.T, p *Platform) func(platform.Delivery) error {
	return func(d platform.Delivery) error {
		owner, err := p.ChatTenant(context.Background(), d.ChatID)
		if err != nil || owner != d.Tenant || d.Platform != "telegram" {
			t.Fatalf("delivery for chat %q to tenant %q; the chat belongs to %q (%v)", d.ChatID, d.Tenant, owner, err)
		}
		if d.Kind == platform.KindInbound {
			src := &d.Event.Source
			if src.ChatID != d.ChatID || src.Platform != "telegram" || d.SessionKey != session.Key(src, session.DefaultOptions) {
				t.Fatalf("inbound %+v does not match its delivery %+v", src, d)
			}
		}
		return nil
	}
}

// FuzzWebhook posts arbitrary bodies (seeded with every fixture update and
// the parity probes) to the webhook handler, with tenant t1 using every
// group trigger knob: it must answer 200, 400 or 413, never panic, and only
// ever deliver to the tenant that owns the chat.
func FuzzWebhook(f *testing.F) {
	for _, c := range telegramtest.Fixtures(f) {
		f.Add([]byte(c.Raw))
	}
	for i, probe := range []string{"both@forum:12", "textmention@group", "botreply@group", "photo(hermes)@group", "command@forum"} {
		f.Add(parityRaw(f, probe, i+10))
	}
	f.Add([]byte(`{"update_id":4,"message":{"message_id":1,"date":1,"text":"😀@x","entities":[{"type":"mention","offset":1,"length":99},{"type":"bot_command","offset":-3,"length":2}],"chat":{"id":-4001234567,"type":"group"}}}`))
	var t1 TenantConfig
	if err := yaml.Unmarshal([]byte(`{require_mention: true, observe_unmentioned_group_messages: true, group_allowed_chats: "-4001234567, -1001112223334",
		mention_patterns: [hermes], allowed_topics: "1, 12", ignored_threads: 13, bots_require_mention: true, guest_mode: true,
		allowed_chats: [-4001234567, -1001112223334, -1001234567890], free_response_topics: "-1001112223334:12"}`), &t1); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(callbackRaw))
	f.Add([]byte(`{"update_id":1,"message":{"message_id":1,"date":1,"text":"/stop","entities":[{"type":"bot_command","offset":0,"length":5}],"chat":{"id":123456789,"type":"private"}}}`))
	f.Add([]byte(`{"update_id":2,"callback_query":{"id":"x","from":{"id":1},"message":{"message_id":3,"date":0,"chat":{"id":-4001234567,"type":"group"}},"data":"hp1::"}}`))
	f.Add([]byte(`{"update_id":3}`))
	f.Add([]byte(`{"update_id":5,"message":{"message_id":9,"date":1,"message_thread_id":42,"is_topic_message":true,"from":{"id":7,"is_bot":false,"first_name":"G"},"chat":{"id":-1001112223334,"type":"supergroup","is_forum":true},"forum_topic_edited":{"name":"renamed"}}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := New(Config{BotToken: testToken, Chats: testChats, WebhookURL: "https://x.example/h", WebhookSecret: testSecret,
			MaxWebhookBytes: 64 << 10, Tenants: map[string]TenantConfig{"t1": t1}}, platform.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		m := *p.mapping.Load()
		m.botUsername = parityBotUsername
		p.mapping.Store(&m)
		checked := platformtest.NewSink(0)
		checked.Check = routedToOwner(t, p)
		var sink platform.Sink = checked
		p.sink.Store(&sink)
		req := httptest.NewRequest(http.MethodPost, WebhookPath, bytes.NewReader(body))
		req.Header.Set(secretHeader, testSecret)
		rec := httptest.NewRecorder()
		p.serveWebhook(rec, req)
		switch rec.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}

// FuzzNormalizeFixture feeds arbitrary fixture raw/context pairs (what
// `connector conformance events` reads from a file) to NormalizeFixture: it
// must return a source or an error, never panic.
func FuzzNormalizeFixture(f *testing.F) {
	for _, c := range telegramtest.Fixtures(f) {
		f.Add([]byte(c.Raw), []byte(c.Context))
	}
	f.Add([]byte(callbackRaw), []byte(`{"adapter_config":{"group_topics":[{"chat_id":"x"}]}}`))
	f.Add([]byte(`{}`), []byte(`[]`))
	f.Fuzz(func(t *testing.T, raw, context []byte) {
		o, err := NormalizeFixture(raw, context)
		src := o.Source
		if err == nil && (src.Platform != "telegram" || src.ChatID == "") {
			t.Fatalf("source %+v without error", src)
		}
	})
}
