package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/store"
)

const timeout = 10 * time.Second

// pair starts two nodes, a and b, on one memory store and one fake clock.
func pair(t *testing.T) (a, b *cluster.Node, clk *clocktest.Fake, st *store.Memory) {
	t.Helper()
	clk = clocktest.New(time.Unix(1_700_000_000, 0))
	st = store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	start := func(name string) *cluster.Node {
		n, err := cluster.New(cluster.Config{Instance: name, PubSub: st.PubSub(), LeaseTTL: 3 * time.Second, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	return start("a"), start("b"), clk, st
}

// receive waits for the next value on ch.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
	var zero T
	return zero
}

// Messages from one instance reach another's handler in the order they
// were sent, with their sender; a message with the wrong field count, of a
// type nobody handles, or malformed is dropped, and the next one still
// arrives.
func TestSendReachesTheHandlerInOrder(t *testing.T) {
	a, b, _, st := pair(t)
	got := make(chan cluster.Msg, store.SubscriptionBuffer)
	b.Handle('x', 2, func(m cluster.Msg) {
		m.Fields = [][]byte{bytes.Clone(m.Fields[0]), bytes.Clone(m.Fields[1])}
		got <- m
	})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, bad := range [][]byte{
		cluster.Encode('x', "a", []byte("only one field")),
		cluster.Encode('y', "a", []byte("1"), []byte("2")),
		{'x', 200},                        // a field longer than the message
		cluster.Encode('x', "", nil, nil), // no sender
	} {
		if err := st.PubSub().Publish(ctx, cluster.Inbox("b"), bad); err != nil {
			t.Fatal(err)
		}
	}
	for i := range store.SubscriptionBuffer - 10 {
		if !a.Send(cluster.Inbox("b"), 'x', fmt.Appendf(nil, "%d", i), []byte("p")) {
			t.Fatalf("message %d found the outbox full", i)
		}
	}
	for i := range store.SubscriptionBuffer - 10 {
		m := receive(t, got, fmt.Sprintf("message %d", i))
		if m.From != "a" || string(m.Fields[0]) != fmt.Sprint(i) || string(m.Fields[1]) != "p" {
			t.Fatalf("message %d arrived as %+v", i, m)
		}
	}
}

// A call is answered by its handler's Reply; one nobody answers fails at
// the caller's deadline.
func TestCall(t *testing.T) {
	a, b, _, _ := pair(t)
	b.HandleCall('q', 1, func(m cluster.Msg) { b.Reply(m, append([]byte("re:"), m.Fields[0]...)) })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, ok := a.Call(ctx, cluster.Inbox("b"), 'q', []byte("hi"))
	if !ok || string(res) != "re:hi" {
		t.Fatalf("Call = %q, %v; want re:hi", res, ok)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if res, ok := a.Call(short, cluster.Inbox("nobody"), 'q', []byte("hi")); ok {
		t.Fatalf("a call nobody answers returned %q", res)
	}
}

// An instance silent for LostBeats beats is gone; any message from it
// counts as a sign of life; a link made later is given LostBeats beats of
// its own.
func TestGone(t *testing.T) {
	a, b, clk, _ := pair(t)
	heard := make(chan struct{}, 1)
	b.Handle('p', 0, func(cluster.Msg) { heard <- struct{}{} })
	a.Send(cluster.Inbox("b"), 'p')
	receive(t, heard, "a's message")
	start := clk.Now()
	clk.Advance(cluster.LostBeats * b.Beat())
	if b.Gone("a", time.Time{}) {
		t.Fatal("a gone after exactly LostBeats beats of silence")
	}
	clk.Advance(time.Millisecond)
	if !b.Gone("a", time.Time{}) {
		t.Fatal("a not gone after more than LostBeats beats of silence")
	}
	if b.Gone("a", clk.Now()) {
		t.Fatal("a gone for a link made just now")
	}
	a.Send(cluster.Inbox("b"), 'p')
	receive(t, heard, "a's second message")
	if b.Gone("a", start) {
		t.Fatal("a gone right after a message from it")
	}
}

// Beats run inside the Advance that reaches them, in registration order,
// every third of the lease TTL; a stopped one no more.
func TestBeats(t *testing.T) {
	a, _, clk, _ := pair(t)
	var mu sync.Mutex
	var runs []string
	stop1 := a.OnBeat(func() { mu.Lock(); runs = append(runs, "1"); mu.Unlock() })
	a.OnBeat(func() { mu.Lock(); runs = append(runs, "2"); mu.Unlock() })
	read := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(runs)
	}
	clk.Advance(a.Beat() - time.Millisecond)
	if r := read(); r != "[]" {
		t.Fatalf("beats ran before the first beat was due: %s", r)
	}
	clk.Advance(time.Millisecond)
	if r := read(); r != "[1 2]" {
		t.Fatalf("after one beat: %s, want [1 2]", r)
	}
	stop1()
	clk.Advance(a.Beat())
	if r := read(); r != "[1 2 2]" {
		t.Fatalf("after a second beat with the first stopped: %s, want [1 2 2]", r)
	}
}

// blockingPubSub holds every Publish until release is closed.
type blockingPubSub struct {
	store.PubSub
	release chan struct{}
}

func (p blockingPubSub) Publish(ctx context.Context, channel string, msg []byte) error {
	select {
	case <-p.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.PubSub.Publish(ctx, channel, msg)
}

// Send never waits: a full outbox refuses the message;
// Roomy says no past half, and OnRoom runs once the outbox drained below
// half again.
func TestFullOutbox(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	ps := blockingPubSub{st.PubSub(), make(chan struct{})}
	n, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(ps.release) }) }) // before Close: it publishes what is queued
	room := make(chan struct{}, 1)
	n.OnRoom(func([]string) { room <- struct{}{} })
	sent := 0
	for n.Send("elsewhere", 'x') {
		sent++
	}
	// A batch may be with the publisher, the rest queued.
	if sent < cluster.NoTenantShare || sent > cluster.NoTenantShare+256 {
		t.Fatalf("%d messages queued before Send refused one, want NoTenantShare's %d and at most a batch", sent, cluster.NoTenantShare)
	}
	if n.Roomy("") {
		t.Fatal("Roomy with a full outbox")
	}
	release.Do(func() { close(ps.release) })
	receive(t, room, "OnRoom once the outbox drained below half")
	if !n.Roomy("") {
		t.Fatal("not Roomy after OnRoom")
	}
}

