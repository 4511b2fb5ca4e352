package relaytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
)

// Transport plays the stock gateway transport's connection lifecycle as far
// as refusals go (ws_transport.py; ../shared/docs/hermes-wire.md §2.4 and
// §8.2): it dials with a freshly minted token and says hello (Connect), and
// judges how each connection or dial ended (Closed, DialFailed) the way the
// stock transport does:
//
//   - close 4401 with reason "expired", at any time: an ordinary reconnect;
//   - close 4401 with another reason on a connection, once the transport
//     has ever received a descriptor: provisional, one immediate re-dial
//     with a fresh token;
//   - close 4401 with another reason answering that re-dial, at its upgrade
//     or after its descriptor: revoked, latched (no more dials);
//   - anything else (a 4401 before any descriptor, another close code, an
//     HTTP error status such as 401 on the upgrade, a network failure): an
//     ordinary reconnect with backoff. A re-dial that failed this way leaves
//     the fresh-token retry pending for the next dial.
//
// The backoff itself is not played: the test dials again when it wants.
type Transport struct {
	// URL is the connector's /relay WebSocket address.
	URL string
	// GatewayID and Secret sign each dial's token; with either empty the
	// dial carries no Authorization header, as the stock gateway's does.
	GatewayID, Secret string
	// Platform is the one hello's platform.
	Platform string

	handshook    bool    // a descriptor was ever received
	retryPending bool    // a provisional 4401 earned a fresh-token re-dial
	retryConn    *Client // the connection that re-dial opened
	revoked      bool
}

// Step is what the stock transport does next.
type Step int

const (
	// Reconnect: the backoff supervisor dials again later.
	Reconnect Step = iota
	// RedialNow: one immediate re-dial with a fresh token.
	RedialNow
	// Revoked: the transport latched "revoked" and never dials again.
	Revoked
)

func (s Step) String() string {
	switch s {
	case Reconnect:
		return "reconnect with backoff"
	case RedialNow:
		return "re-dial at once with a fresh token"
	case Revoked:
		return "revoked (latched)"
	}
	return fmt.Sprintf("Step(%d)", int(s))
}

// DialError is how a dial ended before its descriptor arrived: the close
// code and reason the connector sent after the upgrade, or the HTTP status
// that answered the upgrade instead (Code -1), or neither (a network
// failure: Code -1, Status 0).
type DialError struct {
	Code   websocket.StatusCode
	Reason string
	Status int
	Err    error
	retry  bool // the dial was the fresh-token re-dial
}

func (e *DialError) Error() string {
	switch {
	case e.Code >= 0:
		return fmt.Sprintf("relaytest: dial refused with close %d %q", e.Code, e.Reason)
	case e.Status != 0:
		return fmt.Sprintf("relaytest: upgrade answered HTTP %d", e.Status)
	}
	return fmt.Sprintf("relaytest: dial failed: %v", e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// Revoked reports whether the transport latched "revoked".
func (t *Transport) Revoked() bool { return t.revoked }

// Connect dials once with a fresh token and says hello, and returns the
// connection once its descriptor arrived; otherwise a *DialError, which
// DialFailed judges. It refuses to dial once the transport is revoked.
func (t *Transport) Connect(ctx context.Context) (*Client, error) {
	if t.revoked {
		return nil, errors.New("relaytest: the transport is revoked and dials no more")
	}
	token := ""
	if t.GatewayID != "" && t.Secret != "" {
		token = Token(t.GatewayID, t.Secret, time.Now())
	}
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := websocket.Dial(ctx, t.URL, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		de := &DialError{Code: -1, Err: err}
		if resp != nil {
			de.Status = resp.StatusCode
		}
		return nil, de
	}
	c := newClient(ws)
	retry := t.retryPending
	if retry {
		// The upgrade was accepted: this connection's token reaches an
		// outcome, so it is the fresh-token retry.
		t.retryConn, t.retryPending = c, false
	}
	if _, err := c.Hello(ctx, t.Platform, ""); err != nil {
		code, reason, cerr := c.Closed(ctx)
		_ = c.CloseNow()
		if retry {
			t.retryConn = nil
		}
		if cerr != nil {
			return nil, &DialError{Code: -1, Err: err, retry: retry}
		}
		return nil, &DialError{Code: code, Reason: reason, Err: err, retry: retry}
	}
	t.handshook = true
	return c, nil
}

// DialFailed judges a Connect that failed with err.
func (t *Transport) DialFailed(err error) Step {
	var de *DialError
	if !errors.As(err, &de) || de.Code != websocket.StatusCode(contract.CloseUnauthorized) {
		return Reconnect // not an auth outcome: a pending retry stays pending
	}
	if de.retry && de.Reason != contract.ReasonExpired {
		// The fresh token's dial was refused at its upgrade.
		t.revoked = true
		return Revoked
	}
	return Reconnect // expired, or a 4401 before any descriptor: a cold-start race
}

// Closed waits until c, a connection Connect returned, closes, and judges
// how.
func (t *Transport) Closed(ctx context.Context, c *Client) (Step, error) {
	code, reason, err := c.Closed(ctx)
	if err != nil {
		return Reconnect, err
	}
	retry := c == t.retryConn
	if retry {
		t.retryConn = nil
	}
	switch {
	case code != websocket.StatusCode(contract.CloseUnauthorized) || !t.handshook || reason == contract.ReasonExpired:
		return Reconnect, nil
	case retry:
		t.revoked = true
		return Revoked, nil
	default:
		t.retryPending = true
		return RedialNow, nil
	}
}
