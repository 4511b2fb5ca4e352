package nexscope

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/platform"
)

func TestFileRelayedIntactToTwoRecipients(t *testing.T) {
	size := int64(100 << 20) // the protocol's 100 MB cap (MaxFile default)
	if testing.Short() {
		size = 8 << 20
	}
	const chunk = 64 << 10
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	carol := tr.join(t, "", "carol")
	alice := tr.join(t, "", "alice")
	bob.ExpectPresence("bob", "carol")
	bob.ExpectPresence("alice", "bob", "carol")
	carol.ExpectPresence("alice", "bob", "carol")
	gotBob, gotCarol := receiveFile(bob), receiveFile(carol)

	sendFile(alice, "f-100mb", []string{"bob", "carol", "dave"}, size, chunk)
	ack := alice.Expect("ack")
	if ack["msgId"] != "f-100mb" || ack["threadId"] != "t-files" ||
		fmt.Sprint(ack["delivered"]) != "[bob carol]" || fmt.Sprint(ack["offline"]) != "[dave]" {
		t.Fatalf("ack %v", ack)
	}
	want := sha256Of(size, chunk)
	for _, r := range []received{<-gotBob, <-gotCarol} {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Bytes != size || r.SHA256 != want {
			t.Fatalf("received %d bytes sha256 %s, want %d bytes %s", r.Bytes, r.SHA256, size, want)
		}
		att := r.Start["attachment"].(map[string]any)
		if r.Start["ts"] == nil || att["size"] != float64(size) || r.End["msgId"] != "f-100mb" || r.End["ts"] == nil {
			t.Fatalf("file-start %v file-end %v", r.Start, r.End)
		}
	}
	t.Logf("relayed %d bytes intact to 2 recipients", size)
}

func TestFileBroadcastAndZeroBytes(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.ExpectPresence("alice", "bob")
	got := receiveFile(bob)
	sendFile(alice, "empty", []string{}, 0, 1)
	ack := alice.Expect("ack")
	if fmt.Sprint(ack["delivered"]) != "[bob]" {
		t.Fatalf("ack %v", ack)
	}
	if r := <-got; r.Err != nil || r.Bytes != 0 {
		t.Fatalf("bob: %+v", r)
	}
}

func TestTransferBusy(t *testing.T) {
	tr := startRelay(t, Config{Rooms: []Room{{Name: "other"}}})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	carol := tr.join(t, "", "carol")
	bob.ExpectPresence("alice", "bob")
	bob.ExpectPresence("alice", "bob", "carol")
	alice.ExpectPresence("alice", "bob", "carol")

	alice.SendJSON(fileStart("f1", "alice", []string{"bob"}, 3))
	bob.Expect("file-start")
	for _, c := range []*client{carol, alice} {
		c.SendJSON(fileStart("f2", c.Name, []string{"bob"}, 3))
		e := expectError(c, CodeTransferBusy)
		if e["retryAfterMs"] != float64(2000) || e["msgId"] != "f2" {
			t.Fatalf("transfer_busy %v", e)
		}
	}
	// Another room has its own lock.
	dan := tr.join(t, "other", "dan")
	dan.SendJSON(fileStart("f3", "dan", []string{}, 0))
	dan.SendJSON(fileEnd("f3", "dan"))
	dan.Expect("ack")

	// Binary from a member that holds no lock (its refused stream ended) is
	// refused, not relayed.
	carol.SendJSON(fileEnd("f2", "carol"))
	carol.SendBinary([]byte("xyz"))
	expectError(carol, CodeUnexpectedBinary)

	alice.SendBinary([]byte("abc"))
	alice.SendJSON(fileEnd("f1", "alice"))
	alice.Expect("ack")
	if typ, b := bob.Read(); typ != websocket.MessageBinary || string(b) != "abc" {
		t.Fatalf("bob got %s", b)
	}
	bob.Expect("file-end")
	// Released: carol may send now.
	carol.SendJSON(fileStart("f4", "carol", []string{"bob"}, 0))
	carol.SendJSON(fileEnd("f4", "carol"))
	carol.Expect("ack")
}