// gate is a channel closed at most once.
type gate struct {
	once sync.Once
	c    chan struct{}
}

func newGate() *gate { return &gate{c: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.c) }) }

// gatedPubSub holds each publication until release opens, and those on
// the channel "last" until hold opens, telling last when one arrives.
type gatedPubSub struct {
	store.PubSub
	release, hold *gate
	last          chan struct{}
}

func (p gatedPubSub) Publish(ctx context.Context, channel string, msg []byte) error {
	g := p.release
	if channel == "last" {
		p.last <- struct{}{}
		g = p.hold
	}
	select {
	case <-g.c:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.PubSub.Publish(ctx, channel, msg)
}

// A sender Roomy turns away is woken even when the publisher drains the
// outbox after Roomy found it full and before Roomy answered, and then has
// nothing more to publish: Roomy answers yes, or OnRoom runs. (The
// publisher is held in the publication of one later message, so it cannot
// look at the outbox again: as though it were idle.)
func TestRoomyRacingTheDrain(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	ps := gatedPubSub{PubSub: st.PubSub(), release: newGate(), hold: newGate(), last: make(chan struct{}, 1)}
	n, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	unpark := newGate()
	t.Cleanup(func() { ps.release.open(); ps.hold.open(); unpark.open() }) // before Close
	parked := make(chan struct{}, 1)
	cluster.SetRoomyHook(n, func() {
		parked <- struct{}{}
		<-unpark.c
	})
	room := make(chan struct{}, 1)
	n.OnRoom(func([]string) {
		select {
		case room <- struct{}{}:
		default:
		}
	})
	for n.Send("elsewhere", 'x') {
	}
	answer := make(chan bool, 1)
	go func() { answer <- n.Roomy("") }()
	receive(t, parked, "Roomy to find the outbox full")
	ps.release.open()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if !n.SendWait(ctx, "", "last", 'x') {
		t.Fatal("the last message not queued: the outbox did not drain")
	}
	receive(t, ps.last, "the publisher to take the last message, the others published")
	unpark.open()
	if !receive(t, answer, "Roomy's answer") {
		receive(t, room, "OnRoom after Roomy said no, the outbox empty and the publisher done with it")
	}
}

// Two tenants Roomy said no to, each with its share full: as the
// publisher drains the first below half its share, OnRoom is given that
// tenant only, and the second, still waiting, is given later, once it
// drained too (its no is not lost with the first one's wake). Before,
// OnRoom named nobody, and the relay poked every tenant it drives.
func TestRoomAgainNamesTheTenantsDue(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	ps := blockingPubSub{st.PubSub(), make(chan struct{})}
	n, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(ps.release) }) }) // before Close: it publishes what is queued
	due := make(chan []string, 4)
	n.OnRoom(func(d []string) { due <- slices.Clone(d) })
	// t1's messages all queued before t2's: the publisher, which takes
	// them in order, drains t1's share first.
	for _, tenant := range []string{"t1", "t2"} {
		for sent := 0; n.SendFor(tenant, "elsewhere", 'x'); sent++ {
			if sent > cluster.OutboxSize {
				t.Fatalf("%s's share never filled", tenant)
			}
		}
	}
	if n.Roomy("t1") || n.Roomy("t2") {
		t.Fatal("Roomy with the tenant's share full")
	}
	release.Do(func() { close(ps.release) })
	if got := receive(t, due, "OnRoom once t1's share drained below half"); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("OnRoom given %q while t2's share was still full, want t1 only", got)
	}
	if got := receive(t, due, "OnRoom once t2's share drained below half"); !slices.Equal(got, []string{"t2"}) {
		t.Fatalf("OnRoom given %q once t2's share drained, want t2", got)
	}
	if !n.Roomy("t1") || !n.Roomy("t2") {
		t.Fatal("not Roomy after both were given OnRoom")
	}
}

