package relay_test

// Cluster tests on a fake clock: instances of one fleet share a memory
// store through netStore, which can lose chosen pub/sub messages and cut an
// instance off (standing for its death). The beats run inside the
// clock's Advance, so each test steps the fleet beat by beat; every wait is
// for an outcome (a frame, a lease taken, an owner stored), with a deadline.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/internal/cluster/clustertest"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/store"
)

// errCut is what a cut-off instance's store calls fail with.
var errCut = errors.New("netStore: instance cut off")

// netStore is one instance's path to a shared store. Messages it publishes
// for which lose returns true are lost (and recorded); while cut, every
// call fails and nothing reaches its subscriptions. It reports the session
// owners it stores and its removals from the stored ledger.
type netStore struct {
	store.Store
	inst string
	cut  atomic.Bool
	// stuckLeases has lease acquisitions fail and lease-holder reads hang
	// until their context ends; holderCalls counts those reads.
	stuckLeases atomic.Bool
	holderCalls atomic.Int32
	// takenOnRelease, when set, has instance ix take a lease before its
	// release runs (standing for a lease that expired and was taken), and
	// is closed then.
	takenOnRelease chan struct{}
	// lateRemovals, when set (under mu), holds every removal from the
	// stored ledger that starts once a lease was released (released) until
	// it is closed: a removal written too late for the next driver, which
	// reads the stored ledger as it takes the lease.
	lateRemovals chan struct{}
	released     atomic.Bool

	mu   sync.Mutex
	lose func(channel string, msg []byte) bool
	// twice, when set (under mu), has the messages it picks published a
	// second time right after the first, as go-redis resends a PUBLISH
	// whose reply was lost.
	twice func(channel string, msg []byte) bool
	lost  chan []byte // messages lost, for the test to inspect

	owned chan string    // session keys whose owner it stored
	acked chan struct{}  // one per removal from the stored ledger
	gets  map[string]int // reads of stored owners, by session key; under mu

	sent      map[byte]int  // messages published (not lost), by type, counted before the store has them; under mu
	published chan struct{} // signalled after each
}

// count is how many messages of type typ it published (not lost).
func (n *netStore) count(typ byte) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sent[typ]
}

// waitCount waits until it published at least k messages of type typ.
func (n *netStore) waitCount(t *testing.T, typ byte, k int, what string) {
	t.Helper()
	deadline := time.After(relaytest.Timeout)
	for n.count(typ) < k {
		select {
		case <-n.published:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s to publish %d %s (it published %d)", relaytest.Timeout, n.inst, k, what, n.count(typ))
		}
	}
}

// reads is how many times the stored owner of sessionKey was read.
func (n *netStore) reads(sessionKey string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gets[sessionKey]
}

// waitOwned waits until the owner of sessionKey was stored.
func (n *netStore) waitOwned(t *testing.T, sessionKey string) {
	t.Helper()
	deadline := time.After(relaytest.Timeout)
	for {
		select {
		case k := <-n.owned:
			if k == sessionKey {
				return
			}
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s to store the owner of %q", relaytest.Timeout, n.inst, sessionKey)
		}
	}
}

func (n *netStore) setLose(f func(channel string, msg []byte) bool) {
	n.mu.Lock()
	n.lose = f
	n.mu.Unlock()
}

// loseFirst loses the next message of type typ published on a channel
// starting with prefix.
func (n *netStore) loseFirst(prefix string, typ byte) {
	var done bool
	n.setLose(func(channel string, msg []byte) bool {
		if done || !bytes.HasPrefix([]byte(channel), []byte(prefix)) || len(msg) == 0 || msg[0] != typ {
			return false
		}
		done = true
		return true
	})
}

// nextLost waits for the next message netStore lost.
func (n *netStore) nextLost(t *testing.T, what string) []byte {
	t.Helper()
	select {
	case m := <-n.lost:
		return m
	case <-time.After(relaytest.Timeout):
		t.Fatalf("timed out after %v waiting for %s of %s to be lost", relaytest.Timeout, what, n.inst)
	}
	return nil
}

func (n *netStore) PubSub() store.PubSub { return netPubSub{n} }
func (n *netStore) Leases() store.Leases { return netLeases{n} }
func (n *netStore) Owners() store.Owners { return netOwners{n} }
func (n *netStore) Ledger() store.Ledger { return netLedger{n.Store.Ledger(), n} }

type netPubSub struct{ n *netStore }

func (p netPubSub) Publish(ctx context.Context, channel string, msg []byte) error {
	if p.n.cut.Load() {
		return errCut
	}
	// Counted before the store has it: the store delivers it within
	// Publish, and what its receiver does on it (an outcome a test waits
	// for before it reads the counts) must find it counted.
	typ := clustertest.Type(msg)
	p.n.mu.Lock()
	lost := p.n.lose != nil && p.n.lose(channel, msg)
	if !lost {
		p.n.sent[typ]++
	}
	twice := !lost && p.n.twice != nil && p.n.twice(channel, msg)
	p.n.mu.Unlock()
	if lost {
		p.n.lost <- append([]byte(nil), msg...)
		return nil
	}
	err := p.n.Store.PubSub().Publish(ctx, channel, msg)
	if err == nil && twice {
		err = p.n.Store.PubSub().Publish(ctx, channel, msg)
	}
	if err != nil {
		p.n.mu.Lock()
		p.n.sent[typ]--
		p.n.mu.Unlock()
		return err
	}
	select {
	case p.n.published <- struct{}{}:
	default:
	}
	return nil
}

func (p netPubSub) Subscribe(ctx context.Context, channel string) (<-chan []byte, func(), error) {
	in, cancel, err := p.n.Store.PubSub().Subscribe(ctx, channel)
	if err != nil {
		return nil, nil, err
	}
	out := make(chan []byte, store.SubscriptionBuffer)
	go func() {
		defer close(out)
		for m := range in {
			if !p.n.cut.Load() {
				out <- m
			}
		}
	}()
	return out, cancel, nil
}

type netLeases struct{ n *netStore }

func (l netLeases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, bool, error) {
	if l.n.cut.Load() || l.n.stuckLeases.Load() {
		return store.Lease{}, false, errCut
	}
	return l.n.Store.Leases().Acquire(ctx, name, holder, ttl)
}

func (l netLeases) Renew(ctx context.Context, name string, lease store.Lease, ttl time.Duration) (store.Lease, error) {
	if l.n.cut.Load() {
		return store.Lease{}, errCut
	}
	return l.n.Store.Leases().Renew(ctx, name, lease, ttl)
}

func (l netLeases) Release(ctx context.Context, name string, lease store.Lease) error {
	if l.n.cut.Load() {
		return errCut
	}
	l.n.released.Store(true)
	if l.n.takenOnRelease != nil {
		if err := l.n.Store.Leases().Release(ctx, name, lease); err != nil {
			return err
		}
		if _, ok, err := l.n.Store.Leases().Acquire(ctx, name, "ix", time.Hour); !ok || err != nil {
			return fmt.Errorf("netStore: ix did not take %s: %v", name, err)
		}
		close(l.n.takenOnRelease)
	}
	return l.n.Store.Leases().Release(ctx, name, lease)
}

func (l netLeases) Drop(ctx context.Context, name string) error {
	if l.n.cut.Load() {
		return errCut
	}
	return l.n.Store.Leases().Drop(ctx, name)
}

func (l netLeases) Holder(ctx context.Context, name string) (store.Lease, bool, error) {
	if l.n.cut.Load() {
		return store.Lease{}, false, errCut
	}
	if l.n.stuckLeases.Load() { // a store that answers nothing
		l.n.holderCalls.Add(1)
		<-ctx.Done()
		return store.Lease{}, false, ctx.Err()
	}
	return l.n.Store.Leases().Holder(ctx, name)
}

type netOwners struct{ n *netStore }

func (o netOwners) Set(ctx context.Context, tenant, sessionKey string, owner store.Owner, ttl time.Duration) error {
	if o.n.cut.Load() {
		return errCut
	}
	err := o.n.Store.Owners().Set(ctx, tenant, sessionKey, owner, ttl)
	if err == nil {
		select {
		case o.n.owned <- sessionKey:
		default:
		}
	}
	return err
}

func (o netOwners) Get(ctx context.Context, tenant, sessionKey string) (store.Owner, bool, error) {
	if o.n.cut.Load() {
		return store.Owner{}, false, errCut
	}
	o.n.mu.Lock()
	o.n.gets[sessionKey]++
	o.n.mu.Unlock()
	return o.n.Store.Owners().Get(ctx, tenant, sessionKey)
}

func (o netOwners) Delete(ctx context.Context, tenant, sessionKey string) error {
	if o.n.cut.Load() {
		return errCut
	}
	return o.n.Store.Owners().Delete(ctx, tenant, sessionKey)
}

type netLedger struct {
	store.Ledger
	n *netStore
}

func (l netLedger) Append(ctx context.Context, tenant string, recs []store.Record) ([]uint64, error) {
	if l.n.cut.Load() {
		return nil, errCut
	}
	return l.Ledger.Append(ctx, tenant, recs)
}

func (l netLedger) Stage(ctx context.Context, tenant string, recs []store.Record) ([]uint64, func() error, error) {
	if l.n.cut.Load() {
		return nil, nil, errCut
	}
	return l.Ledger.Stage(ctx, tenant, recs)
}

func (l netLedger) Read(ctx context.Context, tenant string, afterSeq uint64, max int, maxBytes int64) ([]store.Record, error) {
	if l.n.cut.Load() {
		return nil, errCut
	}
	return l.Ledger.Read(ctx, tenant, afterSeq, max, maxBytes)
}

func (l netLedger) Ack(ctx context.Context, tenant string, seqs ...uint64) (int, error) {
	if l.n.cut.Load() {
		return 0, errCut
	}
	n, err := l.Ledger.Ack(ctx, tenant, seqs...)
	l.removed(err)
	return n, err
}

