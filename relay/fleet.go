package relay

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/cluster"
	"connector/internal/textsplit"
	"connector/internal/wsconn"
	"connector/platform/fairshare"
	"connector/relay/ledger"
	"connector/store"
)

// Several instances on one store (Config.Cluster set, a Redis shared by
// every instance) serve one fleet on the cluster layer (internal/cluster):
// one driver per tenant (the holder of the lease "relay/tenant/<id>")
// holds its ledger, and every other instance with sockets of the tenant
// (role remote) has them kept there as remoteSeats. docs/architecture.md
// ("Several instances on one Redis") describes and draws it, with the
// messages below and how each loss is repaired.

// The wake channel (the store prefixes it) and the tenant lease's prefix.
const (
	wakeChannel = "relay:wake"
	leasePrefix = "relay/tenant/"
)

// Messages between instances (internal/cluster: each names its sender).
// The relay's types are upper-case letters.
const (
	msgWake      = 'W' // wake channel: tenant
	msgServe     = 'S' // driver: tenant, conn, platforms (","), idle ("1"), gen, acks sent
	msgDetach    = 'D' // driver: tenant, conn
	msgAck       = 'A' // driver: tenant, conn, gen, seq, bufferId
	msgFrame     = 'F' // socket's instance: tenant, conn, gen, seq, frame
	msgWritten   = 'P' // driver: tenant, conn, gen, seq (the acks'), bufferId (a passthrough frame written)
	msgHold      = 'H' // socket's instance, when it asks (msgAskHolds): tenant, conn, gen, frames sent
	msgBroken    = 'B' // socket's instance: tenant, conn, gen (acks were lost)
	msgRoster    = 'R' // driver, every beat: tenant, links, digest of (link, acks sent)
	msgTally     = 'T' // socket's instance, every beat: tenant, links, digest of (link, frames sent)
	msgAskServes = 'Q' // socket's instance, when a roster did not match: tenant
	msgAskHolds  = 'K' // driver, when a tally did not match: tenant
	msgInterrupt = 'I' // tenant, session key, chat id, gateway id, conn ("" for the driver), owner read ("1") "@" creation (generation)
)

// Session owners in the store: each record lives ownerTTL, and is written
// again when ownerRefresh has passed since the last write and the
// session's entries still go to the same socket. An interrupt matters
// while a turn runs, right after an inbound, so an hour is ample.
// ownerQueue bounds the writes waiting or being written; a tenant takes
// at most its bound's part of what the other tenants leave
// (fairshare.Admits), its bound its part of ownerQueue by the tenants'
// weights and at least half of it (shareOwners), so a tenant churning
// sessions leaves the others room, and a lone busy one takes half (all
// of it as the only tenant). Past that a write is skipped and retried at
// the session's next dispatch.
const (
	ownerTTL     = time.Hour
	ownerRefresh = ownerTTL / 4
	ownerQueue   = 4096
)

// tenantWorkers bounds the tenants whose store calls (beats, the reads of
// tenants added) run at once.
const tenantWorkers = 16