// Close publishes what the outbox still holds.
func TestClosePublishesWhatIsQueued(t *testing.T) {
	a, b, _, _ := pair(t)
	got := make(chan string, 100)
	b.Handle('x', 1, func(m cluster.Msg) { got <- string(m.Fields[0]) })
	for i := range 100 {
		a.Send(cluster.Inbox("b"), 'x', fmt.Appendf(nil, "%d", i))
	}
	a.Close()
	for i := range 100 {
		if m := receive(t, got, fmt.Sprintf("message %d after Close", i)); m != fmt.Sprint(i) {
			t.Fatalf("message %d arrived as %s", i, m)
		}
	}
}

// A Link tells a gap (at the next message, or at the sender's word of what
// it sent) from a message not sent yet.
func TestLink(t *testing.T) {
	var out, in cluster.Link
	for range 3 {
		out.Send(func(seq uint64) {
			if !in.Take(seq) {
				t.Fatalf("message %d refused in order", seq)
			}
		})
	}
	if in.Missing(out.Sent()) {
		t.Fatal("Missing with every message taken")
	}
	out.Send(func(seq uint64) {
		if out.Sent() != 3 {
			t.Fatalf("message %d counted as sent before it was", seq)
		}
	}) // lost
	if !in.Missing(out.Sent()) {
		t.Fatal("a lost last message not Missing at the sender's word")
	}
	out.Send(func(seq uint64) {
		if in.Take(seq) {
			t.Fatalf("message %d taken after a gap", seq)
		}
	})
	if in.Received() != 3 {
		t.Fatalf("Received %d after the gap, want 3", in.Received())
	}
}

// TakeOnce drops a copy of a message taken (pub/sub delivering it again)
// and refuses as a gap another message under a number taken (a sender
// numbering the link from 1 again), and a copy older than it remembers.
func TestLinkTakeOnce(t *testing.T) {
	var in cluster.Link
	msg := func(seq uint64) []byte { return fmt.Appendf(nil, "frame %d", seq) }
	take := func(seq uint64, m []byte, wantTaken, wantRepeat bool) {
		t.Helper()
		if taken, repeat := in.TakeOnce(seq, m); taken != wantTaken || repeat != wantRepeat {
			t.Fatalf("TakeOnce(%d, %q) = %v, %v; want %v, %v", seq, m, taken, repeat, wantTaken, wantRepeat)
		}
	}
	const n = 300 // past what it remembers
	for seq := uint64(1); seq <= n; seq++ {
		take(seq, msg(seq), true, false)
	}
	take(n, msg(n), false, true)
	take(n-10, msg(n-10), false, true)
	take(1, msg(1), false, false)    // too old to tell from a new message 1
	take(n-10, msg(1), false, false) // another message under a number taken
	take(0, msg(0), false, false)
	take(n+2, msg(n+2), false, false) // a gap
	if in.Received() != n {
		t.Fatalf("Received %d, want %d", in.Received(), n)
	}
	take(n+1, msg(n+1), true, false)
}

