package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/relay/ledger"
)

// Reasons a gateway frame is skipped, as counted by Metrics.FrameIgnored.
const (
	ignoredMalformed       = "malformed"
	ignoredUnknownType     = "unknown_type"
	ignoredNoRequestID     = "no_request_id"
	ignoredNoSessionKey    = "no_session_key"
	ignoredUnknownBufferID = "unknown_buffer_id"
	ignoredInterruptRate   = "interrupt_rate"
)

// The interrupts one connection may send: interruptBurst at once, then one
// more per interruptEvery. Among several instances each may cost a store
// read and a message between instances; people's /stop come far slower.
// Past it an interrupt is skipped and counted (ignoredInterruptRate).
const (
	interruptBurst = 20
	interruptEvery = 100 * time.Millisecond
)

// handleLine dispatches one frame read from the gateway. Malformed frames,
// frames of unknown types and frames missing what their type needs are
// counted and skipped. Once the connection is closing, whose answers could
// not reach the gateway, only acks are taken, and none after a revocation.
func (c *conn) handleLine(line []byte) {
	if id, ok := contract.DecodeAck(line); ok { // the most frequent frame, decoded in place
		if !c.closing.Load() || c.unrevoked.Err() == nil {
			c.handleAck(id)
		}
		return
	}
	f, err := contract.DecodeGatewayFrame(line)
	if err != nil {
		c.ignore(ignoredMalformed, slog.LevelWarn, "skipping malformed frame", "err", err, "bytes", len(line))
		return
	}
	if c.closing.Load() && (f.Type != contract.TypeInboundAck || c.unrevoked.Err() != nil) {
		return
	}
	// Frames go to the handlers by value: taking f's address here would move
	// every frame, acks included, to the heap.
	switch f.Type {
	case contract.TypeHello:
		c.handleHello(f)
		c.helloed = true
	case contract.TypeOutbound:
		c.handleOutbound(f)
	case contract.TypeInterrupt:
		c.handleInterrupt(f)
	case contract.TypeGoingIdle:
		c.hub.idle(c)
		c.enqueue([]byte(contract.GoingIdleAck))
		c.logs.Log(c.log, slog.LevelInfo, "gateway going idle: inbound buffered until it reconnects")
	case contract.TypeInboundAck:
		c.handleAck([]byte(f.BufferID))
	default:
		c.ignore(ignoredUnknownType, slog.LevelDebug, "ignoring frame of unknown type", "type", truncateForLog(f.Type))
	}
}

// handleAck takes the gateway's inbound_ack of id, which may be a slice of
// the message read: nothing keeps it past the call.
func (c *conn) handleAck(id []byte) {
	if len(id) > maxBufferIDBytes || !c.hub.ack(c, id) {
		c.ignore(ignoredUnknownBufferID, slog.LevelDebug, "inbound_ack for an unknown bufferId", "buffer_id", truncateForLog(string(id)))
	}
}

// ignore counts a skipped frame and logs it within the connection's log
// allowance.
func (c *conn) ignore(reason string, level slog.Level, msg string, args ...any) {
	c.srv.cfg.Metrics.FrameIgnored(c.hub.id, reason)
	c.logs.Log(c.log, level, msg, args...)
}

