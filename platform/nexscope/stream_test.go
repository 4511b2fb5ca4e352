package nexscope

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/internal/cluster/clustertest"
	"connector/internal/redistest"
	"connector/internal/wsconn"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/store"
)

// jumpClock is a clock whose Now can be moved ahead of its timers, as a
// process's clock is when it wakes from a pause: its timers, armed on the
// underlying clock, have not fired yet.
type jumpClock struct {
	clock.Clock
	ahead atomic.Int64
}

func (c *jumpClock) Now() time.Time { return c.Clock.Now().Add(time.Duration(c.ahead.Load())) }

// jump moves Now d ahead.
func (c *jumpClock) jump(d time.Duration) { c.ahead.Add(int64(d)) }

// streamAddr waits for in's stream listener and returns its address.
func streamAddr(t testing.TB, in *instance) string {
	t.Helper()
	s := in.p.cluster.streams
	var addr string
	waitFor(t, "the stream listener of "+in.name, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		addr = s.addr
		return addr != ""
	})
	return addr
}

// askTicket has in give a stream ticket to instance from (as a ticket
// request from it would) and returns the ticket's secret. It first waits
// for in's stream listener: an instance without one gives no ticket.
func askTicket(t testing.TB, in *instance, from string) string {
	t.Helper()
	streamAddr(t, in)
	s := in.p.cluster.streams
	in.p.cluster.node.Dispatch(clustertest.Encode(msgStream, from, []byte("req-"+from)))
	s.mu.Lock()
	defer s.mu.Unlock()
	tk, ok := s.tickets[from]
	if !ok {
		t.Fatalf("%s gave %s no ticket", in.name, from)
	}
	return hex.EncodeToString(tk.secret[:])
}

// streamClosed reads conn until the other end closes it; an error when
// it is still open after testTimeout.
func streamClosed(conn net.Conn) error {
	_ = conn.SetReadDeadline(time.Now().Add(testTimeout))
	for {
		_, err := conn.Read(make([]byte, 64))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("waited %v for the stream to be closed", testTimeout)
		}
		if err != nil {
			return nil
		}
	}
}

// TestStreamMessagesCountOnlyFromTheHelloSender: a stream carries only its
// dialer's messages. One naming another instance as its sender (here: a
// leave of that instance's member) is not dispatched, and the stream is
// closed: the member stays in the room.
func TestStreamMessagesCountOnlyFromTheHelloSender(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice")
	bob := home.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	var conn string
	home.p.cluster.mu.Lock()
	for key := range home.p.cluster.remotes {
		conn = strings.TrimPrefix(key, edge.name+"/")
	}
	home.p.cluster.mu.Unlock()

	secret := askTicket(t, home, "i9")
	c, err := net.Dial("tcp", streamAddr(t, home))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	forged := clustertest.Encode(msgLeave, edge.name, []byte(conn))
	stream := []byte(streamHello + " i9 " + secret + "\n")
	stream = binary.AppendUvarint(stream, uint64(len(forged)))
	stream = append(stream, forged...)
	if _, err := c.Write(stream); err != nil {
		t.Fatal(err)
	}
	if err := streamClosed(c); err != nil {
		t.Fatalf("i9's stream carried a message from %s: %v", edge.name, err)
	}

	bob.SendJSON(msg("m1", "bob", []string{"alice"}, "still here?"))
	if m := alice.Expect("msg"); m["msgId"] != "m1" {
		t.Fatalf("alice got %v, want m1", m)
	}
	if ack := bob.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[alice]" {
		t.Fatalf("ack %v, want alice delivered", ack)
	}
}

// TestStreamTicketsExpire: the tickets of instances that asked for one and
// never dialed are dropped once expired, not kept for good.
func TestStreamTicketsExpire(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	clk := &jumpClock{Clock: clock.System}
	in := startInstanceWith(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, "i0", clusterLeaseTTL, func(d *platform.Deps) { d.Clock = clk })
	streamAddr(t, in)
	for i := range 100 {
		askTicket(t, in, fmt.Sprintf("gone%d", i))
	}
	clk.jump(in.p.cluster.streams.beats(cluster.LostBeats) + time.Second)
	askTicket(t, in, "i1")
	s := in.p.cluster.streams
	s.mu.Lock()
	n := len(s.tickets)
	s.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d tickets kept, want 1 (the unexpired one)", n)
	}
}

