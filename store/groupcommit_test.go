package store

import (
	"context"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"

	"connector/internal/clock"
)

func TestGroupCommitFailsOnlyTheFailingWrite(t *testing.T) {
	e, err := openEmbedded(context.Background(), t.TempDir(), clock.System)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	boom := errors.New("boom")
	put := func(k string) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error { return tx.Bucket(bCaps).Put([]byte(k), []byte("v")) }
	}
	group := []write{
		{fn: put("a"), err: make(chan error, 1)},
		{fn: func(*bolt.Tx) error { return boom }, err: make(chan error, 1)},
		{fn: put("b"), err: make(chan error, 1)},
	}
	e.group.commit(group)
	for i, want := range []error{nil, boom, nil} {
		select {
		case err := <-group[i].err:
			if !errors.Is(err, want) {
				t.Fatalf("write %d: err %v, want %v", i, err, want)
			}
		default:
			t.Fatalf("write %d has no answer: commit must answer every write before it returns", i)
		}
	}
	err = e.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bCaps).Get([]byte("a")) == nil || tx.Bucket(bCaps).Get([]byte("b")) == nil {
			return errors.New("the writes beside the failing one were not committed")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
