package telegram

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/media"
	"connector/platform"
	"connector/platform/platformtest"
)

// batchSink is a platform.BatchSink over a platformtest.Sink: it reports
// each DeliverAll's size, and how many getUpdates calls the fake had seen
// when it returned; each DeliverAll waits for release.
type batchSink struct {
	*platformtest.Sink
	polls   func() int
	batches chan [2]int // size, getUpdates calls seen when it returned
	release chan struct{}
}

// DeliverAll implements platform.BatchSink.
func (s *batchSink) DeliverAll(ctx context.Context, ds []platform.Delivery) []error {
	select {
	case <-s.release:
	case <-time.After(waitFor):
		return []error{fmt.Errorf("test never released the batch")}
	}
	var errs []error
	for i, d := range ds {
		if err := s.Deliver(ctx, d); err != nil {
			if errs == nil {
				errs = make([]error, len(ds))
			}
			errs[i] = err
		}
	}
	s.batches <- [2]int{len(ds), s.polls()}
	return errs
}

// dmUpdate is update id: a DM from Ada (a chat of t1) whose text is its id.
func dmUpdate(id int64) []byte {
	return fmt.Appendf(nil, `{"update_id":%d,"message":{"message_id":%d,"date":1767225300,`+
		`"chat":{"id":123456789,"type":"private","first_name":"Ada"},"from":{"id":123456789,"is_bot":false,"first_name":"Ada"},"text":"%d"}}`,
		id, id, id)
}

// A getUpdates answer of 100 updates from one chat reaches the sink in one
// DeliverAll, in order, and the next poll (whose offset confirms them)
// goes out only after DeliverAll stored them; a later update, alone in
// its answer, is delivered on its own.
func TestPollingHandsAnAnswerToTheSinkAtOnce(t *testing.T) {
	e := newEnv(t, nil)
	sink := &batchSink{Sink: e.sink, batches: make(chan [2]int, 4), release: make(chan struct{}),
		polls: func() int { return len(e.fake.Calls("getUpdates")) }}
	const first, n = 500, 100
	for id := int64(first); id < first+n; id++ {
		e.fake.Enqueue(dmUpdate(id))
	}
	e.fake.Enqueue(dmUpdate(first + n)) // beyond the answer's limit of 100
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, sink) }()
	t.Cleanup(func() {
		close(sink.release)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitFor):
			t.Error("Run did not return after cancel")
		}
	})

	sink.release <- struct{}{}
	got := nextBatch(t, sink)
	if got[0] != n || got[1] != 1 {
		t.Fatalf("DeliverAll got %d deliveries with %d getUpdates calls made, want %d with 1: the answer's updates in one batch, confirmed by no poll before it returned", got[0], got[1], n)
	}
	for id := first; id < first+n; id++ {
		if d := e.sink.Next(t); d.Event.Text != strconv.Itoa(id) {
			t.Fatalf("delivery %q, want update %d's: the answer's order", d.Event.Text, id)
		}
	}
	// The next poll confirms all 100 and brings the 101st, alone.
	calls := e.calls(t, "getUpdates", 2)
	if off := calls[1].Form["offset"]; off != strconv.Itoa(first+n) {
		t.Fatalf("second getUpdates offset %s, want %d", off, first+n)
	}
	if d := e.sink.Next(t); d.Event.Text != strconv.Itoa(first+n) {
		t.Fatalf("delivery %q, want update %d's", d.Event.Text, first+n)
	}
}

// nextBatch waits for the sink's next DeliverAll to return.
func nextBatch(t *testing.T, s *batchSink) [2]int {
	t.Helper()
	select {
	case b := <-s.batches:
		return b
	case <-time.After(waitFor):
		t.Fatalf("no DeliverAll returned within %v", waitFor)
		return [2]int{}
	}
}

// docUpdate is update id: a DM from Ada (a chat of t1) with document DOC.
func docUpdate(id int64) []byte {
	return fmt.Appendf(nil, `{"update_id":%d,"message":{"message_id":%d,"date":1767225300,`+
		`"chat":{"id":123456789,"type":"private","first_name":"Ada"},"from":{"id":123456789,"is_bot":false,"first_name":"Ada"},`+
		`"caption":"the report","document":{"file_id":"DOC","file_unique_id":"U1","file_name":"r.pdf","file_size":6}}}`, id, id)
}

// TestBatchDeliveredUpdateForgetsItsRehost: an update with a document is
// stored in a batch (DeliverAll); a later update naming the same file gets
// a re-host of its own, which lives the media TTL from then, as after a
// delivery on its own. The batch's delivery left the re-host remembered
// (platform.Rehosts), and the later update carried it, half expired.
func TestBatchDeliveredUpdateForgetsItsRehost(t *testing.T) {
	e := newEnv(t, nil)
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.example"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	e.p.deps.Media = store
	e.fake.AddFile("DOC", "documents/r.pdf", 6, func() io.Reader { return strings.NewReader("report") })
	sink := &batchSink{Sink: e.sink, batches: make(chan [2]int, 4), release: make(chan struct{}),
		polls: func() int { return len(e.fake.Calls("getUpdates")) }}
	e.fake.Enqueue(dmUpdate(600))
	e.fake.Enqueue(docUpdate(601))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, sink) }()
	t.Cleanup(func() {
		close(sink.release)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitFor):
			t.Error("Run did not return after cancel")
		}
	})
	sink.release <- struct{}{}
	if got := nextBatch(t, sink); got[0] != 2 {
		t.Fatalf("DeliverAll got %d deliveries, want the answer's 2", got[0])
	}
	e.sink.Next(t)
	first := e.sink.Next(t)
	e.fake.Enqueue(docUpdate(602)) // alone in its answer: delivered on its own
	later := e.sink.Next(t)
	if len(first.Event.Media) != 1 || len(later.Event.Media) != 1 || later.Event.Media[0].URL == first.Event.Media[0].URL {
		t.Fatalf("the later update carried %+v, want a re-host of its own (the batch's was %+v)", later.Event.Media, first.Event.Media)
	}
}
