package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// batcher is the one mechanism by which a backend shares a commit's fixed
// cost (the embedded backend's fsyncs, the redis backend's network round
// trip) among concurrent writers. Callers submit writes; one goroutine
// hands commit every write queued while the previous commit was running,
// up to max at once. A lone write is committed at once, with no added
// delay, and under load one commit carries many writes: while one commit
// is under way, the next batch accumulates.
//
// commit must answer each write of the batch (through whatever reply the
// write type carries) before it returns.
type batcher[W any] struct {
	reqs   chan W
	commit func([]W)
	max    int
	done   chan struct{} // closed when run returns

	mu     sync.RWMutex // read-held while sending to reqs, write-held to close it
	closed bool

	// commits, writes and nanos count the batches committed (from the
	// start of their commit), the writes they carried and the time commit
	// took (CommitStats).
	commits, writes, nanos atomic.Uint64
}

// newBatcher starts the goroutine that commits batches of at most max
// writes; close stops it.
func newBatcher[W any](max int, commit func([]W)) *batcher[W] {
	b := &batcher[W]{reqs: make(chan W, max), commit: commit, max: max, done: make(chan struct{})}
	go b.run()
	return b
}

// submit queues w for the next commit, or fails with ErrClosed once close
// was called. It waits while max writes are already queued, until ctx
// ends (then w is not queued).
func (b *batcher[W]) submit(ctx context.Context, w W) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	select {
	case b.reqs <- w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *batcher[W]) run() {
	defer close(b.done)
	batch := make([]W, 0, b.max)
	for w := range b.reqs {
		batch = append(batch[:0], w)
	gather:
		for len(batch) < b.max {
			select {
			case w, ok := <-b.reqs:
				if !ok {
					break gather
				}
				batch = append(batch, w)
			default:
				break gather
			}
		}
		// Counted before commit answers the writers, so that a writer that
		// got its answer finds its commit counted.
		b.commits.Add(1)
		b.writes.Add(uint64(len(batch)))
		start := time.Now()
		b.commit(batch)
		b.nanos.Add(uint64(time.Since(start)))
		clear(batch)
	}
}

// stats returns the batches committed so far.
func (b *batcher[W]) stats() CommitStats {
	return CommitStats{Commits: b.commits.Load(), Writes: b.writes.Load(), Time: time.Duration(b.nanos.Load())}
}

// close commits what is queued, stops the goroutine and makes later
// submits fail with ErrClosed.
func (b *batcher[W]) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.reqs)
	}
	b.mu.Unlock()
	<-b.done
}
