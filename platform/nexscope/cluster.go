package nexscope

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clustermsg"
	"connector/internal/wsconn"
	"connector/platform"
	"connector/store"
)

// Several instances (platform.Deps.Cluster set, a Redis shared by every
// instance) serve the rooms together; docs/nexscope.md draws it.
//
//   - Each room has one home: the instance holding the lease
//     "nexscope/room/<name>" (platform.Deps.Exclusive; the
//     connector stores it as "ingest/nexscope/room/<name>"). The home runs the
//     room exactly as a single instance does: members, presence, the file
//     lock, routing, acks and the bridge to the tenant's gateways.
//   - A client may connect to any instance. That instance checks token,
//     version, name and room itself and, when the room's home is elsewhere,
//     asks the home to join the member (name_taken and room_full are the
//     home's answers). From then on it is the member's edge: it forwards the
//     frames the client sends to the home and writes the frames the home
//     sends. The home keeps the member as a remote member: the same member,
//     with its socket on another instance.
//   - Order: an instance publishes through one goroutine and reads each
//     subscription with one, so pub/sub keeps the order of one instance's
//     messages. Frames carry a sequence number per member and direction; a
//     gap (pub/sub is at most once) closes the member with 1011: a member
//     never sees frames missing or out of order, so a file's chunks arrive
//     in order or not at all.
//   - Flow control: the home counts a remote member's frames in its send
//     queue until the edge reports them written, so backpressure on file
//     chunks and the slow-consumer rule work as on one instance; the edge
//     stops reading a socket while more than SendQueueBytes it forwarded
//     wait at the home.
//   - Liveness: every beat each edge tells each home which of its sockets it
//     holds, and each home tells each edge which remote members it keeps. A
//     member the other side does not list is closed; an instance not heard
//     from (a beat or any message of a member) for three beats is gone: the home removes its members (presence
//     follows), the edge closes the members homed there with 1012.
//   - When the home dies or loses its lease, its rooms' file locks and
//     transfers in progress go with it; members on other instances are
//     closed with 1012 within three beats, and the room starts empty on the
//     instance that takes the lease (within LeaseTTL and a third). A home
//     that shuts down closes them with 1001 at once.
//   - A gateway's send, prompt and send_media are executed by the home:
//     another instance forwards the action and waits for the home's
//     result. A send_media whose re-host is stored on the forwarding
//     instance fails there (media stores are per instance).

// forwardedExecTimeout bounds an action another instance forwarded: the
// relay's default outbound_timeout, after which that instance has answered
// the gateway anyway.
const forwardedExecTimeout = 30 * time.Second

// Pub/sub channels (the store prefixes them) and the room lease's name.
const (
	inboxPrefix = "nexscope:inbox:" // + instance: messages for one instance
	roomPrefix  = "nexscope:room:"  // + room: messages for the room's home
	leasePrefix = "nexscope/room/"  // + room: the home's lease
)

// Messages between instances (internal/clustermsg).
const (
	msgJoin     = 'J' // room channel: room, name, edge, conn
	msgJoined   = 'K' // edge inbox: conn, home, refusal (close code; "" joined)
	msgIn       = 'T' // home inbox: edge, conn, seq, binary ("1"), frame
	msgOut      = 'F' // edge inbox: conn, seq, binary ("1"), frame
	msgClose    = 'C' // edge inbox: conn, code, reason, flush ("1")
	msgLeave    = 'L' // home inbox or room channel: edge, conn
	msgWritten  = 'W' // home inbox: edge, conn, bytes written in total
	msgConsumed = 'U' // edge inbox: conn, bytes processed in total
	msgEdgeBeat = 'B' // home inbox: edge, conns (",")
	msgHomeBeat = 'H' // edge inbox: home, conns (",")
	msgExec     = 'X' // room channel: request, instance, tenant, action (JSON)
	msgProbe    = 'P' // edge inbox: request, conn, home (ping the member for its name)
	msgResult   = 'R' // inbox: request, result (an action's JSON; a probe's "1" alive)
)