func (l netLedger) AckAll(ctx context.Context, acks map[string][]uint64) (int, error) {
	if l.n.cut.Load() {
		return 0, errCut
	}
	l.n.mu.Lock()
	late := l.n.lateRemovals
	l.n.mu.Unlock()
	if late != nil && l.n.released.Load() {
		select {
		case <-late:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	n, err := l.Ledger.AckAll(ctx, acks)
	l.removed(err)
	return n, err
}

// removed signals a removal written to the store.
func (l netLedger) removed(err error) {
	if err == nil {
		select {
		case l.n.acked <- struct{}{}:
		default:
		}
	}
}

// bufferedWatch is a relay.Metrics that follows the number of entries an
// instance's ledger of t1 holds.
type bufferedWatch struct {
	relay.Metrics
	mu      sync.Mutex
	n       int
	reports int
	changed chan struct{}
}

func (w *bufferedWatch) Buffered(tenant string, n int) {
	w.mu.Lock()
	w.n = n
	w.reports++
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// mark returns how many reports came so far.
func (w *bufferedWatch) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reports
}

// wait waits until a report after mark says the ledger holds n entries.
func (w *bufferedWatch) wait(t *testing.T, mark, n int, what string) {
	t.Helper()
	deadline := time.After(relaytest.Timeout)
	for {
		w.mu.Lock()
		cur, fresh := w.n, w.reports > mark
		w.mu.Unlock()
		if fresh && cur == n {
			return
		}
		select {
		case <-w.changed:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s (the driver's ledger holds %d entries, want %d)", relaytest.Timeout, what, cur, n)
		}
	}
}

// beat is the rig's beat: a third of its LeaseTTL.
const beat = time.Second

// rigInstance is one relay of a clusterRig.
type rigInstance struct {
	name     string
	net      *netStore
	h        *relaytest.Harness
	discord  *fakePlatform // chat c1 of t1
	telegram *fakePlatform // chat c2 of t1
	buffered *bufferedWatch
	away     chan string // the tenants it reported unserved (Config.Away)
}

// clusterRig is n relays (i0, i1, ...) of tenant t1 (gateways ga, gb, gc
// with secrets sa, sb, sc) on one memory store and one fake clock.
type clusterRig struct {
	clk      *clocktest.Fake
	st       *store.Memory
	acquired chan string
	lost     chan string // instances that stopped driving, having lost the lease
	inst     []*rigInstance
}

func newClusterRig(t *testing.T, n int) *clusterRig {
	t.Helper()
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	return newClusterRigOn(t, clk, st, n)
}

// newClusterRigOn is newClusterRig on st, a store on clk, which may hold
// records already (what the instances of an earlier run left).
func newClusterRigOn(t *testing.T, clk *clocktest.Fake, st *store.Memory, n int) *clusterRig {
	t.Helper()
	return newClusterRigWith(t, clk, st, n, nil)
}

// newClusterRigWith is newClusterRigOn with each instance's configuration
// changed by tune, when set.
func newClusterRigWith(t *testing.T, clk *clocktest.Fake, st *store.Memory, n int, tune func(*relay.Config)) *clusterRig {
	t.Helper()
	r := &clusterRig{clk: clk, st: st, acquired: make(chan string, 64), lost: make(chan string, 64)}
	tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{
		{ID: "ga", Secrets: []string{"sa"}}, {ID: "gb", Secrets: []string{"sb"}}, {ID: "gc", Secrets: []string{"sc"}}}}}
	for i := range n {
		name := fmt.Sprintf("i%d", i)
		in := &rigInstance{
			name: name,
			net: &netStore{Store: st, inst: name, lost: make(chan []byte, 64),
				owned: make(chan string, 64), acked: make(chan struct{}, 64), gets: make(map[string]int),
				sent: make(map[byte]int), published: make(chan struct{}, 1)},
			discord:  newFake("discord", map[string]string{"c1": "t1"}),
			telegram: newFake("telegram", map[string]string{"c2": "t1"}),
			buffered: &bufferedWatch{Metrics: relayMetricsNop{}, changed: make(chan struct{}, 1)},
			away:     make(chan string, 64),
		}
		log := slog.New(drivingWatch{relaytest.TestLogger(t).Handler(), name, r.acquired, r.lost})
		node, err := cluster.New(cluster.Config{Instance: name, PubSub: in.net.PubSub(), LeaseTTL: 3 * beat, Clock: clk, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Close)
		cfg := relay.Config{
			Tenants: tenants, Platforms: []platform.Platform{in.discord, in.telegram},
			Log:     log,
			Metrics: in.buffered, Store: in.net, Cluster: node, Clock: clk,
			Away: func(tenant string) {
				select { // under the ledger's mutex: never blocks
				case in.away <- tenant:
				default:
				}
			},
			// Neither pings nor the write watchdog come due while the test
			// advances the clock by a few beats.
			PingInterval: time.Hour, WriteTimeout: time.Hour,
		}
		if tune != nil {
			tune(&cfg)
		}
		in.h = relaytest.StartConfig(t, cfg)
		r.inst = append(r.inst, in)
	}
	return r
}

// dial connects gateway id (secret "s" + id[1:]) to instance i and says
// hello for platforms.
func (r *clusterRig) dial(t *testing.T, i int, id string, platforms ...string) *relaytest.Gateway {
	t.Helper()
	gw := r.inst[i].h.DialToken(t, relaytest.Token(id, "s"+id[1:], r.clk.Now()))
	for _, p := range platforms {
		gw.Hello(t, p, "")
	}
	return gw
}

// drivingWatch is a slog.Handler that reports, on acquired, the name of its
// instance each time the instance starts driving the tenant (it logs
// "driving tenant" once it does), and on lost each time it stops driving
// having lost the lease.
type drivingWatch struct {
	slog.Handler
	inst     string
	acquired chan<- string
	lost     chan<- string
}

func (w drivingWatch) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Message == "driving tenant":
		w.acquired <- w.inst
	case strings.HasPrefix(r.Message, "tenant lease lost"):
		w.lost <- w.inst
	}
	return w.Handler.Handle(ctx, r)
}

func (w drivingWatch) WithAttrs(attrs []slog.Attr) slog.Handler {
	return drivingWatch{w.Handler.WithAttrs(attrs), w.inst, w.acquired, w.lost}
}

func (w drivingWatch) WithGroup(name string) slog.Handler {
	return drivingWatch{w.Handler.WithGroup(name), w.inst, w.acquired, w.lost}
}

// waitAcquired waits until an instance took the tenant's lease and started
// driving it, and returns its name.
func (r *clusterRig) waitAcquired(t *testing.T) string {
	t.Helper()
	select {
	case who := <-r.acquired:
		return who
	case <-time.After(relaytest.Timeout):
		t.Fatalf("timed out after %v waiting for an instance to take the tenant's lease", relaytest.Timeout)
	}
	return ""
}

// leaseState is the tenant's lease as the shared store holds it; ok is
// false when nobody holds it at the clock's reading.
type leaseState struct {
	store.Lease
	ok bool
}

// lease reads the tenant's lease from the shared store.
func (r *clusterRig) lease(t *testing.T) leaseState {
	t.Helper()
	l, ok, err := r.st.Leases().Holder(context.Background(), "relay/tenant/t1")
	if err != nil {
		t.Fatal(err)
	}
	return leaseState{l, ok}
}

// requireUntaken fails t unless the store still holds the tenant's lease
// was, live: same holder and token (each take of a free lease bumps the
// token). A beat nudged during the advance that runs late can change
// nothing: the clock stands still until the next Advance, and a lease
// still live can be taken by no Acquire (nor can its holder's tenure end),
// so the check does not depend on which beats ran yet.
func (r *clusterRig) requireUntaken(t *testing.T, was leaseState, what string) {
	t.Helper()
	if l := r.lease(t); !l.ok || l.Holder != was.Holder || l.Token != was.Token {
		t.Fatalf("during %s the lease went from %s's (token %d) to %+v: taken, or left free for the next bid",
			what, was.Holder, was.Token, l)
	}
}

// waitTaken waits until the store holds the tenant's lease under another
// token than was's (a take of a free lease; a beat nudged by a bid may
// still be on its way), and returns it.
func (r *clusterRig) waitTaken(t *testing.T, was leaseState, what string) leaseState {
	t.Helper()
	deadline := time.Now().Add(relaytest.Timeout)
	for {
		l := r.lease(t)
		if l.ok && l.Token != was.Token {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: the lease is %+v, was %s's (token %d)",
				relaytest.Timeout, what, l, was.Holder, was.Token)
		}
		runtime.Gosched() // polling: the store signals nothing
	}
}

// advance moves the clock k beats, one at a time: each instance's beat
// runs inside the Advance that reaches it.
func (r *clusterRig) advance(k int) {
	for range k {
		r.clk.Advance(beat)
	}
}

// waitFramesSent waits until instance i, the driver, counts n frames as
// sent on its links to sockets on other instances. A frame is queued
// before its link counts it (cluster.Link.Send: a beat queued meanwhile
// never announces a frame queued after it), so the publisher may lose it
// before the driver counts it: a beat that ran in between would announce
// the frames before it only, and the loss would be made up a beat later.
func (r *clusterRig) waitFramesSent(t *testing.T, i int, n uint64, what string) {
	t.Helper()
	deadline := time.Now().Add(relaytest.Timeout)
	for relay.ClusterFramesSent(r.inst[i].h.Server, "t1") < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s to count %s as sent (it counts %d frames, want %d)",
				relaytest.Timeout, r.inst[i].name, what, relay.ClusterFramesSent(r.inst[i].h.Server, "t1"), n)
		}
		runtime.Gosched() // polling: the count signals nothing
	}
}

// step advances the clock one beat and waits until the driver i0 has
// taken the roster i1 sent at that beat: it matched (and reports true), or
// the driver asked for the serves again and i1 sent them. Stepping so, the
// clock never outruns the messages (several beats at once could pass
// before the driver hears from i1, which would forget i1's sockets).
func (r *clusterRig) step(t *testing.T) (matched bool) {
	t.Helper()
	i0, i1 := r.inst[0], r.inst[1]
	asks, serves := i0.net.count(relay.ClusterMsgAskServe), i1.net.count(relay.ClusterMsgServe)
	r.advance(1)
	now := r.clk.Now()
	deadline := time.After(relaytest.Timeout)
	poll := time.NewTicker(time.Millisecond) // a match signals nothing
	defer poll.Stop()
	for {
		if relay.ClusterRosterMatched(i0.h.Server, "t1", "i1").Equal(now) {
			return true
		}
		if i0.net.count(relay.ClusterMsgAskServe) > asks && i1.net.count(relay.ClusterMsgServe) > serves {
			return false
		}
		select {
		case <-i0.net.published:
		case <-i1.net.published:
		case <-poll.C:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for the driver to take i1's roster of the beat at %v", relaytest.Timeout, now)
		}
	}
}