// TestStreamWrongSecretLeavesTheTicket: a hello with a wrong secret (from
// anyone who can reach the listener and guesses an instance's name) does
// not use up that instance's ticket: its own dial, just after, opens the
// stream. Pub/sub loses the member frames here, so they must take the
// streams.
func TestStreamWrongSecretLeavesTheTicket(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, 2, clusterLeaseTTL)
	for _, in := range ins {
		to := others(ins, in)[0].name
		addr := streamAddr(t, in)
		var spoiled atomic.Bool
		lose := func(channel string, msg []byte) bool {
			// in answers to's ticket request: a bad hello in to's name
			// reaches in first.
			if channel == cluster.Inbox(to) && bytes.Contains(msg, []byte(addr+" ")) && !spoiled.Swap(true) {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return false
				}
				defer c.Close()
				if _, err := c.Write([]byte(streamHello + " " + to + " " + strings.Repeat("00", 16) + "\n")); err != nil {
					t.Error(err)
				}
				if err := streamClosed(c); err != nil {
					t.Errorf("a hello with a wrong secret: %v", err)
				}
			}
			typ := clustertest.Type(msg)
			return strings.HasPrefix(channel, cluster.Inbox("")) && (typ == msgIn || typ == msgOut || typ == msgJoined)
		}
		in.lose.Store(&lose)
	}
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice")
	bob := home.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	alice.SendJSON(msg("m1", "alice", []string{"bob"}, "over the stream"))
	if m := bob.Expect("msg"); m["msgId"] != "m1" {
		t.Fatalf("bob got %v, want m1", m)
	}
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[bob]" {
		t.Fatalf("ack %v, want bob delivered", ack)
	}
}

// TestStreamFailuresExpire: what an instance remembers of failed streams
// to instances that never come back (they stopped for good) is dropped once
// it no longer matters, not kept for good.
func TestStreamFailuresExpire(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	clk := &jumpClock{Clock: clock.System}
	in := startInstanceWith(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, "i0", takeoverTTL, func(d *platform.Deps) { d.Clock = clk })
	streamAddr(t, in)
	s := in.p.cluster.streams
	failed := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.failed)
	}
	const gone = 20
	for i := range gone { // no such instance answers a ticket request
		s.send(fmt.Sprintf("gone%d", i), false, streamMsg{typ: msgEdgeBeat, fields: [][]byte{nil}})
	}
	waitFor(t, "the streams to the instances gone failed", func() bool { return failed() == gone })
	clk.jump(s.beats(streamRetryBeats) + time.Second)
	s.send("gone-late", false, streamMsg{typ: msgEdgeBeat, fields: [][]byte{nil}})
	waitFor(t, "the stream to gone-late failed", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.failed["gone-late"]
		return ok
	})
	if n := failed(); n != 1 {
		t.Fatalf("%d failed streams remembered, want 1 (the one not expired)", n)
	}
}

// failingListener fails its first Accept with a transient error (as
// accept does when the process is out of file descriptors), then accepts.
type failingListener struct {
	net.Listener
	failed atomic.Bool
}

func (l *failingListener) Accept() (net.Conn, error) {
	if !l.failed.Swap(true) {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestStreamListenerOutlivesAcceptErrors: an accept that fails for a while
// (too many open files) does not end the stream listener: the next
// instance's stream is still taken.
func TestStreamListenerOutlivesAcceptErrors(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{}, "i0", clusterLeaseTTL)
	s := in.p.cluster.streams
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.ln, s.addr = &failingListener{Listener: ln}, ln.Addr().String()
	s.mu.Unlock()
	s.wg.Go(s.accept)

	secret := askTicket(t, in, "i9")
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(streamHello + " i9 " + secret + "\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "i9's hello taken (its ticket used up)", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.tickets["i9"]
		return !ok
	})
}

