package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/loglimit"
)

// maxBatchBytes is how many queued frames the writer coalesces into one
// WebSocket message. The gateway splits messages on "\n", so a batch reads
// exactly like separate messages, at a fraction of the syscalls.
const maxBatchBytes = 64 << 10

// conn is one authenticated gateway connection. One goroutine reads (serve),
// one writes (writeLoop), one pings; everything else only enqueues frames.
type conn struct {
	id     uint64
	srv    *Server
	gw     *gatewayRecord
	hub    *hub
	ws     *websocket.Conn
	raw    net.Conn // the socket under ws
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	// The send queue, guarded by qmu.
	qmu     sync.Mutex
	queue   [][]byte
	qbytes  int
	qclosed bool
	wake    chan struct{} // capacity 1: the writer has work
	written chan struct{} // capacity 1: the writer finished a batch
	// wantPump is set when dispatch skipped c for a full queue; the writer
	// asks the ledger to dispatch again once it drained.
	wantPump atomic.Bool

	// writeTimer closes a socket whose write takes longer than
	// WriteTimeout on the server's clock; one reusable timer instead of a
	// context per write.
	writeTimer clock.Timer

	closeOnce sync.Once
	closeCode atomic.Int32  // the code we closed with, for the log line
	closeDone chan struct{} // closed when closeWith's close has finished

	// Owned by the read loop.
	// identities are the hello'd platforms, each once, in first-hello
	// order; outbound resolves among them.
	identities []string

	// logs is the allowance for the log lines c's frames cause.
	logs *loglimit.Bucket

	outSlots chan struct{} // bounds concurrent outbound ops
}

func newConn(s *Server, gw *gatewayRecord, ws *websocket.Conn, raw net.Conn, remote string) *conn {
	id := s.connID.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{
		id: id, srv: s, gw: gw, hub: gw.tenant, ws: ws, raw: raw, ctx: ctx, cancel: cancel,
		log:       s.log.With("tenant", gw.tenant.id, "gateway_id", gw.id, "conn", id, "remote", remote),
		logs:      loglimit.NewBucket(connLogRate, s.cfg.Clock.Now),
		wake:      make(chan struct{}, 1),
		written:   make(chan struct{}, 1),
		closeDone: make(chan struct{}),
		outSlots:  make(chan struct{}, s.cfg.MaxOutboundInFlight),
	}
}

// HasRoom implements ledger.Consumer: whether c may take one more entry
// now. A queue over half its bound takes nothing new until the writer
// drained it, so a burst of large inbound waits in the ledger instead of
// closing c.
func (c *conn) HasRoom() bool {
	c.qmu.Lock()
	full := c.qbytes >= c.srv.cfg.SendQueueBytes/2
	c.qmu.Unlock()
	if full {
		c.wantPump.Store(true)
	}
	return !full
}

// Offer implements ledger.Consumer: it enqueues frame.
func (c *conn) Offer(frame []byte) bool { return c.enqueue(frame) }

// enqueue queues one complete frame for the writer. It never blocks: a queue
// over Config.SendQueueBytes means the gateway does not keep up, and the
// connection is closed 4408 (its unacknowledged inbound is redelivered).
func (c *conn) enqueue(frame []byte) bool {
	c.qmu.Lock()
	if c.qclosed {
		c.qmu.Unlock()
		return false
	}
	if c.qbytes+len(frame) > c.srv.cfg.SendQueueBytes {
		c.qclosed = true
		c.qmu.Unlock()
		c.closeWith(contract.CloseSlowConsumer, "send queue overflow: gateway too slow")
		return false
	}
	c.queue = append(c.queue, frame)
	c.qbytes += len(frame)
	c.qmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return true
}

// closeWith closes the socket with code and reason, once, without waiting.
// Frames queued before it are written first (bounded by WriteTimeout), so a
// result answered just before a shutdown still reaches the gateway ahead of
// the close frame; a slow consumer or an unanswered ping is closed at once,
// since nothing more can get through. The close handshake that follows is
// bounded by CloseTimeout (Server.closeSocket).
func (c *conn) closeWith(code contract.CloseCode, reason string) {
	c.closeOnce.Do(func() {
		c.closeCode.Store(int32(code))
		c.qmu.Lock()
		c.qclosed = true
		c.qmu.Unlock()
		flush := code != contract.CloseSlowConsumer && code != contract.CloseInternalError
		go func() {
			defer close(c.closeDone)
			if flush {
				c.waitWritten(c.srv.cfg.WriteTimeout)
			}
			c.srv.closeSocket(c.ws, c.raw, code, reason)
			c.cancel()
		}()
	})
}

// waitWritten waits until every queued frame was written, the writer ended,
// or timeout passed.
func (c *conn) waitWritten(timeout time.Duration) {
	expired := make(chan struct{})
	t := c.srv.cfg.Clock.AfterFunc(timeout, func() { close(expired) })
	defer t.Stop()
	for {
		c.qmu.Lock()
		pending := c.qbytes
		c.qmu.Unlock()
		if pending == 0 {
			return
		}
		select {
		case <-c.written:
		case <-c.ctx.Done():
			return
		case <-expired:
			return
		}
	}
}

