package slack

import (
	"errors"
	"sync"
)

// chatQueues run each chat's ingest jobs one at a time in arrival order,
// on a goroutine that lives while the chat has jobs: a chat's events are
// stored in the order they arrived, and no lock is held while a job does
// its I/O (lookups, media, the store).
type chatQueues struct {
	mu     sync.Mutex
	chats  map[string][]func()
	queued int
}

// Bounds of what waits: per chat, and in all.
const (
	maxQueuedPerChat = 256
	maxQueued        = 16_384
)

// errQueueFull refuses a job when its chat (or the platform) has too many
// waiting: the source is answered so that it tries again later.
var errQueueFull = errors.New("slack: too many events waiting; try again later")

func newChatQueues() *chatQueues { return &chatQueues{chats: map[string][]func(){}} }

// run queues job behind chat's earlier jobs. It never blocks on them; the
// caller waits on whatever job signals.
func (q *chatQueues) run(chat string, job func()) error {
	q.mu.Lock()
	jobs, busy := q.chats[chat]
	if len(jobs) >= maxQueuedPerChat || q.queued >= maxQueued {
		q.mu.Unlock()
		return errQueueFull
	}
	q.chats[chat] = append(jobs, job)
	q.queued++
	q.mu.Unlock()
	if !busy {
		go q.drain(chat)
	}
	return nil
}

// drain runs chat's jobs until none is left.
func (q *chatQueues) drain(chat string) {
	for {
		q.mu.Lock()
		jobs := q.chats[chat]
		if len(jobs) == 0 {
			delete(q.chats, chat)
			q.mu.Unlock()
			return
		}
		job := jobs[0]
		jobs[0] = nil
		q.chats[chat] = jobs[1:]
		q.mu.Unlock()
		job()
		q.mu.Lock()
		q.queued--
		q.mu.Unlock()
	}
}
