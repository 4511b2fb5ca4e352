package relay_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/connlimit"
	"connector/relay"
	"connector/relay/relaytest"
)

// limitedRelay serves a relay behind a connlimit.Listener, as the
// connector's public listener does, and returns its address.
func limitedRelay(t *testing.T, cfg relay.Config, lim connlimit.Config) string {
	t.Helper()
	srv, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := connlimit.New(inner, lim)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv, ConnState: l.ConnState, ConnContext: l.ConnContext}
	served := make(chan struct{})
	go func() { _ = hs.Serve(l); close(served) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("relay shutdown: %v", err)
		}
		_ = hs.Close()
		<-served
	})
	return l.Addr().String()
}

// upgrade is one raw WebSocket upgrade request to /relay that, once sent,
// never answers anything: what a flood sends.
type upgrade struct {
	net.Conn
	r *bufio.Reader
}

// rawUpgrade dials addr from the loopback address ip and sends an upgrade
// with the given Authorization header value (none when auth is ""). It
// returns the answer's status code, or 0 when the connector closed the
// connection without answering.
func rawUpgrade(t *testing.T, addr, ip, auth string) (int, *upgrade) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(relaytest.Timeout))
	req := "GET /relay HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	if auth != "" {
		req += "Authorization: " + auth + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	u := &upgrade{Conn: c, r: bufio.NewReader(c)}
	resp, err := http.ReadResponse(u.r, nil)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("timed out after %v waiting for the upgrade's answer", relaytest.Timeout)
		}
		return 0, u
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp.StatusCode, u
}

// closeFrame reads the connector's close frame and returns its code and
// reason.
func (u *upgrade) closeFrame(t *testing.T) (int, string) {
	t.Helper()
	var head [2]byte
	if _, err := io.ReadFull(u.r, head[:]); err != nil {
		t.Fatalf("reading the close frame: %v", err)
	}
	if head[0] != 0x88 || head[1] < 2 || head[1] > 125 {
		t.Fatalf("frame header %x, want a close frame", head)
	}
	payload := make([]byte, head[1])
	if _, err := io.ReadFull(u.r, payload); err != nil {
		t.Fatalf("reading the close frame: %v", err)
	}
	return int(binary.BigEndian.Uint16(payload)), string(payload[2:])
}

// closedByServer waits until the connector closes the socket.
func (u *upgrade) closedByServer(t *testing.T, what string) {
	t.Helper()
	_, err := u.r.ReadByte()
	if err == nil {
		t.Fatalf("%s: the connector sent more than its close frame", what)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("timed out after %v waiting for the connector to close %s", relaytest.Timeout, what)
	}
}

