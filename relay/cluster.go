package relay

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
//   - The driver renews its lease every beat. When it dies, the lease
//     expires within LeaseTTL; the next beat of an instance holding sockets
//     of the tenant takes it over and reads the stored ledger from the
//     start: entries in flight on the dead driver are delivered again with
//     the same bufferIds. A driver forgets a remote socket that was not
//     announced for three beats (its instance died).
//
// Pub/sub is at most once: a lost wake is made up by the next beat; a lost
// forwarded frame stays in flight until its socket closes or the tenant
// moves, and is then delivered again.

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
	msgFrame     = 'F' // conn, frame
)

// outboxSize bounds the frames a driver has queued for other instances;
// past half of it remote sockets report no room.
const outboxSize = 8192

// fieldCount is how many fields each message type has.
var fieldCount = map[byte]int{msgServe: 5, msgDetach: 3, msgAck: 2, msgInterrupt: 4, msgFrame: 2}

// cluster is this instance's part in a fleet sharing Config.Store.
type cluster struct {
	srv    *Server
	inst   string
	ps     store.PubSub
	leases store.Leases
	ttl    time.Duration
	beat   time.Duration

	out      chan outMsg // frames to publish to other instances
	wantPump atomic.Bool

	localMu sync.Mutex
	local   map[string]*conn // this instance's sockets that said hello, by id

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type outMsg struct {
	channel string
	msg     []byte
}

// drive is a hub's cluster state.
type drive struct {
	driving atomic.Bool
	kick    chan struct{} // take stored records in now
	nudge   chan struct{} // beat now

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
	cl   *cluster
	inst string
	conn []byte
	seen time.Time
}

// HasRoom implements ledger.Consumer.
func (r *remoteConsumer) HasRoom() bool {
	if len(r.cl.out) < outboxSize/2 {
		return true
	}
	r.cl.wantPump.Store(true)
	return false
}

// Offer implements ledger.Consumer: the frame goes to the socket's
// instance.
func (r *remoteConsumer) Offer(frame []byte) bool {
	select {
	case r.cl.out <- outMsg{inboxPrefix + r.inst, clustermsg.Encode(msgFrame, r.conn, frame)}:
		return true
	default:
		return false
	}
}

func newCluster(s *Server) *cluster {
	ctx, cancel := context.WithCancel(context.Background())
	cl := &cluster{
		srv: s, inst: s.cfg.Instance, ps: s.cfg.Store.PubSub(), leases: s.cfg.Store.Leases(),
		ttl: s.cfg.LeaseTTL, beat: s.cfg.LeaseTTL / 3,
		out: make(chan outMsg, outboxSize), local: make(map[string]*conn),
		ctx: ctx, cancel: cancel,
	}
	for _, h := range s.tenants {
		h.drive = &drive{
			kick: make(chan struct{}, 1), nudge: make(chan struct{}, 1),
			locals: make(map[*conn]*localSeat), remotes: make(map[string]*remoteConsumer),
		}
	}
	return cl
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
			if h := cl.srv.tenants[string(m)]; h != nil && h.drive.driving.Load() {
				h.kickTail()
			}
		}
	})
	cl.wg.Go(cl.publishLoop)
	for _, h := range cl.srv.tenants {
		cl.wg.Go(func() { h.driveLoop(cl.ctx) })
	}
	return nil
}

// stop ends the goroutines and gives up the leases this instance holds, so
// other instances take its tenants over at once.
func (cl *cluster) stop(ctx context.Context) {
	cl.cancel()
	cl.wg.Wait()
	for _, h := range cl.srv.tenants {
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
			for _, h := range cl.srv.tenants {
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
		cl.localMu.Lock()
		c := cl.local[string(f[0])]
		cl.localMu.Unlock()
		if c != nil {
			c.enqueue(append([]byte(nil), f[1]...))
		}
		return
	}
	h := cl.srv.tenants[string(f[0])]
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
		h.interruptLocal(string(f[1]), string(f[2]), string(f[3]))
	}
}

func connKey(c *conn) string { return strconv.FormatUint(c.id, 10) }

// serveMsg is the announcement of one local socket.
func (h *hub) serveMsg(c *conn, ls *localSeat) []byte {
	idle := "0"
	if ls.idle {
		idle = "1"
	}
	return clustermsg.Encode(msgServe, []byte(h.id), []byte(h.srv.cluster.inst), []byte(connKey(c)),
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
		cl.local[connKey(c)] = c
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
	delete(cl.local, connKey(c))
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
		cl.publish(inboxPrefix+driver, clustermsg.Encode(msgDetach, []byte(h.id), []byte(cl.inst), []byte(connKey(c))))
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
		rc = &remoteConsumer{cl: h.srv.cluster, inst: inst, conn: append([]byte(nil), connID...)}
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

// driveLoop beats and takes stored records in while driving, until ctx
// ends.
func (h *hub) driveLoop(ctx context.Context) {
	cl := h.srv.cluster
	t := time.NewTicker(cl.beat)
	defer t.Stop()
	for {
		h.beat(ctx)
		for done := false; !done; {
			if h.drive.driving.Load() {
				if _, err := h.ledger.Tail(ctx); err != nil && ctx.Err() == nil {
					h.srv.log.Warn("stored inbound not read", "tenant", h.id, "err", err)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-h.drive.kick:
			case <-h.drive.nudge:
				done = true
			case <-t.C:
				done = true
			}
		}
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
		case errors.Is(err, store.ErrNotHeld) || !cl.srv.cfg.Clock.Now().Before(d.lease.Expires):
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
