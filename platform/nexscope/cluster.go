package nexscope

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/cluster"
	"connector/internal/loglimit"
	"connector/internal/wsconn"
	"connector/platform"
	"connector/store"
	"connector/vault"
)

// Several instances (platform.Deps.Cluster set) serve the rooms together on
// the cluster layer (internal/cluster): docs/nexscope.md ("Many instances")
// describes and draws the room's home (the holder of the lease
// "nexscope/room/<name>"), the member's edge, the two cluster.Links of a
// member and the closes (1011, 1012) a gap or a lost instance causes.

// forwardedExecTimeout bounds an action another instance forwarded, with
// what was left of its caller's deadline: the relay's default
// outbound_timeout, after which that instance has answered the gateway
// anyway. The forwarder waits no longer either (a longer outbound_timeout
// included), as the home gives up its answer then.
const forwardedExecTimeout = 30 * time.Second

// The room's channel (the store prefixes it) and the room lease's name.
const (
	roomPrefix  = "nexscope:room:" // + room: messages for the room's home
	leasePrefix = "nexscope/room/" // + room: the home's lease
)

// Messages between instances (internal/cluster: each names its sender, the
// edge or the home). nexscope's types are lower-case letters.
const (
	msgJoin     = 'j' // room channel: room, name, conn
	msgJoined   = 'k' // edge inbox: conn, refusal (close code; "" joined)
	msgIn       = 't' // home inbox: conn, seq, binary ("1"), frame
	msgOut      = 'f' // edge inbox: conn, seq, binary ("1"), frame
	msgClose    = 'c' // edge inbox: conn, code, reason, flush ("1")
	msgLeave    = 'l' // home inbox or room channel: conn
	msgWritten  = 'w' // home inbox: conn, bytes written in total
	msgConsumed = 'u' // edge inbox: conn, bytes processed in total
	msgEdgeBeat = 'b' // home inbox: "conn:sent:written" for each member (",")
	msgHomeBeat = 'h' // edge inbox: "conn:sent:consumed" for each member (",")
	msgExec     = 'x' // call on the room channel: tenant, exec (execClaim), action (JSON, its budget and creation in it: budgetKey, createdKey)
	msgTaken    = 'e' // forwarder's inbox: exec, from the home running it, every beat until it answers (one given up on answered msgCancel)
	msgClaimed  = 'o' // forwarder's inbox: exec, from a home that found it taken by another instance (one whose run before a restart took it)
	msgHeldBy   = 'y' // forwarder's inbox: exec, holder (msgClaimed naming the instance that took it)
	msgCancel   = 'z' // home inbox (or room channel while none took it): exec, from its forwarder, which gave up on it
	msgUnknown  = 'n' // forwarder's inbox: exec, from an instance not the room's home that does not know it (execHere)
	msgProbe    = 'p' // call on an edge's inbox: conn (ping the member for its name)
	// msgStream ('s', stream.go): call on an instance's inbox for a ticket
)

// budgetKey is the key of a forwarded action's JSON (msgExec) that carries
// what was left of its caller's deadline, in ms: a key contract.Action
// lacks, which its decoding ignores. Absent, the home gives the action
// 30 s.
const budgetKey = "nexscope_budget_ms"

// createdKey is the key of a forwarded action's JSON (msgExec) that
// carries, in Unix microseconds, the creation of its tenant the forwarder
// authorized the action under (platform.AuthorizedCreation; absent when
// zero): the home acts on it only while the room is bound to that creation
// (room.actsForLocked), as the forwarder's relay revokes an earlier
// tenant's actions, which the home does not hear of.
const createdKey = "nexscope_created_us"

// A forwarded action is named (msgExec's exec, a ULID: newMsgID) and
// executed once however often it arrives, at whichever home (its
// forwarder sends it again every beat until a home takes it, go-redis a
// PUBLISH when its reply was lost): the home claims it first (fleet.claims,
// the store's, shared by the instances) for forwardedExecTimeout and the
// store's resend window (cluster.Node.ResendWindow), how long copies may
// arrive, and remembers the claim's outcome as long (fleet.execs), so that
// a copy costs no decoding and no store call. The claimer records itself
// as the claim's holder (fleet.holders, as long), so that a home finding
// it claimed names that instance to the forwarder (msgHeldBy), which asks
// it for the answer: a former home whose msgTaken and answer were both
// lost answers a copy with the result it keeps.

// execClaim + exec is a forwarded action's claim in the store.
const execClaim = "nexscope:exec:"

// maxLeft bounds fleet.gone and fleet.execs: a flood of leaves or forwards
// costs bounded memory, and only a join arriving after a leave forgotten
// early makes a ghost (a copy of a forward forgotten early still meets the
// store's claim).
const maxLeft = 1 << 16

// joinBeats is how many beats an edge waits for a room's home to answer a
// join (sent again every beat) before it refuses the client with 1013:
// long enough for a lease takeover (four beats). The edge waits the
// longest decision more (joinRemote): the home's probe of a ghost holding
// the name (fleet.probe).
const joinBeats = 6

// credit reports total, the bytes written or processed so far on this
// side of a member's link, as a typ message to instance when a quarter of
// the send window more were since the last report (*reported): the other
// side, which sees at most that many fewer than there are, never waits on
// a report while less than the window is in flight (and every beat
// repeats the totals). One report per quarter window, not per frame: a
// file costs a few reports.
func (cl *fleet) credit(tenant, instance, conn string, typ byte, total int64, reported *int64) {
	if total-*reported < max(cl.p.cfg.SendQueueBytes/4, 1) {
		return
	}
	*reported = total
	cl.send(tenant, instance, nil, typ, []byte(conn), strconv.AppendInt(nil, total, 10))
}

// fleet is this instance's part in the rooms of several instances.
type fleet struct {
	p       *Platform
	node    *cluster.Node
	streams *streams // direct streams to and from the other instances (stream.go)

	ctx  context.Context // ends when Run ends
	stop context.CancelFunc
	wg   sync.WaitGroup

	// bid starts a room's bid for its lease once start ran (nil before,
	// and again from shutdown on); under Platform.roomsMu. Rooms Bind
	// creates later bid through it.
	bid func(r *room)

	mu      sync.Mutex
	edges   map[string]*member // this instance's sockets in rooms homed elsewhere, by conn
	remotes map[string]*member // members of rooms homed here with their socket elsewhere, by edge/conn
	joining map[string]bool    // remote joins being decided, by edge/conn
	// claims are the forwarded actions taken, the store's claims
	// (platform.ClaimsFor); execs those this instance claimed (nil while
	// it runs one, then its result) or found claimed (claim), and running
	// those it executes.
	claims  store.Claims
	holders store.Capabilities
	execs   platform.LocalState
	running map[string]execRun
	// givenUp are the forwarded actions this instance gave up on whose
	// claim the store did not decide, each with how long a copy may come
	// (claimGivenUp, one goroutine while claiming); at most maxLeft.
	givenUp  map[string]time.Time
	claiming bool
	fullLogs *loglimit.Bucket // of those given up on past maxLeft
	// forwards are this instance's forwarded actions waiting for their
	// result, to the home that took each ("" none yet: msgTaken).
	forwards map[string]*taker
	// gone are the remote members, by edge/conn, that left before they
	// joined (leaveHere), for the store's resend window.
	gone platform.LocalState
	// left are the homes a socket of this instance left lately, by name:
	// the beats still to send each, whether or not a socket here is homed
	// there then, so that a leave lost on the way is repaired (edgeBeat).
	left map[string]int
	// decode decodes a forwarded action (json.Unmarshal; a test holds a
	// decoding on it).
	decode func(data []byte, v any) error
	// beatNo numbers this instance's beats, from its start in ms (a run
	// restarted under its name numbers past the earlier one's); tookBeat
	// is the number of the last beat taken from each peer, by type and
	// name (takeBeat), for the store's resend window.
	beatNo   atomic.Int64
	tookBeat platform.LocalState
}

