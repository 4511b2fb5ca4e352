// Package chatorder runs a platform's ingest in arrival order per chat, and
// the ingest of different chats side by side: a slow step of one chat (a
// media download, a delivery waiting for its fsync) delays that chat's later
// events only, never another chat's. No lock is held while work runs; the
// one mutex guards the map of chats with work, for a few instructions.
//
// Each piece of work takes a turn behind the last piece given for its key
// (a chat id). A key with no work left is forgotten, so memory follows the
// chats with work in flight, not all chats ever seen. A Queue may bound the
// pieces in flight (waiting or running) across all keys: a platform whose
// source can be held back (a Discord Gateway reader, a webhook) then waits
// instead of queueing without end.
//
// Close stops a Queue taking work and waits for the work in flight, so its
// owner can stop knowing nothing of it runs on; Open takes work again.
package chatorder

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is Do's error when the Queue is closed: fn did not run.
var ErrClosed = errors.New("chatorder: the queue is closed")

// Queue orders work per key. The zero Queue is not usable; use New.
type Queue[K comparable] struct {
	mu     sync.Mutex
	tails  map[K]chan struct{} // per key, closed when its last piece ends
	closed bool                // Close was called (and Open not since): no work is taken
	slots  chan struct{}       // the bound; nil when unbounded
	wg     sync.WaitGroup      // pieces in flight (Go's and Do's), and turns given up; added to only under mu, while open
}

// New returns a Queue with at most limit pieces of work in flight (waiting
// for their turn or running); limit <= 0 means no bound.
func New[K comparable](limit int) *Queue[K] {
	q := &Queue[K]{tails: make(map[K]chan struct{})}
	if limit > 0 {
		q.slots = make(chan struct{}, limit)
	}
	return q
}

// Do runs fn in the caller's goroutine once every piece given earlier for
// key has ended, and returns fn's error. If ctx ends while it waits for
// room or for its turn, fn does not run and Do returns ctx's error; the
// pieces given later for key still wait for those given earlier. A closed
// Queue runs no fn: Do returns ErrClosed.
func (q *Queue[K]) Do(ctx context.Context, key K, fn func() error) error {
	if !q.acquire(ctx) {
		return ctx.Err()
	}
	prev, mine, ok := q.enter(key)
	if !ok {
		return ErrClosed
	}
	defer q.wg.Done()
	if prev != nil {
		select {
		case <-prev:
		case <-ctx.Done():
			q.wg.Go(func() {
				<-prev
				q.leave(key, mine)
			})
			return ctx.Err()
		}
	}
	defer q.leave(key, mine)
	return fn()
}

// Go gives fn its turn for key and returns at once: fn runs on a goroutine
// of its own after every piece given earlier for key. It waits while the
// Queue's bound is reached, and reports false (fn is dropped) when ctx ends
// first, or when the Queue is closed.
func (q *Queue[K]) Go(ctx context.Context, key K, fn func()) bool {
	if !q.acquire(ctx) {
		return false
	}
	prev, mine, ok := q.enter(key)
	if !ok {
		return false
	}
	go func() {
		defer q.wg.Done()
		defer q.leave(key, mine)
		if prev != nil {
			<-prev
		}
		fn()
	}()
	return true
}

// Wait returns once every piece in flight has ended: Go's, and Do's still
// waiting for their turn or running. Work given while it waits, with none
// in flight, is the caller's to rule out (a WaitGroup's rule); Close rules
// it out.
func (q *Queue[K]) Wait() { q.wg.Wait() }

// Close makes the Queue take no more work (Go reports false, Do returns
// ErrClosed), then returns once every piece in flight has ended: Go's, and
// Do's still waiting for their turn or running.
func (q *Queue[K]) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wg.Wait()
}

// Open makes a closed Queue take work again. A new Queue is open.
func (q *Queue[K]) Open() {
	q.mu.Lock()
	q.closed = false
	q.mu.Unlock()
}

// acquire takes a slot of the bound, or reports false when ctx ends first.
func (q *Queue[K]) acquire(ctx context.Context) bool {
	if q.slots == nil {
		return true
	}
	select {
	case q.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// enter makes a turn the last of key's, counted in flight until the caller
// calls wg.Done: prev is closed when the turn before it ends (nil: none is
// in flight); mine is closed by leave. On a closed Queue it takes no turn,
// gives back the slot acquire took, and reports false.
func (q *Queue[K]) enter(key K) (prev, mine chan struct{}, ok bool) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.release()
		return nil, nil, false
	}
	q.wg.Add(1) // under mu, while open: never beside Close's Wait from zero
	mine = make(chan struct{})
	prev = q.tails[key]
	q.tails[key] = mine
	q.mu.Unlock()
	return prev, mine, true
}

// leave ends a turn: the next of its key may run, and a key whose last
// turn this was is forgotten.
func (q *Queue[K]) leave(key K, mine chan struct{}) {
	q.mu.Lock()
	if q.tails[key] == mine {
		delete(q.tails, key)
	}
	q.mu.Unlock()
	close(mine)
	q.release()
}

// release gives back a slot of the bound.
func (q *Queue[K]) release() {
	if q.slots != nil {
		<-q.slots
	}
}
