package relay

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/clustermsg"
	"connector/relay/ledger"
	"connector/store"
)

// Several instances on one store (Config.Instance set, a Redis shared by
// every instance) serve one fleet; docs/architecture.md draws it.
//
//   - Any instance ingests: it appends the delivery to the tenant's stored
//     ledger (durably, before the platform confirms it) and publishes the
//     tenant's name on the wake channel.
//   - One instance at a time drives a tenant: the holder of the lease
//     "relay/tenant/<id>". Only the driver holds the tenant's ledger in
//     memory: it takes stored records in with ledger.Tail (on a wake, and
//     every beat in case a wake was lost), dispatches them, and is the only
//     writer of acknowledgements, so there is no locking per event.
//   - An instance that holds sockets of a tenant and finds the lease free
//     takes it. Otherwise it announces each socket to the driver ("serve",
//     every beat, which is also its liveness), and the driver forwards
//     the socket's frames (inbound, interrupt_inbound) to the instance's
//     inbox; acks, going_idle, closes and interrupts go the other way.
//   - The driver renews its lease every beat (a third of LeaseTTL, on
//     Config.Clock). When it dies, the lease expires within LeaseTTL; the
//     next beat of an instance holding sockets of the tenant takes it over
//     and reads the stored ledger from the start: entries in flight on the
//     dead driver are delivered again with the same bufferIds. A driver
//     forgets a remote socket that was not announced for three beats (its
//     instance died), and gives its unacknowledged entries to another.
//   - The driver writes each session's owner (instance and connection) to
//     store.Owners when it changes, and again every ownerRefresh while the
//     session's entries keep going there. An interrupt on an instance that
//     does not drive the tenant goes straight to the stored owner's
//     instance (to the driver when none is stored), and the driver falls
//     back to the stored owner when its own memory has none: so interrupts
//     reach the owner right after a takeover, and while the dead driver's
//     lease runs out.
//
// Pub/sub is at most once, and every message may be lost:
//
//   - wake: the driver reads the stored ledger every beat anyway;
//   - serve: it is sent again every beat; a socket the driver never heard
//     of gets nothing, and one not heard of for three beats is forgotten
//     (its entries go to another socket);
//   - detach: the socket is forgotten three beats after its last serve;
//   - a forwarded frame, or the ack answering it: an entry in flight on a
//     remote socket and not acknowledged for two beats (resendBeats) is
//     forwarded again (Ledger.Resend), with the same bufferId, every two
//     beats until it is acknowledged or the socket is forgotten: a lost
//     frame is delivered, a lost ack is answered by a redelivery (the
//     gateway deduplicates by message id);
//   - going_idle travels in the serve announcements, so it is repeated
//     with them;
//   - interrupt: not repeated. An interrupt only matters while a turn is
//     running and its sender (a user's /stop, a gateway) may send it
//     again; it is not a confirmed inbound under the durability promise.

// Pub/sub channels (the store prefixes them).
const (
	wakeChannel = "relay:wake"
	inboxPrefix = "relay:inbox:"
	leasePrefix = "relay/tenant/"
)

// Messages between instances (internal/clustermsg): one type byte, then
// length-prefixed fields.
const (
	msgServe     = 'S' // tenant, instance, conn, platforms (","), idle ("1")
	msgDetach    = 'D' // tenant, instance, conn
	msgAck       = 'A' // tenant, bufferId
	msgInterrupt = 'I' // tenant, session key, chat id, gateway id
	msgFrame     = 'F' // tenant, conn, frame
)

// outboxSize bounds the frames a driver has queued for other instances;
// past half of it remote sockets report no room.
const outboxSize = 8192

// Session owners in the store: each record lives ownerTTL, and is written
// again when ownerRefresh has passed since the last write and the
// session's entries still go to the same socket. An interrupt matters
// while a turn runs, right after an inbound, so an hour is ample.
// ownerQueue bounds the writes waiting; past it a write is skipped and
// retried at the session's next dispatch.
const (
	ownerTTL     = time.Hour
	ownerRefresh = ownerTTL / 4
	ownerQueue   = 4096
)

