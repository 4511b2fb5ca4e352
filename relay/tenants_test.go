package relay_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/store"
)

// TestSetTenantsLive adds a tenant and gateway, rotates a secret and
// removes a gateway on a running relay: the new gateway connects and
// receives its tenant's inbound, a rotated secret is accepted while the
// untouched gateway's socket stays open, and a removed gateway's socket is
// closed 4401 "revoked" and its next upgrade refused 4401.
func TestSetTenantsLive(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1", "c3": "t3"})
	base := relay.Tenant{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}
	h := relaytest.Start(t, []relay.Tenant{base}, p)
	keep := h.Dial(t, "gw1", "s1")
	keep.Hello(t, "discord", "app")

	added := relay.Tenant{ID: "t3", Gateways: []relay.Gateway{{ID: "gw3", Secrets: []string{"s3"}}}}
	if err := h.Server.SetTenants([]relay.Tenant{base, added}); err != nil {
		t.Fatalf("SetTenants: %v", err)
	}
	gw3 := h.Dial(t, "gw3", "s3")
	gw3.Hello(t, "discord", "app")
	p.deliver("t3", "c3", "u1", "hello t3")
	if ev, _ := gw3.NextInbound(t); ev.Text != "hello t3" {
		t.Fatalf("gw3 inbound %q, want %q", ev.Text, "hello t3")
	}

	// Rotate gw3: both secrets, then the new one only.
	added.Gateways[0].Secrets = []string{"s3-new", "s3"}
	if err := h.Server.SetTenants([]relay.Tenant{base, added}); err != nil {
		t.Fatalf("SetTenants: %v", err)
	}
	h.Dial(t, "gw3", "s3-new").Hello(t, "discord", "app")
	h.Dial(t, "gw3", "s3").Hello(t, "discord", "app")
	added.Gateways[0].Secrets = []string{"s3-new"}
	if err := h.Server.SetTenants([]relay.Tenant{base, added}); err != nil {
		t.Fatalf("SetTenants: %v", err)
	}
	if code, reason := h.Dial(t, "gw3", "s3").Closed(t); code != int(contract.CloseUnauthorized) || reason != contract.ReasonUnauthorized {
		t.Fatalf("old secret after the grace: closed %d %q, want 4401 unauthorized", code, reason)
	}

	// Remove gw3: its open sockets close 4401 revoked, the next is refused.
	if err := h.Server.SetTenants([]relay.Tenant{base}); err != nil {
		t.Fatalf("SetTenants: %v", err)
	}
	if code, reason := gw3.Closed(t); code != int(contract.CloseUnauthorized) || reason != relay.ReasonRevoked {
		t.Fatalf("removed gateway's socket closed %d %q, want 4401 %q", code, reason, relay.ReasonRevoked)
	}
	if code, _ := h.Dial(t, "gw3", "s3-new").Closed(t); code != int(contract.CloseUnauthorized) {
		t.Fatalf("removed gateway's upgrade closed %d, want 4401", code)
	}

	// The untouched gateway kept its socket through every change.
	p.deliver("t1", "c1", "u1", "still here")
	if ev, _ := keep.NextInbound(t); ev.Text != "still here" {
		t.Fatalf("gw1 inbound %q, want %q", ev.Text, "still here")
	}
}

// TestSetTenantsRefusesInvalid leaves the tables as they were.
func TestSetTenantsRefusesInvalid(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	h := relaytest.Start(t, []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}, p)
	for name, tenants := range map[string][]relay.Tenant{
		"duplicate gateway": {{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"a"}}}}, {ID: "t2", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"b"}}}}},
		"no secrets":        {{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1"}}}},
		"empty tenant id":   {{ID: ""}},
	} {
		if err := h.Server.SetTenants(tenants); err == nil {
			t.Errorf("%s: SetTenants accepted it", name)
		}
	}
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "app")
}