// TestRefusedUpgradesCountAgainstTheirSource is issue 22's upgrade flood in
// small: upgrades with a bad token from one address that never answer the
// connector's close. Each counts against the address's share of the
// unauthenticated connections from its accept until its socket is closed,
// and that socket ends RefusalLinger after its 4401 on the relay's clock,
// not after the close handshake's timeout. So a fifth upgrade while four
// refused sockets are held is closed at accept, another address's gateway
// connects meanwhile, and once the clock passes the linger the sockets are
// gone and the address's share is free again. Before, every upgrade was
// upgraded, left the count at its upgrade and held its socket for the close
// timeout (here a minute), so one address could hold any number.
func TestRefusedUpgradesCountAgainstTheirSource(t *testing.T) {
	clk := clocktest.New(time.Now())
	g := newConnGauge()
	addr := limitedRelay(t, relay.Config{
		Tenants:      []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Clock:        clk,
		CloseTimeout: time.Minute,
		Metrics:      g,
		Log:          relaytest.TestLogger(t),
	}, connlimit.Config{Max: 64, MaxPerSource: 4})
	bad := "Bearer " + contract.MintToken("gw1", "not-the-secret", clk.Now().Unix()+300)

	var held []*upgrade
	for i := range 4 {
		status, u := rawUpgrade(t, addr, "127.0.0.2", bad)
		if status != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade %d answered %d, want 101 and close 4401", i+1, status)
		}
		if code, reason := u.closeFrame(t); code != int(contract.CloseUnauthorized) || reason != contract.ReasonUnauthorized {
			t.Fatalf("upgrade %d closed %d %q, want 4401 %q", i+1, code, reason, contract.ReasonUnauthorized)
		}
		held = append(held, u)
	}
	for i := range 6 {
		if status, _ := rawUpgrade(t, addr, "127.0.0.2", bad); status != 0 {
			t.Fatalf("upgrade %d of an address holding 4 refused sockets answered %d, want its connection closed at accept", 5+i, status)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	gw, err := relaytest.Dial(ctx, "ws://"+addr+"/relay", relaytest.Token("gw1", "s1", clk.Now()))
	if err != nil {
		t.Fatalf("a gateway of another address: %v", err)
	}
	defer gw.CloseNow()
	if _, err := gw.Hello(ctx, "relay", ""); err != nil {
		t.Fatalf("a gateway of another address: hello: %v", err)
	}

	clk.Advance(relay.RefusalLinger)
	for i, u := range held {
		u.closedByServer(t, fmt.Sprintf("refused upgrade %d", i+1))
	}
	status, u := rawUpgrade(t, addr, "127.0.0.2", bad)
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("an upgrade once the refused sockets closed answered %d, want 101 and close 4401", status)
	}
	u.closeFrame(t)
	if n := g.refusals(contract.ReasonUnauthorized); n != 5 {
		t.Fatalf("%d refusals counted, want 5 (the upgrades closed at accept never reached the relay)", n)
	}
}

// TestAuthenticatedGatewaysLeaveTheSourceCount: gateways whose token checks
// out stop counting against their address's share, so more gateways than
// the share connect from one address (a NAT, a host running several).
func TestAuthenticatedGatewaysLeaveTheSourceCount(t *testing.T) {
	addr := limitedRelay(t, relay.Config{
		Tenants: []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Log:     relaytest.TestLogger(t),
	}, connlimit.Config{Max: 64, MaxPerSource: 2})
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	for i := range 5 {
		gw, err := relaytest.Dial(ctx, "ws://"+addr+"/relay", relaytest.Token("gw1", "s1", time.Now()))
		if err != nil {
			t.Fatalf("gateway %d: %v", i+1, err)
		}
		defer gw.CloseNow()
		if _, err := gw.Hello(ctx, "relay", ""); err != nil {
			t.Fatalf("gateway %d: hello: %v", i+1, err)
		}
	}
}

// TestUpgradeWithoutAuthorizationIsAnswered401: an upgrade with no
// Authorization header at all is answered 401 over plain HTTP, with no
// upgrade and no socket held; one whose header is there but empty or bad
// keeps the contract's 4401 after the upgrade.
func TestUpgradeWithoutAuthorizationIsAnswered401(t *testing.T) {
	g := newConnGauge()
	addr := limitedRelay(t, relay.Config{
		Tenants: []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Metrics: g,
		Log:     relaytest.TestLogger(t),
	}, connlimit.Config{Max: 64})
	status, u := rawUpgrade(t, addr, "127.0.0.1", "")
	if status != http.StatusUnauthorized {
		t.Fatalf("an upgrade without Authorization answered %d, want 401", status)
	}
	u.closedByServer(t, "the connection of a 401")
	if n := g.refusals("no_credentials"); n != 1 {
		t.Fatalf("%d no_credentials refusals counted, want 1", n)
	}
	for _, auth := range []string{" ", "Bearer", "Basic Zm9vOmJhcg=="} {
		status, u := rawUpgrade(t, addr, "127.0.0.1", auth)
		if status != http.StatusSwitchingProtocols {
			t.Fatalf("Authorization %q answered %d, want 101 and close 4401", auth, status)
		}
		if code, _ := u.closeFrame(t); code != int(contract.CloseUnauthorized) {
			t.Fatalf("Authorization %q closed %d, want 4401", auth, code)
		}
	}
}