// forEach runs f on each of items, tenantWorkers at a time, and returns
// once every one returned.
func forEach[T any](items []T, f func(T)) {
	work := make(chan T)
	var wg sync.WaitGroup
	for range min(tenantWorkers, len(items)) {
		wg.Go(func() {
			for it := range work {
				f(it)
			}
		})
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
}

// fleet is this instance's part in serving tenants with other instances.
type fleet struct {
	srv    *Server
	node   *cluster.Node
	leases store.Leases
	owners store.Owners

	ownerOut chan ownerWrite // session owners to store
	// ownerWrites counts the owner writes queued (ownerOut) or being
	// written, of all tenants.
	ownerWrites atomic.Int32

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// loopMu orders startLoop's wg.Go before stop's cancel: no tenant
	// loop starts once stop began waiting on wg (an apply adding tenants
	// during Shutdown).
	loopMu    sync.Mutex
	stopBeats func()
	// started is set by start: from then on a joining tenant's loop starts
	// at once.
	started atomic.Bool
	// roomHook, set only by tests, runs as the outbox's OnRoom pokes a
	// tenant's ledger.
	roomHook func(tenant string)
}

// ownerWrite is a session owner to store.
type ownerWrite struct {
	h          *hub
	sessionKey string
	owner      store.Owner
}

// ownerNote is, on the driver, the owner last written for a session.
type ownerNote struct {
	c       ledger.Consumer
	chatID  string
	written time.Time
}

// tenantFleet is one tenant's state among several instances.
type tenantFleet struct {
	h       *hub
	fl      *fleet
	driving atomic.Bool
	kick    chan struct{} // take stored records in now
	nudge   chan struct{} // beat now
	looping atomic.Bool   // loop started
	// quit is closed, and left set, when the tenant left this instance
	// (leave): its loop ends and it beats no more.
	quit chan struct{}
	left atomic.Bool
	// lease is the name of the tenant's lease (leaseName): the tenant's
	// generation's, which renew changes.
	lease atomic.Pointer[string]

	// unserved is set when this instance, not driving, stored a delivery
	// of the tenant a lease TTL or more past drivenUntil, the known expiry
	// of the lease another instance holds (Unix nanoseconds on the node's
	// clock; 0 when none is known): its next beat checks the lease even
	// without sockets here, and takes it when free, so a tenant whose
	// gateways all sleep still has a driver to bound its stored inbound and
	// wake its gateways. The TTL's grace leaves a dead driver's lease to an
	// instance with sockets of the tenant, which bids at its expiry.
	unserved    atomic.Bool
	drivenUntil atomic.Int64

	beatMu sync.Mutex    // one beat at a time; guards tenure, bid and seatless
	tenure *store.Tenure // while driving: the lease, renewed on its own timer
	bid    clock.Timer   // while not driving: nudges a beat at the lease's known expiry
	// seatless is set at a driving beat that found no socket of the tenant
	// here and one on another instance (handOver).
	seatless bool

	// ownMu guards owned; a leaf, taken inside the ledger's mutex (by
	// noteOwner, the ledger's OnOwned hook).
	ownMu sync.Mutex
	owned *simplelru.LRU[string, ownerNote] // owners stored, by session key
	// ownerWrites counts its owner writes queued (fleet.ownerOut) or being
	// written, and ownerBound is the most it may hold with no other
	// tenant's (shareOwners).
	ownerWrites, ownerBound atomic.Int32

	// Under hub.mu:
	driver string           // the driving instance, as last seen
	peers  map[string]*peer // other instances' sockets, while driving, by instance
}

// peer is, on the driver, another instance with sockets of the tenant.
type peer struct {
	seats map[string]*remoteSeat // by connection
	seen  time.Time              // when its last roster matched
}

// edgeLink is, while another instance drives the tenant, a local
// connection's link to it: its generation (a new one after a loss), the
// frames received and the acks sent, with the word of passthrough frames
// written (msgWritten) numbered among them.
type edgeLink struct {
	gen    uint64
	hash   uint64 // seatHash of what the last serve announced
	frames cluster.Link
	// ended is set once the link ended (endLinkLocked): no word of a frame
	// written goes out on it, its driver forgot it.
	ended atomic.Bool
	// sendMu numbers and queues one ack or written at a time: acks come
	// from the connection's reader, word of a frame written from its
	// writer (or whoever drops its queue).
	sendMu sync.Mutex
	acks   cluster.Link
}

// sendAck numbers and queues one message of the link's acks.
func (l *edgeLink) sendAck(send func(seq uint64)) {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	l.acks.Send(send)
}

// remoteSeat is, on the driver, a socket on another instance: a ledger
// consumer whose frames go to that instance.
type remoteSeat struct {
	f          *tenantFleet
	inst, conn string
	gen        uint64
	sendMu     sync.Mutex // numbers and queues one frame at a time
	frames     cluster.Link
	acks       cluster.Link
	hash       uint64    // under hub.mu: seatHash of its last serve
	seen       time.Time // under hub.mu: its last serve
	broken     bool      // under hub.mu: acks were lost; waiting for a new generation
}

// framesSent is the number of the last frame queued for r's socket: read
// under sendMu, so no frame is queued and not yet counted (a hold or a
// tally queued after it names exactly the frames queued before it).
func (r *remoteSeat) framesSent() uint64 {
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	return r.frames.Sent()
}

// Offer implements ledger.Consumer: the frame goes to the socket's
// instance, unless the cluster's outbox is over half full.
func (r *remoteSeat) Offer(frame []byte) ledger.Offered {
	if !r.f.fl.node.Roomy(r.f.h.id) {
		return ledger.Full
	}
	r.push(frame)
	return ledger.Taken
}

// WindowBytes implements ledger.ByteWindow: the socket's instance queues
// every frame it receives, so the inbound and, apart, the passthrough in
// flight to it are bounded by a quarter of its send queue each: together
// half of it, as conn.Offer bounds a local socket's queued frames of
// both. The socket's instance reports each passthrough frame written
// (msgWritten), since older gateways never acknowledge those.
func (r *remoteSeat) WindowBytes() int64 { return int64(r.f.fl.srv.cfg.SendQueueBytes / 4) }

// push implements pusher. A frame the outbox has no room for is lost like
// one pub/sub lost: the link's next message or beat shows the gap.
func (r *remoteSeat) push(frame []byte) {
	r.sendMu.Lock()
	defer r.sendMu.Unlock()
	r.frames.Send(func(seq uint64) {
		r.f.send(r.inst, msgFrame, []byte(r.conn), cluster.AppendUint(nil, r.gen), cluster.AppendUint(nil, seq), frame)
	})
}

// Owner implements ledger.Consumer.
func (r *remoteSeat) Owner() (instance, conn string) { return r.inst, r.conn }

func newFleet(s *Server) *fleet {
	ctx, cancel := context.WithCancel(context.Background())
	fl := &fleet{
		srv: s, node: s.cfg.Cluster, leases: s.cfg.Store.Leases(), owners: s.cfg.Store.Owners(),
		ownerOut: make(chan ownerWrite, ownerQueue),
		ctx:      ctx, cancel: cancel,
	}
	n := fl.node
	n.Handle(msgWake, 1, func(m cluster.Msg) {
		fl.atDriver(m, (*tenantFleet).kickTail)
	})
	n.Handle(msgServe, 6, func(m cluster.Msg) {
		fl.atDriver(m, func(f *tenantFleet) {
			f.serveRemote(m.From, string(m.Fields[1]), string(m.Fields[2]), string(m.Fields[3]) == "1",
				cluster.Uint(m.Fields[4]), cluster.Uint(m.Fields[5]))
		})
	})
	n.Handle(msgDetach, 2, func(m cluster.Msg) {
		fl.atDriver(m, func(f *tenantFleet) { f.detachRemote(m.From, string(m.Fields[1])) })
	})
	n.Handle(msgAck, 5, func(m cluster.Msg) {
		fl.atDriver(m, func(f *tenantFleet) {
			f.ackRemote(m.From, string(m.Fields[1]), cluster.Uint(m.Fields[2]), cluster.Uint(m.Fields[3]), m.Fields[4])
		})
	})
	n.Handle(msgFrame, 5, func(m cluster.Msg) {
		fl.atSocket(m, func(f *tenantFleet, c *conn) {
			f.frameIn(m.From, c, cluster.Uint(m.Fields[2]), cluster.Uint(m.Fields[3]), m.Fields[4])
		})
	})
	n.Handle(msgWritten, 5, func(m cluster.Msg) {
		fl.atDriver(m, func(f *tenantFleet) {
			f.writtenRemote(m.From, string(m.Fields[1]), cluster.Uint(m.Fields[2]), cluster.Uint(m.Fields[3]), string(m.Fields[4]))
		})
	})
	n.Handle(msgHold, 4, func(m cluster.Msg) {
		fl.atSocket(m, func(f *tenantFleet, c *conn) {
			f.holdIn(m.From, c, cluster.Uint(m.Fields[2]), cluster.Uint(m.Fields[3]))
		})
	})
	n.Handle(msgBroken, 3, func(m cluster.Msg) {
		fl.atSocket(m, func(f *tenantFleet, c *conn) { f.brokenIn(m.From, c, cluster.Uint(m.Fields[2])) })
	})
	n.Handle(msgRoster, 3, func(m cluster.Msg) {
		fl.atDriver(m, func(f *tenantFleet) { f.rosterIn(m.From, tallyOf(m.Fields[1:])) })
	})
	n.Handle(msgTally, 3, func(m cluster.Msg) {
		fl.atEdge(m, func(f *tenantFleet) { f.tallyIn(m.From, tallyOf(m.Fields[1:])) })
	})
	n.Handle(msgAskServes, 1, func(m cluster.Msg) {
		fl.atEdge(m, func(f *tenantFleet) { f.announceAll(m.From) })
	})
	n.Handle(msgAskHolds, 1, func(m cluster.Msg) {
		fl.atDriver(m, func(f *tenantFleet) { f.holdsFor(m.From) })
	})
	n.Handle(msgInterrupt, 6, fl.interruptIn)
	// A remote seat's Offer found no room for its tenant (Roomy): only the
	// ledgers of the tenants it said no to wait for it.
	n.OnRoom(func(due []string) {
		for _, t := range due {
			if h := fl.srv.hub(t); h != nil && h.fleet.driving.Load() {
				if fl.roomHook != nil {
					fl.roomHook(t)
				}
				h.ledger.Pump()
			}
		}
	})
	return fl
}

// atDriver runs do for the tenant m names, when this instance drives it
// (and the relay has not stopped).
func (fl *fleet) atDriver(m cluster.Msg, do func(*tenantFleet)) {
	fl.atEdge(m, func(f *tenantFleet) {
		if f.driving.Load() {
			do(f)
		}
	})
}

// atEdge runs do for the tenant m names, when this instance has its hub
// (and the relay has not stopped); do checks the role under hub.mu.
func (fl *fleet) atEdge(m cluster.Msg, do func(*tenantFleet)) {
	if fl.ctx.Err() != nil {
		return
	}
	if h := fl.srv.hub(string(m.Fields[0])); h != nil {
		do(h.fleet)
	}
}

// atSocket runs do for this instance's connection m names (its second
// field), when it is a connection of the tenant m names: whatever the
// sender believed the connection to be, a frame never reaches another
// tenant's socket.
func (fl *fleet) atSocket(m cluster.Msg, do func(*tenantFleet, *conn)) {
	if fl.ctx.Err() != nil {
		return
	}
	if c := fl.srv.conn(string(m.Fields[1])); c != nil && c.hub.id == string(m.Fields[0]) {
		do(c.hub.fleet, c)
	}
}

// send queues a relay message for instance's inbox.
func (f *tenantFleet) send(instance string, typ byte, fields ...[]byte) {
	f.fl.node.SendFor(f.h.id, cluster.Inbox(instance), typ, append([][]byte{[]byte(f.h.id)}, fields...)...)
}

// join gives a new tenant's hub its fleet state and the remote role, before
// the hub is visible to the rest of the server; its loop runs once the
// fleet started.
func (fl *fleet) join(h *hub) {
	owned, _ := simplelru.NewLRU[string, ownerNote](fl.srv.cfg.SessionOwners, nil)
	f := &tenantFleet{
		h: h, fl: fl, kick: make(chan struct{}, 1), nudge: make(chan struct{}, 1), quit: make(chan struct{}), owned: owned,
		peers: make(map[string]*peer),
	}
	f.lease.Store(new(leaseName(h.id, h.created)))
	h.fleet = f
	h.role.Store(&roleRef{remote{f}})
	h.ledger.OnOwned(f.noteOwner)
	if fl.started.Load() {
		fl.startLoop(f)
	}
}

// leaseName is the name of the lease of tenant id created at created
// (relay.Tenant.Created): "relay/tenant/<id>", and "@<Unix microseconds>"
// after it for a tenant created through the registry, so that a tenant
// deleted and created again under its id has a driver of its own, never
// the earlier tenant's.
func leaseName(id string, created time.Time) string {
	if created.IsZero() {
		return leasePrefix + id
	}
	return leasePrefix + id + "@" + strconv.FormatInt(created.UnixMicro(), 10)
}

// renew has the tenant, deleted and created again under its id at
// created (hub.renew), bid for its own lease from its next beat, which it
// nudges: this instance gives up the earlier tenant's lease if it drove
// it (its ledger is forgotten), and forgets the driver it followed (the
// session owners it stored are forgotten as every tenure begins,
// startDriving).
func (f *tenantFleet) renew(created time.Time) {
	h := f.h
	f.beatMu.Lock()
	defer f.beatMu.Unlock()
	earlier := f.lease.Swap(new(leaseName(h.id, created)))
	defer f.retire(*earlier)
	f.giveUp("earlier tenant's lease not given up: it expires")
	h.mu.Lock()
	f.driver = ""
	for c, s := range h.seats {
		endLinkLocked(c, s)
	}
	h.mu.Unlock()
	f.drivenUntil.Store(0)
	f.nudgeBeat()
}

// leave ends the tenant's part here, once it is gone from the tenants
// (hub.release): its loop and beats stop, and this instance gives its
// lease up if it drove it, so no instance renews the lease of a tenant
// none serves; the stored records stay.
func (f *tenantFleet) leave() {
	f.beatMu.Lock() // a beat under way ends first
	defer f.beatMu.Unlock()
	if !f.left.CompareAndSwap(false, true) {
		return
	}
	defer f.retire(*f.lease.Load())
	close(f.quit)
	if f.bid != nil {
		f.bid.Stop()
	}
	f.giveUp("lease of a tenant gone not given up: it expires")
}

// giveUp stops driving the tenant, under beatMu, and gives its lease up:
// what was acknowledged here leaves the store first, as the next driver
// reads the stored ledger from the start. A failed release, logged as
// failed unless the fleet stopped, ends the tenure too: the lease is no
// longer this instance's to drive under (another took it, or it expires
// unrenewed). It reports whether it released the lease.
func (f *tenantFleet) giveUp(failed string) bool {
	if f.driving.Load() {
		f.stopDriving()
	}
	if f.tenure == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(f.fl.ctx, f.fl.node.Beat())
	defer cancel()
	f.fl.srv.ledgers.Flush(context.WithoutCancel(ctx))
	err := f.tenure.Release(ctx)
	f.tenure = nil
	if err != nil && f.fl.ctx.Err() == nil {
		f.fl.srv.log.Warn(failed, "tenant", f.h.id, "err", err)
	}
	return err == nil
}

// retire drops the lease name from the store, under beatMu once this
// instance gave it up, when it is a generation's (leaseName with a
// creation time): no instance uses it again once the tenant was deleted
// or created again. Held by an instance that has not applied the change
// yet, it stays, and that instance drops it when it does; a lease its
// holder never gives up (it died) expires and keeps its record.
func (f *tenantFleet) retire(name string) {
	if name == leasePrefix+f.h.id {
		return // the declared tenant's, the same whatever its generation
	}
	ctx, cancel := context.WithTimeout(f.fl.ctx, f.fl.node.Beat())
	defer cancel()
	if err := f.fl.leases.Drop(ctx, name); err != nil && f.fl.ctx.Err() == nil {
		f.fl.srv.log.Warn("lease of a tenant generation gone not dropped from the store", "tenant", f.h.id, "err", err)
	}
}

// startLoop starts f's loop unless it runs already.
func (fl *fleet) startLoop(f *tenantFleet) {
	fl.loopMu.Lock()
	defer fl.loopMu.Unlock()
	if fl.ctx.Err() == nil && f.looping.CompareAndSwap(false, true) {
		fl.wg.Go(func() { f.loop(fl.ctx) })
	}
}

// start subscribes to the wake channel and starts the beats and the
// tenants' loops. A tenant whose stored ledger holds records is unserved
// until a beat found its driver: its gateways may all sleep, and one
// instance then takes it in (and wakes them) as a lone relay recovering it
// does, a lease TTL after the start unless a socket of the tenant came
// first.
func (fl *fleet) start() error {
	ctx, cancel := context.WithTimeout(fl.ctx, recoverTimeout)
	stored, err := fl.srv.cfg.Store.Ledger().Tenants(ctx)
	cancel()
	if err != nil {
		return err
	}
	for _, t := range stored {
		if h := fl.srv.hub(t); h != nil {
			h.fleet.markUnserved()
		}
	}
	if _, err := fl.node.Subscribe(fl.ctx, wakeChannel); err != nil {
		return err
	}
	fl.wg.Go(fl.ownerLoop)
	fl.stopBeats = fl.node.OnBeat(fl.beat)
	fl.started.Store(true)
	for _, h := range fl.srv.hubs() {
		fl.startLoop(h.fleet)
	}
	return nil
}

// stop ends the beats and the goroutines and gives up the leases this
// instance holds, so other instances take its tenants over at once; what
// was acknowledged here leaves the store first (handOver).
func (fl *fleet) stop(ctx context.Context) {
	if fl.stopBeats != nil {
		fl.stopBeats() // a beat under way ends first
	}
	fl.loopMu.Lock()
	fl.cancel()
	fl.loopMu.Unlock()
	fl.wg.Wait()
	fl.srv.ledgers.Flush(ctx)
	for _, h := range fl.srv.hubs() {
		f := h.fleet
		f.beatMu.Lock() // a nudged beat under way ends first
		if f.bid != nil {
			f.bid.Stop()
		}
		if f.tenure != nil {
			_ = f.tenure.Release(ctx)
		}
		f.beatMu.Unlock()
	}
}

// beat runs every tenant's beat, tenantWorkers at a time: the node's beat,
// on its clock (on a fake clock inside the Advance that reaches it, so
// tests step the fleet beat by beat).
func (fl *fleet) beat() {
	forEach(fl.srv.hubs(), func(h *hub) {
		h.fleet.beat(fl.ctx)
		h.fleet.tail(fl.ctx)
	})
}

// ownerLoop stores the session owners the drivers noted.
func (fl *fleet) ownerLoop() {
	for {
		select {
		case <-fl.ctx.Done():
			return
		case w := <-fl.ownerOut:
			ctx, cancel := context.WithTimeout(fl.ctx, fl.node.LeaseTTL())
			err := fl.owners.Set(ctx, w.h.id, w.sessionKey, w.owner, ownerTTL)
			cancel()
			w.h.fleet.ownerWrites.Add(-1)
			fl.ownerWrites.Add(-1)
			if err != nil && fl.ctx.Err() == nil {
				fl.srv.log.Warn("session owner not stored: an interrupt after a takeover may not find it",
					"tenant", w.h.id, "err", err)
				f := w.h.fleet // the session's next dispatch writes its owner again
				f.ownMu.Lock()
				f.owned.Remove(w.sessionKey)
				f.ownMu.Unlock()
			}
		}
	}
}

// noteOwner is the ledger's OnOwned hook: it queues the store write of a
// session's owner when it changed or its record is due for a refresh. It
// runs under the ledger's mutex and never blocks: with the queue or the
// tenant's share of it full the write waits for the session's next dispatch.
func (f *tenantFleet) noteOwner(c ledger.Consumer, sessionKey, chatID string) {
	now := f.fl.node.Clock().Now()
	f.ownMu.Lock()
	defer f.ownMu.Unlock()
	if n, ok := f.owned.Get(sessionKey); ok && n.c == c && n.chatID == chatID && now.Sub(n.written) < ownerRefresh {
		return
	}
	if !fairshare.Admits(int(f.ownerWrites.Load()), int(f.fl.ownerWrites.Load()), ownerQueue, int(f.ownerBound.Load())) {
		return
	}
	o := store.Owner{ChatID: chatID}
	o.Instance, o.Conn = c.Owner()
	f.ownerWrites.Add(1) // before ownerLoop can take it
	f.fl.ownerWrites.Add(1)
	select {
	case f.fl.ownerOut <- ownerWrite{h: f.h, sessionKey: sessionKey, owner: o}:
		f.owned.Add(sessionKey, ownerNote{c: c, chatID: chatID, written: now})
	default:
		f.ownerWrites.Add(-1)
		f.fl.ownerWrites.Add(-1)
	}
}

// shareOwners sets each tenant's ownerBound: its part of ownerQueue by
// the weights of tenants (fairshare.Part), at least half of it, so a
// busy tenant among many takes that half while the others are idle; a
// deployment of one tenant takes the whole queue. s.regMu is held, and
// tenants are those s serves.
func (fl *fleet) shareOwners(tenants []Tenant) {
	sum := 0
	for _, t := range tenants {
		sum += max(t.Weight, 1)
	}
	for _, t := range tenants {
		bound := max(fairshare.Part(ownerQueue, max(t.Weight, 1), sum), ownerQueue/2)
		fl.srv.tenants[t.ID].fleet.ownerBound.Store(int32(bound))
	}
}

// store is both fleet roles' store: it stores ds, in one store write, for
// Tail to take in (whichever instance stored them), and wakes the tenant's
// driver, wherever it is: this instance's loop at once when kick is set
// (the driver role), and any instance driving the tenant through the wake
// channel.
func (f *tenantFleet) store(ctx context.Context, ds []ledger.Delivery, kick bool) error {
	if _, err := f.h.ledger.StoreAll(ctx, ds); err != nil {
		return err
	}
	if kick {
		f.kickTail()
	} else if f.orphaned() && f.unserved.CompareAndSwap(false, true) {
		f.nudgeBeat() // no driver known live: the beat checks the lease
	}
	f.fl.node.SendFor(f.h.id, wakeChannel, msgWake, []byte(f.h.id))
	return nil
}

// markUnserved has the tenant's lease checked a lease TTL from now even
// without sockets here (its stored ledger holds records): as if a lease
// had just expired, so an instance that gets a socket of the tenant
// meanwhile takes it first.
func (f *tenantFleet) markUnserved() {
	f.drivenUntil.Store(f.fl.node.Clock().Now().UnixNano())
	f.unserved.Store(true)
}

// markStored is, for a tenant added while the instances run, what start
// does for the others: it marks the tenant unserved when its stored ledger
// holds records (it was served before).
func (fl *fleet) markStored(ctx context.Context, h *hub) {
	st, err := fl.srv.cfg.Store.Ledger().Stats(ctx, h.id)
	if err != nil {
		fl.srv.log.Warn("stored inbound of an added tenant not counted: it waits for one of its gateways to connect", "tenant", h.id, "err", err)
		return
	}
	if st.Entries > 0 {
		h.fleet.markUnserved()
	}
}

// orphaned reports whether a lease TTL has passed since drivenUntil: no
// driver of the tenant is known live.
func (f *tenantFleet) orphaned() bool {
	n := f.fl.node
	return n.Clock().Now().UnixNano()-f.drivenUntil.Load() >= int64(n.LeaseTTL())
}

func (f *tenantFleet) kickTail()  { wsconn.Signal(f.kick) }
func (f *tenantFleet) nudgeBeat() { wsconn.Signal(f.nudge) }

// loop takes stored records in on a wake, and beats when nudged, until ctx
// ends; the node's beat runs the regular beats.
func (f *tenantFleet) loop(ctx context.Context) {
	f.nudgeBeat() // a tenant lease this instance left may be free
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.quit:
			return
		case <-f.kick:
		case <-f.nudge:
			f.beat(ctx)
		}
		f.tail(ctx)
	}
}

