package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/store"
)

// fakeConsumer records the frames it was offered. Room and refusal are
// switched by the test.
type fakeConsumer struct {
	name   string
	noRoom bool
	refuse bool
	frames []string
}

func (f *fakeConsumer) Offer(frame []byte) Offered {
	switch {
	case f.refuse:
		return Closing
	case f.noRoom:
		return Full
	}
	f.frames = append(f.frames, string(frame))
	return Taken
}

func (f *fakeConsumer) Owner() (string, string) { return "i", f.name }

// take returns and forgets the frames offered so far, as "bufferId|payload".
func (f *fakeConsumer) take() []string {
	got := f.frames
	f.frames = nil
	return got
}

// fakeMetrics counts outcomes by name.
type fakeMetrics struct {
	mu       sync.Mutex
	outcomes map[string]int
	buffered int
}

func (m *fakeMetrics) Inbound(_, _, outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outcomes[outcome]++
}

func (m *fakeMetrics) Delivered(string, time.Duration) {}

func (m *fakeMetrics) Buffered(_ string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buffered = n
}

func (m *fakeMetrics) count(outcome string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.outcomes[outcome]
}

// testFramer frames an entry as "bufferId|payload"; kind 2 is unwindowed.
type testFramer struct{}

func (testFramer) Frame(_ uint8, idPrefix string, seq uint64, payload []byte) []byte {
	return append(append(AppendBufferID(nil, idPrefix, seq), '|'), payload...)
}

func (testFramer) Windowed(kind uint8) bool { return kind != unwindowed }

const unwindowed = 2

// rig is tenant t1's ledger under test, on a memory store with a settable
// clock.
type rig struct {
	*Ledger
	pool    *Pool
	store   *store.Memory
	clock   *clocktest.Fake
	metrics *fakeMetrics
}

func testConfig(st store.Ledger, c *clocktest.Fake, m *fakeMetrics) Config {
	return Config{
		Store:         st,
		IDPrefix:      "p-",
		Framer:        testFramer{},
		AckWindow:     100,
		MaxEntries:    1000,
		MaxBytes:      1 << 20,
		SessionOwners: 100,
		Clock:         c,
		Log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:       m,
	}
}

func newRig(t *testing.T, mod func(*Config)) *rig {
	t.Helper()
	c := clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st := store.NewMemory(c)
	t.Cleanup(func() { _ = st.Close() })
	return newRigOn(t, st, c, mod)
}

// newRigOn starts a pool on st, as a restarted process would.
func newRigOn(t *testing.T, st *store.Memory, c *clocktest.Fake, mod func(*Config)) *rig {
	t.Helper()
	m := &fakeMetrics{outcomes: make(map[string]int)}
	cfg := testConfig(st.Ledger(), c, m)
	if mod != nil {
		mod(&cfg)
	}
	p := NewPool(cfg)
	t.Cleanup(func() { p.Close(context.Background()) })
	return &rig{Ledger: p.Ledger("t1"), pool: p, store: st, clock: c, metrics: m}
}

// add appends a windowed delivery of session with text as payload and
// returns its bufferId.
func (r *rig) add(t *testing.T, session, text string) string {
	t.Helper()
	seq, err := r.Append(context.Background(), Delivery{Platform: "discord", SessionKey: session,
		ChatID: "chat-" + session, Payload: []byte(text)})
	if err != nil {
		t.Fatalf("append %q: %v", text, err)
	}
	return r.pool.bufferID(seq)
}

// store1 stores one entry of session with StoreAll, as an instance that
// does not drive the tenant does.
func (r *rig) store1(t *testing.T, session, text string) string {
	t.Helper()
	seqs, err := r.StoreAll(context.Background(), []Delivery{{Platform: "discord", SessionKey: session,
		ChatID: "chat-" + session, Payload: []byte(text)}})
	if err != nil {
		t.Fatalf("store %q: %v", text, err)
	}
	return r.pool.bufferID(seqs[0])
}

// stored returns the payloads the store holds for t1, after writing the
// queued removals.
func (r *rig) stored(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	r.pool.Flush(ctx)
	recs, err := r.store.Ledger().Read(ctx, "t1", 0, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(recs))
	for i, rec := range recs {
		out[i] = string(rec.Payload)
	}
	return out
}

// payloads strips the bufferIds from frames.
func payloads(frames []string) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		_, out[i], _ = strings.Cut(f, "|")
	}
	return out
}

// ids keeps only the bufferIds of frames.
func ids(frames []string) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i], _, _ = strings.Cut(f, "|")
	}
	return out
}

func want(t *testing.T, what string, got []string, expected ...string) {
	t.Helper()
	if !slices.Equal(got, expected) {
		t.Fatalf("%s: got %q, want %q", what, got, expected)
	}
}

func TestWaitingEntriesGoOutInOrderOnServe(t *testing.T) {
	r := newRig(t, nil)
	var sent []string
	for i := range 5 {
		sent = append(sent, r.add(t, "s1", fmt.Sprint("m", i)))
	}
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	got := c.take()
	want(t, "payloads", payloads(got), "m0", "m1", "m2", "m3", "m4")
	want(t, "bufferIds", ids(got), sent...)
	if sent[0] != "p-1" || sent[4] != "p-5" {
		t.Fatalf("bufferIds %q: want the prefix and the sequence number", sent)
	}
}

func TestSessionStaysWithItsOwner(t *testing.T) {
	r := newRig(t, nil)
	a, b := &fakeConsumer{name: "a"}, &fakeConsumer{name: "b"}
	r.Serve(a, "discord")
	r.Serve(b, "discord")
	r.add(t, "s1", "one")
	owner, other := a, b
	if len(a.frames) == 0 {
		owner, other = b, a
	}
	// The other consumer is now the least loaded, but s1 stays with its
	// owner; a new session goes to the least loaded.
	r.add(t, "s1", "two")
	r.add(t, "s2", "first of s2")
	want(t, "owner", payloads(owner.take()), "one", "two")
	want(t, "other", payloads(other.take()), "first of s2")

	c, chat, ok := r.Owner("s1")
	if !ok || c != owner || chat != "chat-s1" {
		t.Fatalf("Owner(s1) = %v %q %v, want the owner and its chat", c, chat, ok)
	}
}

func TestAckWindowHoldsBackAndAckReleases(t *testing.T) {
	r := newRig(t, func(c *Config) { c.AckWindow = 2 })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	for i := range 5 {
		r.add(t, fmt.Sprint("s", i), fmt.Sprint("m", i))
	}
	got := c.take()
	want(t, "within the window", payloads(got), "m0", "m1")
	// An unwindowed delivery (a passthrough) is not held back by the window.
	if _, err := r.Append(context.Background(), Delivery{Kind: unwindowed, Platform: "discord", Payload: []byte("pass")}); err != nil {
		t.Fatal(err)
	}
	want(t, "unwindowed", payloads(c.take()), "pass")

	if !r.Ack([]byte(ids(got)[0])) {
		t.Fatal("ack of an entry in flight not found")
	}
	want(t, "after one ack", payloads(c.take()), "m2")
	if r.Ack([]byte(ids(got)[0])) {
		t.Fatal("a duplicate ack was found again")
	}
	if r.Ack([]byte("p-999")) {
		t.Fatal("an unknown bufferId was acknowledged")
	}
}

// byteWindowed is a fakeConsumer with a ByteWindow.
type byteWindowed struct {
	fakeConsumer
	window int64
}

func (b *byteWindowed) WindowBytes() int64 { return b.window }

