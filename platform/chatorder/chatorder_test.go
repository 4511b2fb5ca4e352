package chatorder_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"connector/internal/leakcheck"
	"connector/platform/chatorder"
)

// wait fails t unless ch is closed (or sends) within 10 s.
func wait[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out after 10s waiting for %s", what)
	}
}

// A piece of chat X that does not end holds X's later pieces, and no piece
// of another chat; each chat's pieces run in the order they were given.
func TestSlowChatDelaysOnlyItself(t *testing.T) {
	q := chatorder.New[int64](0)
	release := make(chan struct{})
	var mu sync.Mutex
	ran := map[int64][]int{}
	record := func(chat int64, i int) {
		mu.Lock()
		defer mu.Unlock()
		ran[chat] = append(ran[chat], i)
	}
	q.Go(t.Context(), 1, func() { <-release; record(1, 0) })
	for i := 1; i < 50; i++ {
		q.Go(t.Context(), 1, func() { record(1, i) })
	}
	yDone := make(chan struct{})
	for i := range 50 {
		q.Go(t.Context(), 65, func() { // 65 % 64 == 1: the same stripe as chat 1 before
			record(65, i)
			if i == 49 {
				close(yDone)
			}
		})
	}
	wait(t, yDone, "chat 65's pieces while chat 1 is held")
	mu.Lock()
	if len(ran[1]) != 0 {
		t.Errorf("chat 1 ran %v while its first piece was held", ran[1])
	}
	mu.Unlock()
	close(release)
	q.Wait()
	want := make([]int, 50)
	for i := range want {
		want[i] = i
	}
	for _, chat := range []int64{1, 65} {
		if !slices.Equal(ran[chat], want) {
			t.Errorf("chat %d ran %v, want 0..49 in order", chat, ran[chat])
		}
	}
	if n := q.Keys(); n != 0 {
		t.Errorf("%d keys remembered after all work ended", n)
	}
}

// Do runs in the caller's goroutine after the earlier pieces of its key and
// returns fn's error; a Do whose ctx ends while it waits does not run, and
// the key's later pieces still run after the earlier ones.
func TestDoWaitsItsTurn(t *testing.T) {
	q := chatorder.New[string](0)
	release := make(chan struct{})
	var order []string
	q.Go(t.Context(), "x", func() { <-release; order = append(order, "first") })

	ctx, cancel := context.WithCancel(t.Context())
	gaveUp := make(chan error, 1)
	go func() {
		gaveUp <- q.Do(ctx, "x", func() error { order = append(order, "cancelled"); return nil })
	}()
	cancel() // before or after the Do above took its turn: either way it must not run
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with an ended ctx = %v", err)
	}
	done := make(chan error, 1)
	boom := errors.New("boom")
	go func() {
		done <- q.Do(t.Context(), "x", func() error { order = append(order, "last"); return boom })
	}()
	close(release)
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for Do")
	}
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	q.Wait()
	if !slices.Equal(order, []string{"first", "last"}) {
		t.Fatalf("ran %v, want first then last (the cancelled Do never runs)", order)
	}
}

// With a bound, Go waits for room; an ended ctx drops the piece.
func TestBoundHoldsTheSource(t *testing.T) {
	q := chatorder.New[int](2)
	release := make(chan struct{})
	q.Go(t.Context(), 1, func() { <-release })
	q.Go(t.Context(), 2, func() { <-release })
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if q.Go(ctx, 3, func() { t.Error("a piece over the bound ran") }) {
		t.Fatal("Go over the bound with an ended ctx took the piece")
	}
	third := make(chan struct{})
	queued := make(chan bool, 1)
	go func() { queued <- q.Go(t.Context(), 3, func() { close(third) }) }()
	// Go signals nothing while it waits: the test waits until its
	// goroutine is parked waiting for a slot of the bound, or it returned.
	deadline := time.Now().Add(10 * time.Second)
	for !leakcheck.Parked("connector/platform/chatorder.(*Queue[...]).acquire(") {
		select {
		case <-queued:
			t.Fatal("Go over the bound returned before room was made")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out after 10s waiting for Go over the bound to wait for room")
		}
		time.Sleep(time.Millisecond) // polling: a goroutine parking signals nothing
	}
	close(release)
	wait(t, queued, "Go to take the piece once room was made")
	wait(t, third, "the third piece")
	q.Wait()
}

// Close takes no more work and returns only once the work in flight has
// ended, a Do running in its caller's goroutine included; Open takes work
// again. Under -race, a Go beside Close is no WaitGroup misuse.
func TestCloseWaitsForWorkInFlight(t *testing.T) {
	q := chatorder.New[string](0)
	release := make(chan struct{})
	running := make(chan struct{})
	doing := make(chan error, 1)
	go func() {
		doing <- q.Do(t.Context(), "x", func() error { close(running); <-release; return nil })
	}()
	wait(t, running, "the Do to run")
	closed := make(chan struct{})
	go func() { q.Close(); close(closed) }()
	// Close refuses work as soon as it is called; until then Go is taken.
	var refused bool
	deadline := time.Now().Add(10 * time.Second)
	for !refused {
		refused = !q.Go(t.Context(), "y", func() {})
		if time.Now().After(deadline) {
			t.Fatal("timed out after 10s waiting for Close to refuse Go")
		}
	}
	if err := q.Do(t.Context(), "y", func() error { t.Error("a closed queue ran Do's fn"); return nil }); !errors.Is(err, chatorder.ErrClosed) {
		t.Fatalf("Do on a closed queue = %v, want ErrClosed", err)
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a Do was running")
	default:
	}
	close(release)
	wait(t, closed, "Close once the Do ended")
	if err := <-doing; err != nil {
		t.Fatalf("Do = %v", err)
	}
	q.Open()
	ran := make(chan struct{})
	if !q.Go(t.Context(), "x", func() { close(ran) }) {
		t.Fatal("an opened queue refused Go")
	}
	wait(t, ran, "Go's fn after Open")
	q.Wait()
	if n := q.Keys(); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}