// serve runs the connection until it closes.
func (c *conn) serve() {
	c.ws.SetReadLimit(contract.MaxFrameBytes)
	c.writeTimer = c.srv.cfg.Clock.AfterFunc(time.Hour, func() { _ = c.ws.CloseNow() })
	c.writeTimer.Stop()
	defer c.writeTimer.Stop()
	c.srv.cfg.Metrics.ConnOpened(c.hub.id)
	c.log.Info("gateway connected")
	var wg sync.WaitGroup
	wg.Go(c.writeLoop)
	wg.Go(c.pingLoop)

	err := c.readLoop()

	c.cancel()
	wg.Wait()
	c.hub.detach(c)
	_ = c.ws.CloseNow()
	// Either a closeWith is under way, or none will start from now on.
	c.closeOnce.Do(func() { close(c.closeDone) })
	<-c.closeDone
	c.srv.cfg.Metrics.ConnClosed(c.hub.id)
	c.logClosed(err)
}

func (c *conn) logClosed(err error) {
	attrs := []any{}
	if code := c.closeCode.Load(); code != 0 {
		attrs = append(attrs, "close_code", code)
	} else if st := websocket.CloseStatus(err); st != -1 {
		attrs = append(attrs, "peer_close_code", int(st))
	} else if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) {
		attrs = append(attrs, "err", err)
	}
	if n := c.logs.TakeSuppressed(); n > 0 {
		attrs = append(attrs, "log_lines_suppressed", n)
	}
	c.log.Info("gateway disconnected", attrs...)
}

// readLoop reads messages until the connection fails, handling every
// "\n"-separated frame in each (text or binary, as the gateway's own reader
// accepts both).
func (c *conn) readLoop() error {
	var buf bytes.Buffer
	for {
		// No context: a cancellable one costs coder/websocket a timer
		// registration per message. Every way the connection ends closes the
		// socket (closeWith, a failed write or ping, the peer), which ends
		// this read.
		_, r, err := c.ws.Reader(context.Background())
		if err != nil {
			return err
		}
		buf.Reset()
		if _, err := buf.ReadFrom(r); err != nil {
			return err
		}
		contract.SplitLines(buf.Bytes(), c.handleLine)
		if buf.Cap() > 64<<10 {
			buf = bytes.Buffer{} // do not pin a rare large message's buffer
		}
	}
}

// writeLoop writes queued frames until the connection ends, coalescing what
// is queued into messages of up to maxBatchBytes.
func (c *conn) writeLoop() {
	var batch []byte
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.wake:
		}
		c.qmu.Lock()
		frames := c.queue
		c.queue = nil
		c.qmu.Unlock()
		for i := 0; i < len(frames); {
			batch = append(batch[:0], frames[i]...)
			n := len(frames[i])
			frames[i] = nil
			for i++; i < len(frames) && len(batch)+len(frames[i]) <= maxBatchBytes; i++ {
				batch = append(batch, frames[i]...)
				n += len(frames[i])
				frames[i] = nil
			}
			if err := c.write(batch); err != nil {
				c.log.Info("write failed: closing slow or gone gateway", "err", err)
				c.closeWith(contract.CloseSlowConsumer, "write timed out: gateway too slow")
				return
			}
			c.qmu.Lock()
			c.qbytes -= n
			c.qmu.Unlock()
		}
		if cap(batch) > 4*maxBatchBytes {
			batch = nil
		}
		select {
		case c.written <- struct{}{}:
		default:
		}
		if c.wantPump.CompareAndSwap(true, false) {
			c.hub.ledger.Pump()
		}
	}
}

// write writes one message. A write still blocked after WriteTimeout (the
// gateway stopped reading) has its socket closed under it.
func (c *conn) write(msg []byte) error {
	c.writeTimer.Reset(c.srv.cfg.WriteTimeout)
	err := c.ws.Write(context.Background(), websocket.MessageText, msg)
	if !c.writeTimer.Stop() && err == nil {
		err = errWriteTimeout // fired as the write completed: treat it as late
	}
	return err
}

// errWriteTimeout reports a write that outlasted WriteTimeout.
var errWriteTimeout = errors.New("write timed out")

// pingLoop pings the gateway every PingInterval; a pong that does not come
// within the next interval ends the connection.
func (c *conn) pingLoop() {
	clk, interval := c.srv.cfg.Clock, c.srv.cfg.PingInterval
	for {
		if clk.Sleep(c.ctx, interval) != nil {
			return
		}
		ctx, cancel := context.WithCancel(c.ctx)
		deadline := clk.AfterFunc(interval, func() {
			// Close before cancelling: coder/websocket drops the socket
			// when a Ping's context ends, and the read loop would then
			// report a bare network error instead of the timeout.
			c.log.Info("ping unanswered: closing")
			c.closeWith(contract.CloseInternalError, "ping timeout")
			cancel()
		})
		err := c.ws.Ping(ctx)
		deadline.Stop()
		cancel()
		if err != nil {
			if c.ctx.Err() == nil {
				c.log.Info("ping failed: closing", "err", err)
				c.closeWith(contract.CloseInternalError, "ping failed")
			}
			return
		}
	}
}
