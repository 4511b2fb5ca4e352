package nexscope

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/session"
)

func boundConfig() Config {
	return Config{Rooms: []Room{
		{Name: "lab", Tenant: "t1"},
		{Name: "ops", Tenant: "t2", BotName: "opsbot"},
		{Name: "plain"},
	}}
}

func TestBoundRoomHasBotInPresence(t *testing.T) {
	tr := startRelay(t, boundConfig())
	tr.join(t, "lab", "alice")
	c := tr.dialURL(t, "/ws/lab", "name=alice2&token="+testToken, nil)
	c.Name = "alice2"
	c.ExpectPresence("alice", "alice2", "hermes")
	ops := tr.dialURL(t, "/ws/ops", "name=x&token="+testToken, nil)
	ops.Name = "x"
	ops.ExpectPresence("opsbot", "x") // per-room bot name
	// The bot's name is taken in its room, free elsewhere.
	expectError(tr.dialURL(t, "/ws/lab", "name=hermes&token="+testToken, nil), CodeNameTaken)
	tr.join(t, "plain", "hermes")
}

func TestMsgToBotBecomesInbound(t *testing.T) {
	tr := startRelay(t, boundConfig())
	alice := tr.join(t, "lab", "alice")
	alice.SendJSON(map[string]any{
		"type": "msg", "msgId": "01HQX5C9", "from": "alice", "to": []string{"hermes", "ghost"},
		"role": "userAgent", "threadId": "t-9", "text": "please refactor auth.ts", "hopCount": 1,
	})
	ack := alice.Expect("ack")
	if fmt.Sprint(ack["delivered"]) != "[hermes]" || fmt.Sprint(ack["offline"]) != "[ghost]" {
		t.Fatalf("ack %v", ack)
	}
	d := tr.sink.Next(t)
	want := session.Source{
		Platform: "nexscope", ChatID: "lab", ChatName: session.Str("lab"), ChatType: "group",
		UserID: session.Str("alice"), UserName: session.Str("alice"), ThreadID: session.Str("t-9"),
		MessageID: "01HQX5C9", IsBot: true,
	}
	if d.Kind != platform.KindInbound || d.Tenant != "t1" || d.Platform != "nexscope" || d.ChatID != "lab" {
		t.Fatalf("delivery %+v", d)
	}
	if d.Event == nil || d.Event.Text != "please refactor auth.ts" || d.Event.MessageID != "01HQX5C9" ||
		d.Event.MessageType != "" || d.Event.Source != want {
		t.Fatalf("event %+v", d.Event)
	}
	if wantKey := "agent:main:relay:group:lab:t-9"; d.SessionKey != wantKey || session.Key(&want, session.DefaultOptions) != wantKey {
		t.Fatalf("session key %q, want %q", d.SessionKey, wantKey)
	}
	if d.Received.IsZero() {
		t.Fatal("no Received time")
	}
}

func TestBridgeFilters(t *testing.T) {
	tr := startRelay(t, boundConfig())
	alice := tr.join(t, "lab", "alice")
	send := func(id string, to []string, text string, hop any, role string) {
		t.Helper()
		alice.SendJSON(map[string]any{"type": "msg", "msgId": id, "from": "alice", "to": to,
			"role": role, "threadId": "th", "text": text, "hopCount": hop})
		alice.Expect("ack")
	}
	send("hop3", []string{"hermes"}, "loop?", DefaultHopLimit, "userAgent") // at the limit: dropped
	send("hopbad", []string{"hermes"}, "x", "2", "userAgent")               // not a number: dropped
	send("bcast", []string{}, "hello room", 0, "user")                      // broadcast, no mention
	send("near", []string{}, "hey @hermesbot", 0, "user")                   // another name
	send("mention", []string{}, "hey @hermes, look", 0, "user")             // mentioned: bridged
	send("hop2", []string{"hermes"}, "ok", DefaultHopLimit-1, "user")       // under the limit
	send("stop", []string{"hermes"}, " /stop ", 0, "user")                  // interrupt
	send("cmd", []string{"hermes"}, "/help", 0, "user")                     // command

	d := tr.sink.Next(t)
	if d.Event == nil || d.Event.MessageID != "mention" || d.Event.Source.IsBot {
		t.Fatalf("first delivery %+v, want the mention", d.Event)
	}
	if d = tr.sink.Next(t); d.Event == nil || d.Event.MessageID != "hop2" {
		t.Fatalf("second delivery %+v, want hop2", d)
	}
	d = tr.sink.Next(t)
	if d.Kind != platform.KindInterrupt || d.Event != nil || d.ChatID != "lab" || d.SessionKey != "agent:main:relay:group:lab:th" {
		t.Fatalf("interrupt %+v", d)
	}
	if d = tr.sink.Next(t); d.Event == nil || d.Event.MessageType != contract.MessageCommand {
		t.Fatalf("command %+v", d.Event)
	}
}