// TestStreamRefusedHelloCostsLittle: a connection to the stream listener
// that never presents a valid ticket (anyone reaching the port may open
// many, each held up to three beats) costs little memory: not the 64 KiB
// read buffer a stream gets once its hello is taken.
func TestStreamRefusedHelloCostsLittle(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, "i0", clusterLeaseTTL)
	addr := streamAddr(t, in)
	refuse := func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(streamHello + " i9 " + strings.Repeat("00", 16) + "\n")); err != nil {
			t.Fatal(err)
		}
		if err := streamClosed(c); err != nil {
			t.Fatalf("a hello without a ticket: %v", err)
		}
	}
	refuse() // warm up
	const n = 50
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		refuse()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per >= 32<<10 {
		t.Fatalf("a refused hello allocated %d bytes, want under 32 KiB", per)
	}
}

// writerBlocked reports whether a stream writer is waiting in a write to a
// peer that reads nothing.
func writerBlocked() bool {
	buf := make([]byte, 4<<20)
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "nexscope.(*streams).write(") && strings.Contains(g, "waitWrite") {
			return true
		}
	}
	return false
}

// TestStreamIdleCloseLosesNothing: an outgoing stream that idles out as a
// message is queued on it does not drop that message. Here the idle timer
// fires while the writer is held in a write (its peer reads nothing), and
// a marker is queued behind; once the peer reads again the marker must
// arrive. Repeated: before the fix the writer picked the idle signal over
// the queued marker about every other time.
func TestStreamIdleCloseLosesNothing(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	clk := newFakeClock()
	in := startInstanceWith(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, "i0", clusterLeaseTTL, func(d *platform.Deps) { d.Clock = clk })
	streamAddr(t, in)
	s := in.p.cluster.streams

	// i9 is a peer that takes i0's streams and reads each only when told,
	// up to the marker.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	node, err := cluster.New(cluster.Config{Instance: "i9", PubSub: in.st.PubSub(), LeaseTTL: clusterLeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	node.HandleCall(msgStream, 0, func(req cluster.Msg) {
		node.Reply(req, []byte(ln.Addr().String()+" "+strings.Repeat("00", 16)))
	})
	release := make(chan struct{})
	got := make(chan struct{}, 1) // the marker arrived
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := readLine(br, maxHello); err != nil {
					return
				}
				for {
					select {
					case <-release:
					case <-done:
						return
					}
					for {
						msg, _, err := readStreamMessage(br, br, 64<<20)
						if err != nil {
							// This stream ended (idled out): the next one
							// reads in its place.
							go func() {
								select {
								case release <- struct{}{}:
								case <-done:
								}
							}()
							return
						}
						if clustertest.Type(msg) == 'm' {
							got <- struct{}{}
							break
						}
					}
				}
			}()
		}
	}()

	filler := make([]byte, 1<<20)
	for trial := range 8 {
		for !writerBlocked() {
			s.send("i9", true, streamMsg{typ: 'y', fields: [][]byte{filler}})
		}
		clk.Advance(s.beats(streamIdleBeats))
		s.send("i9", false, streamMsg{typ: 'm', fields: [][]byte{[]byte(strconv.Itoa(trial))}})
		release <- struct{}{}
		select {
		case <-got:
		case <-time.After(testTimeout):
			t.Fatalf("trial %d: no marker within %v: the stream idled out with it queued and dropped it", trial, testTimeout)
		}
	}
}

// TestStreamToAnInstanceWithoutStreamsLosesNothing: an instance that takes
// no streams (its cluster_addr unset, or not listened on) is sent what was
// queued for it over pub/sub, in order, when the stream to it cannot open:
// members linked with it lose no frame.
func TestStreamToAnInstanceWithoutStreamsLosesNothing(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := []*instance{
		startInstance(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, "i0", clusterLeaseTTL),
		startInstance(t, srv, Config{}, "i1", clusterLeaseTTL),
	}
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice")
	bob := home.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	for i := range 3 {
		id := strconv.Itoa(i)
		alice.SendJSON(msg("a"+id, "alice", []string{"bob"}, "to bob"))
		if m := bob.Expect("msg"); m["msgId"] != "a"+id {
			t.Fatalf("bob got %v", m)
		}
		alice.Expect("ack")
		bob.SendJSON(msg("b"+id, "bob", []string{"alice"}, "to alice"))
		if m := alice.Expect("msg"); m["msgId"] != "b"+id {
			t.Fatalf("alice got %v", m)
		}
		bob.Expect("ack")
	}
}

