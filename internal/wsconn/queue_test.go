package wsconn

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
)

// recorder is a Writer that keeps what it was given; block, when set, holds
// every Write until it is closed.
type recorder struct {
	q       *Queue
	entered chan struct{} // when set, gets a signal as each Write starts
	block   chan struct{}
	fail    error // returned by every Write when set

	mu      sync.Mutex
	batches [][]string
	writers []string // the goroutine of each Write, as runtime.Stack names it
	ended   []Close
}

func (r *recorder) Write(batch []Frame) error {
	if r.entered != nil {
		r.entered <- struct{}{}
	}
	if r.block != nil {
		<-r.block
	}
	var b []string
	for _, f := range batch {
		b = append(b, string(f.Data))
		r.q.Written(len(f.Data))
	}
	buf := make([]byte, 64)
	g, _, _ := strings.Cut(string(buf[:runtime.Stack(buf, false)]), " [")
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.writers = append(r.writers, g)
	r.mu.Unlock()
	return r.fail
}

func (r *recorder) End(c Close) {
	r.mu.Lock()
	r.ended = append(r.ended, c)
	r.mu.Unlock()
}

func (r *recorder) written() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

func newRecorded(window, limit int64, batch int) (*Queue, *recorder) {
	r := &recorder{}
	r.q = NewQueue(r, window, limit, batch)
	return r.q, r
}

// counter is a Releaser counting its releases.
type counter struct{ n atomic.Int32 }

func (c *counter) Release() { c.n.Add(1) }

func frame(s string) Frame { return Frame{Data: []byte(s)} }

func waitDone(t *testing.T, q *Queue) {
	t.Helper()
	select {
	case <-q.Done():
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the queue's close", testTimeout)
	}
}

// Frames wait for Start; the writer batches consecutive frames up to the
// batch size, and a flushing close writes everything queued before End.
func TestQueueBatchesAndFlushes(t *testing.T) {
	q, r := newRecorded(0, 1<<20, 6)
	for _, s := range []string{"aa", "bb", "cc", "dddddddd", "e"} {
		if err := q.Push(frame(s)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.written()); n != 0 || q.Len() != 5 {
		t.Fatalf("before Start: %d writes, %d queued; want 0 and 5", n, q.Len())
	}
	q.Close(Close{Code: 1001, Reason: "bye"}, true)
	if q.Push(frame("late")) != ErrClosed {
		t.Fatal("a closing queue took a frame")
	}
	q.Start()
	waitDone(t, q)
	want := [][]string{{"aa", "bb", "cc"}, {"dddddddd"}, {"e"}}
	if got := r.written(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %q, want %q", got, want)
	}
	if !slices.Equal(r.ended, []Close{{Code: 1001, Reason: "bye"}}) || q.Queued() != 0 {
		t.Fatalf("ended %v with %d bytes queued", r.ended, q.Queued())
	}
}

// Push reports an overflow past the limit (and keeps the frame); an
// immediate close drops and releases what is queued, and only the first
// close counts.
func TestQueueOverflowAndImmediateClose(t *testing.T) {
	q, r := newRecorded(0, 10, 0)
	var owner counter
	if err := q.Push(Frame{Data: []byte("123456"), Owner: &owner}); err != nil {
		t.Fatal(err)
	}
	if err := q.Push(Frame{Data: []byte("78901"), Owner: &owner}); err != ErrOverflow {
		t.Fatalf("11 bytes in a 10-byte queue: %v, want ErrOverflow", err)
	}
	if !q.Close(Close{Code: 4408}, false) || q.Close(Close{Code: 1000}, true) {
		t.Fatal("the second close counted, or the first did not")
	}
	if owner.n.Load() != 2 || q.Queued() != 0 {
		t.Fatalf("%d of 2 frames released, %d bytes left", owner.n.Load(), q.Queued())
	}
	q.Start()
	waitDone(t, q)
	if len(r.written()) != 0 || !slices.Equal(r.ended, []Close{{Code: 4408}}) {
		t.Fatalf("wrote %q and ended %v after an immediate close", r.written(), r.ended)
	}
}

// A failed write ends the connection with the error's Close (or Drop),
// even over a Drop requested while it was under way.
func TestQueueWriteFailureEnds(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Close
	}{
		{Close{Code: 4408, Reason: "slow"}, Close{Code: 4408, Reason: "slow"}},
		{errors.New("broken pipe"), Drop},
	} {
		q, r := newRecorded(0, 100, 0)
		r.fail, r.block, r.entered = tc.err, make(chan struct{}), make(chan struct{}, 1)
		q.Start()
		_ = q.Push(frame("a"))
		await(t, r.entered, "the first write")
		_ = q.Push(frame("b"))
		q.Close(Drop, false) // the reader saw the socket fail
		close(r.block)
		waitDone(t, q)
		if !slices.Equal(r.ended, []Close{tc.want}) || len(r.written()) != 1 {
			t.Fatalf("%v: ended %v after %d writes, want %v after 1", tc.err, r.ended, len(r.written()), tc.want)
		}
	}
}

