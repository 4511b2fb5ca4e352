package contract

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"connector/descriptor"
	"connector/session"
)

func TestDecodeGatewayFrameExactWireExamples(t *testing.T) {
	// Frames exactly as hermes-wire.md shows the gateway sending them.
	cases := []struct {
		line  string
		check func(t *testing.T, f GatewayFrame)
	}{
		{`{"type": "hello", "platform": "telegram", "botId": "12345"}` + "\n", func(t *testing.T, f GatewayFrame) {
			if f.Type != TypeHello || f.Platform != "telegram" || f.BotID != "12345" || f.CommandManifest != nil {
				t.Fatalf("%+v", f)
			}
		}},
		{`{"type": "hello", "platform": "discord", "botId": "app-1", "command_manifest": [{"name": "new", "description": "Start a new conversation"}]}`, func(t *testing.T, f GatewayFrame) {
			if f.Platform != "discord" || !bytes.Contains(f.CommandManifest, []byte(`"new"`)) {
				t.Fatalf("%+v", f)
			}
		}},
		{`{"type": "outbound", "requestId": "c9808c0e749040968d55764bdf017ba3", "action": {"op": "send", "chat_id": "999", "content": "h\u00e9llo \ud83d\udc40", "reply_to": null, "metadata": {}}, "platform": "discord", "botId": "app-1"}`, func(t *testing.T, f GatewayFrame) {
			a, err := DecodeAction(f.Action)
			if err != nil || f.RequestID != "c9808c0e749040968d55764bdf017ba3" || f.Platform != "discord" ||
				a.Op != OpSend || a.ChatID != "999" || a.Content != "héllo 👀" || a.ReplyTo != "" {
				t.Fatalf("%+v %+v %v", f, a, err)
			}
		}},
		{`{"type": "interrupt", "session_key": "agent:main:discord:group:1:2", "reason": null}`, func(t *testing.T, f GatewayFrame) {
			if f.SessionKey != "agent:main:discord:group:1:2" || f.Reason != nil {
				t.Fatalf("%+v", f)
			}
		}},
		{`{"type": "going_idle"}`, func(t *testing.T, f GatewayFrame) {
			if f.Type != TypeGoingIdle {
				t.Fatalf("%+v", f)
			}
		}},
		{`{"type": "inbound_ack", "bufferId": "buf-7"}`, func(t *testing.T, f GatewayFrame) {
			if f.BufferID != "buf-7" {
				t.Fatalf("%+v", f)
			}
		}},
		{`{"type": "inbound_ack", "bufferId": 5}`, func(t *testing.T, f GatewayFrame) {
			if f.BufferID != "5" {
				t.Fatalf("numeric bufferId read as %q", f.BufferID)
			}
		}},
		{`{"type": "from_the_future", "extra": {"nested": [1, 2]}}`, func(t *testing.T, f GatewayFrame) {
			if f.Type != "from_the_future" {
				t.Fatalf("%+v", f)
			}
		}},
	}
	for _, c := range cases {
		f, err := DecodeGatewayFrame([]byte(c.line))
		if err != nil {
			t.Fatalf("%s: %v", c.line, err)
		}
		c.check(t, f)
	}
}

func TestDecodeGatewayFrameRejectsGarbage(t *testing.T) {
	for _, line := range []string{"", "not json", "[1,2]", `"str"`, `{"type": "hello"`, `{"type": 5}`, `{"requestId": {"a":1}}`} {
		if _, err := DecodeGatewayFrame([]byte(line)); err == nil {
			t.Errorf("DecodeGatewayFrame(%q) accepted", line)
		}
	}
}

func TestDecodeActionTolerance(t *testing.T) {
	a, err := DecodeAction(json.RawMessage(`{"op": "edit", "chat_id": 42, "message_id": 7, "content": "x", "metadata": null, "future_field": true}`))
	if err != nil || a.ChatID != "42" || a.MessageID != "7" {
		t.Fatalf("%+v %v", a, err)
	}
	for _, raw := range []string{``, `null`, `"send"`, `{"chat_id": "1"}`, `{"op": "send", "chat_id": [1]}`} {
		if _, err := DecodeAction(json.RawMessage(raw)); err == nil {
			t.Errorf("DecodeAction(%s) accepted", raw)
		}
	}
}

