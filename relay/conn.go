package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"connector/contract"
	"connector/internal/loglimit"
	"connector/internal/wsconn"
	"connector/relay/ledger"
)

// maxBatchBytes is how many queued frames the writer coalesces into one
// WebSocket message. The gateway splits messages on "\n", so a batch reads
// exactly like separate messages, at a fraction of the syscalls.
const maxBatchBytes = 64 << 10

// writerLinger is how long a busy gateway's writer goroutine waits for the
// next frame before it exits (wsconn.Queue.Linger): several times the gap
// between one gateway's events at saturation with 1,000 gateways, so that
// a loaded connection keeps its writer instead of starting one per event.
const writerLinger = 100 * time.Millisecond

// conn is one authenticated gateway connection. Its own goroutine reads
// (serve); a writer goroutine runs while frames are queued (wsconn.Queue),
// pings ride on the server's clock (wsconn.Keepalive); everything else
// only enqueues frames.
type conn struct {
	id     uint64
	key    string // names c among every instance's connections
	srv    *Server
	gw     *gatewayRecord
	hub    *hub
	ws     *websocket.Conn
	raw    net.Conn // the socket under ws
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	q     *wsconn.Queue
	watch wsconn.Watchdog // the writer goroutine's
	alive wsconn.Keepalive
	// wantPump is set when dispatch skipped c for a full queue; the writer
	// asks the ledger to dispatch again once it drained.
	wantPump atomic.Bool
	// inbound counts the inbound frames c was given, by its tenant's ledger
	// here or by its driver on another instance: the most acks c forwards to
	// another instance (tenantFleet.ackOut).
	inbound atomic.Uint64

	closeCode atomic.Int32 // the code we closed with, for the log line
	// closing is set once closeWith was called: the reader then acts on
	// nothing but acks.
	closing atomic.Bool
	// unrevoked ends (revoke) when c closes for a revocation: the reader
	// then acts on nothing at all, and the outbound ops c started, still
	// running, are cancelled (their ctx's parent), so none acts once its
	// gateway, its secret or its tenant's creation is gone, and none is
	// answered (conn.answer).
	unrevoked context.Context
	revoke    context.CancelFunc

	// Owned by the read loop.
	// identities are the hello'd platforms, each once, in first-hello
	// order; outbound resolves among them.
	identities []string

	// logs is the allowance for the log lines c's frames cause.
	logs *loglimit.Bucket
	// interrupts is the allowance for c's interrupts, made by the first.
	interrupts *rate.Limiter

	outSlots chan struct{} // bounds concurrent outbound ops
	outBytes atomic.Int64  // their actions' bytes, bounded by maxOutboundBytes

	place   *slot  // the admission slot, given up once c ended
	secret  []byte // the key of the secret c authenticated with
	helloed bool   // a hello was read: reading goes on on a fresh goroutine (see read)
	acksOut uint64 // acks forwarded to another instance (tenantFleet.ackOut)
}

func newConn(s *Server, gw *gatewayRecord, ws *websocket.Conn, raw net.Conn, remote string) *conn {
	id := s.connID.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	unrevoked, revoke := context.WithCancel(context.Background())
	c := &conn{
		id: id, key: s.incarnation + "." + strconv.FormatUint(id, 10), srv: s, gw: gw, hub: gw.tenant,
		ws: ws, raw: raw, ctx: ctx, cancel: cancel, unrevoked: unrevoked, revoke: revoke,
		log:      s.log.With("tenant", gw.tenant.id, "gateway_id", gw.id, "conn", id, "remote", remote),
		logs:     loglimit.NewBucket(connLogRate, s.cfg.Clock),
		outSlots: make(chan struct{}, s.cfg.MaxOutboundInFlight),
	}
	c.watch.Init(ws, s.cfg.Clock, s.cfg.WriteTimeout)
	c.q = wsconn.NewQueue(c, 0, int64(s.cfg.SendQueueBytes), maxBatchBytes)
	c.q.Linger(&s.writerLinger)
	return c
}

