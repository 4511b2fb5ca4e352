package discord

import (
	"crypto/ed25519"
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
	"connector/platform/discord/discordtest"
	"connector/relay"
	"connector/relay/relaytest"
)

// TestMediaSendMedia10MB runs send_media behind the real relay: a gateway
// uploads 10 MiB to /relay/media with its bearer and sends it; the fake
// Discord receives it byte-exact as files[0] of a multipart message with
// its payload_json, while the heap stays far below the file's size. The
// failures (unsupported kind, another tenant's, unknown, malformed and
// expired media ids, another tenant's channel) touch no REST route.
func TestMediaSendMedia10MB(t *testing.T) {
	fake := discordtest.New(t, discordtest.Options{Token: testToken})
	world(fake)
	pub, _, _ := ed25519.GenerateKey(nil)
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secretGW1}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{secretGW2}}}},
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
	logs := newLogCapture()
	p, err := New(testConfig(fake, pub), platform.Deps{Log: logs.logger(), Vault: sharedVault, Key: relay.KeyFunc(tenants), Media: store})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.StartWith(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p}, Log: logs.logger()},
		relaytest.Options{Listener: ln, Routes: func(srv *relay.Server) map[string]http.Handler {
			return media.Routes(store.Handler(media.HandlerConfig{Auth: srv}))
		}})
	if err := fake.WaitSession(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	gw := h.Dial(t, "gw1", secretGW1)
	if d := gw.Hello(t, "discord", "9000"); !d.HasOp("send_media") {
		t.Fatalf("descriptor without send_media: %v", d.SupportedOps)
	}
	tok1, tok2 := relaytest.Token("gw1", secretGW1, time.Now()), relaytest.Token("gw2", secretGW2, time.Now())
	upload := func(token string, seed uint64, size int64, name string) string {
		t.Helper()
		status, id := mediatest.Upload(t, h.URL, token, mediatest.Content(seed, size), size, "video/mp4", name)
		if status != http.StatusOK {
			t.Fatalf("upload: HTTP %d", status)
		}
		return h.URL + "/relay/media/" + id
	}
	sendMedia := func(chat, kind, url, caption string) contract.Result {
		return gw.Outbound(t, "discord", map[string]any{"op": "send_media", "chat_id": chat, "media_kind": kind,
			"source_url": url, "content": caption, "reply_to": "7100", "metadata": map[string]any{}, "filename": "clip.mp4"})
	}

	const size = 10 << 20
	want, _ := mediatest.SHA256(mediatest.Content(11, size))
	peak := mediatest.StartHeapPeak(5 * time.Millisecond)
	url := upload(tok1, 11, size, "upload.bin")
	res := sendMedia(chanGeneral, "video", url, "the clip "+strings.Repeat("é", 2000))
	heap := peak.Stop()
	t.Logf("10 MiB send_media (gateway upload, multipart POST to Discord): heap in use peaked %s above baseline", mediatest.MiB(heap))
	if !res.Success || res.MessageID == "" {
		t.Fatalf("send_media = %+v", res)
	}
	msgs := fake.Messages(chanGeneral)
	if len(msgs) != 2 || msgs[0].ID != res.MessageID || len(msgs[0].Attachments) != 1 || msgs[0].ReplyTo != "7100" ||
		!strings.HasPrefix(msgs[0].Content, "the clip") || len(msgs[1].Attachments) != 0 {
		t.Fatalf("messages %+v", msgs)
	}
	a := msgs[0].Attachments[0]
	if a.Field != "files[0]" || a.Filename != "clip.mp4" || a.ContentType != "video/mp4" || a.Size != size || a.SHA256 != want {
		t.Fatalf("attachment %+v, want %d bytes sha256 %s", a, size, want)
	}
	if heap > 8<<20 {
		t.Errorf("heap grew %s during a 10 MiB transfer: the file was held in memory", mediatest.MiB(heap))
	}

	// A caption-less send of each kind is one attachment message.
	small := upload(tok1, 12, 2048, "s.bin")
	for _, kind := range platform.MediaKinds {
		if res := sendMedia(chanRandom, kind, small, ""); !res.Success {
			t.Errorf("%s: %+v", kind, res)
		}
	}
	if msgs := fake.Messages(chanRandom); len(msgs) != len(platform.MediaKinds) || msgs[0].Content != "" {
		t.Errorf("messages %+v", msgs)
	}

	before := len(fake.Requests())
	foreign := upload(tok2, 13, 100, "f.bin")
	expiring := upload(tok1, 14, 100, "e.bin")
	check := func(name, chat, kind, url, code string) {
		t.Helper()
		if res := sendMedia(chat, kind, url, "x"); res.Success || res.Code != code {
			t.Errorf("%s: %+v, want code %s", name, res, code)
		}
	}
	check("unsupported kind", chanGeneral, "gif", small, contract.CodeBadRequest)
	check("another tenant's media id", chanGeneral, "image", foreign, contract.CodeBadRequest)
	check("unknown media id", chanGeneral, "image", h.URL+"/relay/media/"+strings.Repeat("f", 32), contract.CodeBadRequest)
	check("malformed media id", chanGeneral, "image", h.URL+"/relay/media/%2e%2e", contract.CodeBadRequest)
	check("another tenant's channel", chanOther, "image", small, contract.CodeEgressDeclined)
	clk.Advance(media.DefaultTTL)
	check("expired media id", chanGeneral, "image", expiring, contract.CodeBadRequest)
	if after := len(fake.Requests()); after != before {
		t.Errorf("%d REST requests for refused send_media", after-before)
	}
	if strings.Contains(logs.text(), testToken) {
		t.Error("the bot token reached a log line")
	}
}
