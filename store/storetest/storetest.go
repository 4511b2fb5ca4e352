// Package storetest is the conformance suite of store backends: one set of
// tests, run by each backend's test against a factory for that backend, so
// the memory, embedded and redis stores cannot drift apart. It covers every
// method of every interface in package store, concurrency (run it under
// -race), and what survives a reopen or is shared between instances when
// the backend says it should. DamageDataPage damages an embedded data file
// for the tests of its refusal.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/store"
)

// Backend describes the backend under test.
type Backend struct {
	// Fresh creates an empty data set for t and returns a function that
	// opens a store over it on clock now. Fresh must close every store it
	// opens when t ends; the suite may close them earlier.
	Fresh func(t *testing.T) Opener
	// Durable says a store opened again over a data set, after the
	// previous one closed, sees what that one wrote.
	Durable bool
	// Shared says several stores over one data set may be open at once,
	// like connector instances sharing a Redis.
	Shared bool
	// ServerClock says leases and claims expire by the backend's own
	// clock rather than the injected one (redis: PX). The suite then waits
	// for a lease's short real TTL to pass instead of advancing the clock,
	// and ends a claim by Lapse.
	ServerClock bool
	// Lapse, with ServerClock, ends the claim of key in the data sets the
	// suite opened as its expiry on the server would (redis: removes its
	// key), so that a claim holds as long as the suite checks it.
	Lapse func(t *testing.T, key string)
}

// Opener opens a store over one data set on clock c.
type Opener func(c clock.Clock) store.Store

// waitTimeout bounds every wait of the suite.
const waitTimeout = 10 * time.Second

// Run runs the suite against b.
func Run(t *testing.T, b Backend) {
	t.Run("Epoch", func(t *testing.T) { testEpoch(t, b) })
	t.Run("LedgerAppendRead", func(t *testing.T) { testAppendRead(t, b) })
	t.Run("LedgerReadBytes", func(t *testing.T) { testReadBytes(t, b) })
	t.Run("LedgerAck", func(t *testing.T) { testAck(t, b) })
	t.Run("LedgerTrim", func(t *testing.T) { testTrim(t, b) })
	t.Run("LedgerTenantIsolation", func(t *testing.T) { testTenantIsolation(t, b) })
	t.Run("LedgerSeqsSurviveReopen", func(t *testing.T) { testSeqsSurviveReopen(t, b) })
	t.Run("LedgerSeqsAcrossInstances", func(t *testing.T) { testSeqsAcrossInstances(t, b) })
	t.Run("LedgerConcurrentAppends", func(t *testing.T) { testConcurrentAppends(t, b) })
	t.Run("LedgerStage", func(t *testing.T) { testStage(t, b) })
	t.Run("LedgerAckAll", func(t *testing.T) { testAckAll(t, b) })
	t.Run("Capabilities", func(t *testing.T) { testCapabilities(t, b) })
	t.Run("Claims", func(t *testing.T) { testClaims(t, b) })
	t.Run("Owners", func(t *testing.T) { testOwners(t, b) })
	t.Run("Leases", func(t *testing.T) { testLeases(t, b) })
	t.Run("LeaseTakeoverAfterExpiry", func(t *testing.T) { testLeaseTakeover(t, b) })
	t.Run("LeaseDrop", func(t *testing.T) { testLeaseDrop(t, b) })
	t.Run("PubSub", func(t *testing.T) { testPubSub(t, b) })
	t.Run("PubSubAcrossInstances", func(t *testing.T) { testPubSubAcrossInstances(t, b) })
	t.Run("Registry", func(t *testing.T) { testRegistry(t, b) })
	t.Run("RegistryCompareAndSwap", func(t *testing.T) { testRegistryCAS(t, b) })
	t.Run("InvalidArguments", func(t *testing.T) { testInvalid(t, b) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, b) })
}

// fixture is one test's data set, clock and first store.
type fixture struct {
	clock *clocktest.Fake
	open  Opener
	s     store.Store
}

func newFixture(t *testing.T, b Backend) *fixture {
	t.Helper()
	open := b.Fresh(t)
	// A fixed instant with a sub-microsecond part, so the suite also checks
	// that records keep Received to the microsecond.
	c := clocktest.New(time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC))
	return &fixture{clock: c, open: open, s: open(c)}
}

// reopen closes f's store and opens the data set again.
func (f *fixture) reopen(t *testing.T) {
	t.Helper()
	if err := f.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	f.s = f.open(f.clock)
}

var ctx = context.Background()

func rec(platform, session, chat string, payload string) store.Record {
	return store.Record{Kind: 1, Platform: platform, SessionKey: session, ChatID: chat, Payload: []byte(payload)}
}

func mustAppend(t *testing.T, l store.Ledger, tenant string, recs ...store.Record) []uint64 {
	t.Helper()
	seqs, err := l.Append(ctx, tenant, recs)
	if err != nil {
		t.Fatalf("Append(%q): %v", tenant, err)
	}
	if len(seqs) != len(recs) {
		t.Fatalf("Append(%q) of %d records returned %d seqs", tenant, len(recs), len(seqs))
	}
	return seqs
}

func mustRead(t *testing.T, l store.Ledger, tenant string, after uint64, max int) []store.Record {
	t.Helper()
	rs, err := l.Read(ctx, tenant, after, max, 0)
	if err != nil {
		t.Fatalf("Read(%q, %d, %d): %v", tenant, after, max, err)
	}
	return rs
}

func seqsOf(rs []store.Record) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}

func wantSeqs(t *testing.T, what string, got, want []uint64) {
	t.Helper()
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%s: seqs %v, want %v", what, got, want)
	}
}

func mustStats(t *testing.T, l store.Ledger, tenant string, want store.Stats) {
	t.Helper()
	st, err := l.Stats(ctx, tenant)
	if err != nil {
		t.Fatalf("Stats(%q): %v", tenant, err)
	}
	if st != want {
		t.Fatalf("Stats(%q) = %+v, want %+v", tenant, st, want)
	}
}

func mustTenants(t *testing.T, l store.Ledger, want ...string) {
	t.Helper()
	got, err := l.Tenants(ctx)
	if err != nil {
		t.Fatalf("Tenants: %v", err)
	}
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("Tenants = %q, want %q", got, want)
	}
}

func testEpoch(t *testing.T, b Backend) {
	f := newFixture(t, b)
	e := f.s.Epoch()
	if e == "" {
		t.Fatal("Epoch is empty")
	}
	if other := newFixture(t, b).s.Epoch(); other == e {
		t.Fatalf("two fresh data sets share the epoch %q", e)
	}
	if b.Shared {
		if got := f.open(f.clock).Epoch(); got != e {
			t.Fatalf("second instance's epoch %q, first's %q", got, e)
		}
	}
	if b.Durable {
		f.reopen(t)
		if got := f.s.Epoch(); got != e {
			t.Fatalf("epoch after reopen %q, before %q", got, e)
		}
	}
}

