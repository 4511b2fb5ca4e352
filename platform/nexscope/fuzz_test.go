package nexscope

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/coder/websocket"

	"connector/internal/wsconn"
	"connector/platform"
	"connector/platform/platformtest"
)

// encodingSink fails t on a delivery that does not encode.
func encodingSink(t *testing.T) *platformtest.Sink {
	s := platformtest.NewSink(0)
	s.Check = func(d platform.Delivery) error {
		if d.Event != nil && !json.Valid(d.Event.AppendJSON(nil)) {
			t.Fatalf("delivery encodes to invalid JSON: %+v", d.Event)
		}
		return nil
	}
	return s
}

// frameCheck is a member's wsconn.Writer without a socket: every frame the
// relay queues for the member must be one line of valid JSON with a type.
type frameCheck struct {
	t *testing.T
	q **wsconn.Queue
}

func (w frameCheck) Write(batch []wsconn.Frame) error {
	for _, fr := range batch {
		(*w.q).Written(len(fr.Data))
		if fr.Type == websocket.MessageBinary {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(fr.Data, &v); err != nil || v["type"] == nil {
			w.t.Errorf("queued frame %q is not a typed JSON object: %v", fr.Data, err)
		}
	}
	return nil
}

func (frameCheck) End(wsconn.Close) {}

// FuzzMemberFrames drives a member's frame handlers (what its reader calls
// for every message) with arbitrary frames, no socket needed: nothing may
// panic, every frame the relay queues for anyone must be one line of valid
// JSON with a type, and the room's lock must be held only by a live sender.
//
// Input: frames separated by 0x1e; a frame starting with 'B' is binary (the
// rest), one starting with 'T' advances the clock past the transfer
// deadline, anything else is a text frame from alice.
func FuzzMemberFrames(f *testing.F) {
	join := func(b ...string) []byte { return bytes.Join(toBytes(b), []byte{0x1e}) }
	for _, s := range seedFrames {
		f.Add([]byte(s))
	}
	f.Add(join(`{"type":"msg","msgId":"m","from":"alice","to":["bob","hermes"],"role":"user","threadId":"t","text":"hi","hopCount":0}`,
		`{"type":"msg","msgId":"m","from":"alice","to":[],"text":"@hermes /stop","threadId":"t"}`))
	f.Add(join(`{"type":"file-start","msgId":"f","from":"alice","to":["bob","hermes"],"attachment":{"name":"a","size":4}}`,
		"Babcd", `{"type":"file-end","msgId":"f","from":"alice"}`))
	f.Add(join(`{"type":"file-start","msgId":"f","from":"alice","to":["bob"],"attachment":{"size":4}}`, "Babcdef", "Bx",
		`{"type":"file-end","msgId":"f","from":"alice"}`, `{"type":"file-start","msgId":"g","from":"alice","to":[],"attachment":{"size":1}}`, "T"))
	f.Fuzz(func(t *testing.T, input []byte) {
		clock := newFakeClock()
		p, err := New(Config{Token: "x", Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}},
			platform.Deps{Log: slog.New(slog.DiscardHandler), Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p.sink.Store(&sinkRef{encodingSink(t), ctx})
		r := p.rooms[DefaultRoom]
		alice, bob := newMember(p, r, "alice"), newMember(p, r, "bob")
		for _, m := range []*member{alice, bob} {
			m.log = p.deps.Log
			m.q = m.newQueue(frameCheck{t, &m.q})
			m.q.Start()
			defer func() {
				m.q.Close(wsconn.Drop, true) // writes what is queued, checking it
				<-m.q.Done()
			}()
			if err := r.join(m); err != nil {
				t.Fatal(err)
			}
		}
		check := func() {
			r.mu.Lock()
			if tr := r.transfer; tr != nil && tr.sender.left.Load() {
				t.Fatal("a departed sender still holds the room's lock")
			}
			r.mu.Unlock()
		}
		check()
		for _, frame := range bytes.Split(input, []byte{0x1e}) {
			if alice.stop || alice.left.Load() {
				break
			}
			switch {
			case len(frame) > 0 && frame[0] == 'B':
				alice.handleChunk(frame[1:], nil)
			case len(frame) > 0 && frame[0] == 'T':
				clock.Advance(DefaultTransferTimeout)
			default:
				alice.handleText(frame)
			}
			check()
		}
	})
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}
