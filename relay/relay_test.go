package relay_test

import (
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/relay"
	"connector/relay/relaytest"
)

// twoTenants is the fleet most tests use: tenant t1 with gateways gw1 and
// gw1b, tenant t2 with gw2. Chat c1 belongs to t1, chat c2 to t2.
func twoTenants(t *testing.T) (*relaytest.Harness, *fakePlatform) {
	t.Helper()
	p := newFake("discord", map[string]string{"c1": "t1", "c1b": "t1", "c2": "t2"})
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"old-secret", "s1"}}, {ID: "gw1b", Secrets: []string{"s1b"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	return relaytest.Start(t, tenants, p), p
}

func sendAction(chatID, content string) map[string]any {
	return map[string]any{"op": "send", "chat_id": chatID, "content": content, "reply_to": nil, "metadata": map[string]any{}}
}

func TestTwoHellosOnOneSocketAnsweredInOrder(t *testing.T) {
	h, _ := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	// Sent back to back, as the gateway does, before reading anything.
	gw.SendRaw(t, `{"type": "hello", "platform": "discord", "botId": "app-1"}`+"\n")
	gw.SendRaw(t, `{"type": "hello", "platform": "relay", "botId": ""}`+"\n")
	first := gw.Next(t)
	second := gw.Next(t)
	if first.Type != contract.TypeDescriptor || first.Descriptor.Platform != "discord" {
		t.Fatalf("first frame = %s %q, want the discord descriptor", first.Type, first.Descriptor.Platform)
	}
	if second.Type != contract.TypeDescriptor || second.Descriptor.Platform != "relay" {
		t.Fatalf("second frame = %s %q, want the relay descriptor", second.Type, second.Descriptor.Platform)
	}
	for _, key := range []string{"contract_version", "platform", "label", "max_message_length",
		"supports_draft_streaming", "supports_edit", "supports_threads", "markdown_dialect", "len_unit"} {
		if !strings.Contains(string(first.Raw), `"`+key+`":`) {
			t.Errorf("descriptor lacks required key %s: %s", key, first.Raw)
		}
	}
}

func TestUpgradeAuth(t *testing.T) {
	h, _ := twoTenants(t)
	now := time.Now()
	cases := []struct {
		name, token, reason string
	}{
		// No Authorization header at all: HTTP 401
		// (TestUpgradeWithoutAuthorizationIsAnswered401).
		{"garbage", "!!!not-base64!!!", "unauthorized"},
		{"wrong secret", contract.MintToken("gw1", "nope", now.Unix()+300), "unauthorized"},
		{"unknown gateway", contract.MintToken("gw-x", "s1", now.Unix()+300), "unauthorized"},
		{"another gateway's secret", contract.MintToken("gw1", "s2", now.Unix()+300), "unauthorized"},
		{"expired", contract.MintToken("gw1", "s1", now.Unix()-120), "expired"},
		{"exp zero", contract.MintToken("gw1", "s1", 0), "expired"},
		// Minted never to expire: refused, and not as "expired" (a fresh
		// token of the same kind would not help).
		{"exp far ahead", contract.MintToken("gw1", "s1", 9999999999), "unauthorized"},
		{"exp max int64", contract.MintToken("gw1", "s1", 1<<63-1), "unauthorized"},
		{"exp beyond the lifetime", contract.MintToken("gw1", "s1", now.Add(contract.DefaultMaxTokenLifetime+time.Minute).Unix()), "unauthorized"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gw := h.DialToken(t, c.token)
			code, reason := gw.Closed(t)
			if code != int(contract.CloseUnauthorized) || reason != c.reason {
				t.Fatalf("closed %d %q, want 4401 %q", code, reason, c.reason)
			}
		})
	}
	t.Run("rotated secret and skew", func(t *testing.T) {
		for _, tok := range []string{
			contract.MintToken("gw1", "old-secret", now.Unix()+300),
			contract.MintToken("gw1", "s1", now.Unix()-5), // within the 30 s skew
			contract.MintToken("gw1", "s1", now.Add(contract.DefaultMaxTokenLifetime).Unix()),
		} {
			gw := h.DialToken(t, tok)
			if d := gw.Hello(t, "discord", ""); d.Platform != "discord" {
				t.Fatalf("descriptor for %q", d.Platform)
			}
		}
	})
}

