package integration

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/leakcheck"
	"connector/media"
	"connector/media/mediatest"
	"connector/platform"
	"connector/platform/nexscope"
	"connector/platform/nexscope/nexscopetest"
	"connector/platform/platformtest"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/session"
	"connector/vault"
)

// The whole bridge over real sockets: a member's msg to the bot reaches the
// tenant's gateway on /relay as inbound, the gateway's send comes back to
// the member as the bot's msg, and a /stop becomes interrupt_inbound. The
// tenant's gateway has a nexscope platform plugin, so it keys the room's
// sessions under "nexscope".
func TestNexscopeBridgeLoopThroughRelay(t *testing.T) {
	plugin := session.DefaultOptions
	plugin.NexscopeKeyPlatform = "nexscope"
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}, Session: &plugin},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	p, err := nexscope.New(nexscope.Config{Token: nexscopetest.Token, Rooms: []nexscope.Room{{Name: "lab", Tenant: "t1"}}},
		platform.Deps{Log: relaytest.TestLogger(t), Clock: nexscopetest.NewClock(), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	waitBridging(t, p)
	gw := h.Dial(t, "gw1", "s1")
	d := gw.Hello(t, "nexscope", "")
	if d.Platform != "nexscope" || d.SupportsEdit || fmt.Sprint(d.SupportedOps) != "[get_chat_info prompt send send_media typing]" {
		t.Fatalf("descriptor %+v", d)
	}

	alice := nexscopetest.Dial(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws/lab?name=alice&token="+nexscopetest.Token+"&v=1", nil)
	alice.Name = "alice"
	alice.ExpectPresence("alice", "hermes")
	alice.SendText(`{"type":"msg","msgId":"01HQX5C9","from":"alice","to":["hermes"],"role":"user",` +
		`"threadId":"t-2026-04-28-xyz","text":"please refactor auth.ts, write tests first","hopCount":0,"attachments":[]}`)
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[hermes]" {
		t.Fatalf("ack %v", ack)
	}

	ev, bufID := gw.NextInbound(t)
	src := ev.Source
	if ev.Text != "please refactor auth.ts, write tests first" || ev.MessageID != "01HQX5C9" ||
		src.Platform != "nexscope" || src.ChatID != "lab" || src.ChatType != "group" ||
		src.UserID.Value != "alice" || src.ThreadID.Value != "t-2026-04-28-xyz" || src.IsBot {
		t.Fatalf("inbound %+v", ev)
	}
	if bufID != "" {
		gw.Ack(t, bufID)
	}

	// The gateway answers as it would: reply_to the event, thread in metadata.
	res := gw.Outbound(t, "nexscope", map[string]any{
		"op": "send", "chat_id": "lab", "content": "On it: tests first.", "reply_to": ev.MessageID,
		"metadata": map[string]any{"thread_id": src.ThreadID.Value, "user_id": "alice"},
	})
	if !res.Success || res.MessageID == "" {
		t.Fatalf("send result %+v", res)
	}
	m := alice.Expect("msg")
	if m["from"] != "hermes" || m["role"] != "userAgent" || m["text"] != "On it: tests first." ||
		m["threadId"] != "t-2026-04-28-xyz" || m["hopCount"] != float64(1) || m["msgId"] != res.MessageID ||
		fmt.Sprint(m["to"]) != "[alice]" {
		t.Fatalf("bot msg %v", m)
	}
	if r := gw.Outbound(t, "nexscope", map[string]any{"op": "typing", "chat_id": "lab", "metadata": map[string]any{}}); !r.Success {
		t.Fatalf("typing %+v", r)
	}

	// /stop from the member interrupts the session's owner.
	alice.SendText(`{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":"t-2026-04-28-xyz","text":"/stop"}`)
	alice.Expect("ack")
	f := gw.Next(t, contract.TypeInterruptInbound)
	if f.ChatID != "lab" || f.SessionKey != "agent:main:nexscope:group:lab:t-2026-04-28-xyz" {
		t.Fatalf("interrupt_inbound %+v", f)
	}

	// Another tenant's gateway cannot post into the room.
	gw2 := h.Dial(t, "gw2", "s2")
	gw2.Hello(t, "nexscope", "")
	r := gw2.Outbound(t, "nexscope", map[string]any{"op": "send", "chat_id": "lab", "content": "hijack", "reply_to": nil, "metadata": map[string]any{}})
	if r.Success || r.Code != contract.CodeEgressDeclined {
		t.Fatalf("foreign send %+v", r)
	}
	alice.SendText(`{"type":"ping"}`)
	alice.Expect("pong") // and nothing from the foreign gateway before it
}

// A stock gateway knows no platform "nexscope": it reads the inbound's
// source.platform as "relay" and keys the room's sessions so. The connector
// must key them the same way: the gateway's interrupt with its own key
// reaches the session's owner, a member's /stop arrives with that key, and
// the gateway's replies, which it tags "relay" (the platform it learned for
// the chat), reach the room.
func TestNexscopeStockGatewayKeysNexscopeAsRelay(t *testing.T) {
	tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
	p, err := nexscope.New(nexscope.Config{Token: nexscopetest.Token, Rooms: []nexscope.Room{{Name: "lab", Tenant: "t1"}}},
		platform.Deps{Log: relaytest.TestLogger(t), Clock: nexscopetest.NewClock(), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	waitBridging(t, p)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "nexscope", "")

	alice := nexscopetest.Dial(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws/lab?name=alice&token="+nexscopetest.Token+"&v=1", nil)
	alice.Name = "alice"
	alice.ExpectPresence("alice", "hermes")
	alice.SendText(`{"type":"msg","msgId":"m1","from":"alice","to":["hermes"],"role":"user","threadId":"t-1","text":"hi"}`)
	alice.Expect("ack")
	ev, bufID := gw.NextInbound(t)
	gw.Ack(t, bufID)
	// The wire names the platform as it is; the gateway does the fallback.
	if ev.Source.Platform != "nexscope" {
		t.Fatalf("source.platform %q, want nexscope", ev.Source.Platform)
	}
	const want = "agent:main:relay:group:lab:t-1"
	key := relaytest.StockSessionKey(ev.Source, session.DefaultOptions)
	if key != want {
		t.Fatalf("the stock gateway's key is %s, want %s", key, want)
	}

	gw.Send(t, map[string]any{"type": "interrupt", "session_key": key, "reason": nil})
	if f := gw.Next(t, contract.TypeInterruptInbound); f.SessionKey != want || f.ChatID != "lab" {
		t.Fatalf("interrupt_inbound for the gateway's interrupt: session_key %q chat_id %q, want %q lab", f.SessionKey, f.ChatID, want)
	}

	res := gw.Outbound(t, "relay", map[string]any{
		"op": "send", "chat_id": "lab", "content": "stopped", "reply_to": ev.MessageID,
		"metadata": map[string]any{"thread_id": "t-1"},
	})
	if !res.Success {
		t.Fatalf("send tagged relay: %+v", res)
	}
	if m := alice.Expect("msg"); m["text"] != "stopped" || m["threadId"] != "t-1" {
		t.Fatalf("bot msg %v", m)
	}

	alice.SendText(`{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":"t-1","text":"/stop"}`)
	alice.Expect("ack")
	if f := gw.Next(t, contract.TypeInterruptInbound); f.SessionKey != want || f.ChatID != "lab" {
		t.Fatalf("interrupt_inbound for a member's /stop: session_key %q chat_id %q, want %q lab", f.SessionKey, f.ChatID, want)
	}
}

// A member's msg without threadId, answered the way the stock gateway does
// (reply_to the member's msgId, no thread in metadata), is replied to in
// DefaultThread.
func TestNexscopeReplyWithoutThreadUsesDefaultThread(t *testing.T) {
	tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
	p, err := nexscope.New(nexscope.Config{Token: nexscopetest.Token, Rooms: []nexscope.Room{{Name: "lab", Tenant: "t1"}}},
		platform.Deps{Log: relaytest.TestLogger(t), Clock: nexscopetest.NewClock(), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	waitBridging(t, p)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "nexscope", "")
	alice := nexscopetest.Dial(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws/lab?name=alice&token="+nexscopetest.Token+"&v=1", nil)
	alice.Name = "alice"
	alice.ExpectPresence("alice", "hermes")

	for _, frame := range []string{
		`{"type":"msg","msgId":"m1","from":"alice","to":["hermes"],"role":"user","text":"no thread"}`,
		`{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":null,"text":"null thread"}`,
	} {
		alice.SendText(frame)
		alice.Expect("ack")
		ev, bufID := gw.NextInbound(t)
		if ev.Source.ThreadID.Valid {
			t.Fatalf("inbound thread_id %+v, want null", ev.Source.ThreadID)
		}
		if bufID != "" {
			gw.Ack(t, bufID)
		}
		res := gw.Outbound(t, "relay", map[string]any{
			"op": "send", "chat_id": "lab", "content": "answer to " + ev.MessageID, "reply_to": ev.MessageID,
			"metadata": map[string]any{"user_id": "alice"},
		})
		if !res.Success {
			t.Fatalf("reply to %s: %+v", ev.MessageID, res)
		}
		m := alice.Expect("msg")
		if m["threadId"] != nexscope.DefaultThread || fmt.Sprint(m["to"]) != "[alice]" || m["hopCount"] != float64(1) ||
			m["text"] != "answer to "+ev.MessageID || m["msgId"] != res.MessageID {
			t.Fatalf("reply %v", m)
		}
	}

	// reply_to a message the bridge does not remember (evicted, or from
	// before a restart): DefaultThread and metadata.user_id, not the room's
	// last inbound (bob's).
	bob := nexscopetest.Dial(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws/lab?name=bob&token="+nexscopetest.Token+"&v=1", nil)
	bob.Name = "bob"
	bob.ExpectPresence("alice", "bob", "hermes")
	alice.ExpectPresence("alice", "bob", "hermes")
	bob.SendText(`{"type":"msg","msgId":"b1","from":"bob","to":["hermes"],"role":"user","threadId":"tb","text":"mine"}`)
	bob.Expect("ack")
	ev, bufID := gw.NextInbound(t)
	if ev.MessageID != "b1" {
		t.Fatalf("inbound %+v", ev)
	}
	if bufID != "" {
		gw.Ack(t, bufID)
	}
	res := gw.Outbound(t, "relay", map[string]any{
		"op": "send", "chat_id": "lab", "content": "late answer", "reply_to": "forgotten",
		"metadata": map[string]any{"user_id": "alice"},
	})
	if !res.Success {
		t.Fatalf("reply to a forgotten message: %+v", res)
	}
	if m := alice.Expect("msg"); m["threadId"] != nexscope.DefaultThread || fmt.Sprint(m["to"]) != "[alice]" || m["text"] != "late answer" {
		t.Fatalf("reply %v", m)
	}
	bob.SendText(`{"type":"ping"}`)
	bob.Expect("pong") // and no reply meant for alice before it
}

// TestPromptTextFormRoundTrip: nexscope has no buttons, so a prompt reaches
// the member as its documented text form; the member's "/<option_id>"
// comes back to the gateway as a prompt_response from that member, once.
func TestNexscopePromptTextFormRoundTrip(t *testing.T) {
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	p, err := nexscope.New(nexscope.Config{Token: nexscopetest.Token, Rooms: []nexscope.Room{{Name: "lab", Tenant: "t1"}}},
		platform.Deps{Log: relaytest.TestLogger(t), Clock: nexscopetest.NewClock(), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	waitBridging(t, p)
	gw := h.Dial(t, "gw1", "s1")
	if d := gw.Hello(t, "nexscope", ""); !d.HasOp("prompt") {
		t.Fatalf("descriptor ops %v lack prompt", d.SupportedOps)
	}
	alice := nexscopetest.Dial(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws/lab?name=alice&token="+nexscopetest.Token+"&v=1", nil)
	alice.Name = "alice"
	alice.ExpectPresence("alice", "hermes")
	alice.SendText(`{"type":"msg","msgId":"m1","from":"alice","to":["hermes"],"role":"user","threadId":"th1","text":"deploy please","hopCount":0}`)
	alice.Expect("ack")
	ev, buf := gw.NextInbound(t)
	if buf != "" {
		gw.Ack(t, buf)
	}

	prompt := map[string]any{"op": "prompt", "chat_id": "lab", "content": "Run make deploy?", "prompt_kind": "approval",
		"prompt_id": "f00dba.1234abcd", "reply_to": ev.MessageID, "metadata": map[string]any{"thread_id": "th1"},
		"options": []any{map[string]any{"id": "once", "label": "Approve once"}, map[string]any{"id": "deny", "label": "Deny", "style": "danger"}}}
	res := gw.Outbound(t, "nexscope", prompt)
	if !res.Success || res.MessageID == "" {
		t.Fatalf("prompt = %+v", res)
	}
	m := alice.Expect("msg")
	if m["text"] != "Run make deploy?\n\n/once: Approve once\n/deny: Deny" || m["msgId"] != res.MessageID || fmt.Sprint(m["to"]) != "[alice]" {
		t.Fatalf("prompt msg %v", m)
	}

	alice.SendText(`{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":"th1","text":" /deny ","hopCount":0}`)
	alice.Expect("ack")
	ev, buf = gw.NextInbound(t)
	if buf != "" {
		gw.Ack(t, buf)
	}
	pr := ev.PromptResponse
	if pr == nil || pr.PromptID != "f00dba.1234abcd" || pr.OptionID != "deny" || pr.Label != "Deny" || pr.PromptMessageID != res.MessageID {
		t.Fatalf("prompt_response = %+v", pr)
	}
	if ev.Text != "/deny" || ev.MessageType != contract.MessageCommand || ev.Source.UserID.Value != "alice" {
		t.Fatalf("answer event = %+v", ev)
	}
	// Answered once: the same text again is a plain command.
	alice.SendText(`{"type":"msg","msgId":"m3","from":"alice","to":["hermes"],"role":"user","threadId":"th1","text":"/deny","hopCount":0}`)
	alice.Expect("ack")
	if ev, _ := gw.NextInbound(t); ev.PromptResponse != nil || ev.Text != "/deny" {
		t.Fatalf("second /deny = %+v", ev)
	}

	bad := map[string]any{"op": "prompt", "chat_id": "lab", "content": "q", "prompt_id": "bad id", "reply_to": nil,
		"options": []any{map[string]any{"id": "a", "label": "A"}}, "metadata": map[string]any{}}
	if r := gw.Outbound(t, "nexscope", bad); r.Code != contract.CodeBadRequest {
		t.Fatalf("bad prompt = %+v", r)
	}
	gw2 := h.Dial(t, "gw2", "s2")
	gw2.Hello(t, "nexscope", "")
	if r := gw2.Outbound(t, "nexscope", prompt); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 prompt = %+v", r)
	}
	alice.SendText(`{"type":"ping"}`)
	alice.Expect("pong") // nothing from the refused prompts before it
}

// mediaEnv is a nexscope platform behind a relay serving the media routes:
// room lab bound to t1 (gateway gw1), room ops to t2.
type nexscopeMediaEnv struct {
	h     *relaytest.Harness
	gw    *relaytest.Gateway
	tok1  string
	tok2  string
	clock *clocktest.Fake // the media store's (expiry)
	logs  *nexscopetest.SyncBuffer
}

func newNexscopeMediaEnv(t *testing.T) *nexscopeMediaEnv {
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
	logs := &nexscopetest.SyncBuffer{}
	p, err := nexscope.New(nexscope.Config{Token: nexscopetest.Token, Rooms: []nexscope.Room{{Name: "lab", Tenant: "t1"}, {Name: "ops", Tenant: "t2"}}},
		platform.Deps{Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Key: relay.KeyFunc(tenants), Media: store})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.StartWith(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t)},
		relaytest.Options{Listener: ln, Routes: func(srv *relay.Server) map[string]http.Handler {
			return media.Routes(store.Handler(media.HandlerConfig{Auth: srv}))
		}})
	waitBridging(t, p)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "nexscope", "")
	return &nexscopeMediaEnv{h: h, gw: gw, tok1: relaytest.Token("gw1", "s1", time.Now()), tok2: relaytest.Token("gw2", "s2", time.Now()),
		clock: clk, logs: logs}
}

func (e *nexscopeMediaEnv) join(t *testing.T, room, name string) *nexscopetest.Member {
	t.Helper()
	c := nexscopetest.Dial(t, "ws"+strings.TrimPrefix(e.h.URL, "http")+"/ws/"+room+"?name="+name+"&token="+nexscopetest.Token, nil)
	c.Name = name
	c.Expect("presence")
	return c
}

func (e *nexscopeMediaEnv) upload(t *testing.T, seed uint64, size int64) string {
	t.Helper()
	return e.uploadAs(t, e.tok1, seed, size)
}

// uploadAs uploads with the bearer token (a gateway's).
func (e *nexscopeMediaEnv) uploadAs(t *testing.T, token string, seed uint64, size int64) string {
	t.Helper()
	status, id := mediatest.Upload(t, e.h.URL, token, mediatest.Content(seed, size), size, "application/pdf", "spec.pdf")
	if status != http.StatusOK {
		t.Fatalf("upload: HTTP %d", status)
	}
	return e.h.URL + "/relay/media/" + id
}

func nexscopeSendMedia(room, kind, url, to string) map[string]any {
	return map[string]any{"op": "send_media", "chat_id": room, "media_kind": kind, "source_url": url,
		"content": "the spec", "reply_to": nil, "metadata": map[string]any{"user_id": to}}
}

// TestSendMedia10MBToMember: a gateway's send_media of 10 MiB reaches the
// addressed member as the bot's file transfer, byte-exact, with the sha256
// announced in file-start; another member online gets nothing; the heap
// stays far below the file's size.
func TestNexscopeSendMedia10MBToMember(t *testing.T) {
	e := newNexscopeMediaEnv(t)
	alice := e.join(t, "lab", "alice")
	bob := e.join(t, "lab", "bob")
	alice.Expect("presence") // bob joined
	const size = 10 << 20
	want, _ := mediatest.SHA256(mediatest.Content(21, size))
	got := nexscopetest.ReceiveFileStreaming(alice)
	peak := mediatest.StartHeapPeak(5 * time.Millisecond)
	res := e.gw.Outbound(t, "nexscope", nexscopeSendMedia("lab", "document", e.upload(t, 21, size), "alice"))
	r := <-got
	heap := peak.Stop()
	t.Logf("10 MiB send_media (gateway upload, nexscope file transfer to a member): heap in use peaked %s above baseline", mediatest.MiB(heap))
	if !res.Success || res.MessageID == "" {
		t.Fatalf("send_media = %+v", res)
	}
	if r.Err != nil || r.Bytes != size || r.SHA256 != want {
		t.Fatalf("alice received %d bytes sha256 %s (%v), want %d bytes %s", r.Bytes, r.SHA256, r.Err, size, want)
	}
	att, _ := r.Start["attachment"].(map[string]any)
	if r.Start["from"] != "hermes" || r.Start["msgId"] != res.MessageID || r.Start["text"] != "the spec" ||
		att["name"] != "spec.pdf" || att["sha256"] != want || att["size"] != float64(size) || att["mime"] != "application/pdf" ||
		r.End["msgId"] != res.MessageID {
		t.Fatalf("file-start %v, file-end %v", r.Start, r.End)
	}
	if heap > 8<<20 {
		t.Errorf("heap grew %s during a 10 MiB transfer: the file was held in memory", mediatest.MiB(heap))
	}
	bob.SendJSON(map[string]any{"type": "ping"})
	if f := bob.Next(); f["type"] != "pong" {
		t.Errorf("bob, not addressed, got %v", f)
	}
}

// TestSendMediaWaitsForTheRoomLock: while a member's transfer holds the
// room's lock, the bot's send_media waits; its file-start reaches the
// recipient only after the member's file-end.
func TestNexscopeSendMediaWaitsForTheRoomLock(t *testing.T) {
	e := newNexscopeMediaEnv(t)
	alice := e.join(t, "lab", "alice")
	bob := e.join(t, "lab", "bob")
	alice.Expect("presence")
	url := e.upload(t, 22, 300_000)
	alice.SendJSON(nexscopetest.FileStart("F1", "alice", []string{"bob"}, 200_000))
	if f := bob.Expect("file-start"); f["msgId"] != "F1" { // alice holds the lock now
		t.Fatalf("bob got %v", f)
	}
	results := make(chan contract.Result, 1)
	go func() {
		r, err := e.gw.Client.Outbound(t.Context(), "nexscope", nexscopeSendMedia("lab", "image", url, "bob"))
		if err != nil {
			r = contract.Result{Error: err.Error()}
		}
		results <- r
	}()
	platformtest.WaitUntil(t, "send_media waiting for the room's file-transfer lock", func() bool {
		return leakcheck.Parked("connector/platform/nexscope.(*room).beginBotTransfer(")
	})
	src := nexscopetest.NewChunkSource(200_000, 65536)
	for b := src.Next(); b != nil; b = src.Next() {
		alice.SendBinary(b)
	}
	alice.SendJSON(nexscopetest.FileEnd("F1", "alice"))
	var got int
	for got < 200_000 {
		typ, b := bob.Read()
		if typ != websocket.MessageBinary {
			t.Fatalf("bob got %s before alice's file ended", b)
		}
		got += len(b)
	}
	if f := bob.Expect("file-end"); f["msgId"] != "F1" {
		t.Fatalf("bob got %v, want alice's file-end", f)
	}
	second := <-nexscopetest.ReceiveFile(bob)
	if second.Err != nil || second.Start["from"] != "hermes" || second.Bytes != 300_000 {
		t.Fatalf("bob's second file: %+v", second)
	}
	if r := <-results; !r.Success {
		t.Fatalf("send_media = %+v", r)
	}
}

// TestFileToBotReachesGateway: a member's file addressed to the bot is
// re-hosted; the gateway's inbound carries its URL in media_urls and media,
// and the bytes it fetches with its bearer are the member's.
func TestNexscopeFileToBotReachesGateway(t *testing.T) {
	e := newNexscopeMediaEnv(t)
	alice := e.join(t, "lab", "alice")
	const size = 5 << 20
	peak := mediatest.StartHeapPeak(5 * time.Millisecond)
	alice.SendJSON(map[string]any{"type": "file-start", "msgId": "F9", "from": "alice", "to": []string{"hermes"},
		"role": "user", "threadId": "main", "text": "please review",
		"attachment": map[string]any{"name": "diff.patch", "size": size, "mime": "text/x-diff"}})
	src := nexscopetest.NewChunkSource(size, 65536)
	for b := src.Next(); b != nil; b = src.Next() {
		alice.SendBinary(b)
	}
	alice.SendJSON(nexscopetest.FileEnd("F9", "alice"))
	ack := alice.Expect("ack")
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
	if status != 200 || n != size || sum != nexscopetest.SHA256Of(size, 65536) {
		t.Fatalf("re-host download: HTTP %d, %d bytes, %s", status, n, sum)
	}
	if status, _, _ := mediatest.Download(t, ev.MediaURLs[0], relaytest.Token("gw2", "s2", time.Now())); status != http.StatusNotFound {
		t.Errorf("another tenant fetched the re-host: HTTP %d", status)
	}
}

// TestSendMediaFailures: refused send_media results (and a 413 upload);
// alice, addressed by each, receives nothing.
func TestNexscopeSendMediaFailures(t *testing.T) {
	e := newNexscopeMediaEnv(t)
	alice := e.join(t, "lab", "alice")
	e.upload(t, 23, 1000) // replaced below by one uploaded after the clock moved
	foreign := e.uploadAs(t, e.tok2, 24, 1000)
	expiring := e.upload(t, 25, 1000)
	if status, _ := mediatest.Upload(t, e.h.URL, e.tok1, mediatest.Content(4, media.DefaultMaxBytes+1), media.DefaultMaxBytes+1, "application/pdf", "big.pdf"); status != http.StatusRequestEntityTooLarge {
		t.Errorf("upload over 25 MiB: HTTP %d, want 413", status)
	}
	e.clock.Advance(media.DefaultTTL - time.Second)
	url := e.upload(t, 23, 1000) // uploaded after the clock moved: still valid below
	e.clock.Advance(time.Second)
	for _, tc := range []struct {
		name   string
		action map[string]any
		code   string
	}{
		{"unsupported kind", nexscopeSendMedia("lab", "sticker", url, "alice"), contract.CodeBadRequest},
		{"another tenant's room", nexscopeSendMedia("ops", "image", url, "alice"), contract.CodeEgressDeclined},
		{"recipient offline", nexscopeSendMedia("lab", "image", url, "nobody"), contract.CodeUnavailable},
		{"unknown media id", nexscopeSendMedia("lab", "image", e.h.URL+"/relay/media/"+strings.Repeat("1", 32), "alice"), contract.CodeBadRequest},
		{"malformed media id", nexscopeSendMedia("lab", "image", e.h.URL+"/relay/media/../../etc/passwd", "alice"), contract.CodeBadRequest},
		{"another tenant's media id", nexscopeSendMedia("lab", "image", foreign, "alice"), contract.CodeBadRequest},
		{"expired media id", nexscopeSendMedia("lab", "image", expiring, "alice"), contract.CodeBadRequest},
		{"unsupported op", map[string]any{"op": "react", "chat_id": "lab", "message_id": "m1", "emoji": "👀", "metadata": map[string]any{}}, contract.CodeUnsupportedOp},
		{"draft (no native drafts)", map[string]any{"op": "draft", "chat_id": "lab", "draft_id": 1, "content": "x", "final": false, "metadata": map[string]any{}}, contract.CodeUnsupportedOp},
	} {
		if r := e.gw.Outbound(t, "nexscope", tc.action); r.Success || r.Code != tc.code {
			t.Errorf("%s: %+v, want code %s", tc.name, r, tc.code)
		}
	}
	alice.SendJSON(map[string]any{"type": "ping"})
	if f := alice.Next(); f["type"] != "pong" {
		t.Errorf("alice got %v from refused sends", f)
	}
	if r := e.gw.Outbound(t, "nexscope", nexscopeSendMedia("lab", "image", url, "alice")); !r.Success {
		t.Errorf("send_media of a live upload = %+v", r)
	}
	if bytes.Contains([]byte(e.logs.String()), []byte(nexscopetest.Token)) {
		t.Error("the room token reached a log line")
	}
}

// waitBridging waits until p's Run bridges to the relay: the harness starts
// Run on a goroutine of its own, and a msg to the bot before that is
// acknowledged with the bot offline (unavailable), as documented.
func waitBridging(t *testing.T, p *nexscope.Platform) {
	t.Helper()
	platformtest.WaitUntil(t, "the nexscope bridge to run", func() bool { return p.Status().Ready })
}