// fieldCount is how many fields each message type has.
var fieldCount = map[byte]int{
	msgJoin: 4, msgJoined: 3, msgIn: 5, msgOut: 4, msgClose: 4, msgLeave: 2,
	msgWritten: 3, msgConsumed: 2, msgEdgeBeat: 2, msgHomeBeat: 2, msgExec: 4, msgProbe: 3, msgResult: 2,
}

// Cluster tuning.
const (
	// joinBeats is how many beats an edge waits for a room's home to answer
	// a join (sent again every beat) before it refuses the client with
	// 1013: long enough for a lease takeover (four beats).
	joinBeats = 6
	// lostBeats is how many beats without a word from an instance make it
	// gone; after forgetBeats it is forgotten.
	lostBeats   = 3
	forgetBeats = 100
	// creditBytes is how many bytes written or processed an instance
	// reports at least at once (it also reports whenever it runs dry).
	creditBytes = 64 << 10
	// outboxSize bounds the messages queued for publishing.
	outboxSize = 1024
)

// cluster is this instance's part in the rooms of several instances.
type cluster struct {
	p    *Platform
	inst string
	ps   store.PubSub
	beat time.Duration

	out  chan outMsg // published in order by publishLoop
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	edges   map[string]*member     // this instance's sockets in rooms homed elsewhere, by conn
	remotes map[string]*member     // members of rooms homed here with their socket elsewhere, by edge/conn
	joining map[string]bool        // remote joins being decided, by edge/conn
	heard   map[string]time.Time   // instance -> when a message from it last arrived
	calls   map[string]chan []byte // forwarded actions waiting for their result, by request
	nextReq uint64
	// bid starts a room's bid for its lease once start ran (nil before);
	// under mu. Rooms Bind creates later bid through it.
	bid func(r *room)
}

type outMsg struct {
	channel string
	msg     []byte
}

func newCluster(p *Platform, c *platform.Cluster) *cluster {
	ctx, stop := context.WithCancel(context.Background())
	return &cluster{
		p: p, inst: c.Instance, ps: c.PubSub, beat: c.Beat,
		out: make(chan outMsg, outboxSize), ctx: ctx, stop: stop,
		edges: make(map[string]*member), remotes: make(map[string]*member),
		joining: make(map[string]bool), heard: make(map[string]time.Time),
		calls: make(map[string]chan []byte),
	}
}

// start subscribes to this instance's inbox and runs the publisher, the
// beat and, for every room, the bid for its lease until ctx ends.
func (cl *cluster) start(ctx context.Context, exclusive func(context.Context, string, func(context.Context) error) error) error {
	inbox, cancel, err := cl.ps.Subscribe(cl.ctx, inboxPrefix+cl.inst)
	if err != nil {
		return err
	}
	cl.wg.Go(func() {
		defer cancel()
		for m := range inbox {
			cl.handle(m)
		}
	})
	cl.wg.Go(cl.publishLoop)
	cl.wg.Go(func() { cl.beatLoop(ctx) })
	bid := func(r *room) {
		cl.wg.Go(func() {
			_ = exclusive(ctx, leasePrefix+r.name, func(hctx context.Context) error { return cl.home(ctx, hctx, r) })
		})
	}
	// Bind holds roomsMu while it adds a room and calls adopt, so every
	// room bids once: those here now, and later ones through cl.bid.
	cl.p.roomsMu.Lock()
	cl.mu.Lock()
	cl.bid = bid
	cl.mu.Unlock()
	for _, r := range cl.p.rooms {
		bid(r)
	}
	cl.p.roomsMu.Unlock()
	return nil
}

// adopt has a room Bind created bid for its lease, if start ran (start
// bids for every room there is then). Called under roomsMu.
func (cl *cluster) adopt(r *room) {
	cl.mu.Lock()
	bid := cl.bid
	cl.mu.Unlock()
	if bid != nil {
		bid(r)
	}
}

// shutdown publishes what is queued and ends the goroutines; the room
// leases are released as their bids end with Run's context.
func (cl *cluster) shutdown() {
	cl.stop()
	cl.wg.Wait()
}

