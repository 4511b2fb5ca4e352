package store

import (
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"

	"connector/internal/clock"
)

// TestEmbeddedUndecodableRecord: a record of one tenant that no longer
// decodes (a damaged data file) is reported by Read as an
// *UnreadableRecord after the records before it, and a batch of removals
// naming it removes it with every other tenant's. Before, Read failed with
// a plain error for good (the relay could not pass over the record), and
// the whole batch failed: one tenant's damage kept every tenant's
// acknowledged records in the store.
func TestEmbeddedUndecodableRecord(t *testing.T) {
	ctx := t.Context()
	e, err := openEmbedded(ctx, t.TempDir(), clock.System)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l := embLedger{e}
	t1, err := l.Append(ctx, "t1", []Record{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")}})
	if err != nil {
		t.Fatal(err)
	}
	t2, err := l.Append(ctx, "t2", []Record{{Payload: []byte("d")}})
	if err != nil {
		t.Fatal(err)
	}
	err = e.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bLedger).Bucket([]byte("t1")).Put(seqKey(t1[1]), []byte{})
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := l.Read(ctx, "t1", 0, 10)
	var bad *UnreadableRecord
	if !errors.As(err, &bad) || bad.Seq != t1[1] || len(recs) != 1 || recs[0].Seq != t1[0] {
		t.Fatalf("read over the damaged record: %+v, %v; want the record before it and an UnreadableRecord of seq %d", recs, err, t1[1])
	}
	if n, err := l.AckAll(ctx, map[string][]uint64{"t1": {t1[1]}, "t2": t2}); err != nil || n != 2 {
		t.Fatalf("removals naming the damaged record: %d, %v; want 2 removed", n, err)
	}
	if recs, err := l.Read(ctx, "t1", 0, 10); err != nil || len(recs) != 2 || recs[1].Seq != t1[2] {
		t.Fatalf("read after the removal: %+v, %v; want t1's 2 other records", recs, err)
	}
	if st, err := l.Stats(ctx, "t1"); err != nil || st.Entries != 2 {
		t.Fatalf("t1's stats: %+v, %v; want 2 entries", st, err)
	}
}
