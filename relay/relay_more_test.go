package relay_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/store"
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

// An untagged action whose chat no inbound placed yet is resolved by the
// platform's own check (platform.Locate), whose answer that platform's
// Execute takes: the chat's owner is looked up once, not once to resolve and
// again to authorize.
func TestUntaggedActionLooksItsChatUpOnce(t *testing.T) {
	nx := newFake("nexscope", map[string]string{"lab": "t1"})
	tg := newFake("telegram", map[string]string{"43": "t1"})
	tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
	h := relaytest.Start(t, tenants, nx, tg)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, contract.PlatformRelay, "")
	if res := gw.Outbound(t, "", sendAction("43", "hi")); !res.Success {
		t.Fatalf("send to 43: %+v", res)
	}
	if e := tg.nextEgress(t); string(e.Action.ChatID) != "43" {
		t.Fatalf("egress %+v", e)
	}
	if n, m := nx.lookups.Load(), tg.lookups.Load(); n != 1 || m != 1 {
		t.Fatalf("chat owner looked up %d times on nexscope and %d on telegram, want once on each", n, m)
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

// TestInboundTooLargeWithoutItsTextIsDropped: an event whose other fields
// alone exceed the gateway's frame limit (here the message it replies to)
// is dropped, not cut forever: its delivery returns, and the next inbound
// goes out.
func TestInboundTooLargeWithoutItsTextIsDropped(t *testing.T) {
	h, p := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	ev := &contract.Event{Text: "short", MessageID: "big", ReplyTo: &contract.ReplyTo{Text: strings.Repeat("x", contract.MaxFrameBytes)}}
	ev.Source.Platform, ev.Source.ChatID, ev.Source.ChatType = "discord", "c1", "group"
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		p.publish(platform.Delivery{Kind: platform.KindInbound, Tenant: "t1", Platform: "discord", ChatID: "c1", Event: ev})
	}()
	select {
	case <-delivered:
	case <-time.After(relaytest.Timeout):
		t.Fatalf("the oversized delivery did not return within %v", relaytest.Timeout)
	}
	p.deliver("t1", "c1", "u1", "next")
	if got, _ := gw.NextInbound(t); got.Text != "next" {
		t.Fatalf("inbound %q, want %q (the oversized one dropped)", got.Text, "next")
	}
}