// beatMatched steps k beats, each of whose rosters must match: the fleet
// is idle and its instances agree.
func (r *clusterRig) beatMatched(t *testing.T, k int) {
	t.Helper()
	for i := range k {
		if !r.step(t) {
			t.Fatalf("the driver did not match i1's roster at beat %d of %d", i+1, k)
		}
	}
}

// waitRemoteSeats waits until i0, the driver, keeps n sockets of other
// instances.
func (r *clusterRig) waitRemoteSeats(t *testing.T, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(relaytest.Timeout)
	for relay.ClusterRemoteSeats(r.inst[0].h.Server, "t1") != n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for the driver to keep %d remote seats (%s); it keeps %d",
				relaytest.Timeout, n, what, relay.ClusterRemoteSeats(r.inst[0].h.Server, "t1"))
		}
		runtime.Gosched() // polling: the count signals nothing
	}
}

// driven returns a rig where i0 drives t1 for ga (telegram only, so it
// never takes discord inbound) and gb on i1 serves discord, and the driver
// knows gb: a first discord inbound reached it and was acknowledged.
func drivenRig(t *testing.T, n int) (r *clusterRig, ga, gb *relaytest.Gateway) {
	t.Helper()
	r = newClusterRig(t, n)
	ga = r.dial(t, 0, "ga", "telegram")
	if who := r.waitAcquired(t); who != "i0" {
		t.Fatalf("%s took the tenant's lease, want i0 (the only one with a socket)", who)
	}
	gb = r.dial(t, 1, "gb", "discord")
	mark := r.inst[0].buffered.mark()
	r.inst[1].discord.deliver("t1", "c1", "u0", "e0")
	ev, id := gb.NextInbound(t)
	if ev.Text != "e0" {
		t.Fatalf("gb got %q, want e0", ev.Text)
	}
	gb.Ack(t, id)
	r.inst[0].buffered.wait(t, mark, 0, "e0's ack to reach the driver")
	return r, ga, gb
}

// A lost wake is made up by the driver's next beat, which reads the
// stored ledger anyway.
func TestClusterLostWakeIsMadeUpByTheNextBeat(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	r.inst[1].net.setLose(func(channel string, _ []byte) bool { return channel == relay.ClusterWakeChannel })
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	r.inst[1].net.nextLost(t, "the wake for e1")
	r.advance(1)
	if ev, _ := gb.NextInbound(t); ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
}

// A lost serve (a socket's announcement) is sent again after the next
// beat, whose roster the driver does not match and answers by asking for
// the serves again; the entry waiting for a socket then goes to it.
func TestClusterLostServeIsSentAgainAtTheNextBeat(t *testing.T) {
	r := newClusterRig(t, 2)
	r.dial(t, 0, "ga", "telegram")
	r.waitAcquired(t)
	r.inst[1].net.loseFirst(cluster.Inbox(""), relay.ClusterMsgServe)
	gb := r.dial(t, 1, "gb", "discord")
	r.inst[1].net.nextLost(t, "gb's serve")
	mark := r.inst[0].buffered.mark()
	r.inst[0].discord.deliver("t1", "c1", "u0", "e0")
	r.inst[0].buffered.wait(t, mark, 1, "e0 to be stored and taken in by the driver")
	r.advance(1)
	if ev, _ := gb.NextInbound(t); ev.Text != "e0" {
		t.Fatalf("gb got %q, want e0", ev.Text)
	}
}

// A frame lost on its way to a socket on another instance, with none
// after it, is seen at the driver's next beat, whose tally (it counts the
// frames sent) the socket's instance does not match: it asks for a hold of
// each link, which names the last frame sent; the socket's link breaks,
// and the frame is forwarded again with the same bufferId.
func TestClusterLostFrameIsForwardedAgain(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	r.inst[0].net.loseFirst(cluster.Inbox("i1"), relay.ClusterMsgFrame)
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	lost := r.inst[0].net.nextLost(t, "e1's frame")
	r.waitFramesSent(t, 0, 2, "e1's frame") // e0's and e1's
	r.advance(1)
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
	if !bytes.Contains(lost, []byte(`"bufferId":"`+id+`"`)) {
		t.Fatalf("e1 forwarded again as %s; the lost frame was %q", id, lost)
	}
	mark := r.inst[0].buffered.mark()
	gb.Ack(t, id)
	r.inst[0].buffered.wait(t, mark, 0, "e1's ack to reach the driver")
}

// A frame lost with another after it is seen at that one, without a beat:
// the socket gets both again, in order (a session's order holds across a
// loss).
func TestClusterLostFrameKeepsTheSessionsOrder(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	r.inst[0].net.loseFirst(cluster.Inbox("i1"), relay.ClusterMsgFrame)
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	r.inst[0].net.nextLost(t, "e1's frame")
	r.inst[1].discord.deliver("t1", "c1", "u1", "e2")
	for _, want := range []string{"e1", "e2"} {
		ev, id := gb.NextInbound(t)
		if ev.Text != want {
			t.Fatalf("gb got %q, want %s: the session's order broke at the lost frame", ev.Text, want)
		}
		gb.Ack(t, id)
	}
}

// A lost frame whose instance's ask for holds is lost too is made up a
// beat later: the tally is sent every beat, and still does not match.
func TestClusterLostFrameAndLostAskAreMadeUpAtTheNextBeat(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	r.inst[0].net.loseFirst(cluster.Inbox("i1"), relay.ClusterMsgFrame)
	r.inst[1].net.loseFirst(cluster.Inbox("i0"), relay.ClusterMsgAskHolds)
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	lost := r.inst[0].net.nextLost(t, "e1's frame")
	r.waitFramesSent(t, 0, 2, "e1's frame")
	r.advance(1)
	r.inst[1].net.nextLost(t, "the ask for holds")
	r.advance(1)
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" || !bytes.Contains(lost, []byte(`"bufferId":"`+id+`"`)) {
		t.Fatalf("gb got %q as %s, want e1 as in the lost frame %q", ev.Text, id, lost)
	}
}

// An idle socket on another instance costs no message of its own at the
// beats (no serve, no hold): each instance's roster to the driver and the
// driver's tally back keep it, well past LostBeats beats, and it still
// gets the tenant's inbound.
func TestClusterIdleSocketCostsNoMessageOfItsOwn(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	r.dial(t, 1, "gc", "telegram")
	i0, i1 := r.inst[0].net, r.inst[1].net
	r.waitRemoteSeats(t, 2, "gb and gc")
	serves, holds := i1.count(relay.ClusterMsgServe), i0.count(relay.ClusterMsgHold)
	rosters, tallies := i1.count(relay.ClusterMsgRoster), i0.count(relay.ClusterMsgTally)
	beats := 2*cluster.LostBeats + 1
	r.beatMatched(t, beats)
	i1.waitCount(t, relay.ClusterMsgRoster, rosters+beats, "rosters, one a beat")
	i0.waitCount(t, relay.ClusterMsgTally, tallies+beats, "tallies, one a beat")
	if n := i1.count(relay.ClusterMsgServe) - serves; n != 0 {
		t.Errorf("i1 announced its idle sockets %d times in %d beats, want 0", n, beats)
	}
	if n := i0.count(relay.ClusterMsgHold) - holds; n != 0 {
		t.Errorf("the driver sent %d holds in %d beats, want 0", n, beats)
	}
	for _, typ := range []byte{relay.ClusterMsgAskServe, relay.ClusterMsgAskHolds} {
		if n := i0.count(typ) + i1.count(typ); n != 0 {
			t.Errorf("%d asks of type %c in an idle fleet, want 0 (a roster or a tally did not match)", n, typ)
		}
	}
	if n := relay.ClusterRemoteSeats(r.inst[0].h.Server, "t1"); n != 2 {
		t.Fatalf("the driver keeps %d remote seats, want 2 (gb and gc)", n)
	}
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	if ev, _ := gb.NextInbound(t); ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
}

// A lost detach (a socket that closed) is repaired by the roster: the
// driver's no longer matches the instance's, the instance announces the
// sockets it has again, and the one it no longer has is forgotten
// LostBeats beats later; what it held goes to another socket with the
// same bufferId, and the instance's other socket stays.
func TestClusterLostDetachIsRepairedByTheRoster(t *testing.T) {
	r, ga, gb := drivenRig(t, 2)
	r.dial(t, 1, "gc", "telegram")
	r.waitRemoteSeats(t, 2, "gb and gc")
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
	r.inst[1].net.loseFirst(cluster.Inbox("i0"), relay.ClusterMsgDetach)
	_ = gb.CloseNow()
	r.inst[1].net.nextLost(t, "gb's detach")
	ga.Hello(t, "discord", "")
	for range cluster.LostBeats {
		if r.step(t) {
			t.Fatal("the driver matched i1's roster while it kept gb's seat")
		}
	}
	// The next beat forgets gb's seat, before i1's roster, which matches.
	r.beatMatched(t, 1)
	ev, again := ga.NextInbound(t)
	if ev.Text != "e1" || again != id {
		t.Fatalf("after gb's lost detach ga got %q as %s, want e1 as %s", ev.Text, again, id)
	}
	if n := relay.ClusterRemoteSeats(r.inst[0].h.Server, "t1"); n != 1 {
		t.Fatalf("the driver keeps %d remote seats, want 1 (gc)", n)
	}
}

