package nexscope

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

func TestMsgDeliveredVerbatimWithTSAndAcked(t *testing.T) {
	tr := startRelay(t, Config{})
	alice := tr.join(t, "", "alice")
	bob := tr.join(t, "", "bob")
	alice.ExpectPresence("alice", "bob")

	// Unknown fields, odd spacing and escapes must survive byte for byte.
	sent := `{"type":"msg", "msgId":"01HQX5C9","from":"alice","to":["bob","carol"],"role":"userAgent",` +
		`"threadId":"t-2026-04-28-xyz","text":"please refactor auth.ts \u00e9\n","hopCount":0,"attachments":[],` +
		`"x-custom":{"nested":[1,2,{"a":"}"}]}}  `
	alice.SendText(sent)
	got := bob.ReadRaw()
	ts := strconv.FormatInt(tr.clock.Now().UnixMilli(), 10)
	want := strings.TrimRight(sent, " ")
	want = want[:len(want)-1] + `,"ts":` + ts + `}`
	if string(got) != want {
		t.Fatalf("delivered\n%s\nwant\n%s", got, want)
	}
	if !json.Valid(got) {
		t.Fatal("delivered frame is not valid JSON")
	}

	ack := alice.ReadRaw()
	wantAck := `{"type":"ack","msgId":"01HQX5C9","threadId":"t-2026-04-28-xyz","delivered":["bob"],"offline":["carol"]}`
	if string(ack) != wantAck {
		t.Fatalf("ack\n%s\nwant\n%s", ack, wantAck)
	}
}

func TestMsgBroadcast(t *testing.T) {
	tr := startRelay(t, Config{})
	alice := tr.join(t, "", "alice")
	bob := tr.join(t, "", "bob")
	carol := tr.join(t, "", "carol")
	alice.ExpectPresence("alice", "bob")
	alice.ExpectPresence("alice", "bob", "carol")
	bob.ExpectPresence("alice", "bob", "carol")

	bob.SendJSON(msg("m1", "bob", []string{}, "hi all"))
	for _, c := range []*client{alice, carol} {
		m := c.Expect("msg")
		if m["msgId"] != "m1" || m["from"] != "bob" || m["ts"] == nil {
			t.Fatalf("%s got %v", c.Name, m)
		}
	}
	ack := bob.Expect("ack")
	if fmt.Sprint(ack["delivered"]) != "[alice carol]" || fmt.Sprint(ack["offline"]) != "[]" {
		t.Fatalf("broadcast ack %v", ack)
	}
	// The sender never gets its own broadcast: the next frame is the pong.
	bob.SendText(`{"type":"ping"}`)
	bob.Expect("pong")
}

func TestMsgDuplicateAndSelfRecipients(t *testing.T) {
	tr := startRelay(t, Config{})
	alice := tr.join(t, "", "alice")
	bob := tr.join(t, "", "bob")
	alice.ExpectPresence("alice", "bob")
	alice.SendJSON(msg("m1", "alice", []string{"bob", "bob", "b\u006fb", "zed", "zed"}, "x"))
	bob.Expect("msg")
	ack := alice.Expect("ack")
	if fmt.Sprint(ack["delivered"]) != "[bob]" || fmt.Sprint(ack["offline"]) != "[zed]" {
		t.Fatalf("ack %v", ack)
	}
	bob.SendText(`{"type":"ping"}`)
	bob.Expect("pong") // bob got exactly one copy
}

func TestMsgOfflineOnly(t *testing.T) {
	tr := startRelay(t, Config{})
	alice := tr.join(t, "", "alice")
	alice.SendJSON(msg("m9", "alice", []string{"ghost"}, "anyone?"))
	ack := alice.Expect("ack")
	if fmt.Sprint(ack["delivered"]) != "[]" || fmt.Sprint(ack["offline"]) != "[ghost]" || ack["msgId"] != "m9" {
		t.Fatalf("ack %v", ack)
	}
}

func TestPingPong(t *testing.T) {
	tr := startRelay(t, Config{})
	alice := tr.join(t, "", "alice")
	alice.SendText(`{"type":"ping"}`)
	pong := alice.Expect("pong")
	if pong["ts"] != float64(tr.clock.Now().UnixMilli()) {
		t.Fatalf("pong %v", pong)
	}
}