func testAppendRead(t *testing.T, b Backend) {
	f := newFixture(t, b)
	l := f.s.Ledger()
	received := f.clock.Now().Add(-time.Minute)
	in := []store.Record{
		{Kind: 1, Platform: "discord", SessionKey: "agent:main:discord:group:1", ChatID: "1", Payload: []byte(`{"a":1}`), Received: received},
		{Kind: 3, Platform: "telegram", SessionKey: "", ChatID: "-100", Payload: []byte{0, 1, 2, 0xff}},
		{Kind: 1, Platform: "nexscope", Payload: nil},
	}
	in[0].Seq = 99 // ignored
	buf := in[0].Payload
	wantSeqs(t, "first Append", mustAppend(t, l, "t1", in...), []uint64{1, 2, 3})
	buf[0] = 'X' // the store copied the payload
	wantSeqs(t, "second Append", mustAppend(t, l, "t1", rec("discord", "s", "c", "four")), []uint64{4})

	got := mustRead(t, l, "t1", 0, 10)
	wantSeqs(t, "Read(0, 10)", seqsOf(got), []uint64{1, 2, 3, 4})
	now := f.clock.Now()
	wants := []store.Record{in[0], in[1], in[2], rec("discord", "s", "c", "four")}
	wants[0].Payload = []byte(`{"a":1}`)
	for i := range wants {
		wants[i].Seq = uint64(i + 1)
		if wants[i].Received.IsZero() {
			wants[i].Received = now
		}
		sameRecord(t, got[i], wants[i])
	}
	got[0].Payload[0] = 'Y' // the caller owns what Read returns
	sameRecord(t, mustRead(t, l, "t1", 0, 1)[0], wants[0])

	wantSeqs(t, "Read(2, 10)", seqsOf(mustRead(t, l, "t1", 2, 10)), []uint64{3, 4})
	wantSeqs(t, "Read(0, 2)", seqsOf(mustRead(t, l, "t1", 0, 2)), []uint64{1, 2})
	wantSeqs(t, "Read(4, 10)", seqsOf(mustRead(t, l, "t1", 4, 10)), nil)
	wantSeqs(t, "Read(MaxUint64, 10)", seqsOf(mustRead(t, l, "t1", math.MaxUint64, 10)), nil)
	wantSeqs(t, "Read of an unknown tenant", seqsOf(mustRead(t, l, "nobody", 0, 10)), nil)
	if seqs, err := l.Append(ctx, "t1", nil); err != nil || len(seqs) != 0 {
		t.Fatalf("Append of no records = %v, %v; want nothing", seqs, err)
	}
	mustStats(t, l, "t1", store.Stats{Entries: 4, Bytes: int64(len(`{"a":1}`) + 4 + 0 + 4)})
	mustStats(t, l, "nobody", store.Stats{})
	mustTenants(t, l, "t1")
}

// testReadBytes: Read's maxBytes stops it after the record that takes the
// payload bytes it returns to the bound or past it, never before the first
// record, and the count still bounds it.
func testReadBytes(t *testing.T, b Backend) {
	f := newFixture(t, b)
	l := f.s.Ledger()
	var recs []store.Record
	for range 100 {
		recs = append(recs, rec("discord", "s", "c", strings.Repeat("s", 10)))
	}
	for range 3 {
		recs = append(recs, rec("discord", "s", "c", strings.Repeat("L", 1000)))
	}
	mustAppend(t, l, "t1", recs...)
	seqs := func(from, to uint64) (s []uint64) {
		for seq := from; seq <= to; seq++ {
			s = append(s, seq)
		}
		return s
	}
	for _, c := range []struct {
		after       uint64
		max         int
		maxBytes    int64
		first, last uint64
	}{
		{0, 1000, 25, 1, 3}, // 30 bytes: past the bound
		{0, 1000, 30, 1, 3}, // at it
		{0, 1000, 31, 1, 4},
		{0, 1000, 700, 1, 70},    // past the redis script's page of 64
		{0, 50, 700, 1, 50},      // the count first
		{100, 1000, 1, 101, 101}, // one record larger than the bound
		{99, 1000, 1500, 100, 102},
		{0, 1000, 0, 1, 103}, // no bound
		{0, 1000, 4001, 1, 103},
	} {
		got, err := l.Read(ctx, "t1", c.after, c.max, c.maxBytes)
		if err != nil {
			t.Fatalf("Read(%d, %d, %d): %v", c.after, c.max, c.maxBytes, err)
		}
		wantSeqs(t, fmt.Sprintf("Read(%d, %d, %d)", c.after, c.max, c.maxBytes), seqsOf(got), seqs(c.first, c.last))
	}
}

// sameRecord compares a record read back with the one appended: Received
// is kept to the microsecond.
func sameRecord(t *testing.T, got, want store.Record) {
	t.Helper()
	wantReceived := time.UnixMicro(want.Received.UnixMicro())
	if got.Seq != want.Seq || got.Kind != want.Kind || got.Platform != want.Platform ||
		got.SessionKey != want.SessionKey || got.ChatID != want.ChatID ||
		!bytes.Equal(got.Payload, want.Payload) || !got.Received.Equal(wantReceived) {
		t.Fatalf("record %d read back as\n %+v (received %v)\nwant\n %+v (received %v)",
			want.Seq, got, got.Received, want, wantReceived)
	}
}

func testAck(t *testing.T, b Backend) {
	f := newFixture(t, b)
	l := f.s.Ledger()
	mustAppend(t, l, "t1", rec("p", "s", "c", "1"), rec("p", "s", "c", "22"), rec("p", "s", "c", "333"), rec("p", "s", "c", "4444"))
	ack := func(want int, seqs ...uint64) {
		t.Helper()
		n, err := l.Ack(ctx, "t1", seqs...)
		if err != nil {
			t.Fatalf("Ack(%v): %v", seqs, err)
		}
		if n != want {
			t.Fatalf("Ack(%v) removed %d, want %d", seqs, n, want)
		}
	}
	ack(1, 2)
	ack(0, 2) // again: idempotent
	ack(0, 0, 99, math.MaxUint64)
	ack(0)
	ack(2, 1, 2, 3, 3)
	wantSeqs(t, "Read after acks", seqsOf(mustRead(t, l, "t1", 0, 10)), []uint64{4})
	mustStats(t, l, "t1", store.Stats{Entries: 1, Bytes: 4})
	ack(1, 4)
	mustStats(t, l, "t1", store.Stats{})
	mustTenants(t, l)
	wantSeqs(t, "Append after acking everything", mustAppend(t, l, "t1", rec("p", "s", "c", "5")), []uint64{5})
	mustTenants(t, l, "t1")
}

func testTrim(t *testing.T, b Backend) {
	f := newFixture(t, b)
	l := f.s.Ledger()
	t0 := f.clock.Now()
	for i := range 10 {
		r := rec(fmt.Sprintf("p%d", i+1), "s", "c", "0123456789")
		r.Kind = uint8(i + 1)
		r.Received = t0.Add(time.Duration(i) * time.Minute)
		mustAppend(t, l, "t1", r)
	}
	f.clock.Advance(9 * time.Minute) // now is record 10's Received
	trim := func(bounds store.Bounds, want ...uint64) {
		t.Helper()
		dropped, err := l.Trim(ctx, "t1", bounds)
		if err != nil {
			t.Fatalf("Trim(%+v): %v", bounds, err)
		}
		var got []uint64
		for _, d := range dropped {
			got = append(got, d.Seq)
			i := d.Seq - 1
			want := store.Dropped{Seq: d.Seq, Kind: uint8(i + 1), Platform: fmt.Sprintf("p%d", i+1), Bytes: 10}
			wantReceived := time.UnixMicro(t0.Add(time.Duration(i) * time.Minute).UnixMicro())
			if d.Kind != want.Kind || d.Platform != want.Platform || d.Bytes != want.Bytes || !d.Received.Equal(wantReceived) {
				t.Fatalf("Trim(%+v) dropped %+v, want %+v received %v", bounds, d, want, wantReceived)
			}
		}
		wantSeqs(t, fmt.Sprintf("Trim(%+v)", bounds), got, want)
	}
	trim(store.Bounds{})
	trim(store.Bounds{MaxEntries: 10, MaxBytes: 100, MaxAge: 9 * time.Minute})
	trim(store.Bounds{MaxEntries: 8}, 1, 2)
	mustStats(t, l, "t1", store.Stats{Entries: 8, Bytes: 80})
	trim(store.Bounds{MaxBytes: 50}, 3, 4, 5)
	mustStats(t, l, "t1", store.Stats{Entries: 5, Bytes: 50})
	// Records 6..10 were received 4..0 minutes ago; beyond 3m30s: 6.
	trim(store.Bounds{MaxAge: 3*time.Minute + 30*time.Second}, 6)
	mustStats(t, l, "t1", store.Stats{Entries: 4, Bytes: 40})
	wantSeqs(t, "Read after trims", seqsOf(mustRead(t, l, "t1", 0, 10)), []uint64{7, 8, 9, 10})
	// A record alone larger than MaxBytes goes too: the whole log.
	trim(store.Bounds{MaxBytes: 5}, 7, 8, 9, 10)
	mustStats(t, l, "t1", store.Stats{})
	mustTenants(t, l)
	trim(store.Bounds{MaxEntries: 1})
	wantSeqs(t, "Append after trimming everything", mustAppend(t, l, "t1", rec("p", "s", "c", "x")), []uint64{11})
}

