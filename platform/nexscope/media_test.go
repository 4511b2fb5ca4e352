package nexscope

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/media"
	"connector/media/mediatest"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/session"
)

// mediaEnv is a nexscope platform behind a relay serving the media routes:
// room lab bound to t1 (gateway gw1), room ops to t2.
type mediaEnv struct {
	h     *relaytest.Harness
	gw    *relaytest.Gateway
	tok1  string
	tok2  string
	clock *clocktest.Fake // the media store's (expiry)
	logs  *syncBuffer
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
	logs := &syncBuffer{}
	p, err := New(Config{Token: testToken, Rooms: []Room{{Name: "lab", Tenant: "t1"}, {Name: "ops", Tenant: "t2"}}},
		platform.Deps{Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Key: relay.KeyFunc(tenants), Media: store})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.StartWith(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t)},
		relaytest.Options{Listener: ln, Routes: func(srv *relay.Server) map[string]http.Handler {
			return media.Routes(store.Handler(media.HandlerConfig{Auth: srv}))
		}})
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "nexscope", "")
	return &mediaEnv{h: h, gw: gw, tok1: relaytest.Token("gw1", "s1", time.Now()), tok2: relaytest.Token("gw2", "s2", time.Now()),
		clock: clk, logs: logs}
}

func (e *mediaEnv) join(t *testing.T, room, name string) *client {
	t.Helper()
	c := dialMember(t, "ws"+strings.TrimPrefix(e.h.URL, "http")+"/ws/"+room+"?name="+name+"&token="+testToken, nil)
	c.name = name
	c.expect("presence")
	return c
}

func (e *mediaEnv) upload(t *testing.T, seed uint64, size int64) string {
	t.Helper()
	return e.uploadAs(t, e.tok1, seed, size)
}

// uploadAs uploads with the bearer token (a gateway's).
func (e *mediaEnv) uploadAs(t *testing.T, token string, seed uint64, size int64) string {
	t.Helper()
	status, id := mediatest.Upload(t, e.h.URL, token, mediatest.Content(seed, size), size, "application/pdf", "spec.pdf")
	if status != http.StatusOK {
		t.Fatalf("upload: HTTP %d", status)
	}
	return e.h.URL + "/relay/media/" + id
}

func mediaAction(room, kind, url, to string) map[string]any {
	return map[string]any{"op": "send_media", "chat_id": room, "media_kind": kind, "source_url": url,
		"content": "the spec", "reply_to": nil, "metadata": map[string]any{"user_id": to}}
}

// TestSendMedia10MBToMember: a gateway's send_media of 10 MiB reaches the
// addressed member as the bot's file transfer, byte-exact, with the sha256
// announced in file-start; another member online gets nothing; the heap
// stays far below the file's size.
func TestSendMedia10MBToMember(t *testing.T) {
	e := newMediaEnv(t)
	alice := e.join(t, "lab", "alice")
	bob := e.join(t, "lab", "bob")
	alice.expect("presence") // bob joined
	const size = 10 << 20
	want, _ := mediatest.SHA256(mediatest.Content(21, size))
	got := receiveFileStreaming(alice)
	peak := mediatest.StartHeapPeak(5 * time.Millisecond)
	res := e.gw.Outbound(t, "nexscope", mediaAction("lab", "document", e.upload(t, 21, size), "alice"))
	r := <-got
	heap := peak.Stop()
	t.Logf("10 MiB send_media (gateway upload, nexscope file transfer to a member): heap in use peaked %s above baseline", mediatest.MiB(heap))
	if !res.Success || res.MessageID == "" {
		t.Fatalf("send_media = %+v", res)
	}
	if r.err != nil || r.bytes != size || r.sha256 != want {
		t.Fatalf("alice received %d bytes sha256 %s (%v), want %d bytes %s", r.bytes, r.sha256, r.err, size, want)
	}
	att, _ := r.start["attachment"].(map[string]any)
	if r.start["from"] != "hermes" || r.start["msgId"] != res.MessageID || r.start["text"] != "the spec" ||
		att["name"] != "spec.pdf" || att["sha256"] != want || att["size"] != float64(size) || att["mime"] != "application/pdf" ||
		r.end["msgId"] != res.MessageID {
		t.Fatalf("file-start %v, file-end %v", r.start, r.end)
	}
	if heap > 8<<20 {
		t.Errorf("heap grew %s during a 10 MiB transfer: the file was held in memory", mediatest.MiB(heap))
	}
	bob.sendJSON(map[string]any{"type": "ping"})
	if f := bob.next(); f["type"] != "pong" {
		t.Errorf("bob, not addressed, got %v", f)
	}
}