// A client refused with transfer_busy keeps streaming its file, as the real
// client does: it gets that one error, its chunks (up to attachment.size
// bytes) and its file-end are dropped quietly, and a binary frame past them
// is unexpected again.
func TestTransferBusyDropsTheRefusedStreamQuietly(t *testing.T) {
	const chunkSize, chunks = 1024, 40
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	carol := tr.join(t, "", "carol")
	bob.ExpectPresence("alice", "bob")
	bob.ExpectPresence("alice", "bob", "carol")
	alice.ExpectPresence("alice", "bob", "carol")

	alice.SendJSON(fileStart("f1", "alice", []string{"bob"}, 3))
	bob.Expect("file-start")
	sendFile(carol, "f2", []string{"bob"}, chunkSize*chunks, chunkSize)
	expectError(carol, CodeTransferBusy)
	carol.SendText(`{"type":"ping"}`)
	carol.Expect("pong") // no unexpected_binary or bad_file_end before it

	// The refused stream is over: stray binary is unexpected again.
	carol.SendBinary([]byte("stray"))
	expectError(carol, CodeUnexpectedBinary)

	// The quiet drop is bounded by attachment.size.
	carol.SendJSON(fileStart("f3", "carol", []string{"bob"}, 4))
	expectError(carol, CodeTransferBusy)
	carol.SendBinary([]byte("1234"))
	carol.SendBinary([]byte("5"))
	expectError(carol, CodeUnexpectedBinary)

	// Bob got nothing of carol's, and alice's transfer is intact.
	alice.SendBinary([]byte("abc"))
	alice.SendJSON(fileEnd("f1", "alice"))
	alice.Expect("ack")
	if typ, b := bob.Read(); typ != websocket.MessageBinary || string(b) != "abc" {
		t.Fatalf("bob got %s", b)
	}
	bob.Expect("file-end")
}

func TestTransferStallClosesSender4014(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.ExpectPresence("alice", "bob")

	alice.SendJSON(fileStart("f1", "alice", []string{"bob"}, 10))
	bob.Expect("file-start")
	alice.SendBinary([]byte("12345"))
	if _, b := bob.Read(); string(b) != "12345" {
		t.Fatalf("bob got %q", b)
	}
	tr.advance(t, DefaultTransferTimeout-time.Millisecond)
	alice.SendText(`{"type":"ping"}`) // still connected
	alice.Expect("pong")

	tr.clock.Advance(time.Millisecond)
	expectClose(alice, CloseTransferStalled)
	if e := expectError(bob, CodeTransferIncomplete); e["msgId"] != "f1" {
		t.Fatalf("transfer_incomplete %v", e)
	}
	bob.ExpectPresence("bob")

	// The lock is free again.
	carol := tr.join(t, "", "carol")
	bob.ExpectPresence("bob", "carol")
	carol.SendJSON(fileStart("f2", "carol", []string{"bob"}, 0))
	carol.SendJSON(fileEnd("f2", "carol"))
	carol.Expect("ack")
}

func TestTransferSenderDisconnects(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.ExpectPresence("alice", "bob")
	alice.SendJSON(fileStart("f1", "alice", []string{"bob"}, 100))
	bob.Expect("file-start")
	alice.SendBinary([]byte("partial"))
	bob.Read()
	_ = alice.WS.CloseNow()
	if e := expectError(bob, CodeTransferIncomplete); e["msgId"] != "f1" {
		t.Fatalf("transfer_incomplete %v", e)
	}
	bob.ExpectPresence("bob")
	tr.writesDone(t)
	if n := tr.clock.Pending() - tr.armedWatchdogs(); n != 1 { // only bob's heartbeat
		t.Fatalf("%d timers armed besides write watchdogs; the transfer deadline was not stopped", n)
	}
	carol := tr.join(t, "", "carol")
	carol.SendJSON(fileStart("f2", "carol", []string{}, 0))
	carol.SendJSON(fileEnd("f2", "carol"))
	carol.Expect("ack")
}

func TestBadFileEnd(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.ExpectPresence("alice", "bob")

	alice.SendJSON(fileEnd("nothing", "alice")) // no transfer at all
	expectError(alice, CodeBadFileEnd)

	alice.SendJSON(fileStart("f1", "alice", []string{"bob"}, 2))
	bob.Expect("file-start")
	alice.SendBinary([]byte("ok"))
	alice.SendJSON(fileEnd("f-other", "alice"))
	if e := expectError(alice, CodeBadFileEnd); e["msgId"] != "f-other" {
		t.Fatalf("bad_file_end %v", e)
	}
	// The transfer is still on: the right file-end completes it.
	alice.SendJSON(fileEnd("f1", "alice"))
	if ack := alice.Expect("ack"); ack["msgId"] != "f1" {
		t.Fatalf("ack %v", ack)
	}
	bob.Read() // chunk
	if end := bob.Expect("file-end"); end["msgId"] != "f1" {
		t.Fatalf("bob got %v; the mismatched file-end must be dropped", end)
	}
}