// TestByteWindowHoldsBackAndAckReleases: a consumer with a ByteWindow
// takes windowed entries until their frames would pass it (one entry
// whatever its size), entries without an owner go to a consumer with room
// meanwhile, and an ack releases the next.
func TestByteWindowHoldsBackAndAckReleases(t *testing.T) {
	r := newRig(t, nil)
	small := &byteWindowed{window: 20} // frames "p-1|m0" and "p-2|m1" fit, "p-3|m2-larger" not
	r.Serve(small, "discord")
	first := r.add(t, "s", "m0")
	r.add(t, "s", "m1")
	r.add(t, "s", "m2-larger")
	want(t, "within the byte window", payloads(small.take()), "m0", "m1")

	other := &fakeConsumer{}
	r.Serve(other, "discord")
	for i := range 3 {
		r.add(t, "o", fmt.Sprint("o", i))
	}
	want(t, "the session still waits for its owner", payloads(other.take()), "o0", "o1", "o2")
	r.add(t, "", "no session")
	want(t, "an entry without an owner, to a consumer with room, however loaded", payloads(other.take()), "no session")

	if !r.Ack([]byte(first)) {
		t.Fatal("ack of an entry in flight not found")
	}
	want(t, "after one ack", payloads(small.take()), "m2-larger")

	big := &byteWindowed{window: 1}
	r.Serve(big, "discord")
	r.Idle(small)
	r.Idle(other)
	r.add(t, "t", "larger than the window")
	want(t, "one entry whatever its size", payloads(big.take()), "larger than the window")
}

// TestByteWindowBoundsUnwindowed: unwindowed entries (passthrough, which
// older gateways never acknowledge) are not held back by the ack window,
// but on a consumer with a ByteWindow (a socket on another instance, which
// cannot tell when it has room) their frames in flight are bounded by its
// bytes as well, apart from the windowed ones: the rest waits in the
// ledger, windowed entries still go, and an ack releases the next.
func TestByteWindowBoundsUnwindowed(t *testing.T) {
	r := newRig(t, nil)
	remote := &byteWindowed{window: 20} // "p-1|pass0" and "p-2|pass1" fit, not a third
	r.Serve(remote, "discord")
	var first string
	for i := range 4 {
		seq, err := r.Append(context.Background(), Delivery{Kind: unwindowed, Platform: "discord", Payload: []byte(fmt.Sprint("pass", i))})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.pool.bufferID(seq)
		}
	}
	want(t, "unwindowed, within the byte window", payloads(remote.take()), "pass0", "pass1")
	r.add(t, "s", "m0")
	want(t, "a windowed entry beside them", payloads(remote.take()), "m0")
	if !r.Ack([]byte(first)) {
		t.Fatal("ack of an unwindowed entry in flight not found")
	}
	want(t, "after one ack", payloads(remote.take()), "pass2")
}

// TestByteWindowFreesUnwindowedOnWritten: an unwindowed entry's bytes
// leave a ByteWindow once its consumer reports the frame written, so a
// gateway that never acknowledges passthrough (older adapters) keeps
// getting it; the entry stays in flight until acknowledged (a detach
// hands it out again), and a second report, or one from a consumer it
// is not in flight on, frees nothing.
func TestByteWindowFreesUnwindowedOnWritten(t *testing.T) {
	r := newRig(t, nil)
	remote := &byteWindowed{window: 20} // "p-1|pass0" and "p-2|pass1" fit, not a third
	r.Serve(remote, "discord")
	var sent []string
	for i := range 5 {
		seq, err := r.Append(context.Background(), Delivery{Kind: unwindowed, Platform: "discord", Payload: []byte(fmt.Sprint("pass", i))})
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, r.pool.bufferID(seq))
	}
	want(t, "within the byte window", payloads(remote.take()), "pass0", "pass1")
	other := &fakeConsumer{}
	r.Written(other, sent[0])
	r.Written(remote, sent[2]) // waiting, not in flight
	want(t, "after reports that free nothing", payloads(remote.take()))
	r.Written(remote, sent[0])
	r.Written(remote, sent[0])
	want(t, "after one frame written, reported twice", payloads(remote.take()), "pass2")
	r.Written(remote, sent[1])
	r.Written(remote, sent[2])
	want(t, "after two more written", payloads(remote.take()), "pass3", "pass4")
	if n := r.Len(); n != 5 {
		t.Fatalf("ledger holds %d entries, want the 5 unacknowledged", n)
	}
	r.Ack([]byte(sent[0]))
	r.Detach(remote)
	next := &byteWindowed{window: 20}
	r.Serve(next, "discord")
	want(t, "redelivered after the detach, within the byte window", payloads(next.take()), "pass1", "pass2")
	r.Written(next, sent[1]) // reported on the detached consumer before: this report is next's own
	want(t, "after the frame written again", payloads(next.take()), "pass3")
}

func TestDetachRedeliversUnackedInOriginalOrder(t *testing.T) {
	r := newRig(t, nil)
	a := &fakeConsumer{}
	r.Serve(a, "discord")
	for i := range 6 {
		r.add(t, fmt.Sprint("s", i%2), fmt.Sprint("m", i))
	}
	first := a.take()
	r.Ack([]byte(ids(first)[1]))
	r.Ack([]byte(ids(first)[4]))
	r.Detach(a)

	b := &fakeConsumer{}
	r.Serve(b, "discord")
	again := b.take()
	want(t, "redelivered", payloads(again), "m0", "m2", "m3", "m5")
	want(t, "same bufferIds", ids(again), ids(first)[0], ids(first)[2], ids(first)[3], ids(first)[5])
	if _, _, ok := r.Owner("s0"); !ok {
		t.Fatal("s0 has no owner after redelivery")
	}
	if c, _, _ := r.Owner("s0"); c != b {
		t.Fatal("s0's owner is still the detached consumer")
	}
}

func TestIdleConsumerGetsNothingNewAndKeepsWhatItHolds(t *testing.T) {
	r := newRig(t, nil)
	a := &fakeConsumer{}
	r.Serve(a, "discord")
	held := r.add(t, "s1", "held")
	a.take()
	r.Idle(a)
	r.add(t, "s1", "later")
	if len(a.frames) != 0 {
		t.Fatalf("idle consumer was offered %q", a.frames)
	}
	// A consumer that serves again after going idle stays idle.
	r.Serve(a, "telegram")
	if len(a.frames) != 0 {
		t.Fatalf("idle consumer was offered %q after another hello", a.frames)
	}
	// An interrupt still reaches the idle owner.
	if c, _, ok := r.Owner("s1"); !ok || c != a {
		t.Fatal("the idle owner is not the session's owner")
	}

	// A new consumer gets only what waited; the entry the idle one holds
	// stays with it until it detaches.
	b := &fakeConsumer{}
	r.Serve(b, "discord")
	want(t, "new consumer", payloads(b.take()), "later")
	r.Detach(a)
	got := b.take()
	want(t, "after the idle consumer detached", payloads(got), "held")
	want(t, "its bufferId", ids(got), held)
	if _, _, ok := r.Owner("s1"); !ok {
		t.Fatal("s1 lost its owner")
	}
}

func TestOwnerIsGoneAfterDetach(t *testing.T) {
	r := newRig(t, nil)
	a := &fakeConsumer{}
	r.Serve(a, "discord")
	r.add(t, "s1", "x")
	r.Detach(a)
	if c, _, ok := r.Owner("s1"); ok {
		t.Fatalf("Owner(s1) = %v after its consumer detached", c)
	}
	if _, _, ok := r.Owner("never-seen"); ok {
		t.Fatal("a session never delivered has an owner")
	}
	r.Detach(&fakeConsumer{}) // a consumer that never served: nothing to do
}