// tail takes the stored records in while driving.
func (f *tenantFleet) tail(ctx context.Context) {
	if !f.driving.Load() {
		return
	}
	if _, err := f.h.ledger.Tail(ctx); err != nil && ctx.Err() == nil {
		f.fl.srv.log.Warn("stored inbound not read", "tenant", f.h.id, "err", err)
	}
}

// beat, while driving, sends each instance with sockets of the tenant its
// tally (holdRemotes), or stops driving once the tenure ended (its lease
// is renewed on its own timer, store.Tenure, which nudges a beat when it
// ends). Not driving, it takes the lease when free and this instance holds
// sockets of the tenant or stored a delivery no driver was known to take
// (unserved), and otherwise sends the driver this instance's roster
// (follow) and arms a beat at the lease's known expiry.
func (f *tenantFleet) beat(ctx context.Context) {
	f.beatMu.Lock()
	defer f.beatMu.Unlock()
	if ctx.Err() != nil || f.left.Load() {
		return
	}
	h, fl := f.h, f.fl
	name := *f.lease.Load()
	ctx, cancel := context.WithTimeout(ctx, fl.node.Beat())
	defer cancel()
	if f.driving.Load() {
		if f.tenure.Held() {
			if !f.handOver() {
				f.holdRemotes()
			}
			return
		}
		fl.srv.log.Warn("tenant lease lost: not renewed in time or taken by another instance", "tenant", h.id)
		f.tenure = nil
		f.stopDriving()
	}
	h.mu.Lock()
	n := len(h.seats)
	h.mu.Unlock()
	if n == 0 && (!f.unserved.Load() || !f.orphaned()) {
		return
	}
	clk, ttl := fl.node.Clock(), fl.node.LeaseTTL()
	t, l, err := store.Hold(ctx, clk, fl.leases, name, fl.node.Instance(), ttl, f.nudgeBeat)
	switch {
	case err != nil:
		if fl.ctx.Err() == nil {
			fl.srv.log.Warn("tenant lease not checked", "tenant", h.id, "err", err)
		}
	case t != nil:
		f.unserved.Store(false)
		f.tenure, f.seatless = t, false
		f.startDriving(l)
	default:
		f.drivenUntil.Store(l.Expires.UnixNano())
		f.unserved.Store(false)
		f.follow(l.Holder)
		if f.bid == nil {
			f.bid = clk.AfterFunc(store.BidIn(clk, l, ttl), f.nudgeBeat)
		} else {
			f.bid.Reset(store.BidIn(clk, l, ttl))
		}
	}
}

