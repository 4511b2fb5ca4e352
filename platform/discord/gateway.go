package discord

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"

	"connector/internal/clock"
)

// RefusedError is returned by Run when Discord closed the Gateway with a
// code that must not be retried: 4004 (authentication failed: the bot token
// is wrong), 4010, 4011, 4012, 4013 (invalid intents) or 4014 (disallowed
// intents: enable MESSAGE_CONTENT in the developer portal). The platform
// then reports a terminal, not-ready Status.
type RefusedError struct {
	Code int
}

// Error names the close code and what to fix.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("discord gateway refused the bot: close %d (%s)", e.Code, cmp.Or(terminalCloses[e.Code], "terminal"))
}

// terminalCloses are the Gateway close codes that must not be reconnected,
// with what each means.
var terminalCloses = map[int]string{
	4004: "authentication failed: check bot_token",
	4010: "invalid shard",
	4011: "sharding required",
	4012: "invalid API version",
	4013: "invalid intents",
	4014: "disallowed intents: enable the MESSAGE_CONTENT privileged intent in the developer portal",
}

// newSessionCloses are the Gateway close codes after which Discord wants a
// new session (IDENTIFY), not a RESUME: 4007 (invalid seq) and 4009
// (session timed out).
var newSessionCloses = map[int]bool{4007: true, 4009: true}

// gateway supervises discordgo's Gateway connection in place of its own
// reconnect loop, which ignores close codes and would retry a bad token
// forever. It opens the session with a handshake watchdog (discordgo sets no
// read deadline while waiting for HELLO and READY), stops for good on a
// terminal close code, starts a new session after a close code saying the
// old one cannot be resumed (discordgo would RESUME it forever), reconnects
// with jittered exponential backoff that only resets after a connection
// stayed up StableAfter, and keeps a rolling 24-hour identify budget.
type gateway struct {
	p            *Platform
	sess         *discordgo.Session // run's; nil until the next open starts a new session
	disconnected chan struct{}
	budget       *identifyBudget

	ending atomic.Bool // run closes the session: its close frame (1000) goes out
	// proxy names the HTTP proxy of a wss:// Gateway (tunnel):
	// http.ProxyFromEnvironment.
	proxy func(*http.Request) (*url.URL, error)

	connMu  sync.Mutex
	conn    *handshakeConn  // the socket being opened, until its handshake was read
	by      time.Time       // when the latest open's handshake must end (wall time)
	openCtx context.Context // the latest open's ctx (openContext)
}

func newGateway(p *Platform) *gateway {
	return &gateway{
		p:            p,
		disconnected: make(chan struct{}, 1),
		budget:       &identifyBudget{max: p.cfg.MaxIdentifiesPerDay, clock: p.clock},
		proxy:        http.ProxyFromEnvironment,
	}
}

// dial is the Gateway dialer's NetDialContext, for a ws:// Gateway: the
// socket's handshake must end by the open's deadline (handshakeConn), and
// the close frames run did not ask for are dropped (closeGuard).
func (g *gateway) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := g.dialTCP(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &closeGuard{Conn: c, ending: &g.ending}, nil
}

