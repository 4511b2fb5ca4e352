package ledger

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeConsumer records the frames it was offered. Room and refusal are
// switched by the test.
type fakeConsumer struct {
	name   string
	noRoom bool
	refuse bool
	frames []string
}

func (f *fakeConsumer) HasRoom() bool { return !f.noRoom }

func (f *fakeConsumer) Offer(frame []byte) bool {
	if f.refuse {
		return false
	}
	f.frames = append(f.frames, string(frame))
	return true
}

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

// rig is a ledger under test with a fixed clock.
type rig struct {
	*Ledger
	metrics *fakeMetrics
}

func newRig(t *testing.T, mod func(*Config)) *rig {
	t.Helper()
	m := &fakeMetrics{outcomes: make(map[string]int)}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := Config{
		Tenant:   "t1",
		IDPrefix: "p-",
		Frame: func(_ uint8, id string, payload []byte) []byte {
			return []byte(id + "|" + string(payload))
		},
		AckWindow:     100,
		MaxEntries:    1000,
		MaxBytes:      1 << 20,
		SessionOwners: 100,
		Now:           func() time.Time { return now },
		Log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:       m,
	}
	if mod != nil {
		mod(&cfg)
	}
	return &rig{Ledger: New(cfg), metrics: m}
}

// add appends a windowed discord delivery of session with text as payload
// and returns its bufferId.
func (r *rig) add(session, text string) string {
	return r.Append(Delivery{Platform: "discord", SessionKey: session, ChatID: "chat-" + session,
		Payload: []byte(text), Windowed: true})
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
		sent = append(sent, r.add("s1", fmt.Sprint("m", i)))
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
	r.add("s1", "one")
	owner, other := a, b
	if len(a.frames) == 0 {
		owner, other = b, a
	}
	// The other consumer is now the least loaded, but s1 stays with its
	// owner; a new session goes to the least loaded.
	r.add("s1", "two")
	r.add("s2", "first of s2")
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
		r.add(fmt.Sprint("s", i), fmt.Sprint("m", i))
	}
	got := c.take()
	want(t, "within the window", payloads(got), "m0", "m1")
	// An unwindowed delivery (a passthrough) is not held back by the window.
	r.Append(Delivery{Platform: "discord", Payload: []byte("pass")})
	want(t, "unwindowed", payloads(c.take()), "pass")

	if !r.Ack(ids(got)[0]) {
		t.Fatal("ack of an entry in flight not found")
	}
	want(t, "after one ack", payloads(c.take()), "m2")
	if r.Ack(ids(got)[0]) {
		t.Fatal("a duplicate ack was found again")
	}
	if r.Ack("p-999") {
		t.Fatal("an unknown bufferId was acknowledged")
	}
}

func TestDetachRedeliversUnackedInOriginalOrder(t *testing.T) {
	r := newRig(t, nil)
	a := &fakeConsumer{}
	r.Serve(a, "discord")
	for i := range 6 {
		r.add(fmt.Sprint("s", i%2), fmt.Sprint("m", i))
	}
	first := a.take()
	r.Ack(ids(first)[1])
	r.Ack(ids(first)[4])
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
	held := r.add("s1", "held")
	a.take()
	r.Idle(a)
	r.add("s1", "later")
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
	r.add("s1", "x")
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
	r.add("s1", "first")
	a.take()
	a.noRoom = true
	r.add("s1", "second")
	a.noRoom = false
	// A second consumer has room, but s1's next entry must not overtake
	// "second": both wait for the owner.
	b := &fakeConsumer{}
	r.Serve(b, "discord")
	r.add("s1", "third")
	r.add("s2", "other session")
	if len(b.frames) != 1 || payloads(b.frames)[0] != "other session" {
		t.Fatalf("second consumer got %q, want only the other session", b.frames)
	}
	r.Pump()
	want(t, "after Pump", payloads(a.take()), "second", "third")

	a.refuse = true
	r.add("s1", "refused")
	if len(b.frames) != 1 {
		t.Fatalf("an entry refused by the owner went to %q", b.frames)
	}
	a.refuse = false
	r.Pump()
	want(t, "after a refusal", payloads(a.take()), "refused")
}

func TestConsumersGetOnlyThePlatformsTheyServe(t *testing.T) {
	r := newRig(t, nil)
	tg, all := &fakeConsumer{}, &fakeConsumer{}
	r.Serve(tg, "telegram")
	r.Append(Delivery{Platform: "discord", SessionKey: "d", Payload: []byte("from discord"), Windowed: true})
	r.Serve(all, AllPlatforms)
	r.Append(Delivery{Platform: "telegram", SessionKey: "t", Payload: []byte("from telegram"), Windowed: true})
	want(t, "telegram consumer", payloads(tg.take()), "from telegram")
	want(t, "every-platform consumer", payloads(all.take()), "from discord")
}

func TestBoundsDropTheOldestWaitingEntries(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxEntries = 3 })
	for i := range 5 {
		r.add("s1", fmt.Sprint("m", i))
	}
	if n := r.metrics.count("dropped_overflow"); n != 2 {
		t.Fatalf("%d entries counted as dropped, want 2", n)
	}
	c := &fakeConsumer{}
	r.Serve(c, "discord")
	want(t, "kept", payloads(c.take()), "m2", "m3", "m4")

	// Bytes: each frame "p-N|xxxxxxxx" is 12 or 13 bytes here.
	r = newRig(t, func(c *Config) { c.MaxBytes = 30 })
	for i := range 4 {
		r.add("s1", fmt.Sprint("xxxxxxx", i))
	}
	c = &fakeConsumer{}
	r.Serve(c, "discord")
	want(t, "kept by bytes", payloads(c.take()), "xxxxxxx2", "xxxxxxx3")
	if r.metrics.buffered != 2 {
		t.Fatalf("Buffered reported %d, want 2", r.metrics.buffered)
	}
}
