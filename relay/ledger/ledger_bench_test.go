package ledger

import (
	"context"
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
		id, err := l.Append(context.Background(), d)
		if err != nil {
			b.Fatal(err)
		}
		l.Ack([]byte(id))
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
		id, err := l.Append(context.Background(), d)
		if err != nil {
			b.Fatal(err)
		}
		l.Ack([]byte(id))
	}
}

// A bufferId costs one allocation, its string: the prefix and the number
// are joined in a stack buffer (joined with + they take two once the number
// has three digits: strconv keeps only 0–99 as constants).
func TestBufferIDAllocatesOnce(t *testing.T) {
	c := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st := store.NewMemory(c)
	defer func() { _ = st.Close() }()
	p := NewPool(testConfig(st.Ledger(), c, &fakeMetrics{outcomes: make(map[string]int)}))
	defer p.Close(context.Background())
	seq := uint64(1_000_000)
	if n := testing.AllocsPerRun(1000, func() { _ = p.bufferID(seq); seq++ }); n != 1 {
		t.Fatalf("a bufferId allocates %v times, want 1", n)
	}
	if got := p.bufferID(1234); got != "p-1234" {
		t.Fatalf("bufferID(1234) = %q, want p-1234", got)
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
		id, err := l.Append(context.Background(), Delivery{Platform: "p", SessionKey: "s" + strconv.Itoa(i), Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		l.Ack([]byte(id))
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
