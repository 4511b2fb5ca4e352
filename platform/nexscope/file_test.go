package nexscope

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func fileStart(id, from string, to []string, size int64) map[string]any {
	return map[string]any{
		"type": "file-start", "msgId": id, "from": from, "to": to, "role": "userAgent",
		"threadId": "t-files", "text": "attached: current auth.ts", "hopCount": 0,
		"attachment": map[string]any{"name": "auth.ts", "size": size, "mime": "text/x-typescript", "chunkSize": 65536},
	}
}

func fileEnd(id, from string) map[string]any {
	return map[string]any{"type": "file-end", "msgId": id, "from": from}
}

// chunkSource yields size bytes in chunks of chunkSize; every chunk is
// distinct (its index is stamped in), so reordering changes the hash.
type chunkSource struct {
	block     []byte
	size, off int64
	chunkSize int
	index     uint64
}

func newChunkSource(size int64, chunkSize int) *chunkSource {
	block := make([]byte, chunkSize)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range block {
		block[i] = byte(rng.Uint32())
	}
	return &chunkSource{block: block, size: size, chunkSize: chunkSize}
}

// next returns the next chunk (valid until the following call) or nil.
func (s *chunkSource) next() []byte {
	if s.off >= s.size {
		return nil
	}
	n := int(min(int64(s.chunkSize), s.size-s.off))
	b := s.block[:n]
	if n >= 8 {
		binary.BigEndian.PutUint64(b, s.index)
	}
	s.index++
	s.off += int64(n)
	return b
}