func TestSessionWaitsBehindItsBlockedEntry(t *testing.T) {
	r := newRig(t, nil)
	a := &fakeConsumer{}
	r.Serve(a, "discord")
	r.add(t, "s1", "first")
	a.take()
	a.noRoom = true
	r.add(t, "s1", "second")
	a.noRoom = false
	// A second consumer has room, but s1's next entry must not overtake
	// "second": both wait for the owner.
	b := &fakeConsumer{}
	r.Serve(b, "discord")
	r.add(t, "s1", "third")
	r.add(t, "s2", "other session")
	if len(b.frames) != 1 || payloads(b.frames)[0] != "other session" {
		t.Fatalf("second consumer got %q, want only the other session", b.frames)
	}
	r.Pump()
	want(t, "after Pump", payloads(a.take()), "second", "third")

	// An owner that is closing gets nothing more: its session's next entry
	// goes to another consumer at once.
	a.refuse = true
	r.add(t, "s1", "owner closing")
	want(t, "after the owner said Closing", payloads(b.take()), "other session", "owner closing")
	a.refuse = false
	r.add(t, "s1", "later")
	want(t, "the closing owner", payloads(a.take()))
	want(t, "the new owner", payloads(b.take()), "later")
}

func TestConsumersGetOnlyThePlatformsTheyServe(t *testing.T) {
	r := newRig(t, nil)
	tg, all := &fakeConsumer{}, &fakeConsumer{}
	r.Serve(tg, "telegram")
	ctx := context.Background()
	if _, err := r.Append(ctx, Delivery{Platform: "discord", SessionKey: "d", Payload: []byte("from discord")}); err != nil {
		t.Fatal(err)
	}
	r.Serve(all, AllPlatforms)
	if _, err := r.Append(ctx, Delivery{Platform: "telegram", SessionKey: "t", Payload: []byte("from telegram")}); err != nil {
		t.Fatal(err)
	}
	want(t, "telegram consumer", payloads(tg.take()), "from telegram")
	want(t, "every-platform consumer", payloads(all.take()), "from discord")
}

func TestAppendReturnsOnceStoredWithTheRecordsSeq(t *testing.T) {
	r := newRig(t, nil)
	first := r.add(t, "s1", "one")
	second := r.add(t, "s2", "two")
	want(t, "stored", r.stored(t), "one", "two")
	recs, err := r.store.Ledger().Read(context.Background(), "t1", 0, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if first != fmt.Sprint("p-", recs[0].Seq) || second != fmt.Sprint("p-", recs[1].Seq) {
		t.Fatalf("bufferIds %q %q, stored seqs %d %d", first, second, recs[0].Seq, recs[1].Seq)
	}
	if recs[0].SessionKey != "s1" || recs[0].ChatID != "chat-s1" || recs[0].Platform != "discord" {
		t.Fatalf("stored record %+v", recs[0])
	}
}

// failingLedger is a store.Ledger whose Stage fails.
type failingLedger struct{ store.Ledger }

var errDiskFull = errors.New("disk full")

func (failingLedger) Stage(context.Context, string, []store.Record) ([]uint64, func() error, error) {
	return nil, nil, errDiskFull
}

func TestAppendFailsWhenTheStoreFails(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Store = failingLedger{c.Store} })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	_, err := r.Append(context.Background(), Delivery{Platform: "discord", SessionKey: "s1", Payload: []byte("x")})
	if !errors.Is(err, errDiskFull) {
		t.Fatalf("Append = %v, want the store's error", err)
	}
	if len(c.frames) != 0 || r.Len() != 0 {
		t.Fatalf("an unstored delivery was taken: offered %q, %d entries", c.frames, r.Len())
	}
}

// gatedLedger is a store.Ledger whose next Stage, once armed, numbers and
// stores its records and then waits for release before returning.
type gatedLedger struct {
	store.Ledger
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedLedger) Stage(ctx context.Context, tenant string, recs []store.Record) ([]uint64, func() error, error) {
	seqs, commit, err := g.Ledger.Stage(ctx, tenant, recs)
	g.mu.Lock()
	wait := g.armed
	g.armed = false
	g.mu.Unlock()
	if wait {
		close(g.entered)
		<-g.release
	}
	return seqs, commit, err
}

// slowCommitLedger is a store.Ledger whose first Stage numbers and stores
// its records at once but whose commit, once called, announces it and
// then waits for release before returning err.
type slowCommitLedger struct {
	store.Ledger
	committing chan struct{}
	release    chan struct{}
	err        error
	used       atomic.Bool
}

func (s *slowCommitLedger) Stage(ctx context.Context, tenant string, recs []store.Record) ([]uint64, func() error, error) {
	seqs, commit, err := s.Ledger.Stage(ctx, tenant, recs)
	if s.used.Swap(true) {
		return seqs, commit, err
	}
	return seqs, func() error {
		close(s.committing)
		<-s.release
		return s.err
	}, err
}

// appendWithSlowCommit starts an Append of "first" on r, whose store is
// slow, and returns once the Append waits for its commit, with the
// channel its result arrives on.
func appendWithSlowCommit(t *testing.T, r *rig, slow *slowCommitLedger) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := r.Append(context.Background(), Delivery{Platform: "discord", SessionKey: "s1", Payload: []byte("first")})
		done <- err
	}()
	select {
	case <-slow.committing:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the Append to wait for its commit")
	}
	return done
}

func appendResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the Append to return")
		return nil
	}
}

// A connected gateway gets an entry while its commit is under way, and an
// ack that arrives before the commit reaches the store after it.
func TestEntryGoesOutBeforeItsCommitAndItsAckIsStoredAfter(t *testing.T) {
	slow := &slowCommitLedger{committing: make(chan struct{}), release: make(chan struct{})}
	r := newRig(t, func(c *Config) { slow.Ledger = c.Store; c.Store = slow })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	done := appendWithSlowCommit(t, r, slow)
	got := c.take()
	want(t, "offered while the commit is under way", payloads(got), "first")
	if !r.Ack([]byte(ids(got)[0])) {
		t.Fatal("the ack of an entry whose commit is under way was not taken")
	}
	want(t, "stored before the commit is done, after the ack", r.stored(t), "first")
	if st := r.pool.Stats(); st.Removed != 0 {
		t.Fatalf("a removal reached the store before the record's commit: %+v", st)
	}
	close(slow.release)
	if err := appendResult(t, done); err != nil {
		t.Fatal(err)
	}
	want(t, "stored after the commit", r.stored(t))
	if st := r.pool.Stats(); st.Removed != 1 {
		t.Fatalf("stats %+v, want the acknowledged entry removed after its commit", st)
	}
}

// An entry whose commit fails leaves the ledger, and Append fails: the
// event was not confirmed.
func TestEntryWhoseCommitFailsLeavesTheLedger(t *testing.T) {
	slow := &slowCommitLedger{committing: make(chan struct{}), release: make(chan struct{}), err: errDiskFull}
	r := newRig(t, func(c *Config) { slow.Ledger = c.Store; c.Store = slow })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	done := appendWithSlowCommit(t, r, slow)
	want(t, "offered while the commit is under way", payloads(c.take()), "first")
	close(slow.release)
	if err := appendResult(t, done); !errors.Is(err, errDiskFull) {
		t.Fatalf("Append = %v, want the commit's error", err)
	}
	if r.Len() != 0 {
		t.Fatalf("the ledger holds %d entries after a failed commit, want 0", r.Len())
	}
	r.add(t, "s1", "next")
	want(t, "the next entry of the session", payloads(c.take()), "next")
}