func testTenantIsolation(t *testing.T, b Backend) {
	f := newFixture(t, b)
	l := f.s.Ledger()
	for i := range 5 {
		mustAppend(t, l, "a", rec("p", "s", "c", fmt.Sprintf("a%d", i+1)))
	}
	wantSeqs(t, "tenant b's first Append", mustAppend(t, l, "b", rec("p", "s", "c", "b1"), rec("p", "s", "c", "b2")), []uint64{1, 2})
	for _, r := range mustRead(t, l, "b", 0, 10) {
		if want := fmt.Sprintf("b%d", r.Seq); string(r.Payload) != want {
			t.Fatalf("tenant b read payload %q at seq %d, want %q", r.Payload, r.Seq, want)
		}
	}
	if n, err := l.Ack(ctx, "b", 3, 4, 5); err != nil || n != 0 {
		t.Fatalf("tenant b acking seqs only tenant a has = %d, %v; want 0, nil", n, err)
	}
	mustStats(t, l, "a", store.Stats{Entries: 5, Bytes: 10})
	if d, err := l.Trim(ctx, "b", store.Bounds{MaxEntries: 1}); err != nil || len(d) != 1 || d[0].Seq != 1 {
		t.Fatalf("Trim of tenant b = %+v, %v; want its seq 1", d, err)
	}
	mustStats(t, l, "a", store.Stats{Entries: 5, Bytes: 10})
	// Names that share a prefix or a separator are still different tenants.
	mustAppend(t, l, "a:b", rec("p", "s", "c", "ab"))
	mustTenants(t, l, "a", "a:b", "b")
	if n, err := l.Ack(ctx, "b", 2); err != nil || n != 1 {
		t.Fatalf("Ack(b, 2) = %d, %v; want 1", n, err)
	}
	mustTenants(t, l, "a", "a:b")
	wantSeqs(t, "tenant a after the others' changes", seqsOf(mustRead(t, l, "a", 0, 10)), []uint64{1, 2, 3, 4, 5})
}

// Stage numbers records at once, in call order with Append, and its
// commit makes them readable like an Append's; on a durable backend they
// keep their numbers after a reopen and numbering goes on from them.
func testStage(t *testing.T, b Backend) {
	f := newFixture(t, b)
	l := f.s.Ledger()
	seqs, commit, err := l.Stage(ctx, "t1", []store.Record{rec("p", "s", "c", "1"), rec("p", "s", "c", "2")})
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	wantSeqs(t, "first Stage", seqs, []uint64{1, 2})
	later, commitLater, err := l.Stage(ctx, "t1", []store.Record{rec("p", "s", "c", "3")})
	if err != nil {
		t.Fatalf("second Stage: %v", err)
	}
	wantSeqs(t, "second Stage", later, []uint64{3})
	wantSeqs(t, "Append after two Stages", mustAppend(t, l, "t1", rec("p", "s", "c", "4")), []uint64{4})
	if err := commitLater(); err != nil {
		t.Fatalf("commit of the second Stage: %v", err)
	}
	if err := commit(); err != nil {
		t.Fatalf("commit of the first Stage: %v", err)
	}
	got := mustRead(t, l, "t1", 0, 10)
	wantSeqs(t, "Read after the commits", seqsOf(got), []uint64{1, 2, 3, 4})
	for _, r := range got {
		if want := strconv.FormatUint(r.Seq, 10); string(r.Payload) != want {
			t.Fatalf("record %d holds %q, want %q", r.Seq, r.Payload, want)
		}
	}
	mustStats(t, l, "t1", store.Stats{Entries: 4, Bytes: 4})
	if seqs, commit, err := l.Stage(ctx, "t1", nil); err != nil || len(seqs) != 0 || commit() != nil {
		t.Fatalf("Stage of no records = %v, %v; want nothing", seqs, err)
	}
	if !b.Durable {
		return
	}
	f.reopen(t)
	l = f.s.Ledger()
	wantSeqs(t, "Read after reopen", seqsOf(mustRead(t, l, "t1", 0, 10)), []uint64{1, 2, 3, 4})
	seqs, commit, err = l.Stage(ctx, "t1", []store.Record{rec("p", "s", "c", "5")})
	if err != nil || commit() != nil {
		t.Fatalf("Stage after reopen: %v", err)
	}
	wantSeqs(t, "Stage after reopen", seqs, []uint64{5})
}

// AckAll removes the given records of several tenants at once, and only
// those, with each tenant's stats kept.
func testAckAll(t *testing.T, b Backend) {
	f := newFixture(t, b)
	l := f.s.Ledger()
	mustAppend(t, l, "a", rec("p", "s", "c", "a1"), rec("p", "s", "c", "a2"), rec("p", "s", "c", "a3"))
	mustAppend(t, l, "b", rec("p", "s", "c", "b1"), rec("p", "s", "c", "b2"))
	mustAppend(t, l, "c", rec("p", "s", "c", "c1"))
	n, err := l.AckAll(ctx, map[string][]uint64{
		"a":      {1, 3, 99}, // 99 was never assigned
		"b":      {2},
		"nobody": {1},
		"c":      nil,
	})
	if err != nil || n != 3 {
		t.Fatalf("AckAll = %d, %v; want 3 removed", n, err)
	}
	wantSeqs(t, "a after AckAll", seqsOf(mustRead(t, l, "a", 0, 10)), []uint64{2})
	wantSeqs(t, "b after AckAll", seqsOf(mustRead(t, l, "b", 0, 10)), []uint64{1})
	wantSeqs(t, "c after AckAll", seqsOf(mustRead(t, l, "c", 0, 10)), []uint64{1})
	mustStats(t, l, "a", store.Stats{Entries: 1, Bytes: 2})
	mustStats(t, l, "b", store.Stats{Entries: 1, Bytes: 2})
	if n, err := l.AckAll(ctx, map[string][]uint64{"a": {1, 3}}); err != nil || n != 0 {
		t.Fatalf("AckAll of acknowledged records = %d, %v; want 0", n, err)
	}
	if n, err := l.AckAll(ctx, nil); err != nil || n != 0 {
		t.Fatalf("AckAll of nothing = %d, %v; want 0", n, err)
	}
	if n, err := l.AckAll(ctx, map[string][]uint64{"a": {2}, "b": {1}, "c": {1}}); err != nil || n != 3 {
		t.Fatalf("AckAll of the rest = %d, %v; want 3", n, err)
	}
	mustTenants(t, l)
}

