package nexscope

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/internal/clock"
)

// member is one connected client: one WebSocket, one session. Its handler
// goroutine reads (readLoop), one writer goroutine drains its sendQueue, and
// heartbeat ticks come from the platform's clock (platform.Deps.Clock).
type member struct {
	p      *Platform
	room   *room
	id     uint64 // this instance's connection number
	name   string
	quoted []byte // name as a JSON string, for ack lists
	ws     *websocket.Conn
	q      *sendQueue
	log    *slog.Logger

	ctx    context.Context // cancelled by run when the member is finished
	cancel context.CancelFunc
	wg     sync.WaitGroup // writer and ping goroutines

	left atomic.Bool // removed from the room

	// Several instances (cluster.go): link is set on the instance holding
	// the socket when the room's home is another instance; remote is set at
	// the home for a member whose socket is on another instance (ws is nil).
	link   *edgeLink
	remote *homeLink

	// heartbeat
	awaitingPong atomic.Bool
	hbMu         sync.Mutex
	hbTimer      clock.Timer
	missed       int // touched only by the heartbeat chain

	// writeWatch disconnects a member whose write exceeds WriteTimeout.
	writeWatch *time.Timer

	// reader goroutine only
	strikes  int
	stop     bool       // the reader must return (a close was requested)
	transfer *transfer  // the transfer this member sends, if any
	dropping dropStream // a refused or aborted stream still arriving
	scratch  []byte
	routed   routed // reused by handleMsg
}

func newMember(p *Platform, r *room, name string) *member {
	// ctx exists before the member joins: once it is in the room, another
	// connection's name probe may ping it before run starts.
	ctx, cancel := context.WithCancel(context.Background())
	return &member{
		p:      p,
		room:   r,
		name:   name,
		quoted: appendQuoted(nil, name),
		q:      newSendQueue(p.cfg.SendQueueBytes, p.cfg.SendQueueBytes+p.cfg.MaxPayload),
		ctx:    ctx,
		cancel: cancel,
	}
}

// appendQuoted appends a valid member name as a JSON string (names need no
// escaping).
func appendQuoted(dst []byte, name string) []byte {
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"')
}

// run serves the member after it joined: it starts the writer and the
// heartbeat, reads until the connection ends, and returns once every
// goroutine of the member has finished.
func (m *member) run() {
	// The heartbeat is armed before the writer sends the first presence, so
	// a client that has its presence knows the heartbeat is running.
	m.hbMu.Lock()
	if !m.left.Load() {
		m.hbTimer = m.p.clock.AfterFunc(m.p.cfg.HeartbeatInterval, m.heartbeat)
	}
	m.hbMu.Unlock()
	m.writeWatch = time.AfterFunc(time.Hour, m.writeTimedOut)
	m.writeWatch.Stop()
	m.wg.Add(1)
	go m.writeLoop()

	err := m.readLoop()
	m.leave()
	m.q.close(closeNoHandshake, false)
	m.cancel()
	m.wg.Wait()
	m.log.Debug("nexscope member disconnected", "close_status", int(websocket.CloseStatus(err)))
}

// readLoop reads messages until the connection fails or a close was
// requested.
func (m *member) readLoop() error {
	limit := m.p.cfg.MaxPayload
	for !m.stop {
		typ, rd, err := m.ws.Reader(context.Background())
		if err != nil {
			return err
		}
		data, err := readMessage(rd, &m.scratch, limit)
		if errors.Is(err, errTooLarge) {
			m.log.Info("nexscope frame over max_payload", "max_payload", limit)
			m.send(errorFrame(CodeMsgTooLarge, "frame exceeds max payload"))
			m.closeAfterFlush(CloseTooLarge)
			return err
		}
		if err != nil {
			return err
		}
		if m.link != nil {
			m.link.forward(m, typ, data)
		} else if typ == websocket.MessageBinary {
			m.handleChunk(data)
		} else {
			m.handleText(data)
		}
	}
	return nil
}

// errTooLarge reports a message over MaxPayload.
var errTooLarge = errors.New("message exceeds max payload")

// maxScratch is the largest read buffer a member keeps between messages.
const maxScratch = 1 << 20

