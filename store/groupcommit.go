package store

import (
	"sync"

	bolt "go.etcd.io/bbolt"
)

// groupCommit runs the embedded backend's hot-path writes. One goroutine
// commits transactions back to back; each takes every write queued while
// the previous one was syncing. A lone writer so commits at once, and under
// load one commit (two fsyncs in bbolt) carries many writers.
//
// bbolt's own DB.Batch holds every batch open for MaxBatchDelay (10 ms)
// before committing, which costs a lone writer that delay on every write.
// On the 2-core CI machine this committer appended about twice as many
// events per second as DB.Batch with 2, 16 and 128 appenders
// (docs/durability.md).
type groupCommit struct {
	db   *bolt.DB
	reqs chan write
	done chan struct{} // closed when run returns

	mu     sync.RWMutex // read-held while sending to reqs, write-held to close it
	closed bool
}

// write is one caller's function and where its result goes.
type write struct {
	fn  func(*bolt.Tx) error
	err chan error
}

// maxGroup bounds the writes in one transaction.
const maxGroup = 1024

func startGroupCommit(db *bolt.DB) *groupCommit {
	g := &groupCommit{db: db, reqs: make(chan write, maxGroup), done: make(chan struct{})}
	go g.run()
	return g
}

// do runs fn in the next transaction and returns once it is committed. fn
// may run twice (see commit), so it must set, not accumulate, its results.
func (g *groupCommit) do(fn func(*bolt.Tx) error) error {
	w := write{fn: fn, err: make(chan error, 1)}
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return ErrClosed
	}
	g.reqs <- w
	g.mu.RUnlock()
	return <-w.err
}

func (g *groupCommit) run() {
	defer close(g.done)
	group := make([]write, 0, maxGroup)
	for w := range g.reqs {
		group = append(group[:0], w)
	gather:
		for len(group) < maxGroup {
			select {
			case w, ok := <-g.reqs:
				if !ok {
					break gather
				}
				group = append(group, w)
			default:
				break gather
			}
		}
		g.commit(group)
		clear(group)
	}
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

// close commits what is queued, stops the committer and makes later writes
// fail with ErrClosed.
func (g *groupCommit) close() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.reqs)
	}
	g.mu.Unlock()
	<-g.done
}