// The seats an instance's rosters kept (LostBeats beats and more with no
// serve) go with the instance: once it is silent (cut off, standing for
// its death), the driver forgets them LostBeats beats after its last
// roster, and what its socket held goes to
// another socket with the same bufferId.
func TestClusterSeatsKeptByRostersGoWithTheirInstance(t *testing.T) {
	r, ga, gb := drivenRig(t, 2)
	serves := r.inst[1].net.count(relay.ClusterMsgServe)
	r.beatMatched(t, cluster.LostBeats+1)
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
	if n := r.inst[1].net.count(relay.ClusterMsgServe); n != serves {
		t.Fatalf("i1 announced gb %d times more; want its seat kept by rosters alone", n-serves)
	}
	r.inst[1].net.cut.Store(true)
	_ = gb.CloseNow()
	ga.Hello(t, "discord", "")
	r.advance(cluster.LostBeats + 1)
	ev, again := ga.NextInbound(t)
	if ev.Text != "e1" || again != id {
		t.Fatalf("after i1 went silent ga got %q as %s, want e1 as %s", ev.Text, again, id)
	}
	if n := relay.ClusterRemoteSeats(r.inst[0].h.Server, "t1"); n != 0 {
		t.Fatalf("the driver keeps %d remote seats of a silent instance, want 0", n)
	}
}

// A lost ack is seen at the instance's next roster (it counts the acks
// sent), which has the driver ask for the serves again, each naming the
// last ack sent: the link breaks, the entry is forwarded again (same
// bufferId), and the gateway's second ack removes it.
func TestClusterLostAckIsAnsweredByARedelivery(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	r.inst[1].net.loseFirst(cluster.Inbox("i0"), relay.ClusterMsgAck)
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
	gb.Ack(t, id)
	r.inst[1].net.nextLost(t, "e1's ack")
	r.advance(1)
	ev, again := gb.NextInbound(t)
	if ev.Text != "e1" || again != id {
		t.Fatalf("after the lost ack gb got %q as %s, want e1 again as %s", ev.Text, again, id)
	}
	mark := r.inst[0].buffered.mark()
	gb.Ack(t, again)
	r.inst[0].buffered.wait(t, mark, 0, "e1's second ack to remove it")
}

// An ack that reaches the driver twice (go-redis sent its PUBLISH again)
// is taken once: before, the copy looked like a gap in the socket's acks,
// which broke its link, and the entries it held unacknowledged reached
// the gateway a second time.
func TestClusterResentAckKeepsTheLink(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	r.inst[1].discord.deliver("t1", "c1", "u2", "e2")
	ev1, id1 := gb.NextInbound(t)
	if ev2, _ := gb.NextInbound(t); ev1.Text != "e1" || ev2.Text != "e2" {
		t.Fatalf("gb got %q then %q, want e1 then e2", ev1.Text, ev2.Text)
	}
	r.inst[1].net.mu.Lock()
	r.inst[1].net.twice = func(_ string, msg []byte) bool { return clustertest.Type(msg) == relay.ClusterMsgAck }
	r.inst[1].net.mu.Unlock()
	mark := r.inst[0].buffered.mark()
	gb.Ack(t, id1)
	r.inst[0].buffered.wait(t, mark, 1, "e1's ack to reach the driver")
	r.inst[1].discord.deliver("t1", "c1", "u3", "e3")
	if ev, _ := gb.NextInbound(t); ev.Text != "e3" {
		t.Fatalf("after e1's ack arrived twice gb got %q, want e3 (e2 is unacknowledged, not lost)", ev.Text)
	}
}

// A frame under the number of one taken that is not its copy (a driver
// that lost its lease and took it back numbers the link from 1 again)
// breaks the link as a gap does: dropped as a copy, the entry it carries
// would never reach the socket while both ends' counts agreed.
func TestClusterRenumberedFrameBreaksTheLink(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	i0 := r.inst[0].net
	var frame []byte
	var inbox string
	i0.mu.Lock()
	i0.twice = func(channel string, msg []byte) bool {
		if clustertest.Type(msg) == relay.ClusterMsgFrame {
			frame, inbox = append([]byte(nil), msg...), channel
		}
		return false
	}
	i0.mu.Unlock()
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
	i0.mu.Lock()
	i0.twice = nil
	other := reencode(t, frame, "i0", []byte(`"e1"`), []byte(`"e9"`))
	i0.mu.Unlock()
	if err := i0.Store.PubSub().Publish(context.Background(), inbox, other); err != nil {
		t.Fatal(err)
	}
	if ev, again := gb.NextInbound(t); ev.Text != "e1" || again != id {
		t.Fatalf("after another frame under e1's number gb got %q as %s, want e1 again as %s (the link broken)", ev.Text, again, id)
	}
}

// A serve that reaches the driver again after acks that followed it (go-
// redis sent its PUBLISH again) is a copy: before, its count of acks sent,
// below those the driver took since, looked like a link the socket's
// instance no longer knew, which broke it, and the entries the socket held
// unacknowledged reached the gateway a second time.
func TestClusterResentServeKeepsTheLink(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	var serve []byte
	var inbox string
	r.inst[1].net.mu.Lock()
	r.inst[1].net.twice = func(channel string, msg []byte) bool {
		if clustertest.Type(msg) == relay.ClusterMsgServe {
			serve, inbox = append([]byte(nil), msg...), channel
		}
		return false
	}
	r.inst[1].net.mu.Unlock()
	serves := r.inst[1].net.count(relay.ClusterMsgServe)
	gb.Hello(t, "telegram", "") // a serve, with e0's ack counted
	r.inst[1].net.waitCount(t, relay.ClusterMsgServe, serves+1, "gb's serve for telegram")
	r.inst[1].net.mu.Lock()
	r.inst[1].net.twice = nil
	copied, channel := serve, inbox
	r.inst[1].net.mu.Unlock()

	mark := r.inst[0].buffered.mark()
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	_, id := gb.NextInbound(t)
	gb.Ack(t, id) // an ack after the serve
	r.inst[0].buffered.wait(t, mark, 0, "e1's ack to reach the driver")
	r.inst[1].discord.deliver("t1", "c1", "u2", "e2")
	r.inst[1].discord.deliver("t1", "c1", "u3", "e3")
	ev2, _ := gb.NextInbound(t)
	ev3, id3 := gb.NextInbound(t)
	if ev2.Text != "e2" || ev3.Text != "e3" {
		t.Fatalf("gb got %q then %q, want e2 then e3", ev2.Text, ev3.Text)
	}

	// The serve comes again, then e3's ack: once e3 is gone, the driver
	// has taken the copy.
	if err := r.inst[1].net.Store.PubSub().Publish(context.Background(), channel, copied); err != nil {
		t.Fatal(err)
	}
	mark = r.inst[0].buffered.mark()
	gb.Ack(t, id3)
	r.inst[0].buffered.wait(t, mark, 1, "e3's ack to reach the driver after the serve's copy")
	r.inst[1].discord.deliver("t1", "c1", "u4", "e4")
	if ev, _ := gb.NextInbound(t); ev.Text != "e4" {
		t.Fatalf("after the serve arrived again gb got %q, want e4 (e2 is unacknowledged, not lost)", ev.Text)
	}
}

// A serve of a socket's earlier link that reaches the driver after the
// next link's serve (go-redis sent its PUBLISH again, late) is a copy:
// before, the driver took it for the socket's link, dropped the live one
// and kept a broken seat of a generation the socket's instance had ended,
// so the socket got nothing more until the beats repaired the link.
func TestClusterResentServeOfAnEarlierLinkKeepsTheLink(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	i1 := r.inst[1].net
	var serve []byte
	var inbox string
	i1.mu.Lock()
	i1.twice = func(channel string, msg []byte) bool {
		if clustertest.Type(msg) == relay.ClusterMsgServe {
			serve, inbox = append([]byte(nil), msg...), channel
		}
		return false
	}
	i1.mu.Unlock()
	serves := i1.count(relay.ClusterMsgServe)
	gb.Hello(t, "telegram", "") // a serve of the link's first generation
	i1.waitCount(t, relay.ClusterMsgServe, serves+1, "gb's serve for telegram")
	i1.mu.Lock()
	i1.twice = nil
	copied, channel := serve, inbox
	i1.mu.Unlock()

	// A lost frame with another after it breaks the link: gb's next serve
	// announces its second generation, which gets both again.
	r.inst[0].net.loseFirst(cluster.Inbox("i1"), relay.ClusterMsgFrame)
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	r.inst[0].net.nextLost(t, "e1's frame")
	r.inst[1].discord.deliver("t1", "c1", "u1", "e2")
	_, id1 := gb.NextInbound(t)
	ev2, id2 := gb.NextInbound(t)
	if ev2.Text != "e2" {
		t.Fatalf("gb got %q, want e2", ev2.Text)
	}
	gb.Ack(t, id1)

	// The first generation's serve comes again, then e2's ack: once e2 is
	// gone, the driver has taken the copy.
	if err := i1.Store.PubSub().Publish(context.Background(), channel, copied); err != nil {
		t.Fatal(err)
	}
	mark := r.inst[0].buffered.mark()
	gb.Ack(t, id2)
	r.inst[0].buffered.wait(t, mark, 0, "e2's ack to reach the driver after the serve's copy")
	r.inst[1].discord.deliver("t1", "c1", "u3", "e3")
	if ev, _ := gb.NextInbound(t); ev.Text != "e3" {
		t.Fatalf("after the earlier link's serve arrived again gb got %q, want e3", ev.Text)
	}
}

// An interrupt reads the session's stored owner at most once, wherever it
// goes: the instance it arrives at reads it and, finding none, forwards the
// interrupt to the driver, which looks in its memory only.
func TestClusterInterruptReadsTheStoredOwnerOnce(t *testing.T) {
	r, ga, gb := drivenRig(t, 2)
	// ga, on the driver, owns a telegram session, and the owner is stored.
	known := sessionKey("telegram", "c2", "u2")
	r.inst[0].telegram.deliver("t1", "c2", "u2", "t0")
	_, id := ga.NextInbound(t)
	ga.Ack(t, id)
	r.inst[0].net.waitOwned(t, known)

	unknown := sessionKey("discord", "c1", "nobody")
	gb.Send(t, map[string]any{"type": "interrupt", "session_key": unknown})
	// The second interrupt follows the first to the driver's instance (the
	// stored owner is there), in order: once ga has it, the driver has
	// handled the first.
	gb.Send(t, map[string]any{"type": "interrupt", "session_key": known})
	if f := ga.Next(t, contract.TypeInterruptInbound); f.SessionKey != known {
		t.Fatalf("ga got interrupt_inbound for %q, want %q", f.SessionKey, known)
	}
	reads := 0
	for _, in := range r.inst {
		reads += in.net.reads(unknown)
	}
	if reads != 1 {
		t.Fatalf("the stored owner of the unowned session was read %d times for one interrupt, want 1", reads)
	}
}