// TestStreamUnticketedConnectionsCapped: connections to the stream
// listener that present no hello are bounded (maxUnticketed): one past it
// is closed at once, not held for LostBeats beats (here a minute, longer
// than the wait); once a waiting one presents its hello, its place is
// free again and a dialer with a ticket streams.
func TestStreamUnticketedConnectionsCapped(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, "i0", 3*time.Minute)
	addr := streamAddr(t, in)
	s := in.p.cluster.streams
	waiting := func() int { return len(s.unticketed) }
	var idle []net.Conn
	for range maxUnticketed {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	waitFor(t, "the idle connections to be accepted", func() bool { return waiting() == maxUnticketed })
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if err := streamClosed(extra); err != nil {
		t.Fatalf("a connection past %d without a hello: %v", maxUnticketed, err)
	}

	// One idle connection presents a wrong hello: refused, its place freed.
	if _, err := idle[0].Write([]byte("nonsense\n")); err != nil {
		t.Fatal(err)
	}
	if err := streamClosed(idle[0]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refused connection's place to be freed", func() bool { return waiting() == maxUnticketed-1 })
	secret := askTicket(t, in, "i9")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(streamHello + " i9 " + secret + "\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "i9's ticket to be used up", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.tickets["i9"]
		return !ok
	})
	waitFor(t, "i9's hello to free its place", func() bool { return waiting() == maxUnticketed-1 })
}

// TestStreamCarriesTheLargestAck: the ack of a broadcast in the largest
// room, echoing a msgId of nearly max_payload and naming every other
// member, fits a stream message: the stream goes on (the ticket request
// behind it is dispatched) instead of closing as out of bounds.
func TestStreamCarriesTheLargestAck(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	const users = 5000
	in := startInstance(t, srv, Config{ClusterAddr: "127.0.0.1:0", MaxPayload: minPayload, Rooms: []Room{{Name: "big", MaxUsers: users}}}, "i0", clusterLeaseTTL)
	s := in.p.cluster.streams
	secret := askTicket(t, in, "i9")
	c, err := net.Dial("tcp", streamAddr(t, in))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msgID := []byte(`"` + strings.Repeat("m", minPayload-64) + `"`)
	names := make([][]byte, users-1)
	for i := range names {
		names[i] = fmt.Appendf(nil, `"%032d"`, i)
	}
	ack := appendAck(nil, msgID, nil, names, nil)
	if _, err := c.Write([]byte(streamHello + " i9 " + secret + "\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "i9's ticket to be used up", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.tickets["i9"]
		return !ok
	})
	var stream []byte
	for _, m := range [][]byte{
		clustertest.Encode(msgOut, "i9", []byte("no-such-conn"), cluster.AppendUint(nil, 1), cluster.Flag(false), ack),
		clustertest.Encode(msgStream, "i9", []byte("req-i9")),
	} {
		stream = binary.AppendUvarint(stream, uint64(len(m)))
		stream = append(stream, m...)
	}
	if _, err := c.Write(stream); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("the ticket request behind a %d-byte ack to be dispatched", len(ack)), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.tickets["i9"]
		return ok
	})
}

// TestStreamCarriesTheLargestBotMsg: with a small max_payload, the bot's
// msg carrying a thread id that fills a gateway frame, with every byte
// escaped again, fits a stream message: the stream goes on instead of
// closing as out of bounds (and losing what every tenant queued on it).
func TestStreamCarriesTheLargestBotMsg(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{ClusterAddr: "127.0.0.1:0", MaxPayload: minPayload}, "i0", clusterLeaseTTL)
	s := in.p.cluster.streams
	secret := askTicket(t, in, "i9")
	c, err := net.Dial("tcp", streamAddr(t, in))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(streamHello + " i9 " + secret + "\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "i9's ticket to be used up", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.tickets["i9"]
		return !ok
	})
	// A gateway frame's thread id of control characters: each arrived as
	// \u0001 and is written so again.
	bm := botMsg{msgID: "b1", from: "hermes", threadID: strings.Repeat("\x01", contract.MaxFrameBytes/6-64), text: "hi", to: []string{"alice"}}
	frame := appendBotMsg(nil, "msg", &bm, `,"attachments":[]`, 1)
	var stream []byte
	for _, m := range [][]byte{
		clustertest.Encode(msgOut, "i9", []byte("no-such-conn"), cluster.AppendUint(nil, 1), cluster.Flag(false), frame),
		clustertest.Encode(msgStream, "i9", []byte("req-i9")),
	} {
		stream = binary.AppendUvarint(stream, uint64(len(m)))
		stream = append(stream, m...)
	}
	if _, err := c.Write(stream); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("the ticket request behind a %d-byte bot msg to be dispatched", len(frame)), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.tickets["i9"]
		return ok
	})
}

