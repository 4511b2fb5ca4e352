package ledger

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/store"
)

// takeAll is a Consumer that takes every frame and keeps none.
type takeAll struct{}

func (takeAll) Offer([]byte) Offered           { return Taken }
func (takeAll) Owner() (instance, conn string) { return "i", "takeAll" }

// BenchmarkAppendAck is one event of a session through a tenant's ledger
// on the memory store: its Append, dispatched to the one consumer (the
// session's owner after the first), and its Ack.
func BenchmarkAppendAck(b *testing.B) {
	c := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st := store.NewMemory(c)
	defer func() { _ = st.Close() }()
	p := NewPool(testConfig(st.Ledger(), c, &fakeMetrics{outcomes: make(map[string]int)}))
	defer p.Close(context.Background())
	l := p.Ledger("t1")
	l.Serve(takeAll{}, AllPlatforms)
	d := Delivery{Platform: "p", SessionKey: "s", ChatID: "c", Payload: []byte(`{"text":"hello"}`)}
	b.ReportAllocs()
	for b.Loop() {
		seq, err := l.Append(context.Background(), d)
		if err != nil {
			b.Fatal(err)
		}
		var id [32]byte
		l.Ack(AppendBufferID(id[:0], "p-", seq))
	}
}

// BenchmarkAppendAckTenants is BenchmarkAppendAck over 1,000 tenants' ledgers
// in turn, as at saturation with one gateway per tenant: each removal the
// pool flushes is a different tenant's, so a flush touches as many ledgers
// as it carries removals.
func BenchmarkAppendAckTenants(b *testing.B) {
	c := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st := store.NewMemory(c)
	defer func() { _ = st.Close() }()
	p := NewPool(testConfig(st.Ledger(), c, &fakeMetrics{outcomes: make(map[string]int)}))
	defer p.Close(context.Background())
	ls := make([]*Ledger, 1000)
	for i := range ls {
		ls[i] = p.Ledger("t" + strconv.Itoa(i))
		ls[i].Serve(takeAll{}, AllPlatforms)
	}
	d := Delivery{Platform: "p", SessionKey: "s", ChatID: "c", Payload: []byte(`{"text":"hello"}`)}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l := ls[i%len(ls)]
		i++
		seq, err := l.Append(context.Background(), d)
		if err != nil {
			b.Fatal(err)
		}
		var id [32]byte
		l.Ack(AppendBufferID(id[:0], "p-", seq))
	}
}

// An ack finds its entry by the number in its bufferId, spelled exactly as
// the ledger gave it: another prefix, a leading zero, a sign, a number past
// 2^64 or a bare prefix find nothing, and the lookup allocates nothing.
func TestAckParsesTheBufferIDInPlace(t *testing.T) {
	c := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st := store.NewMemory(c)
	defer func() { _ = st.Close() }()
	p := NewPool(testConfig(st.Ledger(), c, &fakeMetrics{outcomes: make(map[string]int)}))
	defer p.Close(context.Background())
	for _, id := range []string{"p-", "q-1", "p-01", "p-+1", "p--1", "p-1x", "p-18446744073709551616", "P-1", "p1"} {
		if seq, ok := seqOf(p, id); ok {
			t.Errorf("bufferId %q read as number %d", id, seq)
		}
	}
	for _, seq := range []uint64{1, 1234, math.MaxUint64} {
		id := AppendBufferID(nil, "p-", seq)
		if got, ok := seqOf(p, id); !ok || got != seq {
			t.Errorf("bufferId %q read as %d, %v; want %d", id, got, ok, seq)
		}
	}
	id := []byte("p-1234567")
	if n := testing.AllocsPerRun(1000, func() { _, _ = seqOf(p, id) }); n != 0 {
		t.Fatalf("reading a bufferId allocates %v times, want 0", n)
	}
}

// The counts of Appends being stored keep a session's 0 (its next Append
// reuses the key) but not every session's: over 1,000 sessions appended one
// after the other, appending holds at most appendingSlack+1 keys, and none
// of them counts above 0 once every Append returned.
func TestAppendingStaysBounded(t *testing.T) {
	c := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st := store.NewMemory(c)
	defer func() { _ = st.Close() }()
	p := NewPool(testConfig(st.Ledger(), c, &fakeMetrics{outcomes: make(map[string]int)}))
	defer p.Close(context.Background())
	l := p.Ledger("t1")
	l.Serve(takeAll{}, AllPlatforms)
	most := 0
	for i := range 1000 {
		seq, err := l.Append(context.Background(), Delivery{Platform: "p", SessionKey: "s" + strconv.Itoa(i), Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		l.Ack([]byte(p.bufferID(seq)))
		l.mu.Lock()
		most = max(most, len(l.appending))
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if most > appendingSlack+1 {
		t.Fatalf("appending held %d sessions' counts, want at most %d", most, appendingSlack+1)
	}
	if l.appendingLive != 0 {
		t.Fatalf("%d sessions counted as being appended after every Append returned", l.appendingLive)
	}
	for k, n := range l.appending {
		if n != 0 {
			t.Fatalf("session %q counts %d Appends being stored after every Append returned", k, n)
		}
	}
}
