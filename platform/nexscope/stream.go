package nexscope

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connector/contract"
	"connector/internal/cluster"
	"connector/internal/wsconn"
)

// Direct streams (Config.ClusterAddr): docs/nexscope.md ("Direct streams")
// says what goes over them, how one opens and how one is lost. Each is a
// TCP connection this instance dialed, carrying what it sends that
// instance, which the other end hands to its cluster node
// (cluster.Node.Dispatch) as if it had come from its inbox: each direction
// has its own stream (the sender's), so each direction has one path.

// msgStream is the call asking an instance for a stream ticket; its
// result is "addr ticket", or "" from an instance that takes no streams.
const msgStream = 's'

// Stream tuning, in beats.
const (
	streamRetryBeats = 30 // after a failed attempt, pub/sub this long
	streamIdleBeats  = 60 // an idle outgoing stream is closed
	streamReadBeats  = 90 // an incoming stream silent this long is closed
	// streamDialBeats bounds a dial: what is queued for the stream waits
	// meanwhile, and must reach the peer before it counts this instance
	// gone (cluster.LostBeats beats silent).
	streamDialBeats = 1
)

// streamQueue bounds the messages waiting for a stream's writer (senders
// of bulk frames wait, beats are dropped).
const streamQueue = 256

// streamHello starts a stream: the magic, the dialer's instance name and
// its ticket, one line.
const streamHello = "nexscope-stream/1"

// maxHello bounds the hello line.
const maxHello = 512

// maxUnticketed bounds the incoming connections that have not presented
// their hello yet (each holds a goroutine and a descriptor for up to
// LostBeats beats): one past it is closed at once. An instance dials one
// stream to each other instance, so far fewer are ever legitimately
// waiting (docs/security.md).
const maxUnticketed = 64

// streams is this instance's direct streams: a listener for the other
// instances' streams, and the streams it dialed, by instance.
type streams struct {
	cl   *fleet
	ln   net.Listener // nil: this instance takes no streams
	addr string       // ln's address, as the other instances dial it
	wg   sync.WaitGroup

	mu      sync.Mutex // a leaf
	out     map[string]*outStream
	failed  map[string]time.Time // instance -> when to try a stream again
	tickets map[string]ticket    // instance -> the ticket it was given

	// unticketed holds a token per incoming connection whose hello is
	// not read yet (maxUnticketed).
	unticketed chan struct{}

	ending context.Context // ends with close, which closes the incoming streams
	end    context.CancelFunc
}

type ticket struct {
	secret  [16]byte
	expires time.Time
}

// outStream is one stream this instance sends on.
type outStream struct {
	to   string
	q    chan streamMsg
	dead chan struct{} // closed when the stream ended
	// senders counts the senders that took the stream (under streams.mu)
	// and have not queued their message yet: the stream does not idle out
	// while there are any.
	senders atomic.Int32
}

// streamMsg is a message queued on a stream: its type and fields, which
// the writer encodes around the large fields' own bytes (cluster.Gather):
// those stay unchanged until written, held (when not nil, the chunk they
// lie in) retained until then. A message dropped with its stream leaves
// its chunk to the GC.
type streamMsg struct {
	typ    byte
	tenant string // the room's, for the outbox's share of it over pub/sub ("": none)
	fields [][]byte
	held   *chunk // released once written; may be nil
}

// newStreams returns cl's streams: none until listen.
func newStreams(cl *fleet) *streams {
	s := &streams{cl: cl, out: make(map[string]*outStream), failed: make(map[string]time.Time), tickets: make(map[string]ticket),
		unticketed: make(chan struct{}, maxUnticketed)}
	s.ending, s.end = context.WithCancel(context.Background())
	return s
}