// handleHello answers one hello with its platform's descriptor. A platform
// this connector does not front closes the connection with 4404 at once,
// rather than leaving the gateway to wait out its 30 s handshake. A hello
// may be repeated: it is answered again and changes nothing, so a
// connection's hello list never outgrows the platforms plus "relay".
func (c *conn) handleHello(f contract.GatewayFrame) {
	name := f.Platform
	frame, ok := c.srv.descriptorFrames[name]
	if !ok {
		reason := fmt.Sprintf("platform %q is not fronted by this connector", truncateForLog(name))
		c.log.Warn("hello refused: platform not fronted", "platform", truncateForLog(name))
		c.closeWith(contract.UnsupportedPlatform(reason))
		return
	}
	if !slices.Contains(c.identities, name) {
		c.identities = append(c.identities, name)
	}
	c.enqueue(frame)
	c.logs.Log(c.log, slog.LevelInfo, "hello", "platform", name, "bot_id", truncateForLog(string(f.BotID)))
	if p, ok := c.srv.platforms[name].(platform.HelloObserver); ok {
		// A connection of a gateway SetTenants dropped (its tenant deleted,
		// or made again under its id) is closing: its hello is no tenant's
		// now, and would be observed with the new tenant's creation.
		c.srv.regMu.RLock()
		created, current := c.hub.created, c.srv.gateways[c.gw.id] == c.gw
		c.srv.regMu.RUnlock()
		if current {
			p.ObserveHello(c.hub.id, created, c.gw.id, &f)
		}
	}
	if name == contract.PlatformRelay {
		name = ledger.AllPlatforms
	}
	c.hub.serve(c, name)
}

// maxSessionKeyBytes bounds the session_key of a gateway's interrupt: far
// above any session's key (session.Key), which no interrupt past it can
// name, and far below the frame's limit, which among several instances
// would key a store read and fill a message between instances.
const maxSessionKeyBytes = 1024

// handleInterrupt delivers a gateway's interrupt to the session's owner as
// interrupt_inbound. It is looked up under the connection's own tenant
// only, and skipped past the connection's interrupt rate.
func (c *conn) handleInterrupt(f contract.GatewayFrame) {
	if f.SessionKey == "" {
		c.ignore(ignoredNoSessionKey, slog.LevelDebug, "interrupt without session_key ignored")
		return
	}
	if len(f.SessionKey) > maxSessionKeyBytes {
		c.ignore(ignoredMalformed, slog.LevelDebug, "interrupt with an overlong session_key ignored", "bytes", len(f.SessionKey))
		return
	}
	if c.interrupts == nil {
		c.interrupts = rate.NewLimiter(rate.Every(interruptEvery), interruptBurst)
	}
	if !c.interrupts.AllowN(c.srv.cfg.Clock.Now(), 1) {
		c.ignore(ignoredInterruptRate, slog.LevelInfo, "interrupt over the connection's rate skipped")
		return
	}
	c.hub.interrupt(c.ctx, interrupt{sessionKey: f.SessionKey, gatewayID: c.gw.id})
}

// handleOutbound starts one outbound op and answers it with exactly one
// outbound_result, on its own goroutine so a slow platform call never holds
// up the connection.
func (c *conn) handleOutbound(f contract.GatewayFrame) {
	// Read before the revocation is checked again: a drop of the tenant's
	// state since handleLine checked it shows in the count (noteProfile).
	drops := c.hub.drops.Load()
	if c.unrevoked.Err() != nil {
		return
	}
	reqID := string(f.RequestID)
	if reqID == "" {
		c.ignore(ignoredNoRequestID, slog.LevelWarn, "outbound without requestId ignored")
		return
	}
	a, err := contract.DecodeAction(f.Action)
	if err != nil {
		c.answer(reqID, noPlatform, "", contract.Failed(contract.CodeBadRequest, err.Error()), time.Time{})
		return
	}
	target := c.target(f.Platform)
	// What the op holds while it runs: its action, decoded, and its id.
	cost := int64(len(f.Action) + len(reqID))
	if !c.takeOutbound(cost) {
		c.answer(reqID, noPlatform, a.Op, contract.Failed(contract.CodeRateLimited, "too many outbound requests in flight on this connection"), time.Time{})
		return
	}
	s := c.srv
	op := &outboundOp{c: c, reqID: reqID, op: a.Op, start: s.cfg.Clock.Now(), drops: drops}
	if !track(s, s.ops, &s.outbound, op, struct{}{}) {
		c.releaseOutbound(cost)
		c.answer(reqID, noPlatform, a.Op, contract.Failed(contract.CodeUnavailable, "connector is shutting down"), time.Time{})
		return
	}
	go func() {
		defer untrack(s, s.ops, &s.outbound, op)
		defer c.releaseOutbound(cost)
		defer func() {
			if v := recover(); v != nil { // a platform bug fails this op, not the process
				c.logs.Log(c.log, slog.LevelError, "outbound op failed: panic", "op", truncateForLog(a.Op), "platform", op.platformName(), "panic", v, "stack", string(debug.Stack()))
				op.finish(contract.Failed(contract.CodePlatformError, "internal error"))
			}
		}()
		// Not c.ctx: an op the platform already started is answered even if
		// the gateway reconnects meanwhile, and shutdown waits for it. A
		// revocation cancels it: a gateway removed, or a tenant deleted and
		// made again under its id, acts nowhere after.
		ctx, cancel := context.WithTimeout(c.unrevoked, s.cfg.OutboundTimeout)
		defer cancel()
		op.finish(c.execute(ctx, target, &a, op))
	}()
}