// The writer goroutine runs only while there is something to write.
func TestQueueWriterExitsWhenDrained(t *testing.T) {
	q, r := newRecorded(0, 1<<20, 0)
	q.Start()
	for round := range 3 {
		_ = q.Push(frame(strings.Repeat("x", round+1)))
		waitUntil(t, "the writer to drain and exit", func() bool {
			q.mu.Lock()
			defer q.mu.Unlock()
			return !q.running && q.queued == 0
		})
	}
	if n := len(r.written()); n != 3 {
		t.Fatalf("%d writes, want 3", n)
	}
	buf := make([]byte, 1<<16)
	if strings.Contains(string(buf[:runtime.Stack(buf, true)]), "wsconn.(*Queue).run") {
		t.Fatal("a writer goroutine outlived its work")
	}
}

// With Linger, a writer restarted within the linger time of the previous
// one's exit waits for the next frame instead of exiting: one goroutine
// writes a whole run of frames, and exits once idle for the linger time on
// the clock, dropping its buffers. A writer after a quiet spell, like the
// first one, exits as soon as it drained.
func TestQueueWriterLingersWhenBusy(t *testing.T) {
	const linger = 100 * time.Millisecond
	clk := clocktest.New(time.Unix(1_000_000, 0))
	q, r := newRecorded(0, 1<<20, 0)
	q.Linger(&Linger{Clock: clk, Idle: linger})
	q.Start()
	state := func() (running, parked bool) {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.running, q.parked
	}
	exited := func() bool { running, _ := state(); return !running }
	parked := func() bool { _, p := state(); return p }

	_ = q.Push(frame("first"))
	waitUntil(t, "the first writer to exit (no writer before it)", exited)
	for i := range 10 {
		_ = q.Push(frame(strings.Repeat("x", i+1)))
		waitUntil(t, "the writer to park for the next frame", func() bool { return parked() && q.Queued() == 0 })
	}
	r.mu.Lock()
	lingered := slices.Compact(slices.Clone(r.writers[1:]))
	r.mu.Unlock()
	if len(lingered) != 1 {
		t.Fatalf("10 frames in a row written by %d goroutines %q, want 1", len(lingered), lingered)
	}

	clk.Advance(linger - time.Nanosecond)
	if !parked() {
		t.Fatal("the writer left before lingering its full time")
	}
	clk.Advance(time.Nanosecond)
	waitUntil(t, "the idle writer to exit after lingering", exited)
	q.mu.Lock()
	kept := cap(q.frames) == 0 || &q.frames[:1][0] != &q.one[0] || q.parking != nil
	q.mu.Unlock()
	if kept {
		t.Fatal("an exited writer left a frames buffer of its own, its wake channel or its timer behind")
	}
	buf := make([]byte, 1<<16)
	if strings.Contains(string(buf[:runtime.Stack(buf, true)]), "wsconn.(*Queue).run") {
		t.Fatal("a writer goroutine outlived its linger time")
	}

	clk.Advance(linger) // a quiet spell: the next writer does not linger
	_ = q.Push(frame("after a while"))
	waitUntil(t, "a writer after a quiet spell to exit once drained", exited)

	_ = q.Push(frame("busy again")) // lingers: the close must rouse it
	waitUntil(t, "the writer to park", parked)
	q.Close(Close{Code: 1001, Reason: "bye"}, true)
	waitDone(t, q)
	if got := r.written(); len(got) != 13 || !slices.Equal(r.ended, []Close{{Code: 1001, Reason: "bye"}}) {
		t.Fatalf("%d writes and ended %v, want 13 and a 1001", len(got), r.ended)
	}
}