// TestStreamReaderNeverWaitsOnASend: a message an incoming stream carries
// is handled without waiting for room on an outgoing stream. Here the
// stream from the edge to the home is stalled (its queue full, as when the
// home's reader waits in turn: under two-way load both readers would), and
// the home closes alice, whose leave is for the home: the edge's reader
// must still dispatch the frames behind that close, here a msg to bob.
// Before the fix it waited in the leave's send and bob got nothing.
func TestStreamReaderNeverWaitsOnASend(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	// A long lease: the home hears nothing from the edge once its stream
	// stalls, and must not count it gone before the end.
	ins := startInstances(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, 2, 30*time.Second)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	// Pub/sub loses member frames and closes for the edge: they must take
	// the stream.
	lose := func(channel string, msg []byte) bool {
		t := clustertest.Type(msg)
		return channel == cluster.Inbox(edge.name) && (t == msgOut || t == msgClose || t == msgJoined)
	}
	home.lose.Store(&lose)
	alice := edge.joinWith(t, "alice", "alice")
	bob := edge.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	carol := home.joinWith(t, "carol", "alice", "bob", "carol")
	alice.ExpectPresence("alice", "bob", "carol")
	bob.ExpectPresence("alice", "bob", "carol")

	var conn string
	edge.p.cluster.mu.Lock()
	for c, m := range edge.p.cluster.edges {
		if m.name == "alice" {
			conn = c
		}
	}
	edge.p.cluster.mu.Unlock()
	// The edge's stream to the home takes nothing more.
	s := edge.p.cluster.streams
	stalled := &outStream{to: home.name, q: make(chan streamMsg), dead: make(chan struct{})}
	s.mu.Lock()
	s.out[home.name] = stalled
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.out[home.name] == stalled {
			delete(s.out, home.name)
		}
		s.mu.Unlock()
		close(stalled.dead)
	}()

	code := strconv.Itoa(int(CloseTooManyErrors.Code))
	if !home.p.cluster.streams.send(edge.name, true, streamMsg{typ: msgClose, fields: [][]byte{[]byte(conn), []byte(code), []byte(CloseTooManyErrors.Reason), cluster.Flag(false)}}) {
		t.Fatal("the home has no stream to the edge")
	}
	expectClose(alice, CloseTooManyErrors)
	carol.SendJSON(msg("m1", "carol", []string{"bob"}, "behind the close"))
	if m := bob.Expect("msg"); m["msgId"] != "m1" {
		t.Fatalf("bob got %v, want m1", m)
	}
}

// TestStreamCarriesWhatASenderWithLargerLimitsSends: instances configured
// with different max_payload stream to each other: a file chunk the
// edge's max_payload lets through, far over what the home's own
// configuration ever sends, reaches the home over the stream instead of
// having the home
// close it as out of bounds (the member then closed with 1011).
func TestStreamCarriesWhatASenderWithLargerLimitsSends(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	home := startInstance(t, srv, Config{ClusterAddr: "127.0.0.1:0", MaxPayload: minPayload, SendQueueBytes: 32 << 20}, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	edge := startInstance(t, srv, Config{ClusterAddr: "127.0.0.1:0", MaxPayload: 16 << 20}, "i1", clusterLeaseTTL)
	// Pub/sub loses member frames: they must take the streams.
	lose := func(channel string, msg []byte) bool {
		t := clustertest.Type(msg)
		return strings.HasPrefix(channel, cluster.Inbox("")) && (t == msgIn || t == msgOut)
	}
	edge.lose.Store(&lose)
	home.lose.Store(&lose)
	alice := edge.joinWith(t, "alice", "alice")
	carol := home.joinWith(t, "carol", "alice", "carol")
	alice.ExpectPresence("alice", "carol")
	// A file chunk of 7 MiB (binary: nothing parses it on the way).
	chunk := bytes.Repeat([]byte{'x'}, 7<<20)
	alice.SendJSON(fileStart("f1", "alice", []string{"carol"}, int64(len(chunk))))
	carol.Expect("file-start")
	alice.SendBinary(chunk)
	if typ, b := carol.Read(); typ != websocket.MessageBinary || !bytes.Equal(b, chunk) {
		t.Fatalf("carol got a %v frame of %d bytes, want the %d-byte chunk", typ, len(b), len(chunk))
	}
	alice.SendJSON(fileEnd("f1", "alice"))
	carol.Expect("file-end")
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[carol]" {
		t.Fatalf("ack %v", ack)
	}
}