// A session's entry whose Append finished first waits for an earlier Append
// of the same session still being stored: the gateway gets them in order.
func TestConcurrentAppendsOfASessionGoOutInSeqOrder(t *testing.T) {
	gate := &gatedLedger{armed: true, entered: make(chan struct{}), release: make(chan struct{})}
	r := newRig(t, func(c *Config) { gate.Ledger = c.Store; c.Store = gate })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	done := make(chan error, 1)
	go func() {
		_, err := r.Append(context.Background(), Delivery{Platform: "discord", SessionKey: "s1", Payload: []byte("first")})
		done <- err
	}()
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the first Append to reach the store")
	}
	r.add(t, "s1", "second")
	r.add(t, "s2", "other session")
	want(t, "while the first is being stored", payloads(c.take()), "other session")
	close(gate.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the first Append to return")
	}
	want(t, "after it was stored", payloads(c.take()), "first", "second")
}

// TestTailDuringAnAppendTakesItInOnce: a Tail (a tenant added, or made
// again, on one instance) reads a record an Append staged before the
// Append took it in: the ledger holds it once and offers it once.
func TestTailDuringAnAppendTakesItInOnce(t *testing.T) {
	gate := &gatedLedger{armed: true, entered: make(chan struct{}), release: make(chan struct{})}
	r := newRig(t, func(c *Config) { gate.Ledger = c.Store; c.Store = gate })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	done := make(chan error, 1)
	go func() {
		_, err := r.Append(context.Background(), Delivery{Platform: "discord", SessionKey: "s1", Payload: []byte("first")})
		done <- err
	}()
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the Append to reach the store")
	}
	if _, err := r.Tail(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(gate.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the Append to return")
	}
	r.add(t, "s2", "second")
	want(t, "offered", payloads(c.take()), "first", "second")
	if n := r.Len(); n != 2 {
		t.Fatalf("the ledger holds %d entries, want 2", n)
	}
}

// TestTailDuringAnAppendAckedMeanwhileIsNotOfferedAgain: a record a Tail
// took in while an Append staged it, and its gateway acknowledged before
// the Append took it in, is not taken in (and offered) again.
func TestTailDuringAnAppendAckedMeanwhileIsNotOfferedAgain(t *testing.T) {
	gate := &gatedLedger{armed: true, entered: make(chan struct{}), release: make(chan struct{})}
	r := newRig(t, func(c *Config) { gate.Ledger = c.Store; c.Store = gate })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	done := make(chan error, 1)
	go func() {
		_, err := r.Append(context.Background(), Delivery{Platform: "discord", Payload: []byte("first")})
		done <- err
	}()
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the Append to reach the store")
	}
	if _, err := r.Tail(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := c.take()
	want(t, "offered by the Tail", payloads(got), "first")
	if !r.Ack([]byte(ids(got)[0])) {
		t.Fatal("the Tail's entry was not acknowledged")
	}
	close(gate.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the Append to return")
	}
	r.add(t, "s2", "second")
	want(t, "offered after the ack", payloads(c.take()), "second")
	if n := r.Len(); n != 1 {
		t.Fatalf("the ledger holds %d entries, want 1", n)
	}
}

// unreadUntilCommitLedger is a store.Ledger whose first Stage's records
// are not read (Read) until their commit, which announces itself and then
// waits for release: an embedded store's group commit still under way.
type unreadUntilCommitLedger struct {
	store.Ledger
	mu         sync.Mutex
	hidden     map[uint64]bool
	committing chan struct{}
	release    chan struct{}
}

func (u *unreadUntilCommitLedger) Stage(ctx context.Context, tenant string, recs []store.Record) ([]uint64, func() error, error) {
	seqs, commit, err := u.Ledger.Stage(ctx, tenant, recs)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil || u.hidden != nil {
		return seqs, commit, err
	}
	u.hidden = make(map[uint64]bool)
	for _, s := range seqs {
		u.hidden[s] = true
	}
	return seqs, func() error {
		close(u.committing)
		<-u.release
		u.mu.Lock()
		clear(u.hidden)
		u.mu.Unlock()
		return commit()
	}, nil
}

func (u *unreadUntilCommitLedger) Read(ctx context.Context, tenant string, afterSeq uint64, max int, maxBytes int64) ([]store.Record, error) {
	recs, err := u.Ledger.Read(ctx, tenant, afterSeq, max, maxBytes)
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.DeleteFunc(recs, func(r store.Record) bool { return u.hidden[r.Seq] }), err
}

// TestAppendUnderACreationBegunWhileItCommits: an Append routed under a
// later creation than the ledger's, left for it, whose commit was under
// way while the ledger began that creation (Begin) and a Tail read the
// store without it, is taken in once committed, not left in the store.
func TestAppendUnderACreationBegunWhileItCommits(t *testing.T) {
	u := &unreadUntilCommitLedger{committing: make(chan struct{}), release: make(chan struct{})}
	r := newRig(t, func(c *Config) { u.Ledger = c.Store; c.Store = u })
	earlier, again := r.clock.Now().Add(-2*time.Hour), r.clock.Now().Add(-time.Hour)
	r.SetSince(earlier)
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	done := make(chan error, 1)
	go func() {
		_, err := r.Append(context.Background(), Delivery{Platform: "discord", Generation: again.UnixMicro(), Payload: []byte("routed first")})
		done <- err
	}()
	select {
	case <-u.committing:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the Append's commit")
	}
	r.Begin(again)
	if n, err := r.Tail(context.Background()); n != 0 || err != nil {
		t.Fatalf("Tail took in %d (%v) of a record not committed yet", n, err)
	}
	close(u.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the Append to return")
	}
	want(t, "offered", payloads(c.take()), "routed first")
}

func TestAckedEntriesLeaveTheStore(t *testing.T) {
	r := newRig(t, nil)
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	a := r.add(t, "s1", "acked")
	r.add(t, "s1", "kept")
	r.Ack([]byte(a))
	want(t, "stored", r.stored(t), "kept")
	if st := r.pool.Stats(); st.Removed != 1 || st.RemoveErrors != 0 {
		t.Fatalf("stats %+v, want one removal", st)
	}
}

// A restarted process recovers what was not acknowledged, in order, with
// the same bufferIds, and dispatches it to the first consumer.
func TestRecoverAfterRestart(t *testing.T) {
	r := newRig(t, nil)
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	var sent []string
	for i := range 5 {
		sent = append(sent, r.add(t, fmt.Sprint("s", i%2), fmt.Sprint("m", i)))
	}
	r.Ack([]byte(sent[1]))
	r.pool.Close(context.Background())

	again := newRigOn(t, r.store, r.clock, nil)
	n, err := again.pool.Recover(context.Background())
	if err != nil || n != 4 {
		t.Fatalf("Recover = %d, %v; want 4 entries", n, err)
	}
	c = &fakeConsumer{}
	again.Serve(c, "discord")
	got := c.take()
	want(t, "recovered", payloads(got), "m0", "m2", "m3", "m4")
	want(t, "bufferIds", ids(got), sent[0], sent[2], sent[3], sent[4])
	// New entries continue the sequence.
	if id := again.add(t, "s1", "new"); id != "p-6" {
		t.Fatalf("new entry after recovery got %q, want p-6", id)
	}
}