// An interrupt on an instance that does not know the tenant's driver reads
// the lease's holder bounded by the lease TTL, as it reads the stored
// owner: a store that answers nothing holds the connection's reader (which
// handles the interrupt) that long, not until the connection ends.
func TestClusterInterruptLeaseReadIsBounded(t *testing.T) {
	r := newClusterRig(t, 2)
	r.dial(t, 0, "ga", "telegram")
	if who := r.waitAcquired(t); who != "i0" {
		t.Fatalf("%s took the tenant's lease, want i0 (the only one with a socket)", who)
	}
	// i1's beats fail: it does not know the driver.
	r.inst[1].net.stuckLeases.Store(true)
	gb := r.dial(t, 1, "gb", "discord")
	gb.Send(t, map[string]any{"type": "interrupt", "session_key": sessionKey("discord", "c1", "nobody")})
	gb.Hello(t, "discord", "") // answered once the interrupt was handled
	if n := r.inst[1].net.holderCalls.Load(); n != 1 {
		t.Fatalf("the interrupt read the lease's holder %d times, want 1 (the test needs i1 not to know the driver)", n)
	}
}

// An instance that dies (cut off: its announcements, its socket's close
// and the frames sent to it are lost) is forgotten by the driver after
// three beats without a serve, and what its socket held unacknowledged
// goes to another socket with the same bufferId.
func TestClusterSilentInstanceIsForgottenAfterThreeBeats(t *testing.T) {
	r, ga, gb := drivenRig(t, 2)
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
	r.inst[1].net.cut.Store(true)
	_ = gb.CloseNow()
	ga.Hello(t, "discord", "")
	r.advance(3 + 1)
	ev, again := ga.NextInbound(t)
	if ev.Text != "e1" || again != id {
		t.Fatalf("after i1 went silent ga got %q as %s, want e1 as %s", ev.Text, again, id)
	}
}

// The driver keeps its lease while it beats; when it dies another
// instance holding sockets of the tenant takes the lease at the first beat
// after it expired (LeaseTTL, three beats), and an interrupt sent right
// after the takeover reaches the session's owner: the owner is read from
// the store, as the new driver's memory knows none yet. The interrupt is
// sent from both gateways, one on the new driver and one not.
func TestClusterInterruptRightAfterTakeoverReachesTheOwner(t *testing.T) {
	r := newClusterRig(t, 3)
	ga := r.dial(t, 0, "ga", "telegram")
	r.waitAcquired(t)
	gws := []*relaytest.Gateway{r.dial(t, 1, "gb", "discord"), r.dial(t, 2, "gc", "discord")}
	key := sessionKey("discord", "c1", "u0")

	// e0 goes to whichever of gb and gc the driver attached first: that
	// gateway owns session u0.
	r.inst[1].discord.deliver("t1", "c1", "u0", "e0")
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	got := make(chan int, 2)
	for k, gw := range gws {
		go func() {
			if f, err := gw.Client.Next(ctx, contract.TypeInbound); err == nil {
				_ = gw.Client.Ack(ctx, f.BufferID)
				got <- k
			}
		}()
	}
	var owner int
	select {
	case owner = <-got:
	case <-ctx.Done():
		t.Fatalf("timed out after %v waiting for e0 at gb or gc", relaytest.Timeout)
	}
	cancel()
	select {
	case k := <-r.inst[0].net.owned:
		if k != key {
			t.Fatalf("the driver stored the owner of %q, want %q", k, key)
		}
	case <-time.After(relaytest.Timeout):
		t.Fatalf("timed out after %v waiting for the driver to store session u0's owner", relaytest.Timeout)
	}
	// And e0's removal, so the new driver does not deliver it again (which
	// could make the other gateway its owner).
	select {
	case <-r.inst[0].net.acked:
	case <-time.After(relaytest.Timeout):
		t.Fatalf("timed out after %v waiting for the driver to remove e0 from the store", relaytest.Timeout)
	}

	// Beats renew the lease: nobody takes it while i0 lives.
	held, tenure := r.lease(t), relay.ClusterTenure(r.inst[0].h.Server, "t1")
	if !held.ok || held.Holder != "i0" || tenure == nil {
		t.Fatalf("lease %+v, i0's tenure %v: want i0 holding and driving", held, tenure)
	}
	r.advance(6)
	r.requireUntaken(t, held, "six beats while i0 renews it")
	if now := relay.ClusterTenure(r.inst[0].h.Server, "t1"); now != tenure || !tenure.Held() {
		t.Fatalf("i0 lost its tenure (now %p, was %p) in six beats while it renewed the lease", now, tenure)
	}

	// i0 dies.
	r.inst[0].net.cut.Store(true)
	_ = ga.CloseNow()
	var next string
	for k := 1; next == ""; k++ {
		if k > 3+1 {
			t.Fatalf("no instance took the lease %d beats after its holder died (LeaseTTL is 3 beats)", k-1)
		}
		r.advance(1)
		if l := r.lease(t); !l.ok || l.Token != held.Token {
			next = r.waitTaken(t, held, "the takeover after i0 died").Holder
		}
	}
	t.Logf("gateway %d owns the session; %s took the tenant over", owner, next)
	for _, gw := range gws {
		gw.Send(t, map[string]any{"type": "interrupt", "session_key": key})
		if f := gws[owner].Next(t, contract.TypeInterruptInbound); f.SessionKey != key || f.ChatID != "c1" {
			t.Fatalf("interrupt_inbound for %q in %q, want %q in c1", f.SessionKey, f.ChatID, key)
		}
	}
}

// A driver cut off from the store stops driving before its lease expires
// there (its tenure's view ends an eighth of the TTL earlier), and the
// other instance holding sockets of the tenant takes the lease at that
// expiry, which it learnt at its last bid, not at a later beat.
func TestClusterCutOffDriverStopsBeforeTheTakeover(t *testing.T) {
	r := newClusterRig(t, 2)
	r.dial(t, 0, "ga", "telegram")
	if who := r.waitAcquired(t); who != "i0" {
		t.Fatalf("%s took the tenant's lease, want i0 (the only one with a socket)", who)
	}
	r.dial(t, 1, "gb", "discord")
	r.advance(3) // renewals, and i1's bids
	l, ok, err := r.st.Leases().Holder(context.Background(), "relay/tenant/t1")
	if err != nil || !ok || l.Holder != "i0" {
		t.Fatalf("lease %+v %v %v, want i0's", l, ok, err)
	}
	r.inst[0].net.cut.Store(true)
	// Up to a millisecond before the expiry: i0's view ended, nobody else
	// may take the lease yet.
	for until := l.Expires.Add(-time.Millisecond); r.clk.Now().Before(until); {
		r.clk.Advance(min(100*time.Millisecond, until.Sub(r.clk.Now())))
	}
	select {
	case who := <-r.lost:
		if who != "i0" {
			t.Fatalf("%s stopped driving, want i0", who)
		}
	case <-time.After(relaytest.Timeout):
		t.Fatalf("timed out after %v waiting for the cut-off driver to stop driving before its lease's expiry", relaytest.Timeout)
	}
	r.requireUntaken(t, leaseState{Lease: l, ok: true}, "the clock up to a millisecond before the lease's expiry")
	r.clk.Advance(time.Millisecond) // the expiry: i1's bid
	if who := r.waitAcquired(t); who != "i1" {
		t.Fatalf("%s took the lease at its expiry, want i1", who)
	}
}

// relayMetricsNop is a relay.Metrics that records nothing.
type relayMetricsNop struct{}

func (relayMetricsNop) ConnOpened(string)                              {}
func (relayMetricsNop) ConnClosed(string)                              {}
func (relayMetricsNop) Refused(string)                                 {}
func (relayMetricsNop) FrameIgnored(string, string)                    {}
func (relayMetricsNop) Inbound(string, string, string)                 {}
func (relayMetricsNop) Delivered(string, time.Duration)                {}
func (relayMetricsNop) Outbound(string, string, string, time.Duration) {}
func (relayMetricsNop) Buffered(string, int)                           {}

// reencode returns msg, a message as an instance's cluster node encodes it
// (a type byte, then uvarint-prefixed fields, the sender first), as sent
// by from with old replaced by new in its fields.
func reencode(t *testing.T, msg []byte, from string, old, new []byte) []byte {
	t.Helper()
	var fields [][]byte
	for rest := msg[1:]; len(rest) > 0; {
		l, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < l {
			t.Fatalf("malformed cluster message %q", msg)
		}
		fields = append(fields, bytes.ReplaceAll(rest[k:k+int(l)], old, new))
		rest = rest[k+int(l):]
	}
	return clustertest.Encode(clustertest.Type(msg), from, fields[1:]...)
}

// A frame for a socket on another instance from an instance that is not
// the driver that instance follows (a former driver that woke from a pause
// past its lease, or whose outbox still held frames when it lost the
// lease) never reaches the socket, even when its link's generation and
// next number match (every driver's links start at generation 1); nor
// does it take the number of the driver's next frame.
func TestClusterFrameFromAnotherThanTheDriverIsDropped(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	r.inst[0].net.loseFirst(cluster.Inbox("i1"), relay.ClusterMsgFrame)
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	lost := r.inst[0].net.nextLost(t, "e1's frame")
	stale := reencode(t, lost, "i9", []byte(`"e1"`), []byte(`"stale"`))
	if err := r.st.PubSub().Publish(context.Background(), cluster.Inbox("i1"), stale); err != nil {
		t.Fatal(err)
	}
	r.waitFramesSent(t, 0, 2, "e1's frame") // e0's and e1's
	r.advance(1)                            // the tally shows e1's frame lost
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1: a frame from i9, which is not t1's driver, reached it", ev.Text)
	}
	mark := r.inst[0].buffered.mark()
	gb.Ack(t, id)
	r.inst[0].buffered.wait(t, mark, 0, "e1's ack to reach the driver")
}