func newCluster(p *Platform, node *cluster.Node) *fleet {
	// The other instances know a socket here by this instance's name and
	// its number (remotes, gone), and may still know its earlier run's
	// under a fixed name (store.instance): a run numbers afresh.
	p.nextID.Store(rand.Uint64() >> 1)
	ctx, stop := context.WithCancel(context.Background())
	cl := &fleet{
		p: p, node: node, ctx: ctx, stop: stop,
		edges: make(map[string]*member), remotes: make(map[string]*member),
		joining: make(map[string]bool), left: make(map[string]int),
		claims: platform.ClaimsFor(p.deps, maxLeft, p.deps.Clock), holders: platform.StateOr(p.deps.Store, maxLeft, p.deps.Clock), gone: platform.NewLocalState(maxLeft, p.deps.Clock),
		execs: platform.NewLocalState(maxLeft, p.deps.Clock), running: make(map[string]execRun), forwards: make(map[string]*taker),
		givenUp: make(map[string]time.Time), fullLogs: loglimit.NewBucket(loglimit.Rate{Burst: 3, Every: time.Minute}, p.deps.Clock),
		decode: json.Unmarshal, tookBeat: platform.NewLocalState(maxLeft, p.deps.Clock),
	}
	cl.beatNo.Store(p.deps.Clock.Now().UnixMilli())
	cl.streams = newStreams(cl)
	node.Handle(msgJoin, 3, func(m cluster.Msg) {
		cl.joinHere(string(m.Fields[0]), string(m.Fields[1]), m.From, string(m.Fields[2]))
	})
	node.Handle(msgJoined, 2, func(m cluster.Msg) {
		if _, l := cl.edge(m.Fields[0]); l != nil {
			l.answer(m.From, string(m.Fields[1]))
		}
	})
	node.Handle(msgIn, 4, func(m cluster.Msg) {
		if r := cl.remote(m.From, m.Fields[0]); r != nil {
			r.remote.received(r, cluster.Uint(m.Fields[1]), string(m.Fields[2]) == "1", m.Fields[3], m.Held)
		}
	})
	node.Handle(msgOut, 4, func(m cluster.Msg) {
		if e := cl.edgeOf(m.From, m.Fields[0]); e != nil {
			e.link.received(e, cluster.Uint(m.Fields[1]), string(m.Fields[2]) == "1", m.Fields[3], m.Held)
		}
	})
	node.Handle(msgClose, 4, func(m cluster.Msg) {
		if e := cl.edgeOf(m.From, m.Fields[0]); e != nil {
			code, _ := strconv.Atoi(string(m.Fields[1]))
			c := Close{Code: contract.CloseCode(code), Reason: string(m.Fields[2])}
			if abandons(c) {
				e.link.abandon(e, c)
				return
			}
			e.leave()
			e.closeQueue(c, string(m.Fields[3]) == "1")
		}
	})
	node.Handle(msgLeave, 1, func(m cluster.Msg) { cl.leaveHere(m.From + "/" + string(m.Fields[0])) })
	node.Handle(msgWritten, 2, func(m cluster.Msg) {
		if r := cl.remote(m.From, m.Fields[0]); r != nil {
			r.remote.wrote(r, int64(cluster.Uint(m.Fields[1])))
		}
	})
	node.Handle(msgConsumed, 2, func(m cluster.Msg) {
		if e := cl.edgeOf(m.From, m.Fields[0]); e != nil {
			e.link.consumedUpTo(int64(cluster.Uint(m.Fields[1])))
		}
	})
	node.Handle(msgEdgeBeat, 1, func(m cluster.Msg) { cl.edgeBeat(m.From, m.Fields[0]) })
	node.Handle(msgHomeBeat, 1, func(m cluster.Msg) { cl.homeBeat(m.From, m.Fields[0]) })
	node.Handle(msgTaken, 1, func(m cluster.Msg) {
		cl.mu.Lock()
		f := cl.forwards[string(m.Fields[0])]
		if f != nil && (f.home == "" || f.home == m.From) {
			now := cl.p.deps.Clock.Now()
			if f.home == "" {
				f.home, f.since = m.From, now
			}
			f.heard = now
		}
		cl.mu.Unlock()
		if f == nil {
			// Waited for here no more: given up on (the cancel told the
			// home may have been lost) or answered (the cancel a no-op
			// then). Told again at each such word until the home ends it.
			cl.sendNow(m.From, msgCancel, m.Fields[0])
		}
	})
	// forgot reports whether m is the word of the instance that took the
	// forward f that it does not know it (it restarted under its name, or
	// forgot it): no answer will come, and f ends.
	forgot := func(f *taker, m cluster.Msg) bool {
		if f == nil || f.home == "" || f.home != m.From {
			return false
		}
		f.forgot = true
		f.end()
		return true
	}
	claimed := func(m cluster.Msg) {
		cl.mu.Lock()
		f, now := cl.forwards[string(m.Fields[0])], cl.p.deps.Clock.Now()
		switch {
		case forgot(f, m):
		case f != nil && len(m.Fields) > 1 && f.home == "":
			// Not heard from yet: asked for the answer from the next copy on.
			f.home, f.since, f.heard = string(m.Fields[1]), now, time.Time{}
		case f != nil && f.since.IsZero():
			f.since = now // taken by a home not named yet
		}
		cl.mu.Unlock()
	}
	node.Handle(msgClaimed, 1, claimed)
	node.Handle(msgHeldBy, 2, claimed)
	node.Handle(msgUnknown, 1, func(m cluster.Msg) { // from no other: one read on the room's channel
		cl.mu.Lock()
		forgot(cl.forwards[string(m.Fields[0])], m)
		cl.mu.Unlock()
	})
	node.Handle(msgCancel, 1, func(m cluster.Msg) { cl.cancelHere(m.From, string(m.Fields[0])) })
	node.HandleCall(msgExec, 3, cl.execHere)
	node.HandleCall(msgProbe, 1, cl.probeHere)
	node.HandleCall(msgStream, 0, cl.streams.ticketHere)
	return cl
}

// start runs the beat and, for every room, the bid for its lease until ctx
// ends.
func (cl *fleet) start(ctx context.Context) {
	if addr := cl.p.cfg.ClusterAddr; addr != "" {
		if err := cl.streams.listen(addr); err != nil {
			cl.p.deps.Log.Error("nexscope cluster_addr not listened on; member frames cross Redis pub/sub", "cluster_addr", addr, "err", err)
		}
	}
	// Beats on a timer of their own, not the node's (OnBeat): the relay's
	// part of that waits on the store (a slow Redis), and nexscope's beats
	// waiting with it would have its peers count this instance gone.
	cl.wg.Go(func() {
		clock.Every(cl.ctx, cl.node.Clock(), cl.node.Beat(), func(context.Context) { cl.sendBeats() })
	})
	// Bind holds roomsMu while it adds a room and calls cl.bid if set, so
	// every room bids once: those here now, and later ones through cl.bid.
	cl.p.roomsMu.Lock()
	defer cl.p.roomsMu.Unlock()
	bids := make(map[string]chan struct{}) // the bids running, by room; under roomsMu
	cl.bid = func(r *room) {
		bidCtx, unbid := context.WithCancel(ctx)
		r.unbid = unbid // the room dropped (Platform.dropIdle): its bid ends
		prev, done := bids[r.name], make(chan struct{})
		bids[r.name] = done
		cl.wg.Go(func() {
			defer func() {
				unbid()
				cl.p.roomsMu.Lock()
				if bids[r.name] == done {
					delete(bids, r.name)
				}
				cl.p.roomsMu.Unlock()
				close(done)
			}()
			if afterBid(bidCtx, prev) {
				_ = cl.p.deps.RunExclusive(bidCtx, leasePrefix+r.name, func(hctx context.Context) error { return cl.home(ctx, hctx, r) })
			}
		})
	}
	for _, r := range cl.p.rooms {
		cl.bid(r)
	}
}

