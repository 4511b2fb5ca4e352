package discordtest

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"
)

// gwConn is one Gateway connection.
type gwConn struct {
	c       *websocket.Conn
	wmu     sync.Mutex  // orders sequence numbers with writes
	closing atomic.Bool // the server closes it (closeWith)
	zombie  atomic.Bool // heartbeats go unanswered (Zombie)
}

func (g *gwConn) send(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return g.c.Write(ctx, websocket.MessageText, b)
}

type gwFrame struct {
	Op int             `json:"op"`
	D  json.RawMessage `json:"d"`
}

func (s *Server) serveGateway(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(1 << 20)
	s.mu.Lock()
	s.dials++
	s.mu.Unlock()
	ctx := context.Background()
	g := &gwConn{c: c}
	defer c.CloseNow()
	if s.opts.Silent {
		for {
			if _, _, err := c.Read(ctx); err != nil {
				return
			}
		}
	}
	if g.send(ctx, map[string]any{"op": 10, "d": map[string]int{"heartbeat_interval": s.opts.HeartbeatInterval}}) != nil {
		return
	}
	answered := false
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			// Like Discord, a client closing with 1000 or 1001 ends its
			// session: a RESUME of it is answered with op 9.
			code := websocket.CloseStatus(err)
			s.mu.Lock()
			if s.conn == g {
				s.conn = nil
				if !g.closing.Load() && (code == websocket.StatusNormalClosure || code == websocket.StatusGoingAway) {
					s.sessionID = ""
				}
			}
			s.mu.Unlock()
			return
		}
		var f gwFrame
		if json.Unmarshal(data, &f) != nil {
			s.closeWith(g, 4002, "Decode error")
			return
		}
		if !answered && (f.Op == 2 || f.Op == 6) {
			answered = true
			s.mu.Lock()
			s.answers = append(s.answers, f.Op)
			s.notifyLocked()
			s.mu.Unlock()
		}
		switch f.Op {
		case 1:
			if !g.zombie.Load() {
				_ = g.send(ctx, map[string]any{"op": 11})
			}
		case 2:
			if !s.handleIdentify(ctx, g, f.D) {
				return
			}
		case 6:
			if !s.handleResume(ctx, g, f.D) {
				return
			}
		}
	}
}

// closeWith closes g with a Gateway close code and returns once the close
// handshake is done (coder/websocket bounds it to 5 s each way). It closes
// synchronously on purpose: the handler returns right after a refusal, and
// its deferred CloseNow would win a background Close and drop the socket
// before the close frame went out, so the client would see 1006 and retry
// instead of the terminal code.
func (s *Server) closeWith(g *gwConn, code int, reason string) {
	g.closing.Store(true)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		g.c.CloseNow()
		return
	}
	s.closers.Add(1)
	s.mu.Unlock()
	defer s.closers.Done()
	_ = g.c.Close(websocket.StatusCode(code), reason)
}

func (s *Server) handleIdentify(ctx context.Context, g *gwConn, d json.RawMessage) bool {
	var id struct {
		Token   string `json:"token"`
		Intents int    `json:"intents"`
	}
	_ = json.Unmarshal(d, &id)
	if id.Token != "Bot "+s.opts.Token {
		s.closeWith(g, 4004, "Authentication failed.")
		return false
	}
	if id.Intents&s.opts.DisallowedIntents != 0 {
		s.closeWith(g, 4014, "Disallowed intent(s).")
		return false
	}
	s.mu.Lock()
	s.identify++
	s.sessionID = "session-" + strconv.Itoa(s.identify)
	s.seq, s.sent = 0, nil
	guilds := make([]map[string]any, 0, len(s.guilds))
	creates := make([]map[string]any, 0, len(s.guilds))
	for _, gl := range s.guilds {
		guilds = append(guilds, map[string]any{"id": gl.ID, "unavailable": true})
		var chans, threads []Channel
		for _, c := range s.channels {
			if c.GuildID != gl.ID {
				continue
			}
			if c.Type == 10 || c.Type == 11 || c.Type == 12 {
				threads = append(threads, c)
			} else {
				chans = append(chans, c)
			}
		}
		creates = append(creates, map[string]any{
			"id": gl.ID, "name": gl.Name, "channels": nonNil(chans), "threads": nonNil(threads),
			"unavailable": false, "members": []any{}, "roles": []any{}, "emojis": []any{},
		})
	}
	ready := map[string]any{
		"v": 9, "session_id": s.sessionID, "resume_gateway_url": s.GatewayURL,
		"user":        map[string]any{"id": s.opts.BotID, "username": s.opts.BotName, "bot": true, "discriminator": "0"},
		"guilds":      guilds,
		"application": map[string]any{"id": s.opts.AppID, "flags": 0},
	}
	s.conn = g
	held := s.held
	s.mu.Unlock()
	// Each dispatch is kept for a RESUME even once the connection failed,
	// as Discord keeps a session's events.
	failed := s.dispatchTo(ctx, g, "READY", ready) != nil
	if held != nil {
		s.mu.Lock()
		s.holding = true
		s.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.holding = false
		s.mu.Unlock()
		if ctx.Err() != nil {
			return false
		}
	}
	for _, gc := range creates {
		failed = s.dispatchTo(ctx, g, "GUILD_CREATE", gc) != nil || failed
	}
	if failed {
		return false
	}
	s.mu.Lock()
	s.notifyLocked()
	s.mu.Unlock()
	return true
}