// resendBeats is how many beats an entry in flight on a remote socket may
// go unacknowledged before the driver forwards it again: fewer than the
// three after which a silent socket is forgotten, so a lost frame is sent
// again to the socket it was meant for.
const resendBeats = 2

// fieldCount is how many fields each message type has.
var fieldCount = map[byte]int{msgServe: 5, msgDetach: 3, msgAck: 2, msgInterrupt: 4, msgFrame: 3}

// cluster is this instance's part in a fleet sharing Config.Store.
type cluster struct {
	srv    *Server
	inst   string
	ps     store.PubSub
	leases store.Leases
	owners store.Owners
	clock  clock.Clock
	ttl    time.Duration
	beat   time.Duration

	out      chan outMsg // frames to publish to other instances
	wantPump atomic.Bool
	ownerOut chan ownerWrite // session owners to store

	localMu sync.Mutex
	local   map[string]*conn // this instance's sockets that said hello, by connKey

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// started is set by start: from then on a joining tenant's drive loop
	// starts at once.
	started atomic.Bool
}

type outMsg struct {
	channel string
	msg     []byte
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

// drive is a hub's cluster state.
type drive struct {
	driving atomic.Bool
	kick    chan struct{} // take stored records in now
	nudge   chan struct{} // beat now
	looping atomic.Bool   // driveLoop started

	beatMu sync.Mutex // serializes beats; guards timer
	timer  clock.Timer

	// ownMu guards owned; a leaf, taken inside the ledger's mutex (by
	// noteOwner, the ledger's Owned hook).
	ownMu sync.Mutex
	owned *simplelru.LRU[string, ownerNote] // owners stored, by session key

	mu      sync.Mutex // taken before the ledger's; guards the rest
	lease   store.Lease
	driver  string                     // the driving instance, as last seen
	locals  map[*conn]*localSeat       // this instance's sockets of the tenant
	remotes map[string]*remoteConsumer // other instances' sockets, while driving
}

// localSeat is what a local socket asked for, to tell a new driver.
type localSeat struct {
	platforms []string
	idle      bool
}

// remoteConsumer is, on the driver, a socket on another instance.
type remoteConsumer struct {
	h    *hub
	inst string
	conn []byte
	seen time.Time
}

// Offer implements ledger.Consumer: the frame goes to the socket's
// instance, unless the outbox is over half full.
func (r *remoteConsumer) Offer(frame []byte) ledger.Offered {
	cl := r.h.srv.cluster
	if len(cl.out) >= outboxSize/2 {
		cl.wantPump.Store(true)
		return ledger.Full
	}
	select {
	case cl.out <- outMsg{inboxPrefix + r.inst, clustermsg.Encode(msgFrame, []byte(r.h.id), r.conn, frame)}:
		return ledger.Taken
	default:
		return ledger.Full
	}
}

// push implements pusher.
func (r *remoteConsumer) push(frame []byte) {
	select {
	case r.h.srv.cluster.out <- outMsg{inboxPrefix + r.inst, clustermsg.Encode(msgFrame, []byte(r.h.id), r.conn, frame)}:
	default:
	}
}

// Owner implements ledger.Consumer.
func (r *remoteConsumer) Owner() (instance, conn string) { return r.inst, string(r.conn) }

func newCluster(s *Server) *cluster {
	ctx, cancel := context.WithCancel(context.Background())
	cl := &cluster{
		srv: s, inst: s.cfg.Instance, ps: s.cfg.Store.PubSub(), leases: s.cfg.Store.Leases(),
		owners: s.cfg.Store.Owners(), clock: s.cfg.Clock,
		ttl: s.cfg.LeaseTTL, beat: s.cfg.LeaseTTL / 3,
		out: make(chan outMsg, outboxSize), ownerOut: make(chan ownerWrite, ownerQueue),
		local: make(map[string]*conn),
		ctx:   ctx, cancel: cancel,
	}
	return cl
}

// connKey names c among every instance's connections.
func (cl *cluster) connKey(c *conn) string { return cl.srv.connKey(c) }

// localConn returns this instance's connection named key, if it is open.
func (cl *cluster) localConn(key string) *conn {
	cl.localMu.Lock()
	defer cl.localMu.Unlock()
	return cl.local[key]
}

// join gives a new tenant's hub its drive, before the hub is visible to
// the rest of the server; its drive loop runs once the cluster started.
func (cl *cluster) join(h *hub) {
	owned, _ := simplelru.NewLRU[string, ownerNote](cl.srv.cfg.SessionOwners, nil)
	h.drive = &drive{
		kick: make(chan struct{}, 1), nudge: make(chan struct{}, 1), owned: owned,
		locals: make(map[*conn]*localSeat), remotes: make(map[string]*remoteConsumer),
	}
	if cl.started.Load() {
		cl.startLoop(h)
	}
}

// startLoop arms h's beat timer and starts its drive loop unless they run
// already.
func (cl *cluster) startLoop(h *hub) {
	if !h.drive.looping.CompareAndSwap(false, true) {
		return
	}
	d := h.drive
	d.beatMu.Lock()
	d.timer = cl.clock.AfterFunc(cl.beat, h.tick)
	d.beatMu.Unlock()
	cl.wg.Go(func() { h.driveLoop(cl.ctx) })
}

// start subscribes and starts the goroutines.
func (cl *cluster) start() error {
	inbox, cancelInbox, err := cl.ps.Subscribe(cl.ctx, inboxPrefix+cl.inst)
	if err != nil {
		return err
	}
	wake, cancelWake, err := cl.ps.Subscribe(cl.ctx, wakeChannel)
	if err != nil {
		cancelInbox()
		return err
	}
	cl.wg.Go(func() {
		defer cancelInbox()
		for m := range inbox {
			cl.handle(m)
		}
	})
	cl.wg.Go(func() {
		defer cancelWake()
		for m := range wake {
			if h := cl.srv.hub(string(m)); h != nil && h.drive.driving.Load() {
				h.kickTail()
			}
		}
	})
	cl.wg.Go(cl.publishLoop)
	cl.wg.Go(cl.ownerLoop)
	cl.started.Store(true)
	for _, h := range cl.srv.hubs() {
		cl.startLoop(h)
	}
	return nil
}

// stop ends the goroutines and gives up the leases this instance holds, so
// other instances take its tenants over at once.
func (cl *cluster) stop(ctx context.Context) {
	cl.cancel()
	for _, h := range cl.srv.hubs() {
		d := h.drive
		d.beatMu.Lock() // a beat under way ends first; none starts after
		if d.timer != nil {
			d.timer.Stop()
		}
		d.beatMu.Unlock()
	}
	cl.wg.Wait()
	for _, h := range cl.srv.hubs() {
		d := h.drive
		if d.driving.Load() {
			_ = cl.leases.Release(ctx, leasePrefix+h.id, d.lease)
		}
	}
}

func (cl *cluster) publish(channel string, msg []byte) {
	ctx, cancel := context.WithTimeout(cl.ctx, cl.ttl)
	defer cancel()
	if err := cl.ps.Publish(ctx, channel, msg); err != nil && cl.ctx.Err() == nil {
		cl.srv.log.Warn("cluster message not published", "channel", channel, "err", err)
	}
}

// publishLoop publishes what remote consumers were offered.
func (cl *cluster) publishLoop() {
	for {
		select {
		case <-cl.ctx.Done():
			return
		case m := <-cl.out:
			cl.publish(m.channel, m.msg)
		}
		if len(cl.out) == 0 && cl.wantPump.CompareAndSwap(true, false) {
			for _, h := range cl.srv.hubs() {
				h.ledger.Pump()
			}
		}
	}
}

// handle takes one message from this instance's inbox.
func (cl *cluster) handle(m []byte) {
	if len(m) == 0 {
		return
	}
	typ, f, ok := clustermsg.Decode(m, fieldCount[m[0]])
	if !ok {
		cl.srv.log.Warn("malformed cluster message dropped", "bytes", len(m))
		return
	}
	if typ == msgFrame {
		// The tenant check keeps a frame from reaching another tenant's
		// socket whatever the sender believed the connection to be.
		if c := cl.localConn(string(f[1])); c != nil && c.hub.id == string(f[0]) {
			c.enqueue(append([]byte(nil), f[2]...))
		}
		return
	}
	h := cl.srv.hub(string(f[0]))
	if h == nil || !h.drive.driving.Load() {
		return // not ours (any more): the sender learns the driver on its next beat
	}
	switch typ {
	case msgServe:
		h.serveRemote(string(f[1]), f[2], string(f[3]), string(f[4]) == "1")
	case msgDetach:
		h.detachRemote(string(f[1]) + "/" + string(f[2]))
	case msgAck:
		h.ledger.Ack(string(f[1]))
	case msgInterrupt:
		h.interruptLocal(cl.ctx, string(f[1]), string(f[2]), string(f[3]))
	}
}

// ownerLoop stores the session owners the drivers noted.
func (cl *cluster) ownerLoop() {
	for {
		select {
		case <-cl.ctx.Done():
			return
		case w := <-cl.ownerOut:
			ctx, cancel := context.WithTimeout(cl.ctx, cl.ttl)
			err := cl.owners.Set(ctx, w.h.id, w.sessionKey, w.owner, ownerTTL)
			cancel()
			if err != nil && cl.ctx.Err() == nil {
				cl.srv.log.Warn("session owner not stored: an interrupt after a takeover may not find it",
					"tenant", w.h.id, "err", err)
				w.h.forgetOwnerNote(w.sessionKey)
			}
		}
	}
}

// ownedHook is the ledgers' Owned hook: sessionOwned among several
// instances, none for one.
func (s *Server) ownedHook() func(string, ledger.Consumer, string, string) {
	if s.cfg.Instance == "" {
		return nil
	}
	return s.sessionOwned
}

// sessionOwned is the ledgers' Owned hook among several instances.
func (s *Server) sessionOwned(tenant string, c ledger.Consumer, sessionKey, chatID string) {
	if h := s.hub(tenant); h != nil && h.drive != nil {
		h.noteOwner(c, sessionKey, chatID)
	}
}

// noteOwner queues the store write of a session's owner when it changed
// or its record is due for a refresh. It runs under the ledger's mutex
// and never blocks: with the queue full the write waits for the session's
// next dispatch.
func (h *hub) noteOwner(c ledger.Consumer, sessionKey, chatID string) {
	d, cl := h.drive, h.srv.cluster
	now := cl.clock.Now()
	d.ownMu.Lock()
	defer d.ownMu.Unlock()
	if n, ok := d.owned.Get(sessionKey); ok && n.c == c && n.chatID == chatID && now.Sub(n.written) < ownerRefresh {
		return
	}
	o := store.Owner{ChatID: chatID}
	o.Instance, o.Conn = c.Owner()
	select {
	case cl.ownerOut <- ownerWrite{h: h, sessionKey: sessionKey, owner: o}:
		d.owned.Add(sessionKey, ownerNote{c: c, chatID: chatID, written: now})
	default:
	}
}

// forgetOwnerNote makes the session's next dispatch write its owner again.
func (h *hub) forgetOwnerNote(sessionKey string) {
	d := h.drive
	d.ownMu.Lock()
	d.owned.Remove(sessionKey)
	d.ownMu.Unlock()
}

// interruptStored delivers interrupt_inbound to the session's owner as
// stored by its driver, and reports whether it knew one: a connection of
// this tenant on this instance, or one on another instance (the frame is
// forwarded there, which drops it if the connection closed meanwhile).
func (h *hub) interruptStored(ctx context.Context, sessionKey, chatID string) bool {
	cl := h.srv.cluster
	ctx, cancel := context.WithTimeout(ctx, cl.ttl)
	defer cancel()
	o, ok, err := cl.owners.Get(ctx, h.id, sessionKey)
	if err != nil {
		h.srv.log.Warn("session owner not read", "tenant", h.id, "err", err)
		return false
	}
	if !ok {
		return false
	}
	if chatID == "" {
		chatID = o.ChatID
	}
	frame := contract.AppendInterruptInbound(nil, sessionKey, chatID)
	if o.Instance != cl.inst {
		cl.publish(inboxPrefix+o.Instance, clustermsg.Encode(msgFrame, []byte(h.id), []byte(o.Conn), frame))
		return true
	}
	c := cl.localConn(o.Conn)
	if c == nil || c.hub != h {
		return false
	}
	c.enqueue(frame)
	return true
}

// serveMsg is the announcement of one local socket.
func (h *hub) serveMsg(c *conn, ls *localSeat) []byte {
	idle := "0"
	if ls.idle {
		idle = "1"
	}
	cl := h.srv.cluster
	return clustermsg.Encode(msgServe, []byte(h.id), []byte(cl.inst), []byte(cl.connKey(c)),
		[]byte(strings.Join(ls.platforms, ",")), []byte(idle))
}

// serve attaches c for platform: to the local ledger, or, when another
// instance drives the tenant, by announcing it there.
func (h *hub) serve(c *conn, platform string) {
	d := h.drive
	if d == nil {
		h.ledger.Serve(c, platform)
		return
	}
	cl := h.srv.cluster
	d.mu.Lock()
	ls := d.locals[c]
	if ls == nil {
		ls = &localSeat{}
		d.locals[c] = ls
		cl.localMu.Lock()
		cl.local[cl.connKey(c)] = c
		cl.localMu.Unlock()
	}
	ls.platforms = append(ls.platforms, platform)
	if d.driving.Load() {
		h.ledger.Serve(c, platform)
		d.mu.Unlock()
		return
	}
	driver, msg := d.driver, h.serveMsg(c, ls)
	d.mu.Unlock()
	if driver == "" {
		h.nudgeBeat()
		return
	}
	cl.publish(inboxPrefix+driver, msg)
}

// idle switches c to buffered-only delivery.
func (h *hub) idle(c *conn) {
	d := h.drive
	if d == nil {
		h.ledger.Idle(c)
		return
	}
	d.mu.Lock()
	ls := d.locals[c]
	if ls == nil {
		ls = &localSeat{}
		d.locals[c] = ls
	}
	ls.idle = true
	if d.driving.Load() {
		h.ledger.Idle(c)
		d.mu.Unlock()
		return
	}
	driver, msg := d.driver, h.serveMsg(c, ls)
	d.mu.Unlock()
	if driver != "" {
		h.srv.cluster.publish(inboxPrefix+driver, msg)
	}
}

// detach forgets c, which closed.
func (h *hub) detach(c *conn) {
	d := h.drive
	if d == nil {
		h.ledger.Detach(c)
		return
	}
	cl := h.srv.cluster
	cl.localMu.Lock()
	delete(cl.local, cl.connKey(c))
	cl.localMu.Unlock()
	d.mu.Lock()
	_, known := d.locals[c]
	delete(d.locals, c)
	if d.driving.Load() {
		h.ledger.Detach(c)
		d.mu.Unlock()
		return
	}
	driver := d.driver
	d.mu.Unlock()
	if known && driver != "" {
		cl.publish(inboxPrefix+driver, clustermsg.Encode(msgDetach, []byte(h.id), []byte(cl.inst), []byte(cl.connKey(c))))
	}
}

// ack removes an acknowledged entry: here, or at the driver.
func (h *hub) ack(id string) bool {
	d := h.drive
	if d == nil || d.driving.Load() {
		return h.ledger.Ack(id)
	}
	d.mu.Lock()
	driver := d.driver
	d.mu.Unlock()
	if driver == "" {
		return false
	}
	h.srv.cluster.publish(inboxPrefix+driver, clustermsg.Encode(msgAck, []byte(h.id), []byte(id)))
	return true
}

// appended tells the tenant's driver that a record was stored.
func (h *hub) appended() {
	if h.drive.driving.Load() {
		h.kickTail()
	}
	h.srv.cluster.publish(wakeChannel, []byte(h.id))
}

// forwardInterrupt sends an interrupt to the tenant's driver; false when
// this instance drives it (or nobody does).
func (h *hub) forwardInterrupt(ctx context.Context, sessionKey, chatID, gatewayID string) bool {
	d := h.drive
	if d == nil || d.driving.Load() {
		return false
	}
	cl := h.srv.cluster
	l, ok, err := cl.leases.Holder(ctx, leasePrefix+h.id)
	if err != nil || !ok || l.Holder == cl.inst {
		return false
	}
	cl.publish(inboxPrefix+l.Holder, clustermsg.Encode(msgInterrupt, []byte(h.id), []byte(sessionKey), []byte(chatID), []byte(gatewayID)))
	return true
}

func (h *hub) kickTail() {
	select {
	case h.drive.kick <- struct{}{}:
	default:
	}
}

func (h *hub) nudgeBeat() {
	select {
	case h.drive.nudge <- struct{}{}:
	default:
	}
}

// serveRemote attaches (or refreshes) a socket on another instance.
func (h *hub) serveRemote(inst string, connID []byte, platforms string, idle bool) {
	d := h.drive
	key := inst + "/" + string(connID)
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.driving.Load() {
		return
	}
	rc := d.remotes[key]
	if rc == nil {
		rc = &remoteConsumer{h: h, inst: inst, conn: append([]byte(nil), connID...)}
		d.remotes[key] = rc
	}
	rc.seen = h.srv.cfg.Clock.Now()
	for _, p := range strings.Split(platforms, ",") {
		if p != "" {
			h.ledger.Serve(rc, p)
		}
	}
	if idle {
		h.ledger.Idle(rc)
	}
}

func (h *hub) detachRemote(key string) {
	d := h.drive
	d.mu.Lock()
	defer d.mu.Unlock()
	if rc := d.remotes[key]; rc != nil {
		delete(d.remotes, key)
		h.ledger.Detach(rc)
	}
}

// driveLoop takes stored records in on a wake, and beats when nudged,
// until ctx ends; the beat timer (tick) runs the regular beats.
func (h *hub) driveLoop(ctx context.Context) {
	d := h.drive
	h.nudgeBeat() // a tenant lease this instance left may be free
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		case <-d.nudge:
			d.beatMu.Lock()
			if ctx.Err() == nil {
				h.beat(ctx)
			}
			d.beatMu.Unlock()
		}
		h.tail(ctx)
	}
}