// listen takes the other instances' streams on addr, and has this
// instance stream to them: called once, before the first message. An
// instance whose largest message could pass maxStreamMessage does neither.
func (s *streams) listen(addr string) error {
	if n := streamLimit(s.cl.p.cfg); n > maxStreamMessage {
		return fmt.Errorf("its largest stream message (%d bytes, from max_payload and max_users) passes the %d bytes every instance takes", n, maxStreamMessage)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ln, s.addr = ln, ln.Addr().String()
	s.mu.Unlock()
	s.wg.Go(s.accept)
	return nil
}

// beats is n beats of the cluster node.
func (s *streams) beats(n int) time.Duration { return time.Duration(n) * s.cl.node.Beat() }

// send queues m for instance's inbox on the stream to it, opening it if
// needed, waiting while its queue is full when wait is set. It reports
// false when this instance streams to nobody or instance had no stream
// lately: then the caller publishes the message, and m's held chunk, which
// the caller retained, is released here.
func (s *streams) send(instance string, wait bool, m streamMsg) (ok bool) {
	defer func() {
		if !ok && m.held != nil {
			m.held.Release()
		}
	}()
	s.mu.Lock()
	if s.ln == nil {
		s.mu.Unlock()
		return false
	}
	o := s.out[instance]
	if o == nil {
		if s.ending.Err() != nil || s.cl.p.deps.Clock.Now().Before(s.failed[instance]) {
			s.mu.Unlock()
			return false
		}
		o = &outStream{to: instance, q: make(chan streamMsg, streamQueue), dead: make(chan struct{})}
		s.out[instance] = o
		delete(s.failed, instance)
		s.wg.Go(func() { s.run(o) })
	}
	o.senders.Add(1)
	s.mu.Unlock()
	defer o.senders.Add(-1)
	if !wait {
		select {
		case o.q <- m:
		default: // lost, as a full outbox loses one
		}
		return true
	}
	select {
	case o.q <- m:
	case <-o.dead: // lost with the stream
	case <-s.cl.ctx.Done():
	}
	return true
}

// run opens o and writes its queue until the stream fails, idles or the
// fleet stops; then o is forgotten (its queue dropped). A failure is
// remembered until the stream may be tried again; those past that, of
// instances not sent to since (gone for good), are dropped then.
func (s *streams) run(o *outStream) {
	conn, err := s.dial(o.to)
	if err != nil {
		s.cl.p.deps.Log.Warn("nexscope stream to another instance not opened; using pub/sub", "instance", o.to, "err", err)
		s.publishQueued(o)
	} else {
		err = s.write(o, conn)
		_ = conn.Close()
		if err != nil {
			s.cl.p.deps.Log.Warn("nexscope stream to another instance lost", "instance", o.to, "err", err)
		}
	}
	s.mu.Lock()
	if s.out[o.to] == o { // not yet forgotten (idled out)
		delete(s.out, o.to)
	}
	if err != nil {
		now := s.cl.p.deps.Clock.Now()
		maps.DeleteFunc(s.failed, func(_ string, retry time.Time) bool { return !now.Before(retry) })
		s.failed[o.to] = now.Add(s.beats(streamRetryBeats))
	}
	s.mu.Unlock()
	close(o.dead)
}

// publishQueued publishes what is queued on o, a stream that could not
// open (nothing of it was written), over pub/sub in order, until nothing
// is queued or about to be; then o is forgotten and the instance is sent
// to over pub/sub (failed), so no message is lost or reordered. The
// ticket request went after every message published to that inbox
// before, and these after it.
func (s *streams) publishQueued(o *outStream) {
	for {
		s.mu.Lock()
		if len(o.q) == 0 && o.senders.Load() == 0 {
			s.failed[o.to] = s.cl.p.deps.Clock.Now().Add(s.beats(streamRetryBeats))
			delete(s.out, o.to)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		select {
		case m := <-o.q:
			s.cl.node.SendWait(s.cl.ctx, m.tenant, cluster.Inbox(o.to), m.typ, m.fields...)
			if m.held != nil {
				m.held.Release()
			}
		case <-s.cl.ctx.Done():
			return // stopping: what is left is lost
		}
	}
}

// dial asks instance for a ticket (through pub/sub) and opens the stream,
// within streamDialBeats (on the platform's clock).
func (s *streams) dial(instance string) (net.Conn, error) {
	ctx, cancel := context.WithCancel(s.cl.ctx)
	defer cancel()
	defer s.cl.p.deps.Clock.AfterFunc(s.beats(streamDialBeats), cancel).Stop()
	res, ok := s.cl.node.Call(ctx, cluster.Inbox(instance), msgStream)
	if !ok {
		return nil, errors.New("no answer to the ticket request")
	}
	addr, secret, ok := strings.Cut(string(res), " ")
	if !ok {
		return nil, errors.New("the instance takes no streams (no nexscope.cluster_addr)")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Now().Add(s.beats(cluster.LostBeats)))
	if _, err := io.WriteString(conn, streamHello+" "+s.cl.node.Instance()+" "+secret+"\n"); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// write sends o's queue on conn, what is queued at once in one write,
// until a write fails or takes LostBeats beats, the stream idles for
// streamIdleBeats, or the fleet stops (after writing what is queued).
func (s *streams) write(o *outStream, conn net.Conn) error {
	idle := s.beats(streamIdleBeats)
	idled := make(chan struct{}, 1)
	timer := s.cl.p.deps.Clock.AfterFunc(idle, func() { wsconn.Signal(idled) })
	defer timer.Stop()
	var g cluster.Gather
	var held []*chunk
	from := s.cl.node.Instance()
	flush := func() error {
		_ = conn.SetWriteDeadline(time.Now().Add(s.beats(cluster.LostBeats)))
		bufs := g.Done()
		_, err := bufs.WriteTo(conn)
		g.Reset()
		for _, c := range held {
			c.Release()
		}
		clear(held)
		held = held[:0]
		return err
	}
	add := func(m streamMsg) {
		g.Uvarint(uint64(cluster.EncodedLen(from, m.fields...)))
		g.Encode(m.typ, from, m.fields...)
		if m.held != nil {
			held = append(held, m.held)
		}
	}
	for {
		select {
		case msg := <-o.q:
			add(msg)
			for range len(o.q) { // queued behind it (this goroutine alone receives)
				add(<-o.q)
			}
			if err := flush(); err != nil {
				return err
			}
			timer.Reset(idle)
		case <-idled:
			// Idle only if nothing is queued or about to be: a new sender
			// then opens a new stream.
			s.mu.Lock()
			if len(o.q) > 0 || o.senders.Load() > 0 {
				s.mu.Unlock()
				timer.Reset(idle)
				continue
			}
			delete(s.out, o.to)
			s.mu.Unlock()
			return nil
		case <-s.cl.ctx.Done():
			for range len(o.q) {
				add(<-o.q)
			}
			return flush()
		}
	}
}

// ticketHere answers another instance's ticket request: this instance's
// address and a ticket for it, valid for LostBeats beats and one stream
// (the one it holds unused, so that a request go-redis published twice
// does not void the ticket the first answer gave); "" when this instance
// takes no streams. The tickets expired by then, of instances that never
// dialed, are dropped.
func (s *streams) ticketHere(req cluster.Msg) {
	now := s.cl.p.deps.Clock.Now()
	var res []byte // none: this instance takes no streams
	s.mu.Lock()
	if s.addr != "" {
		maps.DeleteFunc(s.tickets, func(_ string, t ticket) bool { return now.After(t.expires) })
		t, ok := s.tickets[req.From]
		if !ok {
			_, _ = rand.Read(t.secret[:]) // never fails (crypto/rand)
			t.expires = now.Add(s.beats(cluster.LostBeats))
			s.tickets[req.From] = t
		}
		res = []byte(s.addr + " " + hex.EncodeToString(t.secret[:]))
	}
	s.mu.Unlock()
	s.cl.node.Reply(req, res)
}

// accept takes the other instances' streams until the listener closes;
// close closes those still open (one accepted after close began, at once).
// A failed accept (out of file descriptors) is tried again after a pause
// that doubles up to a second, as net/http's server does. A connection
// beyond maxUnticketed waiting for their hello is closed at once.
func (s *streams) accept() {
	var pause time.Duration
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.ending.Err() != nil {
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			s.cl.p.deps.Log.Warn("nexscope stream listener: accept failed; trying again", "err", err, "pause", pause)
			if s.cl.p.deps.Clock.Sleep(s.ending, pause) != nil {
				return
			}
			continue
		}
		pause = 0
		select {
		case s.unticketed <- struct{}{}: // released once the hello is read
		default:
			s.cl.p.deps.Log.Debug("nexscope stream refused: too many connections without a hello", "remote", conn.RemoteAddr().String(), "max", maxUnticketed)
			_ = conn.Close()
			continue
		}
		s.wg.Go(func() {
			defer context.AfterFunc(s.ending, func() { _ = conn.Close() })()
			s.read(conn)
			_ = conn.Close()
		})
	}
}

// read checks an incoming stream's hello and dispatches its messages until
// it ends, breaks the framing, carries a message that names another sender
// than the hello (or a bundle), or is silent for streamReadBeats.
func (s *streams) read(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(s.beats(cluster.LostBeats)))
	// The hello is read through a buffer of its size: a connection that
	// never presents a ticket costs no stream buffer.
	hr := bufio.NewReaderSize(conn, maxHello+1)
	from, err := s.hello(hr)
	<-s.unticketed
	if err != nil {
		s.cl.p.deps.Log.Warn("nexscope stream refused", "remote", conn.RemoteAddr().String(), "err", err)
		return
	}
	src := io.MultiReader(hr, conn) // what hr read past the hello, then the rest
	br := bufio.NewReaderSize(src, 64<<10)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(s.beats(streamReadBeats)))
		msg, held, err := readStreamMessage(br, src, maxStreamMessage)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.cl.p.deps.Log.Warn("nexscope stream from another instance ended", "instance", from, "err", err)
			}
			return
		}
		if sender := cluster.Sender(msg); sender != from {
			s.cl.p.deps.Log.Warn("nexscope stream from another instance closed: a message named another sender", "instance", from, "sender", sender)
			return
		}
		if held != nil {
			s.cl.node.DispatchHeld(msg, held)
		} else {
			s.cl.node.Dispatch(msg)
		}
	}
}