func testSeqsSurviveReopen(t *testing.T, b Backend) {
	if !b.Durable {
		t.Skip("the backend keeps nothing across Close")
	}
	f := newFixture(t, b)
	l := f.s.Ledger()
	mustAppend(t, l, "t1", rec("p", "s", "c", "1"), rec("p", "s", "c", "2"), rec("p", "s", "c", "3"))
	mustAppend(t, l, "t2", rec("p", "s", "c", "1"))
	if _, err := l.Ack(ctx, "t1", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Ack(ctx, "t2", 1); err != nil {
		t.Fatal(err)
	}
	f.reopen(t)
	l = f.s.Ledger()
	mustTenants(t, l, "t1")
	wantSeqs(t, "Read after reopen", seqsOf(mustRead(t, l, "t1", 0, 10)), []uint64{1, 2})
	mustStats(t, l, "t1", store.Stats{Entries: 2, Bytes: 2})
	wantSeqs(t, "t1 Append after reopen", mustAppend(t, l, "t1", rec("p", "s", "c", "4")), []uint64{4})
	wantSeqs(t, "t2 Append after reopen", mustAppend(t, l, "t2", rec("p", "s", "c", "2")), []uint64{2})
}

func testSeqsAcrossInstances(t *testing.T, b Backend) {
	if !b.Shared {
		t.Skip("the backend has one instance per data set")
	}
	f := newFixture(t, b)
	a, c := f.s.Ledger(), f.open(f.clock).Ledger()
	var want []uint64
	for i := range 6 {
		l := a
		if i%2 == 1 {
			l = c
		}
		seqs := mustAppend(t, l, "t1", rec("p", "s", "c", "x"), rec("p", "s", "c", "y"))
		want = append(want, uint64(2*i+1), uint64(2*i+2))
		wantSeqs(t, fmt.Sprintf("Append %d", i), seqs, want[len(want)-2:])
	}
	wantSeqs(t, "Read on the other instance", seqsOf(mustRead(t, c, "t1", 0, 100)), want)
	// The generation a record was stored for reaches the other instances.
	gen := rec("p", "s", "c", "g")
	gen.Generation = f.clock.Now().UnixMicro()
	seq := mustAppend(t, a, "t1", gen)[0]
	if got := mustRead(t, c, "t1", seq-1, 1); len(got) != 1 || got[0].Generation != gen.Generation {
		t.Fatalf("record of generation %d read on the other instance as %+v", gen.Generation, got)
	}
	if n, err := c.Ack(ctx, "t1", seq); err != nil || n != 1 {
		t.Fatalf("Ack of the generation's record = %d, %v; want 1", n, err)
	}
	if n, err := c.Ack(ctx, "t1", 1, 2); err != nil || n != 2 {
		t.Fatalf("Ack on the second instance = %d, %v; want 2", n, err)
	}
	mustStats(t, a, "t1", store.Stats{Entries: 10, Bytes: 10})
}

func testConcurrentAppends(t *testing.T, b Backend) {
	f := newFixture(t, b)
	ledgers := []store.Ledger{f.s.Ledger()}
	if b.Shared {
		ledgers = append(ledgers, f.open(f.clock).Ledger())
	}
	const writers, appends = 8, 25
	var mu sync.Mutex
	payloadOf := make(map[uint64]string)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			l := ledgers[w%len(ledgers)]
			var last uint64
			for i := range appends {
				n := i%3 + 1
				recs := make([]store.Record, n)
				for j := range recs {
					recs[j] = rec("p", "s", "c", fmt.Sprintf("w%d-%d-%d", w, i, j))
				}
				seqs, err := l.Append(ctx, "t1", recs)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for j, seq := range seqs {
					if seq <= last {
						mu.Unlock()
						errs <- fmt.Errorf("writer %d got seq %d after %d", w, seq, last)
						return
					}
					last = seq
					if _, dup := payloadOf[seq]; dup {
						mu.Unlock()
						errs <- fmt.Errorf("seq %d assigned twice", seq)
						return
					}
					payloadOf[seq] = string(recs[j].Payload)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := uint64(len(payloadOf))
	var all []store.Record
	for {
		page := mustRead(t, ledgers[0], "t1", uint64(len(all)), 17)
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
	}
	if uint64(len(all)) != total {
		t.Fatalf("Read returned %d records, appended %d", len(all), total)
	}
	for i, r := range all {
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d: a gap or reordering", i, r.Seq)
		}
		if string(r.Payload) != payloadOf[r.Seq] {
			t.Fatalf("seq %d holds %q, Append returned it for %q", r.Seq, r.Payload, payloadOf[r.Seq])
		}
	}
}

func testCapabilities(t *testing.T, b Backend) {
	f := newFixture(t, b)
	c := f.s.Capabilities()
	get := func(key, want string, wantOK bool) {
		t.Helper()
		v, ok, err := c.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get(%q): %v", key, err)
		}
		if ok != wantOK || string(v) != want {
			t.Fatalf("Get(%q) = %q, %v; want %q, %v", key, v, ok, want, wantOK)
		}
	}
	put := func(key, value string, expires time.Time) {
		t.Helper()
		if err := c.Put(ctx, key, []byte(value), expires); err != nil {
			t.Fatalf("Put(%q): %v", key, err)
		}
	}
	put("t1/s/token", "secret-1", f.clock.Now().Add(15*time.Minute))
	get("t1/s/token", "secret-1", true)
	get("t2/s/token", "", false)
	f.clock.Advance(15*time.Minute - time.Nanosecond)
	get("t1/s/token", "secret-1", true)
	f.clock.Advance(time.Nanosecond)
	get("t1/s/token", "", false) // expired at its expiry instant
	put("t1/s/token", "secret-2", f.clock.Now().Add(time.Minute))
	get("t1/s/token", "secret-2", true)
	if err := c.Delete(ctx, "t1/s/token"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	get("t1/s/token", "", false)
	if err := c.Delete(ctx, "t1/s/token"); err != nil {
		t.Fatalf("Delete of an absent key: %v", err)
	}
	put("past", "v", f.clock.Now().Add(-time.Second))
	get("past", "", false)
	put("bin", "\x00\xff", f.clock.Now().Add(time.Minute))
	get("bin", "\x00\xff", true)

	// PutUnlessLater keeps a live value of a later generation (its JSON
	// field c), and replaces any other, as Put does with no generation.
	for _, step := range []struct {
		value string
		gen   int64
		want  string
	}{
		{`{"v":"b","c":1767225301000000}`, 1767225301000000, `{"v":"b","c":1767225301000000}`},
		{`{"v":"a","c":1767225300000000}`, 1767225300000000, `{"v":"b","c":1767225301000000}`},
		{`{"v":"c","c":1767225301000000}`, 1767225301000000, `{"v":"c","c":1767225301000000}`},
		{`{"v":"d","c":1767225302000000}`, 1767225302000000, `{"v":"d","c":1767225302000000}`},
		{`{"v":"e"}`, 0, `{"v":"e"}`},
		{`{"v":"f","c":1}`, 1, `{"v":"f","c":1}`},
		{"\x00", 0, "\x00"},
		{`{"v":"g","c":1}`, 1, `{"v":"g","c":1}`},
	} {
		if stored, err := c.PutUnlessLater(ctx, "gen", []byte(step.value), step.gen, f.clock.Now().Add(time.Minute)); err != nil || stored != (step.value == step.want) {
			t.Fatalf("PutUnlessLater(%s) = %v, %v; want stored %v", step.value, stored, err, step.value == step.want)
		}
		get("gen", step.want, true)
	}
	// A c no version writes is read alike by every backend: one that is
	// not an integer (a float, a string, a bool) keeps its value, as of a
	// later generation; a value that is not JSON (a hex, an infinity or a
	// number such as 5. or -.5 in it, which strtod takes; a control
	// character in a string or a NUL after it, which cjson takes) or whose
	// member is not "c" has none. A lone surrogate escape is JSON (read as
	// U+FFFD), and a '.' or a backslash in a string is no number.
	for _, step := range []struct {
		stored string
		kept   bool
	}{
		{`{"v":"h","c":1.5}`, true},
		{`{"v":"h","c":1e20}`, true},
		{`{"v":"h","c":1e400}`, true},
		{`{"v":"h","c":"0x10"}`, true},
		{`{"v":"h","c":false}`, true},
		{`{"v":"h","c":0x10}`, false},
		{`{"v":"h","c":Infinity}`, false},
		{`{"v":"h","C":9}`, false},
		{`{"v":"h","c":null}`, false},
		{`{"v":"h","c":1.0}`, false},
		{`{"v":"h","c":5.}`, false},
		{`{"v":"h","c":-.5}`, false},
		{`{"v":"h","x":[5.e1],"c":9}`, false},
		{`{"v":"h","c":9,"x":-.5}`, false},
		{`{"v":"h\ud800","c":9}`, true},
		{`{"v":"h\udc00\ud800x","c":9}`, true},
		{`{"v":"h\ud83d\ude00","c":9}`, true},
		{`{"v":"h\\ud800 5. -.5 \".\"","c":9}`, true},
		{`{"v":"h\ud8","c":9}`, false},
		{"{\"v\":\"h\t\",\"c\":9}", false},
		{"{\"v\":\"h\",\"c\":9}\x00", false},
		{"{\"v\":\"h\x7f\",\n\"c\":\t9}\r\n", true},
	} {
		put("gen", step.stored, f.clock.Now().Add(time.Minute))
		if stored, err := c.PutUnlessLater(ctx, "gen", []byte(`{"v":"i","c":2}`), 2, f.clock.Now().Add(time.Minute)); err != nil || stored == step.kept {
			t.Fatalf("PutUnlessLater over %s = %v, %v; want stored %v", step.stored, stored, err, !step.kept)
		}
		if v, _, _ := c.Get(ctx, "gen"); (string(v) == step.stored) != step.kept {
			t.Errorf("PutUnlessLater over %s: %s stored; want kept %v", step.stored, v, step.kept)
		}
	}
	// An expired value is replaced whatever its generation.
	if _, err := c.PutUnlessLater(ctx, "gen", []byte(`{"c":9}`), 9, f.clock.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	if stored, err := c.PutUnlessLater(ctx, "gen", []byte(`{"c":2}`), 2, f.clock.Now().Add(time.Second)); err != nil || !stored {
		t.Fatalf("PutUnlessLater over an expired value = %v, %v", stored, err)
	}
	get("gen", `{"c":2}`, true)
}

func testClaims(t *testing.T, b Backend) {
	f := newFixture(t, b)
	c := f.s.Claims()
	ttl := claimTTL
	claim := func(c store.Claims, key string, ttl time.Duration, want bool) {
		t.Helper()
		took, err := c.Claim(ctx, key, f.clock.Now().Add(ttl))
		if err != nil || took != want {
			t.Fatalf("Claim(%q) = %v, %v; want %v", key, took, err, want)
		}
	}
	other := c
	if b.Shared {
		other = f.open(f.clock).Claims() // another instance
	}
	claim(c, "ev/1", ttl, true)
	claim(c, "ev/1", ttl, false)
	claim(other, "ev/1", ttl, false)
	claim(c, "ev/2", time.Minute, true) // keys are independent
	f.lapse(t, b, c, "ev/1")
	claim(c, "ev/1", time.Minute, true) // expired at its expiry instant
	if err := c.Hold(ctx, "ev/1", f.clock.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Hold: %v", err)
	}
	f.clock.Advance(30 * time.Minute)
	claim(c, "ev/1", time.Minute, false)
	if err := c.Release(ctx, "ev/1", f.clock.Now().Add(30*time.Minute)); err != nil { // as held
		t.Fatalf("Release: %v", err)
	}
	claim(c, "ev/1", time.Minute, true)
	if err := c.Release(ctx, "never", f.clock.Now()); err != nil {
		t.Fatalf("Release of an absent claim: %v", err)
	}
	// A caller whose claim lapsed releases it after another took the key:
	// that one stays.
	lapsed := f.clock.Now().Add(ttl)
	claim(c, "ev/3", ttl, true)
	f.lapse(t, b, c, "ev/3")
	claim(other, "ev/3", time.Minute, true)
	if err := c.Release(ctx, "ev/3", lapsed); err != nil {
		t.Fatalf("Release of a lapsed claim: %v", err)
	}
	claim(c, "ev/3", time.Minute, false) // the other's claim holds
	if err := other.Release(ctx, "ev/3", f.clock.Now().Add(time.Minute)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	claim(c, "ev/3", time.Minute, true)
	// A key of MaxNameBytes is a claim key like any other.
	longest := strings.Repeat("k", store.MaxNameBytes)
	claim(c, longest, time.Minute, true)
	if err := c.Hold(ctx, longest, f.clock.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Hold of a %d-byte key: %v", store.MaxNameBytes, err)
	}
	if err := c.Release(ctx, longest, f.clock.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Release of a %d-byte key: %v", store.MaxNameBytes, err)
	}
	// A claim is no capability: the vault's keys never see it.
	if _, ok, err := f.s.Capabilities().Get(ctx, "ev/1"); ok || err != nil {
		t.Fatalf("capability ev/1 = %v, %v; a claim leaked into the capabilities", ok, err)
	}
	testRenew(t, f, b)
}

// claimTTL is the TTL of the suite's claims that must lapse.
const claimTTL = time.Minute

// lapse lets key's claim, taken for claimTTL, run out: by the injected
// clock, which holds it until its expiry instant, or, where claims expire
// by the server's clock, by b.Lapse.
func (f *fixture) lapse(t *testing.T, b Backend, c store.Claims, key string) {
	t.Helper()
	free := func() bool { // a probe: it holds nothing
		t.Helper()
		took, err := c.Claim(ctx, key, f.clock.Now().Add(-time.Nanosecond))
		if err != nil {
			t.Fatalf("probe of claim %q: %v", key, err)
		}
		return took
	}
	if b.ServerClock {
		b.Lapse(t, key)
		if !free() {
			t.Fatalf("claim %q holds once ended on the server", key)
		}
		return
	}
	f.clock.Advance(claimTTL - time.Nanosecond)
	if free() {
		t.Fatalf("claim %q lapsed before its expiry", key)
	}
	f.clock.Advance(time.Nanosecond)
}

// testRenew: Renew extends the caller's own claim, takes one that lapsed or
// is absent, and leaves another caller's live claim as it is.
func testRenew(t *testing.T, f *fixture, b Backend) {
	c, other := f.s.Claims(), f.s.Claims()
	if b.Shared {
		other = f.open(f.clock).Claims()
	}
	renew := func(c store.Claims, key string, held, expires time.Time, want bool) {
		t.Helper()
		renewed, err := c.Renew(ctx, key, held, expires)
		if err != nil || renewed != want {
			t.Fatalf("Renew(%q) = %v, %v; want %v", key, renewed, err, want)
		}
	}
	took := func(c store.Claims, key string, want bool) {
		t.Helper()
		if got, err := c.Claim(ctx, key, f.clock.Now().Add(time.Minute)); err != nil || got != want {
			t.Fatalf("Claim(%q) = %v, %v; want %v", key, got, err, want)
		}
	}
	held := f.clock.Now().Add(time.Minute)
	if ok, err := c.Claim(ctx, "rn/1", held); !ok || err != nil {
		t.Fatalf("Claim(rn/1) = %v, %v", ok, err)
	}
	renew(c, "rn/1", held, f.clock.Now().Add(time.Hour), true)
	f.clock.Advance(30 * time.Minute) // past held, within the renewal
	took(other, "rn/1", false)
	// Another caller, whose claim it is not (held earlier), renews nothing.
	renew(other, "rn/1", f.clock.Now().Add(-time.Minute), f.clock.Now().Add(2*time.Hour), false)
	if err := c.Release(ctx, "rn/1", f.clock.Now().Add(30*time.Minute)); err != nil { // as renewed
		t.Fatalf("Release: %v", err)
	}
	took(other, "rn/1", true)
	// A claim that lapsed and another caller took stays that caller's.
	ttl := claimTTL
	lapsed := f.clock.Now().Add(ttl)
	if ok, err := c.Claim(ctx, "rn/2", lapsed); !ok || err != nil {
		t.Fatalf("Claim(rn/2) = %v, %v", ok, err)
	}
	f.lapse(t, b, c, "rn/2")
	if ok, err := other.Claim(ctx, "rn/2", f.clock.Now().Add(ttl)); !ok || err != nil {
		t.Fatalf("Claim(rn/2) by another = %v, %v", ok, err)
	}
	renew(c, "rn/2", lapsed, f.clock.Now().Add(time.Hour), false)
	f.lapse(t, b, c, "rn/2") // the other's claim holds until then, not renewed
	// A lapsed claim nobody took, or an absent one, is taken again.
	renew(c, "rn/2", lapsed, f.clock.Now().Add(time.Hour), true)
	took(other, "rn/2", false)
	renew(c, "rn/3", f.clock.Now(), f.clock.Now().Add(time.Hour), true)
	took(other, "rn/3", false)
}

func testOwners(t *testing.T, b Backend) {
	f := newFixture(t, b)
	w := f.s.Owners()
	get := func(tenant, key string, want store.Owner, wantOK bool) {
		t.Helper()
		o, ok, err := w.Get(ctx, tenant, key)
		if err != nil {
			t.Fatalf("Get(%q, %q): %v", tenant, key, err)
		}
		if ok != wantOK || o != want {
			t.Fatalf("Get(%q, %q) = %+v, %v; want %+v, %v", tenant, key, o, ok, want, wantOK)
		}
	}
	set := func(tenant, key string, o store.Owner, ttl time.Duration) {
		t.Helper()
		if err := w.Set(ctx, tenant, key, o, ttl); err != nil {
			t.Fatalf("Set(%q, %q): %v", tenant, key, err)
		}
	}
	o1 := store.Owner{Instance: "i1", Conn: "c1", ChatID: "chat-1"}
	o2 := store.Owner{Instance: "i2", Conn: "c2"}
	set("ab", "c", o1, 10*time.Minute)
	get("ab", "c", o1, true)
	get("a", "bc", store.Owner{}, false) // the same concatenation, another pair
	get("other", "c", store.Owner{}, false)
	f.clock.Advance(10*time.Minute - time.Nanosecond)
	get("ab", "c", o1, true)
	f.clock.Advance(time.Nanosecond)
	get("ab", "c", store.Owner{}, false)
	set("ab", "c", o1, time.Minute)
	set("ab", "c", o2, time.Minute)
	get("ab", "c", o2, true)
	if err := w.Delete(ctx, "ab", "c"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	get("ab", "c", store.Owner{}, false)
	if err := w.Delete(ctx, "ab", "c"); err != nil {
		t.Fatalf("Delete of an absent owner: %v", err)
	}
}

// leaseTTLs are the TTLs the lease tests use: long never runs out during a
// test, short is waited out (server clock) or advanced past.
func leaseTTLs(b Backend) (long, short time.Duration) {
	if b.ServerClock {
		return time.Minute, 100 * time.Millisecond
	}
	return time.Minute, time.Second
}

// expire lets a lease taken with the short TTL run out.
func (f *fixture) expire(t *testing.T, b Backend, name string) {
	t.Helper()
	_, short := leaseTTLs(b)
	if !b.ServerClock {
		f.clock.Advance(short)
		return
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		_, held, err := f.s.Leases().Holder(ctx, name)
		if err != nil {
			t.Fatalf("Holder(%q): %v", name, err)
		}
		if !held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for lease %q (TTL %v) to expire on the server", waitTimeout, name, short)
		}
		time.Sleep(short / 10) // the server's clock is the only thing to wait on
	}
}

func testLeases(t *testing.T, b Backend) {
	f := newFixture(t, b)
	ls := f.s.Leases()
	long, _ := leaseTTLs(b)
	l1, ok, err := ls.Acquire(ctx, "leader", "h1", long)
	if err != nil || !ok {
		t.Fatalf("Acquire of a free lease = %+v, %v, %v; want acquired", l1, ok, err)
	}
	if l1.Holder != "h1" || l1.Token == 0 || !l1.Expires.After(f.clock.Now()) {
		t.Fatalf("Acquire returned %+v", l1)
	}
	if !b.ServerClock && !l1.Expires.Equal(f.clock.Now().Add(long)) {
		t.Fatalf("lease expires %v, want now + %v", l1.Expires, long)
	}
	cur, ok, err := ls.Acquire(ctx, "leader", "h2", long)
	if err != nil || ok || cur.Holder != "h1" || cur.Token != l1.Token {
		t.Fatalf("Acquire of a held lease by another = %+v, %v, %v; want h1's lease, not acquired", cur, ok, err)
	}
	if h, ok, err := ls.Holder(ctx, "leader"); err != nil || !ok || h.Holder != "h1" || h.Token != l1.Token {
		t.Fatalf("Holder = %+v, %v, %v; want h1", h, ok, err)
	}
	again, ok, err := ls.Acquire(ctx, "leader", "h1", long)
	if err != nil || !ok || again.Token != l1.Token {
		t.Fatalf("Acquire by the holder = %+v, %v, %v; want acquired with the same token %d", again, ok, err, l1.Token)
	}
	f.clock.Advance(time.Second)
	renewed, err := ls.Renew(ctx, "leader", l1, long)
	if err != nil || renewed.Token != l1.Token || renewed.Holder != "h1" {
		t.Fatalf("Renew by the holder = %+v, %v", renewed, err)
	}
	if !b.ServerClock && !renewed.Expires.Equal(f.clock.Now().Add(long)) {
		t.Fatalf("renewed lease expires %v, want now + %v", renewed.Expires, long)
	}
	for _, bad := range []store.Lease{{Holder: "h2", Token: l1.Token}, {Holder: "h1", Token: l1.Token + 1}} {
		if _, err := ls.Renew(ctx, "leader", bad, long); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("Renew with %+v: err %v, want ErrNotHeld", bad, err)
		}
		if err := ls.Release(ctx, "leader", bad); !errors.Is(err, store.ErrNotHeld) {
			t.Fatalf("Release with %+v: err %v, want ErrNotHeld", bad, err)
		}
	}
	if h, ok, _ := ls.Holder(ctx, "leader"); !ok || h.Holder != "h1" {
		t.Fatalf("after refused renewals and releases the holder is %+v, %v; want h1", h, ok)
	}
	if _, ok, err := ls.Holder(ctx, "other"); err != nil || ok {
		t.Fatalf("Holder of an unused lease = %v, %v; want free", ok, err)
	}
	if err := ls.Release(ctx, "leader", renewed); err != nil {
		t.Fatalf("Release by the holder: %v", err)
	}
	if h, ok, err := ls.Holder(ctx, "leader"); err != nil || ok {
		t.Fatalf("Holder after Release = %+v, %v, %v; want free", h, ok, err)
	}
	if err := ls.Release(ctx, "leader", renewed); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("second Release: err %v, want ErrNotHeld", err)
	}
	l2, ok, err := ls.Acquire(ctx, "leader", "h2", long)
	if err != nil || !ok || l2.Token <= l1.Token {
		t.Fatalf("Acquire after Release = %+v, %v, %v; want acquired with a token above %d", l2, ok, err, l1.Token)
	}
	l3, ok, err := ls.Acquire(ctx, "other", "h1", long)
	if err != nil || !ok {
		t.Fatalf("Acquire of another name = %+v, %v, %v", l3, ok, err)
	}
}

// testLeaseDrop: Drop forgets a free lease's record, its token included (a
// later Acquire starts the tokens over), and leaves a held one alone.
func testLeaseDrop(t *testing.T, b Backend) {
	f := newFixture(t, b)
	ls := f.s.Leases()
	long, _ := leaseTTLs(b)
	if err := ls.Drop(ctx, "gen@1"); err != nil {
		t.Fatalf("Drop of an unused lease: %v", err)
	}
	var l store.Lease
	for range 2 {
		var err error
		if l, _, err = ls.Acquire(ctx, "gen@1", "h1", long); err != nil {
			t.Fatal(err)
		}
		if err := ls.Drop(ctx, "gen@1"); err != nil {
			t.Fatalf("Drop of a held lease: %v", err)
		}
		if h, ok, err := ls.Holder(ctx, "gen@1"); err != nil || !ok || h.Token != l.Token {
			t.Fatalf("Holder after a Drop of the held lease = %+v, %v, %v; want it held with token %d", h, ok, err, l.Token)
		}
		if err := ls.Release(ctx, "gen@1", l); err != nil {
			t.Fatal(err)
		}
	}
	if l.Token < 2 {
		t.Fatalf("second tenure's token %d, want above the first's", l.Token)
	}
	if err := ls.Drop(ctx, "gen@1"); err != nil {
		t.Fatalf("Drop of a released lease: %v", err)
	}
	if l, ok, err := ls.Acquire(ctx, "gen@1", "h2", long); err != nil || !ok || l.Token != 1 {
		t.Fatalf("Acquire after Drop = %+v, %v, %v; want acquired with token 1 (the record forgotten)", l, ok, err)
	}
}

func testLeaseTakeover(t *testing.T, b Backend) {
	f := newFixture(t, b)
	ls := f.s.Leases()
	long, short := leaseTTLs(b)
	old, ok, err := ls.Acquire(ctx, "job", "h1", short)
	if err != nil || !ok {
		t.Fatalf("Acquire = %+v, %v, %v", old, ok, err)
	}
	f.expire(t, b, "job")
	if h, ok, err := ls.Holder(ctx, "job"); err != nil || ok {
		t.Fatalf("Holder after expiry = %+v, %v, %v; want free", h, ok, err)
	}
	if _, err := ls.Renew(ctx, "job", old, long); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Renew of an expired lease: err %v, want ErrNotHeld", err)
	}
	l, ok, err := ls.Acquire(ctx, "job", "h2", long)
	if err != nil || !ok || l.Holder != "h2" || l.Token <= old.Token {
		t.Fatalf("takeover = %+v, %v, %v; want h2 with a token above %d", l, ok, err, old.Token)
	}
	if err := ls.Release(ctx, "job", old); !errors.Is(err, store.ErrNotHeld) {
		t.Fatalf("Release by the expired holder: err %v, want ErrNotHeld", err)
	}
	if h, ok, _ := ls.Holder(ctx, "job"); !ok || h.Holder != "h2" || h.Token != l.Token {
		t.Fatalf("after the stale release the holder is %+v, %v; want h2", h, ok)
	}
	if b.Durable {
		f.reopen(t)
		next, ok, err := f.s.Leases().Acquire(ctx, "job", "h2", long)
		if err != nil || !ok || next.Token != l.Token {
			t.Fatalf("Acquire by the holder after reopen = %+v, %v, %v; want token %d kept", next, ok, err, l.Token)
		}
	}
}

// recv returns the next message on ch, failing after waitTimeout.
func recv(t *testing.T, ch <-chan []byte, what string) []byte {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatalf("%s: subscription closed", what)
		}
		return m
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
	}
	return nil
}