func TestUnboundRoomHasNoBot(t *testing.T) {
	tr := startRelay(t, boundConfig())
	alice := tr.join(t, "plain", "alice")
	alice.SendJSON(msg("m", "alice", []string{"hermes"}, "anyone?"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("ack %v", ack)
	}
	if _, err := tr.p.ChatTenant(context.Background(), "plain"); !errors.Is(err, platform.ErrUnknownChat) {
		t.Fatalf("ChatTenant(plain) = %v", err)
	}
}

func TestFileToBotBridgesDescription(t *testing.T) {
	tr := startRelay(t, boundConfig())
	alice := tr.join(t, "lab", "alice")
	sendFile(alice, "f1", []string{"hermes"}, 5, 5)
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[hermes]" {
		t.Fatalf("ack %v", ack)
	}
	d := tr.sink.Next(t)
	if d.Event == nil || !strings.HasPrefix(d.Event.Text, "attached: current auth.ts\n[file \"auth.ts\", 5 bytes;") {
		t.Fatalf("event %+v", d.Event)
	}
}

func TestChatTenantAndDescriptor(t *testing.T) {
	tr := startRelay(t, boundConfig())
	for chat, want := range map[string]string{"lab": "t1", "ops": "t2"} {
		if got, err := tr.p.ChatTenant(context.Background(), chat); err != nil || got != want {
			t.Fatalf("ChatTenant(%s) = %q, %v", chat, got, err)
		}
	}
	for _, chat := range []string{"nosuch", "default", ""} {
		if _, err := tr.p.ChatTenant(context.Background(), chat); !errors.Is(err, platform.ErrUnknownChat) {
			t.Fatalf("ChatTenant(%q) = %v", chat, err)
		}
	}
	d := tr.p.Descriptor()
	if d.Platform != "nexscope" || d.SupportsEdit || d.SupportsThreads || d.MaxMessageLength != DefaultMaxText ||
		fmt.Sprint(d.SupportedOps) != "[get_chat_info prompt send send_media typing]" || d.HasOp("edit") {
		t.Fatalf("descriptor %+v", d)
	}
	if tr.p.Name() != "nexscope" {
		t.Fatal(tr.p.Name())
	}
}

// inbound sends alice's msg to the bot and waits for its delivery.
func inbound(t *testing.T, tr *testRelay, c *client, id, thread string, hop int) {
	t.Helper()
	c.SendJSON(map[string]any{"type": "msg", "msgId": id, "from": c.Name, "to": []string{"hermes"},
		"role": "user", "threadId": thread, "text": "q", "hopCount": hop})
	c.Expect("ack")
	tr.sink.Next(t)
}

func send(tr *testRelay, tenant string, a contract.Action) contract.Result {
	if a.Op == "" {
		a.Op = contract.OpSend
	}
	return tr.p.Execute(context.Background(), tenant, &a)
}

