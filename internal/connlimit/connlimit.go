// Package connlimit bounds the connections an HTTP server holds for clients
// that have not authenticated, and keeps the server accepting sanely when
// the process runs out of file descriptors; docs/security.md (the
// unauthenticated-connection rows) states the limits and what a refused
// client sees.
//
// A Listener wraps the server's net.Listener; its ConnState and ConnContext
// methods must be the http.Server's hooks of those names. Every accepted
// connection counts as unauthenticated until it is closed, or until the
// handler serving it calls Authenticated with its request's context. Taking
// a connection over (a WebSocket upgrade, http.StateHijacked) does not end
// the count: a socket upgraded only to be refused (the relay's close 4401)
// still counts against its source until it is closed, so a flood of refused
// upgrades holds no more sockets than its share. Evicting the longest-idle
// keep-alive is allowed as HTTP lets a server close an idle connection at
// any time; closing a new connection at once (rather than queueing it)
// keeps a slow-request attacker from taking the descriptors established
// gateways need. On EMFILE or ENFILE the accept loop itself backs off, as
// net/http would, without net/http's log line per retry.
package connlimit

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"connector/internal/clock"
	"connector/internal/loglimit"
	"connector/internal/netsource"
)

// Reasons a connection is refused or closed by the Listener, as passed to
// Config.Refused.
const (
	// ReasonEvictedIdle: an idle keep-alive connection closed to admit a
	// new connection at the limit.
	ReasonEvictedIdle = "evicted_idle"
	// ReasonOverLimit: a new connection closed at once because the limit
	// was reached and no connection was idle.
	ReasonOverLimit = "over_limit"
	// ReasonNoFDs: accept failed for lack of file descriptors.
	ReasonNoFDs = "out_of_fds"
	// ReasonSourceLimit: a new connection closed at once because its
	// source held MaxPerSource connections and none of them was idle.
	ReasonSourceLimit = "source_limit"
)

// Reasons lists every reason passed to Config.Refused.
var Reasons = []string{ReasonEvictedIdle, ReasonOverLimit, ReasonNoFDs, ReasonSourceLimit}

// Config configures a Listener.
type Config struct {
	// Max bounds the unauthenticated connections held at once; it must be
	// positive.
	Max int
	// MaxPerSource bounds those of one source (netsource.Of); zero or a value
	// above Max means Max.
	MaxPerSource int
	// Log receives lines about refusals, at most one a minute per reason,
	// carrying the count held back since the last one
	// (loglimit.SuppressedKey); nil discards.
	Log *slog.Logger
	// Refused is told of every refusal by reason; nil ignores them.
	Refused func(reason string)
	// Clock times the accept backoff and the log allowance; nil is
	// clock.System.
	Clock clock.Clock
}

// Listener is a net.Listener that bounds unauthenticated connections. Create
// it with New.
type Listener struct {
	net.Listener
	cfg  Config
	logs map[string]*loglimit.Bucket // refusals' log lines by reason; read-only after New

	mu      sync.Mutex
	conns   map[net.Conn]*state // unauthenticated connections
	sources map[string]int      // unauthenticated connections by source
	seq     uint64              // orders idle transitions
	reserve *os.File            // closed to make room when accept runs out of fds
}

// state is what the Listener knows of one unauthenticated connection.
type state struct {
	source    string
	idle      bool
	idleOrder uint64 // seq when it went idle; lower is longer idle
}

// conn is a connection the Listener accepted: closing it, also after a
// handler took it over, ends its count.
type conn struct {
	net.Conn
	l *Listener
}

// Close stops counting c and closes it.
func (c *conn) Close() error {
	c.l.forget(c)
	return c.Conn.Close()
}

// CloseWrite shuts down the writing side when the connection can (a TCP
// connection), as net/http does before closing to avoid a reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom lets net/http send files with the connection's own ReadFrom
// (sendfile on TCP).
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// connKey is the context key under which ConnContext keeps a request's
// connection.
type connKey struct{}

// New wraps ln. cfg.Max must be positive.
func New(ln net.Listener, cfg Config) (*Listener, error) {
	if cfg.Max <= 0 {
		return nil, errors.New("connlimit: Max must be positive")
	}
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	if cfg.Refused == nil {
		cfg.Refused = func(string) {}
	}
	if cfg.MaxPerSource <= 0 || cfg.MaxPerSource > cfg.Max {
		cfg.MaxPerSource = cfg.Max
	}
	cfg.Clock = cmp.Or(cfg.Clock, clock.System)
	l := &Listener{Listener: ln, cfg: cfg, conns: make(map[net.Conn]*state),
		sources: make(map[string]int), logs: make(map[string]*loglimit.Bucket, len(Reasons))}
	for _, r := range Reasons {
		l.logs[r] = loglimit.NewBucket(loglimit.Rate{Burst: 1, Every: time.Minute}, cfg.Clock)
	}
	l.reserve, _ = os.Open(os.DevNull)
	return l, nil
}