// afterBid waits until prev (nil: none), the bid of a room dropped under
// the same name, has ended, and reports whether ctx is still alive then.
// That bid releases the room's lease as it ends; this instance bidding
// meanwhile would take the lease as the same holder (store.Leases.Acquire
// extends it), and the release would free it under the new room's home.
func afterBid(ctx context.Context, prev <-chan struct{}) bool {
	if prev != nil {
		select {
		case <-prev:
		case <-ctx.Done():
		}
	}
	return ctx.Err() == nil
}

// shutdown ends the beat and the bids, which end with Run's
// context (releasing the room leases). A room Bind creates from then on
// bids no more: its bid would add to the wait group while it is waited
// for, which a WaitGroup forbids once its count reached zero.
func (cl *fleet) shutdown() {
	cl.p.roomsMu.Lock()
	cl.bid = nil
	cl.p.roomsMu.Unlock()
	cl.mu.Lock() // no claimGivenUp starts once its wait group is waited for
	cl.stop()
	cl.mu.Unlock()
	cl.wg.Wait()
	cl.streams.close()
}

// send queues a message for instance's inbox, on the direct stream to it
// when there is one (stream.go); it waits while the queue is full (bulk
// frames hold their sender back), over pub/sub while the outbox's share of
// tenant (a member's room's, "": none) is. The fields must stay unchanged once
// queued: a direct stream writes them from where they are. Fields that lie
// in c (when not nil) keep it retained until they are written.
func (cl *fleet) send(tenant, instance string, c *chunk, typ byte, fields ...[]byte) {
	if c != nil {
		c.Retain()
	}
	if !cl.streams.send(instance, true, streamMsg{typ: typ, tenant: tenant, fields: fields, held: c}) {
		cl.node.SendWait(cl.ctx, tenant, cluster.Inbox(instance), typ, fields...)
	}
}

// sendNow is send, of no chunk, for messages that must not wait (beats,
// and what a stream's or channel's reader sends): one that finds the queue
// full is lost, as pub/sub may lose any.
func (cl *fleet) sendNow(instance string, typ byte, fields ...[]byte) {
	if !cl.streams.send(instance, false, streamMsg{typ: typ, fields: fields}) {
		cl.node.Send(cluster.Inbox(instance), typ, fields...)
	}
}

// home runs r as its home while this instance holds the room's lease
// (hctx); runCtx is Run's. On the way out every member is closed: with
// 1001 when the connector shuts down, else with 1012 (the room moves).
func (cl *fleet) home(runCtx, hctx context.Context, r *room) error {
	cancel, err := cl.node.Subscribe(hctx, roomPrefix+r.name)
	if err != nil {
		cl.p.deps.Log.Warn("nexscope room channel not subscribed; the room's lease is given up", "room", r.name, "err", err)
		return nil
	}
	r.becomeHome(hctx)
	cl.p.deps.Log.Info("nexscope room homed on this instance", "room", r.name)
	<-hctx.Done()
	cancel()
	c := CloseRoomMoved
	if runCtx.Err() != nil {
		c = CloseGoingAway
	}
	r.resign(c)
	cl.p.deps.Log.Info("nexscope room no longer homed on this instance", "room", r.name)
	return nil
}

// edge returns this instance's socket conn in a room homed elsewhere, and
// its link (read under mu: joinRemote may take it back).
func (cl *fleet) edge(conn []byte) (*member, *edgeLink) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if m := cl.edges[string(conn)]; m != nil {
		return m, m.link
	}
	return nil, nil
}

// edgeOf returns this instance's socket conn in a room homed on home:
// the messages of a member's link count only from the home that took its
// join, not from a former home of the room (one that woke from a pause
// past its lease and still believed it was home).
func (cl *fleet) edgeOf(home string, conn []byte) *member {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if m := cl.edges[string(conn)]; m != nil && m.link.home == home {
		return m
	}
	return nil
}

// remote returns the remote member of a room homed here.
func (cl *fleet) remote(edge string, conn []byte) *member {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.remotes[edge+"/"+string(conn)]
}

// sendBeats tells every instance this one works with which members it
// holds, with the last frame sent to each and the bytes written or
// processed, and closes the members linked with instances gone.
func (cl *fleet) sendBeats() {
	toHome := make(map[string][]byte)
	toEdge := make(map[string][]byte)
	var lost []*member
	cl.mu.Lock()
	running := maps.Clone(cl.running)
	for conn, m := range cl.edges {
		if h := m.link.home; h != "" {
			if cl.node.Gone(h, m.link.since) {
				lost = append(lost, m)
				continue
			}
			toHome[h] = appendBeat(toHome[h], conn, m.link.out.Sent(), m.link.written.Load())
		}
	}
	for _, m := range cl.remotes {
		l := m.remote
		if cl.node.Gone(l.edge, l.since) {
			lost = append(lost, m)
			continue
		}
		toEdge[l.edge] = appendBeat(toEdge[l.edge], l.conn, l.out.Sent(), l.consumed.Load())
	}
	for h, n := range cl.left {
		if _, ok := toHome[h]; !ok {
			toHome[h] = nil // no socket here is homed there any more
		}
		if n > 1 {
			cl.left[h] = n - 1
		} else {
			delete(cl.left, h)
		}
	}
	cl.mu.Unlock()
	for _, m := range lost {
		if m.link != nil {
			m.log.Info("nexscope room's home instance is gone; closing its member here")
			m.kick(CloseRoomMoved)
		} else {
			m.log.Info("nexscope member's instance is gone; removing it from the room")
			m.kick(wsconn.Drop)
		}
	}
	for exec, run := range running {
		cl.sendNow(run.forwarder, msgTaken, []byte(exec))
	}
	// Its number leads the list as an entry with no conn, which a reader
	// that knows none skips.
	no := append(appendBeat(nil, "", 0, cl.beatNo.Add(1)), ',')
	no = no[:len(no):len(no)] // each append copies it
	for h, list := range toHome {
		cl.sendNow(h, msgEdgeBeat, append(no, list...))
	}
	for e, list := range toEdge {
		cl.sendNow(e, msgHomeBeat, append(no, list...))
	}
}

// appendBeat appends one member's "conn:sent:total" to a beat's list.
func appendBeat(list []byte, conn string, sent uint64, total int64) []byte {
	if len(list) > 0 {
		list = append(list, ',')
	}
	list = append(list, conn...)
	list = append(list, ':')
	list = cluster.AppendUint(list, sent)
	list = append(list, ':')
	return strconv.AppendInt(list, total, 10)
}

// beatEntry is one member of a beat's list.
type beatEntry struct {
	sent  uint64
	total int64
}

// parseBeat reads a beat's list and its number (the entry with no conn;
// 0 when none); malformed entries are skipped.
func parseBeat(list []byte) (out map[string]beatEntry, no int64) {
	out = make(map[string]beatEntry)
	for e := range bytes.SplitSeq(list, []byte{','}) {
		parts := bytes.Split(e, []byte{':'})
		if len(parts) != 3 {
			continue
		}
		total, _ := strconv.ParseInt(string(parts[2]), 10, 64)
		if len(parts[0]) == 0 {
			no = total
			continue
		}
		out[string(parts[0])] = beatEntry{sent: cluster.Uint(parts[1]), total: total}
	}
	return out, no
}

