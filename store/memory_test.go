package store_test

import (
	"context"
	"slices"
	"testing"

	"connector/internal/clock"
	"connector/store"
)

// The memory store removes a flush's acks in one pass: in any order, with
// repeated and unknown numbers ignored, and the log's bytes kept.
func TestMemoryAckAllInAnyOrder(t *testing.T) {
	ctx := context.Background()
	s := store.NewMemory(clock.System)
	t.Cleanup(func() { _ = s.Close() })
	l := s.Ledger()
	recs := make([]store.Record, 10)
	for i := range recs {
		recs[i] = store.Record{Platform: "p", Payload: []byte{'x', byte('0' + i)}}
	}
	if _, err := l.Append(ctx, "t", recs); err != nil {
		t.Fatal(err)
	}
	n, err := l.AckAll(ctx, map[string][]uint64{"t": {7, 3, 3, 99, 1, 10, 0}})
	if err != nil || n != 4 {
		t.Fatalf("AckAll = %d, %v; want 4 removed", n, err)
	}
	left, err := l.Read(ctx, "t", 0, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, r := range left {
		if r.Payload[1] != byte('0'+r.Seq-1) {
			t.Fatalf("record %d holds %q", r.Seq, r.Payload)
		}
		seqs = append(seqs, r.Seq)
	}
	if want := []uint64{2, 4, 5, 6, 8, 9}; !slices.Equal(seqs, want) {
		t.Fatalf("left %v, want %v", seqs, want)
	}
	if st, err := l.Stats(ctx, "t"); err != nil || st.Entries != 6 || st.Bytes != 12 {
		t.Fatalf("Stats = %+v, %v; want 6 entries of 12 bytes", st, err)
	}
}
