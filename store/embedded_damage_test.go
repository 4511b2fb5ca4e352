package store

import (
	"cmp"
	"errors"
	"testing"
	"time"

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
	recs, err := l.Read(ctx, "t1", 0, 10, 0)
	var bad *UnreadableRecord
	if !errors.As(err, &bad) || bad.Seq != t1[1] || len(recs) != 1 || recs[0].Seq != t1[0] {
		t.Fatalf("read over the damaged record: %+v, %v; want the record before it and an UnreadableRecord of seq %d", recs, err, t1[1])
	}
	if n, err := l.AckAll(ctx, map[string][]uint64{"t1": {t1[1]}, "t2": t2}); err != nil || n != 2 {
		t.Fatalf("removals naming the damaged record: %d, %v; want 2 removed", n, err)
	}
	if recs, err := l.Read(ctx, "t1", 0, 10, 0); err != nil || len(recs) != 2 || recs[1].Seq != t1[2] {
		t.Fatalf("read after the removal: %+v, %v; want t1's 2 other records", recs, err)
	}
	if st, err := l.Stats(ctx, "t1"); err != nil || st != (Stats{Entries: 2, Bytes: 2}) {
		t.Fatalf("t1's stats: %+v, %v; want 2 entries of 2 bytes", st, err)
	}
}

// TestEmbeddedTrimPassesAnUndecodableRecord: Trim takes a record that no
// longer decodes for older than any cutoff, as the redis backend's does,
// and its bytes leave the stats with it. Before, Trim failed on it for
// good (the tenant's records never aged out), and a removal of it left its
// payload's bytes counted for good, so a bytes bound dropped good records
// early. Bytes alone above the bound go too.
func TestEmbeddedTrimPassesAnUndecodableRecord(t *testing.T) {
	ctx := t.Context()
	e, err := openEmbedded(ctx, t.TempDir(), clock.System)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l := embLedger{e}
	seqs, err := l.Append(ctx, "t1", []Record{{Payload: []byte("aaaa")}, {Payload: []byte("bb")}, {Payload: []byte("c")}})
	if err != nil {
		t.Fatal(err)
	}
	err = e.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bLedger).Bucket([]byte("t1")).Put(seqKey(seqs[0]), []byte{1})
	})
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := l.Trim(ctx, "t1", Bounds{MaxAge: time.Hour})
	if err != nil || len(dropped) != 1 || dropped[0].Seq != seqs[0] {
		t.Fatalf("trim over the damaged record: %+v, %v; want it dropped alone", dropped, err)
	}
	if st, err := l.Stats(ctx, "t1"); err != nil || st != (Stats{Entries: 2, Bytes: 3}) {
		t.Fatalf("stats after the trim: %+v, %v; want 2 entries of 3 bytes", st, err)
	}
	if dropped, err := l.Trim(ctx, "t1", Bounds{MaxBytes: 3}); err != nil || len(dropped) != 0 {
		t.Fatalf("trim to the 3 bytes kept: %+v, %v; want none dropped", dropped, err)
	}
}

// TestEmbeddedListPassesADamagedEntry: a registry entry that no longer
// decodes (a damaged data file) is passed over by List, as the redis
// backend passes over one another program wrote. Before, every List of
// its namespace failed, the tenants' one included. Get takes it for none
// too, and a swap from none replaces it (before, both failed on it); a
// Delete removes it (before, it reported none and left it).
func TestEmbeddedListPassesADamagedEntry(t *testing.T) {
	ctx := t.Context()
	e, err := openEmbedded(ctx, t.TempDir(), clock.System)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	reg := e.Registry()
	if _, err := reg.Put(ctx, "ns", "good", []byte("v")); err != nil {
		t.Fatal(err)
	}
	rev, err := reg.Put(ctx, "ns", "bad", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	err = e.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bRegistry).Bucket([]byte("ns"))
		return cmp.Or(b.Put([]byte("bad"), []byte("short")), b.Put([]byte("worse"), []byte("short")))
	})
	if err != nil {
		t.Fatal(err)
	}
	if es, got, err := reg.List(ctx, "ns"); err != nil || len(es) != 1 || es[0].Key != "good" || got != rev {
		t.Fatalf("list beside a damaged entry: %+v, rev %d, %v; want the entry good at rev %d", es, got, err, rev)
	}
	if got, ok, err := reg.Get(ctx, "ns", "bad"); err != nil || ok {
		t.Fatalf("get of a damaged entry: %+v, %v, %v; want none", got, ok, err)
	}
	if ok, err := reg.CompareAndSwap(ctx, "ns", "bad", nil, []byte("w")); err != nil || !ok {
		t.Fatalf("swap from none over a damaged entry: %v, %v; want swapped", ok, err)
	}
	// A swap from an empty entry to none is no Delete: it does not take it
	// for one (before, it did, and removed it).
	if ok, err := reg.CompareAndSwap(ctx, "ns", "worse", []byte{}, nil); err != nil || ok {
		t.Fatalf("swap from an empty entry over a damaged one: %v, %v; want not swapped", ok, err)
	}
	// An admin can remove one: it is there to Delete.
	if ok, err := reg.Delete(ctx, "ns", "worse"); err != nil || !ok {
		t.Fatalf("delete of a damaged entry: %v, %v; want deleted", ok, err)
	}
	_ = e.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bRegistry).Bucket([]byte("ns")).Get([]byte("worse")); v != nil {
			t.Fatalf("damaged entry still stored after its deletion: %q", v)
		}
		return nil
	})
}

// TestEmbeddedDamagedCapabilityIsAbsent: a capability value that no
// longer decodes (a damaged data file) is read as absent, and the next
// Put replaces it, as on Redis one another program wrote. Before, every
// Get of it failed until the data file was mended by hand.
func TestEmbeddedDamagedCapabilityIsAbsent(t *testing.T) {
	ctx := t.Context()
	e, err := openEmbedded(ctx, t.TempDir(), clock.System)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	caps := e.Capabilities()
	err = e.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bCaps).Put([]byte("k"), []byte("short")) })
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := caps.Get(ctx, "k"); err != nil || ok {
		t.Fatalf("get of a damaged value: %q, %v, %v; want absent", v, ok, err)
	}
	if err := caps.Put(ctx, "k", []byte("v"), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := caps.Get(ctx, "k"); err != nil || !ok || string(v) != "v" {
		t.Fatalf("get after the put: %q, %v, %v; want v", v, ok, err)
	}
}