// takeBeat reads a peer's beat (of type typ, from peer) against the
// members linked with it (linked gives each one's conn, join time and link
// from the peer): one not listed and joined over a beat ago is stale, one
// with frames lost is broken, and each other one listed is credited the
// total the peer reported. unknown are the conns listed that no member
// here matches. A beat numbered no later than one taken from the peer
// (pub/sub delivering it again late) is ignored, unless it is numbered
// lower than any beat of the resend window's could be: the peer restarted
// under its name with its clock set back.
func (cl *fleet) takeBeat(typ byte, peer string, list []byte, members map[string]*member, linked func(*member) (conn string, since time.Time, in *cluster.Link, ok bool)) (stale, broken []*member, credits map[*member]int64, unknown map[string]beatEntry) {
	now := cl.p.deps.Clock.Now()
	listed, no := parseBeat(list)
	credits = make(map[*member]int64)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if key, window := string(typ)+peer, cl.node.ResendWindow()+cluster.LostBeats*cl.node.Beat(); no != 0 {
		// The peer beats at most once a beat, so a beat sent again lags
		// the last one by at most the window's beats.
		took, ok, _ := cl.tookBeat.Get(cl.ctx, key)
		if last := int64(cluster.Uint(took)); ok && no <= last && last-no <= int64(window/cl.node.Beat()) {
			return nil, nil, nil, nil
		}
		_ = cl.tookBeat.Put(cl.ctx, key, cluster.AppendUint(nil, uint64(no)), now.Add(window))
	}
	for _, m := range members {
		conn, since, in, ok := linked(m)
		if !ok {
			continue
		}
		e, ok := listed[conn]
		delete(listed, conn)
		switch {
		case !ok && now.Sub(since) > cl.node.Beat():
			stale = append(stale, m)
		case ok && in.Missing(e.sent):
			broken = append(broken, m)
		case ok:
			credits[m] = e.total
		}
	}
	return stale, broken, credits, listed
}

// edgeBeat takes an edge's beat: a remote member it no longer holds is
// removed, one whose frames were lost on the way here is closed with 1011,
// and the bytes written are credited. A member it lists that is not here
// (removed as stale or gone, which told the edge nothing) is closed there
// with 1011: the frames it sends are dropped here, never answered.
func (cl *fleet) edgeBeat(edge string, list []byte) {
	stale, broken, credits, unknown := cl.takeBeat(msgEdgeBeat, edge, list, cl.remotes, func(m *member) (string, time.Time, *cluster.Link, bool) {
		l := m.remote
		return l.conn, l.since, &l.in.Link, l.edge == edge
	})
	for _, m := range stale {
		m.kick(wsconn.Drop)
	}
	for _, m := range broken {
		m.log.Warn("nexscope frames from the member's instance lost; closing it")
		m.kick(CloseFramesLost)
	}
	for m, total := range credits {
		m.remote.wrote(m, total)
	}
	for conn := range unknown {
		cl.sendNow(edge, msgClose, []byte(conn), strconv.AppendInt(nil, int64(CloseFramesLost.Code), 10), []byte(CloseFramesLost.Reason), cluster.Flag(false))
	}
}

// homeBeat takes a home's beat: this instance's members the home no longer
// keeps, or whose frames from the home were lost on the way, are closed
// with 1011, and the bytes the home processed are credited.
func (cl *fleet) homeBeat(home string, list []byte) {
	stale, broken, credits, _ := cl.takeBeat(msgHomeBeat, home, list, cl.edges, func(m *member) (string, time.Time, *cluster.Link, bool) {
		return m.link.conn, m.link.since, &m.link.in, m.link.home == home
	})
	for _, m := range append(stale, broken...) {
		m.log.Info("nexscope room's home no longer keeps this member, or frames from it were lost")
		m.kick(CloseFramesLost)
	}
	for m, total := range credits {
		m.link.consumedUpTo(total)
	}
}

// joinRemote joins m, a socket of this instance, to its room at the room's
// home, asking again every beat until the home answers or joinBeats beats
// and the bound of a ghost probe pass. It returns the Close that refuses m,
// nil once joined, or errHomedHere, m's link taken back, once this
// instance is the room's home before the home asked answered (it dropped
// the room or lost its lease): m joins here. A room this instance dropped meanwhile
// refuses m as unknown.
func (cl *fleet) joinRemote(m *member) error {
	r := m.room
	conn := strconv.FormatUint(m.id, 10)
	l := &edgeLink{cl: cl, conn: conn, joined: make(chan string, 1), done: make(chan struct{}), credit: make(chan struct{}, 1)}
	cl.mu.Lock()
	m.link = l
	cl.edges[conn] = m
	cl.mu.Unlock()
	tries := joinBeats + int((nameProbeTimeout+2*cl.node.Beat()-1)/cl.node.Beat()) // joinBeats, then ⌈probe bound⌉
	for try := 0; ; try++ {
		if try == tries {
			m.leave()
			return CloseNoHome
		}
		r.mu.Lock()
		away, dropped := r.away, r.dropped
		r.mu.Unlock()
		if dropped { // here (Platform.dropIdle): refused as a join here is
			m.leave()
			return CloseUnknownRoom
		}
		wake := away.Done()
		if !r.homeHeld() {
			cl.node.SendWait(cl.ctx, r.tenant(), roomPrefix+r.name, msgJoin, []byte(r.name), []byte(m.name), []byte(conn))
		} else if cl.takeBack(m) {
			return errHomedHere
		} else {
			wake = nil // the home answered before: its answer stands
		}
		expired := make(chan struct{})
		t := cl.p.deps.Clock.AfterFunc(cl.node.Beat(), func() { close(expired) })
		select {
		case refusal := <-l.joined:
			t.Stop()
			if refusal != "" {
				m.leave()
				code, _ := strconv.Atoi(refusal)
				return refusalClose(code)
			}
			return nil
		case <-l.done:
			t.Stop()
			return CloseGoingAway
		case <-wake:
			t.Stop()
		case <-expired:
		}
	}
}

// takeBack takes the link of m, joining the room homed here now, back
// unless the home it asked answered (the frames of a member it took may
// be on their way to its link): m then joins here.
func (cl *fleet) takeBack(m *member) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if m.link.answered {
		return false
	}
	delete(cl.edges, m.link.conn)
	m.link = nil
	return true
}

// errHomedHere is joinRemote's answer once the room is homed here.
var errHomedHere = errors.New("nexscope: the room is homed on this instance")

// refusalClose is the Close a home's refusal code stands for.
func refusalClose(code int) Close {
	for _, c := range []Close{CloseNameTaken, CloseRoomFull, CloseRoomMoved, CloseGoingAway, CloseUnknownRoom} {
		if int(c.Code) == code {
			return c
		}
	}
	return CloseNoHome
}

// joinHere decides a join that an edge sent to a room homed here: the
// member joins (or is refused) as a local one would, and its frames then
// flow through runRemote. An instance whose lease of the room lapsed does
// not answer (the edge takes the first answer; it must be the home's).
func (cl *fleet) joinHere(roomName, name, edge, conn string) {
	p := cl.p
	r := p.room(roomName)
	if r == nil || !validName(name) || !r.homeHeld() {
		return // not (any more) the room's home: the home answers
	}
	if edge == cl.node.Instance() {
		return // its own socket, which joins here (joinRemote)
	}
	key := edge + "/" + conn
	cl.mu.Lock()
	if _, left, _ := cl.gone.Get(cl.ctx, key); left || cl.joining[key] {
		cl.mu.Unlock()
		return // its socket left already (leaveHere), or an edge asking again while the first ask is decided
	}
	if cl.remotes[key] != nil {
		cl.mu.Unlock()
		cl.sendNow(edge, msgJoined, []byte(conn), nil) // the first answer was lost; the edge asks again
		return
	}
	cl.joining[key] = true
	cl.mu.Unlock()
	goingAway := strconv.Itoa(int(CloseGoingAway.Code))
	if !p.track() {
		cl.decided(r, edge, conn, nil, goingAway)
		return
	}
	go func() {
		defer p.wg.Done()
		m := newMember(p, r, name)
		m.remote = &homeLink{cl: cl, edge: edge, conn: conn, since: p.deps.Clock.Now()}
		m.remote.in.q = wsconn.NewQueue(remoteReader{m}, 0, math.MaxInt64, 0)
		m.q = m.newQueue(remoteWriter{m})
		m.log = p.deps.Log.With("room", r.name, "member", name, "edge", edge, "conn", conn)
		if !p.register(m) {
			cl.decided(r, edge, conn, nil, goingAway)
			return
		}
		defer p.unregister(m)
		err := r.join(m)
		if err == CloseNameTaken && r.replaceGhost(name) {
			err = r.join(m)
		}
		if c, ok := err.(Close); ok {
			cl.decided(r, edge, conn, nil, strconv.Itoa(int(c.Code)))
			return
		}
		if !cl.decided(r, edge, conn, m, "") {
			m.leave() // its socket left as it joined (leaveHere)
			m.q.Close(wsconn.Drop, false)
			return
		}
		m.log.Debug("nexscope remote member joined")
		m.runRemote()
		cl.mu.Lock()
		if cl.remotes[key] == m {
			delete(cl.remotes, key)
		}
		cl.mu.Unlock()
	}()
}

