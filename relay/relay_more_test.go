package relay_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
)

func TestRelayHelloFrontsEveryPlatform(t *testing.T) {
	h, p := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	d := gw.Hello(t, "relay", "")
	if d.Platform != "relay" || !d.HasOp(contract.OpSend) || d.HasOp(contract.OpReact) {
		t.Fatalf("relay descriptor %+v", d)
	}
	p.deliver("t1", "c1", "u1", "via relay")
	ev, id := gw.NextInbound(t)
	if ev.Source.Platform != "discord" || id == "" {
		t.Fatalf("inbound on a relay socket: %+v", ev.Source)
	}
	// Untagged outbound resolves to the chat's platform.
	if res := gw.Outbound(t, "", sendAction("c1b", "hi")); !res.Success {
		t.Fatalf("untagged send: %+v", res)
	}
	if e := p.nextEgress(t); string(e.Action.ChatID) != "c1b" {
		t.Fatalf("egress %+v", e)
	}
	if res := gw.Outbound(t, "", sendAction("c2", "hi")); res.Code != contract.CodeEgressDeclined {
		t.Fatalf("foreign chat over relay: %+v", res)
	}
}

// get_chat_info never names a platform. On a connection that said hello for
// nexscope and then telegram, an untagged action goes to the platform that
// places its chat in the tenant, not to the first hello; so does one tagged
// "relay", the platform a stock gateway learns for a nexscope chat. Chats of
// another tenant, or of a platform the connection did not hello, are declined.
func TestUntaggedActionGoesToItsChatsPlatform(t *testing.T) {
	nx := newFake("nexscope", map[string]string{"lab": "t1", "their-room": "t2"})
	tg := newFake("telegram", map[string]string{"42": "t1", "43": "t1", "-99": "t2"})
	dc := newFake("discord", map[string]string{"d1": "t1"})
	for _, p := range []*fakePlatform{nx, tg, dc} {
		p.ops = append(p.ops, contract.OpGetChatInfo)
	}
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	h := relaytest.Start(t, tenants, dc, nx, tg)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "nexscope", "")
	gw.Hello(t, "telegram", "")
	tg.deliver("t1", "42", "u1", "hi")
	_, id := gw.NextInbound(t)
	gw.Ack(t, id)

	chatInfo := func(chatID string) map[string]any { return map[string]any{"op": "get_chat_info", "chat_id": chatID} }
	for _, c := range []struct {
		tag, chat string
		on        *fakePlatform
	}{
		{"", "42", tg},  // the chat's inbound came from telegram
		{"", "43", tg},  // no inbound yet: telegram places it in t1
		{"", "lab", nx}, // the first hello's own chat
		{"relay", "lab", nx},
		{"relay", "43", tg},
	} {
		res := gw.Outbound(t, c.tag, chatInfo(c.chat))
		if !res.Success {
			t.Fatalf("get_chat_info %s tagged %q: %+v", c.chat, c.tag, res)
		}
		if e := c.on.nextEgress(t); string(e.Action.ChatID) != c.chat || e.Tenant != "t1" {
			t.Fatalf("get_chat_info %s tagged %q reached %s as %+v", c.chat, c.tag, c.on.name, e)
		}
	}
	for _, chat := range []string{"-99", "their-room", "d1", "nowhere"} {
		for _, tag := range []string{"", "relay"} {
			if res := gw.Outbound(t, tag, chatInfo(chat)); res.Code != contract.CodeEgressDeclined {
				t.Fatalf("get_chat_info %s tagged %q: %+v, want the decline", chat, tag, res)
			}
		}
	}
	// A follow_up resolves by its kind, among the hello'd platforms only.
	followUp := map[string]any{"op": "follow_up", "session_key": "k", "kind": "discord.interaction_token", "content": "x", "metadata": map[string]any{}}
	if res := gw.Outbound(t, "", followUp); res.Code != contract.CodeEgressDeclined {
		t.Fatalf("follow_up for a platform not hello'd: %+v", res)
	}
	// Nothing declined reached a platform.
	for _, p := range []*fakePlatform{nx, tg, dc} {
		select {
		case e := <-p.egress:
			t.Fatalf("a declined action reached %s: %+v", p.name, e)
		default:
		}
	}
}