// readMessage reads one message of at most limit bytes into *scratch (grown
// as needed and kept when small) and returns it.
func readMessage(r io.Reader, scratch *[]byte, limit int64) ([]byte, error) {
	buf := (*scratch)[:0]
	for {
		if len(buf) == cap(buf) {
			n := max(2*cap(buf), 4096)
			if int64(n) > limit+1 {
				n = int(limit + 1)
			}
			if n <= cap(buf) {
				return nil, errTooLarge
			}
			grown := make([]byte, len(buf), n)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, errTooLarge
		}
		if err == io.EOF {
			if cap(buf) <= maxScratch {
				*scratch = buf
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// writeLoop writes queued frames until the queue closes, then closes the
// socket as asked.
func (m *member) writeLoop() {
	defer m.wg.Done()
	for {
		f, ok, end := m.q.next()
		if !ok {
			closeWith(m.ws, end)
			return
		}
		m.writeWatch.Reset(m.p.cfg.WriteTimeout)
		err := m.ws.Write(context.Background(), f.typ, f.data)
		m.writeWatch.Stop()
		m.q.written(len(f.data))
		f.done()
		if err == nil && m.link != nil {
			m.link.wrote(m, len(f.data))
		}
		if err != nil {
			m.q.close(closeNoHandshake, false)
			_ = m.ws.CloseNow()
			return
		}
	}
}

// writeTimedOut disconnects a member stuck in one write for WriteTimeout.
func (m *member) writeTimedOut() {
	m.log.Info("nexscope member too slow, disconnecting", "write_timeout", m.p.cfg.WriteTimeout)
	m.p.metrics.Dropped(platformName, "slow_consumer")
	m.leave()
	m.q.close(CloseSlowConsumer, false)
	_ = m.ws.CloseNow()
}

// send queues a frame for this member; a queue overflow disconnects it.
func (m *member) send(data []byte) {
	if m.q.push(outFrame{typ: websocket.MessageText, data: data}) {
		m.kick(CloseSlowConsumer)
	}
}

// kick removes the member from its room and ends its socket with c at once
// (queued frames are dropped).
func (m *member) kick(c Close) {
	if c == CloseSlowConsumer {
		m.log.Info("nexscope member send queue overflowed, disconnecting")
		m.p.metrics.Dropped(platformName, "slow_consumer")
	}
	m.leave()
	m.q.close(c, false)
}

// closeAfterFlush removes the member and ends its socket with c once the
// frames queued so far (an error frame) are written; the reader stops.
func (m *member) closeAfterFlush(c Close) {
	m.leave()
	m.q.close(c, true)
	m.stop = true
}

// leave removes the member from its room once: presence goes to the others,
// a transfer it sends is abandoned, its heartbeat stops.
func (m *member) leave() {
	if m.left.Swap(true) {
		return
	}
	m.hbMu.Lock()
	if m.hbTimer != nil {
		m.hbTimer.Stop()
	}
	m.hbMu.Unlock()
	switch {
	case m.link != nil:
		m.link.leave(m)
	case m.remote != nil:
		m.room.leave(m)
		m.remote.in.close()
	default:
		m.room.leave(m)
	}
}

// heartbeat runs every HeartbeatInterval: a ping still unanswered at the next
// tick is a miss, and the second consecutive miss closes with 4010.
func (m *member) heartbeat() {
	if m.awaitingPong.Load() {
		m.missed++
	} else {
		m.missed = 0
	}
	if m.missed >= 2 {
		m.log.Info("nexscope heartbeat_timeout", "missed_pongs", m.missed)
		m.kick(CloseHeartbeatTimeout)
		return
	}
	m.awaitingPong.Store(true)
	m.hbMu.Lock()
	defer m.hbMu.Unlock()
	if _, ok := m.pingLocked(); !ok {
		return
	}
	m.hbTimer = m.p.clock.AfterFunc(m.p.cfg.HeartbeatInterval, m.heartbeat)
}

// pingLocked sends a WebSocket ping from a goroutine that run waits for; the
// channel receives Ping's result, nil once the pong arrived. It reports false,
// sending nothing, when the member has left. Called under hbMu: left is
// checked and wg.Add done under it, and run's leave takes hbMu before
// wg.Wait, so the wait sees every ping goroutine. The ping lives until its
// pong, the connection's end or the member's end (never cancelled earlier:
// coder/websocket drops a connection whose write context ends mid-write).
func (m *member) pingLocked() (<-chan error, bool) {
	if m.left.Load() {
		return nil, false
	}
	result := make(chan error, 1)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		result <- m.ws.Ping(m.ctx)
	}()
	return result, true
}

// answersPing sends a WebSocket ping and reports whether the pong arrives
// within timeout on the platform's clock (false for a member that left).
func (m *member) answersPing(timeout time.Duration) bool {
	// Armed before the ping goes out: a client that has the ping knows the
	// deadline runs.
	expired := make(chan struct{})
	deadline := m.p.clock.AfterFunc(timeout, func() { close(expired) })
	defer deadline.Stop()
	m.hbMu.Lock()
	result, ok := m.pingLocked()
	m.hbMu.Unlock()
	if !ok {
		return false
	}
	select {
	case err := <-result:
		return err == nil
	case <-expired:
		return false
	}
}

// pong records a WebSocket pong (AcceptOptions.OnPongReceived).
func (m *member) pong(context.Context, []byte) { m.awaitingPong.Store(false) }