func TestFileSizeChecks(t *testing.T) {
	tr := startRelay(t, Config{MaxFile: 1000})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.ExpectPresence("alice", "bob")

	alice.SendJSON(fileStart("big", "alice", []string{"bob"}, 1001))
	expectError(alice, CodeFileTooLarge)
	for _, att := range []string{`null`, `{}`, `{"size":-1}`, `{"size":"10"}`, `{"size":1.5}`, `"x"`} {
		alice.SendText(`{"type":"file-start","msgId":"b","from":"alice","to":["bob"],"attachment":` + att + `}`)
		expectError(alice, CodeBadFileStart)
	}

	// Overrun: the chunk that passes attachment.size aborts the transfer;
	// the rest of that stream is dropped quietly.
	alice.SendJSON(fileStart("over", "alice", []string{"bob"}, 4))
	bob.Expect("file-start")
	alice.SendBinary([]byte("abc"))
	alice.SendBinary([]byte("de"))
	expectError(alice, CodeSizeMismatch)
	alice.SendBinary([]byte("f"))
	alice.SendJSON(fileEnd("over", "alice"))
	bob.Read() // "abc"
	expectError(bob, CodeTransferIncomplete)

	// Underrun: file-end before all bytes.
	alice.SendJSON(fileStart("under", "alice", []string{"bob"}, 4))
	bob.Expect("file-start")
	alice.SendBinary([]byte("ab"))
	alice.SendJSON(fileEnd("under", "alice"))
	expectError(alice, CodeSizeMismatch)
	bob.Read()
	expectError(bob, CodeTransferIncomplete)

	// 1000 bytes (the cap) is fine, and 1e3 spells the size too.
	alice.SendText(`{"type":"file-start","msgId":"cap","from":"alice","to":["bob"],"attachment":{"size":1e3}}`)
	alice.SendBinary(make([]byte, 1000))
	alice.SendJSON(fileEnd("cap", "alice"))
	alice.Expect("ack")
}

func TestFileRecipientLeavesMidTransfer(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	tr.join(t, "", "carol")
	alice := tr.join(t, "", "alice")
	alice.SendJSON(fileStart("f1", "alice", []string{"bob", "carol"}, 1))
	bob.ExpectPresence("bob", "carol")
	bob.ExpectPresence("alice", "bob", "carol")
	bob.Expect("file-start")
	_ = bob.WS.CloseNow()
	alice.ExpectPresence("alice", "carol")
	alice.SendBinary([]byte("x"))
	alice.SendJSON(fileEnd("f1", "alice"))
	ack := alice.Expect("ack")
	if fmt.Sprint(ack["delivered"]) != "[carol]" || fmt.Sprint(ack["offline"]) != "[bob]" {
		t.Fatalf("ack %v", ack)
	}
}

// A recipient that does not read holds the transfer back (backpressure on
// the sender) instead of making the relay buffer the file: its queue stays
// within the send window plus one chunk.
func TestSlowRecipientBoundsMemory(t *testing.T) {
	const (
		window = 256 << 10
		chunk  = 64 << 10
		size   = 16 << 20
	)
	tr := startRelay(t, Config{SendQueueBytes: window})
	slow := tr.join(t, "", "slow")
	fast := tr.join(t, "", "fast")
	alice := tr.join(t, "", "alice")
	slow.ExpectPresence("fast", "slow")
	slow.ExpectPresence("alice", "fast", "slow")
	fast.ExpectPresence("alice", "fast", "slow")
	gotFast := receiveFile(fast)

	sent := make(chan struct{})
	go func() {
		defer close(sent)
		sendFile(alice, "f1", []string{"slow", "fast"}, size, chunk)
	}()
	slowMember := tr.member("slow")
	var peak int64
	waitFor(t, "the slow recipient's queue to fill", func() bool {
		q := slowMember.q.Queued()
		peak = max(peak, q)
		return q >= window
	})
	// The transfer cannot run ahead of the slow reader: the relay has
	// forwarded at most what fits the window plus the socket buffers.
	tr.p.rooms[DefaultRoom].mu.Lock()
	forwarded := tr.p.rooms[DefaultRoom].transfer.received
	tr.p.rooms[DefaultRoom].mu.Unlock()
	if forwarded >= size {
		t.Fatalf("relay forwarded the whole file (%d bytes) past a recipient that reads nothing", forwarded)
	}
	gotSlow := receiveFile(slow)
	<-sent
	alice.Expect("ack")
	want := sha256Of(size, chunk)
	for _, r := range []received{<-gotSlow, <-gotFast} {
		if r.Err != nil || r.SHA256 != want {
			t.Fatalf("got %d bytes %s err %v", r.Bytes, r.SHA256, r.Err)
		}
	}
	if peak > window+chunk {
		t.Fatalf("slow recipient queue peaked at %d bytes, bound %d", peak, window+chunk)
	}
}