func TestPassthroughForwardCarriesBufferID(t *testing.T) {
	h, p := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	p.publish(platform.Delivery{Kind: platform.KindPassthrough, Tenant: "t1", Platform: "discord",
		Forward: &contract.Forward{Platform: "discord", Method: "POST", Path: "/interactions",
			Headers: [][2]string{{"content-type", "application/json"}}, BodyB64: "e30="}})
	f := gw.Next(t, contract.TypePassthroughForward)
	if f.BufferID == "" || f.Forward.Path != "/interactions" || f.Forward.BodyB64 != "e30=" ||
		len(f.Forward.Headers) != 1 {
		t.Fatalf("passthrough %+v", f)
	}
}

func TestOversizedInboundIsTruncatedBelowTheGatewayLimit(t *testing.T) {
	h, p := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	ev := &contract.Event{Text: strings.Repeat("é", 1<<20), MessageID: "big"} // 2 MiB of text
	ev.Source.Platform, ev.Source.ChatID, ev.Source.ChatType = "discord", "c1", "group"
	p.publish(platform.Delivery{Kind: platform.KindInbound, Tenant: "t1", Platform: "discord", ChatID: "c1", Event: ev})
	f := gw.Next(t, contract.TypeInbound)
	if len(f.Raw) >= contract.MaxFrameBytes || !strings.HasSuffix(f.Event.Text, "[…]") ||
		!utf8.ValidString(f.Event.Text) || len(f.Event.Text) < 1<<19 {
		t.Fatalf("frame %d bytes, text %d bytes ending %q", len(f.Raw), len(f.Event.Text), f.Event.Text[len(f.Event.Text)-8:])
	}
}

func TestTooManyConnectionsCloseTheOldest(t *testing.T) {
	p := newFake("discord", nil)
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:            []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms:          []platform.Platform{p},
		MaxConnsPerGateway: 2,
		Log:                relaytest.TestLogger(t),
	})
	first := h.Dial(t, "gw1", "s1")
	first.Hello(t, "discord", "")
	second := h.Dial(t, "gw1", "s1")
	second.Hello(t, "discord", "")
	third := h.Dial(t, "gw1", "s1")
	third.Hello(t, "discord", "")
	if code, _ := first.Closed(t); code != int(contract.CloseReplaced) {
		t.Fatalf("oldest closed with %d, want 4409", code)
	}
}

