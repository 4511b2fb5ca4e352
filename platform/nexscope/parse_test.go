package nexscope

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

var seedFrames = []string{
	`{"type":"msg","msgId":"01HQX5C9...","from":"alice","to":["bob"],"role":"userAgent","threadId":"t-2026-04-28-xyz","text":"please refactor auth.ts, write tests first","hopCount":0,"attachments":[]}`,
	`{"type":"file-start","msgId":"01HQX5CA...","from":"alice","to":["bob"],"role":"userAgent","threadId":"t-2026-04-28-xyz","text":"attached: current auth.ts","hopCount":0,"attachment":{"name":"auth.ts","size":12345,"mime":"text/x-typescript","sha256":"a3f9...optional","chunkSize":65536}}`,
	`{"type":"file-end","msgId":"01HQX5CA...","from":"alice"}`,
	`{"type":"ping"}`,
	` { "type" : "msg" , "fr\u006fm" : "alice", "From":"bob", "to" : [ "b\"ob" , "c\\d" ] , "x":{"y":[1,{"}":"]"}]}} `,
	`{"type":"msg","from":"alice","from":"bob"}`,
	`{"type":"msg","to":[1,"x"],"hopCount":1e2,"text":null}`,
	`[1,2]`, `"x"`, `{}`, `{"type":`, "{\"type\":\"\xff\"}",
}

func TestParseFrameFields(t *testing.T) {
	f, err := parseFrame([]byte(seedFrames[4]))
	if err != nil {
		t.Fatal(err)
	}
	// The escaped "from" is from; "From" is another member entirely.
	if string(f.from) != `"alice"` || string(f.typ) != `"msg"` || string(f.to) != `[ "b\"ob" , "c\\d" ]` {
		t.Fatalf("from %s type %s to %s", f.from, f.typ, f.to)
	}
	var names []string
	if !namesOf(f.to, func(_, n []byte) { names = append(names, string(n)) }) || strings.Join(names, "|") != `b"ob|c\d` {
		t.Fatalf("names %q", names)
	}
	f, _ = parseFrame([]byte(seedFrames[5]))
	if string(f.from) != `"bob"` {
		t.Fatalf("duplicate from: got %s, want the last", f.from)
	}
	for _, bad := range []string{`[1,2]`, `"x"`, `{"type":`, "{\"a\":\"\xff\"}", ``, `  `} {
		if _, err := parseFrame([]byte(bad)); err == nil {
			t.Errorf("parseFrame(%q) accepted", bad)
		}
	}
}

func TestIntValueAndAttachmentSize(t *testing.T) {
	for raw, want := range map[string]int64{`0`: 0, `12345`: 12345, `1e3`: 1000, `104857600`: 104857600, `2.0`: 2} {
		if n, ok := intValue([]byte(raw)); !ok || n != want {
			t.Errorf("intValue(%s) = %d, %v", raw, n, ok)
		}
	}
	for _, raw := range []string{``, `-1`, `1.5`, `"1"`, `null`, `true`, `1e300`} {
		if n, ok := intValue([]byte(raw)); ok {
			t.Errorf("intValue(%s) = %d, want rejected", raw, n)
		}
	}
	if n, ok := attachmentSize([]byte(`{"name":"a","size":7,"Size":9}`)); !ok || n != 7 {
		t.Errorf("attachmentSize = %d, %v", n, ok)
	}
}

func TestAppendWithTS(t *testing.T) {
	for _, raw := range []string{`{"type":"msg"}`, "{\"type\":\"msg\"}\n \t", `{"type":"x","ts":1}`, `{"a":{"b":"}"},"type":"y"}`} {
		out := appendWithTS(nil, []byte(raw), 1714000000000)
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%s -> %s: %v", raw, out, err)
		}
		if m["ts"] != float64(1714000000000) {
			t.Fatalf("%s -> %s: ts %v", raw, out, m["ts"])
		}
	}
}

