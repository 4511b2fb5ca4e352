package whatsapp

import (
	"context"
	"testing"
	"time"
)

// TestSerialKeepsOrderPerChat: waiters of one chat run in the order they
// arrived, one at a time, while another chat is not held up; a waiter
// whose context ends leaves the queue, and the turn still passes on.
func TestSerialKeepsOrderPerChat(t *testing.T) {
	var s serial
	ctx := context.Background()
	if err := s.enter(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 8)
	queued := make(chan struct{})
	for i := range 4 {
		go func() {
			if i == 0 {
				close(queued)
			}
			_ = s.enter(ctx, "a")
			order <- i
			s.leave("a")
		}()
		waitWaiters(t, &s, "a", i+1)
	}
	<-queued
	if err := s.enter(ctx, "b"); err != nil { // another chat is free
		t.Fatal(err)
	}
	s.leave("b")
	gone, cancel := context.WithCancel(ctx)
	errc := make(chan error)
	go func() { errc <- s.enter(gone, "a") }()
	waitWaiters(t, &s, "a", 5)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled waiter got the turn")
	}
	s.leave("a")
	for want := range 4 {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("turn %d went to waiter %d", want, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("waited 10s for turn %d", want)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.chats) != 0 {
		t.Fatalf("chats left: %v", s.chats)
	}
}

// waitWaiters waits until chat has n waiters queued.
func waitWaiters(t *testing.T, s *serial, chat string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		got := 0
		if tq := s.chats[chat]; tq != nil {
			got = len(tq.waiters)
		}
		s.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %d waiters of %s, %d queued", n, chat, got)
		}
		time.Sleep(time.Millisecond)
	}
}