// TestStreamRefusedWhenItsMessagesCouldPassTheBound: an instance whose
// largest message could pass maxStreamMessage takes no streams (and sends
// none), and says why at start.
func TestStreamRefusedWhenItsMessagesCouldPassTheBound(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{ClusterAddr: "127.0.0.1:0", MaxPayload: maxStreamMessage}, "i0", clusterLeaseTTL)
	waitFor(t, "the log of the listener refused", func() bool {
		return strings.Contains(in.logs.String(), "cluster_addr not listened on")
	})
	s := in.p.cluster.streams
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		t.Fatal("an instance whose messages could pass the bound takes streams")
	}
}

// TestReadyOnlyOnceTheStreamListenerListens: Status turns Ready only once
// Run has started the cluster, its stream listener listening; an instance
// reported ready was seen without a listener (and gave no ticket: the CI
// flake of TestStreamCarriesTheLargestAck). Status is read in a tight loop
// as Run starts, many times over, to catch the window.
func TestReadyOnlyOnceTheStreamListenerListens(t *testing.T) {
	st := store.NewMemory(clock.System)
	for i := range 50 {
		node, err := cluster.New(cluster.Config{Instance: fmt.Sprintf("i%d", i), PubSub: st.PubSub(), LeaseTTL: clusterLeaseTTL})
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(Config{Token: testToken, ClusterAddr: "127.0.0.1:0"}, platform.Deps{Cluster: node})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx, platformtest.NewSink(1)) }()
		deadline := time.Now().Add(testTimeout)
		for !p.Status().Ready { // no sleep: the window is short
			if time.Now().After(deadline) {
				t.Fatalf("start %d: not ready after %v", i, testTimeout)
			}
		}
		s := p.cluster.streams
		s.mu.Lock()
		addr := s.addr
		s.mu.Unlock()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		node.Close()
		if addr == "" {
			t.Fatalf("start %d: Ready before the stream listener listened", i)
		}
	}
}

// TestLostLeaveOfAnEdgesLastMemberIsRepaired: an edge member's leave
// does not wait (sendNow), so a full stream to the home loses it, and the
// home's beat from the edge must repair it. When the member was the edge's
// last one homed there, the edge must still beat to the home: otherwise a
// home that hears from the edge otherwise (it is not gone) keeps the member
// listed for good.
func TestLostLeaveOfAnEdgesLastMemberIsRepaired(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	// The edge keeps talking to the home (as a gateway's sends to a room
	// homed there do), over pub/sub: the home never counts it gone.
	talk, stopTalk := context.WithCancel(context.Background())
	defer stopTalk()
	go func() {
		for talk.Err() == nil {
			edge.p.cluster.node.Send(cluster.Inbox(home.name), msgWritten, []byte("no-such-conn"), []byte("0"))
			select {
			case <-talk.Done():
			case <-time.After(edge.p.cluster.node.Beat() / 4):
			}
		}
	}()
	carol := home.joinWith(t, "carol", "carol")
	alice := edge.joinWith(t, "alice", "alice", "carol")
	carol.ExpectPresence("alice", "carol")

	// The edge's stream to the home takes nothing more: alice's leave is
	// lost.
	s := edge.p.cluster.streams
	stalled := &outStream{to: home.name, q: make(chan streamMsg), dead: make(chan struct{})}
	s.mu.Lock()
	s.out[home.name] = stalled
	s.mu.Unlock()
	_ = alice.WS.CloseNow()
	waitFor(t, "alice's leave run at the edge", func() bool {
		edge.p.cluster.mu.Lock()
		defer edge.p.cluster.mu.Unlock()
		return len(edge.p.cluster.edges) == 0
	})
	s.mu.Lock()
	delete(s.out, home.name)
	s.mu.Unlock()
	close(stalled.dead)

	carol.ExpectPresence("carol")
}