func TestEgressSendAddressing(t *testing.T) {
	tr := startRelay(t, Config{MaxText: 16, Rooms: []Room{{Name: "lab", Tenant: "t1"}}})
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.ExpectPresence("alice", "bob", "hermes")

	// The very first send has nothing to answer and no thread: everyone
	// online, in DefaultThread.
	if r := send(tr, "t1", contract.Action{ChatID: "lab", Content: "hi"}); !r.Success {
		t.Fatalf("send without thread: %+v", r)
	}
	for _, c := range []*client{alice, bob} {
		if m := c.Expect("msg"); fmt.Sprint(m["to"]) != "[]" || m["threadId"] != DefaultThread || m["hopCount"] != float64(0) {
			t.Fatalf("%s got %v", c.Name, m)
		}
	}
	// A thread and a user: to that user, hopCount 0.
	r := send(tr, "t1", contract.Action{ChatID: "lab", Content: "hello bob",
		Metadata: contract.Metadata{ThreadID: "new", UserID: "bob"}})
	m := bob.Expect("msg")
	if !r.Success || m["msgId"] != r.MessageID || len(r.MessageID) != 26 || m["from"] != "hermes" ||
		fmt.Sprint(m["to"]) != "[bob]" || m["threadId"] != "new" || m["hopCount"] != float64(0) ||
		m["role"] != "userAgent" || m["text"] != "hello bob" || m["ts"] == nil {
		t.Fatalf("result %+v msg %v", r, m)
	}
	// A thread alone: everyone online.
	send(tr, "t1", contract.Action{ChatID: "lab", Content: "all", Metadata: contract.Metadata{ThreadID: "new"}})
	for _, c := range []*client{alice, bob} {
		if m := c.Expect("msg"); fmt.Sprint(m["to"]) != "[]" {
			t.Fatalf("%s got %v", c.Name, m)
		}
	}

	inbound(t, tr, alice, "a1", "th-a", 1)
	inbound(t, tr, bob, "b1", "th-b", 0)

	// reply_to names the message: its author, its thread, its hop + 1.
	send(tr, "t1", contract.Action{ChatID: "lab", Content: "re a1", ReplyTo: "a1"})
	if m := alice.Expect("msg"); fmt.Sprint(m["to"]) != "[alice]" || m["threadId"] != "th-a" || m["hopCount"] != float64(2) {
		t.Fatalf("reply to a1: %v", m)
	}
	// metadata.thread_id alone: the last inbound of that thread.
	send(tr, "t1", contract.Action{ChatID: "lab", Content: "in th-a", Metadata: contract.Metadata{ThreadID: "th-a"}})
	if m := alice.Expect("msg"); m["threadId"] != "th-a" || m["hopCount"] != float64(2) {
		t.Fatalf("thread reply: %v", m)
	}
	// Nothing: the room's last inbound (bob's).
	send(tr, "t1", contract.Action{ChatID: "lab", Content: "latest"})
	if m := bob.Expect("msg"); fmt.Sprint(m["to"]) != "[bob]" || m["threadId"] != "th-b" || m["hopCount"] != float64(1) {
		t.Fatalf("default reply: %v", m)
	}
	// Long content is split on rune boundaries into MaxText-byte msgs.
	long := strings.Repeat("é", 10) // 20 bytes
	r = send(tr, "t1", contract.Action{ChatID: "lab", Content: long, ReplyTo: "b1"})
	first, second := bob.Expect("msg"), bob.Expect("msg")
	if first["msgId"] != r.MessageID || first["text"].(string)+second["text"].(string) != long || len(first["text"].(string)) != 16 {
		t.Fatalf("split: %v / %v", first, second)
	}

	// The recipient left: nothing is queued.
	_ = alice.WS.CloseNow()
	bob.ExpectPresence("bob", "hermes")
	if r := send(tr, "t1", contract.Action{ChatID: "lab", Content: "gone?", ReplyTo: "a1"}); r.Success || r.Code != contract.CodeUnavailable {
		t.Fatalf("send to offline: %+v", r)
	}
	if r := send(tr, "t1", contract.Action{ChatID: "lab"}); r.Success || r.Code != contract.CodeBadRequest {
		t.Fatalf("empty send: %+v", r)
	}
}

