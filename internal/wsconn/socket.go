package wsconn

import (
	"context"
	"errors"
	"time"

	"github.com/coder/websocket"

	"connector/internal/clock"
)

// ErrWriteTimeout reports a write that outlasted its Watchdog's timeout:
// the peer stopped reading, and its socket was dropped under the write.
var ErrWriteTimeout = errors.New("wsconn: write timed out")

// Watchdog bounds each write to one socket: a write still blocked after the
// timeout has its socket dropped under it. It is one reusable timer, armed
// only while a write is under way, instead of a context per write. Its zero
// value is not usable; its methods must not be called concurrently (one
// writer goroutine calls them).
type Watchdog struct {
	ws      *websocket.Conn
	clk     clock.Clock
	timeout time.Duration
	timer   clock.Timer // made by the first write
}

// NewWatchdog bounds every write to ws by timeout on clk.
func NewWatchdog(ws *websocket.Conn, clk clock.Clock, timeout time.Duration) Watchdog {
	return Watchdog{ws: ws, clk: clk, timeout: timeout}
}

// Write writes one message, returning ErrWriteTimeout when the watchdog
// fired (even if the write then completed: it was late).
func (w *Watchdog) Write(typ websocket.MessageType, msg []byte) error {
	if w.timer == nil {
		w.timer = w.clk.AfterFunc(w.timeout, func() { _ = w.ws.CloseNow() })
	} else {
		w.timer.Reset(w.timeout)
	}
	err := w.ws.Write(context.Background(), typ, msg)
	if !w.timer.Stop() {
		err = ErrWriteTimeout
	}
	return err
}

// Stop disarms the watchdog for good (the connection ended).
func (w *Watchdog) Stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}