// maxStreamMessage bounds one stream message, whatever the configurations
// of its sender and receiver (which may differ): each instance takes
// messages up to it, and one whose own largest message (streamLimit) could
// pass it streams to nobody.
const maxStreamMessage = 256 << 20

// streamLimit is the largest stream message an instance configured with
// cfg sends: the largest frame a member is sent, which is a broadcast's ack
// (it echoes the msgId and threadId of a message of up to MaxPayload and
// names every other member of the largest room, each a quoted name of up
// to 32 bytes and a comma), or the bot's
// msg or file-start, whose strings come from one gateway frame and are
// JSON-escaped again (at most 6 bytes for each byte); and 64 KiB for the
// rest of the frame and the cluster fields around it. Every other frame is
// smaller: a forwarded msg, an error, a presence.
func streamLimit(cfg Config) uint64 {
	users := cfg.MaxUsers
	for _, r := range cfg.Rooms {
		users = max(users, r.MaxUsers)
	}
	return max(uint64(cfg.MaxPayload)+uint64(users)*(32+3), 6*contract.MaxFrameBytes) + 64<<10
}

// hello reads and checks a stream's first line: the magic, the dialer's
// instance name and the ticket it was given (used up here; a wrong secret
// uses up nothing, so a hello in another instance's name cannot spoil the
// ticket it is about to present).
func (s *streams) hello(br *bufio.Reader) (string, error) {
	line, err := readLine(br, maxHello)
	if err != nil {
		return "", err
	}
	from, secret, ok := parseHello(line)
	if !ok {
		return "", errors.New("malformed hello")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, issued := s.tickets[from]
	if !issued || subtle.ConstantTimeCompare(secret, t.secret[:]) != 1 {
		return "", errors.New("no valid ticket")
	}
	delete(s.tickets, from)
	if s.cl.p.deps.Clock.Now().After(t.expires) {
		return "", errors.New("no valid ticket")
	}
	return from, nil
}

// readLine reads one line of at most max bytes (and br's buffer), without
// its newline.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull || len(line) > max+1 {
		return nil, errors.New("hello too long")
	}
	if err != nil {
		return nil, err
	}
	return bytes.Clone(line[:len(line)-1]), nil
}

