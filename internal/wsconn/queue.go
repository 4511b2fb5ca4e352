package wsconn

import (
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"

	"connector/internal/clock"
)

// Frame is one WebSocket message waiting for the writer. Data is never
// modified once queued (a fan-out shares it among recipients); Owner, when
// set, is released once the frame was written or dropped.
type Frame struct {
	Type  websocket.MessageType
	Data  []byte
	Owner Releaser
}

// Releaser is what a Frame borrows its Data from, such as a pooled buffer.
type Releaser interface{ Release() }

func (f *Frame) release() {
	if f.Owner != nil {
		f.Owner.Release()
	}
	*f = Frame{}
}

// Writer is where a Queue's writer goroutine puts frames. Its methods run on
// that goroutine, one call at a time, with no Queue lock held.
type Writer interface {
	// Write writes batch, in order, and calls Queue.Written for the bytes
	// that left (the remote end of a forwarded connection may report them
	// later instead). An error ends the connection at once, dropping what
	// is still queued: with the error when it is a Close, else with Drop.
	Write(batch []Frame) error
	// End ends the connection with c, the first close requested, after the
	// frames a flushing close keeps were written. It runs once.
	End(c Close)
}

// ErrOverflow is Push's report that the queue now holds more than its
// limit: the peer does not keep up, and its owner closes it.
var ErrOverflow = errors.New("wsconn: send queue over its limit")

// ErrClosed is Push's report that the queue is closing: the frame was
// dropped.
var ErrClosed = errors.New("wsconn: send queue closed")

// Queue is a connection's FIFO of frames, bounded in bytes (a frame's bytes
// count until Written releases them) and drained by a writer goroutine that
// runs only while frames or a close are pending:
//
//   - Push never waits; it reports ErrOverflow once more than limit bytes
//     are queued (the frame is queued anyway: its owner closes the peer).
//   - WaitSpace lets a sender wait while window or more bytes are queued:
//     backpressure for bulk data, so memory per peer stays near window.
//   - Close stops intake; a flushing close writes what is queued first (an
//     error frame before its close code), an immediate one drops it.
//   - With Linger, a busy connection's writer waits a while for the next
//     frame instead of exiting and restarting per burst.
type Queue struct {
	w             Writer
	window, limit int64
	batch         int     // most bytes of several frames handed to one Write
	overhead      int64   // what a frame counts beyond its data (ChargeFrames)
	linger        *Linger // nil: the writer exits as soon as it is idle

	// start is q.run as a func value, made once: a go statement of a
	// method value allocates its closure at every writer start.
	start func()
	// one backs frames, and writerOne the writer's batch, while they hold
	// one frame: a connection whose writer restarts per event (events
	// further apart than its linger) allocates no slice for either, and an
	// idle one holds no buffer beyond them.
	one, writerOne [1]Frame

	mu      sync.Mutex
	frames  []Frame
	head    int
	queued  int64
	started bool // Start was called: a writer may run
	running bool // a writer goroutine is draining
	closing bool
	flush   bool
	parked  bool          // a lingering writer waits for a frame (see parking)
	end     Close         // the first close requested
	space   chan struct{} // cap 1: queued fell below window; nil without a window
	done    chan struct{} // closed once w.End returned

	// The lingering writer's parking, only while it runs (an idle
	// connection keeps none), and when the last writer exited.
	parking  *parking
	lastExit int64 // on the Linger's clock, in Unix nanoseconds; 0: none yet
}

// Linger is how long a writer waits for the next frame before it exits,
// on Clock (see Queue.Linger). One value serves every queue of an owner.
type Linger struct {
	Clock clock.Clock
	Idle  time.Duration
}

// parking is what a lingering writer waits with: wake gets a signal when a
// frame or the close comes, and is closed by idle, the timer that fires
// once the writer waited Linger.Idle.
type parking struct {
	wake chan struct{} // cap 1
	idle clock.Timer
}

// NewQueue returns a queue drained into w. A window of 0 means WaitSpace
// never waits; batch is how many bytes of consecutive frames one Write may
// take (0: one frame per Write).
func NewQueue(w Writer, window, limit int64, batch int) *Queue {
	q := &Queue{w: w, window: window, limit: limit, batch: batch, done: make(chan struct{})}
	q.start = q.run
	q.frames = q.one[:0]
	if window > 0 {
		q.space = make(chan struct{}, 1)
	}
	return q
}

// Push queues f and starts the writer if none runs. It returns nil,
// ErrOverflow (queued; the owner must close the peer) or ErrClosed
// (dropped: the queue is closing).
func (q *Queue) Push(f Frame) error {
	q.mu.Lock()
	return q.pushLocked(f)
}