// Offer implements ledger.Consumer: it enqueues frame unless the queue is
// over half its bound (a burst of large inbound then waits in the ledger
// instead of closing c; the writer pumps the ledger once it drained).
func (c *conn) Offer(frame []byte) ledger.Offered {
	half := int64(c.srv.cfg.SendQueueBytes / 2)
	f := wsconn.Frame{Type: websocket.MessageText, Data: frame, Owner: ledgerFrame{}}
	took, err := c.q.PushBelow(f, half)
	if !took {
		c.wantPump.Store(true)
		// Again after wantPump is set: the writer may have drained the
		// queue meanwhile, and then saw no wantPump to pump on.
		if took, err = c.q.PushBelow(f, half); !took {
			return ledger.Full
		}
	}
	if !c.pushed(err) {
		return ledger.Closing
	}
	c.inbound.Add(1)
	return ledger.Taken
}

// fed is the Owner of a frame of the tenant's ledger queued on a
// connection: its driver's, here (Offer) or on another instance (frameIn).
type fed interface {
	wsconn.Releaser
	fed()
}

// ledgerFrame is the Owner of a ledger's frame that nothing waits for.
type ledgerFrame struct{}

// Release implements wsconn.Releaser.
func (ledgerFrame) Release() {}

func (ledgerFrame) fed() {}

// dropFed drops the ledger's frames queued on c and not being written yet,
// once whoever fed them stopped: the ledger that sent them forgot them, or
// gave them back to be sent again (endLinkLocked).
func (c *conn) dropFed() {
	c.q.Remove(func(f wsconn.Frame) bool {
		_, ok := f.Owner.(fed)
		return ok
	})
}

// push implements pusher.
func (c *conn) push(frame []byte) { c.enqueue(frame) }

// Owner implements ledger.Consumer.
func (c *conn) Owner() (instance, conn string) { return c.srv.instance, c.key }

// enqueue queues one complete frame for the writer. It never blocks: a queue
// over Config.SendQueueBytes means the gateway does not keep up, and the
// connection is closed 4408 (its unacknowledged inbound is redelivered).
func (c *conn) enqueue(frame []byte) bool { return c.enqueueOwned(frame, nil) }

// enqueueOwned is enqueue with owner released once frame was written (or
// dropped).
func (c *conn) enqueueOwned(frame []byte, owner wsconn.Releaser) bool {
	return c.pushed(c.q.Push(wsconn.Frame{Type: websocket.MessageText, Data: frame, Owner: owner}))
}

// pushed acts on what a push onto c's queue returned: an overflow closes c
// (EndTooSlow). It reports whether the frame was queued for a connection
// that stays open.
func (c *conn) pushed(err error) bool {
	if err == wsconn.ErrOverflow {
		c.closeWith(contract.EndTooSlow)
	}
	return err == nil
}

// closeWith closes the socket with e, once, without waiting. Frames queued
// before it are written first, within WriteTimeout from the close in all
// (then the socket is dropped: a gateway reading slowly but steadily cannot
// keep a closing connection flushing), so a result answered just before a
// shutdown still reaches the gateway ahead of the close frame; a slow
// consumer or an unanswered ping is closed at once, since nothing more can
// get through. The close handshake that follows is bounded by CloseTimeout
// (Server.closeSocket).
func (c *conn) closeWith(e contract.Close) {
	if e == contract.EndRevoked {
		c.revoke()
	}
	c.closing.Store(true)
	flush := e != contract.EndTooSlow && e != contract.EndPingTimeout
	if c.q.Close(e, flush) && flush {
		c.watch.Expire()
	}
}