// tick is the regular beat, every third of LeaseTTL on Config.Clock: the
// lease, the announcements and the read of the stored ledger that make up
// for lost messages. On a fake clock it runs inside the Advance that
// reaches it, so tests step the cluster beat by beat.
func (h *hub) tick() {
	d, cl := h.drive, h.srv.cluster
	d.beatMu.Lock()
	defer d.beatMu.Unlock()
	if cl.ctx.Err() != nil {
		return // stop stopped the timer; this beat came due meanwhile
	}
	h.beat(cl.ctx)
	h.tail(cl.ctx)
	d.timer.Reset(cl.beat)
}

// tail takes the stored records in while driving.
func (h *hub) tail(ctx context.Context) {
	if !h.drive.driving.Load() {
		return
	}
	if _, err := h.ledger.Tail(ctx); err != nil && ctx.Err() == nil {
		h.srv.log.Warn("stored inbound not read", "tenant", h.id, "err", err)
	}
}

// beat renews the lease while driving, takes it when free and this
// instance holds sockets of the tenant, and otherwise announces those
// sockets to the driver.
func (h *hub) beat(ctx context.Context) {
	d, cl := h.drive, h.srv.cluster
	name := leasePrefix + h.id
	ctx, cancel := context.WithTimeout(ctx, cl.beat)
	defer cancel()
	if d.driving.Load() {
		l, err := cl.leases.Renew(ctx, name, d.lease, cl.ttl)
		switch {
		case err == nil:
			d.mu.Lock()
			d.lease = l
			d.mu.Unlock()
			h.expireRemotes()
			h.resendRemotes()
		case errors.Is(err, store.ErrNotHeld) || !cl.clock.Now().Before(d.lease.Expires):
			h.srv.log.Warn("tenant lease lost: another instance drives it now", "tenant", h.id, "err", err)
			h.stopDriving()
		default:
			h.srv.log.Warn("tenant lease not renewed", "tenant", h.id, "err", err)
		}
		return
	}
	d.mu.Lock()
	n := len(d.locals)
	d.mu.Unlock()
	if n == 0 {
		return
	}
	l, acquired, err := cl.leases.Acquire(ctx, name, cl.inst, cl.ttl)
	if err != nil {
		if ctx.Err() == nil || cl.ctx.Err() == nil {
			h.srv.log.Warn("tenant lease not checked", "tenant", h.id, "err", err)
		}
		return
	}
	if acquired {
		h.startDriving(l)
		return
	}
	d.mu.Lock()
	d.driver = l.Holder
	msgs := make([][]byte, 0, len(d.locals))
	for c, ls := range d.locals {
		msgs = append(msgs, h.serveMsg(c, ls))
	}
	d.mu.Unlock()
	for _, m := range msgs {
		cl.publish(inboxPrefix+l.Holder, m)
	}
}