// handOver gives the tenant's lease up, under beatMu while driving, when
// this instance has had no socket of the tenant for a beat while another
// instance has one (it took the tenant in for inbound nobody drove, or its
// own sockets left; a socket reconnecting to it within the beat keeps it
// the driver): that instance takes the lease at its next beat, and drives
// its sockets without a hop between instances. It reports whether it
// stopped driving.
func (f *tenantFleet) handOver() bool {
	h := f.h
	h.mu.Lock()
	away := len(h.seats) == 0 && len(f.peers) > 0
	h.mu.Unlock()
	if !away {
		f.seatless = false
		return false
	}
	if !f.seatless {
		f.seatless = true
		return false
	}
	f.seatless = false
	if f.giveUp("tenant lease not given up: another instance took it, or it expires") {
		f.fl.srv.log.Info("tenant handed over: its sockets are on other instances", "tenant", h.id)
	}
	// Its sockets' instance takes the lease within a beat; this one checks
	// it again only a lease TTL from now.
	f.drivenUntil.Store(f.fl.node.Clock().Now().UnixNano())
	return true
}

// startDriving makes this instance the tenant's driver under l: the ledger
// starts empty (Tail reads the stored records next) and this instance's
// sockets attach to it.
func (f *tenantFleet) startDriving(l store.Lease) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ledger.Reset()
	f.driver = f.fl.node.Instance()
	clear(f.peers)
	f.ownMu.Lock()
	f.owned.Purge() // another driver may have stored other owners since
	f.ownMu.Unlock()
	f.driving.Store(true)
	h.role.Store(&roleRef{driver{local{h}, f}})
	for c, s := range h.seats {
		endLinkLocked(c, s)
		if s.idle { // first: a serve would attach it, and dispatch to it
			h.ledger.Idle(c)
		}
		for _, p := range s.platforms {
			h.ledger.Serve(c, p)
		}
	}
	f.fl.srv.log.Info("driving tenant", "tenant", h.id, "lease_token", l.Token)
}