// A member that never reads while text keeps coming is closed as a slow
// consumer once its queue passes SendQueueBytes + MaxPayload.
func TestSlowConsumerClosed(t *testing.T) {
	tr := startRelay(t, Config{SendQueueBytes: 4096, MaxPayload: 8192})
	slow := tr.join(t, "", "slow")
	alice := tr.join(t, "", "alice")
	_ = slow // joined, never reads
	text := make([]byte, 4000)
	for i := range text {
		text[i] = 'x'
	}
	for i := 0; ; i++ {
		alice.SendJSON(msg(fmt.Sprint(i), "alice", []string{"slow"}, string(text)))
		m := alice.Next()
		if m["type"] == "presence" {
			if fmt.Sprint(users(m)) != "[alice]" {
				t.Fatalf("presence %v", m)
			}
			break
		}
		if i > 100000 {
			t.Fatal("slow member never dropped")
		}
	}
	if tr.member("slow") != nil {
		t.Fatal("slow member still in the room")
	}
}

// member returns the default room's member called name.
func (tr *testRelay) member(name string) *member {
	r := tr.p.rooms[DefaultRoom]
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.members[name]
}

// A member stuck in one write for WriteTimeout is disconnected even while
// its queue is within bounds. The clock moves only while alice, the other
// member, has every ack and nothing left to write, so the write watchdog
// that drops a socket is the stuck member's. The test runs until stuck's
// watchdog dropped it, not until any watchdog timer fired: one firing
// between two of stuck's writes only disarms (it used to end the loop with
// stuck connected, and alice waited for its leave in vain).
func TestStuckWriteDisconnects(t *testing.T) {
	const timeout = 50 * time.Millisecond
	var clk *clocktest.Fake
	tr := startRelayOn(t, Config{WriteTimeout: timeout, HeartbeatInterval: 24 * time.Hour, SendQueueBytes: 1 << 30, MaxPayload: 2 << 20},
		func(f *clocktest.Fake) clock.Clock {
			clk = f
			return f
		})
	tr.join(t, "", "stuck") // never reads
	alice := tr.join(t, "", "alice")
	stuck, me := tr.member("stuck"), tr.member("alice")
	text := strings.Repeat("x", 1<<20)
	for i := 0; !stuck.watch.Fired(); i++ {
		if i > 10000 {
			t.Fatal("stuck member never dropped")
		}
		alice.SendJSON(msg(fmt.Sprint(i), "alice", []string{"stuck"}, text))
		alice.Expect("ack")
		waitFor(t, "alice's ack written (her write watchdog disarmed)", func() bool { return me.q.Queued() == 0 })
		// Frames wait behind stuck's write under way (its watchdog armed),
		// or the write may finish before the clock moves: send another.
		if stuck.q.Len() > 0 {
			clk.Advance(timeout)
		}
	}
	alice.ExpectPresence("alice")
	// Its reader, seeing the socket dropped, may have left before the
	// writer logs.
	waitFor(t, "the write timeout logged", func() bool { return strings.Contains(tr.logs.String(), "too slow") })
}

// Empty (or tiny) file chunks fill a recipient's send window too: each
// queued frame counts frameOverhead beyond its bytes, so a sender streaming
// empty chunks to a member that does not read waits once the window is
// full instead of queueing frames without bound.
func TestEmptyChunksFillTheWindow(t *testing.T) {
	const window = 4096
	p, err := New(Config{Token: testToken, SendQueueBytes: window}, platform.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	r := p.room(DefaultRoom)
	bob := newMember(p, r, "bob") // its writer never starts: nothing leaves its queue
	tr := &transfer{recipients: []*member{bob}, done: make(chan struct{}), timer: p.deps.Clock.AfterFunc(time.Hour, func() {})}
	r.transfer = tr
	pushed := make(chan int, 1)
	go func() {
		n := 0
		for n < 100_000 && r.pushChunk(tr, nil, nil) {
			n++
		}
		pushed <- n
	}()
	waitFor(t, "bob's window full of empty chunks", func() bool { return bob.q.Queued() >= window })
	if n := bob.q.Len(); n > window/frameOverhead {
		t.Fatalf("bob has %d empty chunks queued, over the window's %d", n, window/frameOverhead)
	}
	r.abort(tr) // ends the wait
	if n := <-pushed; n != window/frameOverhead {
		t.Fatalf("%d empty chunks pushed before the window was full, want %d", n, window/frameOverhead)
	}
}