// Bounds are absolute: entries in flight count and are dropped oldest
// first too, from memory and from the store.
func TestBoundsDropTheOldestEntriesInFlightIncluded(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxEntries = 3; c.AckWindow = 2 })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	for i := range 5 {
		r.add(t, "s"+fmt.Sprint(i), fmt.Sprint("m", i))
	}
	// m0 and m1 went out and filled the window; m3 and m4 each pushed out
	// the oldest, in flight, which freed a slot for the next one waiting.
	if n := r.metrics.count(DroppedOverflow); n != 2 {
		t.Fatalf("%d entries counted as dropped, want 2", n)
	}
	want(t, "stored", r.stored(t), "m2", "m3", "m4")
	want(t, "offered", payloads(c.take()), "m0", "m1", "m2", "m3")
	if r.Ack([]byte("p-1")) {
		t.Fatal("the ack of a dropped entry found it")
	}
	r.Pump()
	want(t, "with the window full", payloads(c.take()))

	// Bytes count payloads; a newer entry pushes out older ones.
	r = newRig(t, func(c *Config) { c.MaxBytes = 20 })
	for i := range 4 {
		r.add(t, "s1", fmt.Sprint("xxxxxxxx", i)) // 9 bytes each
	}
	want(t, "kept by bytes", r.stored(t), "xxxxxxxx2", "xxxxxxxx3")
	if r.metrics.buffered != 2 {
		t.Fatalf("Buffered reported %d, want 2", r.metrics.buffered)
	}
}

func TestTotalBoundShedsTheLargestTenant(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxTotalBytes = 30 })
	small := r.pool.Ledger("t2")
	ctx := context.Background()
	if _, err := small.Append(ctx, Delivery{Platform: "discord", Payload: []byte("t2-small")}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		r.add(t, "s1", fmt.Sprint("t1-payload", i)) // 11 bytes each
	}
	// 8 + 4*11 bytes: t1, the largest, gave up its two oldest.
	if small.Len() != 1 {
		t.Fatalf("the smaller tenant lost entries: %d left", small.Len())
	}
	want(t, "t1 kept", r.stored(t), "t1-payload2", "t1-payload3")
	if n := r.metrics.count(DroppedTotal); n != 2 {
		t.Fatalf("%d entries counted as dropped by the total bound, want 2", n)
	}
	if b := r.pool.Stats().Bytes; b > 30 {
		t.Fatalf("pool holds %d bytes, over its bound of 30", b)
	}
}

func TestSweepDropsEntriesOlderThanMaxAge(t *testing.T) {
	// The pool's own sweep waits longer than the clock is moved here, so
	// the call below is the one sweep (when both ran, the goroutine's
	// count could land after the check).
	r := newRig(t, func(c *Config) { c.MaxAge, c.SweepEvery = time.Hour, 24*time.Hour })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	r.add(t, "s1", "old in flight")
	r.Idle(c)
	r.add(t, "s1", "old waiting")
	r.clock.Advance(50 * time.Minute)
	r.add(t, "s1", "recent")
	r.clock.Advance(20 * time.Minute)
	if err := r.pool.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := r.metrics.count(DroppedExpired); n != 2 {
		t.Fatalf("%d entries counted as expired, want 2", n)
	}
	want(t, "stored", r.stored(t), "recent")
	if r.Len() != 1 {
		t.Fatalf("memory holds %d entries, want 1", r.Len())
	}
}

// brokenTrim is a store whose Trim fails for one tenant, listed first.
type brokenTrim struct {
	store.Ledger
	tenant string
}

func (b brokenTrim) Tenants(ctx context.Context) ([]string, error) {
	ts, err := b.Ledger.Tenants(ctx)
	return append([]string{b.tenant}, ts...), err
}

func (b brokenTrim) Trim(ctx context.Context, tenant string, bounds store.Bounds) ([]store.Dropped, error) {
	if tenant == b.tenant {
		return nil, errors.New("trim failed")
	}
	return b.Ledger.Trim(ctx, tenant, bounds)
}

// TestSweepTrimsPastATenantItCannotTrim: a tenant whose records the store
// fails to trim (a corrupt record, say) does not keep the sweep from the
// tenants after it, which would otherwise keep their expired records in
// the store for good; the sweep still reports the failure.
func TestSweepTrimsPastATenantItCannotTrim(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.MaxAge, c.SweepEvery = time.Hour, 24*time.Hour
		c.Store = brokenTrim{Ledger: c.Store, tenant: "broken"}
	})
	r.store1(t, "s1", "old, stored by another instance")
	r.clock.Advance(2 * time.Hour)
	if err := r.pool.Sweep(context.Background()); err == nil {
		t.Fatal("the sweep reported no error for a tenant it could not trim")
	}
	want(t, "stored", r.stored(t))
}

// TestAgeSweepRunsOnTheClock: the pool enforces MaxAge by itself, every
// SweepEvery of its clock (the injected one, not the wall clock).
func TestAgeSweepRunsOnTheClock(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxAge, c.SweepEvery = time.Hour, time.Minute })
	r.add(t, "s1", "old")
	r.clock.Advance(2 * time.Hour) // older than MaxAge; the first sweep fires on the way
	// Polled: a sweep signals nothing when it is done; each minute
	// advanced ticks the sweep again.
	for deadline := time.Now().Add(10 * time.Second); r.metrics.count(DroppedExpired) == 0; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("timed out after 10s advancing the clock minute by minute with nothing expired")
		}
		r.clock.Advance(time.Minute)
	}
	want(t, "stored", r.stored(t))
}

// stalledTrim is a store whose Trim waits until release is closed, and
// whose AckAll reports each call on acked.
type stalledTrim struct {
	store.Ledger
	trimming chan struct{} // closed by the first Trim
	once     sync.Once
	release  chan struct{}
	acked    chan struct{}
}

func (s *stalledTrim) Trim(ctx context.Context, tenant string, bounds store.Bounds) ([]store.Dropped, error) {
	s.once.Do(func() { close(s.trimming) })
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Ledger.Trim(ctx, tenant, bounds)
}

func (s *stalledTrim) AckAll(ctx context.Context, acks map[string][]uint64) (int, error) {
	n, err := s.Ledger.AckAll(ctx, acks)
	s.acked <- struct{}{}
	return n, err
}

// TestRemovalsDoNotWaitForASlowSweep: an acknowledged entry leaves the
// store while an age sweep is stuck in the store (a Trim per stored
// tenant, each up to the store's timeouts): before, the one goroutine that
// swept also wrote the removals, which waited up to the sweep's 30 s; and
// Close (a shutdown) waited for the sweep as long.
func TestRemovalsDoNotWaitForASlowSweep(t *testing.T) {
	st := &stalledTrim{trimming: make(chan struct{}), release: make(chan struct{}), acked: make(chan struct{}, 16)}
	r := newRig(t, func(c *Config) {
		c.MaxAge, c.SweepEvery = time.Hour, time.Minute
		st.Ledger = c.Store
		c.Store = st
	})
	t.Cleanup(func() { close(st.release) })
	cons := &fakeConsumer{}
	r.Serve(cons, "discord")
	id := r.add(t, "s1", "acked while the sweep is stuck")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.clock.WaitPending(ctx, 2); err != nil { // the memory store's sweeper's and the pool's
		t.Fatalf("waiting for the pool's sweep timer on the clock: %v", err)
	}
	r.clock.Advance(time.Minute)
	select {
	case <-st.trimming:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the age sweep to reach the store's Trim")
	}
	r.Ack([]byte(id))
	select {
	case <-st.acked:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the acknowledged entry's removal while the sweep is stuck")
	}

	// Close ends the stuck sweep rather than waiting out its 30 s.
	closed := make(chan struct{})
	go func() {
		r.pool.Close(context.Background())
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for Close while the sweep is stuck in the store")
	}
}