// publish queues msg for channel; it waits while the outbox is full.
func (cl *cluster) publish(channel string, msg []byte) {
	select {
	case cl.out <- outMsg{channel, msg}:
	case <-cl.ctx.Done():
	}
}

// publishLoop publishes queued messages in order; once stopped it publishes
// what is left and returns.
func (cl *cluster) publishLoop() {
	lost := 0 // messages not published since the last one that was
	send := func(m outMsg) {
		ctx, cancel := context.WithTimeout(context.Background(), cl.beat*lostBeats)
		defer cancel()
		err := cl.ps.Publish(ctx, m.channel, m.msg)
		switch {
		case err != nil && lost == 0:
			cl.p.log.Warn("nexscope cluster messages not published", "channel", m.channel, "err", err)
			lost++
		case err != nil:
			lost++
		case lost > 0:
			cl.p.log.Info("nexscope cluster messages published again", "lost", lost)
			lost = 0
		}
	}
	for {
		select {
		case m := <-cl.out:
			send(m)
		case <-cl.ctx.Done():
			for {
				select {
				case m := <-cl.out:
					send(m)
				default:
					return
				}
			}
		}
	}
}

// home runs r as its home while this instance holds the room's lease
// (hctx); runCtx is Run's. On the way out every member is closed: with
// 1001 when the connector shuts down, else with 1012 (the room moves).
func (cl *cluster) home(runCtx, hctx context.Context, r *room) error {
	msgs, cancel, err := cl.ps.Subscribe(hctx, roomPrefix+r.name)
	if err != nil {
		cl.p.log.Warn("nexscope room channel not subscribed; the room's lease is given up", "room", r.name, "err", err)
		return nil
	}
	defer cancel()
	r.becomeHome()
	cl.p.log.Info("nexscope room homed on this instance", "room", r.name)
	for done := false; !done; {
		select {
		case <-hctx.Done():
			done = true
		case m, ok := <-msgs:
			if !ok {
				done = true
				break
			}
			cl.handle(m)
		}
	}
	c := CloseRoomMoved
	if runCtx.Err() != nil {
		c = CloseGoingAway
	}
	r.resign(c)
	cl.p.log.Info("nexscope room no longer homed on this instance", "room", r.name)
	return nil
}

// handle takes one message from the inbox or a room channel. It never
// waits for long: joins and forwarded actions run on their own goroutines.
func (cl *cluster) handle(msg []byte) {
	if len(msg) == 0 {
		return
	}
	typ, f, ok := clustermsg.Decode(msg, fieldCount[msg[0]])
	if !ok {
		cl.p.log.Warn("malformed nexscope cluster message dropped", "bytes", len(msg))
		return
	}
	switch typ {
	case msgJoin:
		cl.joinHere(string(f[0]), string(f[1]), string(f[2]), string(f[3]))
	case msgJoined:
		if m := cl.edge(f[0]); m != nil {
			m.link.answer(joinAnswer{home: string(f[1]), refusal: string(f[2])})
		}
	case msgIn:
		if m := cl.remote(f[0], f[1]); m != nil {
			m.remote.received(m, parseUint(f[2]), string(f[3]) == "1", f[4])
		}
	case msgOut:
		if m := cl.edge(f[0]); m != nil {
			m.link.received(m, parseUint(f[1]), string(f[2]) == "1", f[3])
		}
	case msgClose:
		if m := cl.edge(f[0]); m != nil {
			code, _ := strconv.Atoi(string(f[1]))
			m.leave()
			m.q.Close(Close{Code: contract.CloseCode(code), Reason: string(f[2])}, string(f[3]) == "1")
		}
	case msgLeave:
		if m := cl.remote(f[0], f[1]); m != nil {
			m.kick(wsconn.Drop) // its socket is gone: nothing to tell the edge
		}
	case msgWritten:
		if m := cl.remote(f[0], f[1]); m != nil {
			m.remote.wrote(m, int64(parseUint(f[2])))
		}
	case msgConsumed:
		if m := cl.edge(f[0]); m != nil {
			m.link.consumedUpTo(int64(parseUint(f[1])))
		}
	case msgEdgeBeat:
		cl.edgeBeat(string(f[0]), string(f[1]))
	case msgHomeBeat:
		cl.homeBeat(string(f[0]), string(f[1]))
	case msgExec:
		cl.execHere(string(f[0]), string(f[1]), string(f[2]), f[3])
	case msgProbe:
		cl.probeHere(string(f[0]), f[1], string(f[2]))
	case msgResult:
		cl.mu.Lock()
		ch := cl.calls[string(f[0])]
		delete(cl.calls, string(f[0]))
		cl.mu.Unlock()
		if ch != nil {
			ch <- f[1]
		}
	}
}