// TestStockClientLatchesRevokedAfterAHandshake plays the stock gateway
// transport (relaytest.Transport, hermes-wire.md §8.2) against the relay's
// refusals: a 4401 before any descriptor is an ordinary failed dial; once
// the gateway had a descriptor, its removal closes it 4401 "revoked", it
// re-dials at once with a fresh token, that upgrade is refused 4401 (the
// refusal's close frame arrives although the connector no longer waits out
// the close handshake) and the transport latches "revoked". A gateway
// configured without a secret sends no Authorization header, is answered
// HTTP 401 and only ever retries, as it did with a 4401 before a
// descriptor.
func TestStockClientLatchesRevokedAfterAHandshake(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	base := relay.Tenant{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}
	h := relaytest.Start(t, []relay.Tenant{base}, p)
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()

	early := &relaytest.Transport{URL: h.RelayURL(), GatewayID: "gw2", Secret: "s2", Platform: "discord"}
	_, err := early.Connect(ctx)
	if step := early.DialFailed(err); step != relaytest.Reconnect || early.Revoked() {
		t.Fatalf("4401 before any descriptor (%v): %v, want %v", err, step, relaytest.Reconnect)
	}

	tr := &relaytest.Transport{URL: h.RelayURL(), GatewayID: "gw1", Secret: "s1", Platform: "discord"}
	c, err := tr.Connect(ctx)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if err := h.Server.SetTenants([]relay.Tenant{{ID: "t1"}}); err != nil {
		t.Fatalf("SetTenants: %v", err)
	}
	step, err := tr.Closed(ctx, c)
	if err != nil || step != relaytest.RedialNow {
		t.Fatalf("revoked after a handshake: %v %v, want %v", step, err, relaytest.RedialNow)
	}
	_, err = tr.Connect(ctx)
	var de *relaytest.DialError
	if !errors.As(err, &de) || de.Code != websocket.StatusCode(contract.CloseUnauthorized) || de.Reason != contract.ReasonUnauthorized {
		t.Fatalf("fresh-token re-dial: %v, want refused 4401 %q", err, contract.ReasonUnauthorized)
	}
	if step := tr.DialFailed(err); step != relaytest.Revoked || !tr.Revoked() {
		t.Fatalf("fresh-token re-dial refused: %v, want %v", step, relaytest.Revoked)
	}

	anonymous := &relaytest.Transport{URL: h.RelayURL(), Platform: "discord"}
	_, err = anonymous.Connect(ctx)
	if !errors.As(err, &de) || de.Status != http.StatusUnauthorized {
		t.Fatalf("dial without a secret: %v, want HTTP 401", err)
	}
	if step := anonymous.DialFailed(err); step != relaytest.Reconnect || anonymous.Revoked() {
		t.Fatalf("HTTP 401: %v, want %v", step, relaytest.Reconnect)
	}
}

// TestRevokedWhileWaitingForAdmission: a connection whose upgrade is under
// way when its gateway is removed (here: waiting for a slot at the
// connection limit while the oldest connection closes) is closed 4401, not
// served: a removed gateway keeps no connection.
func TestRevokedWhileWaitingForAdmission(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	base := relay.Tenant{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:            []relay.Tenant{base},
		Platforms:          []platform.Platform{p},
		MaxConnsPerGateway: 1,
		CloseTimeout:       relaytest.Timeout, // the oldest closes only when the test says so
		Log:                relaytest.TestLogger(t),
	})
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()

	// The oldest: a raw socket that never answers its close frame, so its
	// slot stays held until the test drops it.
	oldest, err := net.Dial("tcp", strings.TrimPrefix(h.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer oldest.Close()
	_ = oldest.SetDeadline(time.Now().Add(relaytest.Timeout))
	fmt.Fprintf(oldest, "GET /relay HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer %s\r\n\r\n",
		relaytest.Token("gw1", "s1", time.Now()))
	br := bufio.NewReader(oldest)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("oldest upgrade: %v %v", resp, err)
	}

	// The newcomer waits for the oldest's slot; its arrival closes the
	// oldest with 4409, whose close frame tells the test it is waiting.
	type dialed struct {
		c   *relaytest.Client
		err error
	}
	newcomer := make(chan dialed, 1)
	go func() {
		c, err := relaytest.Dial(ctx, h.RelayURL(), relaytest.Token("gw1", "s1", time.Now()))
		newcomer <- dialed{c, err}
	}()
	if b, err := br.ReadByte(); err != nil || b != 0x88 {
		t.Fatalf("oldest: read %#x %v, want the first byte of a close frame", b, err)
	}

	if err := h.Server.SetTenants([]relay.Tenant{{ID: "t1"}}); err != nil {
		t.Fatalf("SetTenants: %v", err)
	}
	_ = oldest.Close() // its slot goes to the newcomer

	var d dialed
	select {
	case d = <-newcomer:
	case <-ctx.Done():
		t.Fatal("timed out waiting for the newcomer's upgrade")
	}
	if d.err != nil {
		t.Fatalf("newcomer's upgrade: %v", d.err)
	}
	defer d.c.CloseNow()
	if err := d.c.Send(ctx, map[string]string{"type": "hello", "platform": "discord", "botId": ""}); err != nil {
		t.Logf("hello not sent: %v", err) // the relay may have closed it already
	}
	code, reason, err := d.c.Closed(ctx)
	if err != nil || code != websocket.StatusCode(contract.CloseUnauthorized) {
		t.Fatalf("the removed gateway's newcomer: closed %d %q (%v), want 4401", code, reason, err)
	}
}