// Unauthenticated returns the number of unauthenticated connections held.
func (l *Listener) Unauthenticated() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Accept returns the next connection within the limit; it counts until it
// is closed or authenticated. It returns an error only when the wrapped
// listener fails for another reason than a lack of file descriptors (for
// example because it was closed).
func (l *Listener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !outOfFDs(err) {
				return nil, err
			}
			l.shedOne()
			l.refused(ReasonNoFDs, "accept failed: out of file descriptors; refusing connections until some are free", "err", err)
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			_ = l.cfg.Clock.Sleep(context.Background(), delay)
			continue
		}
		delay = 0
		if tc := (&conn{Conn: c, l: l}); l.admit(tc) {
			return tc, nil
		}
	}
}

// admit counts c, making room by evicting the longest-idle connection of
// c's source when the source is at its share, else the longest-idle one at
// the limit; false (with c's socket closed) when there is no room.
func (l *Listener) admit(c *conn) bool {
	src := netsource.Of(c.RemoteAddr().String())
	l.mu.Lock()
	var victim net.Conn
	reason, limit, what := "", 0, ""
	switch {
	case l.cfg.MaxPerSource < l.cfg.Max && l.sources[src] >= l.cfg.MaxPerSource:
		victim = l.longestIdleLocked(src)
		reason, limit, what = ReasonSourceLimit, l.cfg.MaxPerSource, "unauthenticated connection limit of one source reached"
	case len(l.conns) >= l.cfg.Max:
		victim = l.longestIdleLocked("")
		reason, limit, what = ReasonOverLimit, l.cfg.Max, "unauthenticated connection limit reached"
	}
	if reason != "" && victim == nil {
		l.mu.Unlock()
		l.refused(reason, "connection refused: "+what, "limit", limit, "source", src)
		_ = c.Conn.Close()
		return false
	}
	if victim != nil {
		l.forgetLocked(victim)
	}
	l.conns[c] = &state{source: src}
	l.sources[src]++
	l.mu.Unlock()
	if victim != nil {
		l.refused(ReasonEvictedIdle, "idle connection closed: "+what, "limit", limit)
		_ = victim.Close()
	}
	return true
}

// longestIdleLocked returns the longest-idle connection of source src (any
// source when src is ""), or nil when none is idle.
func (l *Listener) longestIdleLocked(src string) net.Conn {
	var victim net.Conn
	var oldest *state
	for vc, st := range l.conns {
		if st.idle && (src == "" || st.source == src) && (oldest == nil || st.idleOrder < oldest.idleOrder) {
			victim, oldest = vc, st
		}
	}
	return victim
}

// forget stops counting c.
func (l *Listener) forget(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked(c)
}

// forgetLocked stops counting c.
func (l *Listener) forgetLocked(c net.Conn) {
	st := l.conns[c]
	if st == nil {
		return
	}
	delete(l.conns, c)
	if l.sources[st.source]--; l.sources[st.source] <= 0 {
		delete(l.sources, st.source)
	}
}

// ConnState is the http.Server ConnState hook: it tracks which connections
// are idle and releases those that were closed. A connection taken over
// (hijacked) stays counted, never idle, until it is closed or
// authenticated.
func (l *Listener) ConnState(c net.Conn, st http.ConnState) {
	c = underlying(c)
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.conns[c]
	if s == nil {
		return
	}
	switch st {
	case http.StateIdle:
		l.seq++
		s.idle, s.idleOrder = true, l.seq
	case http.StateActive, http.StateHijacked:
		s.idle = false
	case http.StateClosed:
		l.forgetLocked(c)
	}
}

// ConnContext is the http.Server ConnContext hook: it keeps the connection
// in its requests' context for Authenticated.
func (l *Listener) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := underlying(c).(*conn); ok && tc.l == l {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// Authenticated stops counting the connection of the request whose context
// is ctx: its client proved who it is. The handler calls it once a
// credential checks out, before a long-lived use such as a WebSocket. It
// does nothing for a request not served through a Listener.
func Authenticated(ctx context.Context) {
	if tc, ok := ctx.Value(connKey{}).(*conn); ok {
		tc.l.forget(tc)
	}
}

// underlying is c, or the connection under it when c is a *tls.Conn.
func underlying(c net.Conn) net.Conn {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		return nc.NetConn()
	}
	return c
}

// shedOne frees the reserve descriptor to accept one waiting connection and
// close it, so that client is refused rather than left in the backlog.
func (l *Listener) shedOne() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reserve == nil {
		return
	}
	_ = l.reserve.Close()
	l.reserve = nil
	if tl, ok := l.Listener.(*net.TCPListener); ok {
		// Never block here: nothing may be waiting.
		_ = tl.SetDeadline(time.Now())
		if c, err := tl.Accept(); err == nil {
			_ = c.Close()
		}
		_ = tl.SetDeadline(time.Time{})
	}
	l.reserve, _ = os.Open(os.DevNull)
}

// Close closes the listener and the reserve descriptor.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.reserve != nil {
		_ = l.reserve.Close()
		l.reserve = nil
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// refused counts one refusal and logs it unless a line of the same reason
// was logged less than LogEvery ago.
func (l *Listener) refused(reason, msg string, attrs ...any) {
	l.cfg.Refused(reason)
	l.logs[reason].Log(l.cfg.Log, slog.LevelWarn, msg, append(attrs, "reason", reason)...)
}

// outOfFDs reports whether err is an accept failure for lack of file
// descriptors, per process (EMFILE) or system-wide (ENFILE).
func outOfFDs(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}