func TestHelloForUnfrontedPlatformClosesWithReason(t *testing.T) {
	h, _ := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	gw.Send(t, map[string]any{"type": "hello", "platform": "slack", "botId": "B1"})
	code, reason := gw.Closed(t)
	if code != int(contract.CloseUnsupportedPlatform) || !strings.Contains(reason, `"slack"`) {
		t.Fatalf("closed %d %q, want 4404 naming slack", code, reason)
	}
}

func TestOutboundReachesPlatformForOwnChat(t *testing.T) {
	h, p := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "app-1")
	res := gw.Outbound(t, "discord", sendAction("c1", "h\u00e9llo \U0001F440"))
	if !res.Success || res.MessageID != "m-c1" {
		t.Fatalf("result %+v", res)
	}
	e := p.nextEgress(t)
	if e.Tenant != "t1" || e.Action.Content != "h\u00e9llo \U0001F440" {
		t.Fatalf("egress %+v", e)
	}
}

func TestCrossTenantSendIsDeclined(t *testing.T) {
	h, p := twoTenants(t)
	gw := h.Dial(t, "gw2", "s2")
	gw.Hello(t, "discord", "")
	for _, chat := range []string{"c1", "no-such-chat"} {
		res := gw.Outbound(t, "discord", sendAction(chat, "hi"))
		if res.Success || res.Code != contract.CodeEgressDeclined ||
			res.Error != "discord egress declined: target is not an approved destination for this connection" {
			t.Fatalf("send to %s: %+v, want the structured decline", chat, res)
		}
	}
	// A tagged frame for a platform this socket did not hello is declined too.
	if res := gw.Outbound(t, "telegram", sendAction("c2", "hi")); res.Code != contract.CodeEgressDeclined {
		t.Fatalf("untagged platform: %+v", res)
	}
	// Nothing reached the platform.
	res := gw.Outbound(t, "discord", sendAction("c2", "own chat"))
	if !res.Success {
		t.Fatalf("own chat: %+v", res)
	}
	if e := p.nextEgress(t); string(e.Action.ChatID) != "c2" {
		t.Fatalf("first egress was %+v: a declined action leaked", e)
	}
}

func TestUnknownOpAndGarbageAreNotFatal(t *testing.T) {
	h, _ := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	gw.SendRaw(t, "this is not json\n")
	gw.SendRaw(t, `["an", "array"]`+"\n")
	gw.SendRaw(t, `{"type": "outbound", "requestId": "r-bad", "action": "not an object"}`+"\n")
	gw.SendRaw(t, `{"type": "from_the_future", "x": 1}`+"\n")
	bad := gw.Next(t, contract.TypeOutboundResult)
	if bad.RequestID != "r-bad" || bad.Result.Success || bad.Result.Code != contract.CodeBadRequest {
		t.Fatalf("malformed action answered %+v", bad)
	}
	for _, op := range []string{"teleport", contract.OpReact} { // unknown, and known but not advertised
		res := gw.Outbound(t, "", map[string]any{"op": op, "chat_id": "c1", "metadata": map[string]any{}})
		if res.Success || res.Code != contract.CodeUnsupportedOp || res.Error == "" {
			t.Fatalf("op %s: %+v, want unsupported_op", op, res)
		}
	}
	if res := gw.Outbound(t, "", sendAction("c1", "still alive")); !res.Success {
		t.Fatalf("connection did not survive garbage: %+v", res)
	}
}

func TestSlowPlatformCallDoesNotBlockOthers(t *testing.T) {
	h, p := twoTenants(t)
	release := p.slowChat("c1")
	defer release()
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	slow := relaytest.NewRequestID()
	gw.Send(t, map[string]any{"type": "outbound", "requestId": slow, "action": sendAction("c1", "slow")})
	if res := gw.Outbound(t, "", sendAction("c1b", "fast")); !res.Success {
		t.Fatalf("fast send: %+v", res)
	}
	release()
	f := gw.Next(t, contract.TypeOutboundResult)
	if f.RequestID != slow || !f.Result.Success {
		t.Fatalf("slow result %+v", f)
	}
}

