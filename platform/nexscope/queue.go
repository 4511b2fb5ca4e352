package nexscope

import (
	"sync"

	"github.com/coder/websocket"
)

// outFrame is one WebSocket message waiting for a member's writer. data is
// shared by every recipient of a fan-out and never modified; for a file
// chunk it is chunk.buf, released once written or dropped.
type outFrame struct {
	typ   websocket.MessageType
	data  []byte
	chunk *chunk
}

// done releases the frame's chunk, if any.
func (f *outFrame) done() {
	if f.chunk != nil {
		f.chunk.release()
	}
}

// sendQueue is a member's FIFO of frames, drained by its writer goroutine and
// bounded in bytes (the bytes of the frame being written count until the
// write returns):
//
//   - File chunks wait (waitSpace) while queued >= window: backpressure on the
//     sender, so memory per recipient stays near window + one chunk.
//   - Every other frame is queued without waiting; push reports overflow once
//     queued exceeds limit (window + MaxPayload), and the caller disconnects
//     the member as a slow consumer.
//
// Closing stops intake; a flushing close writes what is queued first (an
// error frame before its close code), an immediate one drops it.
type sendQueue struct {
	window, limit int64

	mu      sync.Mutex
	frames  []outFrame
	head    int
	queued  int64
	closing bool
	flush   bool
	end     Close // the close the writer performs once closing

	wake  chan struct{} // cap 1: a frame or the close is pending
	space chan struct{} // cap 1: queued fell below window
}

func newSendQueue(window, limit int64) *sendQueue {
	return &sendQueue{
		window: window,
		limit:  limit,
		wake:   make(chan struct{}, 1),
		space:  make(chan struct{}, 1),
	}
}

// push queues f. It reports overflow when the queue now holds more than its
// limit; f is queued anyway (the caller closes the member). A closing queue
// drops f.
func (q *sendQueue) push(f outFrame) (overflow bool) {
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		f.done()
		return false
	}
	q.frames = append(q.frames, f)
	q.queued += int64(len(f.data))
	overflow = q.queued > q.limit
	q.mu.Unlock()
	signal(q.wake)
	return overflow
}

// waitSpace blocks until the queue holds less than its window, it closes, or
// cancel is closed; it reports whether there is room.
func (q *sendQueue) waitSpace(cancel <-chan struct{}) bool {
	for {
		q.mu.Lock()
		closing, room := q.closing, q.queued < q.window
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

// next returns the next frame for the writer, or ok=false with the close to
// perform. It blocks until one of them is pending.
func (q *sendQueue) next() (f outFrame, ok bool, end Close) {
	for {
		q.mu.Lock()
		if q.head < len(q.frames) && (!q.closing || q.flush) {
			f = q.frames[q.head]
			q.frames[q.head] = outFrame{}
			q.head++
			if q.head == len(q.frames) {
				q.frames, q.head = q.frames[:0], 0
			}
			q.mu.Unlock()
			return f, true, Close{}
		}
		if q.closing {
			end = q.end
			q.mu.Unlock()
			return outFrame{}, false, end
		}
		q.mu.Unlock()
		<-q.wake
	}
}

// empty reports whether no frame waits for the writer.
func (q *sendQueue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.head == len(q.frames)
}

// flushing reports whether the queue was closed by a flushing close.
func (q *sendQueue) flushing() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.flush
}

// written releases the bytes of a frame the writer finished with.
func (q *sendQueue) written(n int) {
	q.mu.Lock()
	q.queued -= int64(n)
	below := q.queued < q.window
	q.mu.Unlock()
	if below {
		signal(q.space)
	}
}

// close stops intake and asks the writer to end the socket with end: after
// writing what is queued when flush is set, at once otherwise. Only the
// first close counts.
func (q *sendQueue) close(end Close, flush bool) {
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		return
	}
	q.closing, q.flush, q.end = true, flush, end
	if !flush {
		for i := q.head; i < len(q.frames); i++ {
			q.queued -= int64(len(q.frames[i].data))
			q.frames[i].done()
			q.frames[i] = outFrame{}
		}
		q.frames, q.head = nil, 0
	}
	q.mu.Unlock()
	signal(q.wake)
	signal(q.space)
}

// signal does a non-blocking send on a cap-1 channel.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