// Two users of one node cannot take the same message type.
func TestTypeRegisteredTwicePanics(t *testing.T) {
	a, _, _, _ := pair(t)
	a.Handle('z', 0, func(cluster.Msg) {})
	defer func() {
		if recover() == nil {
			t.Fatal("registering a type twice did not panic")
		}
	}()
	a.Handle('z', 1, func(cluster.Msg) {})
}

// FuzzDispatch: no message, however malformed, panics a node; a message
// that decodes reaches its handler with the fields it was encoded with.
func FuzzDispatch(f *testing.F) {
	f.Add(cluster.Encode('x', "a", []byte("1"), []byte("22")))
	f.Add([]byte{'x', 1, 'a', 200})
	f.Add([]byte{})
	f.Add(cluster.Encode(1, "a", cluster.Encode('x', "a", []byte("1"), []byte("2")), []byte{1, 1}))
	st := store.NewMemory(nil)
	defer st.Close()
	n, err := cluster.New(cluster.Config{Instance: "b", PubSub: st.PubSub(), LeaseTTL: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	defer n.Close()
	var got [][]byte
	n.Handle('x', 2, func(m cluster.Msg) { got = m.Fields })
	n.HandleCall('q', 1, func(m cluster.Msg) { n.Reply(m, m.Fields[0]) })
	f.Fuzz(func(t *testing.T, msg []byte) {
		got = nil
		n.Dispatch(msg)
		if got == nil {
			return
		}
		again := cluster.Encode('x', "a", got...)
		got2 := got
		got = nil
		n.Dispatch(again)
		if len(got) != 2 || !bytes.Equal(got[0], got2[0]) || !bytes.Equal(got[1], got2[1]) {
			t.Fatalf("re-encoded %q dispatched as %q", got2, got)
		}
	})
}

// countingPubSub is a store.BatchPublisher that holds every batch until
// release is closed and counts the publications it makes.
type countingPubSub struct {
	store.PubSub
	release      chan struct{}
	publications *atomic.Int64
}

func (p countingPubSub) PublishAll(ctx context.Context, msgs []store.Message) (int, error) {
	select {
	case <-p.release:
	case <-ctx.Done():
		return len(msgs), ctx.Err()
	}
	for _, m := range msgs {
		p.publications.Add(1)
		if err := p.PubSub.Publish(ctx, m.Channel, m.Msg); err != nil {
			return len(msgs), err
		}
	}
	return 0, nil
}

// Messages queued together for one channel go out as one publication (a
// bundle) and reach the handler one by one, in order; a bundle inside a
// bundle is dropped.
func TestMessagesForOneChannelAreBundled(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	var pubs atomic.Int64
	ps := countingPubSub{st.PubSub(), make(chan struct{}), &pubs}
	a, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	b, err := cluster.New(cluster.Config{Instance: "b", PubSub: st.PubSub(), LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	got := make(chan string, 400)
	b.Handle('x', 1, func(m cluster.Msg) { got <- string(m.Fields[0]) })
	const n = 200
	for i := range n {
		if !a.Send(cluster.Inbox("b"), 'x', fmt.Appendf(nil, "%d", i)) {
			t.Fatalf("message %d found the outbox full", i)
		}
	}
	close(ps.release)
	for i := range n {
		if m := receive(t, got, fmt.Sprintf("message %d", i)); m != fmt.Sprint(i) {
			t.Fatalf("message %d arrived as %q", i, m)
		}
	}
	if p := pubs.Load(); p >= n/2 {
		t.Fatalf("%d messages took %d publications; want them bundled", n, p)
	}
	nested := cluster.Encode(1, "a", cluster.Encode(1, "a", cluster.Encode('x', "a", []byte("inner"))), cluster.Encode('x', "a", []byte("after")))
	b.Dispatch(nested)
	if m := receive(t, got, "the message after a nested bundle"); m != "after" {
		t.Fatalf("a nested bundle was dispatched: got %q", m)
	}
}

type countedBuffer struct{ refs int }

func (b *countedBuffer) Retain()  { b.refs++ }
func (b *countedBuffer) Release() { b.refs-- }

// DispatchHeld hands a message's buffer to its handler, which may retain
// it; a bundle's messages get none, and Dispatch gives none.
func TestDispatchHeld(t *testing.T) {
	st := store.NewMemory(nil)
	defer st.Close()
	n, err := cluster.New(cluster.Config{Instance: "b", PubSub: st.PubSub(), LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var held []cluster.Buffer
	n.Handle('x', 1, func(m cluster.Msg) {
		held = append(held, m.Held)
		if m.Held != nil {
			m.Held.Retain()
		}
	})
	buf := &countedBuffer{}
	n.DispatchHeld(cluster.Encode('x', "a", []byte("1")), buf)
	n.DispatchHeld(cluster.Encode(1, "a", cluster.Encode('x', "a", []byte("2")), cluster.Encode('x', "a", []byte("3"))), buf)
	n.Dispatch(cluster.Encode('x', "a", []byte("4")))
	if len(held) != 4 || held[0] != cluster.Buffer(buf) || held[1] != nil || held[2] != nil || held[3] != nil {
		t.Fatalf("handlers got buffers %v, want the buffer for the plain message only", held)
	}
	if buf.refs != 1 {
		t.Fatalf("the buffer has %d references, want the handler's 1", buf.refs)
	}
}

// One tenant's burst fills only its share of the outbox: on a real Redis,
// with the publisher held, another tenant's message and a message of no
// tenant are still queued, and arrive once it publishes again; Roomy says
// no for the bursting tenant only, until OnRoom.
func TestTenantShareOfTheOutbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: redistest.Start(t, redistest.Options{}).URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ps := blockingPubSub{st.PubSub(), make(chan struct{})}
	a, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(ps.release) }) }) // before Close: it publishes what is queued
	b, err := cluster.New(cluster.Config{Instance: "b", PubSub: st.PubSub(), LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	room := make(chan struct{}, 1)
	a.OnRoom(func([]string) {
		select {
		case room <- struct{}{}:
		default:
		}
	})
	got := make(chan string, 16)
	b.Handle('x', 1, func(m cluster.Msg) {
		if s := string(m.Fields[0]); s != "t2" {
			got <- s
		}
	})
	sent := 0
	for a.SendFor("t2", cluster.Inbox("b"), 'x', []byte("t2")) && sent < 4*cluster.OutboxSize {
		sent++
	}
	if !a.SendFor("t1", cluster.Inbox("b"), 'x', []byte("t1")) || !a.Send(cluster.Inbox("b"), 'x', []byte("none")) {
		t.Fatalf("after t2 queued %d messages, t1's or a message of no tenant was refused", sent)
	}
	if a.Roomy("t2") || !a.Roomy("t1") {
		t.Fatalf("Roomy(t2) %v, Roomy(t1) %v after t2's burst; want false, true", a.Roomy("t2"), a.Roomy("t1"))
	}
	release.Do(func() { close(ps.release) })
	want := map[string]bool{"t1": true, "none": true}
	for len(want) > 0 {
		delete(want, receive(t, got, "t1's message and the message of no tenant"))
	}
	receive(t, room, "OnRoom once t2's share drained below half")
	if !a.Roomy("t2") {
		t.Fatal("Roomy(t2) false after OnRoom")
	}
}

// Bulk senders (SendWait: nexscope's member frames, which any member with
// the shared token can send as fast as its window lets it) fill only their
// share of the outbox: on a real Redis, with the publisher held and a
// bulk sender waiting, a tenant's message and a message of no tenant are
// still queued, and arrive once it publishes again; the bulk sender goes
// on.
// Before, the bulk sender filled the whole outbox and both were lost: a
// nexscope room's flood on an instance broke every tenant's links through
// it, and its beats.
func TestBulkShareOfTheOutbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: redistest.Start(t, redistest.Options{}).URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ps := blockingPubSub{st.PubSub(), make(chan struct{})}
	a, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(ps.release) }) }) // before Close: it publishes what is queued
	b, err := cluster.New(cluster.Config{Instance: "b", PubSub: st.PubSub(), LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	const sends = 2 * cluster.OutboxSize
	got := make(chan string, 16)
	b.Handle('x', 1, func(m cluster.Msg) {
		if s := string(m.Fields[0]); s != "bulk" {
			got <- s
		}
	})
	var queued atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range sends {
			if !a.SendWait(ctx, "", cluster.Inbox("b"), 'x', []byte("bulk")) {
				return
			}
			queued.Add(1)
		}
	}()
	waitSendWaitParked(t)
	if !a.SendFor("t1", cluster.Inbox("b"), 'x', []byte("t1")) || !a.Send(cluster.Inbox("b"), 'x', []byte("none")) {
		t.Fatalf("after a bulk sender queued %d messages, a tenant's or a message of no tenant was refused", queued.Load())
	}
	release.Do(func() { close(ps.release) })
	want := map[string]bool{"t1": true, "none": true}
	for len(want) > 0 {
		delete(want, receive(t, got, "t1's message and the message of no tenant"))
	}
	receive(t, done, "the bulk sender to queue all its messages")
}

