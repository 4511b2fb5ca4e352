package cluster_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"connector/internal/cluster"
)

// Gather writes what Encode returns, each message after its length, with
// the fields of RefBytes or more referenced rather than copied; a reset
// Gather starts empty.
func TestGatherEncodesAsEncode(t *testing.T) {
	big := bytes.Repeat([]byte("b"), cluster.RefBytes)
	msgs := [][][]byte{
		{[]byte("conn"), []byte("7"), big},
		{},
		{big, []byte("x"), big[:cluster.RefBytes-1]},
		{[]byte(""), []byte("small")},
	}
	var g cluster.Gather
	for round := range 2 {
		var want []byte
		for i, fields := range msgs {
			enc := cluster.Encode(byte(10+i), "i1", fields...)
			if n := cluster.EncodedLen("i1", fields...); n != len(enc) {
				t.Fatalf("EncodedLen = %d, Encode gives %d bytes", n, len(enc))
			}
			want = binary.AppendUvarint(want, uint64(len(enc)))
			want = append(want, enc...)
			g.Uvarint(uint64(len(enc)))
			g.Encode(byte(10+i), "i1", fields...)
		}
		g.Bytes(big)
		g.Bytes([]byte("tail"))
		want = append(append(want, big...), "tail"...)
		bufs := g.Done()
		refs := 0
		for _, b := range bufs {
			if len(b) == len(big) && &b[0] == &big[0] {
				refs++
			}
		}
		if refs != 3 {
			t.Fatalf("round %d: %d buffers are the big field itself, want 3 (a field of RefBytes-1 is copied)", round, refs)
		}
		var got bytes.Buffer
		if _, err := bufs.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("round %d: gathered %d bytes differ from the %d Encode gives", round, got.Len(), len(want))
		}
		g.Reset()
		if len(g.Done()) != 0 {
			t.Fatalf("a reset Gather holds %d buffers", len(g.Done()))
		}
	}
}

// A Gather reused from one write to the next allocates nothing: a chunk
// crossing a direct stream costs no copy and no buffer.
func TestGatherReusedAllocatesNothing(t *testing.T) {
	fields := [][]byte{[]byte("conn"), []byte("42"), []byte("1"), make([]byte, 64<<10)}
	var g cluster.Gather
	write := func() {
		for range 8 {
			g.Uvarint(uint64(cluster.EncodedLen("i1", fields...)))
			g.Encode('o', "i1", fields...)
		}
		if len(g.Done()) != 16 {
			t.Fatalf("8 messages with a large field each gathered into %d buffers, want 16", len(g.Done()))
		}
		g.Reset()
	}
	write()
	if n := testing.AllocsPerRun(100, write); n != 0 {
		t.Fatalf("a reused Gather allocates %v times a write, want 0", n)
	}
}