// TestStreamMessageLengthAllocatesNothingUnsent: a stream's length prefix
// is a claim, not bytes: a peer with a ticket that announces a message of
// nearly maxStreamMessage and sends a few KiB of it makes the instance
// allocate about what it sent, not the 256 MiB announced.
func TestStreamMessageLengthAllocatesNothingUnsent(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, "i0", clusterLeaseTTL)
	secret := askTicket(t, in, "i9")
	c, err := net.Dial("tcp", streamAddr(t, in))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stream := []byte(streamHello + " i9 " + secret + "\n")
	stream = binary.AppendUvarint(stream, maxStreamMessage-1)
	stream = append(stream, bytes.Repeat([]byte{'x'}, 16<<10)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := c.Write(stream); err != nil {
		t.Fatal(err)
	}
	_ = c.Close() // the message ends short: the stream ends
	waitFor(t, "the stream's end logged", func() bool {
		return strings.Contains(in.logs.String(), "nexscope stream from another instance ended")
	})
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got >= 32<<20 {
		t.Fatalf("a message announced at %d bytes, of which 16 KiB were sent, allocated %d bytes; want under 32 MiB", maxStreamMessage-1, got)
	}
}

// TestStreamTicketAskedTwiceOpens: a ticket request that reaches the
// instance twice (go-redis published it again after a lost reply) is
// answered twice with the same ticket: the dialer, which takes the first
// answer, opens the stream. Pub/sub loses the member frames here, so they
// must take the streams.
func TestStreamTicketAskedTwiceOpens(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{ClusterAddr: "127.0.0.1:0"}, 2, clusterLeaseTTL)
	for _, in := range ins {
		streamAddr(t, in)
		lose := func(channel string, msg []byte) bool {
			typ := clustertest.Type(msg)
			return strings.HasPrefix(channel, cluster.Inbox("")) && (typ == msgIn || typ == msgOut || typ == msgJoined)
		}
		twice := func(_ string, msg []byte) bool { return clustertest.Type(msg) == msgStream }
		in.lose.Store(&lose)
		in.again.Store(&twice)
	}
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice")
	bob := home.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	alice.SendJSON(msg("m1", "alice", []string{"bob"}, "over the stream"))
	if m := bob.Expect("msg"); m["msgId"] != "m1" {
		t.Fatalf("bob got %v, want m1", m)
	}
}

// TestStreamThatDoesNotOpenHoldsItsMessagesUnderABeat: what is queued for
// a stream whose dial gets no answer (the ticket's answer lost, a peer
// address that drops the connection) goes over pub/sub once a beat
// passed, well before the peer, hearing nothing from this instance for
// three beats, counts it gone: closing the members homed here and failing
// the actions it forwarded here (taken: msgTaken is held up with the rest).
func TestStreamThatDoesNotOpenHoldsItsMessagesUnderABeat(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{ClusterAddr: "127.0.0.1:0"}
	clk := clocktest.New(time.Now())
	from := startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, func(d *platform.Deps) { d.Clock = clk })
	to := startInstance(t, srv, cfg, "i1", clusterLeaseTTL)
	streamAddr(t, from) // it streams once it listens
	noTicket := func(channel string, _ []byte) bool { return channel == cluster.Inbox(from.name) }
	to.lose.Store(&noTicket)
	asked := make(chan struct{}, 1)
	watch := func(channel string, msg []byte) bool {
		if channel == cluster.Inbox(to.name) && clustertest.Type(msg) == msgStream {
			wsconn.Signal(asked)
		}
		return false
	}
	from.lose.Store(&watch)
	got := make(chan struct{}, 1)
	to.p.cluster.node.Handle('Z', 0, func(cluster.Msg) { wsconn.Signal(got) })
	from.p.cluster.sendNow(to.name, 'Z')
	select {
	case <-asked: // the dial's bound is armed before it asks
	case <-time.After(testTimeout):
		t.Fatal("the stream's dial asked no ticket")
	}
	clk.Advance(from.p.cluster.node.Beat())
	select {
	case <-got:
	case <-time.After(testTimeout):
		t.Fatalf("the message queued for a stream that did not open was still held a beat after its dial began: the peer counts an instance silent for %d beats gone", cluster.LostBeats)
	}
}