func parseUint(b []byte) uint64 {
	n, _ := strconv.ParseUint(string(b), 10, 64)
	return n
}

// edge returns this instance's socket conn in a room homed elsewhere. A
// message for it shows that its home is alive.
func (cl *cluster) edge(conn []byte) *member {
	now := cl.p.clock.Now()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	m := cl.edges[string(conn)]
	if m != nil && m.link.home != "" {
		cl.heard[m.link.home] = now
	}
	return m
}

// remote returns the remote member of a room homed here. A message from
// its edge shows that the edge is alive.
func (cl *cluster) remote(edge, conn []byte) *member {
	now := cl.p.clock.Now()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.heard[string(edge)] = now
	return cl.remotes[string(edge)+"/"+string(conn)]
}

// beatLoop beats until ctx ends.
func (cl *cluster) beatLoop(ctx context.Context) {
	for cl.p.clock.Sleep(ctx, cl.beat) == nil {
		cl.sendBeats()
	}
}

// sendBeats tells every instance this one works with which members it
// holds, and closes the members of instances not heard from for lostBeats
// beats.
func (cl *cluster) sendBeats() {
	now := cl.p.clock.Now()
	gone := func(inst string, since time.Time) bool {
		last := cl.heard[inst]
		if last.Before(since) {
			last = since
		}
		return now.Sub(last) > lostBeats*cl.beat
	}
	toHome := make(map[string][]string)
	toEdge := make(map[string][]string)
	var lost []*member
	cl.mu.Lock()
	for conn, m := range cl.edges {
		if h := m.link.home; h != "" {
			if gone(h, m.link.since) {
				lost = append(lost, m)
				continue
			}
			toHome[h] = append(toHome[h], conn)
		}
	}
	for _, m := range cl.remotes {
		if gone(m.remote.edge, m.remote.since) {
			lost = append(lost, m)
			continue
		}
		toEdge[m.remote.edge] = append(toEdge[m.remote.edge], m.remote.conn)
	}
	for inst, last := range cl.heard {
		if now.Sub(last) > forgetBeats*cl.beat {
			delete(cl.heard, inst) // an instance gone for good (names may change on restart)
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
	for h, conns := range toHome {
		cl.publish(inboxPrefix+h, clustermsg.Encode(msgEdgeBeat, []byte(cl.inst), []byte(strings.Join(conns, ","))))
	}
	for e, conns := range toEdge {
		cl.publish(inboxPrefix+e, clustermsg.Encode(msgHomeBeat, []byte(cl.inst), []byte(strings.Join(conns, ","))))
	}
}

// edgeBeat records an edge's beat and removes the remote members it no
// longer holds (joined more than a beat ago, so not racing the beat).
func (cl *cluster) edgeBeat(edge, conns string) {
	now := cl.p.clock.Now()
	held := setOf(conns)
	var stale []*member
	cl.mu.Lock()
	cl.heard[edge] = now
	for _, m := range cl.remotes {
		if m.remote.edge == edge && !held[m.remote.conn] && now.Sub(m.remote.since) > cl.beat {
			stale = append(stale, m)
		}
	}
	cl.mu.Unlock()
	for _, m := range stale {
		m.kick(wsconn.Drop)
	}
}

// homeBeat records a home's beat and closes this instance's members the
// home no longer keeps.
func (cl *cluster) homeBeat(home, conns string) {
	now := cl.p.clock.Now()
	kept := setOf(conns)
	var stale []*member
	cl.mu.Lock()
	cl.heard[home] = now
	for conn, m := range cl.edges {
		if m.link.home == home && !kept[conn] && now.Sub(m.link.since) > cl.beat {
			stale = append(stale, m)
		}
	}
	cl.mu.Unlock()
	for _, m := range stale {
		m.log.Info("nexscope room's home no longer keeps this member")
		m.kick(CloseFramesLost)
	}
}

func setOf(list string) map[string]bool {
	out := make(map[string]bool)
	for _, s := range strings.Split(list, ",") {
		if s != "" {
			out[s] = true
		}
	}
	return out
}

// joinAnswer is a home's answer to a join.
type joinAnswer struct {
	home    string
	refusal string // a close code; "" joined
}

// joinRemote joins m, a socket of this instance, to its room at the room's
// home, asking again every beat until the home answers or joinBeats beats
// pass. It returns the Close that refuses m, or nil once joined.
func (cl *cluster) joinRemote(m *member) error {
	r := m.room
	conn := strconv.FormatUint(m.id, 10)
	m.link = newEdgeLink(cl, conn)
	cl.mu.Lock()
	cl.edges[conn] = m
	cl.mu.Unlock()
	join := clustermsg.Encode(msgJoin, []byte(r.name), []byte(m.name), []byte(cl.inst), []byte(conn))
	for try := 0; ; try++ {
		if try == joinBeats {
			m.leave()
			return CloseNoHome
		}
		cl.publish(roomPrefix+r.name, join)
		expired := make(chan struct{})
		t := cl.p.clock.AfterFunc(cl.beat, func() { close(expired) })
		select {
		case a := <-m.link.joined:
			t.Stop()
			if a.refusal != "" {
				m.leave()
				code, _ := strconv.Atoi(a.refusal)
				return refusalClose(code)
			}
			cl.mu.Lock()
			m.link.home, m.link.since = a.home, cl.p.clock.Now()
			cl.heard[a.home] = m.link.since
			cl.mu.Unlock()
			return nil
		case <-m.link.done:
			t.Stop()
			return CloseGoingAway
		case <-expired:
		}
	}
}

// refusalClose is the Close a home's refusal code stands for.
func refusalClose(code int) Close {
	for _, c := range []Close{CloseNameTaken, CloseRoomFull, CloseRoomMoved, CloseGoingAway} {
		if int(c.Code) == code {
			return c
		}
	}
	return CloseNoHome
}

// joinHere decides a join that an edge sent to a room homed here: the
// member joins (or is refused) as a local one would, and its frames then
// flow through runRemote.
func (cl *cluster) joinHere(roomName, name, edge, conn string) {
	p := cl.p
	r := p.room(roomName)
	if r == nil || !validName(name) {
		return
	}
	key := edge + "/" + conn
	cl.mu.Lock()
	cl.heard[edge] = p.clock.Now()
	if cl.joining[key] {
		cl.mu.Unlock()
		return // an edge asking again while the first ask is decided
	}
	if cl.remotes[key] != nil {
		cl.mu.Unlock()
		cl.answerJoin(edge, conn, "") // the first answer was lost
		return
	}
	cl.joining[key] = true
	cl.mu.Unlock()
	if !p.track() {
		cl.joined(key, nil)
		cl.answerJoin(edge, conn, strconv.Itoa(int(CloseGoingAway.Code)))
		return
	}
	go func() {
		defer p.wg.Done()
		m := newMember(p, r, name)
		m.remote = &homeLink{cl: cl, edge: edge, conn: conn, since: p.clock.Now()}
		m.remote.in = wsconn.NewQueue(remoteReader{m}, 0, math.MaxInt64, 0)
		m.q = m.newQueue(remoteWriter{m})
		m.log = p.log.With("room", r.name, "member", name, "edge", edge, "conn", conn)
		if !p.register(m) {
			cl.joined(key, nil)
			cl.answerJoin(edge, conn, strconv.Itoa(int(CloseGoingAway.Code)))
			return
		}
		defer p.unregister(m)
		err := r.join(m)
		if err == CloseNameTaken && r.replaceGhost(name) {
			err = r.join(m)
		}
		if c, ok := err.(Close); ok {
			cl.joined(key, nil)
			cl.answerJoin(edge, conn, strconv.Itoa(int(c.Code)))
			return
		}
		cl.joined(key, m)
		cl.answerJoin(edge, conn, "")
		m.log.Debug("nexscope remote member joined")
		m.runRemote()
		cl.mu.Lock()
		if cl.remotes[key] == m {
			delete(cl.remotes, key)
		}
		cl.mu.Unlock()
	}()
}

// joined ends the decision on key: m joined, or nil.
func (cl *cluster) joined(key string, m *member) {
	cl.mu.Lock()
	delete(cl.joining, key)
	if m != nil {
		cl.remotes[key] = m
	}
	cl.mu.Unlock()
}

func (cl *cluster) answerJoin(edge, conn, refusal string) {
	cl.publish(inboxPrefix+edge, clustermsg.Encode(msgJoined, []byte(conn), []byte(cl.inst), []byte(refusal)))
}

// call publishes msg, a request named req, on channel and waits for its
// result until ctx ends or, when expired is not nil, it is closed; ok is
// false without a result.
func (cl *cluster) call(ctx context.Context, expired <-chan struct{}, channel string, msg func(req []byte) []byte) (result []byte, ok bool) {
	ch := make(chan []byte, 1)
	cl.mu.Lock()
	cl.nextReq++
	req := cl.inst + "-" + strconv.FormatUint(cl.nextReq, 10)
	cl.calls[req] = ch
	cl.mu.Unlock()
	defer func() {
		cl.mu.Lock()
		delete(cl.calls, req)
		cl.mu.Unlock()
	}()
	cl.publish(channel, msg([]byte(req)))
	select {
	case res := <-ch:
		return res, true
	case <-ctx.Done():
	case <-expired:
	}
	return nil, false
}

// probe asks the edge of m, a remote member, whether m answers a WebSocket
// ping within nameProbeTimeout (a new connection asks for its name); no
// answer from the edge within a beat more counts as no.
func (cl *cluster) probe(m *member) bool {
	expired := make(chan struct{})
	t := cl.p.clock.AfterFunc(nameProbeTimeout+cl.beat, func() { close(expired) })
	defer t.Stop()
	res, ok := cl.call(cl.ctx, expired, inboxPrefix+m.remote.edge, func(req []byte) []byte {
		return clustermsg.Encode(msgProbe, req, []byte(m.remote.conn), []byte(cl.inst))
	})
	return ok && string(res) == "1"
}

// probeHere answers a home's probe of one of this instance's sockets: "1"
// when it answers a ping in time. A socket this instance does not hold is
// not alive.
func (cl *cluster) probeHere(req string, conn []byte, home string) {
	answer := func(alive bool) {
		res := []byte("0")
		if alive {
			res = []byte("1")
		}
		cl.publish(inboxPrefix+home, clustermsg.Encode(msgResult, []byte(req), res))
	}
	m := cl.edge(conn)
	if m == nil {
		answer(false)
		return
	}
	if !cl.p.track() {
		return
	}
	go func() {
		defer cl.p.wg.Done()
		answer(m.alive.Probe(nameProbeTimeout))
	}()
}

// forwardExec asks the home of r to execute a (the home authorizes it) and
// waits for its result until ctx ends.
func (cl *cluster) forwardExec(ctx context.Context, r *room, tenant string, a *contract.Action) contract.Result {
	action, err := json.Marshal(a)
	if err != nil {
		return contract.Failed(contract.CodeBadRequest, "nexscope: action cannot be encoded")
	}
	raw, ok := cl.call(ctx, nil, roomPrefix+r.name, func(req []byte) []byte {
		return clustermsg.Encode(msgExec, req, []byte(cl.inst), []byte(tenant), action)
	})
	if !ok {
		return contract.Failed(contract.CodeUnavailable, "nexscope: the room's home instance did not answer")
	}
	var res contract.Result
	if json.Unmarshal(raw, &res) != nil {
		return contract.Failed(contract.CodeUnavailable, "nexscope: the room's home answered garbage")
	}
	return res
}

// execHere executes an action another instance forwarded to a room homed
// here and sends the result back.
func (cl *cluster) execHere(req, from, tenant string, action []byte) {
	p := cl.p
	if !p.track() {
		return
	}
	go func() {
		defer p.wg.Done()
		var a contract.Action
		res := contract.Failed(contract.CodeBadRequest, "nexscope: forwarded action cannot be decoded")
		if json.Unmarshal(action, &a) == nil {
			// send and prompt do not wait; send_media waits for the room's
			// lock and its recipients, within the bound the forwarding
			// instance's relay gives the op by default.
			ctx, cancel := context.WithTimeout(cl.ctx, forwardedExecTimeout)
			res = p.executeHere(ctx, tenant, &a)
			cancel()
		}
		raw, _ := json.Marshal(res) // a Result always encodes
		cl.publish(inboxPrefix+from, clustermsg.Encode(msgResult, []byte(req), raw))
	}()
}

// homeLink is, at a room's home, the far end of a remote member: its edge
// instance and the member's sequence numbers and credits.
type homeLink struct {
	cl         *cluster
	edge, conn string
	since      time.Time
	// in holds the frames the member sent until its handler (remoteReader)
	// takes them; the edge's window bounds it.
	in *wsconn.Queue

	inSeq   uint64 // inbox goroutine
	written int64  // inbox goroutine: bytes the edge reported written

	outSeq             uint64 // remoteWriter
	consumed, reported int64  // remoteReader
}

// received queues a frame the member sent; a gap closes the member.
func (l *homeLink) received(m *member, seq uint64, binary bool, data []byte) {
	if seq != l.inSeq+1 {
		m.log.Warn("nexscope frames from the member's instance lost; closing it", "want_seq", l.inSeq+1, "seq", seq)
		m.kick(CloseFramesLost)
		return
	}
	l.inSeq = seq
	typ := websocket.MessageText
	if binary {
		typ = websocket.MessageBinary
	}
	_ = l.in.Push(wsconn.Frame{Type: typ, Data: data}) // dropped once the member left
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
// to the edge (remoteWriter).
func (m *member) runRemote() {
	m.q.Start()
	m.remote.in.Start()
	<-m.remote.in.Done() // the member left, or asked to stop reading
	m.leave()
	m.q.Close(wsconn.Drop, false)
	<-m.q.Done()
	m.log.Debug("nexscope remote member left")
}

// remoteReader is the wsconn.Writer of a remote member's inbound frames: it
// handles them as a local member's reader does, and reports the bytes
// consumed to the edge, in batches of creditBytes or when it ran dry.
type remoteReader struct{ m *member }

// Write implements wsconn.Writer; a member that must stop reading ends it.
func (r remoteReader) Write(batch []wsconn.Frame) error {
	m, l := r.m, r.m.remote
	for _, f := range batch {
		if f.Type == websocket.MessageBinary {
			m.handleChunk(f.Data)
		} else {
			m.handleText(f.Data)
		}
		l.in.Written(len(f.Data))
		l.consumed += int64(len(f.Data))
		if l.in.Len() == 0 || l.consumed-l.reported >= creditBytes {
			l.reported = l.consumed
			l.cl.publish(inboxPrefix+l.edge, clustermsg.Encode(msgConsumed, []byte(l.conn), strconv.AppendInt(nil, l.consumed, 10)))
		}
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
// written), then the close.
type remoteWriter struct{ m *member }

// Write implements wsconn.Writer.
func (w remoteWriter) Write(batch []wsconn.Frame) error {
	l := w.m.remote
	for _, f := range batch {
		l.outSeq++
		l.cl.publish(inboxPrefix+l.edge, clustermsg.Encode(msgOut, []byte(l.conn), strconv.AppendUint(nil, l.outSeq, 10), binaryFlag(f.Type), f.Data))
	}
	return nil
}

// End implements wsconn.Writer: the edge closes the socket.
func (w remoteWriter) End(end Close) {
	if end == wsconn.Drop {
		return
	}
	l, flush := w.m.remote, "0"
	if w.m.q.Flushing() {
		flush = "1"
	}
	l.cl.publish(inboxPrefix+l.edge, clustermsg.Encode(msgClose, []byte(l.conn), strconv.AppendInt(nil, int64(end.Code), 10), []byte(end.Reason), []byte(flush)))
}

func binaryFlag(t websocket.MessageType) []byte {
	if t == websocket.MessageBinary {
		return []byte("1")
	}
	return []byte("0")
}

// edgeLink is, at a member's edge, the way to the room's home: the
// member's sequence numbers and the credits of both directions.
type edgeLink struct {
	cl     *cluster
	conn   string
	joined chan joinAnswer // the home's answer to the join
	done   chan struct{}   // closed when the member leaves

	home  string    // under cl.mu, set once joined
	since time.Time // under cl.mu: when joined

	outSeq uint64 // the member's reader
	inSeq  uint64 // inbox goroutine

	mu       sync.Mutex
	sent     int64 // bytes forwarded to the home
	consumed int64 // of them, bytes the home reported processed
	credit   chan struct{}

	written, reported int64 // the member's writer
}

func newEdgeLink(cl *cluster, conn string) *edgeLink {
	return &edgeLink{cl: cl, conn: conn, joined: make(chan joinAnswer, 1), done: make(chan struct{}), credit: make(chan struct{}, 1)}
}

// answer delivers the home's answer to the join (the first one counts).
func (l *edgeLink) answer(a joinAnswer) {
	select {
	case l.joined <- a:
	default:
	}
}

// forward sends a frame the member sent to the home, after waiting while
// SendQueueBytes or more forwarded bytes wait there (the socket is not read
// meanwhile: TCP pushes back on the client).
func (l *edgeLink) forward(m *member, typ websocket.MessageType, data []byte) {
	window := m.p.cfg.SendQueueBytes
	for {
		l.mu.Lock()
		waiting := l.sent - l.consumed
		l.mu.Unlock()
		if waiting < window {
			break
		}
		select {
		case <-l.credit:
		case <-l.done:
			return
		}
	}
	l.mu.Lock()
	l.sent += int64(len(data))
	l.mu.Unlock()
	l.outSeq++
	l.cl.publish(inboxPrefix+l.home, clustermsg.Encode(msgIn, []byte(l.cl.inst), []byte(l.conn),
		strconv.AppendUint(nil, l.outSeq, 10), binaryFlag(typ), data))
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

// received queues a frame the home sent for the member; a gap closes it.
func (l *edgeLink) received(m *member, seq uint64, binary bool, data []byte) {
	if seq != l.inSeq+1 {
		m.log.Warn("nexscope frames from the room's home lost; closing the member", "want_seq", l.inSeq+1, "seq", seq)
		m.kick(CloseFramesLost)
		return
	}
	l.inSeq = seq
	typ := websocket.MessageText
	if binary {
		typ = websocket.MessageBinary
	}
	if m.q.Push(wsconn.Frame{Type: typ, Data: data}) == wsconn.ErrOverflow {
		m.kick(CloseSlowConsumer)
	}
}

// wrote reports n more bytes written to the socket to the home, in batches
// of creditBytes or when the queue ran dry.
func (l *edgeLink) wrote(m *member, n int) {
	l.written += int64(n)
	if l.written-l.reported < creditBytes && m.q.Len() > 0 {
		return
	}
	l.reported = l.written
	l.cl.publish(inboxPrefix+l.home, clustermsg.Encode(msgWritten, []byte(l.cl.inst), []byte(l.conn), strconv.AppendInt(nil, l.written, 10)))
}

// leave forgets the member, which left, and tells its home.
func (l *edgeLink) leave(m *member) {
	cl := l.cl
	cl.mu.Lock()
	delete(cl.edges, l.conn)
	home := l.home
	cl.mu.Unlock()
	close(l.done)
	msg := clustermsg.Encode(msgLeave, []byte(cl.inst), []byte(l.conn))
	if home != "" {
		cl.publish(inboxPrefix+home, msg)
	} else {
		cl.publish(roomPrefix+m.room.name, msg) // a join in progress
	}
}