// TestSendMediaWaitsForTheRoomLock: while a member's transfer holds the
// room's lock, the bot's send_media waits; its file-start reaches the
// recipient only after the member's file-end.
func TestSendMediaWaitsForTheRoomLock(t *testing.T) {
	e := newMediaEnv(t)
	alice := e.join(t, "lab", "alice")
	bob := e.join(t, "lab", "bob")
	alice.expect("presence")
	url := e.upload(t, 22, 300_000)
	alice.sendJSON(fileStart("F1", "alice", []string{"bob"}, 200_000))
	if f := bob.expect("file-start"); f["msgId"] != "F1" { // alice holds the lock now
		t.Fatalf("bob got %v", f)
	}
	results := make(chan contract.Result, 1)
	go func() {
		r, err := e.gw.Client.Outbound(t.Context(), "nexscope", mediaAction("lab", "image", url, "bob"))
		if err != nil {
			r = contract.Result{Error: err.Error()}
		}
		results <- r
	}()
	waitFor(t, "send_media waiting for the lock", func() bool { return strings.Contains(e.logs.String(), "waiting for the room's file-transfer lock") })
	src := newChunkSource(200_000, 65536)
	for b := src.next(); b != nil; b = src.next() {
		alice.sendBinary(b)
	}
	alice.sendJSON(fileEnd("F1", "alice"))
	var got int
	for got < 200_000 {
		typ, b := bob.read()
		if typ != websocket.MessageBinary {
			t.Fatalf("bob got %s before alice's file ended", b)
		}
		got += len(b)
	}
	if f := bob.expect("file-end"); f["msgId"] != "F1" {
		t.Fatalf("bob got %v, want alice's file-end", f)
	}
	second := <-receiveFile(bob)
	if second.err != nil || second.start["from"] != "hermes" || second.bytes != 300_000 {
		t.Fatalf("bob's second file: %+v", second)
	}
	if r := <-results; !r.Success {
		t.Fatalf("send_media = %+v", r)
	}
}

// TestFileToBotReachesGateway: a member's file addressed to the bot is
// re-hosted; the gateway's inbound carries its URL in media_urls and media,
// and the bytes it fetches with its bearer are the member's.
func TestFileToBotReachesGateway(t *testing.T) {
	e := newMediaEnv(t)
	alice := e.join(t, "lab", "alice")
	const size = 5 << 20
	peak := mediatest.StartHeapPeak(5 * time.Millisecond)
	alice.sendJSON(map[string]any{"type": "file-start", "msgId": "F9", "from": "alice", "to": []string{"hermes"},
		"role": "user", "threadId": "main", "text": "please review",
		"attachment": map[string]any{"name": "diff.patch", "size": size, "mime": "text/x-diff"}})
	src := newChunkSource(size, 65536)
	for b := src.next(); b != nil; b = src.next() {
		alice.sendBinary(b)
	}
	alice.sendJSON(fileEnd("F9", "alice"))
	ack := alice.expect("ack")
	ev, buf := e.gw.NextInbound(t)
	if buf != "" {
		e.gw.Ack(t, buf)
	}
	if d, _ := ack["delivered"].([]any); len(d) != 1 || d[0] != "hermes" {
		t.Fatalf("ack %v", ack)
	}
	if ev.Text != "please review" || ev.MessageType != contract.MessageDocument || len(ev.MediaURLs) != 1 || len(ev.Media) != 1 ||
		ev.Media[0].Filename != "diff.patch" || ev.Media[0].Size != size || ev.Media[0].MIME != "text/x-diff" || ev.Source.Platform != session.PlatformNexscope {
		t.Fatalf("inbound %+v", ev)
	}
	status, sum, n := mediatest.Download(t, ev.MediaURLs[0], e.tok1)
	heap := peak.Stop()
	t.Logf("5 MiB member file to the bot (re-host, gateway GET): heap in use peaked %s above baseline", mediatest.MiB(heap))
	if status != 200 || n != size || sum != sha256Of(size, 65536) {
		t.Fatalf("re-host download: HTTP %d, %d bytes, %s", status, n, sum)
	}
	if status, _, _ := mediatest.Download(t, ev.MediaURLs[0], relaytest.Token("gw2", "s2", time.Now())); status != http.StatusNotFound {
		t.Errorf("another tenant fetched the re-host: HTTP %d", status)
	}
}