// Two pools on one store stand for two instances: Store only stores, and
// the driving instance takes records in with Tail, each once, in order,
// whoever stored them.
func TestTailTakesInWhatAnyInstanceStored(t *testing.T) {
	driver := newRig(t, nil)
	other := newRigOn(t, driver.store, driver.clock, nil)
	c := &fakeConsumer{}
	driver.Serve(c, "discord")

	a := driver.store1(t, "s1", "m0")
	b := other.store1(t, "s1", "m1")
	if len(c.frames) != 0 {
		t.Fatalf("Store dispatched %q before Tail", c.frames)
	}
	if n, err := driver.Tail(context.Background()); err != nil || n != 2 {
		t.Fatalf("Tail took in %d (%v), want 2", n, err)
	}
	other.store1(t, "s1", "m2")
	if n, err := driver.Tail(context.Background()); err != nil || n != 1 {
		t.Fatalf("second Tail took in %d (%v), want 1", n, err)
	}
	got := c.take()
	want(t, "payloads", payloads(got), "m0", "m1", "m2")
	if ids(got)[0] != a || ids(got)[1] != b {
		t.Fatalf("bufferIds %q, want %q and %q first", ids(got), a, b)
	}
	if other.Len() != 0 {
		t.Fatalf("the instance not driving holds %d entries", other.Len())
	}

	// Acknowledged entries leave the store; after Reset (the tenant moved
	// away and back) Tail reads what is left, with the same bufferIds.
	driver.Ack([]byte(ids(got)[0]))
	driver.pool.Flush(context.Background())
	driver.Reset()
	if driver.Len() != 0 {
		t.Fatalf("after Reset the ledger holds %d entries", driver.Len())
	}
	c2 := &fakeConsumer{}
	driver.Serve(c2, "discord")
	if n, err := driver.Tail(context.Background()); err != nil || n != 2 {
		t.Fatalf("Tail after Reset took in %d (%v), want 2", n, err)
	}
	want(t, "after Reset", c2.take(), got[1:]...)
}

// ackRecorder is a store.Ledger that records the tenants of each AckAll.
type ackRecorder struct {
	store.Ledger
	mu    sync.Mutex
	calls [][]string
}

func (a *ackRecorder) AckAll(ctx context.Context, acks map[string][]uint64) (int, error) {
	tenants := slices.Sorted(maps.Keys(acks))
	a.mu.Lock()
	a.calls = append(a.calls, tenants)
	a.mu.Unlock()
	return a.Ledger.AckAll(ctx, acks)
}

