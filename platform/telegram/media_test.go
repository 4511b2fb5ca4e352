package telegram

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/media"
	"connector/media/mediatest"
	"connector/platform"
	"connector/platform/telegram/telegramtest"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/vault"
)

// mediaEnv is a polling Telegram platform behind a relay serving the media
// routes, with a media store on a fake clock (expiry) and a gateway of t1
// and one of t2 connected.
type mediaEnv struct {
	fake     *telegramtest.Server
	store    *media.Store
	clock    *clocktest.Fake
	h        *relaytest.Harness
	gw1, gw2 *relaytest.Gateway
	tok1     string
	tok2     string
}

func newMediaEnv(t *testing.T) *mediaEnv {
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
	fake := telegramtest.New(t, testToken)
	p, err := New(Config{
		BotToken: testToken, APIServerURL: fake.URL, Chats: testChats, PollTimeout: 2 * time.Second,
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
	e := &mediaEnv{fake: fake, store: store, clock: clk, h: h}
	e.gw1, e.gw2 = h.Dial(t, "gw1", "s1"), h.Dial(t, "gw2", "s2")
	e.gw1.Hello(t, "telegram", "")
	e.gw2.Hello(t, "telegram", "")
	e.tok1 = relaytest.Token("gw1", "s1", time.Now())
	e.tok2 = relaytest.Token("gw2", "s2", time.Now())
	return e
}

// upload stores size bytes of seed's content for the gateway of token and
// returns its re-host URL.
func (e *mediaEnv) upload(t *testing.T, token string, seed uint64, size int64, name string) string {
	t.Helper()
	status, id := mediatest.Upload(t, e.h.URL, token, mediatest.Content(seed, size), size, "application/octet-stream", name)
	if status != http.StatusOK {
		t.Fatalf("upload: HTTP %d", status)
	}
	return e.h.URL + "/relay/media/" + id
}

func sendMediaAction(chat, kind, url, caption string) map[string]any {
	return map[string]any{"op": "send_media", "chat_id": chat, "media_kind": kind, "source_url": url,
		"content": caption, "reply_to": nil, "metadata": map[string]any{}}
}

// TestMediaInbound20MB: a 20 MiB document reaches the gateway as a re-host
// URL whose bytes (fetched with the gateway's bearer) have the sha256 of
// what the fake Bot API served; another tenant's gateway and a wrong bearer
// cannot fetch it; the connector's heap stays far below the file's size.
func TestMediaInbound20MB(t *testing.T) {
	e := newMediaEnv(t)
	const size = 20 << 20
	want, _ := mediatest.SHA256(mediatest.Content(7, size))
	e.fake.AddFile("DOC1", "documents/file_7.pdf", size, func() io.Reader { return mediatest.Content(7, size) })
	peak := mediatest.StartHeapPeak(5 * time.Millisecond)
	e.fake.Enqueue([]byte(fmt.Sprintf(`{"update_id":900001,"message":{"message_id":77,"date":1700000000,
		"chat":{"id":123456789,"type":"private","first_name":"Ada"},"from":{"id":123456789,"is_bot":false,"first_name":"Ada"},
		"caption":"the report","document":{"file_id":"DOC1","file_unique_id":"U1","file_name":"report.pdf",
		"mime_type":"application/pdf","file_size":%d}}}`, size)))
	ev, buf := e.gw1.NextInbound(t)
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
func TestMediaSendMedia10MB(t *testing.T) {
	e := newMediaEnv(t)
	const size = 10 << 20
	want, _ := mediatest.SHA256(mediatest.Content(9, size))
	peak := mediatest.StartHeapPeak(5 * time.Millisecond)
	url := e.upload(t, e.tok1, 9, size, "clip.bin")
	res := e.gw1.Outbound(t, "telegram", sendMediaAction("123456789", "document", url, "**here** it is"))
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
		res := e.gw1.Outbound(t, "telegram", sendMediaAction("123456789", kind, small, ""))
		calls := e.fake.Calls(method)
		if !res.Success || len(calls) != 1 || calls[0].Files[mediaFields(method)].Size != 4096 {
			t.Errorf("%s: result %+v, calls %+v", kind, res, calls)
		}
	}
}

func mediaFields(method string) string {
	return strings.ToLower(strings.TrimPrefix(method, "send"))
}

// TestMediaSendMediaFailures: each refused send_media answers a failure
// result and calls no Telegram method.
func TestMediaSendMediaFailures(t *testing.T) {
	e := newMediaEnv(t)
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
	check("unsupported kind", sendMediaAction("123456789", "sticker", own, ""), contract.CodeBadRequest)
	check("another tenant's media id", sendMediaAction("123456789", "image", foreign, ""), contract.CodeBadRequest)
	check("malformed media id", sendMediaAction("123456789", "image", e.h.URL+"/relay/media/../../etc", ""), contract.CodeBadRequest)
	check("unknown media id", sendMediaAction("123456789", "image", e.h.URL+"/relay/media/"+strings.Repeat("0", 32), ""), contract.CodeBadRequest)
	check("not http", sendMediaAction("123456789", "image", "file:///etc/passwd", ""), contract.CodeBadRequest)
	check("another tenant's chat", sendMediaAction("-1001234567890", "image", own, ""), contract.CodeEgressDeclined)
	e.clock.Advance(media.DefaultTTL)
	check("expired media id", sendMediaAction("123456789", "image", expiring, ""), contract.CodeBadRequest)
	for _, m := range []string{"sendPhoto", "sendDocument"} {
		if n := len(e.fake.Calls(m)); n != 0 {
			t.Errorf("%d %s calls after refused send_media", n, m)
		}
	}
}