func nonNil(c []Channel) []Channel {
	if c == nil {
		return []Channel{}
	}
	return c
}

func (s *Server) handleResume(ctx context.Context, g *gwConn, d json.RawMessage) bool {
	var rs struct {
		Token     string `json:"token"`
		SessionID string `json:"session_id"`
		Seq       int64  `json:"seq"`
	}
	_ = json.Unmarshal(d, &rs)
	if rs.Token != "Bot "+s.opts.Token {
		s.closeWith(g, 4004, "Authentication failed.")
		return false
	}
	s.mu.Lock()
	if code := s.refuse; code != 0 {
		s.mu.Unlock()
		s.closeWith(g, code, "Resume refused.")
		return false
	}
	s.mu.Unlock()
	// Like Discord, a resumed session is first sent the dispatches past
	// the client's last sequence number, which the lost connection did not
	// deliver (e.g. the GUILD_CREATEs right after READY), then RESUMED.
	// g.wmu is held from before s.conn names g, so no new dispatch comes
	// between them.
	g.wmu.Lock()
	s.mu.Lock()
	valid := rs.SessionID == s.sessionID
	var missed [][]byte
	if valid {
		s.resume++
		s.conn = g
		for _, d := range s.sent {
			if d.seq > rs.Seq {
				missed = append(missed, d.frame)
			}
		}
	}
	s.mu.Unlock()
	if !valid {
		g.wmu.Unlock()
		return g.send(ctx, map[string]any{"op": 9, "d": false}) == nil
	}
	for _, f := range missed {
		if g.c.Write(ctx, websocket.MessageText, f) != nil {
			g.wmu.Unlock()
			return false
		}
	}
	g.wmu.Unlock()
	if s.dispatchTo(ctx, g, "RESUMED", map[string]any{}) != nil {
		return false
	}
	s.mu.Lock()
	s.notifyLocked()
	s.mu.Unlock()
	return true
}

// dispatchTo sends an op 0 dispatch with the next sequence number, kept
// for a RESUME of the session (the last maxKept).
func (s *Server) dispatchTo(ctx context.Context, g *gwConn, typ string, d any) error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	s.mu.Lock()
	s.seq++
	seq := s.seq
	frame, err := json.Marshal(map[string]any{"op": 0, "s": seq, "t": typ, "d": d})
	if err == nil {
		if len(s.sent) == maxKept {
			s.sent = append(s.sent[:0], s.sent[1:]...)
		}
		s.sent = append(s.sent, dispatched{seq, frame})
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return g.c.Write(ctx, websocket.MessageText, frame)
}

// dispatched is a dispatch sent in the current session.
type dispatched struct {
	seq   int64
	frame []byte
}

// maxKept bounds the dispatches kept for a RESUME.
const maxKept = 1024

// Dispatch sends an event to the current Gateway session.
func (s *Server) Dispatch(ctx context.Context, typ string, d any) error {
	s.mu.Lock()
	g := s.conn
	s.mu.Unlock()
	if g == nil {
		return errNoGateway
	}
	return s.dispatchTo(ctx, g, typ, d)
}

// WaitSession waits until n sessions were identified or resumed in total.
func (s *Server) WaitSession(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		done := s.identify+s.resume >= n && s.conn != nil
		ch := s.changed
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Zombie makes the current Gateway connection stop answering heartbeats
// while it stays open, as a zombied connection does.
func (s *Server) Zombie() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return errNoGateway
	}
	s.conn.zombie.Store(true)
	return nil
}

// CloseGateway closes the current Gateway connection with code and returns
// once the close handshake is done. Like Discord, 4007 (invalid seq) and
// 4009 (session timed out) end the session: a RESUME of it is answered with
// op 9.
func (s *Server) CloseGateway(code int, reason string) error {
	s.mu.Lock()
	g := s.conn
	s.conn = nil
	if code == 4007 || code == 4009 {
		s.sessionID = ""
	}
	s.mu.Unlock()
	if g == nil {
		return errNoGateway
	}
	s.closeWith(g, code, reason)
	return nil
}