// PushBelow is Push unless max or more bytes are queued (closing or not):
// then it queues nothing, keeps f (its Owner is not released), and reports
// false. One lock serves the test and the push, so a sender holding back
// below a bound does not take the queue's mutex twice per frame.
func (q *Queue) PushBelow(f Frame, max int64) (bool, error) {
	q.mu.Lock()
	if q.queued >= max {
		q.mu.Unlock()
		return false, nil
	}
	return true, q.pushLocked(f)
}

// pushLocked is Push with q.mu held, which it releases.
func (q *Queue) pushLocked(f Frame) error {
	if q.closing {
		q.mu.Unlock()
		f.release()
		return ErrClosed
	}
	q.frames = append(q.frames, f)
	q.queued += int64(q.Cost(f))
	overflow := q.queued > q.limit
	q.unlockAndWake()
	if overflow {
		return ErrOverflow
	}
	return nil
}

// ChargeFrames has every frame count overhead bytes beyond its data
// toward the window and the limit, so that a flood of small or empty frames
// cannot hold much more memory (a slot, a buffer header) than the bytes
// counted. The writer then releases Cost of each frame with Written. Call
// it before the queue is used.
func (q *Queue) ChargeFrames(overhead int64) { q.overhead = overhead }

// Cost is what f counts toward the window and the limit: its data, plus
// the overhead of ChargeFrames.
func (q *Queue) Cost(f Frame) int { return len(f.Data) + int(q.overhead) }

// Linger has a writer that finds the queue empty wait up to l.Idle on
// l.Clock for the next frame before it exits, when the previous writer
// exited less than l.Idle before this one started: a connection under
// steady traffic keeps one writer goroutine, one that writes now and then
// (or is idle) has none between writes. Call it before Start; l must not
// change afterwards.
func (q *Queue) Linger(l *Linger) {
	q.mu.Lock()
	q.linger = l
	q.mu.Unlock()
}

// Start lets the writer run: frames and a close requested before it wait
// until the connection is ready for them.
func (q *Queue) Start() {
	q.mu.Lock()
	q.started = true
	q.unlockAndWake()
}

// unlockAndWake releases q.mu, first starting a writer if none runs and a
// frame or the close is pending.
func (q *Queue) unlockAndWake() {
	pending := q.head < len(q.frames) || q.closing
	start := q.started && !q.running && pending
	q.running = q.running || start
	var wake chan struct{}
	if q.parked && pending {
		q.parked, wake = false, q.parking.wake
	}
	q.mu.Unlock()
	if start {
		go q.start()
	}
	if wake != nil {
		Signal(wake)
	}
}

// WaitSpace blocks until fewer than window bytes are queued, the queue
// closes, or cancel is closed; it reports whether there is room.
func (q *Queue) WaitSpace(cancel <-chan struct{}) bool {
	for {
		q.mu.Lock()
		closing, room := q.closing, q.queued < q.window || q.space == nil
		q.mu.Unlock()
		if closing {
			return false
		}
		if room {
			return true
		}
		select {
		case <-q.space:
		case <-cancel:
			return false
		}
	}
}

// Written releases n bytes the writer finished with.
func (q *Queue) Written(n int) {
	q.mu.Lock()
	q.queued -= int64(n)
	below := q.queued < q.window
	q.mu.Unlock()
	if below && q.space != nil {
		Signal(q.space)
	}
}

// Queued is how many bytes are queued or being written.
func (q *Queue) Queued() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued
}

// Len is how many frames wait for the writer.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.frames) - q.head
}

// Flushing reports whether the queue was closed by a flushing close.
func (q *Queue) Flushing() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.flush
}

// Close stops intake and has the writer end the connection with end: after
// writing what is queued when flush is set, at once otherwise. Only the
// first close counts; it reports whether this was it.
func (q *Queue) Close(end Close, flush bool) bool {
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		return false
	}
	q.closing, q.flush, q.end = true, flush, end
	if !flush {
		q.dropLocked()
	}
	q.unlockAndWake()
	if q.space != nil {
		Signal(q.space)
	}
	return true
}

// Done is closed once the connection was ended (Writer.End returned, which
// needs Start).
func (q *Queue) Done() <-chan struct{} { return q.done }

// Remove drops the frames waiting for the writer for which drop reports
// true (it is called with q.mu held), releasing their owners; the others
// keep their order, and frames the writer took already are written.
func (q *Queue) Remove(drop func(Frame) bool) {
	q.mu.Lock()
	kept := q.frames[:q.head]
	for i := q.head; i < len(q.frames); i++ {
		if f := q.frames[i]; drop(f) {
			q.queued -= int64(q.Cost(f))
			q.frames[i].release()
		} else {
			kept = append(kept, f)
		}
	}
	clear(q.frames[len(kept):])
	q.frames = kept
	if q.head == len(q.frames) {
		q.frames, q.head = q.frames[:0], 0
	}
	below := q.queued < q.window
	q.mu.Unlock()
	if below && q.space != nil {
		Signal(q.space)
	}
}