func TestEncodedFramesAreNewlineTerminatedJSON(t *testing.T) {
	ev := &Event{Text: "héllo\n\"quoted\" \u2028", MessageID: "m1",
		Source:  session.Source{Platform: "discord", ChatID: "c1", ChatType: "group", UserID: session.Str("u1")},
		ReplyTo: &ReplyTo{Text: "earlier", Author: "Bob", IsOwn: true}, MediaURLs: []string{"https://x/a.png"},
		Context: []ContextMessage{{Text: "c", Source: ContextAuthor{UserName: "carol"}}}}
	frames := map[string][]byte{
		"inbound":           AppendInboundEvent(nil, "b-1", ev.AppendJSON(nil)),
		"outbound_result":   AppendOutboundResult(nil, "r1", Declined("discord")),
		"interrupt_inbound": AppendInterruptInbound(nil, "agent:main:x", "c1"),
		"descriptor":        EncodeDescriptor(descriptor.Telegram([]string{OpSend})),
		"going_idle_ack":    []byte(GoingIdleAck),
		"passthrough":       AppendPassthroughForward(nil, "b-2", []byte(`{"platform":"discord"}`)),
	}
	for name, f := range frames {
		if !bytes.HasSuffix(f, []byte("\n")) || bytes.Count(f, []byte("\n")) != 1 {
			t.Errorf("%s: not exactly one trailing newline: %q", name, f)
		}
		var m map[string]any
		if err := json.Unmarshal(f, &m); err != nil {
			t.Errorf("%s: invalid JSON: %v\n%s", name, err, f)
		}
	}
	var back struct {
		Type     string `json:"type"`
		BufferID string `json:"bufferId"`
		Event    Event  `json:"event"`
	}
	if err := json.Unmarshal(frames["inbound"], &back); err != nil || back.Event.Text != ev.Text ||
		back.BufferID != "b-1" || back.Event.Source.ChatID != "c1" || !back.Event.ReplyTo.IsOwn {
		t.Fatalf("inbound round trip: %+v %v", back, err)
	}
	if !strings.Contains(string(frames["outbound_result"]), `"code":"egress_declined"`) {
		t.Fatalf("decline: %s", frames["outbound_result"])
	}
}

// TestPassthroughBufferID reads back the bufferId of a passthrough frame
// only.
func TestPassthroughBufferID(t *testing.T) {
	if id, ok := PassthroughBufferID(AppendPassthroughForward(nil, "e1-42", []byte(`{"path":"\"x\""}`))); !ok || id != "e1-42" {
		t.Fatalf("passthrough: %q %v", id, ok)
	}
	for _, f := range [][]byte{
		AppendPassthroughForward(nil, "", []byte(`{"platform":"discord"}`)),
		AppendInboundEvent(nil, "e1-43", []byte(`{}`)),
		[]byte(`{"type":"passthrough_forward","bufferId":"e1-4`),
	} {
		if id, ok := PassthroughBufferID(f); ok {
			t.Errorf("%s: bufferId %q", f, id)
		}
	}
}

// A bufferId given as bytes frames as the same string does, escaped when it
// has to be.
func TestBufferIDAsBytes(t *testing.T) {
	for _, id := range []string{"e1-42", `a"b`, "tab\there", "\u00e9t\u00e9", "bad \xff"} {
		if s, b := AppendInboundEvent(nil, id, []byte(`{}`)), AppendInboundEvent(nil, []byte(id), []byte(`{}`)); string(s) != string(b) {
			t.Errorf("inbound under %q: %s as a string, %s as bytes", id, s, b)
		}
		s, b := AppendPassthroughForward(nil, id, []byte(`{}`)), AppendPassthroughForward(nil, []byte(id), []byte(`{}`))
		if string(s) != string(b) {
			t.Errorf("passthrough under %q: %s as a string, %s as bytes", id, s, b)
		}
		var f struct{ BufferID string }
		if err := json.Unmarshal(b, &f); err != nil || f.BufferID != strings.ToValidUTF8(id, "\uFFFD") {
			t.Errorf("passthrough under %q reads back as %q, %v", id, f.BufferID, err)
		}
	}
}

func TestSplitLines(t *testing.T) {
	var got []string
	SplitLines([]byte("a\n\n  \nb\r\nc"), func(l []byte) { got = append(got, string(l)) })
	if strings.Join(got, "|") != "a|b\r|c" {
		t.Fatalf("%q", got)
	}
}

