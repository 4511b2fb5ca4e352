package nexscope

import (
	"fmt"
	"strings"
	"testing"

	"connector/contract"
	"connector/platform"
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
func TestBridgeLoopThroughRelay(t *testing.T) {
	plugin := session.DefaultOptions
	plugin.NexscopeKeyPlatform = "nexscope"
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}, Session: &plugin},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	p, err := New(Config{Token: testToken, Rooms: []Room{{Name: "lab", Tenant: "t1"}}},
		platform.Deps{Log: relaytest.TestLogger(t), Clock: newFakeClock(), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	gw := h.Dial(t, "gw1", "s1")
	d := gw.Hello(t, "nexscope", "")
	if d.Platform != "nexscope" || d.SupportsEdit || fmt.Sprint(d.SupportedOps) != "[get_chat_info prompt send send_media typing]" {
		t.Fatalf("descriptor %+v", d)
	}

	alice := dialMember(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws/lab?name=alice&token="+testToken+"&v=1", nil)
	alice.name = "alice"
	alice.expectPresence("alice", "hermes")
	alice.sendText(`{"type":"msg","msgId":"01HQX5C9","from":"alice","to":["hermes"],"role":"user",` +
		`"threadId":"t-2026-04-28-xyz","text":"please refactor auth.ts, write tests first","hopCount":0,"attachments":[]}`)
	if ack := alice.expect("ack"); fmt.Sprint(ack["delivered"]) != "[hermes]" {
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
	m := alice.expect("msg")
	if m["from"] != "hermes" || m["role"] != "userAgent" || m["text"] != "On it: tests first." ||
		m["threadId"] != "t-2026-04-28-xyz" || m["hopCount"] != float64(1) || m["msgId"] != res.MessageID ||
		fmt.Sprint(m["to"]) != "[alice]" {
		t.Fatalf("bot msg %v", m)
	}
	if r := gw.Outbound(t, "nexscope", map[string]any{"op": "typing", "chat_id": "lab", "metadata": map[string]any{}}); !r.Success {
		t.Fatalf("typing %+v", r)
	}

	// /stop from the member interrupts the session's owner.
	alice.sendText(`{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":"t-2026-04-28-xyz","text":"/stop"}`)
	alice.expect("ack")
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
	alice.sendText(`{"type":"ping"}`)
	alice.expect("pong") // and nothing from the foreign gateway before it
}

// A stock gateway knows no platform "nexscope": it reads the inbound's
// source.platform as "relay" and keys the room's sessions so. The connector
// must key them the same way: the gateway's interrupt with its own key
// reaches the session's owner, a member's /stop arrives with that key, and
// the gateway's replies, which it tags "relay" (the platform it learned for
// the chat), reach the room.
func TestStockGatewayKeysNexscopeAsRelay(t *testing.T) {
	tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
	p, err := New(Config{Token: testToken, Rooms: []Room{{Name: "lab", Tenant: "t1"}}},
		platform.Deps{Log: relaytest.TestLogger(t), Clock: newFakeClock(), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "nexscope", "")

	alice := dialMember(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws/lab?name=alice&token="+testToken+"&v=1", nil)
	alice.name = "alice"
	alice.expectPresence("alice", "hermes")
	alice.sendText(`{"type":"msg","msgId":"m1","from":"alice","to":["hermes"],"role":"user","threadId":"t-1","text":"hi"}`)
	alice.expect("ack")
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
	if m := alice.expect("msg"); m["text"] != "stopped" || m["threadId"] != "t-1" {
		t.Fatalf("bot msg %v", m)
	}

	alice.sendText(`{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":"t-1","text":"/stop"}`)
	alice.expect("ack")
	if f := gw.Next(t, contract.TypeInterruptInbound); f.SessionKey != want || f.ChatID != "lab" {
		t.Fatalf("interrupt_inbound for a member's /stop: session_key %q chat_id %q, want %q lab", f.SessionKey, f.ChatID, want)
	}
}

// A member's msg without threadId, answered the way the stock gateway does
// (reply_to the member's msgId, no thread in metadata), is replied to in
// DefaultThread.
func TestReplyWithoutThreadUsesDefaultThread(t *testing.T) {
	tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
	p, err := New(Config{Token: testToken, Rooms: []Room{{Name: "lab", Tenant: "t1"}}},
		platform.Deps{Log: relaytest.TestLogger(t), Clock: newFakeClock(), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "nexscope", "")
	alice := dialMember(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws/lab?name=alice&token="+testToken+"&v=1", nil)
	alice.name = "alice"
	alice.expectPresence("alice", "hermes")

	for _, frame := range []string{
		`{"type":"msg","msgId":"m1","from":"alice","to":["hermes"],"role":"user","text":"no thread"}`,
		`{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":null,"text":"null thread"}`,
	} {
		alice.sendText(frame)
		alice.expect("ack")
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
		m := alice.expect("msg")
		if m["threadId"] != DefaultThread || fmt.Sprint(m["to"]) != "[alice]" || m["hopCount"] != float64(1) ||
			m["text"] != "answer to "+ev.MessageID || m["msgId"] != res.MessageID {
			t.Fatalf("reply %v", m)
		}
	}

	// reply_to a message the bridge does not remember (evicted, or from
	// before a restart): DefaultThread and metadata.user_id, not the room's
	// last inbound (bob's).
	bob := dialMember(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws/lab?name=bob&token="+testToken+"&v=1", nil)
	bob.name = "bob"
	bob.expectPresence("alice", "bob", "hermes")
	alice.expectPresence("alice", "bob", "hermes")
	bob.sendText(`{"type":"msg","msgId":"b1","from":"bob","to":["hermes"],"role":"user","threadId":"tb","text":"mine"}`)
	bob.expect("ack")
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
	if m := alice.expect("msg"); m["threadId"] != DefaultThread || fmt.Sprint(m["to"]) != "[alice]" || m["text"] != "late answer" {
		t.Fatalf("reply %v", m)
	}
	bob.sendText(`{"type":"ping"}`)
	bob.expect("pong") // and no reply meant for alice before it
}