// stopDriving gives the tenant up after its lease was lost.
func (f *tenantFleet) stopDriving() {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	f.driving.Store(false)
	h.role.Store(&roleRef{remote{f}})
	f.driver = ""
	clear(f.peers)
	h.ledger.Reset()
	for c := range h.seats {
		c.dropFed() // the next driver sends them again
	}
}

// follow records driver as the tenant's driver and sends it this
// instance's roster: one message for all its sockets, which the driver
// answers with msgAskServes when it does not match what it knows. A new
// driver gets new links, each announced: it knows none of the old ones.
func (f *tenantFleet) follow(driver string) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if driver != f.driver {
		f.driver = driver
		for c, s := range h.seats {
			endLinkLocked(c, s)
		}
	}
	var t tally
	for c, s := range h.seats {
		if s.link == nil {
			f.announceLocked(c, s)
		}
		t.add(s.link.hash, s.link.acks.Sent())
	}
	if t.links > 0 {
		f.send(driver, msgRoster, t.fields()...)
	}
}

// announceAll announces every socket of the tenant here again, as driver
// asked after a roster that did not match.
func (f *tenantFleet) announceAll(driver string) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.driving.Load() || driver != f.driver {
		return
	}
	for c, s := range h.seats {
		f.announceLocked(c, s)
	}
}