// closed waits for ch to be closed, discarding messages.
func closed(t *testing.T, ch <-chan []byte, what string) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s to close its channel", waitTimeout, what)
		}
	}
}

func subscribe(t *testing.T, ps store.PubSub, c context.Context, channel string) (<-chan []byte, func()) {
	t.Helper()
	ch, cancel, err := ps.Subscribe(c, channel)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", channel, err)
	}
	t.Cleanup(cancel)
	return ch, cancel
}

func publish(t *testing.T, ps store.PubSub, channel, msg string) {
	t.Helper()
	if err := ps.Publish(ctx, channel, []byte(msg)); err != nil {
		t.Fatalf("Publish(%q): %v", channel, err)
	}
}

func testPubSub(t *testing.T, b Backend) {
	f := newFixture(t, b)
	ps := f.s.PubSub()
	publish(t, ps, "c", "before anyone listens") // lost, not an error
	s1, cancel1 := subscribe(t, ps, ctx, "c")
	s2, _ := subscribe(t, ps, ctx, "c")
	other, _ := subscribe(t, ps, ctx, "other")
	publish(t, ps, "c", "hello")
	for i, s := range []<-chan []byte{s1, s2} {
		if m := recv(t, s, fmt.Sprintf("subscriber %d's first message", i+1)); string(m) != "hello" {
			t.Fatalf("subscriber %d got %q, want hello", i+1, m)
		}
	}
	publish(t, ps, "other", "elsewhere")
	publish(t, ps, "c", "second")
	for i, s := range []<-chan []byte{s1, s2} {
		if m := recv(t, s, "the second message on c"); string(m) != "second" {
			t.Fatalf("subscriber %d of c got %q, want second (and nothing of channel other)", i+1, m)
		}
	}
	if m := recv(t, other, "the message on other"); string(m) != "elsewhere" {
		t.Fatalf("subscriber of other got %q", m)
	}
	cancel1()
	closed(t, s1, "a cancelled subscription")
	cancel1() // idempotent
	publish(t, ps, "c", "third")
	if m := recv(t, s2, "the third message"); string(m) != "third" {
		t.Fatalf("remaining subscriber got %q, want third", m)
	}

	cctx, stop := context.WithCancel(ctx)
	s3, _ := subscribe(t, ps, cctx, "c")
	stop()
	closed(t, s3, "a subscription whose context ended")

	s4, _ := subscribe(t, ps, ctx, "c")
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	closed(t, s4, "a subscription of a closed store")
}