func TestInboundGoesOnlyToOwnTenant(t *testing.T) {
	h, p := twoTenants(t)
	gw1 := h.Dial(t, "gw1", "s1")
	gw1.Hello(t, "discord", "")
	gw2 := h.Dial(t, "gw2", "s2")
	gw2.Hello(t, "discord", "")
	p.deliver("t2", "c2", "u2", "for-t2")
	p.deliver("t1", "c1", "u1", "for-t1")
	ev, id := gw1.NextInbound(t)
	if ev.Text != "for-t1" || id == "" {
		t.Fatalf("t1 got %q (bufferId %q)", ev.Text, id)
	}
	ev2, _ := gw2.NextInbound(t)
	if ev2.Text != "for-t2" {
		t.Fatalf("t2 got %q", ev2.Text)
	}
	if ev.Source.ChatID != "c1" || ev.Source.Platform != "discord" {
		t.Fatalf("source %+v", ev.Source)
	}
}

func TestInterruptRoutedToSessionOwner(t *testing.T) {
	h, p := twoTenants(t)
	owner := h.Dial(t, "gw1", "s1")
	owner.Hello(t, "discord", "")
	p.deliver("t1", "c1", "u1", "start")
	ev, id := owner.NextInbound(t)
	owner.Ack(t, id)

	other := h.Dial(t, "gw1b", "s1b")
	other.Hello(t, "discord", "")
	key := sessionKey("discord", ev.Source.ChatID, "u1")
	other.Send(t, map[string]any{"type": "interrupt", "session_key": key, "reason": nil})
	f := owner.Next(t, contract.TypeInterruptInbound)
	if f.SessionKey != key || f.ChatID != "c1" {
		t.Fatalf("interrupt_inbound %+v", f)
	}

	// Another tenant naming the session reaches nobody; a platform-side
	// /stop reaches the owner too.
	foreign := h.Dial(t, "gw2", "s2")
	foreign.Hello(t, "discord", "")
	foreign.Send(t, map[string]any{"type": "interrupt", "session_key": key, "reason": "x"})
	p.interrupt("t1", "c1", "u1")
	f = owner.Next(t, contract.TypeInterruptInbound)
	if f.SessionKey != key {
		t.Fatalf("platform /stop: %+v", f)
	}
	// The owner keeps getting the session's inbound, not the newer socket.
	p.deliver("t1", "c1", "u1", "more")
	if ev, _ := owner.NextInbound(t); ev.Text != "more" {
		t.Fatalf("owner got %q", ev.Text)
	}
}

// A follow_up reaches its platform for the caller's tenant, whatever
// session it names: the platform looks its capability up under that tenant
// only (a session of another tenant finds nothing: capability_missing, in
// platform/discord's TestEgressFollowUp), so the relay keeps no memory of
// whose sessions are whose.
func TestFollowUpRunsForTheCallersTenant(t *testing.T) {
	h, p := twoTenants(t)
	gw1 := h.Dial(t, "gw1", "s1")
	gw1.Hello(t, "discord", "")
	p.deliver("t1", "c1", "u1", "hi")
	gw1.NextInbound(t)
	gw2 := h.Dial(t, "gw2", "s2")
	gw2.Hello(t, "discord", "")
	followUp := map[string]any{"op": "follow_up", "session_key": sessionKey("discord", "c1", "u1"),
		"kind": "discord.interaction_token", "content": "x", "metadata": map[string]any{}}
	for _, c := range []struct {
		gw     *relaytest.Gateway
		tenant string
	}{{gw2, "t2"}, {gw1, "t1"}} {
		if res := c.gw.Outbound(t, "discord", followUp); !res.Success {
			t.Fatalf("%s follow_up: %+v", c.tenant, res)
		}
		if e := p.nextEgress(t); e.Tenant != c.tenant || e.Action.Op != "follow_up" {
			t.Fatalf("egress %+v, want %s's follow_up", e, c.tenant)
		}
	}
	delete(followUp, "session_key")
	if res := gw1.Outbound(t, "", followUp); res.Code != contract.CodeBadRequest {
		t.Fatalf("follow_up without a session_key: %+v", res)
	}
}

