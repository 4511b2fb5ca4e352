package nexscope

import (
	"bytes"
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
		m.log = p.log
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