// waitSendWaitParked waits until a goroutine waits in SendWait for room.
func waitSendWaitParked(t *testing.T) {
	t.Helper()
	parked := func() bool {
		buf := make([]byte, 1<<20)
		for g := range bytes.SplitSeq(buf[:runtime.Stack(buf, true)], []byte("\n\n")) {
			if bytes.Contains(g, []byte("cluster.(*Node).SendWait")) && bytes.Contains(g, []byte("[select")) {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(timeout); !parked(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for the bulk sender to wait for room", timeout)
		}
		runtime.Gosched()
	}
}

// A bulk flood (SendWait) that fills BulkShare leaves the messages of no
// tenant that do not wait (Send: the beats, a room's credit) the rest of
// NoTenantShare: with the publisher held and the bulk sender waiting, at
// least NoTenantShare - BulkShare Sends are accepted. Before, bulk
// messages counted only in NoTenantShare and filled it, and every Send of
// the instance's beats was refused.
func TestBulkFloodLeavesSendItsRoom(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	ps := blockingPubSub{st.PubSub(), make(chan struct{})}
	n, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(ps.release) }) }) // before Close: it publishes what is queued
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n.SendWait(ctx, "", "elsewhere", 'x') {
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitSendWaitParked(t)
	for i := range cluster.NoTenantShare - cluster.BulkShare {
		if !n.Send("elsewhere", 'x') {
			t.Fatalf("Send %d of no tenant refused after a bulk flood filled its share, want %d accepted", i, cluster.NoTenantShare-cluster.BulkShare)
		}
	}
}