// dropLocked releases every queued frame. q.mu must be held.
func (q *Queue) dropLocked() {
	for i := q.head; i < len(q.frames); i++ {
		q.queued -= int64(q.Cost(q.frames[i]))
		q.frames[i].release()
	}
	q.frames, q.head = nil, 0
}

// run is the writer goroutine: it writes until nothing is queued, then
// exits (after lingering, see Linger), or ends the connection once the
// queue closed.
func (q *Queue) run() {
	batch := q.writerOne[:0]
	lingering := false
	for {
		q.mu.Lock()
		if q.head < len(q.frames) && (!q.closing || q.flush) {
			batch = q.takeLocked(batch[:0])
			q.mu.Unlock()
			err := q.w.Write(batch)
			for i := range batch {
				batch[i].release()
			}
			if err != nil {
				q.fail(err)
			}
			continue
		}
		if !q.closing {
			if lingering || q.lingerLocked() {
				lingering = true
				wake := q.parkLocked()
				q.mu.Unlock()
				if _, ok := <-wake; ok {
					continue
				}
				q.mu.Lock() // the idle timer closed wake: retire
				q.parking = nil
				if q.head < len(q.frames) || q.closing {
					q.mu.Unlock()
					continue // a frame came as it fired
				}
			}
			q.running, q.parked = false, false
			q.frames, q.head = q.one[:0], 0 // an idle connection keeps no buffer
			q.parking = nil
			if q.linger != nil {
				q.lastExit = q.linger.Clock.Now().UnixNano()
			}
			q.mu.Unlock()
			return
		}
		end := q.end
		if q.parking != nil {
			q.parking.idle.Stop()
		}
		q.mu.Unlock()
		q.w.End(end)
		close(q.done)
		return
	}
}

// lingerLocked reports whether an idle writer should wait for the next
// frame: lingering is on and the previous writer exited less than the
// linger time ago. q.mu must be held.
func (q *Queue) lingerLocked() bool {
	l := q.linger
	return l != nil && q.lastExit != 0 && l.Clock.Now().UnixNano()-q.lastExit < int64(l.Idle)
}

// parkLocked marks the writer parked and arms the idle timer; it returns
// the channel the writer waits on, which gets a signal when a frame or the
// close comes, or is closed when the writer idled for the linger time.
// q.mu must be held.
func (q *Queue) parkLocked() chan struct{} {
	q.parked = true
	if p := q.parking; p != nil {
		p.idle.Reset(q.linger.Idle)
		return p.wake
	}
	p := &parking{wake: make(chan struct{}, 1)}
	p.idle = q.linger.Clock.AfterFunc(q.linger.Idle, func() { q.retire(p) })
	q.parking = p
	return p.wake
}

// retire is p's idle timer's: it closes p.wake if the writer is still
// parked with p.
func (q *Queue) retire(p *parking) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.parked && q.parking == p {
		q.parked = false
		close(p.wake)
	}
}

// takeLocked moves the next frames into batch: one, plus those that follow
// while their bytes fit q.batch. q.mu must be held.
func (q *Queue) takeLocked(batch []Frame) []Frame {
	n := 0
	for q.head < len(q.frames) {
		f := q.frames[q.head]
		if len(batch) > 0 && n+len(f.Data) > q.batch {
			break
		}
		n += len(f.Data)
		batch = append(batch, f)
		q.frames[q.head] = Frame{}
		q.head++
	}
	if q.head == len(q.frames) {
		q.frames, q.head = q.frames[:0], 0
	}
	return batch
}

// fail ends the connection after a failed write: nothing more gets through,
// so a flushing close stops flushing. The failure's Close also replaces a
// Drop requested meanwhile (the reader saw the socket fail under the same
// write), so the connection ends with its cause.
func (q *Queue) fail(err error) {
	var c Close
	if !errors.As(err, &c) {
		c = Drop
	}
	q.mu.Lock()
	if !q.closing || q.end == Drop {
		q.closing, q.end = true, c
	}
	q.flush = false
	q.dropLocked()
	q.mu.Unlock()
	if q.space != nil {
		Signal(q.space)
	}
}

// Signal wakes whoever waits on ch, a channel of capacity 1, without
// blocking: a wake already pending absorbs this one.
func Signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