// maxOutboundBytes bounds the bytes of the actions of one connection's
// outbound ops in flight (besides Config.MaxOutboundInFlight ops): up to
// a frame each, 1,024 slow ops would otherwise hold a gigabyte.
const maxOutboundBytes = 16 << 20

// takeOutbound takes room for one more outbound op of cost bytes; false
// when the connection has MaxOutboundInFlight ops, or maxOutboundBytes,
// in flight.
func (c *conn) takeOutbound(cost int64) bool {
	select {
	case c.outSlots <- struct{}{}:
	default:
		return false
	}
	if c.outBytes.Add(cost) > maxOutboundBytes {
		c.releaseOutbound(cost)
		return false
	}
	return true
}

// releaseOutbound gives back what takeOutbound took.
func (c *conn) releaseOutbound(cost int64) {
	c.outBytes.Add(-cost)
	<-c.outSlots
}

// outboundTarget is the platform an outbound frame addresses, as decided on
// the read loop (which owns the connection's hello list).
type outboundTarget struct {
	name     string // the platform; "" to resolve from the action's chat or kind
	declined bool   // tagged with a platform this connection does not front
	// among are the platforms a resolution may pick (the hello'd ones); nil
	// means every platform (the connection hello'd "relay", or nothing yet).
	among []string
}

// target resolves the platform tag of an outbound frame. A tag the
// connection hello'd (any platform, after a "relay" hello) is the target; any
// other tag is declined. Untagged frames, and frames tagged "relay" (the
// platform a stock gateway learns for a chat whose platform it does not know,
// such as nexscope), are resolved from the action among the hello'd
// platforms: the first hello is only the gateway's default, not the chat's
// platform.
func (c *conn) target(tag string) outboundTarget {
	if tag != "" && tag != contract.PlatformRelay {
		for _, id := range c.identities {
			if id == tag || (id == contract.PlatformRelay && c.srv.platforms[tag] != nil) {
				return outboundTarget{name: tag}
			}
		}
		return outboundTarget{name: tag, declined: true}
	}
	if len(c.identities) == 0 || slices.Contains(c.identities, contract.PlatformRelay) {
		return outboundTarget{}
	}
	if len(c.identities) == 1 {
		return outboundTarget{name: c.identities[0]}
	}
	// identities is only appended to, so this view stays as it is now.
	return outboundTarget{among: c.identities[:len(c.identities):len(c.identities)]}
}

