package nexscope

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/golang-lru/v2/simplelru"

	"connector/contract"
	"connector/internal/wsconn"
	"connector/media"
	"connector/platform"
	"connector/session"
	"connector/store"
)

// room is one relay room: its members, its file-transfer lock and, when bound
// to a tenant, the connector's bot member and what the bridge remembers.
type room struct {
	p    *Platform
	name string
	// botName is the bot's member name while the room is bound.
	botName string
	cap     int
	// keep is set for a configured room (Config.Rooms, the default room),
	// never dropped; a room a binding created is (Platform.dropIdle).
	keep bool
	// unbid ends the room's bid for its lease (fleet.bid); under
	// Platform.roomsMu.
	unbid context.CancelFunc
	// bound is the room's tenant and bot, both "" for a plain relay room
	// (never nil). It changes under mu (Bind), and is read without it.
	bound atomic.Pointer[roomBinding]
	// home is set while this instance hosts the room: always on a single
	// instance; with several, while it holds the room's lease (cluster.go).
	home atomic.Bool
	// tenure is, while this instance is the home of a room of several
	// instances, the room lease's context (store.Held); under mu.
	tenure context.Context
	// away ends when this instance becomes the room's home (becomeHome)
	// or drops the room (Platform.dropIdle): a forward to the home still
	// unanswered then gives up (fleet.forwardExec). Under mu; resign
	// starts another.
	away   context.Context
	arrive context.CancelFunc

	mu sync.Mutex
	// dropped is set once Platform.dropIdle dropped the room: no one
	// joins it any more.
	dropped  bool
	members  map[string]*member
	users    []string // sorted presence list, the bot included
	transfer *transfer
	kicks    []*member // slow consumers found under mu, kicked by unlock
	// discards are the re-hosts ended under mu, aborted by unlock: their
	// file's removal is disk I/O, never done under mu.
	discards []*media.Upload

	// Bridge memory (under mu): inbound message id -> its author, thread and
	// hop count, the last inbound per thread, and the room's last inbound.
	msgs    *simplelru.LRU[string, msgRef]
	threads *simplelru.LRU[string, msgRef]
	last    msgRef
	// prompt is the open prompt (prompt.go), nil when none.
	prompt *openPrompt
}

// msgRef is what the bridge remembers of an inbound message to address the
// reply.
type msgRef struct {
	from, thread string
	hop          int
	valid        bool
}

// roomBinding is a bound room's tenant, the tenant's creation
// (registry.Tenant.Created, zero for a declared tenant: Platform.creation;
// a stored tenant's when the YAML declared it after the room was bound to
// it: bindLocked) and the bot member that stands for it.
type roomBinding struct {
	tenant, bot string
	created     time.Time
}

func newRoom(p *Platform, rc Room, keep bool) *room {
	r := &room{
		keep:    keep,
		p:       p,
		name:    rc.Name,
		botName: cmp.Or(rc.BotName, p.cfg.BotName),
		cap:     cmp.Or(rc.MaxUsers, p.cfg.MaxUsers),
		members: make(map[string]*member),
	}
	r.home.Store(p.cluster == nil) // a single instance hosts every room
	r.away, r.arrive = context.WithCancel(context.Background())
	r.bound.Store(&roomBinding{})
	if rc.Tenant != "" {
		r.mu.Lock()
		r.bindLocked(rc.Tenant, time.Time{})
		r.mu.Unlock() // a new room has no member to kick (unlock's work)
	}
	return r
}

// tenant is the tenant the room is bound to; "" when it is a plain room.
func (r *room) tenant() string { return r.bound.Load().tenant }

// bot is the bot's member name; "" when the room is unbound.
func (r *room) bot() string { return r.bound.Load().bot }