// TestStoredRecordOverTheFrameLimitIsDropped: a stored inbound whose frame
// would exceed the gateway's limit (written by another program or version)
// is dropped as the relay reads it back; the gateway gets the next one. It
// was sent at every delivery before, and the gateway closed each time
// (1009).
func TestStoredRecordOverTheFrameLimitIsDropped(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	for _, text := range []string{strings.Repeat("x", contract.MaxFrameBytes), "next"} {
		ev := &contract.Event{Text: text, MessageID: "m-" + text[:1]}
		ev.Source.Platform, ev.Source.ChatID = "discord", "c1"
		if _, err := st.Ledger().Append(context.Background(), "t1", []store.Record{{
			Kind: uint8(platform.KindInbound), Platform: "discord", ChatID: "c1", Payload: ev.AppendJSON(nil), Received: time.Now(),
		}}); err != nil {
			t.Fatal(err)
		}
	}
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:   []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms: []platform.Platform{newFake("discord", map[string]string{"c1": "t1"})},
		Log:       relaytest.TestLogger(t),
		Store:     st,
	})
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	if got, _ := gw.NextInbound(t); got.Text != "next" {
		t.Fatalf("inbound %q, want next (the oversized one dropped)", got.Text)
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
// reading is closed 4408 once a write to it has not completed within
// WriteTimeout, and everything it had not acknowledged reaches its next
// connection, in order. The write watchdog runs on a fake clock: the test
// fires it by advancing the clock while a write to the stalled gateway is
// under way, so neither connection races real time.
func TestSlowConsumerIsDroppedAndItsInboundRedelivered(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	clk := clocktest.New(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), redeliverWait)
	defer cancel()
	stalledCtx, stalledGone := context.WithCancel(ctx)
	defer stalledGone()
	var closeCode atomic.Value // the first "gateway disconnected" line's close_code
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:      []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms:    []platform.Platform{p},
		Clock:        clk,
		WriteTimeout: time.Second,
		PingInterval: time.Hour, // no ping comes due while the test advances the clock
		AckWindow:    1000,
		Log: slog.New(closeWatch{relaytest.TestLogger(t).Handler(), func(code string) {
			closeCode.CompareAndSwap(nil, code)
			stalledGone()
		}}),
	})
	dial := func() *websocket.Conn {
		t.Helper()
		ws, _, err := websocket.Dial(ctx, h.RelayURL(), &websocket.DialOptions{HTTPHeader: map[string][]string{
			"Authorization": {"Bearer " + relaytest.Token("gw1", "s1", clk.Now())}}})
		if err != nil {
			t.Fatal(err)
		}
		ws.SetReadLimit(contract.MaxFrameBytes)
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type": "hello", "platform": "discord", "botId": ""}`+"\n")); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	// A raw client that reads its descriptor and the first inbound (which
	// it never acknowledges), then nothing more.
	stalled := dial()
	defer stalled.CloseNow()
	if _, msg, err := stalled.Read(ctx); err != nil || !strings.Contains(string(msg), `"descriptor"`) {
		t.Fatalf("descriptor: %s %v", msg, err)
	}
	// More than the send queue's half and the socket buffers hold, so the
	// writer ends up blocked on the socket.
	const n = 300
	pad := strings.Repeat("x", 64<<10)
	for i := range n {
		p.deliver("t1", "c1", "u1", strconv.Itoa(i)+":"+pad)
	}
	if _, msg, err := stalled.Read(ctx); err != nil || !strings.Contains(string(msg), `"text":"0:`) {
		t.Fatalf("first inbound: %.100s %v", msg, err)
	}
	// Two timers are pending while a write is under way: the ping loop's
	// sleep and the write watchdog. Advancing by WriteTimeout then fires the
	// watchdog, unless the write completed meanwhile; it cannot for long, as
	// the gateway reads nothing more.
	for stalledCtx.Err() == nil {
		if clk.WaitPending(stalledCtx, 2) == nil {
			clk.Advance(time.Second)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("timed out after %v waiting for the stalled gateway to be closed", redeliverWait)
	}
	if code := closeCode.Load(); code != "4408" {
		t.Fatalf("stalled gateway closed with code %q, want 4408", code)
	}
	// Its next connection gets all n, in order, from the one it saw first.
	next := 0
	c := dial()
	defer c.CloseNow()
	for next < n {
		_, msg, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for the %d events to be redelivered: %d arrived, then: %v", n, next, err)
		}
		for line := range strings.SplitSeq(strings.TrimSuffix(string(msg), "\n"), "\n") {
			if !strings.HasPrefix(line, `{"type":"inbound"`) {
				continue
			}
			if seq, _ := strconv.Atoi(between(line, `"text":"`, ":")); seq != next {
				t.Fatalf("event %d arrived when %d was due", seq, next)
			}
			next++
			ack := `{"type": "inbound_ack", "bufferId": "` + between(line, `"bufferId":"`, `"`) + `"}` + "\n"
			if err := c.Write(ctx, websocket.MessageText, []byte(ack)); err != nil {
				t.Fatalf("acking event %d: %v", next-1, err)
			}
		}
	}
}