// startDriving makes this instance the tenant's driver under l: the ledger
// starts empty (Tail reads the stored records next) and this instance's
// sockets attach to it.
func (h *hub) startDriving(l store.Lease) {
	d := h.drive
	d.mu.Lock()
	defer d.mu.Unlock()
	h.ledger.Reset()
	d.lease, d.driver = l, h.srv.cluster.inst
	clear(d.remotes)
	d.ownMu.Lock()
	d.owned.Purge() // another driver may have stored other owners since
	d.ownMu.Unlock()
	d.driving.Store(true)
	for c, ls := range d.locals {
		for _, p := range ls.platforms {
			h.ledger.Serve(c, p)
		}
		if ls.idle {
			h.ledger.Idle(c)
		}
	}
	h.srv.log.Info("driving tenant", "tenant", h.id, "lease_token", l.Token)
}

// stopDriving gives the tenant up after its lease was lost.
func (h *hub) stopDriving() {
	d := h.drive
	d.mu.Lock()
	defer d.mu.Unlock()
	d.driving.Store(false)
	d.driver = ""
	clear(d.remotes)
	h.ledger.Reset()
}

// resendRemotes forwards again what remote sockets hold unacknowledged
// for resendBeats beats: the frame or its ack may have been lost.
func (h *hub) resendRemotes() {
	d := h.drive
	cutoff := h.srv.cluster.clock.Now().Add(-resendBeats * h.srv.cluster.beat)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, rc := range d.remotes {
		if n := h.ledger.Resend(rc, cutoff); n > 0 {
			h.srv.log.Info("unacknowledged inbound forwarded again to a socket on another instance",
				"tenant", h.id, "instance", rc.inst, "entries", n)
		}
	}
}

// expireRemotes detaches remote sockets not announced for three beats.
func (h *hub) expireRemotes() {
	d := h.drive
	cutoff := h.srv.cfg.Clock.Now().Add(-3 * h.srv.cluster.beat)
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, rc := range d.remotes {
		if rc.seen.Before(cutoff) {
			delete(d.remotes, key)
			h.ledger.Detach(rc)
		}
	}
}

var _ ledger.Consumer = (*remoteConsumer)(nil)
