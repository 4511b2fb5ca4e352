package integration

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/media"
	"connector/platform"
	"connector/platform/telegram"
	"connector/platform/telegram/telegramtest"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/vault"
)

// TestUpdateRoutedToTheEarlierTenant: a Telegram update with a document,
// routed to t1 (stored through the registry), is still being re-hosted
// when t1 is deleted and created again under its id, the vault (as the
// registry's apply does) first, then the relay. The update, routed under
// the earlier t1's creation, never reaches the new t1's gateway; the new
// t1's next update in the chat does.
func TestUpdateRoutedToTheEarlierTenant(t *testing.T) {
	earlier, again := time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	var created atomic.Pointer[time.Time]
	created.Store(&earlier)
	tenants := func(c time.Time, secret string) []relay.Tenant {
		return []relay.Tenant{{ID: "t1", Created: c, Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secret}}}}}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	fake := telegramtest.New(t, telegramtest.Token)
	started, release := make(chan struct{}), make(chan struct{})
	fake.AddFile("DOC1", "documents/file_1.pdf", 5, func() io.Reader {
		close(started)
		select {
		case <-release:
		case <-time.After(relaytest.Timeout):
		}
		return strings.NewReader("%PDF-")
	})
	p, err := telegram.New(telegram.Config{BotToken: telegramtest.Token, APIServerURL: fake.URL, Chats: telegramtest.Chats(), PollTimeout: 2 * time.Second,
		ChatPerSecond: -1, GroupPerMinute: -1},
		platform.Deps{Log: slog.New(slog.DiscardHandler), Media: store, Key: relay.KeyFunc(tenants(earlier, "s1")),
			Vault: vault.NewMemory(vault.Config{Since: func(string) time.Time { return *created.Load() }})})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants(earlier, "s1"), p)
	fake.Enqueue([]byte(`{"update_id":900001,"message":{"message_id":77,"date":1700000000,
		"chat":{"id":123456789,"type":"private","first_name":"Ada"},"from":{"id":123456789,"is_bot":false,"first_name":"Ada"},
		"caption":"the earlier t1's","document":{"file_id":"DOC1","file_unique_id":"U1","file_name":"a.pdf",
		"mime_type":"application/pdf","file_size":5}}}`))
	select {
	case <-started:
	case <-time.After(relaytest.Timeout):
		t.Fatalf("after %v the update's document was not downloaded", relaytest.Timeout)
	}
	created.Store(&again)
	if err := h.Server.SetTenants(tenants(again, "s2")); err != nil {
		t.Fatal(err)
	}
	close(release)
	gw := h.Dial(t, "gw1", "s2")
	gw.Hello(t, "telegram", "")
	fake.Enqueue([]byte(`{"update_id":900002,"message":{"message_id":78,"date":1700000001,
		"chat":{"id":123456789,"type":"private","first_name":"Ada"},"from":{"id":123456789,"is_bot":false,"first_name":"Ada"},
		"text":"the new t1's"}}`))
	if ev, _ := gw.NextInbound(t); ev.Text != "the new t1's" {
		t.Fatalf("t1 made again: its gateway got %q, want the new t1's (the update routed to the earlier t1)", ev.Text)
	}
}
