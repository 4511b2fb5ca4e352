package store

import (
	"context"
	"testing"

	bolt "go.etcd.io/bbolt"

	"connector/internal/clock"
)

// crashClose closes e as a crash would leave it: the queued writes are
// committed (they were durable or not, either way), but the reservations
// are not released.
func crashClose(e *embedded) error {
	e.stopSweep()
	e.ps.close()
	e.group.close()
	return e.db.Close()
}

// storedSequence reads tenant's bucket sequence from committed data.
func storedSequence(t *testing.T, e *embedded, tenant string) uint64 {
	t.Helper()
	var seq uint64
	err := e.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bLedger).Bucket([]byte(tenant)); b != nil {
			seq = b.Sequence()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// A number Stage hands out is durably reserved before Stage returns, so a
// crash before the records' commit cannot make a restarted store assign it
// again; a clean Close gives back the unused reservation.
func TestEmbeddedStageNeverReusesANumberAfterACrash(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e, err := openEmbedded(ctx, dir, clock.System)
	if err != nil {
		t.Fatal(err)
	}
	seqs, commit, err := embLedger{e}.Stage(ctx, "t1", []Record{{Payload: []byte("a")}, {Payload: []byte("b")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := storedSequence(t, e, "t1"); got < seqs[1] {
		t.Fatalf("Stage returned seq %d while the stored reservation is %d: a crash now would reuse it", seqs[1], got)
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	if err := crashClose(e); err != nil {
		t.Fatal(err)
	}

	e, err = openEmbedded(ctx, dir, clock.System)
	if err != nil {
		t.Fatal(err)
	}
	after, err := embLedger{e}.Append(ctx, "t1", []Record{{Payload: []byte("c")}})
	if err != nil {
		t.Fatal(err)
	}
	if after[0] != seqs[1]+seqBlock+1 {
		t.Fatalf("after a crash the next seq is %d, want %d: past the whole reservation", after[0], seqs[1]+seqBlock+1)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e, err = openEmbedded(ctx, dir, clock.System)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	next, err := embLedger{e}.Append(ctx, "t1", []Record{{Payload: []byte("d")}})
	if err != nil {
		t.Fatal(err)
	}
	if next[0] != after[0]+1 {
		t.Fatalf("after a clean Close the next seq is %d, want %d", next[0], after[0]+1)
	}
}