func TestReadMessageLimit(t *testing.T) {
	var scratch []byte
	for _, n := range []int{0, 1, 4095, 4096, 4097, 100000} {
		data := bytes.Repeat([]byte{'z'}, n)
		got, err := readMessage(iotest.HalfReader(bytes.NewReader(data)), &scratch, 100000)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("n=%d: %d bytes, %v", n, len(got), err)
		}
	}
	if _, err := readMessage(bytes.NewReader(make([]byte, 100001)), &scratch, 100000); !errors.Is(err, errTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := readMessage(iotest.ErrReader(io.ErrUnexpectedEOF), &scratch, 10); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("read error: %v", err)
	}
}

// FuzzParseFrame checks the hand-written scanner against encoding/json: for
// every frame it accepts, each field it extracts is exactly the value
// encoding/json finds under that exact key (the last duplicate winning),
// and splicing ts keeps the frame valid JSON with every other member intact.
func FuzzParseFrame(f *testing.F) {
	for _, s := range seedFrames {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := parseFrame(data)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("parseFrame accepted %q that encoding/json rejects: %v", data, err)
		}
		for key, got := range map[string][]byte{"type": fr.typ, "msgId": fr.msgID, "from": fr.from, "to": fr.to,
			"threadId": fr.threadID, "role": fr.role, "text": fr.text, "hopCount": fr.hopCount, "attachment": fr.attachment} {
			if want, ok := m[key]; !bytes.Equal(got, want) || ok != (got != nil) {
				t.Fatalf("%q: field %s = %q, encoding/json says %q", data, key, got, want)
			}
		}
		var to []string
		if namesOf(fr.to, func(_, _ []byte) {}) {
			if err := json.Unmarshal(fr.to, &to); err != nil {
				t.Fatalf("namesOf accepted %s: %v", fr.to, err)
			}
			var got []string
			namesOf(fr.to, func(_, n []byte) { got = append(got, string(n)) })
			if strings.Join(got, "\x00") != strings.Join(to, "\x00") {
				t.Fatalf("names %q, encoding/json says %q", got, to)
			}
		}
		if len(m) == 0 {
			return // appendWithTS needs a member; every handled frame has "type"
		}
		out := appendWithTS(nil, data, 42)
		var spliced map[string]json.RawMessage
		if err := json.Unmarshal(out, &spliced); err != nil {
			t.Fatalf("splice of %q gave invalid JSON %q: %v", data, out, err)
		}
		if string(spliced["ts"]) != "42" || len(spliced) != len(m)+btoi(m["ts"] == nil) {
			t.Fatalf("splice of %q gave %q", data, out)
		}
		if n, ok := attachmentSize(fr.attachment); ok && n < 0 {
			t.Fatalf("negative size %d", n)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzReadMessage checks the payload cap under arbitrary read splits.
func FuzzReadMessage(f *testing.F) {
	f.Add([]byte("hello"), uint16(4), false)
	f.Add(bytes.Repeat([]byte("x"), 5000), uint16(4096), true)
	f.Fuzz(func(t *testing.T, data []byte, limit uint16, oneByte bool) {
		var r io.Reader = bytes.NewReader(data)
		if oneByte {
			r = iotest.OneByteReader(r)
		}
		var scratch []byte
		got, err := readMessage(r, &scratch, int64(limit))
		if len(data) > int(limit) {
			if !errors.Is(err, errTooLarge) {
				t.Fatalf("%d bytes over limit %d: %v", len(data), limit, err)
			}
			return
		}
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes under limit %d: got %d, %v", len(data), limit, len(got), err)
		}
	})
}

func TestNameSetAcrossItsMapSwitch(t *testing.T) {
	var s nameSet
	seen := map[string]bool{}
	for i := range 100 {
		name := []byte(strings.Repeat("n", i%40+1))
		if got, want := s.add(name), !seen[string(name)]; got != want {
			t.Fatalf("add(%q) #%d = %v, want %v", name, i, got, want)
		}
		seen[string(name)] = true
	}
}

// eachMember given no value (empty input, or an index at the end) calls fn
// for nothing instead of panicking.
func TestEachMemberOfNothing(t *testing.T) {
	for _, c := range []struct {
		data string
		i    int
	}{{"", 0}, {"[1]", 3}} {
		eachMember([]byte(c.data), c.i, func(_, v []byte) { t.Errorf("eachMember(%q, %d) gave %s", c.data, c.i, v) })
	}
}