// A socket on an instance that does not drive its tenant forwards an
// inbound_ack to the driver only for an inbound it was sent: a flood of
// acks of ids it never received (guessed, repeated) costs no message
// between instances, whose outbox every tenant's frames, acks and
// interrupts share (a full one loses them). Its real acks still go.
func TestClusterAcksOfUnsentIdsStayOnTheSocketsInstance(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	i1 := r.inst[1].net
	acks := i1.count(relay.ClusterMsgAck)
	const flood = 5000
	var msg strings.Builder
	for n := range flood {
		fmt.Fprintf(&msg, `{"type": "inbound_ack", "bufferId": "guess-%d"}`+"\n", n)
	}
	gb.SendRaw(t, msg.String())
	gb.Hello(t, "discord", "") // answered once the flood before it was read
	// A real ack after the flood: the outbox keeps its order, so once the
	// driver took it every ack before it was published.
	mark := r.inst[0].buffered.mark()
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
	gb.Ack(t, id)
	r.inst[0].buffered.wait(t, mark, 0, "e1's ack to reach the driver")
	i1.waitCount(t, relay.ClusterMsgAck, acks+1, "e1's ack")
	if n := i1.count(relay.ClusterMsgAck) - acks; n != 1 {
		t.Fatalf("i1 sent the driver %d acks for %d acks of ids gb was never sent and one real one, want 1", n, flood)
	}
}

// A repeated hello or going_idle changes nothing, so a socket on an
// instance that does not drive its tenant announces nothing for it: a
// gateway repeating them cannot fill the outbox every tenant's messages
// between instances share. The first going_idle, a change, is announced.
func TestClusterRepeatedHelloAndGoingIdleAnnounceNothing(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	i1 := r.inst[1].net
	serves := i1.count(relay.ClusterMsgServe)
	const repeats = 500
	var msg strings.Builder
	for range repeats {
		msg.WriteString(`{"type":"hello","platform":"discord"}` + "\n")
	}
	for range repeats {
		msg.WriteString(`{"type":"going_idle"}` + "\n")
	}
	gb.SendRaw(t, msg.String())
	for range repeats {
		gb.Next(t, contract.TypeGoingIdleAck) // the last: every frame before it was handled
	}
	// gc's serve follows gb's in the outbox, which keeps its order.
	r.dial(t, 1, "gc", "telegram")
	i1.waitCount(t, relay.ClusterMsgServe, serves+2, "gb's going idle and gc's serve")
	if n := i1.count(relay.ClusterMsgServe) - serves; n != 2 {
		t.Fatalf("i1 sent %d serves for %d repeated hellos, %d going_idle and one new socket, want 2", n, repeats, repeats)
	}
}

// Inbound stored for a tenant no instance drives, none having a socket of
// it (every gateway sleeps, and the instances restarted or the driver
// left), is still reported unserved, so the gateways are woken: an
// instance that stores a delivery with no live driver known checks the
// tenant's lease at its next beat and, finding it free, drives the tenant.
func TestClusterInboundForATenantNobodyDrivesWakesItsGateways(t *testing.T) {
	r := newClusterRig(t, 2)
	r.inst[1].discord.deliver("t1", "c1", "u0", "e0")
	select {
	case tenant := <-r.inst[1].away:
		if tenant != "t1" {
			t.Fatalf("i1 reported %s unserved, want t1", tenant)
		}
	case <-time.After(relaytest.Timeout):
		t.Fatalf("timed out after %v waiting for i1, which stored e0, to report t1's inbound unserved (the wake poke)", relaytest.Timeout)
	}
	select {
	case tenant := <-r.inst[0].away:
		t.Fatalf("i0, which stored nothing and drives nothing, reported %s unserved", tenant)
	default:
	}
	// i1 drives t1 now: a gateway that wakes gets the entry, wherever it
	// connects.
	ga := r.dial(t, 0, "ga", "discord")
	if ev, _ := ga.NextInbound(t); ev.Text != "e0" {
		t.Fatalf("ga got %q, want e0", ev.Text)
	}
}

// Inbound the store holds when the instances start, for a tenant none of
// whose gateways connects (they sleep), is taken in by one instance, which
// drives the tenant and reports it unserved (the wake poke), as a lone
// relay does when it recovers its ledger.
func TestClusterStoredInboundAtStartWakesItsGateways(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	ev := &contract.Event{Text: "e0", MessageID: "msg-e0"}
	ev.Source.Platform, ev.Source.ChatID = "discord", "c1"
	if _, err := st.Ledger().Append(context.Background(), "t1", []store.Record{{
		Kind: uint8(platform.KindInbound), Platform: "discord", ChatID: "c1", Payload: ev.AppendJSON(nil), Received: clk.Now(),
	}}); err != nil {
		t.Fatal(err)
	}
	r := newClusterRigOn(t, clk, st, 2)
	r.advance(3) // a lease TTL: the time a socket of t1 has to come first
	select {
	case tenant := <-r.inst[0].away:
		if tenant != "t1" {
			t.Fatalf("i0 reported %s unserved, want t1", tenant)
		}
	case tenant := <-r.inst[1].away:
		if tenant != "t1" {
			t.Fatalf("i1 reported %s unserved, want t1", tenant)
		}
	case <-time.After(relaytest.Timeout):
		t.Fatalf("no instance reported t1's stored inbound unserved within %v (the wake poke)", relaytest.Timeout)
	}
	gb := r.dial(t, 1, "gb", "discord")
	if got, _ := gb.NextInbound(t); got.Text != "e0" {
		t.Fatalf("gb got %q, want e0", got.Text)
	}
}

// An interrupt whose session_key is longer than any session's key
// (MaxSessionKeyBytes) is skipped where it is read: on an instance that
// does not drive the tenant it would otherwise cost a read of the store
// keyed by up to a megabyte, and a message between instances as large.
func TestClusterOverlongInterruptKeyReadsNothing(t *testing.T) {
	r, ga, gb := drivenRig(t, 2)
	known := sessionKey("telegram", "c2", "u2")
	r.inst[0].telegram.deliver("t1", "c2", "u2", "t0")
	_, id := ga.NextInbound(t)
	ga.Ack(t, id)
	r.inst[0].net.waitOwned(t, known)

	long := strings.Repeat("k", relay.MaxSessionKeyBytes+1)
	gb.Send(t, map[string]any{"type": "interrupt", "session_key": long})
	gb.Send(t, map[string]any{"type": "interrupt", "session_key": known}) // read after it
	if f := ga.Next(t, contract.TypeInterruptInbound); f.SessionKey != known {
		t.Fatalf("ga got interrupt_inbound for %q, want %q", f.SessionKey, known)
	}
	for _, in := range r.inst {
		if n := in.net.reads(long); n != 0 {
			t.Fatalf("%s read the stored owner of an overlong session key %d times, want 0", in.name, n)
		}
	}
}

// An ack of a bufferId longer than any the relay gives (a store epoch and
// a sequence number) names no entry: it is skipped where it is read, and
// never sent to another instance's driver (up to a megabyte each), nor
// does it use up the socket's allowance of acks to forward.
func TestClusterOverlongAckIsNotForwarded(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	i1 := r.inst[1].net
	acks := i1.count(relay.ClusterMsgAck)
	mark := r.inst[0].buffered.mark()
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
	gb.Ack(t, strings.Repeat("9", relay.MaxBufferIDBytes+1))
	gb.Ack(t, id)
	r.inst[0].buffered.wait(t, mark, 0, "e1's ack to reach the driver")
	i1.waitCount(t, relay.ClusterMsgAck, acks+1, "e1's ack")
	if n := i1.count(relay.ClusterMsgAck) - acks; n != 1 {
		t.Fatalf("i1 sent the driver %d acks for one overlong bufferId and one real one, want 1", n)
	}
}

// A tenant added while the instances run, whose stored ledger holds
// records (it was served before), is taken in by one instance and its
// gateways woken, as a tenant with stored inbound at the start is.
func TestClusterTenantAddedWithStoredInboundWakesItsGateways(t *testing.T) {
	r := newClusterRig(t, 2)
	ev := &contract.Event{Text: "e0", MessageID: "msg-e0"}
	ev.Source.Platform, ev.Source.ChatID = "discord", "c9"
	if _, err := r.st.Ledger().Append(context.Background(), "t2", []store.Record{{
		Kind: uint8(platform.KindInbound), Platform: "discord", ChatID: "c9", Payload: ev.AppendJSON(nil), Received: r.clk.Now(),
	}}); err != nil {
		t.Fatal(err)
	}
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "ga", Secrets: []string{"sa"}}, {ID: "gb", Secrets: []string{"sb"}}, {ID: "gc", Secrets: []string{"sc"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gd", Secrets: []string{"sd"}}}},
	}
	for _, in := range r.inst {
		if err := in.h.Server.SetTenants(tenants); err != nil {
			t.Fatal(err)
		}
	}
	r.advance(3) // a lease TTL: the time a socket of t2 has to come first
	select {
	case tenant := <-r.inst[0].away:
		if tenant != "t2" {
			t.Fatalf("i0 reported %s unserved, want t2", tenant)
		}
	case tenant := <-r.inst[1].away:
		if tenant != "t2" {
			t.Fatalf("i1 reported %s unserved, want t2", tenant)
		}
	case <-time.After(relaytest.Timeout):
		t.Fatalf("no instance reported t2's stored inbound unserved within %v (the wake poke)", relaytest.Timeout)
	}
	gd := r.dial(t, 1, "gd", "discord")
	if got, _ := gd.NextInbound(t); got.Text != "e0" {
		t.Fatalf("gd got %q, want e0", got.Text)
	}
}