// decided ends the decision on the join of edge's conn to r and answers
// it (with r's tenant): m joined (refusal ""), or m is nil and refusal is
// the refusing close code.
// It reports false, answering nothing, when m's socket left meanwhile
// (leaveHere): m is to leave.
func (cl *fleet) decided(r *room, edge, conn string, m *member, refusal string) bool {
	key := edge + "/" + conn
	cl.mu.Lock()
	delete(cl.joining, key)
	_, left, _ := cl.gone.Get(cl.ctx, key)
	if m != nil && !left {
		cl.remotes[key] = m
	}
	cl.mu.Unlock()
	if m != nil && left {
		return false
	}
	cl.send(r.tenant(), edge, nil, msgJoined, []byte(conn), []byte(refusal))
	return true
}

// leaveHere removes key's remote member (edge/conn), whose socket is gone:
// nothing to tell the edge. One not joined yet, its join on its way or
// being decided (the edge sent the join again, or go-redis its PUBLISH,
// after the leave), is remembered for the store's resend window, so that
// join joins nobody: the name would be taken, and the member listed, until
// the edge's next beat.
func (cl *fleet) leaveHere(key string) {
	cl.mu.Lock()
	m := cl.remotes[key]
	if m == nil {
		_ = cl.gone.Put(cl.ctx, key, nil, cl.p.deps.Clock.Now().Add(cl.node.ResendWindow()))
	}
	cl.mu.Unlock()
	if m != nil {
		m.kick(wsconn.Drop)
	}
}

// probe asks the edge of m, a remote member, whether m answers a WebSocket
// ping within nameProbeTimeout (a new connection asks for its name); no
// answer from the edge within a beat more counts as no.
func (cl *fleet) probe(m *member) bool {
	ctx, cancel := context.WithCancel(cl.ctx)
	defer cancel()
	defer cl.p.deps.Clock.AfterFunc(nameProbeTimeout+cl.node.Beat(), cancel).Stop()
	res, ok := cl.node.Call(ctx, cluster.Inbox(m.remote.edge), msgProbe, []byte(m.remote.conn))
	return ok && string(res) == "1"
}

// probeHere answers a home's probe of one of this instance's sockets: "1"
// when it is alive (member.answersProbe). A socket this instance does not hold is
// not alive.
func (cl *fleet) probeHere(req cluster.Msg) {
	m, _ := cl.edge(req.Fields[0])
	if m == nil {
		cl.node.Reply(req, cluster.Flag(false))
		return
	}
	if !cl.p.track() {
		return
	}
	go func() {
		defer cl.p.wg.Done()
		cl.node.Reply(req, cluster.Flag(m.answersProbe()))
	}()
}

// forwardExec asks the home of r to execute a (the home authorizes it)
// within what is left of ctx's deadline (forwardedExecTimeout at most),
// asking again every beat until a home takes it (a room between homes
// reads no request: the next home reads a copy), and that home every beat
// once its msgTaken stopped with no answer come (the answer lost), and
// waits for its result until then, or ctx ends, or away
// (r.away) does: this instance becomes the room's home (the home asked
// dropped the room or lost its lease, and will not answer) or drops it, or
// the home that took it is gone (silent for cluster.LostBeats beats: it
// tells msgTaken every beat until it answers; one a home found taken by
// another, msgClaimed, is gone unless that one names itself in time), or
// says it does not know the action (msgUnknown, or msgClaimed from it:
// it restarted under its name, or forgot it).
func (cl *fleet) forwardExec(ctx, away context.Context, r *room, tenant string, a *contract.Action) contract.Result {
	ctx, cancel := context.WithTimeout(ctx, forwardedExecTimeout)
	defer cancel()
	defer context.AfterFunc(away, cancel)()
	action, err := json.Marshal(a)
	if err != nil {
		return contract.Failed(contract.CodeBadRequest, "nexscope: action cannot be encoded")
	}
	exec := cl.p.newMsgID()
	var created []byte
	if c := platform.AuthorizedCreation(ctx, cl.p.deps.Vault, tenant); !c.IsZero() { // as check 8 approved it
		created = strconv.AppendInt([]byte(`,"`+createdKey+`":`), c.UnixMicro(), 10)
	}
	f := &taker{end: cancel}
	cl.mu.Lock()
	cl.forwards[exec] = f
	cl.mu.Unlock()
	defer func() {
		cl.mu.Lock()
		delete(cl.forwards, exec)
		cl.mu.Unlock()
	}()
	lost := false
	raw, ok := cl.node.CallAgain(ctx, tenant, cl.node.Beat(), msgExec, func() (string, [][]byte) {
		cl.mu.Lock()
		home, since, heard := f.home, f.since, f.heard
		cl.mu.Unlock()
		channel := roomPrefix + r.name
		if !since.IsZero() {
			// A home not named ("": msgClaimed) is never heard from:
			// gone unless its msgTaken names it within LostBeats beats.
			if lost = cl.node.Gone(home, since); lost {
				cancel()
				return "", nil
			}
			if home == "" || cl.p.deps.Clock.Now().Sub(heard) <= cl.node.Beat()*3/2 {
				return "", nil // taken: no copy
			}
			// Its home stopped telling msgTaken and no answer came: it
			// answered and the answer was lost, or it is gone. A copy has
			// it answer again (execHere): asked from a beat and a half of
			// silence on, so that a check of these, each a beat after the
			// last (a busy instance's later), comes before it counts gone
			// (from three); to it, not the room, which may have moved since
			// (its next home would only find the action claimed).
			channel = cluster.Inbox(home)
		}
		dl, _ := ctx.Deadline()
		budget := time.Until(dl)
		// The budget is relative: the instances' clocks may disagree, so a
		// deadline would move by their skew; counted from the home's
		// receipt, it ends one hop late at most (as the answer's way back
		// takes one).
		head := append(strconv.AppendInt([]byte(`{"`+budgetKey+`":`), budget.Milliseconds(), 10), created...)
		return channel, [][]byte{[]byte(tenant), []byte(exec), append(append(head, ','), action[1:]...)}
	})
	cl.mu.Lock()
	forgot := f.forgot
	cl.mu.Unlock()
	if !ok && (lost || forgot) {
		why := "the room's home instance that took the action is gone"
		if forgot {
			why = "the instance that took the action no longer knows it (it restarted, or forgot it)"
		}
		res := contract.Failed(contract.CodeUnavailable, "nexscope: "+why+"; its outcome is unknown")
		res.Ambiguous = true // it may have run: not to be sent again as if it had not
		return res
	}
	if !ok {
		// Its caller gave up (its gateway revoked, its deadline passed):
		// the home is told, so that the action does not run on (again at
		// each msgTaken it sends from then on: this one may be lost), and the
		// action claimed here unless a home took it, so that no later home
		// runs a copy (go-redis sends a PUBLISH again up to its resend
		// window; a cancel reaches only the room's home of the moment).
		cl.mu.Lock()
		home, taken := f.home, !f.since.IsZero()
		cl.mu.Unlock()
		if home != "" {
			cl.sendNow(home, msgCancel, []byte(exec))
		} else {
			cl.node.Send(roomPrefix+r.name, msgCancel, []byte(exec))
		}
		// Claimed now, unless a home said it took it, so that the gateway
		// learns whether it may send it again: a claim won means no home
		// took it nor will (each claims it first); one lost, a home took
		// it, its word (msgTaken) lost. One the store does not decide
		// within ClaimTimeout is tried again every beat
		// (claimGivenUp), as long as a copy may come.
		res := contract.Failed(contract.CodeUnavailable, "nexscope: the room's home instance did not answer")
		if taken {
			res.Ambiguous = true // it may have run
			return res
		}
		until := cl.p.deps.Clock.Now().Add(forwardedExecTimeout + cl.node.ResendWindow())
		claimCtx, cancelClaim := context.WithTimeout(cl.ctx, cl.p.cfg.ClaimTimeout) // the store's I/O deadline
		took, err := cl.claims.Claim(claimCtx, execClaim+exec, until)
		cancelClaim()
		if err == nil {
			if took {
				return contract.Failed(contract.CodeUnavailable, "nexscope: no home instance of the room took the action in time; it did not run")
			}
			res.Ambiguous = true
			return res
		}
		res.Ambiguous = true // undecided: a home may take it before the claim
		cl.mu.Lock()
		full := len(cl.givenUp) >= maxLeft
		if !full && cl.ctx.Err() == nil {
			cl.givenUp[exec] = until
			if !cl.claiming {
				cl.claiming = true
				cl.wg.Go(cl.claimGivenUp)
			}
		}
		cl.mu.Unlock()
		if full {
			cl.fullLogs.Log(cl.p.deps.Log, slog.LevelWarn, "nexscope forward given up on not claimed: as many wait for the store; a late copy of it may run", "room", r.name)
		}
		return res
	}
	var res contract.Result
	if json.Unmarshal(raw, &res) != nil {
		return contract.Failed(contract.CodeUnavailable, "nexscope: the room's home answered garbage")
	}
	return res
}