// tallyIn checks the driver's tally of the links to this instance against
// the frames received on each: a link, a generation or a frame it does not
// know has it asked for a hold of each link (msgAskHolds), which shows the
// link whose frames were lost.
func (f *tenantFleet) tallyIn(driver string, theirs tally) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.driving.Load() || driver != f.driver {
		return
	}
	var mine tally
	for _, s := range h.seats {
		if s.link != nil {
			mine.add(s.link.hash, s.link.frames.Received())
		}
	}
	if mine != theirs {
		f.send(driver, msgAskHolds)
	}
}

// announceLocked sends c's serve to the driver, under hub.mu; with no
// driver known yet, the next beat finds it.
func (f *tenantFleet) announceLocked(c *conn, s *seat) {
	if f.driver == "" {
		f.nudgeBeat()
		return
	}
	if s.link == nil {
		s.gen++
		s.link = &edgeLink{gen: s.gen}
	}
	key, platforms := c.key, strings.Join(s.platforms, ",")
	s.link.hash = seatHash(key, s.link.gen, platforms, s.idle)
	f.send(f.driver, msgServe, []byte(key), []byte(platforms), cluster.Flag(s.idle),
		cluster.AppendUint(nil, s.link.gen), cluster.AppendUint(nil, s.link.acks.Sent()))
}

// breakLinkLocked starts a new generation of c's link after a loss, under
// hub.mu, and announces it: the driver puts what the old one held back in
// line.
func (f *tenantFleet) breakLinkLocked(c *conn, s *seat, why string) {
	f.fl.srv.log.Info("link to the tenant's driver broken: its unacknowledged inbound comes again",
		"tenant", f.h.id, "conn", c.id, "driver", f.driver, "why", why)
	endLinkLocked(c, s)
	f.announceLocked(c, s)
}

// endLinkLocked ends c's link to the tenant's driver, if any, under hub.mu:
// c's frames from the driver still queued are dropped (fed), and the link
// reports nothing more. The driver (or the next one) sends their entries
// again, held unacknowledged on the ended link, within the next link's
// byte window; kept, they would count in none, and a burst over a few
// generations or drivers would overflow c's queue (closing it 4408) and
// reach the gateway twice.
func endLinkLocked(c *conn, s *seat) {
	if s.link != nil {
		s.link.ended.Store(true)
		s.link = nil
	}
	c.dropFed()
}

// edgeSeat returns c's seat and link when from is the instance this one
// follows as the tenant's driver and gen is the link's generation, under
// hub.mu. An earlier version started every new driver's links at
// generation 1, so a message from a former driver (one that woke from a
// pause past its lease, or whose outbox still held frames when it lost the
// lease) could otherwise pass for the new driver's.
func (f *tenantFleet) edgeSeat(from string, c *conn, gen uint64) (*seat, bool) {
	s := f.h.seats[c]
	return s, s != nil && s.link != nil && s.link.gen == gen && !f.driving.Load() && from == f.driver
}

// frameIn takes a frame the driver (from) sent for c: in order, it is
// queued; a copy of one taken (go-redis sent its PUBLISH again) is dropped;
// a gap, or another frame under a number taken (the driver numbers the
// link from 1 again: it lost its lease and took it back), breaks the link.
func (f *tenantFleet) frameIn(from string, c *conn, gen, seq uint64, frame []byte) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock() // queued under it: a frame of a link that ended is dropped
	s, ok := f.edgeSeat(from, c, gen)
	if !ok {
		return
	}
	if taken, repeat := s.link.frames.TakeOnce(seq, frame); !taken {
		if !repeat {
			f.breakLinkLocked(c, s, "frames lost")
		}
		return
	}
	c.inbound.Add(1)
	if id, pass := contract.PassthroughBufferID(frame); pass {
		c.enqueueOwned(frame, &passthroughWritten{f: f, driver: from, conn: c.key, link: s.link, id: id})
	} else {
		c.enqueueOwned(frame, ledgerFrame{})
	}
}

// passthroughWritten, released once the socket wrote a passthrough frame
// from the driver (or dropped it, closing), reports it written to the
// driver: its bytes leave the socket's window there (ledger.Written),
// which an acknowledgement alone would free, and older gateways never
// acknowledge passthrough. It is numbered among the link's acks, so one
// lost shows as an ack lost does (at the next ack, or the next beat's
// roster), and breaks the link: its next generation holds nothing.
type passthroughWritten struct {
	f                *tenantFleet
	driver, conn, id string
	link             *edgeLink
}

// Release implements wsconn.Releaser.
func (w *passthroughWritten) Release() {
	l := w.link
	if l.ended.Load() {
		return
	}
	l.sendAck(func(seq uint64) {
		w.f.send(w.driver, msgWritten, []byte(w.conn), cluster.AppendUint(nil, l.gen), cluster.AppendUint(nil, seq), []byte(w.id))
	})
}

func (*passthroughWritten) fed() {}

// writtenRemote takes the word of a socket on another instance that it
// wrote the passthrough frame id.
func (f *tenantFleet) writtenRemote(inst, conn string, gen, seq uint64, id string) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if rs := f.takeAckLocked(inst, conn, gen, seq); rs != nil {
		h.ledger.Written(rs, id)
	}
}

// holdIn takes the driver's hold for c: a frame sent and not received was
// lost; more received than sent is a link the driver no longer knows (it
// started driving again since), broken too. (The driver reads what it sent
// with no frame between queued and counted, remoteSeat.framesSent.)
func (f *tenantFleet) holdIn(from string, c *conn, gen, sent uint64) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := f.edgeSeat(from, c, gen); ok && sent != s.link.frames.Received() {
		f.breakLinkLocked(c, s, "last frames lost")
	}
}

// brokenIn takes the driver's word that acks of c's link were lost.
func (f *tenantFleet) brokenIn(from string, c *conn, gen uint64) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := f.edgeSeat(from, c, gen); ok {
		f.breakLinkLocked(c, s, "acks lost")
	}
}

// ackOut sends c's ack of id to the driver; false when no driver is known,
// or when c already sent as many acks as it was given inbound frames: an
// ack beyond those names no entry c was sent (a guess, a repeat), and each
// would cost a message on the outbox every tenant's frames, acks and
// interrupts share, which loses what it has no room for. It runs on c's
// read loop, which owns acksOut.
func (f *tenantFleet) ackOut(c *conn, id string) bool {
	if c.acksOut >= c.inbound.Load() {
		return false
	}
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.seats[c]
	if s == nil || s.link == nil || f.driver == "" {
		return false
	}
	c.acksOut++
	l := s.link
	l.sendAck(func(seq uint64) {
		f.send(f.driver, msgAck, []byte(c.key), cluster.AppendUint(nil, l.gen), cluster.AppendUint(nil, seq), []byte(id))
	})
	return true
}