func testPubSubAcrossInstances(t *testing.T, b Backend) {
	if !b.Shared {
		t.Skip("the backend has one instance per data set")
	}
	f := newFixture(t, b)
	second := f.open(f.clock)
	ch, _ := subscribe(t, second.PubSub(), ctx, "wake")
	publish(t, f.s.PubSub(), "wake", "tenant t1")
	if m := recv(t, ch, "a message from the other instance"); string(m) != "tenant t1" {
		t.Fatalf("got %q", m)
	}
}

func testRegistry(t *testing.T, b Backend) {
	f := newFixture(t, b)
	r := f.s.Registry()
	put := func(ns, key, value string, wantRev uint64) {
		t.Helper()
		rev, err := r.Put(ctx, ns, key, []byte(value))
		if err != nil || rev != wantRev {
			t.Fatalf("Put(%q, %q) = %d, %v; want revision %d", ns, key, rev, err, wantRev)
		}
	}
	list := func(ns string, wantRev uint64, want ...store.Entry) {
		t.Helper()
		got, rev, err := r.List(ctx, ns)
		if err != nil {
			t.Fatalf("List(%q): %v", ns, err)
		}
		if rev != wantRev || len(got) != len(want) {
			t.Fatalf("List(%q) = %+v at revision %d; want %+v at %d", ns, got, rev, want, wantRev)
		}
		if rev, err := r.Revision(ctx, ns); err != nil || rev != wantRev {
			t.Fatalf("Revision(%q) = %d, %v; want %d", ns, rev, err, wantRev)
		}
		for i := range want {
			if got[i].Key != want[i].Key || got[i].Rev != want[i].Rev || !bytes.Equal(got[i].Value, want[i].Value) {
				t.Fatalf("List(%q)[%d] = %+v, want %+v", ns, i, got[i], want[i])
			}
		}
	}
	list("tenants", 0)
	put("tenants", "t2", "two", 1)
	put("tenants", "t1", "one", 2)
	put("tenants", "t1", "ONE\x00", 3)
	put("gateways", "t1", "elsewhere", 1)
	e, ok, err := r.Get(ctx, "tenants", "t1")
	if err != nil || !ok || string(e.Value) != "ONE\x00" || e.Rev != 3 || e.Key != "t1" {
		t.Fatalf("Get = %+v, %v, %v", e, ok, err)
	}
	if _, ok, err := r.Get(ctx, "tenants", "t3"); err != nil || ok {
		t.Fatalf("Get of an absent key = %v, %v", ok, err)
	}
	list("tenants", 3, store.Entry{Key: "t1", Value: []byte("ONE\x00"), Rev: 3}, store.Entry{Key: "t2", Value: []byte("two"), Rev: 1})
	if del, err := r.Delete(ctx, "tenants", "t2"); err != nil || !del {
		t.Fatalf("Delete = %v, %v; want deleted", del, err)
	}
	list("tenants", 4, store.Entry{Key: "t1", Value: []byte("ONE\x00"), Rev: 3})
	if del, err := r.Delete(ctx, "tenants", "t2"); err != nil || del {
		t.Fatalf("Delete of an absent key = %v, %v; want not deleted", del, err)
	}
	list("tenants", 4, store.Entry{Key: "t1", Value: []byte("ONE\x00"), Rev: 3})
	list("gateways", 1, store.Entry{Key: "t1", Value: []byte("elsewhere"), Rev: 1})
	if b.Durable {
		f.reopen(t)
		r = f.s.Registry()
		list("tenants", 4, store.Entry{Key: "t1", Value: []byte("ONE\x00"), Rev: 3})
		put("tenants", "t3", "three", 5)
	}
}