// Write implements wsconn.Writer: it writes batch as one message
// (maxBatchBytes).
func (c *conn) Write(batch []wsconn.Frame) error {
	msg := batch[0].Data
	if len(batch) > 1 {
		buf := batchPool.Get().(*[]byte)
		defer batchPool.Put(buf)
		*buf = (*buf)[:0]
		for _, f := range batch {
			*buf = append(*buf, f.Data...)
		}
		msg = *buf
	}
	if err := c.watch.Write(websocket.MessageText, msg); err != nil {
		c.log.Info("write failed: closing slow or gone gateway", "err", err)
		return contract.EndTooSlow
	}
	c.q.Written(len(msg))
	if c.wantPump.Load() && c.q.Queued() < int64(c.srv.cfg.SendQueueBytes/2) && c.wantPump.CompareAndSwap(true, false) {
		c.hub.ledger.Pump()
	}
	return nil
}

// batchPool holds the buffers writers join a batch's frames in.
var batchPool = sync.Pool{New: func() any { b := make([]byte, 0, maxBatchBytes); return &b }}

// End implements wsconn.Writer: it closes the socket with e, or drops it.
func (c *conn) End(e contract.Close) {
	c.watch.Stop()
	if e == wsconn.Drop {
		_ = c.ws.CloseNow()
	} else {
		c.closeCode.Store(int32(e.Code))
		c.srv.closeSocket(c.ws, c.raw, e)
	}
	c.cancel()
}

// serve runs the connection until it closes.
func (c *conn) serve() {
	c.ws.SetReadLimit(contract.MaxFrameBytes)
	c.srv.cfg.Metrics.ConnOpened(c.hub.id)
	c.log.Info("gateway connected")
	c.q.Start()
	c.alive.Init(c.ws, c.srv.cfg.Clock, c.srv.cfg.PingInterval, 1, func() {
		c.log.Info("ping unanswered: closing")
		c.closeWith(contract.EndPingTimeout)
	})
	c.alive.Start()
	c.read()
}

// read runs the read loop until the connection fails, then ends c. After a
// message with a hello it goes on on a fresh goroutine: decoding and
// answering hellos grows a goroutine's stack to 8 KiB, which the runtime
// keeps (it shrinks no stack below 4 times its use), while the blocking read
// of an idle connection needs 4 KiB.
func (c *conn) read() {
	defer func() {
		if v := recover(); v != nil { // a bug ends this connection, not the process
			c.log.Error("gateway connection failed: panic", "panic", v, "stack", string(debug.Stack()))
			c.end(errPanicked)
		}
	}()
	err := c.readLoop()
	if err == nil {
		go c.read()
		return
	}
	c.end(err)
}

// errPanicked is what ends a connection whose reader panicked.
var errPanicked = errors.New("reader panicked")

// end tears c down after its reader stopped with err.
func (c *conn) end(err error) {
	c.cancel()
	c.q.Close(wsconn.Drop, false) // unless a close is under way
	<-c.q.Done()
	c.alive.Wait()
	c.hub.detach(c)
	c.srv.cfg.Metrics.ConnClosed(c.hub.id)
	c.logClosed(err)
	untrack(c.srv, c.srv.conns, &c.srv.connsWG, c.key)
	c.gw.admission.release(c.place)
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

// readLoop reads messages until the connection fails (its error) or a
// message had a hello (nil), handling every "\n"-separated frame in each
// (text or binary, as the gateway's own reader accepts both).
func (c *conn) readLoop() error {
	for {
		// No context: a cancellable one costs coder/websocket a timer
		// registration per message. Every way the connection ends closes the
		// socket (closeWith, a failed write or ping, the peer), which ends
		// this read.
		_, r, err := c.ws.Reader(context.Background())
		if err != nil {
			return err
		}
		// A buffer only while a message is read: an idle connection holds
		// none.
		buf := readBuffers.Get().(*bytes.Buffer)
		buf.Reset()
		_, err = buf.ReadFrom(r)
		if err == nil {
			contract.SplitLines(buf.Bytes(), c.handleLine)
		}
		if buf.Cap() <= 64<<10 { // do not pin a rare large message's buffer
			readBuffers.Put(buf)
		}
		if err != nil || c.helloed {
			c.helloed = false
			return err
		}
	}
}

// readBuffers holds the buffers read loops read a message into.
var readBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
