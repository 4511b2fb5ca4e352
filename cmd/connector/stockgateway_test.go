package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/platform/telegram/telegramtest"
	"connector/relay/relaytest"
	"connector/session"
)

// TestGatewaysKeyAndAddressLikeTheStockGateway runs the connector from a
// config file with Telegram (against a local fake) and nexscope, and plays
// two gateways over real sockets:
//
//   - gw1, a stock gateway, says hello for nexscope and then telegram. Its
//     untagged get_chat_info reaches the platform of each chat, not the first
//     hello's. It keys a nexscope room's session as the stock gateway does
//     (agent:main:relay:…): its interrupt with that key reaches it back, a
//     member's /stop arrives with that key, and its reply tagged "relay"
//     reaches the room.
//   - gw2's tenant sets session.nexscope_key_platform: nexscope (its gateways
//     have a nexscope plugin), and its interrupt with agent:main:nexscope:…
//     reaches it.
func TestGatewaysKeyAndAddressLikeTheStockGateway(t *testing.T) {
	tfake := telegramtest.New(t, fullTelegramToken)
	tfake.AddChat(42, map[string]any{"id": 42, "type": "group", "title": "Ops chat"})
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
tenants:
  - id: t1
    gateways: [{id: gw1, secrets: [s1]}]
  - id: t2
    gateways: [{id: gw2, secrets: [s2]}]
    session: {nexscope_key_platform: nexscope}
telegram:
  api_server_url: %s
  webhook_url: https://connector.example/telegram/webhook
  chats: {"42": t1}
nexscope:
  rooms: [{name: lab, tenant: t1}, {name: plug, tenant: t2}]
`, tfake.URL)
	path := filepath.Join(t.TempDir(), "connector.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"TELEGRAM_BOT_TOKEN": fullTelegramToken, "TELEGRAM_WEBHOOK_SECRET": fullTelegramSecret,
		"NEXSCOPE_TOKEN": fullNexscopeToken,
	}
	cfg, gen, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrCh := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, randomOpsPort(cfg), gen, relaytest.TestLogger(t), &syncBuffer{}, func(a listenAddrs) { addrCh <- a.Addr })
	}()
	addr := listening(t, addrCh, done)
	// Registered before the sockets' cleanups, so it runs after them: the
	// shutdown does not wait out close handshakes nobody reads.
	t.Cleanup(func() {
		cancel()
		served(t, done)
	})
	wctx, wcancel := context.WithTimeout(context.Background(), serveWait)
	defer wcancel()

	gw1 := dialGateway(t, wctx, addr, "gw1", "s1", "nexscope", "telegram")
	for _, c := range []struct{ chat, name, typ string }{{"42", "Ops chat", "group"}, {"lab", "lab", "group"}} {
		res, err := gw1.Outbound(wctx, "", map[string]any{"op": "get_chat_info", "chat_id": c.chat})
		if err != nil || !res.Success || res.ChatInfo == nil || res.ChatInfo.Name != c.name || res.ChatInfo.Type != c.typ {
			t.Fatalf("untagged get_chat_info %s: %+v %v, want {name: %s, type: %s}", c.chat, res, err, c.name, c.typ)
		}
	}
	if n := len(tfake.Calls("getChat")); n != 1 {
		t.Fatalf("telegram getChat called %d times, want 1", n)
	}

	alice := dialRoomMember(t, wctx, addr, "lab", "alice")
	writeMember(t, wctx, alice, `{"type":"msg","msgId":"m1","from":"alice","to":["hermes"],"role":"user","threadId":"t-1","text":"hi"}`)
	in := nextInbound(t, wctx, gw1)
	const stockKey = "agent:main:relay:group:lab:t-1"
	if k := relaytest.StockSessionKey(in.Event.Source, session.DefaultOptions); k != stockKey {
		t.Fatalf("the stock gateway keys the inbound %s, want %s", k, stockKey)
	}
	interruptAndExpect(t, wctx, gw1, stockKey, "lab")
	res, err := gw1.Outbound(wctx, "relay", map[string]any{"op": "send", "chat_id": "lab", "content": "stopping",
		"reply_to": in.Event.MessageID, "metadata": map[string]any{"thread_id": "t-1"}})
	if err != nil || !res.Success {
		t.Fatalf("send tagged relay to the room: %+v %v", res, err)
	}
	readMemberUntil(t, wctx, alice, `"stopping"`)
	writeMember(t, wctx, alice, `{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":"t-1","text":"/stop"}`)
	if f, err := gw1.Next(wctx, contract.TypeInterruptInbound); err != nil || f.SessionKey != stockKey || f.ChatID != "lab" {
		t.Fatalf("a member's /stop: session_key %q chat_id %q (%v), want %s lab", f.SessionKey, f.ChatID, err, stockKey)
	}

	gw2 := dialGateway(t, wctx, addr, "gw2", "s2", "nexscope")
	bob := dialRoomMember(t, wctx, addr, "plug", "bob")
	writeMember(t, wctx, bob, `{"type":"msg","msgId":"m3","from":"bob","to":["hermes"],"role":"user","threadId":"t-2","text":"hi"}`)
	nextInbound(t, wctx, gw2)
	interruptAndExpect(t, wctx, gw2, "agent:main:nexscope:group:plug:t-2", "plug")
}

// dialGateway connects gatewayID and says hello for each platform in order.
func dialGateway(t *testing.T, ctx context.Context, addr, gatewayID, secret string, platforms ...string) *relaytest.Client {
	t.Helper()
	gw, err := relaytest.Dial(ctx, "ws://"+addr+"/relay", relaytest.Token(gatewayID, secret, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.CloseNow() })
	for _, p := range platforms {
		if d, err := gw.Hello(ctx, p, ""); err != nil || d.Platform != p {
			t.Fatalf("%s hello %s: %+v %v", gatewayID, p, d, err)
		}
	}
	return gw
}

// nextInbound returns the gateway's next inbound, acknowledged.
func nextInbound(t *testing.T, ctx context.Context, gw *relaytest.Client) relaytest.Frame {
	t.Helper()
	f, err := gw.Next(ctx, contract.TypeInbound)
	if err != nil {
		t.Fatalf("waiting for inbound: %v", err)
	}
	if err := gw.Ack(ctx, f.BufferID); err != nil {
		t.Fatal(err)
	}
	return f
}

// interruptAndExpect sends the gateway's interrupt for key and expects its
// interrupt_inbound back (the gateway owns the session).
func interruptAndExpect(t *testing.T, ctx context.Context, gw *relaytest.Client, key, chatID string) {
	t.Helper()
	if err := gw.Send(ctx, map[string]any{"type": "interrupt", "session_key": key, "reason": nil}); err != nil {
		t.Fatal(err)
	}
	f, err := gw.Next(ctx, contract.TypeInterruptInbound)
	if err != nil || f.SessionKey != key || f.ChatID != chatID {
		t.Fatalf("interrupt %s: interrupt_inbound session_key %q chat_id %q (%v), want it back for chat %s", key, f.SessionKey, f.ChatID, err, chatID)
	}
}

// dialRoomMember joins room as name and reads its presence.
func dialRoomMember(t *testing.T, ctx context.Context, addr, room, name string) *websocket.Conn {
	t.Helper()
	m, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws/"+room+"?name="+name+"&v=1&token="+fullNexscopeToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.CloseNow() })
	readMemberUntil(t, ctx, m, `"presence"`)
	return m
}

func writeMember(t *testing.T, ctx context.Context, m *websocket.Conn, frame string) {
	t.Helper()
	if err := m.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		t.Fatal(err)
	}
}

// readMemberUntil reads a member's frames until one contains want.
func readMemberUntil(t *testing.T, ctx context.Context, m *websocket.Conn, want string) {
	t.Helper()
	for {
		_, data, err := m.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for a member frame with %s: %v", want, err)
		}
		if strings.Contains(string(data), want) {
			return
		}
	}
}
