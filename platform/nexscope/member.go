package nexscope

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/coder/websocket"

	"connector/internal/wsconn"
	"connector/session"
)

// member is one connected client: one WebSocket, one session. Its handler
// goroutine reads (readLoop); its wsconn.Queue runs a writer goroutine while
// frames are queued, and its heartbeat (wsconn.Keepalive) and write watchdog
// (wsconn.Watchdog) run on the platform's clock (platform.Deps.Clock).
type member struct {
	p      *Platform
	room   *room
	id     uint64 // this instance's connection number
	name   string
	quoted []byte // name as a JSON string, for ack lists
	ws     *websocket.Conn
	q      *wsconn.Queue
	log    *slog.Logger

	left atomic.Bool // removed from the room
	// reads counts the messages read (answersProbe).
	reads atomic.Uint64

	// Several instances (cluster.go): link is set on the instance holding
	// the socket when the room's home is another instance; remote is set at
	// the home for a member whose socket is on another instance (ws is nil).
	link   *edgeLink
	remote *homeLink

	// alive is the heartbeat and name probes. The reader marks itself held
	// back (alive.Hold) while it waits for room in recipients' queues
	// (handleChunk) or in the home's window (edgeLink.forward): it does
	// not read, so it cannot take a pong, but its client just sent a frame,
	// so neither a heartbeat tick nor a probe counts it as silent.
	alive wsconn.Keepalive
	watch wsconn.Watchdog // disconnects a member whose write exceeds WriteTimeout

	// reader goroutine only
	strikes  int
	stop     bool       // the reader must return (a close was requested)
	transfer *transfer  // the transfer this member sends, if any
	dropping dropStream // a refused or aborted stream still arriving
	scratch  []byte
	routed   routed // reused by handleMsg
}

func newMember(p *Platform, r *room, name string) *member {
	m := &member{
		p:      p,
		room:   r,
		name:   name,
		quoted: session.AppendJSONString(nil, name),
	}
	m.q = m.newQueue(m)
	return m
}

// newQueue is the member's send queue, drained into w: a file chunk waits
// while SendQueueBytes are queued, and more than SendQueueBytes +
// MaxPayload queued is a slow consumer. Each frame counts frameOverhead
// bytes beyond its data.
func (m *member) newQueue(w wsconn.Writer) *wsconn.Queue {
	q := wsconn.NewQueue(w, m.p.cfg.SendQueueBytes, m.p.cfg.SendQueueBytes+m.p.cfg.MaxPayload, 0)
	q.ChargeFrames(frameOverhead)
	return q
}

// frameOverhead is what a queued or forwarded frame counts beyond its
// bytes, about its bookkeeping (a queue slot, a chunk header): a member
// sending empty or tiny file chunks fills a recipient's window, and waits,
// after SendQueueBytes/frameOverhead of them instead of never.
const frameOverhead = 64

// accepted binds the member to its upgraded socket.
func (m *member) accepted(ws *websocket.Conn) {
	m.ws = ws
	m.watch.Init(ws, m.p.deps.Clock, m.p.cfg.WriteTimeout)
	m.alive.Init(ws, m.p.deps.Clock, m.p.cfg.HeartbeatInterval, 2, func() {
		m.log.Info("nexscope heartbeat_timeout", "missed_pongs", 2)
		m.kick(CloseHeartbeatTimeout)
	})
}