// TestUnansweredPingClosesTheGateway: a gateway that does not answer a
// ping within PingInterval (this raw client reads nothing, so it never
// pongs) is closed 1011. The ping loop runs on a fake clock.
func TestUnansweredPingClosesTheGateway(t *testing.T) {
	p := newFake("discord", nil)
	clk := clocktest.New(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	closedCtx, closed := context.WithCancel(ctx)
	defer closed()
	var closeCode atomic.Value
	h := relaytest.StartConfig(t, relay.Config{
		Tenants:      []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms:    []platform.Platform{p},
		Clock:        clk,
		PingInterval: time.Second,
		WriteTimeout: time.Hour, // the descriptor's write watchdog never fires here
		Log: slog.New(closeWatch{relaytest.TestLogger(t).Handler(), func(code string) {
			closeCode.CompareAndSwap(nil, code)
			closed()
		}}),
	})
	ws, _, err := websocket.Dial(ctx, h.RelayURL(), &websocket.DialOptions{HTTPHeader: map[string][]string{
		"Authorization": {"Bearer " + relaytest.Token("gw1", "s1", clk.Now())}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	// The first Advance past a pending timer sends the ping; the next
	// expires it.
	for closedCtx.Err() == nil {
		if clk.WaitPending(closedCtx, 1) == nil {
			clk.Advance(time.Second)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("timed out after %v waiting for the gateway that never pongs to be closed", relaytest.Timeout)
	}
	if code := closeCode.Load(); code != "1011" {
		t.Fatalf("unresponsive gateway closed with code %q, want 1011", code)
	}
}

// redeliverWait bounds TestSlowConsumerIsDroppedAndItsInboundRedelivered:
// n large inbound pass twice over loopback, under -race on a loaded machine.
const redeliverWait = 2 * time.Minute

// closeWatch is a slog.Handler that passes every record on and calls
// onClose with the close_code of each "gateway disconnected" line ("" when
// it has none).
type closeWatch struct {
	slog.Handler
	onClose func(code string)
}

func (w closeWatch) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "gateway disconnected" {
		code := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "close_code" {
				code = a.Value.String()
			}
			return code == ""
		})
		w.onClose(code)
	}
	return w.Handler.Handle(ctx, r)
}

func (w closeWatch) WithAttrs(attrs []slog.Attr) slog.Handler {
	return closeWatch{w.Handler.WithAttrs(attrs), w.onClose}
}

func (w closeWatch) WithGroup(name string) slog.Handler {
	return closeWatch{w.Handler.WithGroup(name), w.onClose}
}

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

// A chat's profile (metadata.profile) is remembered only up to
// maxProfileBytes: a gateway naming megabyte profiles for its chats would
// otherwise have the relay keep one per chat (100,000 per tenant), and
// every inbound of the chat carry it, past the frame limit. A profile of
// that size is a Hermes profile name; a longer one is not remembered.
func TestOverlongProfileIsNotRemembered(t *testing.T) {
	h, p := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	for chat, profile := range map[string]string{
		"c1":  strings.Repeat("p", relay.MaxProfileBytes),
		"c1b": strings.Repeat("q", relay.MaxProfileBytes+1),
	} {
		a := sendAction(chat, "hi")
		a["metadata"] = map[string]any{"profile": profile}
		if res := gw.Outbound(t, "discord", a); !res.Success {
			t.Fatalf("send to %s: %+v", chat, res)
		}
	}
	for chat, want := range map[string]int{"c1": relay.MaxProfileBytes, "c1b": 0} {
		p.deliver("t1", chat, "u1", "from "+chat)
		ev, id := gw.NextInbound(t)
		if ev.Source.ChatID != chat || len(ev.Source.Profile) != want {
			t.Fatalf("inbound of %s carries a profile of %d bytes, want %d", ev.Source.ChatID, len(ev.Source.Profile), want)
		}
		gw.Ack(t, id)
	}
}

// The outbound ops in flight on one connection hold at most
// MaxOutboundBytes of actions: past it an op is answered rate_limited at
// once, as past MaxOutboundInFlight ops, so 1,024 slow ops of a megabyte
// each cannot make the relay hold a gigabyte for one connection.
func TestOutboundInFlightIsBoundedInBytes(t *testing.T) {
	p := newFake("discord", map[string]string{"c1": "t1"})
	// The slow ops end when the test releases them, not at the outbound
	// deadline, however long sending 20 MB takes under -race on a loaded
	// machine.
	h := relaytest.StartConfig(t, relay.Config{Tenants: []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}},
		Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t), OutboundTimeout: time.Hour})
	release := p.slowChat("c1")
	defer release()
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	const size = 512 << 10
	n := relay.MaxOutboundBytes/size + 8
	big := strings.Repeat("x", size)
	for range n {
		gw.Send(t, map[string]any{"type": "outbound", "requestId": relaytest.NewRequestID(), "action": sendAction("c1", big)})
	}
	// While the slow ops hold their room, the ops past the bound are
	// answered at once.
	refused := 0
	for refused < 8 {
		f := gw.Next(t, contract.TypeOutboundResult)
		if f.Result.Success || f.Result.Code != contract.CodeRateLimited {
			t.Fatalf("an op past the bound was answered %+v while the slow ones run, want rate_limited", f.Result)
		}
		refused++
	}
	release()
	for done := refused; done < n; done++ {
		if f := gw.Next(t, contract.TypeOutboundResult); !f.Result.Success && f.Result.Code != contract.CodeRateLimited {
			t.Fatalf("result %+v", f.Result)
		}
	}
}