func TestTruncateReason(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	r := UnsupportedPlatform(long).Reason
	if len(r) > MaxCloseReasonBytes || !strings.HasPrefix(long, r) || !json.Valid([]byte(`"`+r+`"`)) {
		t.Fatalf("truncated to %d bytes: %q", len(r), r)
	}
}

func FuzzDecodeGatewayFrame(f *testing.F) {
	for _, s := range []string{
		`{"type": "hello", "platform": "telegram", "botId": "12345"}`,
		`{"type": "outbound", "requestId": "c98", "action": {"op": "send", "chat_id": "999", "content": "h\u00e9llo", "reply_to": null, "metadata": {}}, "platform": "discord"}`,
		`{"type": "interrupt", "session_key": "k", "reason": null}`,
		`{"type": "inbound_ack", "bufferId": 5}`,
		`{"type": "going_idle"}`,
		`[1]`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Every line of a message, split the way the relay splits it, must
		// decode or fail cleanly; a decoded outbound's action likewise.
		SplitLines(data, func(line []byte) {
			fr, err := DecodeGatewayFrame(line)
			if err != nil {
				return
			}
			if fr.Type == TypeOutbound {
				if a, err := DecodeAction(fr.Action); err == nil && a.Op == "" {
					t.Fatalf("action without op decoded: %q", line)
				}
			}
		})
	})
}

// decodeSlow is the general decoding path, for comparison with DecodeAck.
func decodeSlow(line []byte) (GatewayFrame, error) {
	var f GatewayFrame
	err := json.Unmarshal(line, &f)
	return f, err
}

func TestDecodeAckFastPathAgreesWithJSON(t *testing.T) {
	for _, line := range []string{
		`{"type": "inbound_ack", "bufferId": "a1b2c3d4-17"}`,
		`{"type": "inbound_ack", "bufferId": ""}`,
		`{"type": "inbound_ack", "bufferId": "x\"y"}`,
		`{"type": "inbound_ack", "bufferId": "\u00e9"}`,
		`{"type": "inbound_ack", "bufferId": "a"}  `,
		`{"type": "inbound_ack", "bufferId": "a", "x": 1}`,
		`{"type": "inbound_ack", "bufferId": "a"`,
	} {
		got, gerr := DecodeGatewayFrame([]byte(line))
		want, werr := decodeSlow([]byte(strings.TrimSpace(line)))
		if (gerr == nil) != (werr == nil) || got.Type != want.Type || got.BufferID != want.BufferID {
			t.Errorf("%s: fast %+v %v, json %+v %v", line, got, gerr, want, werr)
		}
	}
	if _, ok := DecodeAck([]byte(`{"type": "inbound_ack", "bufferId": "a1b2c3d4-17"}`)); !ok {
		t.Fatal("the gateway's own spelling must take the fast path")
	}
}

func FuzzDecodeAck(f *testing.F) {
	f.Add([]byte(`{"type": "inbound_ack", "bufferId": "a1b2c3d4-17"}`))
	f.Add([]byte(`{"type": "inbound_ack", "bufferId": "\u0041"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, ok := DecodeAck(line)
		if !ok {
			return
		}
		slow, err := decodeSlow(line)
		if err != nil || slow.Type != TypeInboundAck || string(slow.BufferID) != string(fast) {
			t.Fatalf("%q: fast %+v, json %+v %v", line, fast, slow, err)
		}
	})
}

// TestDecodeAckAllocatesOnce: the gateway's most frequent frame decodes
// allocating its bufferId only; the frame json.Unmarshal fills is declared
// past the ack path (declared before it, every ack allocates it too: 2).
func TestDecodeAckAllocatesOnce(t *testing.T) {
	line := []byte(`{"type": "inbound_ack", "bufferId": "epoch-12345"}`)
	ok := true
	n := testing.AllocsPerRun(1000, func() {
		f, err := DecodeGatewayFrame(line)
		ok = ok && err == nil && string(f.BufferID) == "epoch-12345"
	})
	if !ok {
		t.Fatal("DecodeGatewayFrame did not decode the ack")
	}
	if n != 1 {
		t.Fatalf("decoding an inbound_ack allocates %v times, want 1", n)
	}
	// DecodeAck returns the bufferId as a slice of the line: nothing.
	if n := testing.AllocsPerRun(1000, func() {
		id, _ := DecodeAck(line)
		ok = ok && string(id) == "epoch-12345"
	}); n != 0 || !ok {
		t.Fatalf("DecodeAck allocates %v times (decoded: %v), want 0", n, ok)
	}
}