// bindLocked binds the room to tenant ("" unbinds it), created at created:
// the bot joins or leaves the presence list, which is broadcast, and the
// bridge forgets what it remembered for the previous tenant, or for an
// earlier creation of the same one (deleted and made again), its open
// prompt included, and drops a member's file to the previous tenant's bot
// in progress (transfer.loseBot) and aborts the bot's own (send_media;
// its recipients get transfer_incomplete). A member already holding the
// bot's name keeps it; the bot is then not listed twice. A zero created
// for the tenant the room is bound to (the YAML declares it now, which
// shadows the stored tenant) is the same tenant, as the relay holds
// (relay.Server.SetTenants): the room keeps its memory and the creation it
// knew, so the stored tenant showing again (the declaration dropped, or a
// SIGHUP reload whose Bind failed rolled back) keeps it too, and another
// creation forgets it. A room that knew only the declared tenant takes
// the stored one's creation and keeps its memory.
func (r *room) bindLocked(tenant string, created time.Time) {
	prev := r.bound.Load()
	if tenant == prev.tenant && (tenant == "" || created.IsZero() || created.Equal(prev.created)) {
		return
	}
	if tenant == prev.tenant && prev.created.IsZero() {
		r.bound.Store(&roomBinding{tenant: tenant, bot: prev.bot, created: created})
		return
	}
	if t := r.transfer; t != nil && t.toBot {
		t.loseBot(r)
	} else if t != nil && t.sender == nil {
		r.abortLocked(t) // the bot's own file (send_media): its tenant lost the room
	}
	if old := r.bot(); old != "" && r.members[old] == nil {
		if i, ok := slices.BinarySearch(r.users, old); ok {
			r.users = slices.Delete(r.users, i, i+1)
		}
	}
	if tenant == "" {
		r.forgetLocked(&roomBinding{})
	} else {
		r.forgetLocked(&roomBinding{tenant: tenant, bot: r.botName, created: created})
		if i, ok := slices.BinarySearch(r.users, r.botName); !ok {
			r.users = slices.Insert(r.users, i, r.botName)
		}
	}
	if tenant != prev.tenant { // else created again: the same bot stays listed
		r.broadcastPresenceLocked()
	}
}

// forgetLocked makes b the room's binding with a fresh bridge memory (none
// for an unbound room): a new pointer, so that a bridge's undo under way
// leaves the new memory alone. Under mu.
func (r *room) forgetLocked(b *roomBinding) {
	r.bound.Store(b)
	r.msgs, r.threads, r.last, r.prompt = nil, nil, msgRef{}, nil
	if b.tenant != "" {
		// Sizes are positive (defaults applied), so NewLRU cannot fail.
		r.msgs, _ = simplelru.NewLRU[string, msgRef](r.p.cfg.RememberMessages, nil)
		r.threads, _ = simplelru.NewLRU[string, msgRef](r.p.cfg.RememberMessages, nil)
	}
}

// refreshLocked binds the room afresh when its tenant's creation
// (Platform.creation) is another than the one it was bound under: the
// tenant was deleted and created again, and the bridge forgets what it
// remembered for the earlier one (bindLocked). Under mu; unlock releases
// it.
func (r *room) refreshLocked() {
	if t := r.tenant(); t != "" {
		r.bindLocked(t, r.p.creation(t))
	}
}

// actsForLocked binds r afresh (refreshLocked) and tells whether an action
// of tenant under ctx may act in it now, else the answer: r is bound to
// tenant, under the creation the action was authorized under
// (platform.AuthorizedCreation: check 8's, or its forwarder's, createdKey).
// One of an earlier creation (the tenant deleted and made again while it
// was on its way or waited here) is declined; one of a later creation than
// this instance applied yet is unavailable, which its gateway retries.
// Under mu.
func (r *room) actsForLocked(ctx context.Context, tenant string) (contract.Result, bool) {
	r.refreshLocked()
	b := r.bound.Load()
	if b.tenant != tenant {
		return contract.Declined(platformName), false // rebound since Execute authorized the action
	}
	switch sent := platform.AuthorizedCreation(ctx, r.p.deps.Vault, tenant); {
	case sent.UnixMicro() == b.created.UnixMicro():
		return contract.Result{}, true
	case sent.After(b.created):
		return contract.Failed(contract.CodeUnavailable, "nexscope: the room's home has not applied the tenant's creation yet; retry"), false
	}
	return contract.Declined(platformName), false
}

// unlock releases mu and then discards the re-hosts ended while it was held
// and disconnects the slow consumers found meanwhile (their leave needs mu).
func (r *room) unlock() {
	kicks, discards := r.kicks, r.discards
	r.kicks, r.discards = nil, nil
	r.mu.Unlock()
	for _, u := range discards {
		u.Abort()
	}
	for _, m := range kicks {
		m.kick(CloseSlowConsumer)
	}
}

// discardLocked has unlock abort u (nil: none), under mu.
func (r *room) discardLocked(u *media.Upload) {
	if u != nil {
		r.discards = append(r.discards, u)
	}
}

// pushLocked queues a text frame for m; an overflow schedules m's kick.
func (r *room) pushLocked(m *member, data []byte) {
	r.pushFrameLocked(m, wsconn.Frame{Type: websocket.MessageText, Data: data})
}