// testRegistryCAS: CompareAndSwap creates, replaces and removes an entry
// only from the value it names, bumping the revision when it does; of
// concurrent creates of one key (on two instances when the backend is
// shared) exactly one succeeds, and its value is the one stored.
func testRegistryCAS(t *testing.T, b Backend) {
	f := newFixture(t, b)
	r := f.s.Registry()
	cas := func(old, value string, want bool, wantRev uint64) {
		t.Helper()
		var o, v []byte
		if old != "" {
			o = []byte(old)
		}
		if value != "" {
			v = []byte(value)
		}
		ok, err := r.CompareAndSwap(ctx, "claims", "k", o, v)
		if err != nil || ok != want {
			t.Fatalf("CompareAndSwap(%q -> %q) = %v, %v; want %v", old, value, ok, err, want)
		}
		got, stored, err := r.Get(ctx, "claims", "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, rev, _ := r.List(ctx, "claims"); rev != wantRev {
			t.Fatalf("after CompareAndSwap(%q -> %q): revision %d, want %d", old, value, rev, wantRev)
		}
		if want && value == "" && stored || want && value != "" && (!stored || string(got.Value) != value || got.Rev != wantRev) {
			t.Fatalf("after CompareAndSwap(%q -> %q): entry %+v (stored %v)", old, value, got, stored)
		}
	}
	cas("", "one", true, 1)  // create
	cas("", "two", false, 1) // exists
	cas("uno", "two", false, 1)
	cas("one", "two", true, 2)
	cas("two", "", true, 3)   // remove
	cas("two", "", false, 3)  // gone
	cas("", "three", true, 4) // created again
	if _, err := r.Put(ctx, "claims", "k", []byte("put")); err != nil {
		t.Fatal(err)
	}
	cas("put", "four", true, 6) // a Put's value is compared like a swap's

	// An entry with an empty value is present: old nil does not match it,
	// an empty old does.
	if _, err := r.Put(ctx, "claims", "empty", []byte{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.CompareAndSwap(ctx, "claims", "empty", nil, []byte("x")); err != nil || ok {
		t.Fatalf("CompareAndSwap(absent -> x) of an empty entry = %v, %v; want not swapped", ok, err)
	}
	if ok, err := r.CompareAndSwap(ctx, "claims", "empty", []byte{}, []byte("x")); err != nil || !ok {
		t.Fatalf("CompareAndSwap(empty -> x) = %v, %v; want swapped", ok, err)
	}

	// Concurrent creates of one key: one winner, on one or two instances.
	stores := []store.Registry{r, r}
	if b.Shared {
		stores[1] = f.open(f.clock).Registry()
	}
	const n = 16
	won := make([]bool, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			ok, err := stores[i%2].CompareAndSwap(ctx, "race", "k", nil, []byte(strconv.Itoa(i)))
			if err != nil {
				t.Errorf("racer %d: %v", i, err)
			}
			won[i] = ok
		}()
	}
	start.Done()
	done.Wait()
	winners := 0
	for i, ok := range won {
		if ok {
			winners++
			if e, _, _ := r.Get(ctx, "race", "k"); string(e.Value) != strconv.Itoa(i) {
				t.Fatalf("racer %d won but %q is stored", i, e.Value)
			}
		}
	}
	if winners != 1 {
		t.Fatalf("%d of %d concurrent creates of one key succeeded, want 1", winners, n)
	}
}

func testInvalid(t *testing.T, b Backend) {
	s := newFixture(t, b).s
	long := tooLongName()
	calls := map[string]func() error{
		"Append empty tenant": func() error { _, err := s.Ledger().Append(ctx, "", []store.Record{{}}); return err },
		"Append long tenant":  func() error { _, err := s.Ledger().Append(ctx, long, []store.Record{{}}); return err },
		"Stage empty tenant":  func() error { _, _, err := s.Ledger().Stage(ctx, "", []store.Record{{}}); return err },
		"AckAll empty tenant": func() error { _, err := s.Ledger().AckAll(ctx, map[string][]uint64{"t": {1}, "": {1}}); return err },
		"Read empty tenant":   func() error { _, err := s.Ledger().Read(ctx, "", 0, 1, 0); return err },
		"Read size 0":         func() error { _, err := s.Ledger().Read(ctx, "t", 0, 0, 0); return err },
		"Ack empty tenant":    func() error { _, err := s.Ledger().Ack(ctx, "", 1); return err },
		"Trim empty tenant":   func() error { _, err := s.Ledger().Trim(ctx, "", store.Bounds{}); return err },
		"Stats empty tenant":  func() error { _, err := s.Ledger().Stats(ctx, ""); return err },
		"capability empty key": func() error {
			return s.Capabilities().Put(ctx, "", nil, time.Now())
		},
		"claim empty key":      func() error { _, err := s.Claims().Claim(ctx, "", time.Now()); return err },
		"claim long key":       func() error { return s.Claims().Hold(ctx, long, time.Now()) },
		"hold empty claim key": func() error { return s.Claims().Hold(ctx, "", time.Now()) },
		"release empty claim":  func() error { return s.Claims().Release(ctx, "", time.Now()) },
		"owner empty session":  func() error { _, _, err := s.Owners().Get(ctx, "t", ""); return err },
		"owner zero TTL":       func() error { return s.Owners().Set(ctx, "t", "s", store.Owner{}, 0) },
		"lease empty holder":   func() error { _, _, err := s.Leases().Acquire(ctx, "n", "", time.Second); return err },
		"lease negative TTL":   func() error { _, _, err := s.Leases().Acquire(ctx, "n", "h", -time.Second); return err },
		"renew zero TTL": func() error {
			_, err := s.Leases().Renew(ctx, "n", store.Lease{Holder: "h", Token: 1}, 0)
			return err
		},
		"publish empty channel":  func() error { return s.PubSub().Publish(ctx, "", nil) },
		"registry empty key":     func() error { _, err := s.Registry().Put(ctx, "ns", "", nil); return err },
		"registry empty listing": func() error { _, _, err := s.Registry().List(ctx, ""); return err },
		"registry swap empty key": func() error {
			_, err := s.Registry().CompareAndSwap(ctx, "ns", "", nil, []byte("v"))
			return err
		},
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
}

// tooLongName is one byte over store.MaxNameBytes.
func tooLongName() string { return string(bytes.Repeat([]byte("x"), store.MaxNameBytes+1)) }

func testClosed(t *testing.T, b Backend) {
	s := newFixture(t, b).s
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	calls := map[string]func() error{
		"Append":  func() error { _, err := s.Ledger().Append(ctx, "t", []store.Record{{}}); return err },
		"Stage":   func() error { _, _, err := s.Ledger().Stage(ctx, "t", []store.Record{{}}); return err },
		"AckAll":  func() error { _, err := s.Ledger().AckAll(ctx, map[string][]uint64{"t": {1}}); return err },
		"Read":    func() error { _, err := s.Ledger().Read(ctx, "t", 0, 1, 0); return err },
		"Tenants": func() error { _, err := s.Ledger().Tenants(ctx); return err },
		"capability Get": func() error {
			_, _, err := s.Capabilities().Get(ctx, "k")
			return err
		},
		"owner Set":     func() error { return s.Owners().Set(ctx, "t", "s", store.Owner{}, time.Second) },
		"lease Acquire": func() error { _, _, err := s.Leases().Acquire(ctx, "n", "h", time.Second); return err },
		"Publish":       func() error { return s.PubSub().Publish(ctx, "c", nil) },
		"Subscribe":     func() error { _, _, err := s.PubSub().Subscribe(ctx, "c"); return err },
		"registry List": func() error { _, _, err := s.Registry().List(ctx, "ns"); return err },
		"registry Put":  func() error { _, err := s.Registry().Put(ctx, "ns", "k", nil); return err },
		"registry CompareAndSwap": func() error {
			_, err := s.Registry().CompareAndSwap(ctx, "ns", "k", nil, []byte("v"))
			return err
		},
		"capability Delete": func() error { return s.Capabilities().Delete(ctx, "k") },
		"Claim":             func() error { _, err := s.Claims().Claim(ctx, "k", time.Now()); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s on a closed store: err %v, want ErrClosed", name, err)
		}
	}
}