// claimGivenUp claims again the forwarded actions given up on whose claim
// the store did not decide (fleet.givenUp), a pass every beat, as long as
// a copy may come (one read by a home once the store is back would run
// otherwise), until none is left or the instance shuts down: one
// goroutine and one store call at a time however many there are, each
// give-up's first claim made at once by its forwardExec.
func (cl *fleet) claimGivenUp() {
	clk := cl.p.deps.Clock
	for clk.Sleep(cl.ctx, cl.node.Beat()) == nil {
		cl.mu.Lock()
		pending := maps.Clone(cl.givenUp)
		cl.mu.Unlock()
		for exec, until := range pending {
			// One whose window ended asks no store: no copy may come.
			if clk.Now().Before(until) {
				if _, err := cl.claims.Claim(cl.ctx, execClaim+exec, until); err != nil {
					continue // tried again next pass, or forgotten then
				}
			}
			cl.mu.Lock()
			delete(cl.givenUp, exec)
			cl.mu.Unlock()
		}
		cl.mu.Lock()
		if len(cl.givenUp) == 0 {
			cl.claiming = false
			cl.mu.Unlock()
			return
		}
		cl.mu.Unlock()
	}
}

// taker is the home that took a forwarded action (msgTaken), when it
// first told so and when last, or ("" home) when a home found it taken by
// another (msgClaimed) not named (msgHeldBy), and whether it said it does
// not know it (forgot, which ends the forward: end); under fleet.mu.
type taker struct {
	home         string
	since, heard time.Time
	forgot       bool
	end          context.CancelFunc
}

// execHere executes an action another instance forwarded to a room homed
// here and answers the result, telling its forwarder every beat that it
// took it (msgTaken) until then. An instance whose lease of the room lapsed
// (it woke from a pause past it, and still reads the room's channel until
// its tenure's timer resigns the room) neither executes nor answers it:
// the first answer is the one the forwarder takes, and it must be the
// home's. A copy of one claimed before here is dropped undecoded. One
// another instance claimed (a former home, whose msgTaken was lost) is
// not answered either, since that instance may be running it: the
// forwarder is told (msgClaimed, at each copy) and waits for the word of
// the one that took it, which it counts gone after LostBeats beats
// without it. A copy of one answered here is answered again: the
// forwarder sends one when msgTaken stopped and no answer came (lost).
func (cl *fleet) execHere(req cluster.Msg) {
	p := cl.p
	exec := string(req.Fields[1])
	if req.From == cl.node.Instance() {
		return // its own forward, a copy read once it became the home: its forwardExec gives up (away)
	}
	if v, seen, _ := cl.execs.Get(cl.ctx, exec); seen || !p.track() {
		switch {
		case len(v) > 0 && v[0] == claimedElsewhere: // (claim)
			cl.tellClaimed(req.From, req.Fields[1], v[1:]) // its first word was lost
		case len(v) > 0: // answered here, and the answer lost: the forwarder asks again
			cl.node.Reply(req, v)
		}
		return // a copy: the first is answered
	}
	received := p.deps.Clock.Now()
	go func() { // decoded here, not on the channel's reader: an action may be megabytes
		defer p.wg.Done()
		budget := forwardedExecTimeout // the forwarder's, from the receipt
		var a struct {
			contract.Action
			Budget  json.RawMessage `json:"nexscope_budget_ms"`  // budgetKey
			Created *int64          `json:"nexscope_created_us"` // createdKey
		}
		res := contract.Failed(contract.CodeBadRequest, "nexscope: forwarded action cannot be decoded")
		took := false
		if cl.decode(req.Fields[2], &a) == nil {
			r, _ := roomOf(p, string(a.ChatID))
			tenure := r.heldTenure()
			if tenure == nil {
				// Not (any more) the room's home: the home answers. Unless
				// this instance is the one that took it, asked directly
				// (restarted under its name since): its forwarder, told,
				// waits no more (a copy read on the room's channel it
				// ignores, from no instance it names). Unless this instance
				// knows it: a copy decoded with one that claimed it before
				// the lease was lost, which answers.
				if _, seen, _ := cl.execs.Get(cl.ctx, exec); !seen {
					cl.sendNow(req.From, msgUnknown, req.Fields[1])
				}
				return
			}
			var holder []byte
			took, holder = cl.claim(exec)
			if holder != nil {
				cl.tellClaimed(req.From, req.Fields[1], holder[1:])
			}
			if !took {
				return // a copy sent again: the first is answered (or its claim failed: a copy may take it)
			}
			cl.sendNow(req.From, msgTaken, req.Fields[1])
			// Within the room's tenure here: a shutdown (whose wait for
			// this goroutine comes before cl.ctx ends) or a lease lost
			// ends it, as it ends the room's transfers; so does its
			// forwarder's msgCancel, here now or before (cancelHere).
			tenure, stop := context.WithCancel(tenure)
			defer stop()
			cl.mu.Lock()
			cl.running[exec] = execRun{req.From, stop}
			if v, _, _ := cl.execs.Get(cl.ctx, exec); len(v) > 0 {
				stop()
			}
			cl.mu.Unlock()
			defer func() {
				cl.mu.Lock()
				delete(cl.running, exec)
				cl.mu.Unlock()
			}()
			// The forwarder's caller gives up after budget: an action still
			// running then would act after the gateway was told it failed.
			// One spent when it was forwarded (0 or less; a field that is no
			// number counts as spent) is not executed at all: send and prompt
			// do not wait on their context. send_media waits for the room's
			// lock and its recipients within it.
			if a.Budget != nil {
				ms, err := strconv.ParseInt(string(a.Budget), 10, 64)
				if err != nil {
					ms = 0
				}
				budget = time.Duration(min(ms, forwardedExecTimeout.Milliseconds())) * time.Millisecond
			}
			switch {
			case budget <= 0:
				res = contract.Failed(contract.CodeUnavailable, "nexscope: the action's deadline had passed when it was forwarded to the room's home")
			case tenure.Err() != nil:
				res = contract.Failed(contract.CodeUnavailable, "nexscope: the forwarded action ended before it ran (its forwarder gave up, or the room moved)")
			case !vault.Known(p.deps.Vault, string(req.Fields[0])):
				// Check 8 here too: the forwarder may not have applied the
				// tenant's deletion yet, which this instance has; or this one
				// not the creation the forwarder authorized it under (it
				// cannot tell which), unavailable as in actsForLocked.
				res = contract.Declined(platformName)
				if a.Created != nil {
					res = contract.Failed(contract.CodeUnavailable, "nexscope: the room's home has not applied the tenant's creation yet; retry")
				}
			default:
				ctx, cancel := context.WithTimeout(tenure, budget)
				if a.Created != nil {
					ctx = platform.WithCreation(ctx, time.UnixMicro(*a.Created)) // as its forwarder authorized it
				}
				res = platform.Execute(ctx, &p.here, p, string(req.Fields[0]), &a.Action)
				cancel()
			}
		}
		raw, _ := json.Marshal(res) // a Result always encodes
		if took {
			_ = cl.execs.Put(cl.ctx, exec, raw, received.Add(forwardedExecTimeout+cl.node.ResendWindow()))
		}
		// Waiting for room: msgTaken stops once this returns, so the
		// forwarder would wait its whole deadline for a result lost; until
		// budget (its deadline, counted from the receipt) at most, by which
		// it has given up (and a shutdown would wait for this goroutine).
		// Tried once first: past the deadline SendWait picks at random.
		if left := budget - p.deps.Clock.Now().Sub(received); !cl.node.Reply(req, raw) && left > 0 {
			ctx, cancel := context.WithCancel(cl.ctx)
			t := p.deps.Clock.AfterFunc(left, cancel)
			cl.node.ReplyWait(ctx, req, raw)
			t.Stop()
			cancel()
		}
	}()
}