// Bound rooms' floods (SendWait for tenants) take a quarter of each
// tenant's share, and BulkShare together: with the publisher held and
// eight tenants' bulk senders waiting, the outbox is less than half full
// (Roomy says yes to another tenant and to a flooder's relay frames), and
// messages that do not wait (SendFor: a relay ack) are accepted. Before,
// each flood filled its tenant's whole share: four of them the outbox past
// half, holding back every tenant's relay frames, six of them the part all
// tenants share, refusing every tenant's messages.
func TestTenantsBulkFloodsLeaveTheRelayItsRoom(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	ps := blockingPubSub{st.PubSub(), make(chan struct{})}
	n, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(ps.release) }) }) // before Close: it publishes what is queued
	const floods = 8
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range floods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n.SendWait(ctx, "t"+strconv.Itoa(i), "elsewhere", 'x') {
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	parked := func() (waiting int) {
		buf := make([]byte, 1<<20)
		for g := range bytes.SplitSeq(buf[:runtime.Stack(buf, true)], []byte("\n\n")) {
			if bytes.Contains(g, []byte("cluster.(*Node).SendWait")) && bytes.Contains(g, []byte("[select")) {
				waiting++
			}
		}
		return waiting
	}
	for deadline := time.Now().Add(timeout); parked() < floods; {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for the %d tenants' bulk senders to wait for room", timeout, floods)
		}
		runtime.Gosched()
	}
	for _, tenant := range []string{"other", "t0"} {
		if !n.Roomy(tenant) {
			t.Errorf("Roomy(%q) = false after %d tenants' rooms flooded the outbox: their relay frames are held back", tenant, floods)
		}
		if !n.SendFor(tenant, "elsewhere", 'y') {
			t.Errorf("SendFor(%q) refused after %d tenants' rooms flooded the outbox", tenant, floods)
		}
	}
}

