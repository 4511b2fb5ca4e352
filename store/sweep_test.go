package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"connector/internal/clock/clocktest"
)

func TestMemorySweep(t *testing.T) {
	c := clocktest.New(time.Unix(1000, 0))
	m := NewMemory(c)
	defer m.Close()
	fill(t, m, c)
	m.sweep()
	if len(m.caps) != 1 || len(m.owners) != 1 {
		t.Fatalf("after the sweep: %d capabilities, %d owners; want the 1 live of each", len(m.caps), len(m.owners))
	}
}

func TestEmbeddedSweep(t *testing.T) {
	e, c := openSweepTest(t)
	fill(t, e, c)
	e.sweep(context.Background())
	err := e.db.View(func(tx *bolt.Tx) error {
		if n, o := tx.Bucket(bCaps).Stats().KeyN, tx.Bucket(bOwners).Stats().KeyN; n != 1 || o != 1 {
			return fmt.Errorf("after the sweep: %d capabilities, %d owners; want the 1 live of each", n, o)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openSweepTest opens an embedded store on a fake clock, closed when the
// test ends.
func openSweepTest(t *testing.T) (*embedded, *clocktest.Fake) {
	t.Helper()
	c := clocktest.New(time.Unix(1000, 0))
	e, err := openEmbedded(context.Background(), t.TempDir(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, c
}

// fill stores one live and two expired capabilities and owners.
func fill(t *testing.T, s Store, c *clocktest.Fake) {
	t.Helper()
	ctx := context.Background()
	for i, ttl := range []time.Duration{time.Second, 2 * time.Second, time.Hour} {
		if err := s.Capabilities().Put(ctx, fmt.Sprint("k", i), []byte("v"), c.Now().Add(ttl)); err != nil {
			t.Fatal(err)
		}
		if err := s.Owners().Set(ctx, "t", fmt.Sprint("s", i), Owner{Conn: "c"}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(2 * time.Second)
}

// TestEmbeddedSweepInBatches: the sweep of many expired claims commits in
// short transactions of at most sweepBatch entries each, queued with the
// other writes, rather than in one transaction that holds every write up
// for the whole scan.
func TestEmbeddedSweepInBatches(t *testing.T) {
	e, c := openSweepTest(t)
	const n = 3*sweepBatch + 1
	err := e.db.Update(func(tx *bolt.Tx) error {
		for i := range n {
			if err := tx.Bucket(bCaps).Put([]byte(fmt.Sprintf("%s%06d", claimPrefix, i)), encodeExpiring(c.Now().Add(time.Second), nil)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	live := c.Now().Add(time.Hour)
	if err := e.Capabilities().Put(context.Background(), "live", []byte("v"), live); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Second)
	before := e.CommitStats().Commits
	e.sweep(context.Background())
	if got, want := e.CommitStats().Commits-before, uint64(n/sweepBatch+1); got < want {
		t.Errorf("the sweep of %d expired claims committed %d transactions through the group commit; want at least %d of at most %d entries", n, got, want, sweepBatch)
	}
	err = e.db.View(func(tx *bolt.Tx) error {
		if k := tx.Bucket(bCaps).Stats().KeyN; k != 1 {
			return fmt.Errorf("after the sweep: %d capabilities; want the 1 live", k)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedSweepStopsWhenClosing: a sweep whose context ended (the
// store closing) commits no further batch, so Close does not wait for a
// long sweep to finish.
func TestEmbeddedSweepStopsWhenClosing(t *testing.T) {
	e, c := openSweepTest(t)
	fill(t, e, c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.sweep(ctx)
	err := e.db.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket(bCaps).Stats().KeyN; n != 3 {
			return fmt.Errorf("after a sweep whose context ended: %d capabilities; want the 3 unswept", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