func TestEgressOtherOps(t *testing.T) {
	tr := startRelay(t, boundConfig())
	tr.join(t, "lab", "alice")
	for _, tc := range []struct {
		tenant string
		a      contract.Action
		want   contract.Result
	}{
		{"t1", contract.Action{Op: "typing", ChatID: "lab"}, contract.OK("")},
		{"t1", contract.Action{Op: "get_chat_info", ChatID: "lab"},
			contract.Result{Success: true, ChatInfo: &contract.ChatInfo{Name: "lab", Type: "group"}}},
		{"t1", contract.Action{Op: "edit", ChatID: "lab", MessageID: "x", Content: "y"},
			contract.Failed(contract.CodeUnsupportedOp, "nexscope does not support this op")},
		{"t2", contract.Action{Op: "send", ChatID: "lab", Content: "x"}, contract.Declined("nexscope")},
		{"t2", contract.Action{Op: "get_chat_info", ChatID: "lab"}, contract.Declined("nexscope")},
		{"t1", contract.Action{Op: "send", ChatID: "plain", Content: "x"}, contract.Declined("nexscope")},
		{"t1", contract.Action{Op: "send", ChatID: "nosuch", Content: "x"}, contract.Declined("nexscope")},
	} {
		got, _ := json.Marshal(tr.p.Execute(context.Background(), tc.tenant, &tc.a))
		want, _ := json.Marshal(tc.want)
		if string(got) != string(want) {
			t.Errorf("%s %s for %s: %s, want %s", tc.a.Op, tc.a.ChatID, tc.tenant, got, want)
		}
	}
}