// execRun is a forwarded action running here: its forwarder, and the
// cancel of its context.
type execRun struct {
	forwarder string
	stop      context.CancelFunc
}

// cancelled is the fleet.execs value of a forwarded action its forwarder
// cancelled before it ran here, the answer to a later copy.
var cancelled, _ = json.Marshal(contract.Failed(contract.CodeUnavailable, "nexscope: the forwarded action was cancelled"))

// cancelHere takes the word of forwarder that it gave up on its action
// exec (its gateway revoked, its deadline passed): one running here ends
// (its context cancelled: a send_media waiting for the room's lock or its
// recipients gives up), and one not run yet here never runs (claimed
// meanwhile, or a copy arriving later, which is answered that it was
// cancelled).
func (cl *fleet) cancelHere(forwarder, exec string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if run, ok := cl.running[exec]; ok {
		if run.forwarder == forwarder {
			run.stop()
		}
		return
	}
	if v, _, _ := cl.execs.Get(cl.ctx, exec); len(v) == 0 { // unseen, or being claimed
		_ = cl.execs.Put(cl.ctx, exec, cancelled, cl.p.deps.Clock.Now().Add(forwardedExecTimeout+cl.node.ResendWindow()))
	}
}

// claimedElsewhere starts the fleet.execs value of a forwarded action
// another instance claimed, followed by that instance's name (none when
// its record was not found); a result is JSON.
const claimedElsewhere = 1

// claim takes the forwarded action exec for this instance to execute, and
// reports whether it did (took), or whether another instance took it
// before (held: claimedElsewhere and the holder's name as its record
// gives it; that of a former home of the room, whose msgTaken the
// forwarder, still asking, never got). Neither when a copy here claims it
// first, or the claim failed (a copy may take it then). A copy here is
// remembered from its claim on (fleet.execs).
func (cl *fleet) claim(exec string) (took bool, held []byte) {
	until := cl.p.deps.Clock.Now().Add(forwardedExecTimeout + cl.node.ResendWindow())
	cl.mu.Lock()
	_, seen, _ := cl.execs.Get(cl.ctx, exec)
	if !seen {
		_ = cl.execs.Put(cl.ctx, exec, nil, until)
	}
	cl.mu.Unlock()
	if seen {
		return false, nil
	}
	took, err := cl.claims.Claim(cl.ctx, execClaim+exec, until)
	if err != nil {
		cl.mu.Lock()
		if v, _, _ := cl.execs.Get(cl.ctx, exec); v == nil { // not cancelled meanwhile (cancelHere)
			_ = cl.execs.Delete(cl.ctx, exec)
		}
		cl.mu.Unlock()
		return false, nil
	}
	if took {
		// The record only names this instance to a later home (msgHeldBy),
		// asked a beat later at the earliest: the action waits neither for
		// its write nor for the replicas (one lost names no one: 'outcome
		// unknown').
		if cl.p.track() {
			go func() {
				defer cl.p.wg.Done()
				_ = cl.holders.Put(cl.ctx, "nexscope:holder:"+exec, []byte(cl.node.Instance()), until)
			}()
		}
		return true, nil
	}
	held = []byte{claimedElsewhere}
	// Not its own earlier run's, which keeps no answer, nor a foreign value
	// longer than a name (remembered as long as the claim).
	if name, _, _ := cl.holders.Get(cl.ctx, "nexscope:holder:"+exec); string(name) != cl.node.Instance() && len(name) <= maxHello {
		held = append(held, name...)
	}
	_ = cl.execs.Put(cl.ctx, exec, held, until)
	return false, held
}

// tellClaimed tells forwarder that another instance claimed its action
// exec: msgClaimed, and msgHeldBy when holder names it.
func (cl *fleet) tellClaimed(forwarder string, exec, holder []byte) {
	cl.sendNow(forwarder, msgClaimed, exec)
	if len(holder) > 0 {
		cl.sendNow(forwarder, msgHeldBy, exec, holder)
	}
}

// homeLink is, at a room's home, the far end of a remote member: its edge
// instance, the links of both directions and the credits.
type homeLink struct {
	cl         *fleet
	edge, conn string
	since      time.Time
	// in holds the frames the member sent until its handler (remoteReader)
	// takes them; the edge's window bounds it.
	in struct {
		cluster.Link
		q *wsconn.Queue
	}
	out cluster.Link // frames for the member (remoteWriter)

	written int64 // inbox goroutine: bytes the edge reported written

	consumed atomic.Int64 // bytes (plus frameOverhead each) of the member's frames processed; beats read it
	reported int64        // remoteReader: consumed as last reported
}

// takeFrame reports whether seq is the next frame of m's link in: a frame
// taken before is dropped (go-redis sent its PUBLISH again), and a gap
// closes m with 1011.
func takeFrame(m *member, in *cluster.Link, seq uint64) bool {
	if seq <= in.Received() {
		return false
	}
	if !in.Take(seq) {
		m.log.Warn("nexscope frames between instances lost; closing the member", "want_seq", in.Received()+1, "seq", seq)
		m.kick(CloseFramesLost)
		return false
	}
	return true
}

// received queues a frame the member sent (takeFrame).
func (l *homeLink) received(m *member, seq uint64, binary bool, data []byte, held cluster.Buffer) {
	if !takeFrame(m, &l.in.Link, seq) {
		return
	}
	_ = l.in.q.Push(linkFrame(binary, data, held)) // dropped once the member left
}

// wrote takes the edge's report of bytes written in total: they leave the
// member's send queue.
func (l *homeLink) wrote(m *member, total int64) {
	if total > l.written {
		m.q.Written(int(total - l.written))
		l.written = total
	}
}

// runRemote serves a remote member after it joined: frames from its edge
// are handled as a local member's (remoteReader), frames for it are relayed
// to the edge (remoteWriter). It ends once the member left and its queue
// ended: whoever makes a remote member leave (kick, closeAfterFlush,
// room.resign) closes its queue with the close meant for it, which goes
// to the edge before the member is forgotten (joinHere), so no beat of
// this home can tell the edge it keeps the member no more (1011) before
// that close arrives.
func (m *member) runRemote() {
	m.q.Start()
	m.remote.in.q.Start()
	<-m.remote.in.q.Done() // the member left, or asked to stop reading
	<-m.q.Done()
	m.log.Debug("nexscope remote member left")
}