// parseHello splits a hello line into the dialer's name and its ticket.
func parseHello(line []byte) (from string, secret []byte, ok bool) {
	parts := strings.Split(string(line), " ")
	if len(parts) != 3 || parts[0] != streamHello || parts[1] == "" {
		return "", nil, false
	}
	secret, err := hex.DecodeString(parts[2])
	if err != nil || len(secret) != len(ticket{}.secret) {
		return "", nil, false
	}
	return parts[1], secret, true
}

// readStreamMessage reads one message from br, which buffers r: a uvarint
// length of at most limit, then that many bytes. A message of
// cluster.RefBytes or more is read into a pooled chunk, held, which goes
// back to the pool once the handlers that Retained it Released it (none: it
// stays the GC's); a smaller one into a fresh buffer. What br does not hold
// yet of a large message is read from r straight into the message, not
// through br's buffer. The length is only a claim: past maxPooledChunk a
// message's buffer doubles as its bytes arrive, so a peer that announces
// more than it sends costs at most twice what it sent, not the length.
func readStreamMessage(br *bufio.Reader, r io.Reader, limit uint64) (msg []byte, held *chunk, err error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, nil, err
	}
	if n == 0 || n > limit {
		return nil, nil, errors.New("stream message length out of bounds")
	}
	if n < cluster.RefBytes {
		msg = make([]byte, n)
		if _, err := io.ReadFull(br, msg); err != nil {
			return nil, nil, err
		}
		return msg, nil, nil
	}
	held = newChunk(nil, 0)
	msg = held.buf
	if cap(msg) < int(n) {
		msg = make([]byte, 0, min(int(n), maxPooledChunk))
	}
	for len(msg) < int(n) {
		if len(msg) == cap(msg) {
			msg = append(make([]byte, 0, min(int(n), 2*cap(msg))), msg...)
		}
		k, end := len(msg), min(int(n), cap(msg))
		src := io.Reader(br)
		if b := br.Buffered(); b > 0 {
			end = min(end, k+b)
		} else if int(n)-k >= cluster.RefBytes {
			src = r // br is empty: the rest goes straight into msg
		}
		msg = msg[:end]
		if _, err := io.ReadFull(src, msg[k:]); err != nil {
			return nil, nil, err
		}
	}
	held.buf = msg
	return msg, held, nil
}

// close stops the listener and the incoming streams, and waits for the
// outgoing ones to write what is queued (the fleet's context has ended).
func (s *streams) close() {
	s.end()
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	s.wg.Wait()
}