// A tenant's requests (CallAgain for a tenant: nexscope's actions its
// gateways forward to a room's home) count in its share as its rooms'
// frames do: with the publisher held and NoTenantShare of them waiting,
// the messages of no tenant that do not wait (Send: the beats) are all
// accepted, and Roomy says yes to another tenant. Before, they counted as
// messages of no tenant: one tenant's flood of forwards filled
// NoTenantShare and every instance's beat was refused.
func TestTenantCallsLeaveNoTenantItsRoom(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	ps := blockingPubSub{st.PubSub(), make(chan struct{})}
	n, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(ps.release) }) }) // before Close: it publishes what is queued
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range cluster.NoTenantShare {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.CallAgain(ctx, "t1", 0, 'q', func() (string, [][]byte) { return "elsewhere", [][]byte{[]byte("forward")} })
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	buf := make([]byte, 64<<20)
	parked := func() (waiting int) {
		for g := range bytes.SplitSeq(buf[:runtime.Stack(buf, true)], []byte("\n\n")) {
			if bytes.Contains(g, []byte("cluster.(*Node).CallAgain")) && bytes.Contains(g, []byte("[select")) {
				waiting++
			}
		}
		return waiting
	}
	for deadline := time.Now().Add(timeout); parked() < cluster.NoTenantShare; {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for the %d requests of t1 to be queued or wait for room", timeout, cluster.NoTenantShare)
		}
		runtime.Gosched()
	}
	for i := range cluster.NoTenantShare {
		if !n.Send("elsewhere", 'x') {
			t.Fatalf("Send %d of no tenant refused after t1's requests flooded the outbox, want %d accepted", i, cluster.NoTenantShare)
		}
	}
	if !n.Roomy("other") {
		t.Error("Roomy(other) = false after t1's requests flooded the outbox")
	}
}

// Every message Send or SendFor refuses is counted by its reason
// (Config.Refused): past its tenant's share, past the part all tenants
// share, or of no tenant past NoTenantShare.
func TestRefusalsCounted(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	ps := blockingPubSub{st.PubSub(), make(chan struct{})}
	var mu sync.Mutex
	refused := map[string]int{}
	n, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour, Refused: func(reason string) {
		mu.Lock()
		refused[reason]++
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(ps.release) }) }) // before Close: it publishes what is queued
	count := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(refused)
	}
	tenant := 0 // the tenants that filled their share before one was refused for the part all share
	for ; count()[cluster.RefusedTenants] == 0; tenant++ {
		for n.SendFor("t"+strconv.Itoa(tenant), "elsewhere", 'x') {
		}
	}
	tenant--
	want := map[string]int{cluster.RefusedTenantShare: tenant, cluster.RefusedTenants: 1}
	if got := count(); !maps.Equal(got, want) {
		t.Fatalf("refusals after %d tenants filled their shares = %v, want %v", tenant, got, want)
	}
	for n.Send("elsewhere", 'x') {
	}
	want[cluster.RefusedNoTenant] = 1
	if got := count(); !maps.Equal(got, want) {
		t.Fatalf("refusals once the share of no tenant filled = %v, want %v", got, want)
	}
}

// A burst of messages of no tenant (a nexscope room's frames) fills only
// NoTenantShare: a tenant's message is still queued, and one of no tenant
// SendWait holds is queued once the publisher takes messages out. Before,
// the messages of no tenant filled the whole outbox and the tenant's was
// lost.
func TestNoTenantBurstLeavesTheTenantsTheirShare(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	ps := blockingPubSub{st.PubSub(), make(chan struct{})}
	n, err := cluster.New(cluster.Config{Instance: "a", PubSub: ps, LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(ps.release) }) }) // before Close: it publishes what is queued
	sent := 0
	for n.Send("elsewhere", 'x') && sent < 2*cluster.OutboxSize {
		sent++
	}
	// A batch may be with the publisher, the rest queued.
	if sent < cluster.NoTenantShare || sent > cluster.NoTenantShare+256 {
		t.Fatalf("%d messages of no tenant queued before Send refused one, want NoTenantShare's %d and at most a batch", sent, cluster.NoTenantShare)
	}
	if !n.SendFor("t1", "elsewhere", 'x') {
		t.Fatal("t1's message refused after a burst of no tenant")
	}
	waited := make(chan bool, 1)
	go func() { waited <- n.SendWait(context.Background(), "", "elsewhere", 'x') }()
	release.Do(func() { close(ps.release) })
	if !receive(t, waited, "SendWait once the publisher took messages out") {
		t.Fatal("SendWait not queued")
	}
}