func TestGoingIdleBuffersAndReconnectReplaysUntilAcked(t *testing.T) {
	h, p := twoTenants(t)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	gw.Send(t, map[string]any{"type": "going_idle"})
	gw.Next(t, contract.TypeGoingIdleAck)
	for _, text := range []string{"one", "two", "three"} {
		p.deliver("t1", "c1", "u1", text)
	}
	if err := gw.Close(); err != nil {
		t.Logf("close: %v", err)
	}

	// First reconnect: the backlog arrives in order with string bufferIds;
	// only "one" is acknowledged before the gateway drops again.
	gw = h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	var ids []string
	for _, want := range []string{"one", "two", "three"} {
		ev, id := gw.NextInbound(t)
		if ev.Text != want || id == "" {
			t.Fatalf("replayed %q (bufferId %q), want %q", ev.Text, id, want)
		}
		ids = append(ids, id)
	}
	gw.Ack(t, ids[0])
	// The ack is processed in order before the outbound that follows it.
	gw.Outbound(t, "", sendAction("c1", "sync"))
	_ = gw.CloseNow()

	// Second reconnect: the unacknowledged two come back with the same ids.
	gw = h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	for i, want := range []string{"two", "three"} {
		ev, id := gw.NextInbound(t)
		if ev.Text != want || id != ids[i+1] {
			t.Fatalf("redelivered %q/%q, want %q/%q", ev.Text, id, want, ids[i+1])
		}
		gw.Ack(t, id)
	}
	p.deliver("t1", "c1", "u1", "live")
	if ev, _ := gw.NextInbound(t); ev.Text != "live" {
		t.Fatalf("after replay got %q", ev.Text)
	}
}

// TestOwnerLookupOutageIsUnavailable: when a platform cannot tell who owns a
// chat because its API is unreachable, the answer is the retryable
// "unavailable", never the decline the gateway treats as final, and the
// text names no internal address.
func TestOwnerLookupOutageIsUnavailable(t *testing.T) {
	h, p := twoTenants(t)
	p.down = map[string]bool{"uncached": true}
	for _, tag := range []string{"discord", "relay"} {
		gw := h.Dial(t, "gw1", "s1")
		gw.Hello(t, tag, "")
		res := gw.Outbound(t, tag, sendAction("uncached", "hi"))
		if res.Success || res.Code != contract.CodeUnavailable {
			t.Fatalf("%s: send while the owner lookup fails = %+v, want code unavailable", tag, res)
		}
		if strings.Contains(res.Error, "10.1.2.3") || strings.Contains(res.Error, "dial") {
			t.Fatalf("%s: error text leaks the transport error: %q", tag, res.Error)
		}
	}
	// A chat the platform positively knows is another tenant's is still declined.
	gw := h.Dial(t, "gw2", "s2")
	gw.Hello(t, "discord", "")
	if res := gw.Outbound(t, "discord", sendAction("c1", "hi")); res.Code != contract.CodeEgressDeclined {
		t.Fatalf("foreign chat = %+v, want the decline", res)
	}
}

// TestOversizedGatewayMessageCloses1009: a gateway message over the 1 MiB
// frame limit closes the connection with 1009, as docs/contract.md says.
func TestOversizedGatewayMessageCloses1009(t *testing.T) {
	p := newFake("discord", nil)
	h := relaytest.Start(t, []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}, p)
	gw := h.Dial(t, "gw1", "s1")
	gw.Hello(t, "discord", "")
	gw.SendRaw(t, `{"type":"going_idle","pad":"`+strings.Repeat("x", contract.MaxFrameBytes)+`"}`+"\n")
	if code, _ := gw.Closed(t); code != int(contract.CloseMessageTooBig) {
		t.Fatalf("closed with %d, want 1009", code)
	}
}