// run serves the member after it joined: it starts the heartbeat and the
// writer, reads until the connection ends, and returns once every goroutine
// of the member has finished.
func (m *member) run() {
	// The heartbeat is armed before the writer sends the first presence, so
	// a client that has its presence knows the heartbeat is running.
	m.alive.Start()
	m.q.Start()

	err := m.readLoop()
	m.leave()
	m.q.Close(wsconn.Drop, false)
	<-m.q.Done()
	m.alive.Wait()
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
		buf, held := &m.scratch, (*chunk)(nil)
		if m.link != nil {
			// A pooled buffer the stream to the home writes from.
			held = newChunk(nil, 1)
			buf = &held.buf
		}
		data, err := readMessage(rd, buf, limit)
		if errors.Is(err, errTooLarge) {
			m.log.Info("nexscope frame over max_payload", "max_payload", limit)
			m.send(errorFrame(CodeMsgTooLarge, "frame exceeds max payload", nil))
			m.closeAfterFlush(CloseTooLarge)
			return err
		}
		if err != nil {
			return err
		}
		m.reads.Add(1)
		if m.left.Load() {
			// Removed from the room, its close on its way (after a flush
			// of up to WriteTimeout): what it sends goes nowhere, not to a
			// room it left (which may have been homed here again).
			if held != nil {
				held.Release()
			}
			continue
		}
		if m.link != nil {
			m.link.forward(m, typ, data, held)
			held.Release()
		} else if typ == websocket.MessageBinary {
			m.handleChunk(data, nil)
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
			n := int(min(int64(max(2*cap(buf), 4096)), limit+1))
			if n <= cap(buf) {
				return nil, errTooLarge
			}
			buf = slices.Grow(buf, n-len(buf))
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

// Write implements wsconn.Writer: it writes each frame as one message. A
// write stuck for WriteTimeout disconnects the member as a slow consumer.
func (m *member) Write(batch []wsconn.Frame) error {
	for _, f := range batch {
		err := m.watch.Write(f.Type, f.Data)
		n := m.q.Cost(f)
		m.q.Written(n)
		if err == wsconn.ErrWriteTimeout {
			m.log.Info("nexscope member too slow, disconnecting", "write_timeout", m.p.cfg.WriteTimeout)
			m.p.deps.Metrics.Dropped(platformName, "slow_consumer")
			m.leave()
			return CloseSlowConsumer
		}
		if err != nil {
			return err
		}
		if m.link != nil {
			m.link.wrote(m.room.tenant(), n)
		}
	}
	return nil
}

// End implements wsconn.Writer: it ends the socket with c.
func (m *member) End(c Close) {
	m.watch.Stop()
	closeWith(m.ws, c)
}

// answersProbe reports whether the member's client is alive (a new
// connection asks for its name): it answers a fresh ping within
// nameProbeTimeout or its reader is held back by backpressure
// (wsconn.Keepalive.Probe), or it read a message meanwhile (a message is as
// good as a pong).
func (m *member) answersProbe() bool {
	read := m.reads.Load()
	return m.alive.Probe(nameProbeTimeout) || m.reads.Load() != read
}

// send queues a frame for this member; a queue overflow disconnects it.
func (m *member) send(data []byte) {
	if m.q.Push(wsconn.Frame{Type: websocket.MessageText, Data: data}) == wsconn.ErrOverflow {
		m.kick(CloseSlowConsumer)
	}
}

// linked is m's link to its room's home, nil when the room is homed
// here: read under the fleet's mu, as joinRemote sets it and may take it
// back while another goroutine (a shutdown) kicks m.
func (m *member) linked() *edgeLink {
	cl := m.p.cluster
	if cl == nil {
		return nil
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return m.link
}

// kick removes the member from its room and ends its socket with c at once
// (queued frames are dropped). A member on this instance whose room's home
// is another is abandoned instead when c means the home will not answer it
// any more (unanswered.go).
func (m *member) kick(c Close) {
	if l := m.linked(); l != nil && abandons(c) {
		l.abandon(m, c)
		return
	}
	if c == CloseSlowConsumer {
		m.log.Info("nexscope member send queue overflowed, disconnecting")
		m.p.deps.Metrics.Dropped(platformName, "slow_consumer")
	}
	m.leave()
	m.q.Close(c, false)
}

// closeAfterFlush removes the member and ends its socket with c once the
// frames queued so far (an error frame) are written; the reader stops.
func (m *member) closeAfterFlush(c Close) {
	m.leave()
	m.closeQueue(c, true)
	m.stop = true
}

// closeQueue closes the member's queue with c: with flush, after writing
// the frames queued so far, within WriteTimeout from now in all (then the
// socket is dropped: a client reading slowly but steadily cannot keep a
// closing member flushing, nor hold up a shutdown). Only the queue's first
// close arms that bound, so the watchdog's Expire runs once; a member whose
// socket is on another instance (ws nil) has its edge bound it.
func (m *member) closeQueue(c Close, flush bool) {
	if m.q.Close(c, flush) && flush && m.ws != nil {
		m.watch.Expire()
	}
}

// leave removes the member from its room once: presence goes to the others,
// a transfer it sends is abandoned, its heartbeat stops (a heartbeat that
// times out kicks it with 4010 after the second consecutive missed pong).
func (m *member) leave() {
	if m.left.Swap(true) {
		return
	}
	m.alive.Stop()
	switch l := m.linked(); {
	case l != nil:
		l.leave(m)
	case m.remote != nil:
		m.room.leave(m)
		m.remote.in.q.Close(wsconn.Drop, false)
	default:
		m.room.leave(m)
	}
}
