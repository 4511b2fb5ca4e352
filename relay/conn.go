package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
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
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	// The send queue, guarded by qmu.
	qmu     sync.Mutex
	queue   [][]byte
	qbytes  int
	qclosed bool
	wake    chan struct{} // capacity 1: the writer has work
	// wantPump is set when dispatch skipped c for a full queue; the writer
	// asks the hub to dispatch again once it drained.
	wantPump atomic.Bool

	closeOnce sync.Once
	closeCode atomic.Int32  // the code we closed with, for the log line
	closeDone chan struct{} // closed when closeWith's close has finished

	// Guarded by hub.mu.
	fronts   platformSet
	attached bool // in hub.conns: receives new inbound
	idle     bool // sent going_idle
	detached bool // closed and removed from the hub
	inflight int  // windowed entries sent and not acknowledged

	// Owned by the read loop.
	identities []string // hello'd platforms, in order; the first is the default
	malformed  int

	outSlots chan struct{} // bounds concurrent outbound ops
}

// platformSet is the set of platforms a connection hello'd.
type platformSet struct {
	all   bool // hello'd "relay": every platform
	names []string
}

func (p *platformSet) add(name string) {
	if !slices.Contains(p.names, name) {
		p.names = append(p.names, name)
	}
}

func (p *platformSet) has(name string) bool { return p.all || slices.Contains(p.names, name) }

func newConn(s *Server, gw *gatewayRecord, ws *websocket.Conn, remote string) *conn {
	id := s.connID.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{
		id: id, srv: s, gw: gw, hub: gw.tenant, ws: ws, ctx: ctx, cancel: cancel,
		log:       s.log.With("tenant", gw.tenant.id, "gateway_id", gw.id, "conn", id, "remote", remote),
		wake:      make(chan struct{}, 1),
		closeDone: make(chan struct{}),
		outSlots:  make(chan struct{}, s.cfg.MaxOutboundInFlight),
	}
}

// serves reports whether c receives inbound of platform name. Hub-guarded.
func (c *conn) serves(name string) bool { return c.fronts.has(name) }

// hasRoom reports whether c may take one more entry now. Hub-guarded. A
// queue over half its bound takes nothing new until the writer drained it,
// so a burst of large inbound waits in the ledger instead of closing c.
func (c *conn) hasRoom(windowed bool) bool {
	if windowed && c.inflight >= c.srv.cfg.AckWindow {
		return false
	}
	c.qmu.Lock()
	full := c.qbytes >= c.srv.cfg.SendQueueBytes/2
	c.qmu.Unlock()
	if full {
		c.wantPump.Store(true)
	}
	return !full
}

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

// closeWith closes the socket with code and reason, once. It does not wait
// for the close handshake.
func (c *conn) closeWith(code contract.CloseCode, reason string) {
	c.closeOnce.Do(func() {
		c.closeCode.Store(int32(code))
		c.qmu.Lock()
		c.qclosed = true
		c.qmu.Unlock()
		go func() {
			defer close(c.closeDone)
			_ = c.ws.Close(websocket.StatusCode(code), contract.TruncateReason(reason))
			c.cancel()
		}()
	})
}

// serve runs the connection until it closes.
func (c *conn) serve() {
	c.ws.SetReadLimit(contract.MaxFrameBytes)
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
	c.log.Info("gateway disconnected", attrs...)
}

// readLoop reads messages until the connection fails, handling every
// "\n"-separated frame in each (text or binary, as the gateway's own reader
// accepts both).
func (c *conn) readLoop() error {
	var buf bytes.Buffer
	for {
		_, r, err := c.ws.Reader(c.ctx)
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
		if c.wantPump.CompareAndSwap(true, false) {
			c.hub.pump()
		}
	}
}

func (c *conn) write(msg []byte) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.srv.cfg.WriteTimeout)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, msg)
}

// pingLoop pings the gateway every PingInterval; a pong that does not come
// within the next interval ends the connection.
func (c *conn) pingLoop() {
	t := time.NewTicker(c.srv.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.srv.cfg.PingInterval)
		err := c.ws.Ping(ctx)
		cancel()
		if err != nil {
			if c.ctx.Err() == nil {
				c.log.Info("ping unanswered: closing", "err", err)
				c.closeWith(contract.CloseInternalError, "ping timeout")
			}
			return
		}
	}
}