// An instance that took a tenant in without having a socket of it (it
// stored inbound nobody drove) hands the tenant over once a socket of the
// tenant is on another instance: it gives the lease up at its next beat,
// and the socket's instance takes it, so inbound reaches that socket
// without a hop between instances. What was in flight comes again, with
// the same bufferId.
func TestClusterDriverWithoutSocketsHandsTheTenantOver(t *testing.T) {
	r := newClusterRig(t, 2)
	r.inst[1].discord.deliver("t1", "c1", "u0", "e0")
	if who := r.waitAcquired(t); who != "i1" {
		t.Fatalf("%s took the tenant's lease, want i1 (it stored e0)", who)
	}
	ga := r.dial(t, 0, "ga", "discord")
	first, id := ga.NextInbound(t) // through i1
	if first.Text != "e0" {
		t.Fatalf("ga got %q, want e0", first.Text)
	}
	deadline := time.Now().Add(relaytest.Timeout)
	for {
		r.advance(1)
		select {
		case who := <-r.acquired:
			if who != "i0" {
				t.Fatalf("%s took the tenant's lease, want i0 (ga's instance)", who)
			}
			if again, again2 := ga.NextInbound(t); again.Text != "e0" || again2 != id {
				t.Fatalf("after the hand-over ga got %q as %s, want e0 again as %s", again.Text, again2, id)
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("i0, with ga's socket, did not take the tenant from i1, which has none, within %v", relaytest.Timeout)
		}
		runtime.Gosched() // a beat's lease calls signal nothing: step on
	}
}

// A driver handing the tenant over writes the removals of what was
// acknowledged through it before it gives the lease up: the next driver,
// which reads the stored ledger from the start, does not deliver those
// entries again.
func TestClusterHandOverWritesItsRemovalsFirst(t *testing.T) {
	r, ga := ackedThroughI1(t)
	r.waitTakenBy(t, "i0", "ga's instance")
	r.inst[0].discord.deliver("t1", "c1", "u1", "e1")
	if ev, _ := ga.NextInbound(t); ev.Text != "e1" {
		t.Fatalf("after the hand-over ga got %q, want e1 (e0 was acknowledged)", ev.Text)
	}
}

// A driver shutting down writes the removals of what was acknowledged
// through it before it gives its leases up, as one handing a tenant over
// does.
func TestClusterShutdownWritesItsRemovalsFirst(t *testing.T) {
	r, ga := ackedThroughI1(t)
	done := make(chan error, 1)
	go func() { done <- r.inst[1].h.Server.Shutdown(context.Background()) }()
	r.waitTakenBy(t, "i0", "the instance left")
	r.inst[0].discord.deliver("t1", "c1", "u1", "e1")
	if ev, _ := ga.NextInbound(t); ev.Text != "e1" {
		t.Fatalf("after i1 shut down ga got %q, want e1 (e0 was acknowledged)", ev.Text)
	}
	select {
	case <-done:
	case <-time.After(relaytest.Timeout):
		t.Fatalf("timed out after %v waiting for i1's shutdown", relaytest.Timeout)
	}
}

// A driver whose tenant leaves its configuration (a YAML reload that
// reaches it first) writes the removals of what was acknowledged through
// it before it gives the tenant's lease up, as one handing it over does.
func TestClusterTenantLeavingWritesItsRemovalsFirst(t *testing.T) {
	r, ga := ackedThroughI1(t)
	if err := r.inst[1].h.Server.SetTenants(nil); err != nil {
		t.Fatal(err)
	}
	r.waitTakenBy(t, "i0", "the instance still serving the tenant")
	r.inst[0].discord.deliver("t1", "c1", "u1", "e1")
	if ev, _ := ga.NextInbound(t); ev.Text != "e1" {
		t.Fatalf("after t1 left i1 ga got %q, want e1 (e0 was acknowledged)", ev.Text)
	}
}

// ackedThroughI1 returns a rig where i1 drives t1, having stored e0 with no
// socket of the tenant, and ga on i0 acknowledged e0 through it. i1's
// ledgers write no removal on their own (StopLedgerFlushes), and one it
// starts after releasing a lease is held until the test ends: e0 leaves
// the store in time for the next driver only through the flush i1's fleet
// runs before it gives its lease up.
func ackedThroughI1(t *testing.T) (r *clusterRig, ga *relaytest.Gateway) {
	t.Helper()
	r = newClusterRig(t, 2)
	late := make(chan struct{})
	r.inst[1].net.mu.Lock()
	r.inst[1].net.lateRemovals = late
	r.inst[1].net.mu.Unlock()
	t.Cleanup(func() { close(late) }) // before the instances shut down
	r.inst[1].discord.deliver("t1", "c1", "u0", "e0")
	if who := r.waitAcquired(t); who != "i1" {
		t.Fatalf("%s took the tenant's lease, want i1 (it stored e0)", who)
	}
	ga = r.dial(t, 0, "ga", "discord")
	ev, id := ga.NextInbound(t) // through i1
	if ev.Text != "e0" {
		t.Fatalf("ga got %q, want e0", ev.Text)
	}
	relay.StopLedgerFlushes(r.inst[1].h.Server)
	mark := r.inst[1].buffered.mark()
	ga.Ack(t, id)
	r.inst[1].buffered.wait(t, mark, 0, "e0's ack to reach the driver")
	return r, ga
}

// waitTakenBy advances the clock beat by beat until an instance starts
// driving the tenant, which must be inst (why: what makes it the one).
func (r *clusterRig) waitTakenBy(t *testing.T, inst, why string) {
	t.Helper()
	deadline := time.Now().Add(relaytest.Timeout)
	for handed := false; !handed; {
		r.advance(1)
		select {
		case who := <-r.acquired:
			if who != inst {
				t.Fatalf("%s took the tenant's lease, want %s (%s)", who, inst, why)
			}
			handed = true
		default:
			if time.Now().After(deadline) {
				t.Fatalf("%s (%s) did not take the tenant's lease within %v", inst, why, relaytest.Timeout)
			}
			runtime.Gosched() // a beat's lease calls signal nothing: step on
		}
	}
}

// A driver without sockets whose release, as it hands the tenant over,
// finds the lease taken by another instance (it expired meanwhile) stops
// driving in that beat: it no longer drives the tenant beside the lease's
// holder.
func TestClusterHandOverOfALeaseTakenStopsDriving(t *testing.T) {
	r := newClusterRig(t, 2)
	taken := make(chan struct{})
	r.inst[1].net.takenOnRelease = taken
	r.inst[1].discord.deliver("t1", "c1", "u0", "e0")
	if who := r.waitAcquired(t); who != "i1" {
		t.Fatalf("%s took the tenant's lease, want i1 (it stored e0)", who)
	}
	ga := r.dial(t, 0, "ga", "discord")
	if first, _ := ga.NextInbound(t); first.Text != "e0" {
		t.Fatalf("ga got %q, want e0", first.Text)
	}
	deadline := time.After(relaytest.Timeout)
	for released := false; !released; {
		r.advance(1)
		select {
		case <-taken:
			released = true
		case <-deadline:
			t.Fatalf("i1, without sockets, did not give the tenant's lease up within %v", relaytest.Timeout)
		default:
			runtime.Gosched() // a beat's lease calls signal nothing: step on
		}
	}
	// The beat that released ends before ClusterTenure reads.
	if tn := relay.ClusterTenure(r.inst[1].h.Server, "t1"); tn != nil {
		t.Fatalf("i1 still drives the tenant under its ended tenure after its release found the lease taken")
	}
}

// Word that passthrough frames were written, lost on its way to the
// driver, does not keep their bytes counted in the socket's window there
// for good (older gateways never acknowledge passthrough, so the window
// would stay full and stall every later passthrough to the socket): it
// rides the socket's link with the acks, and the next beat's roster shows
// the loss; the link breaks, and what it held goes out again.
func TestClusterLostPassthroughWrittenFreesTheWindow(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	r.inst[1].net.setLose(func(_ string, msg []byte) bool { return len(msg) > 0 && msg[0] == relay.ClusterMsgWritten })
	// Four frames fill the socket's byte window on the driver (a quarter
	// of the 8 MiB send queue); the fifth waits for word of one written.
	const events, size = 8, 450 << 10
	pad := strings.Repeat("x", size)
	for range events {
		r.inst[1].discord.publish(platform.Delivery{Kind: platform.KindPassthrough, Tenant: "t1", Platform: "discord",
			Forward: &contract.Forward{Platform: "discord", Method: "POST", Path: "/interactions", BodyB64: pad}})
	}
	got := make(map[string]bool)
	for len(got) < 4 {
		got[gb.Next(t, contract.TypePassthroughForward).BufferID] = true
	}
	for i := range 4 {
		r.inst[1].net.nextLost(t, fmt.Sprintf("word of passthrough %d written", i+1))
	}
	r.inst[1].net.setLose(nil)
	r.step(t)
	for len(got) < events {
		got[gb.Next(t, contract.TypePassthroughForward).BufferID] = true
	}
}

// The lease of a tenant created through the registry is the tenant's
// generation's (its name ends in its creation time): once the tenant is
// created again under its id, or deleted, no instance uses it again, and
// its record (its fencing token) leaves the store instead of staying there
// for good, one per tenant generation.
func TestClusterGenerationsLeaseIsForgotten(t *testing.T) {
	r := newClusterRig(t, 1)
	s := r.inst[0].h.Server
	c1 := r.clk.Now().Add(-time.Hour).Truncate(time.Microsecond)
	drive := func(created time.Time) string {
		t.Helper()
		err := s.SetTenants([]relay.Tenant{{ID: "t1", Created: created, Gateways: []relay.Gateway{{ID: "ga", Secrets: []string{"sa"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		r.dial(t, 0, "ga", "discord")
		if who := r.waitAcquired(t); who != "i0" {
			t.Fatalf("%s took the tenant's lease, want i0", who)
		}
		return fmt.Sprintf("relay/tenant/t1@%d", created.UnixMicro())
	}
	forgotten := func(name, what string) {
		t.Helper()
		l, ok, err := r.st.Leases().Acquire(context.Background(), name, "probe", time.Second)
		if err != nil || !ok || l.Token != 1 {
			t.Fatalf("after %s, Acquire of %s = %+v, %v, %v; want it acquired with token 1 (its record forgotten)", what, name, l, ok, err)
		}
	}
	first := drive(c1)
	drive(c1.Add(time.Minute))
	forgotten(first, "the tenant was created again")
	second := drive(c1.Add(2 * time.Minute))
	if err := s.SetTenants(nil); err != nil {
		t.Fatal(err)
	}
	forgotten(second, "the tenant was deleted")
}

// A link to a socket on another instance that breaks while the driver's
// frames wait in the socket's send queue ends with them: they are dropped
// there, and the link's next generation sends their entries again within
// its own byte window. Kept, they would count in no window, and a burst
// across two breaks (of a gateway that does not read meanwhile) would
// overflow the queue and close the socket 4408. The gateway then reads
// every passthrough frame of the burst.
func TestClusterBrokenLinkDropsItsQueuedFrames(t *testing.T) {
	const events, size = 48, 250 << 10 // 12 MB: over the queue bound and the socket buffers together
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	r := newClusterRigWith(t, clk, st, 2, func(c *relay.Config) { c.SendQueueBytes = 2 << 20 })
	r.dial(t, 0, "ga", "telegram")
	if who := r.waitAcquired(t); who != "i0" {
		t.Fatalf("%s took the tenant's lease, want i0 (the only one with a socket)", who)
	}
	// gb on i1 says hello and reads nothing until the link broke twice.
	i1 := r.inst[1]
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, i1.h.RelayURL(), &websocket.DialOptions{HTTPHeader: map[string][]string{
		"Authorization": {"Bearer " + relaytest.Token("gb", "sb", r.clk.Now())}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(contract.MaxFrameBytes)
	write := func(msg string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
		defer cancel()
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"type": "hello", "platform": "discord", "botId": ""}`)
	r.waitRemoteSeats(t, 1, "gb's serve")
	pad := strings.Repeat("x", size)
	for range events {
		i1.discord.publish(platform.Delivery{Kind: platform.KindPassthrough, Tenant: "t1", Platform: "discord",
			Forward: &contract.Forward{Platform: "discord", Method: "POST", Path: "/interactions", BodyB64: pad}})
	}
	// waitQueued waits until i1's link took at least n frames and, when
	// stuck is set, a frame waits in gb's queue behind the one being
	// written, two frames in all: a link's byte window (a quarter of the
	// queue) while the socket takes nothing more.
	waitQueued := func(n uint64, stuck bool, what string) {
		t.Helper()
		deadline := time.Now().Add(relaytest.Timeout)
		for {
			waiting, queued, received := relay.ClusterSocketQueue(i1.h.Server, "t1")
			if received >= n && (!stuck || waiting > 0 && queued >= 2*size) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %v waiting for %s: the link took %d frames (want %d), %d wait in gb's queue (%d bytes)",
					relaytest.Timeout, what, received, n, waiting, queued)
			}
			runtime.Gosched() // polling: the queue signals nothing
		}
	}
	// The first generation fills the socket's buffers (a few frames: gb
	// reads nothing, so they do not grow) and its byte window.
	waitQueued(6, true, "the burst to fill gb's socket and queue")
	for k := range 2 {
		// An ack lost, then the next one: the driver sees the gap and breaks
		// the link, and i1 starts the next generation (acks of no entry
		// still go to the driver, as many as the frames gb was given).
		serves := i1.net.count(relay.ClusterMsgServe)
		i1.net.loseFirst(cluster.Inbox("i0"), relay.ClusterMsgAck)
		write(`{"type": "inbound_ack", "bufferId": "none"}`)
		i1.net.nextLost(t, "gb's ack")
		write(`{"type": "inbound_ack", "bufferId": "none"}`)
		i1.net.waitCount(t, relay.ClusterMsgServe, serves+1, fmt.Sprintf("the serve of gb's link's generation %d", k+2))
		waitQueued(2, false, fmt.Sprintf("the frames of generation %d", k+2))
	}
	seen := make(map[string]bool)
	for len(seen) < events {
		ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
		_, msg, err := ws.Read(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d of %d passthrough frames: %v (code %d)", len(seen), events, err, websocket.CloseStatus(err))
		}
		for line := range strings.SplitSeq(strings.TrimSpace(string(msg)), "\n") {
			var f struct {
				Type     string `json:"type"`
				BufferID string `json:"bufferId"`
			}
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				t.Fatal(err)
			}
			if f.Type == contract.TypePassthroughForward {
				seen[f.BufferID] = true
			}
		}
	}
}

// A gateway on another instance than its tenant's driver that stops
// reading while it gets both inbound and passthrough is sent no more of
// them than a socket on the driver would queue: its two byte windows
// together stay within half its send queue. With half the queue each,
// they could fill it, and any other frame would close the socket 4408
// where a socket on the driver stays open. Once it reads again, it gets
// every frame.
func TestClusterRemoteSocketWindowsTogetherStayWithinHalfItsQueue(t *testing.T) {
	const queue, size = 2 << 20, 200 << 10
	const passEvents, events = 60, 8 // 12 MB of passthrough: over the queue bound and the socket buffers together
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	r := newClusterRigWith(t, clk, st, 2, func(c *relay.Config) { c.SendQueueBytes = queue })
	ga := r.dial(t, 0, "ga", "telegram")
	if who := r.waitAcquired(t); who != "i0" {
		t.Fatalf("%s took the tenant's lease, want i0 (the only one with a socket)", who)
	}
	// gb on i1 says hello and reads nothing until the end.
	i1 := r.inst[1]
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, i1.h.RelayURL(), &websocket.DialOptions{HTTPHeader: map[string][]string{
		"Authorization": {"Bearer " + relaytest.Token("gb", "sb", r.clk.Now())}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(contract.MaxFrameBytes)
	write := func(msg string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
		defer cancel()
		if err := ws.Write(ctx, websocket.MessageText, []byte(msg+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"type": "hello", "platform": "discord", "botId": ""}`)
	r.waitRemoteSeats(t, 1, "gb's serve")
	// wait polls gb's send queue until done holds, failing as soon as it
	// holds more than half the queue.
	wait := func(what string, done func(waiting int, queued int64, received uint64) bool) {
		t.Helper()
		deadline := time.Now().Add(relaytest.Timeout)
		for {
			waiting, queued, received := relay.ClusterSocketQueue(i1.h.Server, "t1")
			if queued > queue/2 {
				t.Fatalf("waiting for %s: gb's send queue holds %d bytes (%d frames waiting), over half the queue (%d), more than a socket on the driver would",
					what, queued, waiting, queue/2)
			}
			if done(waiting, queued, received) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %v waiting for %s: the link took %d frames, %d wait in gb's queue (%d bytes)",
					relaytest.Timeout, what, received, waiting, queued)
			}
			runtime.Gosched() // polling: the queue signals nothing
		}
	}
	pad := strings.Repeat("x", size)
	for range passEvents {
		i1.discord.publish(platform.Delivery{Kind: platform.KindPassthrough, Tenant: "t1", Platform: "discord",
			Forward: &contract.Forward{Platform: "discord", Method: "POST", Path: "/interactions", BodyB64: pad}})
	}
	// The passthrough fills gb's socket buffers, and its window: a frame
	// waits in gb's queue behind the one being written.
	wait("the passthrough to fill gb's socket and queue", func(waiting int, queued int64, received uint64) bool {
		return received >= 6 && waiting > 0 && queued >= 2*size
	})
	// Then inbound, which waits in the queue behind them, and a telegram
	// inbound for ga after it: once ga has it, the driver offered gb every
	// inbound it could take.
	for i := range events {
		i1.discord.deliver("t1", "c1", fmt.Sprint("u", i), fmt.Sprint(i, pad))
	}
	i1.telegram.deliver("t1", "c2", "u0", "marker")
	if ev, _ := ga.NextInbound(t); ev.Text != "marker" {
		t.Fatalf("ga got %q, want the marker", ev.Text)
	}
	sent := relay.ClusterFramesSent(r.inst[0].h.Server, "t1")
	wait("gb's queue to take every frame the driver sent", func(_ int, _ int64, received uint64) bool { return received >= sent })

	// gb reads again, acknowledging its inbound: it gets every frame.
	var gotPass, gotInbound int
	for gotPass < passEvents || gotInbound < events {
		ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
		_, msg, err := ws.Read(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d of %d passthrough and %d of %d inbound: %v (code %d)",
				gotPass, passEvents, gotInbound, events, err, websocket.CloseStatus(err))
		}
		for line := range strings.SplitSeq(strings.TrimSpace(string(msg)), "\n") {
			var f struct {
				Type     string `json:"type"`
				BufferID string `json:"bufferId"`
			}
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				t.Fatal(err)
			}
			switch f.Type {
			case contract.TypePassthroughForward:
				gotPass++
			case contract.TypeInbound:
				gotInbound++
				write(`{"type": "inbound_ack", "bufferId": "` + f.BufferID + `"}`)
			}
		}
	}
}

// A socket on another instance that went idle stays idle across a new
// generation of its link (acks lost): the driver attaches the new link as
// idle, and what the old one held waits for a socket that takes inbound.
// The new link's serve attached it first and made it idle after, so what
// was waiting went to the idle socket in between.
func TestClusterIdleSocketGetsNothingOnItsNewLink(t *testing.T) {
	r, _, gb := drivenRig(t, 2)
	i1 := r.inst[1].net
	r.inst[1].discord.deliver("t1", "c1", "u1", "e1")
	ev, id := gb.NextInbound(t)
	if ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
	i1.loseFirst(cluster.Inbox("i0"), relay.ClusterMsgAck)
	gb.Ack(t, id)
	i1.nextLost(t, "e1's ack")
	// gb's idle serve names the acks sent: the driver breaks the link, and
	// i1 announces its next generation, idle.
	serves := i1.count(relay.ClusterMsgServe)
	gb.Send(t, map[string]string{"type": "going_idle"})
	gb.Next(t, "going_idle_ack")
	i1.waitCount(t, relay.ClusterMsgServe, serves+2, "gb's idle serve and its next generation's")
	gc := r.dial(t, 1, "gc", "discord")
	if ev, _ := gc.NextInbound(t); ev.Text != "e1" {
		t.Fatalf("gc got %q, want e1, which the idle gb held", ev.Text)
	}
}