// serveRemote attaches (or refreshes) a socket on another instance, as its
// serve announces it: a later generation replaces the old link, whose
// unacknowledged entries go back in line; acks lost on the old one break
// it. A serve of an earlier generation, or of the link's counting fewer
// acks sent than taken, is a copy (go-redis sent its PUBLISH again): a
// socket's instance gives each new link of a socket a higher generation.
func (f *tenantFleet) serveRemote(inst, conn, platforms string, idle bool, gen, acksSent uint64) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !f.driving.Load() {
		return
	}
	p := f.peers[inst]
	if p == nil {
		p = &peer{seats: make(map[string]*remoteSeat)}
		f.peers[inst] = p
	}
	rs := p.seats[conn]
	if rs != nil && (gen < rs.gen || rs.gen == gen && !rs.broken && acksSent < rs.acks.Received()) {
		return
	}
	if rs != nil && rs.gen != gen {
		f.dropRemoteLocked(p, rs)
		rs = nil
	}
	if rs == nil {
		rs = &remoteSeat{f: f, inst: inst, conn: conn, gen: gen}
		p.seats[conn] = rs
	}
	rs.seen = f.fl.node.Clock().Now()
	rs.hash = seatHash(conn, gen, platforms, idle)
	// Acks sent and not taken were lost: the link gets a new generation.
	if !rs.broken && acksSent != rs.acks.Received() {
		f.breakRemoteLocked(rs)
	}
	if rs.broken {
		f.send(inst, msgBroken, []byte(conn), cluster.AppendUint(nil, gen))
		return
	}
	if idle { // first: a serve would attach it, and dispatch to it
		h.ledger.Idle(rs)
	}
	for p := range strings.SplitSeq(platforms, ",") {
		if p != "" {
			h.ledger.Serve(rs, p)
		}
	}
}

// ackRemote takes an ack from a socket on another instance.
func (f *tenantFleet) ackRemote(inst, conn string, gen, seq uint64, id []byte) {
	h := f.h
	h.ledger.Ack(id)
	h.mu.Lock()
	defer h.mu.Unlock()
	f.takeAckLocked(inst, conn, gen, seq)
}

// takeAckLocked takes message seq of the acks of inst's connection conn,
// generation gen, under hub.mu, and returns its seat when it came in
// order on a live link; a gap breaks the link, and a message taken before
// is a copy (go-redis sent its PUBLISH again), dropped. A link an earlier
// version started over in the same generation (it followed another
// driver meanwhile) numbers its acks from 1 again: those dropped as copies
// still remove their entries (ackRemote acks before it takes the
// message), and a beat breaks the link when the holds' count of frames
// differs; when it matches, the link is in step once its acks pass the
// count taken.
func (f *tenantFleet) takeAckLocked(inst, conn string, gen, seq uint64) *remoteSeat {
	var rs *remoteSeat
	if p := f.peers[inst]; p != nil {
		rs = p.seats[conn]
	}
	if rs == nil || rs.gen != gen || rs.broken || seq <= rs.acks.Received() {
		return nil
	}
	if !rs.acks.Take(seq) {
		f.breakRemoteLocked(rs)
		f.send(inst, msgBroken, []byte(conn), cluster.AppendUint(nil, gen))
		return nil
	}
	return rs
}

// breakRemoteLocked gives up rs's link, whose acks were lost: what it held
// goes back in line, and rs takes nothing until a new generation.
func (f *tenantFleet) breakRemoteLocked(rs *remoteSeat) {
	rs.broken = true
	f.h.ledger.Detach(rs)
}

func (f *tenantFleet) detachRemote(inst, conn string) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := f.peers[inst]; p != nil {
		if rs := p.seats[conn]; rs != nil {
			f.dropRemoteLocked(p, rs)
		}
	}
}

// dropRemoteLocked forgets a remote socket; what it held goes back in line.
func (f *tenantFleet) dropRemoteLocked(p *peer, rs *remoteSeat) {
	delete(p.seats, rs.conn)
	if !rs.broken {
		f.h.ledger.Detach(rs)
	}
}

// rosterIn checks the roster inst sent every beat against the links the
// driver keeps for it: matching, it keeps them all (the only message an
// idle socket costs); otherwise inst is asked to announce each again,
// which attaches a socket whose serve was lost, breaks a link whose acks
// were lost, and refreshes each seat it still has (one whose detach was
// lost is forgotten LostBeats beats later).
func (f *tenantFleet) rosterIn(inst string, theirs tally) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	var mine tally
	p := f.peers[inst]
	if p != nil {
		for _, rs := range p.seats {
			if !rs.broken {
				mine.add(rs.hash, rs.acks.Received())
			}
		}
	}
	if p != nil && mine == theirs {
		p.seen = f.fl.node.Clock().Now()
		return
	}
	f.send(inst, msgAskServes)
}

// holdsFor sends inst a hold of each of its links, as it asked after a
// tally that did not match: the link whose frames were lost breaks.
func (f *tenantFleet) holdsFor(inst string) {
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	p := f.peers[inst]
	if p == nil {
		return
	}
	for _, rs := range p.seats {
		if !rs.broken {
			f.send(inst, msgHold, []byte(rs.conn), cluster.AppendUint(nil, rs.gen), cluster.AppendUint(nil, rs.framesSent()))
		}
	}
}

// holdRemotes forgets the remote sockets neither announced nor kept by a
// matching roster for cluster.LostBeats beats (their instance died, or
// left the tenant), and sends each other instance its tally: one message
// for all its links, which it answers with msgAskHolds when a frame is
// missing.
func (f *tenantFleet) holdRemotes() {
	h := f.h
	cutoff := f.fl.node.Clock().Now().Add(-cluster.LostBeats * f.fl.node.Beat())
	h.mu.Lock()
	defer h.mu.Unlock()
	for inst, p := range f.peers {
		var t tally
		for _, rs := range p.seats {
			switch {
			case rs.seen.Before(cutoff) && p.seen.Before(cutoff):
				f.dropRemoteLocked(p, rs)
			case !rs.broken:
				t.add(rs.hash, rs.framesSent())
			}
		}
		if len(p.seats) == 0 {
			delete(f.peers, inst)
			continue
		}
		if t.links > 0 {
			f.send(inst, msgTally, t.fields()...)
		}
	}
}