// maskedText is a client's WebSocket text frame carrying payload (under
// 64 KiB), masked with a zero key.
func maskedText(payload string) []byte {
	b := []byte{0x81}
	if n := len(payload); n < 126 {
		b = append(b, 0x80|byte(n))
	} else {
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	}
	return append(append(b, 0, 0, 0, 0), payload...)
}

// TestRevokedGatewaysLaterFramesAreNotActedOn: once a gateway is removed,
// the outbound it sends while its socket closes (a gateway that never
// answers the close frame holds it open for CloseTimeout) is not executed.
func TestRevokedGatewaysLaterFramesAreNotActedOn(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	base := relay.Tenant{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:      []relay.Tenant{base},
		Platforms:    []platform.Platform{p},
		CloseTimeout: 500 * time.Millisecond,
		Log:          relaytest.TestLogger(t),
	})
	sock, err := net.Dial("tcp", strings.TrimPrefix(h.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	_ = sock.SetDeadline(time.Now().Add(relaytest.Timeout))
	fmt.Fprintf(sock, "GET /relay HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer %s\r\n\r\n",
		relaytest.Token("gw1", "s1", time.Now()))
	br := bufio.NewReader(sock)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if _, err := sock.Write(maskedText(`{"type": "hello", "platform": "discord", "botId": ""}` + "\n")); err != nil {
		t.Fatal(err)
	}
	// The descriptor answers the hello: the connection is served.
	if _, err := br.ReadString('}'); err != nil {
		t.Fatal(err)
	}

	if err := h.Server.SetTenants([]relay.Tenant{{ID: "t1"}}); err != nil {
		t.Fatalf("SetTenants: %v", err)
	}
	if _, err := sock.Write(maskedText(`{"type": "outbound", "requestId": "r1", "action": {"op": "send", "chat_id": "c1", "content": "after revocation"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil { // until the relay closes the socket
		t.Fatal(err)
	}
	if err := h.Server.Shutdown(context.Background()); err != nil { // every op started has ended
		t.Fatal(err)
	}
	select {
	case e := <-p.egress:
		t.Fatalf("the revoked gateway's outbound was executed: %+v", e)
	default:
	}
}

// An outbound op cancelled by its connection's revocation is not answered:
// the revoked gateway gets the 4401 and nothing before it. revoke ran
// before the send queue was closed, so the op, noticing the cancellation
// in between, queued "unavailable: no answer before the deadline", not
// flagged ambiguous though the platform may have acted, and the close
// flushed it ahead of the 4401. The test opens that window wide: it
// revokes, waits for the op to end, then closes.
func TestOutboundCancelledByARevocationIsNotAnswered(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	m := outboundDone{done: make(chan string, 10)}
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:   []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t), Metrics: m,
	})
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	release := p.slowChat("c1")
	defer release()
	gw.Send(t, map[string]any{"type": "outbound", "requestId": "r1", "platform": "discord", "action": sendAction("c1", "hi")})
	if chat := p.nextEntered(t); chat != "c1" {
		t.Fatalf("the platform started an action on %q, want c1", chat)
	}

	relay.RevokeConns(h.Server)
	select {
	case <-m.done:
	case <-time.After(relaytest.Timeout):
		t.Fatalf("timed out after %v waiting for the revoked connection's op to end", relaytest.Timeout)
	}
	relay.CloseConns(h.Server, contract.EndRevoked)
	if code, reason := gw.Closed(t); code != int(contract.CloseUnauthorized) || reason != relay.ReasonRevoked {
		t.Fatalf("revoked socket closed %d %q, want 4401 %q", code, reason, relay.ReasonRevoked)
	}
	if f, err := gw.Client.Next(context.Background(), contract.TypeOutboundResult); err == nil {
		t.Fatalf("the revoked gateway was answered before the 4401: %s", f.Raw)
	}
}

// TestTenantAddedWhileRunningGetsItsStoredInbound: a tenant the store holds
// inbound for, left out of the configuration at the last start, gets that
// inbound once SetTenants adds it back, without waiting for a restart.
func TestTenantAddedWhileRunningGetsItsStoredInbound(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	tenant := relay.Tenant{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}

	// The first process stores an inbound nobody acknowledges.
	first, err := relay.New(relay.Config{Tenants: []relay.Tenant{tenant}, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ev := &contract.Event{Text: "kept", MessageID: "m1"}
	ev.Source.Platform, ev.Source.ChatID, ev.Source.ChatType = "discord", "c1", "group"
	if err := first.Deliver(context.Background(), platform.Delivery{Kind: platform.KindInbound, Tenant: "t1", Platform: "discord", ChatID: "c1", Event: ev}); err != nil {
		t.Fatal(err)
	}
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The next one starts without the tenant, which is then added back.
	p := newFake("discord", map[string]string{"c1": "t1"})
	h := relaytest.StartConfig(t, relay.Config{Platforms: []platform.Platform{p}, Store: st, Log: relaytest.TestLogger(t)})
	if err := h.Server.SetTenants([]relay.Tenant{tenant}); err != nil {
		t.Fatalf("SetTenants: %v", err)
	}
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	if got, _ := gw.NextInbound(t); got.Text != "kept" {
		t.Fatalf("inbound %q, want the stored %q", got.Text, "kept")
	}
}

// TestRemovedSecretClosesItsSockets: a secret that leaves a gateway's
// rotation list (a leak answered with a rotation without grace, say) ends
// the sockets that authenticated with it, 4401 "revoked", as their next
// upgrade would be refused; sockets on a secret that stays are not touched.
func TestRemovedSecretClosesItsSockets(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	tenant := func(secrets ...string) []relay.Tenant {
		return []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: secrets}}}}
	}
	h := relaytest.Start(t, tenant("old"), p)
	leaked := h.Dial(t, "gw1", "old")
	leaked.Hello(t, "discord", "")
	if err := h.Server.SetTenants(tenant("new", "old")); err != nil {
		t.Fatalf("SetTenants: %v", err)
	}
	kept := h.Dial(t, "gw1", "new")
	kept.Hello(t, "discord", "")

	if err := h.Server.SetTenants(tenant("new")); err != nil {
		t.Fatalf("SetTenants: %v", err)
	}
	if code, reason := leaked.Closed(t); code != int(contract.CloseUnauthorized) || reason != relay.ReasonRevoked {
		t.Fatalf("the removed secret's socket closed %d %q, want 4401 %q", code, reason, relay.ReasonRevoked)
	}
	p.deliver("t1", "c1", "u1", "still here")
	if ev, _ := kept.NextInbound(t); ev.Text != "still here" {
		t.Fatalf("the kept secret's socket got %q", ev.Text)
	}
}

// TestTenantMadeAgainInheritsNoInbound: tenant t1 (created through the
// registry: relay.Tenant.Created) has inbound in flight on its gateway
// and buffered; it is deleted, then created again under its id with a
// gateway of the same id (new secret). The new tenant's gateway receives
// only the new tenant's inbound, none of the earlier tenant's. Then t1 is
// made again while the new gateway is connected, holding an entry: its
// socket is closed 4401 "revoked", and the next tenant's gateway gets
// none of what it held.
func TestTenantMadeAgainInheritsNoInbound(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	now := time.Now()
	tenant := func(created time.Time, secret string) relay.Tenant {
		return relay.Tenant{ID: "t1", Created: created, Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secret}}}}
	}
	h := relaytest.Start(t, []relay.Tenant{tenant(now.Add(-4*time.Hour), "s1")}, p)
	old := h.Dial(t, "gw1", "s1")
	old.Hello(t, "discord", "app")
	p.deliverAt("t1", "c1", "u1", "in flight", now.Add(-3*time.Hour))
	if ev, _ := old.NextInbound(t); ev.Text != "in flight" {
		t.Fatalf("earlier t1's gateway got %q, want %q", ev.Text, "in flight")
	}
	p.deliverAt("t1", "c1", "u2", "buffered", now.Add(-3*time.Hour))

	if err := h.Server.SetTenants(nil); err != nil { // deleted
		t.Fatal(err)
	}
	if code, reason := old.Closed(t); code != int(contract.CloseUnauthorized) || reason != relay.ReasonRevoked {
		t.Fatalf("deleted tenant's socket closed %d %q, want 4401 %q", code, reason, relay.ReasonRevoked)
	}
	if err := h.Server.SetTenants([]relay.Tenant{tenant(now.Add(-2*time.Hour), "s2")}); err != nil {
		t.Fatal(err)
	}
	gw := h.Dial(t, "gw1", "s2")
	gw.Hello(t, "discord", "app")
	p.deliverAt("t1", "c1", "u1", "new", now.Add(-time.Hour))
	if ev, _ := gw.NextInbound(t); ev.Text != "new" {
		t.Fatalf("t1 made again: its gateway got %q, want %q (the earlier t1's inbound)", ev.Text, "new")
	}

	// Made again while its gateway is connected and holds "new".
	if err := h.Server.SetTenants([]relay.Tenant{tenant(now.Add(-30*time.Minute), "s3")}); err != nil {
		t.Fatal(err)
	}
	if code, reason := gw.Closed(t); code != int(contract.CloseUnauthorized) || reason != relay.ReasonRevoked {
		t.Fatalf("earlier tenant's socket closed %d %q, want 4401 %q", code, reason, relay.ReasonRevoked)
	}
	next := h.Dial(t, "gw1", "s3")
	next.Hello(t, "discord", "app")
	p.deliver("t1", "c1", "u1", "newest")
	if ev, _ := next.NextInbound(t); ev.Text != "newest" {
		t.Fatalf("t1 made again twice: its gateway got %q, want %q", ev.Text, "newest")
	}
}

// TestDeletedTenantsInboundIsDropped: t1, stored through the registry
// (Created set), has buffered inbound when it is deleted: the inbound
// leaves the store. t2, declared (Created zero), removed from the tenants
// keeps its buffered inbound, which its gateway gets when t2 is back.
func TestDeletedTenantsInboundIsDropped(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1", "c2": "t2"})
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	t1 := relay.Tenant{ID: "t1", Created: time.Now().Add(-time.Hour), Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}
	t2 := relay.Tenant{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}}
	h := relaytest.StartConfig(t, relay.Config{Tenants: []relay.Tenant{t1, t2}, Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t), Store: st})
	p.deliver("t1", "c1", "u1", "t1's")
	p.deliver("t2", "c2", "u1", "t2's")
	if err := h.Server.SetTenants(nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(relaytest.Timeout)
	for {
		recs, err := st.Ledger().Read(context.Background(), "t1", 0, 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the store still holds %d records of the deleted t1", relaytest.Timeout, len(recs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := h.Server.SetTenants([]relay.Tenant{t2}); err != nil {
		t.Fatal(err)
	}
	gw := h.Dial(t, "gw2", "s2")
	gw.Hello(t, "discord", "app")
	if ev, _ := gw.NextInbound(t); ev.Text != "t2's" {
		t.Fatalf("t2 back: its gateway got %q, want %q", ev.Text, "t2's")
	}
}

// TestStoredTenantDeclaredAndBackKeepsItsConnections: t1, stored through
// the registry, is declared in the YAML (Created zero: the same tenant)
// and then stored again with its creation (the declaration dropped, or a
// SIGHUP reload whose Bind failed rolled back): its gateway's socket stays
// open, not closed 4401 "revoked" (which the stock gateway takes as
// terminal), and it keeps getting the tenant's inbound; so too when the
// relay started with the declaration. A creation other than the one it had
// before it was declared still closes it.
func TestStoredTenantDeclaredAndBackKeepsItsConnections(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	created := time.Now().Add(-time.Hour)
	tenant := func(created time.Time) []relay.Tenant {
		return []relay.Tenant{{ID: "t1", Created: created, Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
	}
	h := relaytest.Start(t, tenant(time.Time{}), p) // declared: the stored tenant under it shows later
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "app")
	for _, step := range []time.Time{created, {}, created} { // stored, declared, then stored again
		if err := h.Server.SetTenants(tenant(step)); err != nil {
			t.Fatal(err)
		}
	}
	p.deliver("t1", "c1", "u1", "still t1's")
	if ev, _ := gw.NextInbound(t); ev.Text != "still t1's" {
		t.Fatalf("t1's gateway got %q, want %q", ev.Text, "still t1's")
	}

	// Created again while the YAML declared it: the earlier tenant's socket goes.
	for _, step := range []time.Time{{}, created.Add(30 * time.Minute)} {
		if err := h.Server.SetTenants(tenant(step)); err != nil {
			t.Fatal(err)
		}
	}
	if code, reason := gw.Closed(t); code != int(contract.CloseUnauthorized) || reason != relay.ReasonRevoked {
		t.Fatalf("t1 created again: the earlier t1's socket closed %d %q, want 4401 %q", code, reason, relay.ReasonRevoked)
	}
}

// outboundResults is a relay.Metrics that reports each outbound op's
// result label.
type outboundResults struct {
	relayMetricsNop
	results chan string
}

func (m outboundResults) Outbound(_, _, result string, _ time.Duration) { m.results <- result }

// TestPartialSendCountedPartial: a send that went out in part answers
// the gateway success, and is counted under result partial in
// connector_outbound_ops_total, not ok, so an operator sees it; a whole
// one is ok.
func TestPartialSendCountedPartial(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1", "c2": "t1"})
	p.partial = map[string]bool{"c2": true}
	m := outboundResults{results: make(chan string, 10)}
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:   []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t), Metrics: m,
	})
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	for _, c := range []struct{ chat, result string }{{"c1", "ok"}, {"c2", "partial"}} {
		if r := gw.Outbound(t, "discord", sendAction(c.chat, "hi")); !r.Success || r.MessageID != "m-"+c.chat {
			t.Fatalf("%s: send = %+v", c.chat, r)
		}
		select {
		case got := <-m.results:
			if got != c.result {
				t.Fatalf("%s: counted %q, want %q", c.chat, got, c.result)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no outbound op counted within 10 s", c.chat)
		}
	}
}

// outboundDone is a relay.Metrics that reports each outbound op answered
// (the last thing an op does, after it noted its chat's profile).
type outboundDone struct {
	relayMetricsNop
	done chan string
}

func (m outboundDone) Outbound(_, op, _ string, _ time.Duration) { m.done <- op }

// An outbound op of a tenant's gateway that is still running when the
// tenant is deleted and created again under its id (its connection
// revoked) is cancelled: it does not act in the chat, now the new
// tenant's, nor leave its chat's profile to the new tenant: the new
// tenant's inbound of that chat carries no profile. The op ran on (its
// platform call made as the tenant id, now the new tenant's), and before
// that it noted the profile after the earlier tenant's profiles were
// dropped, and the new tenant's gateway got the earlier tenant's profile
// name on that chat's inbound. Also when the gateway closed its socket
// (ended) before the tenant was made again: the op, its connection gone,
// was not cancelled then either.
func TestOutboundOfAnEarlierTenantLeavesNoProfile(t *testing.T) {
	for _, ended := range []bool{false, true} {
		t.Run(fmt.Sprintf("ended %v", ended), func(t *testing.T) { outboundOfAnEarlierTenant(t, ended) })
	}
}

// outboundOfAnEarlierTenant is TestOutboundOfAnEarlierTenantLeavesNoProfile,
// the op's connection closed by its gateway before the tenant is made
// again (ended).
func outboundOfAnEarlierTenant(t *testing.T, ended bool) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	tenant := func(created time.Time, secret string) []relay.Tenant {
		return []relay.Tenant{{ID: "t1", Created: created, Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secret}}}}}
	}
	now := time.Now()
	m := outboundDone{done: make(chan string, 10)}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenant(now.Add(-2*time.Hour), "s1"), Platforms: []platform.Platform{p},
		Log: relaytest.TestLogger(t), Metrics: m})
	old := h.Dial(t, "gw1", "s1")
	old.Hello(t, "discord", "")
	release := p.slowChat("c1")
	defer release()
	a := sendAction("c1", "hi")
	a["metadata"] = map[string]any{"profile": "earlier"}
	old.Send(t, map[string]any{"type": "outbound", "requestId": "r1", "platform": "discord", "action": a})
	if chat := p.nextEntered(t); chat != "c1" {
		t.Fatalf("the platform started an action on %q, want c1", chat)
	}

	if ended {
		_ = old.CloseNow()
		for deadline := time.Now().Add(relaytest.Timeout); relay.Conns(h.Server) > 0; runtime.Gosched() { // polling: the relay signals nothing
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %v waiting for the relay to end the closed socket's connection", relaytest.Timeout)
			}
		}
	}
	if err := h.Server.SetTenants(tenant(now.Add(-time.Hour), "s2")); err != nil {
		t.Fatal(err)
	}
	if !ended {
		if code, reason := old.Closed(t); code != int(contract.CloseUnauthorized) || reason != relay.ReasonRevoked {
			t.Fatalf("earlier tenant's socket closed %d %q, want 4401 %q", code, reason, relay.ReasonRevoked)
		}
	}
	select {
	case <-m.done:
	case <-time.After(relaytest.Timeout):
		t.Fatalf("timed out after %v waiting for the earlier tenant's op to end", relaytest.Timeout)
	}
	select {
	case e := <-p.egress:
		t.Fatalf("the earlier tenant's op acted after the tenant was made again: %+v", e)
	default:
	}

	gw := h.Dial(t, "gw1", "s2")
	gw.Hello(t, "discord", "")
	p.deliver("t1", "c1", "u1", "new")
	if ev, _ := gw.NextInbound(t); ev.Text != "new" || ev.Source.Profile != "" {
		t.Fatalf("the new tenant got %q with profile %q, want %q with none", ev.Text, ev.Source.Profile, "new")
	}
}

// readHoldingStore is a store whose ledger's reads of tenant hold (of
// every tenant: "*") hang until release is closed (or their context
// ends), each one announced on entered.
type readHoldingStore struct {
	store.Store
	hold    string
	holding atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *readHoldingStore) Ledger() store.Ledger { return readHoldingLedger{s.Store.Ledger(), s} }

type readHoldingLedger struct {
	store.Ledger
	s *readHoldingStore
}

func (l readHoldingLedger) Read(ctx context.Context, tenant string, afterSeq uint64, max int, maxBytes int64) ([]store.Record, error) {
	if (tenant == l.s.hold || l.s.hold == "*") && l.s.holding.Load() {
		l.s.entered <- struct{}{}
		select {
		case <-l.s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return l.Ledger.Read(ctx, tenant, afterSeq, max, maxBytes)
}

// TestTenantMadeAgainConnectsWhileItsStoreReadHangs: on one instance,
// the re-read of the store that follows a tenant's re-creation comes
// after its gateways are added: a store that hangs holds SetTenants, but
// does not refuse the new tenant's gateway. What the platform routed under
// the new creation before the relay applied it reaches the gateway first,
// then what came while the read hung, in the session's order: before, the
// later inbound reached the gateway while the read hung, ahead of the
// earlier one.
func TestTenantMadeAgainConnectsWhileItsStoreReadHangs(t *testing.T) {
	st := &readHoldingStore{Store: store.NewMemory(nil), hold: "t1", entered: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(func() { _ = st.Close() })
	p := newFake("discord", map[string]string{"c1": "t1"})
	now := time.Now()
	again := now.Add(-time.Hour)
	tenant := func(created time.Time, secret string) []relay.Tenant {
		return []relay.Tenant{{ID: "t1", Created: created, Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secret}}}}}
	}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenant(now.Add(-2*time.Hour), "s1"), Platforms: []platform.Platform{p}, Store: st, Log: relaytest.TestLogger(t)})
	p.deliverUnder("t1", again, "c1", "u1", "routed first", now) // kept in the store for the new t1

	var released sync.Once
	release := func() { released.Do(func() { st.holding.Store(false); close(st.release) }) }
	t.Cleanup(release)
	st.holding.Store(true)
	applied := make(chan error, 1)
	go func() { applied <- h.Server.SetTenants(tenant(again, "s2")) }()
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the re-created tenant's store read never began")
	}
	gw := h.Dial(t, "gw1", "s2") // refused 4401 while the gateway is not added
	gw.Hello(t, "discord", "")
	gw.Hello(t, "discord", "") // answered once the first one is served
	p.deliverUnder("t1", again, "c1", "u1", "while the read hangs", now)
	release()
	for _, want := range []string{"routed first", "while the read hangs"} {
		ev, id := gw.NextInbound(t)
		if ev.Text != want {
			t.Fatalf("the new tenant's gateway got %q, want %q (the session's order)", ev.Text, want)
		}
		gw.Ack(t, id)
	}
	select {
	case err := <-applied:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SetTenants did not return once the store read was released")
	}
}

// TestDeliveryToATenantNotAppliedYet: a delivery to a tenant the relay
// has not applied yet (another instance provisioned it and routed a chat
// to it first) has the registry applied (Config.CatchUp) and is kept for
// the tenant, not confirmed and dropped as an unknown tenant's; one whose
// catch-up fails is refused (not confirmed); one whose tenant is still
// unknown after it is dropped.
func TestDeliveryToATenantNotAppliedYet(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1", "c3": "t3"})
	base := relay.Tenant{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}
	added := relay.Tenant{ID: "t3", Gateways: []relay.Gateway{{ID: "gw3", Secrets: []string{"s3"}}}}
	var srv atomic.Pointer[relay.Server]
	var failing atomic.Bool
	var catchUps atomic.Int32
	h := relaytest.StartConfig(t, relay.Config{
		Tenants: []relay.Tenant{base}, Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t),
		CatchUp: func(context.Context) error {
			catchUps.Add(1)
			if failing.Load() {
				return errors.New("registry unreachable")
			}
			return srv.Load().SetTenants([]relay.Tenant{base, added})
		},
	})
	srv.Store(h.Server)
	sink := p.runningSink()
	deliver := func(tenant, text string) error {
		ev := &contract.Event{Text: text, MessageID: "msg-" + text}
		ev.Source.Platform, ev.Source.ChatID, ev.Source.ChatType = "discord", "c3", "group"
		return sink.Deliver(context.Background(), platform.Delivery{
			Kind: platform.KindInbound, Tenant: tenant, Platform: "discord",
			SessionKey: sessionKey("discord", "c3", "u1"), ChatID: "c3", Event: ev, Received: time.Now(),
		})
	}

	failing.Store(true)
	if err := deliver("t3", "refused"); err == nil {
		t.Fatal("delivery to an unknown tenant whose catch-up failed: taken, want refused")
	}
	failing.Store(false)
	if err := deliver("t3", "kept"); err != nil {
		t.Fatalf("delivery to a tenant not applied yet: %v", err)
	}
	gw3 := h.Dial(t, "gw3", "s3")
	gw3.Hello(t, "discord", "app")
	if ev, _ := gw3.NextInbound(t); ev.Text != "kept" {
		t.Fatalf("gw3 inbound %q, want %q", ev.Text, "kept")
	}
	before := catchUps.Load()
	if err := deliver("t3", "known"); err != nil {
		t.Fatalf("delivery to a known tenant: %v", err)
	}
	if catchUps.Load() != before {
		t.Fatal("a delivery to a known tenant caught the registry up")
	}
	if err := deliver("nobody", "dropped"); err != nil {
		t.Fatalf("delivery to a tenant unknown after the catch-up: %v, want dropped", err)
	}
}

// TestTenantsAddedAreReadAtOnce: the store reads of the tenants one apply
// adds run side by side under one deadline: a store that hangs holds
// SetTenants once, not once per tenant added (5 minutes each before).
func TestTenantsAddedAreReadAtOnce(t *testing.T) {
	st := &readHoldingStore{Store: store.NewMemory(nil), hold: "*", entered: make(chan struct{}, 2), release: make(chan struct{})}
	t.Cleanup(func() { _ = st.Close() })
	p := newFake("discord", nil)
	base := relay.Tenant{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}
	h := relaytest.StartConfig(t, relay.Config{Tenants: []relay.Tenant{base}, Platforms: []platform.Platform{p}, Store: st, Log: relaytest.TestLogger(t)})
	st.holding.Store(true)
	var released sync.Once
	release := func() { released.Do(func() { close(st.release) }) }
	t.Cleanup(release)
	applied := make(chan error, 1)
	go func() {
		applied <- h.Server.SetTenants([]relay.Tenant{base, {ID: "t2"}, {ID: "t3"}})
	}()
	for i := range 2 {
		select {
		case <-st.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of the 2 added tenants' store reads began while the first hung, want both", i)
		}
	}
	release()
	select {
	case err := <-applied:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SetTenants did not return once the store reads were released")
	}
}

// TestOutboundOfAnEarlierTenantRunsNowhere: t1's gateway sent an action,
// and t1 was deleted and made again under its id before the op's
// goroutine got to run it. The op is declined and reaches no platform
// (before, the relay passed it the new t1's creation, as it then read its
// hub's, so a platform's check 8 let it through as the new t1's).
func TestOutboundOfAnEarlierTenantRunsNowhere(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	tenant := func(created time.Time, secret string) relay.Tenant {
		return relay.Tenant{ID: "t1", Created: created, Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secret}}}}
	}
	h := relaytest.Start(t, []relay.Tenant{tenant(time.Now().Add(-time.Hour), "s1")}, p)
	old := h.Dial(t, "gw1", "s1")
	old.Hello(t, "discord", "app")
	late := relay.LateOutbound(h.Server, "t1", "discord")
	for deadline := time.Now().Add(relaytest.Timeout); late == nil; late = relay.LateOutbound(h.Server, "t1", "discord") {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the earlier t1's connection to be served")
		}
		runtime.Gosched()
	}
	if err := h.Server.SetTenants([]relay.Tenant{tenant(time.Now(), "s2")}); err != nil {
		t.Fatal(err)
	}
	if r := late(&contract.Action{Op: contract.OpSend, ChatID: "c1", Content: "earlier"}); r != contract.Declined("discord") {
		t.Fatalf("the earlier t1's op run after t1 was made again: %+v, want declined", r)
	}
	select {
	case e := <-p.egress:
		t.Fatalf("the earlier t1's op reached the platform: %+v", e)
	default:
	}
}