func TestFrameErrors(t *testing.T) {
	tr := startRelay(t, Config{})
	alice := tr.join(t, "", "alice")
	cases := []struct {
		name, frame string
		code        ErrorCode
	}{
		{"not json", `{"type":"msg",`, CodeBadJSON},
		{"not an object", `["msg"]`, CodeBadJSON},
		{"a string", `"msg"`, CodeBadJSON},
		{"invalid utf-8", "{\"type\":\"msg\",\"text\":\"\xff\"}", CodeBadJSON},
		{"unknown type", `{"type":"shout"}`, CodeUnknownType},
		{"no type", `{"from":"alice"}`, CodeUnknownType},
		{"type not a string", `{"type":1}`, CodeUnknownType},
		{"relay-only type", `{"type":"presence"}`, CodeUnknownType},
		{"missing from", `{"type":"msg","msgId":"m","to":["bob"],"text":"x"}`, CodeMissingFrom},
		{"null from", `{"type":"msg","msgId":"m","from":null,"to":["bob"]}`, CodeMissingFrom},
		{"from mismatch", `{"type":"msg","msgId":"m","from":"bob","to":["bob"]}`, CodeFromMismatch},
		{"from not a string", `{"type":"msg","msgId":"m","from":7,"to":["bob"]}`, CodeFromMismatch},
		{"from case spoof", `{"type":"msg","msgId":"m","from":"bob","From":"alice","to":["x"]}`, CodeFromMismatch},
		{"missing to", `{"type":"msg","msgId":"m","from":"alice"}`, CodeMissingTo},
		{"to not an array", `{"type":"msg","msgId":"m","from":"alice","to":"bob"}`, CodeMissingTo},
		{"to of numbers", `{"type":"msg","msgId":"m","from":"alice","to":[1]}`, CodeMissingTo},
		{"file-start missing from", `{"type":"file-start","msgId":"f","to":[],"attachment":{"size":1}}`, CodeMissingFrom},
		{"file-end from mismatch", `{"type":"file-end","msgId":"f","from":"eve"}`, CodeFromMismatch},
	}
	for i, tc := range cases {
		// Strikes accumulate; stay under the limit with a fresh member.
		if i%9 == 8 {
			alice = tr.join(t, "", fmt.Sprintf("alice%d", i))
		}
		frame := strings.ReplaceAll(tc.frame, `"alice"`, strconv.Quote(alice.Name))
		t.Run(tc.name, func(t *testing.T) {
			alice.T = t
			alice.SendText(frame)
			e := expectError(alice, tc.code)
			if msg, _ := e["message"].(string); msg == "" {
				t.Fatalf("error without message: %v", e)
			}
		})
	}
}

func TestStrikeErrorsEchoMsgID(t *testing.T) {
	tr := startRelay(t, Config{})
	alice := tr.join(t, "", "alice")
	alice.SendText(`{"type":"msg","msgId":"m-42","from":"bob","to":[]}`)
	if e := expectError(alice, CodeFromMismatch); e["msgId"] != "m-42" {
		t.Fatalf("error %v does not name the msgId", e)
	}
}

func TestTenStrikesClose4013(t *testing.T) {
	tr := startRelay(t, Config{})
	watcher := tr.join(t, "", "watcher")
	alice := tr.join(t, "", "alice")
	watcher.ExpectPresence("alice", "watcher")
	bad := []string{
		`{"type":"msg","msgId":"m","to":[]}`,
		`{"type":"msg","msgId":"m","from":"bob","to":[]}`,
		`{"type":"msg","msgId":"m","from":"alice"}`,
	}
	for i := range strikeLimit - 1 {
		alice.SendText(bad[i%3])
		alice.Expect("error")
		// Other errors do not count.
		alice.SendText(`{"type":"nope"}`)
		expectError(alice, CodeUnknownType)
		alice.SendText(`{`)
		expectError(alice, CodeBadJSON)
	}
	// Still usable after nine strikes.
	alice.SendJSON(msg("ok", "alice", []string{"watcher"}, "still here"))
	watcher.Expect("msg")
	alice.Expect("ack")
	// The tenth: error frame, then 4013.
	alice.SendText(bad[0])
	expectError(alice, CodeMissingFrom)
	expectClose(alice, CloseTooManyErrors)
	watcher.ExpectPresence("watcher")
}

func TestPayloadCap(t *testing.T) {
	const limit = 64 << 10
	tr := startRelay(t, Config{MaxPayload: limit})
	bob := tr.join(t, "", "bob")

	// A text frame of exactly the limit is fine.
	alice := tr.join(t, "", "alice")
	bob.ExpectPresence("alice", "bob")
	pad := limit - len(`{"type":"msg","msgId":"m","from":"alice","to":["bob"],"text":""}`)
	alice.SendText(`{"type":"msg","msgId":"m","from":"alice","to":["bob"],"text":"` + strings.Repeat("a", pad) + `"}`)
	if got := len(bob.ReadRaw()); got != limit+len(`,"ts":`)+13 {
		t.Fatalf("delivered %d bytes", got)
	}
	alice.Expect("ack")

	for _, typ := range []websocket.MessageType{websocket.MessageText, websocket.MessageBinary} {
		c := tr.join(t, "", "big"+typ.String())
		bob.Expect("presence")
		over := make([]byte, limit+1)
		for i := range over {
			over[i] = 'a'
		}
		if typ == websocket.MessageText {
			c.SendText(string(over))
		} else {
			c.SendBinary(over)
		}
		expectError(c, CodeMsgTooLarge)
		expectClose(c, CloseTooLarge)
		bob.Expect("presence")
	}
}

func TestUnexpectedBinary(t *testing.T) {
	tr := startRelay(t, Config{})
	alice := tr.join(t, "", "alice")
	alice.SendBinary([]byte("stray bytes"))
	expectError(alice, CodeUnexpectedBinary)
	alice.SendText(`{"type":"ping"}`)
	alice.Expect("pong")
}