// WaitSpace holds a sender while window bytes are queued, until the writer
// releases them, and gives up when cancel is closed or the queue closes.
func TestQueueWaitSpace(t *testing.T) {
	q, r := newRecorded(4, 100, 0)
	r.block = make(chan struct{})
	_ = q.Push(frame("1234"))
	cancel := make(chan struct{})
	close(cancel)
	if q.WaitSpace(cancel) {
		t.Fatal("WaitSpace reported room with the window full")
	}
	got := make(chan bool, 1)
	go func() { got <- q.WaitSpace(nil) }()
	q.Start()
	close(r.block) // the writer releases the window
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("WaitSpace reported no room after the write")
		}
	case <-time.After(testTimeout):
		t.Fatal("WaitSpace still waiting after the window drained")
	}
	q.Close(Drop, false)
	if q.WaitSpace(nil) {
		t.Fatal("WaitSpace reported room on a closed queue")
	}
	waitDone(t, q)
}

// With ChargeFrames, every frame counts its overhead beyond its data: empty
// frames fill the window and overflow the limit, and a drop releases their
// cost.
func TestQueueChargeFrames(t *testing.T) {
	q, _ := newRecorded(20, 30, 0)
	q.ChargeFrames(10)
	for i := range 3 {
		if err := q.Push(Frame{}); err != nil {
			t.Fatalf("empty frame %d: %v", i, err)
		}
	}
	if q.Queued() != 30 || q.Cost(frame("abc")) != 13 {
		t.Fatalf("3 empty frames cost %d, a 3-byte one %d; want 30 and 13", q.Queued(), q.Cost(frame("abc")))
	}
	if err := q.Push(Frame{}); err != ErrOverflow {
		t.Fatalf("a 4th empty frame past a 30-byte limit: %v, want ErrOverflow", err)
	}
	q.Close(Close{Code: 1000}, false)
	if q.Queued() != 0 {
		t.Fatalf("%d bytes queued after a drop", q.Queued())
	}
}

// PushBelow queues a frame only while fewer than max bytes are queued,
// closing or not (then it keeps the frame: its owner is not released);
// below max it is Push, ErrOverflow and ErrClosed included.
func TestQueuePushBelow(t *testing.T) {
	q, _ := newRecorded(0, 10, 0)
	var owner counter
	if took, err := q.PushBelow(Frame{Data: []byte("123456"), Owner: &owner}, 6); !took || err != nil {
		t.Fatalf("into an empty queue: took %v, %v; want true, nil", took, err)
	}
	if took, err := q.PushBelow(Frame{Data: []byte("7"), Owner: &owner}, 6); took || err != nil || q.Len() != 1 {
		t.Fatalf("with 6 of at most 6 bytes queued: took %v, %v, %d queued; want false, nil, 1", took, err, q.Len())
	}
	if took, err := q.PushBelow(Frame{Data: []byte("78901"), Owner: &owner}, 7); !took || err != ErrOverflow {
		t.Fatalf("past the 10-byte limit: took %v, %v; want true, ErrOverflow", took, err)
	}
	if owner.n.Load() != 0 {
		t.Fatalf("%d frames released before any write", owner.n.Load())
	}
	q.Close(Close{Code: 1000}, true)
	if took, _ := q.PushBelow(Frame{Data: []byte("x"), Owner: &owner}, 11); took {
		t.Fatal("a closing queue over max took a frame")
	}
	if took, err := q.PushBelow(Frame{Data: []byte("x"), Owner: &owner}, 12); !took || err != ErrClosed || owner.n.Load() != 1 {
		t.Fatalf("a closing queue under max: took %v, %v, %d released; want true, ErrClosed, 1", took, err, owner.n.Load())
	}
}