// The ack lists the bot as delivered only for a message the bridge hands to
// the tenant; a message addressed to the bot that it drops (hop limit,
// malformed) lists it as offline, and a broadcast that does not mention it
// lists it in neither.
func TestAckListsBotOnlyWhenBridged(t *testing.T) {
	tr := startRelay(t, boundConfig())
	bob := tr.join(t, "lab", "bob")
	alice := tr.join(t, "lab", "alice")
	bob.ExpectPresence("alice", "bob", "hermes")
	ackOf := func(frame string) string {
		t.Helper()
		alice.SendText(frame)
		ack := alice.Expect("ack")
		return fmt.Sprintf("delivered %v offline %v", ack["delivered"], ack["offline"])
	}
	for _, tc := range []struct{ name, frame, want string }{
		{"hop limit", `{"type":"msg","msgId":"h","from":"alice","to":["hermes"],"role":"userAgent","threadId":"t","text":"x","hopCount":3}`,
			"delivered [] offline [hermes]"},
		{"numeric msgId", `{"type":"msg","msgId":7,"from":"alice","to":["hermes"],"role":"user","threadId":"t","text":"x"}`,
			"delivered [] offline [hermes]"},
		{"empty msgId", `{"type":"msg","msgId":"","from":"alice","to":["hermes"],"role":"user","threadId":"t","text":"x"}`,
			"delivered [] offline [hermes]"},
		{"non-string text", `{"type":"msg","msgId":"n","from":"alice","to":["hermes"],"role":"user","threadId":"t","text":{"a":1}}`,
			"delivered [] offline [hermes]"},
		{"non-string threadId", `{"type":"msg","msgId":"n2","from":"alice","to":["hermes"],"role":"user","threadId":5,"text":"x"}`,
			"delivered [] offline [hermes]"},
		{"bad hopCount", `{"type":"msg","msgId":"n3","from":"alice","to":["hermes","bob"],"role":"user","threadId":"t","text":"x","hopCount":"1"}`,
			"delivered [bob] offline [hermes]"},
		{"mention over the hop limit", `{"type":"msg","msgId":"b1","from":"alice","to":[],"role":"user","threadId":"t","text":"@hermes hi","hopCount":9}`,
			"delivered [bob] offline [hermes]"},
		{"broadcast without mention", `{"type":"msg","msgId":"b2","from":"alice","to":[],"role":"user","threadId":"t","text":"hi all"}`,
			"delivered [bob] offline []"},
		{"bridged", `{"type":"msg","msgId":"ok","from":"alice","to":["hermes"],"role":"user","threadId":"t","text":"x","hopCount":2}`,
			"delivered [hermes] offline []"},
		{"bridged mention", `{"type":"msg","msgId":"ok2","from":"alice","to":[],"role":"user","threadId":"t","text":"@hermes hi"}`,
			"delivered [bob hermes] offline []"},
	} {
		if got := ackOf(tc.frame); got != tc.want {
			t.Errorf("%s: ack %s, want %s", tc.name, got, tc.want)
		}
	}
	// Only the two bridged messages reached the tenant.
	for _, id := range []string{"ok", "ok2"} {
		if d := tr.sink.Next(t); d.Event == nil || d.Event.MessageID != id {
			t.Fatalf("delivery %+v, want %s", d.Event, id)
		}
	}

	// A file to the bot over the hop limit: the bot is offline in the ack.
	start := fileStart("f1", "alice", []string{"hermes", "bob"}, 2)
	start["hopCount"] = DefaultHopLimit
	alice.SendJSON(start)
	alice.SendBinary([]byte("ok"))
	alice.SendJSON(fileEnd("f1", "alice"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[bob]" || fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("file ack %v", ack)
	}
	// The next delivery is the next bridged message, not the file.
	inbound(t, tr, alice, "after", "t", 0)
}

// Before Run (or after it) nothing is bridged, so the bot is offline.
func TestAckBotOfflineWhileBridgeNotRunning(t *testing.T) {
	tr := newRelay(t, boundConfig())
	alice := tr.join(t, "lab", "alice")
	alice.SendJSON(msg("m", "alice", []string{"hermes"}, "anyone?"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[]" || fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("ack %v", ack)
	}
}

// The ack is the sender's confirmation, so it lists the bot as delivered
// only once the sink took the message: when the sink fails, the bot is
// offline, for a msg and for a file.
func TestAckBotOfflineWhenTheSinkFails(t *testing.T) {
	tr := newRelay(t, boundConfig())
	sink := platformtest.NewSink(4) // whose store fails: it takes no delivery
	sink.RefuseAll(true)
	t.Cleanup(tr.run(t, sink))
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	bob.DiscardInBackground()
	alice.ExpectPresence("alice", "bob", "hermes")
	alice.SendJSON(msg("m1", "alice", []string{"hermes", "bob"}, "hi"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[bob]" || fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("msg ack %v, want bob delivered and hermes offline", ack)
	}
	alice.SendJSON(msg("m2", "alice", []string{}, "@hermes hi"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[bob]" || fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("mention ack %v, want bob delivered and hermes offline", ack)
	}
	alice.SendJSON(fileStart("f1", "alice", []string{"hermes", "bob"}, 2))
	alice.SendBinary([]byte("ok"))
	alice.SendJSON(fileEnd("f1", "alice"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[bob]" || fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("file ack %v, want bob delivered and hermes offline", ack)
	}
	if n := sink.Calls(); n != 3 {
		t.Fatalf("the sink was asked %d times, want 3", n)
	}
}

// A room rebound to another tenant forgets the previous tenant's open
// prompt: a member's "/<option_id>" then reaches the new tenant as a plain
// command, not as a prompt_response naming the old tenant's prompt id and
// labels.
func TestRebindForgetsOpenPrompt(t *testing.T) {
	tr := startRelay(t, boundConfig())
	alice := tr.join(t, "lab", "alice")
	var a contract.Action
	if err := json.Unmarshal([]byte(`{"op":"prompt","chat_id":"lab","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"t1prompt.1","metadata":{"user_id":"alice"},
		"options":[{"id":"once","label":"Approve t1's deploy"},{"id":"deny","label":"Deny"}]}`), &a); err != nil {
		t.Fatal(err)
	}
	if res := tr.p.Execute(context.Background(), "t1", &a); !res.Success {
		t.Fatalf("prompt = %+v", res)
	}
	alice.Expect("msg")
	if err := tr.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	alice.ExpectPresence("alice", "hermes") // t2's bot
	alice.SendText(`{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":"th1","text":"/once","hopCount":0}`)
	alice.Expect("ack")
	d := tr.sink.Next(t)
	if d.Tenant != "t2" || d.Event == nil || d.Event.PromptResponse != nil || d.Event.Text != "/once" {
		t.Fatalf("delivery to %s: %+v", d.Tenant, d.Event)
	}
}

// A message to the bot that the sink refused never reached the tenant, so
// the bridge does not count it: it leaves the room's open prompt open (the
// member's "/<option_id>" sent again answers it) and is not the inbound a
// gateway's send without reply_to answers.
func TestRefusedDeliveryIsNotRemembered(t *testing.T) {
	tr := newRelay(t, boundConfig())
	sink := platformtest.NewSink(4)
	t.Cleanup(tr.run(t, sink))
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.ExpectPresence("alice", "bob", "hermes")
	var a contract.Action
	if err := json.Unmarshal([]byte(`{"op":"prompt","chat_id":"lab","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"p1","metadata":{"user_id":"alice"},
		"options":[{"id":"once","label":"Approve"},{"id":"deny","label":"Deny"}]}`), &a); err != nil {
		t.Fatal(err)
	}
	if res := tr.p.Execute(context.Background(), "t1", &a); !res.Success {
		t.Fatalf("prompt = %+v", res)
	}
	alice.Expect("msg")

	sink.RefuseAll(true)
	alice.SendJSON(msg("m1", "alice", []string{"hermes"}, "/once"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("ack %v, want hermes offline", ack)
	}
	sink.RefuseAll(false)
	alice.SendJSON(msg("m2", "alice", []string{"hermes"}, "/once"))
	alice.Expect("ack")
	if d := sink.Next(t); d.Event == nil || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "p1" {
		t.Fatalf("alice's answer sent again: %+v, want the prompt_response of p1", d.Event)
	}

	sink.RefuseAll(true)
	bob.SendJSON(msg("m3", "bob", []string{"hermes"}, "lost"))
	if ack := bob.Expect("ack"); fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("ack %v, want hermes offline", ack)
	}
	sink.RefuseAll(false)
	if res := tr.p.Execute(context.Background(), "t1", &contract.Action{Op: contract.OpSend, ChatID: "lab", Content: "done"}); !res.Success {
		t.Fatalf("send = %+v", res)
	}
	if m := alice.Expect("msg"); fmt.Sprint(m["to"]) != "[alice]" {
		t.Fatalf("the bot's reply %v, want it to alice (the last inbound the tenant got)", m)
	}
}

// TestSendOfAnEarlierTenant: the relay took t1's send from its gateway
// (platform.WithCreation, t1 as first created), and t1 was deleted and
// made again under its id before it ran. The send is declined and the
// room gets nothing; the new t1's goes out. Before, nexscope (no grants)
// ran it: the earlier tenant's gateway spoke as the bot in the new
// tenant's room.
func TestSendOfAnEarlierTenant(t *testing.T) {
	tr := startRelay(t, boundConfig())
	first := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	bindings := []platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}
	tr.setTenants(map[string]time.Time{"t1": first})
	if err := tr.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.ExpectPresence("alice", "bob", "hermes")
	again := first.Add(time.Minute)
	tr.setTenants(map[string]time.Time{"t1": again}) // deleted and created again
	if err := tr.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	send := &contract.Action{Op: contract.OpSend, ChatID: "lab", Content: "the earlier t1's"}
	if res := tr.p.Execute(platform.WithCreation(t.Context(), first), "t1", send); res != contract.Declined(platformName) {
		t.Fatalf("the earlier t1's send: %+v, want declined", res)
	}
	send.Content = "the new t1's"
	if res := tr.p.Execute(platform.WithCreation(t.Context(), again), "t1", send); !res.Success {
		t.Fatalf("the new t1's send: %+v", res)
	}
	if m := alice.Expect("msg"); m["text"] != "the new t1's" {
		t.Fatalf("alice got %v first, want the new t1's send", m)
	}
	bob.Expect("msg")
}