// remoteReader is the wsconn.Writer of a remote member's inbound frames: it
// handles them as a local member's reader does, and reports the bytes
// consumed to the edge (credit).
type remoteReader struct{ m *member }

// Write implements wsconn.Writer; a member that must stop reading ends it.
func (r remoteReader) Write(batch []wsconn.Frame) error {
	m, l := r.m, r.m.remote
	for _, f := range batch {
		if f.Type == websocket.MessageBinary {
			held, _ := f.Owner.(*chunk) // read from the stream, or nil
			m.handleChunk(f.Data, held)
		} else {
			m.handleText(f.Data)
		}
		l.in.q.Written(len(f.Data))
		l.cl.credit(m.room.tenant(), l.edge, l.conn, msgConsumed, l.consumed.Add(int64(len(f.Data))+frameOverhead), &l.reported)
		if m.stop {
			return wsconn.Drop
		}
	}
	return nil
}

// End implements wsconn.Writer: runRemote takes over.
func (remoteReader) End(Close) {}

// remoteWriter is a remote member's wsconn.Writer: it publishes queued
// frames to the edge (their bytes stay queued until the edge reports them
// written), then the close. A frame's bytes are never modified once
// queued; a chunk's stay so while the stream retains it.
type remoteWriter struct{ m *member }

// Write implements wsconn.Writer.
func (w remoteWriter) Write(batch []wsconn.Frame) error {
	l := w.m.remote
	for _, f := range batch {
		c, _ := f.Owner.(*chunk) // a frame's only owner
		l.out.Send(func(seq uint64) {
			l.cl.send(w.m.room.tenant(), l.edge, c, msgOut, []byte(l.conn), cluster.AppendUint(nil, seq), cluster.Flag(f.Type == websocket.MessageBinary), f.Data)
		})
	}
	return nil
}

// End implements wsconn.Writer: the edge closes the socket.
func (w remoteWriter) End(end Close) {
	if end == wsconn.Drop {
		return
	}
	l := w.m.remote
	l.cl.send(w.m.room.tenant(), l.edge, nil, msgClose, []byte(l.conn), strconv.AppendInt(nil, int64(end.Code), 10), []byte(end.Reason), cluster.Flag(w.m.q.Flushing()))
}

// linkFrame is a frame a member's link carried, queued borrowing the
// memory of held (nil: none), retained until written or dropped.
func linkFrame(binary bool, data []byte, held cluster.Buffer) wsconn.Frame {
	f := wsconn.Frame{Type: websocket.MessageText, Data: data}
	if binary {
		f.Type = websocket.MessageBinary
	}
	if held != nil {
		held.Retain()
		f.Owner = held
	}
	return f
}

// edgeLink is, at a member's edge, the way to the room's home: the links
// of both directions and the credits.
type edgeLink struct {
	cl     *fleet
	conn   string
	joined chan string   // the home's answer to the join: a refusing close code, "" joined
	done   chan struct{} // closed when the member leaves

	answered bool      // under cl.mu: the join was answered
	home     string    // under cl.mu, set once joined
	since    time.Time // under cl.mu: when joined

	out cluster.Link // frames the member sent (its reader)
	in  cluster.Link // frames for the member (inbox goroutine)

	mu       sync.Mutex
	pending  pending // the member's frames the home has not answered (unanswered.go)
	sent     int64   // bytes (plus frameOverhead per frame) forwarded to the home
	consumed int64   // of them, bytes the home reported processed
	credit   chan struct{}

	written  atomic.Int64 // queue cost (wsconn.Queue.Cost) written to the socket (the member's writer); beats read it
	reported int64        // the member's writer: written as last reported
}

// answer takes home's answer to the join, refusal "" when it joined (the
// first answer counts): joined, the member's link is with home from then
// on, before the home's next message (its first frame) is dispatched.
func (l *edgeLink) answer(home, refusal string) {
	cl := l.cl
	cl.mu.Lock()
	if l.answered {
		cl.mu.Unlock()
		return
	}
	l.answered = true
	if refusal == "" {
		l.home, l.since = home, cl.p.deps.Clock.Now()
	}
	cl.mu.Unlock()
	l.joined <- refusal // the one send: joined holds one
}

// forward sends a frame the member sent to the home, after waiting while
// SendQueueBytes or more forwarded bytes wait there (the socket is not read
// meanwhile: TCP pushes back on the client). data is c's bytes, which stay
// unchanged while c is retained.
func (l *edgeLink) forward(m *member, typ websocket.MessageType, data []byte, c *chunk) {
	var answer []byte
	if typ == websocket.MessageText {
		answer = answerable(data)
	}
	window := m.p.cfg.SendQueueBytes
	for {
		l.mu.Lock()
		waiting := l.sent - l.consumed
		l.mu.Unlock()
		if waiting < window {
			break
		}
		m.alive.Hold(true)
		select {
		case <-l.credit:
		case <-l.done:
			m.alive.Hold(false)
			return
		}
	}
	m.alive.Hold(false)
	l.mu.Lock()
	if l.pending.closed {
		l.mu.Unlock()
		return
	}
	l.sent += int64(len(data)) + frameOverhead
	if answer != nil {
		l.pending.sent = append(l.pending.sent, answer)
	}
	l.mu.Unlock()
	l.out.Send(func(seq uint64) {
		l.cl.send(m.room.tenant(), l.home, c, msgIn, []byte(l.conn), cluster.AppendUint(nil, seq), cluster.Flag(typ == websocket.MessageBinary), data)
	})
}

// consumedUpTo takes the home's report of bytes processed in total.
func (l *edgeLink) consumedUpTo(total int64) {
	l.mu.Lock()
	if total > l.consumed {
		l.consumed = total
	}
	l.mu.Unlock()
	wsconn.Signal(l.credit)
}

// received queues a frame the home sent for the member (takeFrame).
func (l *edgeLink) received(m *member, seq uint64, binary bool, data []byte, held cluster.Buffer) {
	if !takeFrame(m, &l.in, seq) {
		return
	}
	if !binary {
		l.relayed(data)
	}
	if m.q.Push(linkFrame(binary, data, held)) == wsconn.ErrOverflow {
		m.kick(CloseSlowConsumer)
	}
}

// wrote counts n more bytes written to the socket of a member of a room
// of tenant, reported to the home.
func (l *edgeLink) wrote(tenant string, n int) {
	l.cl.credit(tenant, l.home, l.conn, msgWritten, l.written.Add(int64(n)), &l.reported)
}

// leave forgets the member, which left, and tells its home. That message
// does not wait (sendNow): leave runs on the goroutine reading a stream or
// channel too (a close, a gap, a beat), which must never wait on a send
// (two instances' readers waiting on each other's full streams would stall
// both until a write deadline lost them). One found the queue full is lost,
// as pub/sub may lose any: the home removes the member at its next beat
// from this instance, which no longer lists it (edgeBeat); this instance
// beats to that home for LostBeats beats from now even when no socket here
// is homed there any more (fleet.left), or a home that hears from it
// otherwise would keep the member.
func (l *edgeLink) leave(m *member) {
	cl := l.cl
	cl.mu.Lock()
	delete(cl.edges, l.conn)
	home := l.home
	if home != "" {
		cl.left[home] = cluster.LostBeats
	}
	cl.mu.Unlock()
	close(l.done)
	if home != "" {
		cl.sendNow(home, msgLeave, []byte(l.conn))
	} else {
		cl.node.SendWait(cl.ctx, m.room.tenant(), roomPrefix+m.room.name, msgLeave, []byte(l.conn)) // a join in progress
	}
}