// TestSendMediaFailures: refused send_media results (and a 413 upload);
// alice, addressed by each, receives nothing.
func TestSendMediaFailures(t *testing.T) {
	e := newMediaEnv(t)
	alice := e.join(t, "lab", "alice")
	url := e.upload(t, 23, 1000)
	foreign := e.uploadAs(t, e.tok2, 24, 1000)
	expiring := e.upload(t, 25, 1000)
	if status, _ := mediatest.Upload(t, e.h.URL, e.tok1, mediatest.Content(4, media.DefaultMaxBytes+1), media.DefaultMaxBytes+1, "application/pdf", "big.pdf"); status != http.StatusRequestEntityTooLarge {
		t.Errorf("upload over 25 MiB: HTTP %d, want 413", status)
	}
	e.clock.Advance(media.DefaultTTL - time.Second)
	url = e.upload(t, 23, 1000) // uploaded after the clock moved: still valid below
	e.clock.Advance(time.Second)
	for _, tc := range []struct {
		name   string
		action map[string]any
		code   string
	}{
		{"unsupported kind", mediaAction("lab", "sticker", url, "alice"), contract.CodeBadRequest},
		{"another tenant's room", mediaAction("ops", "image", url, "alice"), contract.CodeEgressDeclined},
		{"recipient offline", mediaAction("lab", "image", url, "nobody"), contract.CodeUnavailable},
		{"unknown media id", mediaAction("lab", "image", e.h.URL+"/relay/media/"+strings.Repeat("1", 32), "alice"), contract.CodeBadRequest},
		{"malformed media id", mediaAction("lab", "image", e.h.URL+"/relay/media/../../etc/passwd", "alice"), contract.CodeBadRequest},
		{"another tenant's media id", mediaAction("lab", "image", foreign, "alice"), contract.CodeBadRequest},
		{"expired media id", mediaAction("lab", "image", expiring, "alice"), contract.CodeBadRequest},
		{"unsupported op", map[string]any{"op": "react", "chat_id": "lab", "message_id": "m1", "emoji": "👀", "metadata": map[string]any{}}, contract.CodeUnsupportedOp},
		{"draft (no native drafts)", map[string]any{"op": "draft", "chat_id": "lab", "draft_id": 1, "content": "x", "final": false, "metadata": map[string]any{}}, contract.CodeUnsupportedOp},
	} {
		if r := e.gw.Outbound(t, "nexscope", tc.action); r.Success || r.Code != tc.code {
			t.Errorf("%s: %+v, want code %s", tc.name, r, tc.code)
		}
	}
	alice.sendJSON(map[string]any{"type": "ping"})
	if f := alice.next(); f["type"] != "pong" {
		t.Errorf("alice got %v from refused sends", f)
	}
	if r := e.gw.Outbound(t, "nexscope", mediaAction("lab", "image", url, "alice")); !r.Success {
		t.Errorf("send_media of a live upload = %+v", r)
	}
	if bytes.Contains([]byte(e.logs.String()), []byte(testToken)) {
		t.Error("the room token reached a log line")
	}
}

// receiveFileStreaming is receiveFile reading each binary message through
// one reused buffer, so the test's own garbage does not count in the heap
// measured around a transfer.
func receiveFileStreaming(c *client) <-chan received {
	out := make(chan received, 1)
	go func() {
		var r received
		defer func() { out <- r }()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for {
			typ, rd, err := c.ws.Reader(ctx)
			if err != nil {
				r.err = err
				return
			}
			if typ == websocket.MessageBinary {
				n, err := io.CopyBuffer(h, rd, buf)
				if err != nil {
					r.err = err
					return
				}
				r.bytes += n
				continue
			}
			b, err := io.ReadAll(rd)
			if err != nil {
				r.err = err
				return
			}
			m, err := decodeFrame(b)
			if err != nil {
				r.err = err
				return
			}
			switch m["type"] {
			case "presence":
			case "file-start":
				r.start = m
			case "file-end":
				r.end = m
				r.sha256 = hex.EncodeToString(h.Sum(nil))
				return
			default:
				r.err = fmt.Errorf("unexpected frame %s", b)
				return
			}
		}
	}()
	return out
}