// dialTLS is the Gateway dialer's NetDialTLSContext, for a wss:// Gateway
// (Discord's): dial's socket, through the environment's HTTP proxy when it
// names one (as gorilla's own dialer did), under TLS with cfg (nil: the
// system's roots); the close frames are dropped above TLS, where gorilla
// writes them, not on the socket, which carries TLS records.
func (g *gateway) dialTLS(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
	c, err := g.tunnel(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg = cfg.Clone()
	if cfg == nil {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return &closeGuard{Conn: tc, ending: &g.ending}, nil
}

// dialTCP dials the socket under a Gateway connection: its handshake must
// end by the open's deadline (handshakeConn).
func (g *gateway) dialTCP(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	g.connMu.Lock()
	defer g.connMu.Unlock()
	g.conn = &handshakeConn{Conn: c, limit: g.by}
	_ = c.SetDeadline(g.by)
	return g.conn, nil
}

// handshakeDone lifts the handshake deadline once discordgo's Open read
// READY or RESUMED (its Connect event, which it emits before any further
// I/O on the socket).
func (g *gateway) handshakeDone() {
	g.connMu.Lock()
	c := g.conn
	g.conn = nil
	g.connMu.Unlock()
	if c != nil {
		c.lift()
	}
}

// handshakeConn is a Gateway socket whose handshake (the upgrade, HELLO,
// then READY or RESUMED) must end by limit: every deadline set on it
// meanwhile (gorilla sets and clears its own around the upgrade) is capped
// there, so the read a silent server leaves waiting fails. Unlike closing
// the socket from a timer, a deadline cannot cut a session whose READY was
// read in time but whose Open returned after the limit.
type handshakeConn struct {
	net.Conn
	mu    sync.Mutex
	limit time.Time // zero once lifted
}

// closeGuard is a Gateway connection's stream of WebSocket frames (the
// socket, or the TLS above it) that drops the close frames run did not ask
// for (Write).
type closeGuard struct {
	net.Conn
	ending *atomic.Bool // gateway.ending
}

// Write implements net.Conn. It drops a close frame (gorilla writes each
// client frame in one Write; 0x88 is a final close frame's first byte)
// unless run is closing the session: discordgo closes with 1000 on its own
// when it judges the connection dead (a heartbeat unacknowledged for five
// intervals, a read error), and a 1000 ends the session at Discord, so the
// next open's RESUME would be refused, an identify spent and the events in
// between lost. Without a close frame Discord sees the socket drop and keeps
// the session for that RESUME.
func (c *closeGuard) Write(b []byte) (int, error) {
	if len(b) > 0 && b[0] == 0x88 && !c.ending.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// SetDeadline implements net.Conn, capped at the limit.
func (c *handshakeConn) SetDeadline(t time.Time) error { return c.set(t, c.Conn.SetDeadline) }

// SetReadDeadline implements net.Conn, capped at the limit.
func (c *handshakeConn) SetReadDeadline(t time.Time) error { return c.set(t, c.Conn.SetReadDeadline) }

// SetWriteDeadline implements net.Conn, capped at the limit.
func (c *handshakeConn) SetWriteDeadline(t time.Time) error { return c.set(t, c.Conn.SetWriteDeadline) }

func (c *handshakeConn) set(t time.Time, apply func(time.Time) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.limit.IsZero() && (t.IsZero() || t.After(c.limit)) {
		t = c.limit
	}
	return apply(t)
}

// cut brings the limit forward to t, unless lifted.
func (c *handshakeConn) cut(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.limit.IsZero() {
		c.limit = t
		_ = c.Conn.SetDeadline(t)
	}
}

// lift ends the cap: the session is up.
func (c *handshakeConn) lift() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limit = time.Time{}
	_ = c.Conn.SetDeadline(time.Time{})
}

func (g *gateway) signalDisconnect() {
	select {
	case g.disconnected <- struct{}{}:
	default:
	}
}

// openContext is the context of the latest open, for the one REST call
// discordgo's Open makes, GET /gateway, which carries no context of its
// own: the transport sends it under this one, so the end of run's ctx
// ends it too.
func (g *gateway) openContext() context.Context {
	g.connMu.Lock()
	defer g.connMu.Unlock()
	if g.openCtx == nil {
		return context.Background()
	}
	return g.openCtx
}

// open runs discordgo's Open under the handshake deadline (handshakeConn)
// and ctx, on a new session if there is none.
func (g *gateway) open(ctx context.Context) error {
	if g.sess == nil {
		g.sess = g.p.gatewaySession()
	}
	g.connMu.Lock()
	g.conn, g.by, g.openCtx = nil, time.Now().Add(g.p.cfg.HandshakeTimeout), ctx // wall time: see run
	g.connMu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		past := time.Unix(1, 0)
		g.connMu.Lock()
		g.by = past // a socket dialed later fails at once
		c := g.conn
		g.connMu.Unlock()
		if c != nil {
			c.cut(past)
		}
	})
	err := g.sess.Open()
	stop()
	return err
}

// run keeps the Gateway connected until ctx ends (nil) or Discord refuses
// the bot (*RefusedError). The session is dropped when it returns: Close
// ended it at Discord (close 1000), so a later run (the lease back on this
// instance) starts a new one rather than RESUME it.
func (g *gateway) run(ctx context.Context) error {
	defer func() { g.sess = nil }()
	cfg := &g.p.cfg
	backoff := cfg.ReconnectMin
	for {
		if !g.budget.ready() {
			g.p.setStatus(false, false, "identify budget for 24h spent; waiting before reconnecting")
			g.p.log.Error("discord identify budget spent; waiting", "max_per_day", cfg.MaxIdentifiesPerDay)
		}
		if err := g.budget.wait(ctx); err != nil {
			return nil
		}
		g.ending.Store(false)
		if g.sess == nil {
			if err := g.sessionStarts(ctx); err != nil {
				return g.refusedOr(err)
			}
		}
		select {
		case <-g.disconnected:
		default:
		}
		err := g.open(ctx)
		if ctx.Err() != nil {
			if err == nil {
				g.close()
			}
			return nil
		}
		switch {
		case err == nil || errors.Is(err, discordgo.ErrWSAlreadyOpen):
			up := g.p.clock.Now()
			g.p.setStatus(true, false, "connected")
			g.p.log.Info("discord gateway connected")
			select {
			case <-ctx.Done():
				g.close()
				return nil
			case <-g.disconnected:
			}
			g.p.setStatus(false, false, "gateway disconnected; reconnecting")
			g.p.log.Warn("discord gateway disconnected; reconnecting")
			if g.p.clock.Now().Sub(up) >= cfg.StableAfter {
				backoff = cfg.ReconnectMin
			}
		default:
			g.budget.record() // a failed open may have spent an identify
			var ce *websocket.CloseError
			if errors.As(err, &ce) && terminalCloses[ce.Code] != "" {
				return g.refusedOr(&RefusedError{Code: ce.Code})
			}
			if errors.As(err, &ce) && newSessionCloses[ce.Code] {
				g.sess = nil // Discord will not resume it
			}
			g.p.setStatus(false, false, "gateway connect failed; retrying")
			g.p.log.Warn("discord gateway connect failed", "err", gatewayErrText(err), "retry_in", backoff)
		}
		// Wall time, as the handshake watchdog in open: discordgo's Open,
		// heartbeats and resume run on the library's own real timers, which
		// no clock is injected into; a watchdog and a backoff on the
		// platform's clock (a fake one in tests) would stand still while
		// those run on.
		if clock.System.Sleep(ctx, jitter(backoff)) != nil {
			return nil
		}
		backoff = min(2*backoff, cfg.ReconnectMax)
	}
}

