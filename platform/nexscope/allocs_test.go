package nexscope

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"connector/platform"
)

// A msg to another member allocates its two frames only: the copy with its
// ts for the recipients and the sender's ack. The member's routed lists
// are reused from one msg to the next (a fresh routed each time: 3).
func TestMsgAllocatesItsFramesOnly(t *testing.T) {
	p, err := New(Config{Token: testToken}, platform.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	r := p.room(DefaultRoom)
	alice, bob := newMember(p, r, "alice"), newMember(p, r, "bob")
	for _, m := range []*member{alice, bob} {
		m.log = p.deps.Log
		if err := r.join(m); err != nil {
			t.Fatal(err)
		}
	}
	frame := []byte(`{"type":"msg","msgId":"01HQX5C9ABCDEFGHJKMNPQRSTV","from":"alice","to":["bob"],"role":"user","threadId":"t","text":"hello","hopCount":0,"attachments":[]}`)
	if n := testing.AllocsPerRun(1000, func() { alice.handleText(frame) }); n != 2 {
		t.Fatalf("a msg allocates %v times, want 2", n)
	}
}

// A member reads each message into its scratch buffer, kept between
// messages: reading one allocates nothing (a buffer per message: 1).
func TestReadMessageReusesTheScratchBuffer(t *testing.T) {
	msg := bytes.Repeat([]byte("x"), 3000)
	var scratch []byte
	r := bytes.NewReader(nil)
	n := testing.AllocsPerRun(1000, func() {
		r.Reset(msg)
		if b, err := readMessage(r, &scratch, 1<<20); err != nil || len(b) != len(msg) {
			t.Fatalf("readMessage = %d bytes, %v", len(b), err)
		}
	})
	if n != 0 {
		t.Fatalf("reading a message allocates %v times, want 0", n)
	}
}

// A file chunk read from another instance's direct stream lands in a pooled
// chunk, which goes back to the pool once the frame that retained it was
// written: in steady state reading one allocates nothing (a fresh buffer per
// chunk: 1, zeroed before it is filled).
func TestStreamChunkReusesPooledBuffers(t *testing.T) {
	msg := bytes.Repeat([]byte("c"), 64<<10)
	stream := binary.AppendUvarint(nil, uint64(len(msg)))
	stream = append(stream, msg...)
	rd := bytes.NewReader(stream)
	br := bufio.NewReaderSize(rd, 4096)
	read := func() {
		rd.Reset(stream)
		br.Reset(rd)
		got, held, err := readStreamMessage(br, rd, 1<<20)
		if err != nil || held == nil || !bytes.Equal(got, msg) {
			t.Fatalf("readStreamMessage = %d bytes, held %v, %v", len(got), held != nil, err)
		}
		held.Retain()  // the frame queued for the recipient...
		held.Release() // ...written
	}
	read()
	if n := testing.AllocsPerRun(100, read); n != 0 {
		t.Fatalf("reading a chunk from a stream allocates %v times, want 0", n)
	}
}

// The routed lists a member keeps between msgs stay small: a msg naming a
// million members who are not there (a 10 MiB frame can) does not leave
// its member holding a list that long for the rest of its connection.
func TestRoutedListsKeptSmall(t *testing.T) {
	p, err := New(Config{Token: testToken}, platform.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	alice := newMember(p, p.room(DefaultRoom), "alice")
	alice.log = p.deps.Log
	if err := alice.room.join(alice); err != nil {
		t.Fatal(err)
	}
	frame := []byte(`{"type":"msg","msgId":"m1","from":"alice","role":"user","text":"hi","to":[`)
	for i := range 100000 {
		if i > 0 {
			frame = append(frame, ',')
		}
		frame = append(frame, fmt.Sprintf(`"n%d"`, i)...)
	}
	frame = append(frame, "]}"...)
	alice.handleText(frame)
	if n := cap(alice.routed.offline); n > maxKeptRouted {
		t.Fatalf("alice keeps a list of %d names after the msg, want at most %d", n, maxKeptRouted)
	}
}
