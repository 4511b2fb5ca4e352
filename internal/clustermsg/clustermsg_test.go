package clustermsg

import (
	"bytes"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	msg := Encode('X', []byte("room"), nil, bytes.Repeat([]byte{0xff}, 300))
	typ, f, ok := Decode(msg, 3)
	if !ok || typ != 'X' || string(f[0]) != "room" || len(f[1]) != 0 || len(f[2]) != 300 {
		t.Fatalf("Decode(Encode) = %q %q %v", typ, f, ok)
	}
	for _, bad := range [][]byte{nil, msg[:len(msg)-1], append(msg, 0)} {
		if _, _, ok := Decode(bad, 3); ok {
			t.Errorf("Decode(%q) accepted a malformed message", bad)
		}
	}
	if _, _, ok := Decode(msg, 4); ok {
		t.Error("Decode accepted a message with too few fields")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode('A', []byte("a"), []byte("bc")), 2)
	f.Fuzz(func(t *testing.T, msg []byte, n int) {
		if n < 0 || n > 16 {
			return
		}
		typ, fields, ok := Decode(msg, n)
		if !ok {
			return
		}
		_, again, ok := Decode(Encode(typ, fields...), n)
		if !ok || len(again) != n {
			t.Fatalf("re-encoding %q lost fields", msg)
		}
		for i := range again {
			if !bytes.Equal(again[i], fields[i]) {
				t.Fatalf("field %d changed on re-encoding", i)
			}
		}
	})
}