// execute runs an action on its platform, which it records in op (for the
// metrics). The relay checks what is its own: the platform, and that the
// action names its chat or session (before it can resolve a platform from
// them). The op, the chat and the session's capability are the platform's
// to check (platform.Execute).
func (c *conn) execute(ctx context.Context, t outboundTarget, a *contract.Action, op *outboundOp) contract.Result {
	if t.declined {
		return contract.Declined(truncateForLog(t.name))
	}
	if r, missing := a.MissingTarget(); missing {
		return r
	}
	// The creation of the tenant the connection serves, read with whether
	// it still does: SetTenants changes both at once, and closes the
	// connection after.
	c.srv.regMu.RLock()
	created, current := c.hub.created, c.srv.gateways[c.gw.id] == c.gw
	c.srv.regMu.RUnlock()
	if !current {
		return contract.Declined(truncateForLog(cmp.Or(t.name, contract.PlatformRelay)))
	}
	ctx = platform.WithCreation(ctx, created) // as dispatched: Execute compares it
	name := t.name
	if name == "" {
		var err error
		if name, ctx, err = c.resolvePlatform(ctx, a, t.among); err != nil {
			if errors.Is(err, platform.ErrUnavailable) {
				c.logs.Log(c.log, slog.LevelWarn, "chat tenant lookup failed", "platform", contract.PlatformRelay, "err", err)
				return platform.OwnerUnknown(contract.PlatformRelay, err)
			}
			return contract.Declined(contract.PlatformRelay)
		}
	}
	p := c.srv.platforms[name]
	if p == nil {
		return contract.Declined(name)
	}
	op.platform.Store(&name)
	r := p.Execute(ctx, c.hub.id, a)
	if !contract.AddressesChat(a.Op) {
		return r
	}
	// The chat's profile is noted unless the platform refused the action or
	// could not tell whose the chat is (unavailable; after a transport
	// failure the retry notes it): only the tenant's own chats are noted.
	switch r.Code {
	case contract.CodeUnsupportedOp, contract.CodeBadRequest, contract.CodeEgressDeclined, contract.CodeUnavailable:
	default:
		c.hub.noteProfile(op.drops, name, string(a.ChatID), a.Metadata.Profile)
	}
	return r
}

// resolvePlatform finds the platform of an action whose frame names none
// (or names "relay"), among the platforms in among (nil: all): the prefix of
// a follow_up's kind, the platform the chat's inbound came from, or the
// first platform, in configured order, where this tenant may act in the
// chat (platform.Locate, whose answer the returned ctx carries to that
// platform's Execute, so the chat is not looked up twice). It fails with
// platform.ErrUnknownChat, or with an error wrapping platform.ErrUnavailable
// when no platform placed the chat and one of them could not be asked.
func (c *conn) resolvePlatform(ctx context.Context, a *contract.Action, among []string) (string, context.Context, error) {
	allowed := func(name string) bool {
		return c.srv.platforms[name] != nil && (among == nil || slices.Contains(among, name))
	}
	if !contract.AddressesChat(a.Op) {
		name, _, _ := strings.Cut(a.Kind, ".")
		if !allowed(name) {
			return "", ctx, platform.ErrUnknownChat
		}
		return name, ctx, nil
	}
	chatID := string(a.ChatID)
	if name, ok := c.hub.chatPlatform(chatID); ok && allowed(name) {
		return name, ctx, nil
	}
	candidates := make([]platform.Platform, 0, len(c.srv.order))
	for _, name := range c.srv.order {
		if allowed(name) {
			candidates = append(candidates, c.srv.platforms[name])
		}
	}
	p, ctx, err := platform.Locate(ctx, candidates, c.hub.id, chatID)
	if err != nil {
		return "", ctx, err
	}
	return p.Name(), ctx, nil
}

// answer enqueues the outbound_result for reqID, unless c was revoked, and
// records the op under platformName (a configured platform or noPlatform).
func (c *conn) answer(reqID, platformName, op string, r contract.Result, start time.Time) {
	code := "ok"
	switch {
	case !r.Success:
		code = cmp.Or(r.Code, contract.CodePlatformError)
	case r.Error != "":
		code = "partial" // a message sent in part (platform.SendParts)
	}
	var took time.Duration
	if !start.IsZero() {
		took = c.srv.cfg.Clock.Now().Sub(start)
	}
	if !slices.Contains(contract.Ops, op) {
		op = "unknown" // gateway-chosen strings never become metric labels
	}
	c.srv.cfg.Metrics.Outbound(platformName, op, code, took)
	if c.unrevoked.Err() == nil { // a revoked gateway is told nothing more, not even how its ops ended
		c.enqueue(contract.AppendOutboundResult(nil, reqID, r))
	}
}

// truncateForLog bounds a gateway-supplied string before it is logged or
// echoed in an error.
func truncateForLog(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return textsplit.Truncate(s, limit) + "…"
}