// Remove drops and releases the waiting frames it is told to, and their
// bytes leave the queue; the others keep their order, and a frame the
// writer took already is written.
func TestQueueRemove(t *testing.T) {
	q, r := newRecorded(0, 100, 0)
	r.entered, r.block = make(chan struct{}, 3), make(chan struct{})
	var gone, kept counter
	for _, f := range []Frame{{Data: []byte("a1"), Owner: &gone}, {Data: []byte("b1"), Owner: &kept},
		{Data: []byte("a2"), Owner: &gone}, {Data: []byte("b2"), Owner: &kept}, {Data: []byte("a3"), Owner: &gone}} {
		if err := q.Push(f); err != nil {
			t.Fatal(err)
		}
	}
	q.Start()
	<-r.entered // the writer took a1
	q.Remove(func(f Frame) bool { return f.Owner == &gone })
	if gone.n.Load() != 2 || kept.n.Load() != 0 || q.Len() != 2 || q.Queued() != 6 {
		t.Fatalf("%d of 2 frames released, %d kept released, %d frames and %d bytes queued; want 2, 0, 2 and 6 (a1 under way, b1, b2)",
			gone.n.Load(), kept.n.Load(), q.Len(), q.Queued())
	}
	close(r.block)
	q.Close(Close{Code: 1000}, true)
	waitDone(t, q)
	want := [][]string{{"a1"}, {"b1"}, {"b2"}}
	if got := r.written(); !slices.EqualFunc(got, want, slices.Equal) || q.Queued() != 0 {
		t.Fatalf("wrote %q with %d bytes left, want %q and none", got, q.Queued(), want)
	}
}

// BenchmarkQueueOffer is a bounded sender's offer of one frame, which a
// writer then takes: the test and the push under one lock (PushBelow)
// against Queued then Push.
func BenchmarkQueueOffer(b *testing.B) {
	f := frame(strings.Repeat("x", 434))
	for _, tc := range []struct {
		name string
		push func(q *Queue)
	}{
		{"PushBelow", func(q *Queue) { _, _ = q.PushBelow(f, 1<<20) }},
		{"Queued+Push", func(q *Queue) {
			if q.Queued() < 1<<20 {
				_ = q.Push(f)
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			q := NewQueue(nil, 0, 1<<30, 0) // not started: no writer runs
			for i := 0; b.Loop(); i++ {
				tc.push(q)
				if i%64 == 63 {
					q.mu.Lock()
					q.queued, q.frames, q.head = 0, q.frames[:0], 0
					q.mu.Unlock()
				}
			}
		})
	}
}

// A frame queued while no writer runs, written by a writer started for it
// that then exits, allocates nothing: the go statement runs a func value
// made once (a method value's closure: 1), and the queue and the writer's
// batch hold one frame in the queue's own arrays (2 more slices). That is
// every event of a connection whose events come further apart than its
// linger.
func TestQueueWriterStartAllocatesNothing(t *testing.T) {
	written := make(chan struct{}, 1)
	q := NewQueue(signaler(written), 0, 1<<20, 0)
	q.Start()
	f := Frame{Data: []byte("x")}
	deadline := time.Now().Add(10 * time.Second)
	n := testing.AllocsPerRun(1000, func() {
		if err := q.Push(f); err != nil {
			t.Fatal(err)
		}
		<-written
		for q.writing() { // the writer exits once it found the queue empty
			if time.Now().After(deadline) {
				t.Fatal("the writer did not exit within 10 s of writing")
			}
			runtime.Gosched()
		}
	})
	if n != 0 {
		t.Fatalf("a writer's start, write and exit allocate %v times, want 0", n)
	}
}

// signaler is a Writer that signals each Write on its channel.
type signaler chan struct{}

func (s signaler) Write([]Frame) error { s <- struct{}{}; return nil }
func (signaler) End(Close)             {}

// writing reports whether a writer goroutine runs.
func (q *Queue) writing() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running
}
