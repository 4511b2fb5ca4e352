package wsconn

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/internal/clock"
)

// ErrWriteTimeout reports a write that outlasted its Watchdog's timeout:
// the peer stopped reading, and its socket was dropped under it.
var ErrWriteTimeout = errors.New("wsconn: write timed out")

// Watchdog bounds each write to one socket: a write still blocked after the
// timeout has its socket dropped under it. It is one timer that a write
// arms only when it is not armed already: when the timer fires it drops
// the socket if the write under way started a timeout ago or more, waits
// for the rest of the timeout if a later write is under way, and disarms
// if none is. So a busy connection touches no timer per write (the timer
// fires about once per timeout), and an idle one keeps none armed once a
// timeout passed since its last write. Write and Stop must not be called
// concurrently (one writer goroutine calls them); Init before the first.
type Watchdog struct {
	ws      *websocket.Conn
	clk     clock.Clock
	timeout time.Duration
	timer   clock.Timer // made by the first write

	deadline atomic.Pointer[clock.Timer] // Expire's

	// started is when the write under way started, on clk, in Unix
	// nanoseconds; noWrite while none is.
	started atomic.Int64
	armed   atomic.Bool // the timer is pending, or firing and not yet disarmed
	fired   atomic.Bool // the timer dropped the socket
	stopped atomic.Bool // Stop was called
}

// noWrite is Watchdog.started while no write is under way.
const noWrite = math.MinInt64

// Init bounds every write to ws by timeout on clk.
func (w *Watchdog) Init(ws *websocket.Conn, clk clock.Clock, timeout time.Duration) {
	w.ws, w.clk, w.timeout = ws, clk, timeout
	w.started.Store(noWrite)
}

// Write writes one message, returning ErrWriteTimeout when the watchdog
// fired (even if the write then completed: it was late).
func (w *Watchdog) Write(typ websocket.MessageType, msg []byte) error {
	// started before armed: a timer that disarms after this store sees it
	// and arms again (fire), one that disarmed before it is armed here.
	w.started.Store(w.clk.Now().UnixNano())
	if w.armed.CompareAndSwap(false, true) {
		if w.timer == nil {
			w.timer = w.clk.AfterFunc(w.timeout, w.fire)
		} else {
			w.timer.Reset(w.timeout)
		}
	}
	err := w.ws.Write(context.Background(), typ, msg)
	w.started.Store(noWrite)
	if w.fired.Load() {
		err = ErrWriteTimeout
	}
	return err
}

// fire is the timer's: it drops the socket under a write that has run for
// the timeout, and otherwise arms the timer again for a write under way
// (for the rest of its timeout) or disarms it.
func (w *Watchdog) fire() {
	if w.stopped.Load() {
		return
	}
	w.armed.Store(false)
	start := w.started.Load()
	if start == noWrite || !w.armed.CompareAndSwap(false, true) {
		return // no write under way, or one armed the timer again itself
	}
	left := time.Duration(start + int64(w.timeout) - w.clk.Now().UnixNano())
	if left > 0 {
		w.timer.Reset(left)
		return
	}
	w.fired.Store(true)
	_ = w.ws.CloseNow()
}

// Armed reports whether the watchdog's timer is pending, which it is from
// a write until a timeout passed with none under way, and never after
// Stop. Tests that count the timers on a fake clock count these.
func (w *Watchdog) Armed() bool { return w.armed.Load() && !w.stopped.Load() }

// Expire drops the socket one timeout from now unless Stop comes first,
// whatever writes are under way then, which return ErrWriteTimeout: a
// closing connection's flush is bounded in total, not only per write, so a
// peer that reads slowly but steadily cannot keep it flushing. Any
// goroutine may call it, once.
func (w *Watchdog) Expire() {
	t := w.clk.AfterFunc(w.timeout, func() {
		if !w.stopped.Load() {
			w.fired.Store(true)
			_ = w.ws.CloseNow()
		}
	})
	w.deadline.Store(&t)
	if w.stopped.Load() { // Stop ran before the Store: it missed t
		t.Stop()
	}
}

// Fired reports whether the watchdog dropped the socket: a write ran for
// the timeout, or Expire's deadline passed. On a fake clock it is set
// inside the Advance that reached it.
func (w *Watchdog) Fired() bool { return w.fired.Load() }

// Expiring reports whether Expire has armed its deadline. A closing
// connection's queue reports its flush (Queue.Flushing) just before Expire
// arms it: a test on a fake clock waits for both before advancing.
func (w *Watchdog) Expiring() bool { return w.deadline.Load() != nil }

// Stop disarms the watchdog for good (the connection ended): a timer
// firing meanwhile does not arm it again.
func (w *Watchdog) Stop() {
	w.stopped.Store(true)
	if w.timer != nil {
		w.timer.Stop()
	}
	if t := w.deadline.Load(); t != nil {
		(*t).Stop()
	}
}