// interruptStored delivers in to the session's owner as its driver stored
// it, and reports whether it knew one: a connection of this tenant on this
// instance, or one on another instance (the interrupt is sent there, which
// drops it if the connection closed meanwhile). It reads the store once
// per interrupt: in.ownerRead is set from then on.
func (f *tenantFleet) interruptStored(ctx context.Context, in *interrupt) bool {
	in.ownerRead = true
	fl := f.fl
	ctx, cancel := context.WithTimeout(ctx, fl.node.LeaseTTL())
	defer cancel()
	o, ok, err := fl.owners.Get(ctx, f.h.id, in.sessionKey)
	if err != nil {
		fl.srv.log.Warn("session owner not read", "tenant", f.h.id, "err", err)
		return false
	}
	if !ok {
		return false
	}
	if o.Instance != fl.node.Instance() {
		f.sendInterrupt(o.Instance, *in, o.Conn, o.ChatID)
		return true
	}
	c := fl.srv.conn(o.Conn)
	if c == nil || c.hub != f.h {
		return false
	}
	c.push(in.frame(o.ChatID))
	return true
}

// forwardInterrupt sends in to the tenant's driver; false when this
// instance drives it, or no instance does. Reading the lease's holder, when
// the driver is not known, is bounded by the lease TTL as interruptStored's
// read is: the connection's reader waits for it.
func (f *tenantFleet) forwardInterrupt(ctx context.Context, in interrupt) bool {
	h := f.h
	h.mu.Lock()
	driver := f.driver
	h.mu.Unlock()
	if driver == "" {
		ctx, cancel := context.WithTimeout(ctx, f.fl.node.LeaseTTL())
		defer cancel()
		l, ok, err := f.fl.leases.Holder(ctx, *f.lease.Load())
		if err != nil {
			f.fl.srv.log.Warn("tenant driver not read for an interrupt", "tenant", h.id, "err", err)
		}
		if err != nil || !ok {
			return false
		}
		driver = l.Holder
	}
	if driver == f.fl.node.Instance() {
		return false
	}
	f.sendInterrupt(driver, in, "", "")
	return true
}

// sendInterrupt sends in to instance: to its connection conn, or, with
// conn empty, to the tenant's driver there. chatID stands for the
// interrupt's chat when it names none.
func (f *tenantFleet) sendInterrupt(instance string, in interrupt, conn, chatID string) {
	if in.chatID == "" {
		in.chatID = chatID
	}
	// The creation rides in the owner-read field, so an instance of an
	// earlier version (which reads that field as "1" or not, and then at
	// most reads the owner once more) still takes the interrupt during a
	// rolling upgrade.
	read := append(cluster.Flag(in.ownerRead), '@')
	f.send(instance, msgInterrupt, []byte(in.sessionKey), []byte(in.chatID), []byte(in.gatewayID), []byte(conn), append(read, f.h.generation()...))
}

// generation is h's tenant's creation as the relay serves it (Tenant.Created),
// in Unix microseconds ("" for none), as an interrupt between instances
// names it: the session owners in the store are keyed by the tenant's id
// alone, so an instance that has not applied the tenant's deletion and
// creation again (or has, while the sender has not) would otherwise reach
// the other creation's connections with it.
func (h *hub) generation() []byte {
	created := h.createdAt()
	if created.IsZero() {
		return nil
	}
	return strconv.AppendInt(nil, created.UnixMicro(), 10)
}

// interruptIn takes an interrupt another instance sent: for one of this
// instance's connections, or for the tenant's driver, of the tenant's
// creation the sender served (hub.generation); one of another creation is
// dropped. One naming no creation comes from an instance of an earlier
// version, during a rolling upgrade, and is taken as before; so is one
// between a tenant declared in the YAML (no creation) and the stored
// tenant it shadows, the same tenant (SetTenants), while the instances'
// YAML differs.
func (fl *fleet) interruptIn(m cluster.Msg) {
	if fl.ctx.Err() != nil {
		return
	}
	read, created, named := bytes.Cut(m.Fields[5], []byte("@"))
	in := interrupt{sessionKey: string(m.Fields[1]), chatID: string(m.Fields[2]), gatewayID: string(m.Fields[3]),
		ownerRead: string(read) == "1", forwarded: true}
	ours := func(h *hub) bool {
		if gen := h.generation(); named && len(created) > 0 && gen != nil && !bytes.Equal(gen, created) {
			fl.srv.logs.tenants.Log(fl.srv.log, slog.LevelInfo, h.id, "interrupt dropped: sent for another creation of the tenant",
				"session_key", textsplit.Truncate(in.sessionKey, 256), "gateway_id", in.gatewayID, "tenant", h.id, "from", m.From)
			return false
		}
		return true
	}
	if conn := string(m.Fields[4]); conn != "" {
		if c := fl.srv.conn(conn); c != nil && c.hub.id == string(m.Fields[0]) && ours(c.hub) {
			c.push(in.frame(""))
		}
		return
	}
	if h := fl.srv.hub(string(m.Fields[0])); h != nil && ours(h) {
		h.interrupt(fl.ctx, in)
	}
}

// driver is the role of a hub whose tenant this instance drives among
// several: the ledger is here, as alone, with the fleet's additions.
type driver struct {
	local
	f *tenantFleet
}

func (r driver) store(ctx context.Context, d ledger.Delivery) error {
	return r.f.store(ctx, []ledger.Delivery{d}, true)
}

func (r driver) storeAll(ctx context.Context, ds []ledger.Delivery) error {
	return r.f.store(ctx, ds, true)
}

// interrupt goes to the owner in memory, else to the stored one.
func (r driver) interrupt(ctx context.Context, in interrupt) bool {
	return r.local.interrupt(ctx, in) || (!in.ownerRead && r.f.interruptStored(ctx, &in))
}

// remote is the role of a hub whose tenant another instance drives (or
// none, until a beat finds out).
type remote struct{ f *tenantFleet }

func (r remote) store(ctx context.Context, d ledger.Delivery) error {
	return r.f.store(ctx, []ledger.Delivery{d}, false)
}

func (r remote) storeAll(ctx context.Context, ds []ledger.Delivery) error {
	return r.f.store(ctx, ds, false)
}

func (r remote) serve(c *conn, s *seat, _ string) { r.f.announceLocked(c, s) }

func (r remote) idle(c *conn, s *seat) { r.f.announceLocked(c, s) }

func (r remote) detach(c *conn, s *seat) {
	f := r.f
	if s != nil && s.link != nil && f.driver != "" {
		f.send(f.driver, msgDetach, []byte(c.key))
	}
}

func (r remote) ack(c *conn, id []byte) bool { return r.f.ackOut(c, string(id)) }

// interrupt goes to the stored owner, else to the driver.
func (r remote) interrupt(ctx context.Context, in interrupt) bool {
	return (!in.ownerRead && r.f.interruptStored(ctx, &in)) || (!in.forwarded && r.f.forwardInterrupt(ctx, in))
}

var (
	_ ledger.ByteWindow = (*remoteSeat)(nil)
	_ pusher            = (*remoteSeat)(nil)
	_ role              = local{}
	_ role              = driver{}
	_ role              = remote{}
)