// close ends the session at Discord (close 1000): run's end.
func (g *gateway) close() {
	g.ending.Store(true)
	_ = g.sess.Close()
}

// refusedOr ends run: with err when it is a *RefusedError, which turns
// Status terminal, else (ctx ended) with nil.
func (g *gateway) refusedOr(err error) error {
	var refused *RefusedError
	if !errors.As(err, &refused) {
		return nil
	}
	g.p.setStatus(false, true, refused.Error())
	g.p.log.Error("discord gateway refused the bot; not reconnecting", "close_code", refused.Code, "meaning", terminalCloses[refused.Code])
	return refused
}

// sessionStarts waits, before a new session IDENTIFYs, while Discord's own
// count of the bot's sessions started (GET /gateway/bot's
// session_start_limit) has reached MaxIdentifiesPerDay or left none: that
// count spans every process that ran the bot, where the identify budget
// forgets what a restarted process spent. If Discord cannot be asked or
// tells no limit, the identify budget alone applies. It returns a
// *RefusedError (4004) when Discord answers 401 (the bot token is wrong: the
// 401 pauses REST, so the Gateway could not be asked to say so), else ctx's
// error once ctx ended.
func (g *gateway) sessionStarts(ctx context.Context) error {
	for {
		var gb discordgo.GatewayBotResponse
		err := g.p.rest(ctx, "GET", discordgo.EndpointGatewayBot, nil, &gb)
		var re *discordgo.RESTError
		switch {
		case errors.As(err, &re) && re.Response != nil && re.Response.StatusCode == http.StatusUnauthorized:
			return &RefusedError{Code: 4004} // what the Gateway would close with
		case err != nil:
			g.p.log.Warn("discord session start limit not read; the identify budget alone applies", "err", describe(err).Error)
			return ctx.Err()
		}
		lim := gb.SessionStartLimit
		if lim.Total == 0 || lim.Remaining > 0 && lim.Total-lim.Remaining < g.p.cfg.MaxIdentifiesPerDay {
			return nil // no limit told (not Discord's answer), or room left
		}
		wait := max(time.Duration(lim.ResetAfter)*time.Millisecond, g.p.cfg.ReconnectMin)
		g.p.setStatus(false, false, "identify budget for 24h spent; waiting before reconnecting")
		g.p.log.Error("discord identify budget spent (Discord's session start limit); waiting",
			"max_per_day", g.p.cfg.MaxIdentifiesPerDay, "remaining", lim.Remaining, "retry_in", wait)
		if err := g.p.clock.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// jitter spreads d over [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// gatewayErrText describes an Open failure without quoting URLs.
func gatewayErrText(err error) string {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return fmt.Sprintf("closed by Discord with %d", ce.Code)
	}
	return describe(err).Error
}

// identifyWindow is the period of Discord's identify limit.
const identifyWindow = 24 * time.Hour

// identifyBudget counts Gateway sessions started (READY) and failed opens,
// which may each have spent an identify, over a rolling 24 hours.
type identifyBudget struct {
	max   int
	clock clock.Clock

	mu    sync.Mutex
	times []time.Time
}

func (b *identifyBudget) record() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.times = append(b.pruneLocked(), b.clock.Now())
}

func (b *identifyBudget) pruneLocked() []time.Time {
	cut := b.clock.Now().Add(-identifyWindow)
	i := 0
	for i < len(b.times) && !b.times[i].After(cut) {
		i++
	}
	b.times = b.times[i:]
	return b.times
}

func (b *identifyBudget) ready() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pruneLocked()) < b.max
}

// wait blocks until an identify may be spent.
func (b *identifyBudget) wait(ctx context.Context) error {
	for {
		b.mu.Lock()
		times := b.pruneLocked()
		if len(times) < b.max {
			b.mu.Unlock()
			return ctx.Err()
		}
		until := times[0].Add(identifyWindow).Sub(b.clock.Now())
		b.mu.Unlock()
		if err := b.clock.Sleep(ctx, until); err != nil {
			return err
		}
	}
}
