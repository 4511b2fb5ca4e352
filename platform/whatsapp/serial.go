package whatsapp

import (
	"context"
	"sync"
)

// serial runs the messages of one chat one at a time, in the order they
// arrived, while other chats go on: a queue per chat that exists only
// while the chat has a message in progress. Its lock guards the map alone
// and is never held across I/O.
type serial struct {
	mu    sync.Mutex
	chats map[string]*turns
}

// turns is one chat's queue: the holder runs, the waiters wait in order.
type turns struct {
	waiters []chan struct{}
}

// enter waits for chat's turn; on success the caller must call leave.
// It returns ctx's error when ctx ends first (the turn is then not held).
func (s *serial) enter(ctx context.Context, chat string) error {
	s.mu.Lock()
	if s.chats == nil {
		s.chats = make(map[string]*turns)
	}
	t, busy := s.chats[chat]
	if !busy {
		s.chats[chat] = &turns{}
		s.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	t.waiters = append(t.waiters, ready)
	s.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range t.waiters {
		if w == ready {
			t.waiters = append(t.waiters[:i], t.waiters[i+1:]...)
			return ctx.Err()
		}
	}
	// The turn was handed over as ctx ended: pass it on.
	s.handOver(chat, t)
	return ctx.Err()
}

// leave ends the holder's turn of chat and starts the next waiter's.
func (s *serial) leave(chat string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handOver(chat, s.chats[chat])
}

// handOver gives chat's turn to its first waiter, or forgets the chat.
// Called with mu held.
func (s *serial) handOver(chat string, t *turns) {
	if len(t.waiters) == 0 {
		delete(s.chats, chat)
		return
	}
	next := t.waiters[0]
	t.waiters = t.waiters[1:]
	close(next)
}
