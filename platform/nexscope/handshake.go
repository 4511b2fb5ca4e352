package nexscope

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"connector/internal/connlimit"
)

// handshakeWriteTimeout bounds the error frame of a refused handshake.
const handshakeWriteTimeout = 5 * time.Second

// nameProbeTimeout is how long the holder of a name has to answer a fresh
// WebSocket ping when a new connection asks for that name. A holder that
// does not is a ghost (a client whose network dropped without a close; the
// heartbeat would need up to three intervals to notice): it is closed with
// 4010 and the newcomer takes the name.
const nameProbeTimeout = 5 * time.Second

// serveWS runs one client connection: /ws?name=&token=&v= (default room) or
// /ws/{room}?..., through the handshake's checks in the package doc's order.
func (p *Platform) serveWS(w http.ResponseWriter, req *http.Request) {
	if !p.track() {
		http.Error(w, "nexscope is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer p.wg.Done()
	q := req.URL.Query()
	roomName := cmp.Or(req.PathValue("room"), DefaultRoom)
	name := q.Get("name")
	m := newMember(p, nil, name)
	ws, err := websocket.Accept(w, req, &websocket.AcceptOptions{
		OriginPatterns: p.cfg.OriginPatterns,
	})
	if err != nil {
		p.deps.Log.Debug("nexscope upgrade refused", "err", err)
		return
	}
	m.accepted(ws)
	ws.SetReadLimit(p.cfg.MaxPayload + 1) // readMessage enforces MaxPayload itself

	if !p.tokenOK(q.Get("token")) {
		closeWith(ws, CloseUnauthorized)
		return
	}
	// Until here the socket counted against its source's share of the
	// public listener's unauthenticated connections.
	connlimit.Authenticated(req.Context())
	if v := q.Get("v"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n != 1 {
			refuse(ws, CodeVersionMismatch, "unsupported protocol version; this relay speaks v1", CloseVersionMismatch)
			return
		}
	}
	if !validName(name) {
		refuse(ws, CodeInvalidName, "name must match ^[a-zA-Z0-9_-]{1,32}$", CloseInvalidName)
		return
	}
	r := p.room(roomName)
	if r == nil {
		refuse(ws, CodeUnknownRoom, "no such room", CloseUnknownRoom)
		return
	}
	m.room = r
	m.id = p.nextID.Add(1)
	m.log = p.deps.Log.With("room", r.name, "member", name, "conn", m.id)
	if !p.register(m) {
		closeWith(ws, CloseGoingAway)
		return
	}
	defer p.unregister(m)
	err = errHomedHere
	if p.cluster != nil && !r.homeHeld() {
		err = p.cluster.joinRemote(m) // the room's home is another instance
	}
	if err == errHomedHere {
		err = r.join(m)
		if err == CloseNameTaken && r.replaceGhost(name) {
			err = r.join(m)
		}
	}
	switch err {
	case nil:
		m.log.Debug("nexscope member joined")
		m.run()
	case CloseNameTaken:
		refuse(ws, CodeNameTaken, fmt.Sprintf("username %q already in room", name), CloseNameTaken)
	case CloseRoomFull:
		refuse(ws, CodeRoomFull, "room is full", CloseRoomFull)
	case CloseUnknownRoom: // dropped since it was looked up (Platform.dropIdle)
		refuse(ws, CodeUnknownRoom, "no such room", CloseUnknownRoom)
	default:
		c, ok := err.(Close)
		if !ok {
			c = CloseGoingAway
		}
		closeWith(ws, c)
	}
}

// refuse sends a handshake error frame and ends ws with c.
func refuse(ws *websocket.Conn, code ErrorCode, message string, c Close) {
	ctx, cancel := context.WithTimeout(context.Background(), handshakeWriteTimeout)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, errorFrame(code, message, nil)); err != nil {
		_ = ws.CloseNow()
		return
	}
	closeWith(ws, c)
}

// replaceGhost probes the member holding name with a fresh WebSocket ping. If
// it does not answer within nameProbeTimeout (or its connection fails), it is
// closed with 4010 and leaves, and replaceGhost reports true: the name is
// free for the newcomer. A live holder (member.answersProbe: one whose
// reader is held back by backpressure cannot read a pong but is alive), or
// the bot, keeps the name.
func (r *room) replaceGhost(name string) bool {
	if name == r.bot() {
		return false
	}
	r.mu.Lock()
	holder := r.members[name]
	r.mu.Unlock()
	if holder == nil {
		return true // it left meanwhile
	}
	var alive bool
	if holder.remote != nil {
		alive = holder.remote.cl.probe(holder) // its socket is on another instance
	} else {
		alive = holder.answersProbe()
	}
	if alive {
		return false
	}
	holder.log.Info("nexscope ghost replaced: no pong to the name probe of a new connection",
		"probe_timeout", nameProbeTimeout)
	holder.kick(CloseGhostReplaced)
	return true
}