// pushFrameLocked queues f for m; an overflow schedules m's kick.
func (r *room) pushFrameLocked(m *member, f wsconn.Frame) {
	if m.q.Push(f) == wsconn.ErrOverflow {
		r.kicks = append(r.kicks, m)
	}
}

// join adds m, or returns the Close that refuses it: CloseNameTaken,
// CloseRoomFull, CloseUnknownRoom for a room dropped meanwhile, or
// CloseGoingAway for a member closed by shutdown before it
// joined or joining once the shutdown began (which resigns the room: the
// member would not be closed with the others).
func (r *room) join(m *member) error {
	r.mu.Lock()
	defer r.unlock()
	if m.left.Load() || r.p.closed.Load() {
		return CloseGoingAway
	}
	if r.dropped {
		return CloseUnknownRoom
	}
	if !r.home.Load() {
		return CloseRoomMoved // the lease went to another instance meanwhile
	}
	if _, taken := r.members[m.name]; taken || m.name == r.bot() {
		return CloseNameTaken
	}
	if len(r.users) >= r.cap {
		return CloseRoomFull
	}
	r.members[m.name] = m
	i, _ := slices.BinarySearch(r.users, m.name)
	r.users = slices.Insert(r.users, i, m.name)
	r.broadcastPresenceLocked()
	return nil
}

// becomeHome makes this instance the room's home while it holds the
// room's lease (tenure, as store.RunExclusive gave it): members may join.
func (r *room) becomeHome(tenure context.Context) {
	r.mu.Lock()
	r.home.Store(true)
	r.tenure = tenure
	r.arrive()
	r.mu.Unlock()
}

// homeHeld reports whether this instance is the room's home now: with
// several instances, also that it still holds the room's lease
// (store.Held). An instance that woke from a pause past its lease knows it
// here at once, before its tenure's timer resigns the room.
func (r *room) homeHeld() bool {
	return r.home.Load() && (r.p.cluster == nil || r.heldTenure() != nil)
}

// heldTenure is, while r (nil: none) is homed here among several
// instances and its lease held, the lease's context; nil otherwise.
func (r *room) heldTenure() context.Context {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	tenure := r.tenure
	r.mu.Unlock()
	if tenure == nil || !store.Held(tenure) {
		return nil
	}
	return tenure
}

// resign ends the room's tenure here (its lease lost, or the connector
// shutting down: Platform.Run): no one joins any more and every member
// is closed with c after the frames queued for it (as an edge closes its
// members when their home goes), once all have left: their leaves abandon
// a transfer and free the lock, its recipients told first. What the
// bridge remembered goes with the tenure: a later one here must not
// address a reply, or answer a prompt, by what an earlier one saw (the
// room's messages meanwhile went through another home). A member on
// this instance sending a file gets undelivered for it (one on another
// instance gets it from its edge: unanswered.go); the bot's file
// (send_media) is aborted too, and its op fails.
func (r *room) resign(c Close) {
	r.mu.Lock()
	r.home.Store(false)
	r.tenure = nil
	r.away, r.arrive = context.WithCancel(context.Background())
	b := *r.bound.Load()
	r.forgetLocked(&b)
	members := slices.Collect(maps.Values(r.members))
	t := r.transfer
	if t != nil {
		// Here, not at its sender's leave: a file-end under way gets no
		// ack; and the bot's own (send_media) fails, as its pushes see.
		r.abortLocked(t)
	}
	r.unlock()
	for _, m := range members {
		m.leave()
	}
	if t != nil && t.sender != nil && t.sender.remote == nil {
		why := "the room moved to another instance"
		if c.Code == CloseGoingAway.Code {
			why = "the connector shut down"
		}
		_ = t.sender.q.Push(wsconn.Frame{Type: websocket.MessageText, Data: errorFrame(CodeUndelivered,
			why+" before this file transfer ended; it was not delivered", t.start.msgID)})
	}
	for _, m := range members {
		m.closeQueue(c, true)
	}
}

// leave removes m (once; member.leave guards), tells everyone else, and
// abandons the transfer m was sending. The last member to leave an unbound
// room a binding created drops it (Platform.dropIdle).
func (r *room) leave(m *member) {
	r.mu.Lock()
	if r.members[m.name] != m {
		r.unlock()
		return
	}
	delete(r.members, m.name)
	if i, ok := slices.BinarySearch(r.users, m.name); ok && m.name != r.bot() { // else the bot stays listed
		r.users = slices.Delete(r.users, i, i+1)
	}
	if t := r.transfer; t != nil && t.sender == m {
		r.abortLocked(t)
	}
	r.broadcastPresenceLocked()
	idle := len(r.members) == 0
	r.unlock()
	if idle {
		r.p.dropIdle(r)
	}
}

