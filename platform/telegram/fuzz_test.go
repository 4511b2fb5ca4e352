package telegram

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connector/platform"
	"connector/session"
)

// checkingSink verifies every delivery against the tenant routing table.
type checkingSink struct {
	t     *testing.T
	p     *Platform
	count int
}

func (s *checkingSink) Deliver(_ context.Context, d platform.Delivery) error {
	s.count++
	chat, owner := s.p.chatOwner(d.ChatID)
	if owner == "" || owner != d.Tenant || d.Platform != "telegram" {
		s.t.Fatalf("delivery for chat %q (%d) to tenant %q; the chat belongs to %q", d.ChatID, chat, d.Tenant, owner)
	}
	if d.Kind == platform.KindInbound {
		src := &d.Event.Source
		if src.ChatID != d.ChatID || src.Platform != "telegram" || d.SessionKey != session.Key(src, session.DefaultOptions) {
			s.t.Fatalf("inbound %+v does not match its delivery %+v", src, d)
		}
	}
	return nil
}

// FuzzWebhook posts arbitrary bodies (seeded with every fixture update) to
// the webhook handler: it must answer 200, 400 or 413, never panic, and
// only ever deliver to the tenant that owns the chat.
func FuzzWebhook(f *testing.F) {
	for _, c := range telegramFixtures(f) {
		f.Add([]byte(c.Raw))
	}
	f.Add([]byte(callbackRaw))
	f.Add([]byte(`{"update_id":1,"message":{"message_id":1,"date":1,"text":"/stop","entities":[{"type":"bot_command","offset":0,"length":5}],"chat":{"id":123456789,"type":"private"}}}`))
	f.Add([]byte(`{"update_id":2,"callback_query":{"id":"x","from":{"id":1},"message":{"message_id":3,"date":0,"chat":{"id":-4001234567,"type":"group"}},"data":"hp1::"}}`))
	f.Add([]byte(`{"update_id":3}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := New(Config{Token: testToken, Chats: testChats, WebhookURL: "https://x.example/h", WebhookSecret: testSecret,
			MaxWebhookBytes: 64 << 10}, platform.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		var sink platform.Sink = &checkingSink{t: t, p: p}
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
	for _, c := range telegramFixtures(f) {
		f.Add([]byte(c.Raw), []byte(c.Context))
	}
	f.Add([]byte(callbackRaw), []byte(`{"adapter_config":{"group_topics":[{"chat_id":"x"}]}}`))
	f.Add([]byte(`{}`), []byte(`[]`))
	f.Fuzz(func(t *testing.T, raw, context []byte) {
		src, err := NormalizeFixture(raw, context)
		if err == nil && (src.Platform != "telegram" || src.ChatID == "") {
			t.Fatalf("source %+v without error", src)
		}
	})
}
