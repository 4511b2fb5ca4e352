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

// TestPromptTextFormRoundTrip: nexscope has no buttons, so a prompt reaches
// the member as its documented text form; the member's "/<option_id>"
// comes back to the gateway as a prompt_response from that member, once.
func TestPromptTextFormRoundTrip(t *testing.T) {
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	p, err := New(Config{Token: testToken, Rooms: []Room{{Name: "lab", Tenant: "t1"}}},
		platform.Deps{Log: relaytest.TestLogger(t), Clock: newFakeClock(), Vault: vault.NewMemory(vault.Config{}), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.Start(t, tenants, p)
	gw := h.Dial(t, "gw1", "s1")
	if d := gw.Hello(t, "nexscope", ""); !d.HasOp("prompt") {
		t.Fatalf("descriptor ops %v lack prompt", d.SupportedOps)
	}
	alice := dialMember(t, "ws"+strings.TrimPrefix(h.URL, "http")+"/ws/lab?name=alice&token="+testToken+"&v=1", nil)
	alice.name = "alice"
	alice.expectPresence("alice", "hermes")
	alice.sendText(`{"type":"msg","msgId":"m1","from":"alice","to":["hermes"],"role":"user","threadId":"th1","text":"deploy please","hopCount":0}`)
	alice.expect("ack")
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
	m := alice.expect("msg")
	if m["text"] != "Run make deploy?\n\n/once: Approve once\n/deny: Deny" || m["msgId"] != res.MessageID || fmt.Sprint(m["to"]) != "[alice]" {
		t.Fatalf("prompt msg %v", m)
	}

	alice.sendText(`{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":"th1","text":" /deny ","hopCount":0}`)
	alice.expect("ack")
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
	alice.sendText(`{"type":"msg","msgId":"m3","from":"alice","to":["hermes"],"role":"user","threadId":"th1","text":"/deny","hopCount":0}`)
	alice.expect("ack")
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
	alice.sendText(`{"type":"ping"}`)
	alice.expect("pong") // nothing from the refused prompts before it
}