// Flush writes the removals of every tenant in one store call, so the
// store commits them together.
func TestFlushWritesTenantsRemovalsTogether(t *testing.T) {
	rec := &ackRecorder{}
	r := newRig(t, func(c *Config) { rec.Ledger = c.Store; c.Store = rec })
	// Hold the pool's goroutine off until all three are queued: whichever
	// flush comes first then finds all three.
	r.pool.flushMu.Lock()
	for _, tenant := range []string{"t1", "t2", "t3"} {
		l := r.pool.Ledger(tenant)
		c := &fakeConsumer{}
		l.Serve(c, "discord")
		if _, err := l.Append(context.Background(), Delivery{Platform: "discord", SessionKey: "s", Payload: []byte(tenant)}); err != nil {
			t.Fatal(err)
		}
		l.Ack([]byte(ids(c.take())[0]))
	}
	r.pool.flushMu.Unlock()
	r.pool.Flush(context.Background())
	if st := r.pool.Stats(); st.Removed != 3 || st.RemoveErrors != 0 {
		t.Fatalf("stats %+v, want the three tenants' removals written", st)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 1 || !slices.Equal(rec.calls[0], []string{"t1", "t2", "t3"}) {
		t.Fatalf("store AckAll calls %v, want one carrying t1, t2 and t3", rec.calls)
	}
}

// OnOwned reports every dispatched entry of a session with the consumer it
// went to and its chat.
func TestOwnedReportsEachSessionsConsumer(t *testing.T) {
	type owned struct {
		c         Consumer
		key, chat string
	}
	var got []owned
	r := newRig(t, nil)
	r.OnOwned(func(c Consumer, key, chat string) { got = append(got, owned{c, key, chat}) })
	a := &fakeConsumer{name: "a"}
	r.add(t, "s1", "m0")
	r.Append(context.Background(), Delivery{Platform: "discord", Payload: []byte("no session")})
	r.Serve(a, "discord")
	r.add(t, "s1", "m1")
	if len(got) != 2 {
		t.Fatalf("Owned called %d times, want 2 (one per session entry): %+v", len(got), got)
	}
	for _, o := range got {
		if o.c != a || o.key != "s1" || o.chat != "chat-s1" {
			t.Fatalf("Owned(%v, %q, %q), want (a, s1, chat-s1)", o.c, o.key, o.chat)
		}
	}
}

// TestUnservedReportsBufferedEntriesNoConsumerServes: Config.Unserved hears
// of an entry that waits because no attached consumer serves it (none is
// attached, the one there went idle, or it serves another platform), and
// not of one a consumer takes or one held back only by a full window; a
// Tail that takes waiting records in reports too.
func TestUnservedReportsBufferedEntriesNoConsumerServes(t *testing.T) {
	var calls []string
	r := newRig(t, func(c *Config) {
		c.AckWindow = 1
		c.Unserved = func(tenant string) { calls = append(calls, tenant) }
	})
	r.add(t, "s1", "nobody")
	want(t, "with no consumer", calls, "t1")

	a := &fakeConsumer{}
	r.Serve(a, "discord")
	calls = nil
	r.add(t, "s2", "taken")
	r.add(t, "s3", "window full")
	want(t, "with a live consumer", calls)

	tg := &fakeConsumer{}
	r.Detach(a)
	r.Serve(tg, "telegram")
	calls = nil
	r.add(t, "s4", "discord only")
	want(t, "with a consumer of another platform", calls, "t1")

	b := &fakeConsumer{}
	r.Serve(b, "discord")
	r.Idle(b)
	calls = nil
	r.add(t, "s5", "idle")
	want(t, "with an idle consumer", calls, "t1")

	// After a restart, recovered entries nobody serves are reported.
	r.pool.Close(context.Background())
	calls = nil
	again := newRigOn(t, r.store, r.clock, func(c *Config) {
		c.Unserved = func(tenant string) { calls = append(calls, tenant) }
	})
	if _, err := again.pool.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	want(t, "on recovery", calls, "t1")
}

// TestUnservedReportsEntriesPutBackWithNoConsumer: an entry a consumer
// held that goes back in line when it detaches (an idle gateway that went
// to sleep), or one held back by a full window when its consumer goes
// idle, waits with no consumer serving it: Config.Unserved hears of it.
func TestUnservedReportsEntriesPutBackWithNoConsumer(t *testing.T) {
	var calls []string
	r := newRig(t, func(c *Config) {
		c.AckWindow = 1
		c.Unserved = func(tenant string) { calls = append(calls, tenant) }
	})
	a := &fakeConsumer{}
	r.Serve(a, "discord")
	r.add(t, "s1", "held")
	r.Idle(a)
	calls = nil
	r.Detach(a)
	want(t, "after the idle holder detached", calls, "t1")

	b := &fakeConsumer{}
	r.Serve(b, "discord")
	r.add(t, "s2", "waits behind the window")
	calls = nil
	r.Idle(b)
	want(t, "after the consumer whose window was full went idle", calls, "t1")
}

// AppendAll stores a batch in one Stage, in order, and offers it in
// order; a commit that fails takes none of it back into the ledger.
func TestAppendAllStoresABatchInOneStageOrNone(t *testing.T) {
	slow := &slowCommitLedger{committing: make(chan struct{}), release: make(chan struct{}), err: errDiskFull}
	r := newRig(t, func(c *Config) { slow.Ledger = c.Store; c.Store = slow })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	batch := []Delivery{
		{Platform: "discord", SessionKey: "s1", Payload: []byte("a")},
		{Platform: "discord", SessionKey: "s2", Payload: []byte("b")},
		{Platform: "discord", SessionKey: "s1", Payload: []byte("c")},
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.AppendAll(context.Background(), batch)
		done <- err
	}()
	select {
	case <-slow.committing:
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for AppendAll to wait for its commit")
	}
	want(t, "offered while the batch's commit is under way", payloads(c.take()), "a", "b", "c")
	close(slow.release)
	if err := appendResult(t, done); !errors.Is(err, errDiskFull) {
		t.Fatalf("AppendAll = %v, want the commit's error", err)
	}
	if r.Len() != 0 {
		t.Fatalf("the ledger holds %d entries after the batch's commit failed, want 0", r.Len())
	}

	// The store works again (slowCommitLedger slows its first Stage only).
	seqs, err := r.AppendAll(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := r.store.Ledger().Read(context.Background(), "t1", 0, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The fake's failed commit left its records in the memory store.
	want(t, "stored", r.stored(t), "a", "b", "c", "a", "b", "c")
	for i, seq := range seqs {
		if rec := recs[len(recs)-3+i]; seq != rec.Seq {
			t.Fatalf("sequence number %d is %d, stored seq %d", i, seq, rec.Seq)
		}
	}
}

// gatedReadLedger is a store.Ledger whose next Read, once armed, reads and
// then waits for release before returning.
type gatedReadLedger struct {
	store.Ledger
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedReadLedger) Read(ctx context.Context, tenant string, afterSeq uint64, max int, maxBytes int64) ([]store.Record, error) {
	recs, err := g.Ledger.Read(ctx, tenant, afterSeq, max, maxBytes)
	g.mu.Lock()
	wait := g.armed
	g.armed = false
	g.mu.Unlock()
	if wait {
		close(g.entered)
		<-g.release
	}
	return recs, err
}

// Reset does not wait for a Tail's store read under way (an instance that
// lost a tenant's lease resets its ledger with the tenant's hub locked,
// which every message between instances about the tenant needs), and that
// Tail takes nothing in: what it read belongs to the ledger before the
// Reset. The next Tail reads from the start.
func TestResetDoesNotWaitForATailsRead(t *testing.T) {
	gate := &gatedReadLedger{entered: make(chan struct{}), release: make(chan struct{})}
	r := newRig(t, func(c *Config) { gate.Ledger = c.Store; c.Store = gate })
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	r.store1(t, "s1", "m0")
	gate.armed = true
	tailed := make(chan error, 1)
	go func() {
		_, err := r.Tail(context.Background())
		tailed <- err
	}()
	<-gate.entered
	reset := make(chan struct{})
	go func() {
		r.Reset()
		close(reset)
	}()
	select {
	case <-reset:
	case <-time.After(5 * time.Second):
		close(gate.release)
		t.Fatal("Reset waited for a Tail's store read (5 s)")
	}
	close(gate.release)
	if err := <-tailed; err != nil {
		t.Fatal(err)
	}
	if n := r.Len(); n != 0 || len(c.frames) != 0 {
		t.Fatalf("the Tail under way at the Reset took in %d entries and dispatched %q, want none", n, c.frames)
	}
	c2 := &fakeConsumer{}
	r.Serve(c2, "discord")
	if n, err := r.Tail(context.Background()); err != nil || n != 1 {
		t.Fatalf("Tail after Reset took in %d (%v), want 1", n, err)
	}
	want(t, "after Reset", payloads(c2.take()), "m0")
}

// Among several instances every pool trims the shared store, and the one
// that trims first is told what it dropped: the driver's ledger, which
// holds the entries in memory, drops (and counts) those older than MaxAge
// at its own sweep all the same, rather than deliver them past the age
// bound.
func TestSweepDropsExpiredEntriesAnotherInstanceTrimmed(t *testing.T) {
	mod := func(c *Config) { c.MaxAge, c.SweepEvery = time.Hour, 24*time.Hour }
	driver := newRig(t, mod)
	other := newRigOn(t, driver.store, driver.clock, mod)
	other.store1(t, "s1", "old")
	driver.clock.Advance(50 * time.Minute)
	other.store1(t, "s2", "recent")
	if n, err := driver.Tail(context.Background()); err != nil || n != 2 {
		t.Fatalf("Tail took in %d (%v), want 2", n, err)
	}
	driver.clock.Advance(20 * time.Minute)
	if err := other.pool.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := driver.pool.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := driver.metrics.count(DroppedExpired); n != 1 {
		t.Fatalf("the driver counted %d entries as expired, want 1", n)
	}
	c := &fakeConsumer{}
	driver.Serve(c, "discord")
	want(t, "delivered after the sweeps", payloads(c.take()), "recent")
}

// TestBeginDropsAnEarlierTenantsEntries: t1 holds entries in memory and
// the store (one in flight, one waiting) when it is deleted and created
// again (Begin): both leave memory and the store, and the owner of their
// session is forgotten. An instance that reads the store after (Tail,
// SetSince only, as a restarted or lagging one) takes in none of the
// earlier tenant's records and removes them; the new tenant's own count.
func TestBeginDropsAnEarlierTenantsEntries(t *testing.T) {
	r := newRig(t, func(c *Config) { c.AckWindow = 1 })
	other := newRigOn(t, r.store, r.clock, nil)
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	r.add(t, "s1", "in flight")
	r.add(t, "s1", "waiting")
	other.store1(t, "s2", "stored elsewhere")
	want(t, "before", payloads(c.take()), "in flight")

	r.clock.Advance(time.Second)
	began := r.clock.Now()
	if n := r.Begin(began); n != 2 {
		t.Fatalf("Begin dropped %d entries, want 2", n)
	}
	if _, _, ok := r.Owner("s1"); ok {
		t.Fatal("the earlier tenant's session owner is still known")
	}
	r.add(t, "s1", "new")
	other.SetSince(began)
	if n, err := other.Tail(context.Background()); err != nil || n != 1 {
		t.Fatalf("Tail after SetSince took in %d (%v), want 1 (the new tenant's)", n, err)
	}
	other.pool.Flush(context.Background())
	want(t, "stored", r.stored(t), "new")
	c2 := &fakeConsumer{}
	other.Serve(c2, "discord")
	want(t, "the other instance's", payloads(c2.take()), "new")
}

// TestBeginDropsTheEarlierGenerationOnAClockBehind: t1 is created again
// on an instance whose clock is behind the one that created the earlier
// tenant, so the new generation is before the earlier one. Begin still
// drops every entry of the earlier generation the ledger holds (its
// generation is another, whatever their order), so the new tenant's
// gateways get none of them.
func TestBeginDropsTheEarlierGenerationOnAClockBehind(t *testing.T) {
	r := newRig(t, nil)
	earlier := r.clock.Now()
	r.SetSince(earlier)
	r.clock.Advance(time.Second)
	r.add(t, "s1", "earlier")
	if n := r.Begin(earlier.Add(-time.Minute)); n != 1 {
		t.Fatalf("Begin of a generation before the earlier one dropped %d entries, want 1", n)
	}
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	want(t, "the new tenant's", payloads(c.take()))
	want(t, "stored", r.stored(t))
}

// stageHook is a ledger store that runs before, once, as a Stage begins.
type stageHook struct {
	store.Ledger
	before *func()
}

func (s stageHook) Stage(ctx context.Context, tenant string, recs []store.Record) ([]uint64, func() error, error) {
	if f := *s.before; f != nil {
		*s.before = nil
		f()
	}
	return s.Ledger.Stage(ctx, tenant, recs)
}

// TestAppendStagedAcrossBeginIsNotTheNewTenants: an Append of the earlier
// tenant (its record stamped with the earlier generation) is being staged
// when the tenant is created again under its id (Begin): the new tenant's
// gateways never get it, and the store does not keep it.
func TestAppendStagedAcrossBeginIsNotTheNewTenants(t *testing.T) {
	var hook func()
	r := newRig(t, func(c *Config) { c.Store = stageHook{c.Store, &hook} })
	r.SetSince(r.clock.Now())
	r.clock.Advance(time.Second)
	again := r.clock.Now()
	hook = func() { r.Begin(again) }
	r.add(t, "s1", "earlier's")
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	want(t, "the new tenant's", payloads(c.take()))
	want(t, "stored", r.stored(t))
}

// TestTailTakesInItsGenerationsOnly: t1 is deleted and created again
// under its id, and one instance applied it (other, generation g2) while
// another has not yet (r, still the earlier tenant's, g1). Each takes in
// only the records of its generation: r passes over the new tenant's,
// which stays in the store for other, and other removes the earlier
// tenant's, although both were received after g2. A record of an older
// version (no generation) keeps the receipt-time rule. Once r applied the
// change (Begin), its next Tail reads from the start again and takes in
// the new tenant's record it had passed over.
func TestTailTakesInItsGenerationsOnly(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, nil)
	other := newRigOn(t, r.store, r.clock, nil)
	g1 := r.clock.Now()
	r.clock.Advance(time.Second)
	g2 := r.clock.Now()
	r.SetSince(g1)
	other.SetSince(g2)
	r.clock.Advance(time.Second)
	r.store1(t, "s1", "earlier")
	other.store1(t, "s1", "new")
	for _, legacy := range []store.Record{
		{Platform: "discord", SessionKey: "s1", Payload: []byte("legacy before g2"), Received: g2.Add(-time.Millisecond)},
		{Platform: "discord", SessionKey: "s1", Payload: []byte("legacy after g2"), Received: g2.Add(time.Millisecond)},
	} {
		if _, err := r.store.Ledger().Append(ctx, "t1", []store.Record{legacy}); err != nil {
			t.Fatal(err)
		}
	}
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	if n, err := r.Tail(ctx); err != nil || n != 3 {
		t.Fatalf("the earlier tenant's Tail took in %d (%v), want 3", n, err)
	}
	want(t, "the earlier tenant's", payloads(c.take()), "earlier", "legacy before g2", "legacy after g2")
	want(t, "stored after the earlier tenant's Tail", r.stored(t), "earlier", "new", "legacy before g2", "legacy after g2")

	c2 := &fakeConsumer{}
	other.Serve(c2, "discord")
	if n, err := other.Tail(ctx); err != nil || n != 2 {
		t.Fatalf("the new tenant's Tail took in %d (%v), want 2", n, err)
	}
	want(t, "the new tenant's", payloads(c2.take()), "new", "legacy after g2")
	other.pool.Flush(ctx)
	want(t, "stored after the new tenant's Tail", r.stored(t), "new", "legacy after g2")

	if n := r.Begin(g2); n != 2 {
		t.Fatalf("Begin dropped %d entries, want 2 (earlier, legacy before g2)", n)
	}
	r.Serve(c, "discord")
	if n, err := r.Tail(ctx); err != nil || n != 1 {
		t.Fatalf("Tail after Begin took in %d (%v), want 1 (the new tenant's it passed over)", n, err)
	}
	want(t, "after Begin", payloads(c.take()), "new")
}

// A ledger the pool forgot (its tenant removed) takes nothing in: an
// Append of a delivery that found it just before (or a Tail) stores the
// record, for the tenant's next ledger, but neither holds it nor counts it
// in the pool's bytes, which would otherwise stay counted until a restart.
func TestForgottenLedgerTakesNothingIn(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	r.pool.Forget(r.Ledger)
	r.add(t, "s1", "late")
	if n, err := r.Tail(ctx); n != 0 || err != nil {
		t.Fatalf("the forgotten ledger's Tail took %d in (%v), want 0", n, err)
	}
	if n, b := r.Len(), r.pool.Stats().Bytes; n != 0 || b != 0 {
		t.Fatalf("the forgotten ledger holds %d entries, the pool counts %d bytes; want none", n, b)
	}
	want(t, "stored", r.stored(t), "late")
	next := r.pool.Ledger("t1")
	if n, err := next.Tail(ctx); n != 1 || err != nil {
		t.Fatalf("the tenant's next ledger took %d in (%v), want 1", n, err)
	}
	if b := r.pool.Stats().Bytes; b != int64(len("late")) {
		t.Fatalf("the pool counts %d bytes, want %d", b, len("late"))
	}
}

// The removals a ledger queued before the pool forgot it are written in
// the same flush as those of the tenant's next ledger: both reach the
// store, and neither ledger is left reusing the other's removal slice.
// The next ledger's replaced the forgotten one's in the flush before (one
// slice per tenant), so an acknowledged entry stayed stored and was
// delivered again, and both ledgers were handed the same slice to queue
// their next removals in.
func TestForgottenLedgersRemovalsWrittenWithTheNextOnes(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	first := r.add(t, "s1", "acked before the tenant was removed")
	r.add(t, "s2", "kept")
	// Hold the pool's goroutine off: both ledgers' removals wait for one
	// flush.
	r.pool.flushMu.Lock()
	r.Ack([]byte(first))
	r.pool.Forget(r.Ledger)
	next := r.pool.Ledger("t1")
	seq, err := next.Append(ctx, Delivery{Platform: "discord", SessionKey: "s3", Payload: []byte("acked on the next ledger")})
	if err != nil {
		t.Fatal(err)
	}
	next.Ack([]byte(r.pool.bufferID(seq)))
	r.pool.flushMu.Unlock()
	want(t, "stored", r.stored(t), "kept")
	r.pool.flushMu.Lock() // drained is the flush's
	spare, nextSpare := r.Ledger.drained, next.drained
	r.pool.flushMu.Unlock()
	if cap(spare) > 0 && cap(nextSpare) > 0 && &spare[:1][0] == &nextSpare[:1][0] {
		t.Fatal("the forgotten ledger and the next one were handed the same removal slice")
	}
}

// An entry acknowledged just before a Reset (the tenant's lease lost and
// taken again, or its generation changed) is not delivered again by the
// Tail that reads the stream from the start while its removal is still
// queued: Tail writes the queued removals first.
func TestTailFromTheStartSkipsAnEntryAcknowledgedBeforeTheReset(t *testing.T) {
	r := newRig(t, nil)
	// The pool's goroutine stopped: a removal stays queued, as it is
	// between an ack and the goroutine's flush.
	r.pool.Close(context.Background())
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	r.store1(t, "s1", "m0")
	r.store1(t, "s1", "m1")
	if n, err := r.Tail(context.Background()); err != nil || n != 2 {
		t.Fatalf("Tail took in %d (%v), want 2", n, err)
	}
	got := c.take()
	if !r.Ack([]byte(ids(got)[0])) {
		t.Fatalf("ack of %q not taken", ids(got)[0])
	}
	r.Reset()
	c2 := &fakeConsumer{}
	r.Serve(c2, "discord")
	if n, err := r.Tail(context.Background()); err != nil || n != 1 {
		t.Fatalf("Tail after Reset took in %d (%v), want 1: the acknowledged entry again", n, err)
	}
	want(t, "after Reset", c2.take(), got[1])
}