// sha256Of returns the hex digest of the whole stream.
func sha256Of(size int64, chunkSize int) string {
	src := newChunkSource(size, chunkSize)
	h := sha256.New()
	for b := src.next(); b != nil; b = src.next() {
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// received is what a recipient assembled from one file stream.
type received struct {
	start, end map[string]any
	bytes      int64
	sha256     string
	err        error
}

// receiveFile reads file-start, binary chunks and file-end in a goroutine.
func receiveFile(c *client) <-chan received {
	out := make(chan received, 1)
	go func() {
		var r received
		defer func() { out <- r }()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		h := sha256.New()
		for {
			typ, b, err := c.ws.Read(ctx)
			if err != nil {
				r.err = err
				return
			}
			if typ == websocket.MessageBinary {
				if r.start == nil {
					r.err = errors.New("chunk before file-start")
					return
				}
				h.Write(b)
				r.bytes += int64(len(b))
				continue
			}
			m, err := decodeFrame(b)
			if err != nil {
				r.err = err
				return
			}
			switch m["type"] {
			case "presence":
			case "file-start":
				r.start = m
			case "file-end":
				r.end = m
				r.sha256 = hex.EncodeToString(h.Sum(nil))
				return
			default:
				r.err = fmt.Errorf("unexpected frame %s", b)
				return
			}
		}
	}()
	return out
}

// sendFile streams a whole file from c.
func sendFile(c *client, id string, to []string, size int64, chunkSize int) {
	c.sendJSON(fileStart(id, c.name, to, size))
	src := newChunkSource(size, chunkSize)
	for b := src.next(); b != nil; b = src.next() {
		c.sendBinary(b)
	}
	c.sendJSON(fileEnd(id, c.name))
}

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
	bob.expectPresence("bob", "carol")
	bob.expectPresence("alice", "bob", "carol")
	carol.expectPresence("alice", "bob", "carol")
	gotBob, gotCarol := receiveFile(bob), receiveFile(carol)

	sendFile(alice, "f-100mb", []string{"bob", "carol", "dave"}, size, chunk)
	ack := alice.expect("ack")
	if ack["msgId"] != "f-100mb" || ack["threadId"] != "t-files" ||
		fmt.Sprint(ack["delivered"]) != "[bob carol]" || fmt.Sprint(ack["offline"]) != "[dave]" {
		t.Fatalf("ack %v", ack)
	}
	want := sha256Of(size, chunk)
	for _, r := range []received{<-gotBob, <-gotCarol} {
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.bytes != size || r.sha256 != want {
			t.Fatalf("received %d bytes sha256 %s, want %d bytes %s", r.bytes, r.sha256, size, want)
		}
		att := r.start["attachment"].(map[string]any)
		if r.start["ts"] == nil || att["size"] != float64(size) || r.end["msgId"] != "f-100mb" || r.end["ts"] == nil {
			t.Fatalf("file-start %v file-end %v", r.start, r.end)
		}
	}
	t.Logf("relayed %d bytes intact to 2 recipients", size)
}

func TestFileBroadcastAndZeroBytes(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.expectPresence("alice", "bob")
	got := receiveFile(bob)
	sendFile(alice, "empty", []string{}, 0, 1)
	ack := alice.expect("ack")
	if fmt.Sprint(ack["delivered"]) != "[bob]" {
		t.Fatalf("ack %v", ack)
	}
	if r := <-got; r.err != nil || r.bytes != 0 {
		t.Fatalf("bob: %+v", r)
	}
}

func TestTransferBusy(t *testing.T) {
	tr := startRelay(t, Config{Rooms: []Room{{Name: "other"}}})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	carol := tr.join(t, "", "carol")
	bob.expectPresence("alice", "bob")
	bob.expectPresence("alice", "bob", "carol")
	alice.expectPresence("alice", "bob", "carol")

	alice.sendJSON(fileStart("f1", "alice", []string{"bob"}, 3))
	bob.expect("file-start")
	for _, c := range []*client{carol, alice} {
		c.sendJSON(fileStart("f2", c.name, []string{"bob"}, 3))
		e := c.expectError(CodeTransferBusy)
		if e["retryAfterMs"] != float64(2000) || e["msgId"] != "f2" {
			t.Fatalf("transfer_busy %v", e)
		}
	}
	// Another room has its own lock.
	dan := tr.join(t, "other", "dan")
	dan.sendJSON(fileStart("f3", "dan", []string{}, 0))
	dan.sendJSON(fileEnd("f3", "dan"))
	dan.expect("ack")

	// Binary from a member that holds no lock (its refused stream ended) is
	// refused, not relayed.
	carol.sendJSON(fileEnd("f2", "carol"))
	carol.sendBinary([]byte("xyz"))
	carol.expectError(CodeUnexpectedBinary)

	alice.sendBinary([]byte("abc"))
	alice.sendJSON(fileEnd("f1", "alice"))
	alice.expect("ack")
	if typ, b := bob.read(); typ != websocket.MessageBinary || string(b) != "abc" {
		t.Fatalf("bob got %s", b)
	}
	bob.expect("file-end")
	// Released: carol may send now.
	carol.sendJSON(fileStart("f4", "carol", []string{"bob"}, 0))
	carol.sendJSON(fileEnd("f4", "carol"))
	carol.expect("ack")
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
	bob.expectPresence("alice", "bob")
	bob.expectPresence("alice", "bob", "carol")
	alice.expectPresence("alice", "bob", "carol")

	alice.sendJSON(fileStart("f1", "alice", []string{"bob"}, 3))
	bob.expect("file-start")
	sendFile(carol, "f2", []string{"bob"}, chunkSize*chunks, chunkSize)
	carol.expectError(CodeTransferBusy)
	carol.sendText(`{"type":"ping"}`)
	carol.expect("pong") // no unexpected_binary or bad_file_end before it

	// The refused stream is over: stray binary is unexpected again.
	carol.sendBinary([]byte("stray"))
	carol.expectError(CodeUnexpectedBinary)

	// The quiet drop is bounded by attachment.size.
	carol.sendJSON(fileStart("f3", "carol", []string{"bob"}, 4))
	carol.expectError(CodeTransferBusy)
	carol.sendBinary([]byte("1234"))
	carol.sendBinary([]byte("5"))
	carol.expectError(CodeUnexpectedBinary)

	// Bob got nothing of carol's, and alice's transfer is intact.
	alice.sendBinary([]byte("abc"))
	alice.sendJSON(fileEnd("f1", "alice"))
	alice.expect("ack")
	if typ, b := bob.read(); typ != websocket.MessageBinary || string(b) != "abc" {
		t.Fatalf("bob got %s", b)
	}
	bob.expect("file-end")
}

func TestTransferStallClosesSender4014(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.expectPresence("alice", "bob")

	alice.sendJSON(fileStart("f1", "alice", []string{"bob"}, 10))
	bob.expect("file-start")
	alice.sendBinary([]byte("12345"))
	if _, b := bob.read(); string(b) != "12345" {
		t.Fatalf("bob got %q", b)
	}
	tr.clock.Advance(DefaultTransferTimeout - time.Millisecond)
	alice.sendText(`{"type":"ping"}`) // still connected
	alice.expect("pong")

	tr.clock.Advance(time.Millisecond)
	alice.expectClose(CloseTransferStalled)
	if e := bob.expectError(CodeTransferIncomplete); e["msgId"] != "f1" {
		t.Fatalf("transfer_incomplete %v", e)
	}
	bob.expectPresence("bob")

	// The lock is free again.
	carol := tr.join(t, "", "carol")
	bob.expectPresence("bob", "carol")
	carol.sendJSON(fileStart("f2", "carol", []string{"bob"}, 0))
	carol.sendJSON(fileEnd("f2", "carol"))
	carol.expect("ack")
}

func TestTransferSenderDisconnects(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.expectPresence("alice", "bob")
	alice.sendJSON(fileStart("f1", "alice", []string{"bob"}, 100))
	bob.expect("file-start")
	alice.sendBinary([]byte("partial"))
	bob.read()
	_ = alice.ws.CloseNow()
	if e := bob.expectError(CodeTransferIncomplete); e["msgId"] != "f1" {
		t.Fatalf("transfer_incomplete %v", e)
	}
	bob.expectPresence("bob")
	if n := tr.clock.Pending(); n != 1 { // only bob's heartbeat
		t.Fatalf("%d timers armed; the transfer deadline was not stopped", n)
	}
	carol := tr.join(t, "", "carol")
	carol.sendJSON(fileStart("f2", "carol", []string{}, 0))
	carol.sendJSON(fileEnd("f2", "carol"))
	carol.expect("ack")
}

func TestBadFileEnd(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.expectPresence("alice", "bob")

	alice.sendJSON(fileEnd("nothing", "alice")) // no transfer at all
	alice.expectError(CodeBadFileEnd)

	alice.sendJSON(fileStart("f1", "alice", []string{"bob"}, 2))
	bob.expect("file-start")
	alice.sendBinary([]byte("ok"))
	alice.sendJSON(fileEnd("f-other", "alice"))
	if e := alice.expectError(CodeBadFileEnd); e["msgId"] != "f-other" {
		t.Fatalf("bad_file_end %v", e)
	}
	// The transfer is still on: the right file-end completes it.
	alice.sendJSON(fileEnd("f1", "alice"))
	if ack := alice.expect("ack"); ack["msgId"] != "f1" {
		t.Fatalf("ack %v", ack)
	}
	bob.read() // chunk
	if end := bob.expect("file-end"); end["msgId"] != "f1" {
		t.Fatalf("bob got %v; the mismatched file-end must be dropped", end)
	}
}

func TestFileSizeChecks(t *testing.T) {
	tr := startRelay(t, Config{MaxFile: 1000})
	bob := tr.join(t, "", "bob")
	alice := tr.join(t, "", "alice")
	bob.expectPresence("alice", "bob")

	alice.sendJSON(fileStart("big", "alice", []string{"bob"}, 1001))
	alice.expectError(CodeFileTooLarge)
	for _, att := range []string{`null`, `{}`, `{"size":-1}`, `{"size":"10"}`, `{"size":1.5}`, `"x"`} {
		alice.sendText(`{"type":"file-start","msgId":"b","from":"alice","to":["bob"],"attachment":` + att + `}`)
		alice.expectError(CodeBadFileStart)
	}

	// Overrun: the chunk that passes attachment.size aborts the transfer;
	// the rest of that stream is dropped quietly.
	alice.sendJSON(fileStart("over", "alice", []string{"bob"}, 4))
	bob.expect("file-start")
	alice.sendBinary([]byte("abc"))
	alice.sendBinary([]byte("de"))
	alice.expectError(CodeSizeMismatch)
	alice.sendBinary([]byte("f"))
	alice.sendJSON(fileEnd("over", "alice"))
	bob.read() // "abc"
	bob.expectError(CodeTransferIncomplete)

	// Underrun: file-end before all bytes.
	alice.sendJSON(fileStart("under", "alice", []string{"bob"}, 4))
	bob.expect("file-start")
	alice.sendBinary([]byte("ab"))
	alice.sendJSON(fileEnd("under", "alice"))
	alice.expectError(CodeSizeMismatch)
	bob.read()
	bob.expectError(CodeTransferIncomplete)

	// 1000 bytes (the cap) is fine, and 1e3 spells the size too.
	alice.sendText(`{"type":"file-start","msgId":"cap","from":"alice","to":["bob"],"attachment":{"size":1e3}}`)
	alice.sendBinary(make([]byte, 1000))
	alice.sendJSON(fileEnd("cap", "alice"))
	alice.expect("ack")
}

func TestFileRecipientLeavesMidTransfer(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	tr.join(t, "", "carol")
	alice := tr.join(t, "", "alice")
	alice.sendJSON(fileStart("f1", "alice", []string{"bob", "carol"}, 1))
	bob.expectPresence("bob", "carol")
	bob.expectPresence("alice", "bob", "carol")
	bob.expect("file-start")
	_ = bob.ws.CloseNow()
	alice.expectPresence("alice", "carol")
	alice.sendBinary([]byte("x"))
	alice.sendJSON(fileEnd("f1", "alice"))
	ack := alice.expect("ack")
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
	slow.expectPresence("fast", "slow")
	slow.expectPresence("alice", "fast", "slow")
	fast.expectPresence("alice", "fast", "slow")
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
	alice.expect("ack")
	want := sha256Of(size, chunk)
	for _, r := range []received{<-gotSlow, <-gotFast} {
		if r.err != nil || r.sha256 != want {
			t.Fatalf("got %d bytes %s err %v", r.bytes, r.sha256, r.err)
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
		alice.sendJSON(msg(fmt.Sprint(i), "alice", []string{"slow"}, string(text)))
		m := alice.next()
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
// its queue is within bounds.
func TestStuckWriteDisconnects(t *testing.T) {
	tr := startRelay(t, Config{WriteTimeout: 50 * time.Millisecond, SendQueueBytes: 1 << 30, MaxPayload: 2 << 20})
	tr.join(t, "", "stuck") // never reads
	alice := tr.join(t, "", "alice")
	text := strings.Repeat("x", 1<<20)
	for i := 0; ; i++ {
		alice.sendJSON(msg(fmt.Sprint(i), "alice", []string{"stuck"}, text))
		if m := alice.next(); m["type"] == "presence" {
			if fmt.Sprint(users(m)) != "[alice]" {
				t.Fatalf("presence %v", m)
			}
			break
		}
		if i > 10000 {
			t.Fatal("stuck member never dropped")
		}
	}
	if !strings.Contains(tr.logs.String(), "too slow") {
		t.Fatal("write timeout not logged")
	}
}
