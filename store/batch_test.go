package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// recordingCommit returns a commit function that records each batch and,
// for the first one, announces it has started and waits for release.
func recordingCommit(started, release chan struct{}, batches chan<- []int) func([]int) {
	first := true
	return func(b []int) {
		if first {
			first = false
			close(started)
			<-release
		}
		batches <- slices.Clone(b)
	}
}

func receiveBatch(t *testing.T, batches <-chan []int) []int {
	t.Helper()
	select {
	case b := <-batches:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for a commit")
		return nil
	}
}

func TestBatcherCarriesWritesQueuedDuringACommitInOneBatch(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	batches := make(chan []int, 8)
	b := newBatcher(8, recordingCommit(started, release, batches))
	defer b.close()

	if err := b.submit(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for a lone write's commit to start: it must not wait for company")
	}
	for w := 2; w <= 5; w++ { // queued while commit 1 runs
		if err := b.submit(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if got := receiveBatch(t, batches); !slices.Equal(got, []int{1}) {
		t.Fatalf("first batch %v, want [1]", got)
	}
	if got := receiveBatch(t, batches); !slices.Equal(got, []int{2, 3, 4, 5}) {
		t.Fatalf("second batch %v, want the four writes queued during the first commit, in order", got)
	}
}

func TestBatcherBoundsABatch(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	batches := make(chan []int, 8)
	b := newBatcher(2, recordingCommit(started, release, batches))
	defer b.close()
	if err := b.submit(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	<-started
	for w := 2; w <= 3; w++ { // fills the queue of 2
		if err := b.submit(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	submitted := make(chan error, 1)
	go func() { submitted <- b.submit(context.Background(), 4) }() // blocks until the queue has room
	close(release)
	// After the first commit the goroutine takes 2 and gathers 3 (queued
	// before the release) up to the bound; 4 comes alone.
	for _, want := range [][]int{{1}, {2, 3}, {4}} {
		if got := receiveBatch(t, batches); !slices.Equal(got, want) {
			t.Fatalf("batch %v, want %v (at most 2 writes, in order)", got, want)
		}
	}
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
}

func TestBatcherCloseCommitsWhatIsQueuedThenRefuses(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	batches := make(chan []int, 8)
	b := newBatcher(8, recordingCommit(started, release, batches))
	if err := b.submit(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	<-started
	if err := b.submit(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { b.close(); close(closed) }()
	close(release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for close")
	}
	if got := receiveBatch(t, batches); !slices.Equal(got, []int{1}) {
		t.Fatalf("first batch %v, want [1]", got)
	}
	if got := receiveBatch(t, batches); !slices.Equal(got, []int{2}) {
		t.Fatalf("the write queued before close was committed as %v, want [2]", got)
	}
	if err := b.submit(context.Background(), 3); !errors.Is(err, ErrClosed) {
		t.Fatalf("submit after close: %v, want ErrClosed", err)
	}
}
