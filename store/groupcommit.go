package store

import (
	"context"

	bolt "go.etcd.io/bbolt"
)

// groupCommit runs the embedded backend's hot-path writes through a
// batcher: one bbolt transaction (one commit, two fsyncs) per batch.
//
// bbolt's own DB.Batch holds every batch open for MaxBatchDelay (10 ms)
// before committing, which costs a lone writer that delay on every write.
// On the 2-core CI machine this committer appended about twice as many
// events per second as DB.Batch with 2, 16 and 128 appenders
// (docs/durability.md).
type groupCommit struct {
	db *bolt.DB
	*batcher[write]
}

// write is one caller's function and where its result goes.
type write struct {
	fn  func(*bolt.Tx) error
	err chan error
}

// maxGroup bounds the writes in one transaction.
const maxGroup = 1024

func startGroupCommit(db *bolt.DB) *groupCommit {
	g := &groupCommit{db: db}
	g.batcher = newBatcher(maxGroup, g.commit)
	return g
}

// do runs fn in the next transaction and returns once it is committed, or
// with ctx's error when ctx ends before fn is queued. fn may run twice
// (see commit), so it must set, not accumulate, its results.
func (g *groupCommit) do(ctx context.Context, fn func(*bolt.Tx) error) error {
	w := write{fn: fn, err: make(chan error, 1)}
	if err := g.submit(ctx, w); err != nil {
		return err
	}
	return <-w.err
}

// commit runs group in one transaction. When a function fails, that
// transaction rolls back and each function runs again in its own, so a
// failure reaches only the caller whose write failed.
func (g *groupCommit) commit(group []write) {
	err := g.db.Update(func(tx *bolt.Tx) error {
		for _, w := range group {
			if err := w.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil && len(group) > 1 {
		for _, w := range group {
			w.err <- closedErr(g.db.Update(w.fn))
		}
		return
	}
	for _, w := range group {
		w.err <- closedErr(err)
	}
}