// TestSlowConsumerIsDroppedAndItsInboundRedelivered: a gateway that stops
// reading is cut off when a write times out, and everything it had not
// acknowledged reaches its next connection, in order.
func TestSlowConsumerIsDroppedAndItsInboundRedelivered(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:      []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms:    []platform.Platform{p},
		WriteTimeout: time.Second,
		AckWindow:    1000,
		Log:          relaytest.TestLogger(t),
	})
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	// A raw client that reads its descriptor and then nothing more.
	hdr := map[string][]string{"Authorization": {"Bearer " + relaytest.Token("gw1", "s1", time.Now())}}
	ws, _, err := websocket.Dial(ctx, h.RelayURL(), &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type": "hello", "platform": "discord", "botId": ""}`+"\n")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || !strings.Contains(string(msg), `"descriptor"`) {
		t.Fatalf("descriptor: %s %v", msg, err)
	}
	const n = 300
	pad := strings.Repeat("x", 64<<10)
	for i := range n {
		p.deliver("t1", "c1", "u1", strconv.Itoa(i)+":"+pad)
	}
	// The stalled socket is dropped; fresh connections get all n, in order.
	// They read raw messages (no JSON decoding) to keep up with the
	// one-second write timeout, but a loaded machine can still starve one
	// for a second: like the gateway, the test then reconnects, as long as
	// every few connections make progress, within redeliverWait.
	rctx, rcancel := context.WithTimeout(context.Background(), redeliverWait)
	defer rcancel()
	next, stuck := 0, 0
	for attempt := 0; next < n; attempt++ {
		before := next
		c, _, err := websocket.Dial(rctx, h.RelayURL(), &websocket.DialOptions{HTTPHeader: map[string][]string{
			"Authorization": {"Bearer " + relaytest.Token("gw1", "s1", time.Now())}}})
		if err != nil {
			t.Fatalf("timed out after %v waiting for the %d events to be redelivered: %d arrived, then dial failed: %v", redeliverWait, n, next, err)
		}
		c.SetReadLimit(contract.MaxFrameBytes)
		_ = c.Write(rctx, websocket.MessageText, []byte(`{"type": "hello", "platform": "discord", "botId": ""}`+"\n"))
		for next < n {
			_, msg, err := c.Read(rctx)
			if err != nil {
				t.Logf("reader %d dropped after %d events: %v", attempt, next, err)
				break
			}
			for line := range strings.SplitSeq(strings.TrimSuffix(string(msg), "\n"), "\n") {
				if !strings.HasPrefix(line, `{"type":"inbound"`) {
					continue
				}
				id := between(line, `"bufferId":"`, `"`)
				seq, _ := strconv.Atoi(between(line, `"text":"`, ":"))
				switch {
				case seq > next:
					t.Fatalf("event %d arrived when %d was due", seq, next)
				case seq == next:
					next++
				} // seq < next: redelivered because its ack was lost with the connection
				ack := `{"type": "inbound_ack", "bufferId": "` + id + `"}` + "\n"
				if err := c.Write(rctx, websocket.MessageText, []byte(ack)); err != nil {
					t.Logf("reader %d dropped while acking: %v", attempt, err)
					break
				}
			}
		}
		_ = c.CloseNow()
		if next > before {
			stuck = 0
		} else if stuck++; stuck == maxStuckReaders {
			t.Fatalf("%d readers in a row were dropped before receiving anything new; %d of %d events arrived", stuck, next, n)
		}
	}
	if next != n {
		t.Fatalf("only %d of %d events arrived", next, n)
	}
}

// redeliverWait bounds TestSlowConsumerIsDroppedAndItsInboundRedelivered's
// reconnecting readers; maxStuckReaders is how many of them in a row may be
// dropped without progress.
const (
	redeliverWait   = 2 * time.Minute
	maxStuckReaders = 5
)

// between returns the text of s between the first prefix and the following sep.
func between(s, prefix, sep string) string {
	_, rest, _ := strings.Cut(s, prefix)
	v, _, _ := strings.Cut(rest, sep)
	return v
}

func TestShutdownAnswersInFlightOutboundThenCloses1001(t *testing.T) {
	h, p := twoTenants(t)
	release := p.slowChat("c1")
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	id := relaytest.NewRequestID()
	gw.Send(t, map[string]any{"type": "outbound", "requestId": id, "action": sendAction("c1", "in flight")})
	p.nextEntered(t) // the op reached the platform
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
		defer cancel()
		done <- h.Server.Shutdown(ctx)
	}()
	// New gateways are refused while shutting down.
	dctx, dcancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer dcancel()
	for {
		c, err := relaytest.Dial(dctx, h.RelayURL(), relaytest.Token("gw1", "s1", time.Now()))
		if err != nil {
			break
		}
		// Raced Shutdown's start: this one is closed with 1001 below too.
		_ = c.CloseNow()
	}
	if dctx.Err() != nil {
		t.Fatalf("timed out after %v waiting for Shutdown to refuse new gateways", relaytest.Timeout)
	}
	release()
	f := gw.Next(t, contract.TypeOutboundResult)
	if f.RequestID != id || !f.Result.Success {
		t.Fatalf("in-flight op answered %+v", f)
	}
	if code, _ := gw.Closed(t); code != int(websocket.StatusGoingAway) {
		t.Fatalf("closed %d, want 1001", code)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
