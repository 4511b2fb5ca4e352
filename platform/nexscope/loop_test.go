package nexscope

import (
	"fmt"
	"strings"
	"testing"

	"connector/contract"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/vault"
)

// The whole bridge over real sockets: a member's msg to the bot reaches the
// tenant's gateway on /relay as inbound, the gateway's send comes back to
// the member as the bot's msg, and a /stop becomes interrupt_inbound.
func TestBridgeLoopThroughRelay(t *testing.T) {
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	p, err := New(Config{Token: testToken, Clock: newFakeClock(), Rooms: []Room{{Name: "lab", Tenant: "t1"}}},
		platform.Deps{Log: relaytest.TestLogger(t), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	gw := h.Dial(t, "gw1", "s1")
	d := gw.Hello(t, "nexscope", "")
	if d.Platform != "nexscope" || d.SupportsEdit || fmt.Sprint(d.SupportedOps) != "[get_chat_info send typing]" {
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
