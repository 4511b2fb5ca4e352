package contract

import (
	"errors"
	"strconv"

	"connector/internal/textsplit"
)

// CloseCode is a WebSocket close status (RFC 6455 section 7.4) the
// connector sends; the constants below are those of /relay.
//
// The gateway client interprets only 4401; every other code while it is not
// shutting down is an "unexpected close" and it re-dials with backoff
// (1 s doubling to 30 s), re-sending all hellos, after which buffered inbound
// is replayed. Codes 4000-4999 are ours; reasons are at most
// MaxCloseReasonBytes (a longer one makes coder/websocket send no close frame).
type CloseCode int

const (
	// CloseNormal (1000): orderly close requested by the gateway.
	CloseNormal CloseCode = 1000
	// CloseGoingAway (1001): the connector is shutting down; the gateway
	// reconnects, possibly to another connector instance.
	CloseGoingAway CloseCode = 1001
	// CloseMessageTooBig (1009): a gateway frame exceeded MaxFrameBytes.
	CloseMessageTooBig CloseCode = 1009
	// ClosePingTimeout (1011): the gateway did not answer a WebSocket ping
	// within the relay's ping interval.
	ClosePingTimeout CloseCode = 1011

	// CloseUnauthorized (4401): upgrade token missing, malformed, unknown,
	// wrong, expiring too far ahead (ErrTokenLifetime, reason "unauthorized")
	// or expired. Reason "expired" means a valid but stale token: the
	// gateway reconnects normally. Any other reason after the gateway once had
	// a descriptor makes it re-dial once and then latch "revoked" (no more
	// dials) if refused again, so it is only sent when a token really fails.
	CloseUnauthorized CloseCode = 4401
	// CloseUnsupportedPlatform (4404): a hello named a platform this connector
	// does not front. Only that is checked (relay handleHello): a hello
	// naming a fronted platform is answered with its descriptor whether or
	// not the tenant has any route on it. Sent instead of leaving the
	// gateway to time out its 30 s handshake.
	CloseUnsupportedPlatform CloseCode = 4404
	// CloseSlowConsumer (4408): the gateway did not read fast enough: its
	// bounded send queue overflowed or a write to it timed out. Undelivered
	// inbound stays buffered and is replayed after the gateway reconnects.
	CloseSlowConsumer CloseCode = 4408
	// CloseReplaced (4409): too many concurrent connections for one gateway id;
	// the oldest is closed.
	CloseReplaced CloseCode = 4409
)

// Close reasons paired with CloseUnauthorized.
const (
	ReasonUnauthorized = "unauthorized"
	ReasonExpired      = "expired"
	ReasonRevoked      = "revoked"
)

// Close is how a server ends a WebSocket connection: the close status and
// the reason sent with it. The /relay server and nexscope predefine one
// value per cause, each with one documented meaning; package
// internal/wsconn sends them. A Close is an error, so code that decides a
// connection must end can return the Close it ends with.
type Close struct {
	Code   CloseCode
	Reason string
}

// Error implements error: "close 4009 name_taken".
func (c Close) Error() string {
	s := "close " + strconv.Itoa(int(c.Code))
	if c.Reason != "" {
		s += " " + c.Reason
	}
	return s
}

// The closes the connector sends on /relay, one value per cause (a 4404
// names its platform: UnsupportedPlatform).
var (
	// EndUnauthorized: the upgrade token failed.
	EndUnauthorized = Close{Code: CloseUnauthorized, Reason: ReasonUnauthorized}
	// EndExpired: the upgrade token was valid but stale.
	EndExpired = Close{Code: CloseUnauthorized, Reason: ReasonExpired}
	// EndRevoked: the gateway's tenant or secret was removed while it was
	// connected.
	EndRevoked = Close{Code: CloseUnauthorized, Reason: ReasonRevoked}
	// EndShutdown: the connector is shutting down.
	EndShutdown = Close{Code: CloseGoingAway, Reason: "connector shutting down"}
	// EndPingTimeout: the gateway did not answer a ping in time.
	EndPingTimeout = Close{Code: ClosePingTimeout, Reason: "ping timeout"}
	// EndTooSlow: the gateway's send queue overflowed or a write to it
	// timed out.
	EndTooSlow = Close{Code: CloseSlowConsumer, Reason: "gateway too slow"}
	// EndTooManyConns: a newer connection of the same gateway id took the
	// place of this one, or of a newcomer beyond the limit.
	EndTooManyConns = Close{Code: CloseReplaced, Reason: "too many connections for this gateway id"}
)

// Refusal is the close refusing a token that failed with err: EndExpired
// for a valid but stale one (ErrTokenExpired), else EndUnauthorized.
func Refusal(err error) Close {
	if errors.Is(err, ErrTokenExpired) {
		return EndExpired
	}
	return EndUnauthorized
}

// UnsupportedPlatform is the close of a hello whose platform this connector
// does not front; reason names it, cut to MaxCloseReasonBytes on a UTF-8
// boundary.
func UnsupportedPlatform(reason string) Close {
	return Close{Code: CloseUnsupportedPlatform, Reason: textsplit.Truncate(reason, MaxCloseReasonBytes)}
}

// MaxCloseReasonBytes is the longest close reason that still fits a close frame.
const MaxCloseReasonBytes = 123