// broadcastPresenceLocked sends the full sorted list to every member.
func (r *room) broadcastPresenceLocked() {
	frame := appendPresence(make([]byte, 0, 48+len(r.users)*12), r.users, r.p.nowMs())
	for _, m := range r.members {
		r.pushLocked(m, frame)
	}
}

// routed is the outcome of fanning a frame out.
type routed struct {
	delivered, offline [][]byte // raw JSON strings, for the ack
	recipients         []*member
	toBot              bool // the bot takes the frame (bridge it)
	botAt              int  // the bot's index in delivered, when toBot
}

// botOffline moves the bot from delivered to offline: the bridge could not
// deliver the frame, so the ack must not confirm it.
func (out *routed) botOffline() {
	quoted := out.delivered[out.botAt]
	out.delivered = slices.Delete(out.delivered, out.botAt, out.botAt+1)
	out.offline = append(out.offline, quoted)
}

// routeLocked delivers frame, the forwarded copy of sender's msg or
// file-start f, to the members named by f.to ([] broadcasts to every member
// but the sender) and reports who got it in out, whose slices it appends to
// (callers pass reused ones). keepRecipients collects the members reached.
//
// The bot is addressed when f.to names it or, in a broadcast, f.text
// mentions "@<bot>". When the bridge takes f (dropReason "") an addressed
// bot counts as delivered and toBot is set; otherwise the bot is offline
// (the message is dropped for it) and the drop is counted. A broadcast that
// does not mention the bot lists it in neither list.
func (r *room) routeLocked(sender *member, f *clientFrame, frame []byte, keepRecipients bool, out *routed) {
	deliver := func(m *member, quoted []byte) {
		r.pushLocked(m, frame)
		out.delivered = append(out.delivered, quoted)
		if keepRecipients {
			out.recipients = append(out.recipients, m)
		}
	}
	toBot := func(quoted []byte) {
		if botDrop := r.p.dropReason(f); botDrop != "" {
			r.p.deps.Metrics.Dropped(platformName, botDrop)
			out.offline = append(out.offline, quoted)
			return
		}
		out.botAt = len(out.delivered)
		out.delivered = append(out.delivered, quoted)
		out.toBot = true
	}
	if f.to[skipSpace(f.to, 1)] == ']' { // to = []: a broadcast (checkTo passed)
		for _, u := range r.users {
			switch {
			case u == sender.name:
			case u == r.bot() && r.members[u] == nil: // not a member holding its name
				if mentions(f.text, r.bot()) {
					toBot(session.AppendJSONString(nil, u))
				}
			default:
				m := r.members[u]
				deliver(m, m.quoted)
			}
		}
		return
	}
	var seen nameSet
	namesOf(f.to, func(raw, name []byte) {
		if !seen.add(name) {
			return
		}
		if m, ok := r.members[string(name)]; ok {
			deliver(m, raw)
			return
		}
		if r.bot() != "" && string(name) == r.bot() {
			toBot(raw)
			return
		}
		out.offline = append(out.offline, raw)
	})
}

// nameSet dedupes the names of one "to" list: a linear scan of an inline
// array while small, a map beyond that (a 10 MiB frame can name a million
// recipients).
type nameSet struct {
	small [16][]byte
	n     int
	big   map[string]struct{}
}

// add reports whether name was not in the set yet.
func (s *nameSet) add(name []byte) bool {
	if s.big != nil {
		if _, ok := s.big[string(name)]; ok {
			return false
		}
		s.big[string(name)] = struct{}{}
		return true
	}
	for _, n := range s.small[:s.n] {
		if string(n) == string(name) {
			return false
		}
	}
	if s.n < len(s.small) {
		s.small[s.n] = name
		s.n++
		return true
	}
	s.big = make(map[string]struct{}, 64)
	for _, n := range s.small {
		s.big[string(n)] = struct{}{}
	}
	s.big[string(name)] = struct{}{}
	return true
}

// mentions reports whether text (a raw JSON string) contains "@"+bot as a
// whole name.
func mentions(text []byte, bot string) bool {
	s, ok := stringValue(text)
	if !ok {
		return false
	}
	for i := 0; i+1+len(bot) <= len(s); i++ {
		end := i + 1 + len(bot)
		if s[i] == '@' && string(s[i+1:end]) == bot && (end == len(s) || strings.IndexByte(nameChars, s[end]) < 0) {
			return true
		}
	}
	return false
}
