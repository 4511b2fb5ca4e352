package relay

// The allocation tricks of the inbound path, each held by the count it
// saves (measured with the trick undone: in parentheses).

import (
	"context"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/relay/ledger"
	"connector/session"
)

// takeAll is a ledger.Consumer that takes every frame.
type takeAll struct{}

func (takeAll) Offer([]byte) ledger.Offered    { return ledger.Taken }
func (takeAll) Owner() (instance, conn string) { return "", "takeAll" }

// allocHub is tenant t1's hub on a relay alone, with one consumer taking
// everything. The counts are the product's, not the race detector's.
func allocHub(t *testing.T) (*Server, *hub) {
	t.Helper()
	if raceDetector {
		t.Skip("the race detector allocates, and drops pooled buffers")
	}
	s, err := New(Config{Tenants: []Tenant{{ID: "t1", Gateways: []Gateway{{ID: "gw", Secrets: []string{"s"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	h := s.hub("t1")
	h.ledger.Serve(takeAll{}, ledger.AllPlatforms)
	return s, h
}

// idPrefix is what starts every bufferId s gives (ledger.Config.IDPrefix).
func idPrefix(s *Server) string { return s.cfg.Store.Epoch() + "-" }

// An inbound_ack read from a gateway allocates nothing: its bufferId is
// looked up as a slice of the message (contract.DecodeAck; through
// DecodeGatewayFrame and a string: 1).
func TestAckAllocatesNothing(t *testing.T) {
	s, h := allocHub(t)
	const n = 1000
	lines := make([][]byte, 0, n+1)
	for range n + 1 {
		seq, err := h.ledger.Append(context.Background(), ledger.Delivery{Kind: uint8(platform.KindInbound), Platform: "p", Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, []byte(`{"type": "inbound_ack", "bufferId": "`+string(ledger.AppendBufferID(nil, idPrefix(s), seq))+`"}`))
	}
	c := &conn{srv: s, hub: h}
	i := 0
	if n := testing.AllocsPerRun(n, func() { c.handleLine(lines[i]); i++ }); n != 0 {
		t.Fatalf("an ack allocates %v times, want 0", n)
	}
	if h.ledger.Len() != 0 {
		t.Fatalf("%d entries left unacknowledged", h.ledger.Len())
	}
}

// Encoding an event allocates only the frame the ledger keeps: the payload
// is encoded into a pooled buffer (encodeBufs; without it: 7) by
// Event.AppendJSON, which allocates nothing.
func TestEncodeAllocatesTheFrameOnly(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector drops pooled buffers")
	}
	ev := &contract.Event{Text: "hello there", MessageID: "123", Source: session.Source{
		Platform: "telegram", ChatID: "42", ChatType: session.ChatTypeGroup, UserID: session.Str("7"), UserName: session.Str("alice")}}
	n := testing.AllocsPerRun(1000, func() {
		buf := getEncodeBuf()
		payload, _ := appendEvent((*buf)[:0], ev)
		*buf = payload
		_ = framer{}.Frame(uint8(platform.KindInbound), "epoch-", 12345, payload)
		putEncodeBuf(buf)
	})
	if n != 1 {
		t.Fatalf("encoding an event allocates %v times, want 1", n)
	}
}

// A delivery of a chat with no profile remembered allocates nothing in
// stampProfile (with &profile instead of new(profile), every call moves
// the profile to the heap: 1).
func TestStampProfileAllocatesNothingWithoutAProfile(t *testing.T) {
	_, h := allocHub(t)
	h.noteProfile(0, "p", "c", "prof")
	fw := &contract.Forward{}
	d := platform.Delivery{Platform: "p", ChatID: "another chat", Forward: fw}
	if n := testing.AllocsPerRun(1000, func() { h.stampProfile(&d) }); n != 0 {
		t.Fatalf("stampProfile allocates %v times without a profile, want 0", n)
	}
}

// Until the tenant's gateways noted a profile, stampProfile takes no lock:
// with chatsMu held it still returns (it waited for the lock before:
// a lock and a lookup per delivery). Once one is noted it stamps it.
func TestStampProfileLocksNothingBeforeAProfile(t *testing.T) {
	s, err := New(Config{Tenants: []Tenant{{ID: "t1", Gateways: []Gateway{{ID: "gw", Secrets: []string{"s"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	h := s.hub("t1")
	ev := &contract.Event{}
	d := platform.Delivery{Platform: "p", ChatID: "c", Event: ev}
	h.chatsMu.Lock()
	done := make(chan struct{})
	go func() { h.stampProfile(&d); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stampProfile waited 10 s for chatsMu with no profile noted")
	}
	h.chatsMu.Unlock()
	h.noteProfile(0, "p", "c", "prof")
	h.stampProfile(&d)
	if d.Event.Source.Profile != "prof" || ev.Source.Profile != "" {
		t.Fatalf("stamped %q (platform's event %q), want prof on a copy", d.Event.Source.Profile, ev.Source.Profile)
	}
}

// Ledger.Append hands the store its one record in a pooled slice
// (records; without it: 5), and keeps no bufferId of its own: its frame is
// written around one on the stack and the ack finds the entry by the
// number in it (with a string per bufferId: 5). What is left is the entry,
// its frame, and the memory store's copy of the payload and the numbers it
// returns.
func TestAppendAllocs(t *testing.T) {
	s, h := allocHub(t)
	prefix := idPrefix(s)
	d := ledger.Delivery{Kind: uint8(platform.KindInbound), Platform: "p", SessionKey: "s", Payload: []byte(`{}`)}
	n := testing.AllocsPerRun(1000, func() {
		seq, _ := h.ledger.Append(context.Background(), d)
		var b [64]byte
		if !h.ledger.Ack(ledger.AppendBufferID(b[:0], prefix, seq)) {
			t.Fatal("the ack found no entry")
		}
	})
	if n > 4 {
		t.Fatalf("an append and its ack allocate %v times, want at most 4", n)
	}
}

// A removal flushed on its own reuses the pool's map and the drained
// slices (Pool.Flush): an append, its ack and a flush of that one removal
// allocate at most 5 times on the memory store (without the reuse: 9). At
// saturation with many tenants a flush carries few removals per tenant, so
// the saving is nearly per event.
func TestFlushAllocs(t *testing.T) {
	s, h := allocHub(t)
	prefix := idPrefix(s)
	d := ledger.Delivery{Kind: uint8(platform.KindInbound), Platform: "p", SessionKey: "s", Payload: []byte(`{}`)}
	n := testing.AllocsPerRun(1000, func() {
		seq, _ := h.ledger.Append(context.Background(), d)
		var b [64]byte
		h.ledger.Ack(ledger.AppendBufferID(b[:0], prefix, seq))
		s.ledgers.Flush(context.Background())
	})
	if n > 5 {
		t.Fatalf("an append, its ack and its flush allocate %v times, want at most 5", n)
	}
}
