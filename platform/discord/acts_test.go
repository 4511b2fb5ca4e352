package discord

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/relay"
	"connector/relay/relaytest"
)

// actsLoop is the platform behind the real relay with tenant t1's gateway
// (gw) and tenant t2's (gw2) connected and hello'd for discord.
type actsLoop struct {
	fake *discordtest.Server
	priv ed25519.PrivateKey
	h    *relaytest.Harness
	gw   *relaytest.Gateway
	gw2  *relaytest.Gateway
	p    *Platform
}

func startActsLoop(t *testing.T) *actsLoop {
	t.Helper()
	fake := discordtest.New(t, discordtest.Options{Token: testToken})
	world(fake)
	pub, priv, _ := ed25519.GenerateKey(nil)
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secretGW1}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{secretGW2}}}},
	}
	logs := newLogCapture()
	p, err := New(testConfig(fake, pub), platform.Deps{Log: logs.logger(), Vault: sharedVault, Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p}, Log: logs.logger()})
	if err := fake.WaitSession(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	logs.waitFor(t, "discord guild snapshot loaded")
	l := &actsLoop{fake: fake, priv: priv, h: h, p: p, gw: h.Dial(t, "gw1", secretGW1), gw2: h.Dial(t, "gw2", secretGW2)}
	l.gw.Hello(t, "discord", "9000")
	l.gw2.Hello(t, "discord", "9000")
	return l
}

// inbound returns gw's next inbound event, acknowledged.
func (l *actsLoop) inbound(t *testing.T, gw *relaytest.Gateway) contract.Event {
	t.Helper()
	ev, buf := gw.NextInbound(t)
	if buf != "" {
		gw.Ack(t, buf)
	}
	return ev
}

// interact posts a signed interaction body to the connector's endpoint and
// returns the status and the answer.
func (l *actsLoop) interact(t *testing.T, body []byte) (int, string) {
	t.Helper()
	return post(t, discordtest.InteractionRequest(l.h.URL+"/discord/interactions", l.priv, time.Now(), body))
}

func TestEgressPromptButtons(t *testing.T) {
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	opts := []map[string]any{
		{"id": "once", "label": "Allow once", "style": "primary"},
		{"id": "session", "label": "Allow for session", "style": "success"},
		{"id": "always", "label": strings.Repeat("Always allow ", 10)},
		{"id": "deny", "label": "Deny", "style": "danger"},
		{"id": "c4", "label": "four"}, {"id": "c5", "label": "five"}, {"id": "other", "label": "Other…", "style": "secondary"},
	}
	question := strings.Repeat("Allow `rm -rf build`? ", 120) // over 2,000 code points: split
	body, _ := json.Marshal(map[string]any{"op": "prompt", "chat_id": chanGeneral, "content": question, "prompt_kind": "approval",
		"prompt_id": "a1b2c3.0000beef", "options": opts, "reply_to": "6001", "timeout_s": 300, "metadata": map[string]any{}})
	r := execute(t, e, "t1", string(body))
	if !r.Success || r.MessageID == "" {
		t.Fatalf("prompt = %+v", r)
	}
	msgs := e.fake.Messages(chanGeneral)
	if len(msgs) != 2 || msgs[0].ReplyTo != "6001" || len(msgs[0].Components) != 0 || msgs[1].ID != r.MessageID {
		t.Fatalf("want the question split, the first piece replying, the buttons on the last: %+v", msgs)
	}
	rows := msgs[1].Components
	if len(rows) != 2 || len(rows[0].Components) != 5 || len(rows[1].Components) != 2 {
		t.Fatalf("rows = %+v", rows)
	}
	want := []struct {
		id    string
		style int
	}{{"once", 1}, {"session", 3}, {"always", 2}, {"deny", 4}, {"c4", 2}, {"c5", 2}, {"other", 2}}
	for i, w := range want {
		b := rows[i/5].Components[i%5]
		if b.Type != 2 || b.CustomID != "hp1:a1b2c3.0000beef:"+w.id || b.Style != w.style || len([]rune(b.Label)) > 80 {
			t.Errorf("button %d = %+v, want custom_id for %s style %d", i, b, w.id, w.style)
		}
	}

	bad := map[string]string{
		"bad prompt id":   `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"no spaces","options":[{"id":"a","label":"A"}],"metadata":{}}`,
		"no options":      `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"p1","options":[],"metadata":{}}`,
		"token too long":  `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"` + strings.Repeat("p", 32) + `","options":[{"id":"` + strings.Repeat("o", 30) + `","label":"A"}],"metadata":{}}`,
		"bad reply_to":    `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"p1","options":[{"id":"a","label":"A"}],"reply_to":"x","metadata":{}}`,
		"bad chat id":     `{"op":"prompt","chat_id":"general","content":"q","prompt_id":"p1","options":[{"id":"a","label":"A"}],"metadata":{}}`,
		"too many option": `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"p1","options":[` + strings.TrimSuffix(strings.Repeat(`{"id":"o","label":"A"},`, 26), ",") + `],"metadata":{}}`,
	}
	for name, action := range bad {
		if r := execute(t, e, "t1", action); r.Success || r.Code != contract.CodeBadRequest {
			t.Errorf("%s: %+v, want bad_request", name, r)
		}
	}
	if r := execute(t, e, "t2", `{"op":"prompt","chat_id":"101","content":"q","prompt_id":"p1","options":[{"id":"a","label":"A"}],"metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Errorf("t2 prompt in t1's channel = %+v", r)
	}
	if len(e.fake.Messages(chanGeneral)) != 2 {
		t.Errorf("a refused prompt posted something: %+v", e.fake.Messages(chanGeneral))
	}
}

// TestPromptRoundTrip: the gateway's prompt becomes buttons on the fake
// Discord; a member's press arrives as a signed interaction, is
// acknowledged with a deferred update (type 6) and reaches t1's gateway as
// a prompt_response inbound whose source is the member who clicked, never
// reaching t2. A foreign button keeps the legacy custom_id-as-text shape.
func TestPromptRoundTrip(t *testing.T) {
	l := startActsLoop(t)
	res := l.gw.Outbound(t, "discord", map[string]any{"op": "prompt", "chat_id": threadPlan, "content": "Run `make deploy`?",
		"prompt_kind": "approval", "prompt_id": "f00dba.1234abcd", "reply_to": nil, "metadata": map[string]any{"scope_id": guildLab},
		"options": []any{map[string]any{"id": "once", "label": "Approve once", "style": "primary"}, map[string]any{"id": "deny", "label": "Deny", "style": "danger"}}})
	if !res.Success || res.MessageID == "" {
		t.Fatalf("prompt = %+v", res)
	}

	body, err := l.fake.PressButton("8400", "press-token-8400", res.MessageID, "hp1:f00dba.1234abcd:deny", "777", "grace.h")
	if err != nil {
		t.Fatal(err)
	}
	if code, ack := l.interact(t, body); code != http.StatusOK || ack != `{"type":6}` {
		t.Fatalf("press answered %d %s, want the deferred update", code, ack)
	}
	ev := l.inbound(t, l.gw)
	pr := ev.PromptResponse
	if pr == nil || pr.PromptID != "f00dba.1234abcd" || pr.OptionID != "deny" || pr.PromptMessageID != res.MessageID {
		t.Fatalf("prompt_response = %+v", pr)
	}
	if ev.Text != "/deny" || ev.MessageType != contract.MessageCommand || ev.MessageID != "8400" {
		t.Fatalf("event = %+v", ev)
	}
	src := ev.Source
	if src.UserID.Value != "777" || src.UserName.Value != "grace.h" || src.ChatID != threadPlan || src.ChatType != "thread" || src.ScopeID != guildLab {
		t.Fatalf("source = %+v, want the clicking user in the thread", src)
	}

	// Another integration's button: text, no prompt_response.
	foreign, _ := json.Marshal(map[string]any{"id": "8401", "application_id": "9000", "type": 3, "token": "press-token-8401",
		"guild_id": guildLab, "channel_id": chanGeneral, "data": map[string]any{"custom_id": "poll:vote:2", "component_type": 2},
		"member": map[string]any{"user": map[string]any{"id": "778", "username": "linus"}, "roles": []any{}}})
	if code, _ := l.interact(t, foreign); code != http.StatusOK {
		t.Fatalf("foreign press = %d", code)
	}
	ev = l.inbound(t, l.gw)
	if ev.PromptResponse != nil || ev.Text != "poll:vote:2" || ev.MessageType != contract.MessageText {
		t.Fatalf("foreign press = %+v", ev)
	}

	// t2 never saw either press, and cannot prompt in t1's chat.
	if res := l.gw2.Outbound(t, "discord", map[string]any{"op": "prompt", "chat_id": threadPlan, "content": "q", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "a", "label": "A"}}, "reply_to": nil, "metadata": map[string]any{}}); res.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 prompt = %+v", res)
	}
	if err := l.fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", msg("7200", chanOther, guildOther, "t2 here", true)); err != nil {
		t.Fatal(err)
	}
	if ev := l.inbound(t, l.gw2); ev.MessageID != "7200" {
		t.Fatalf("t2's first inbound = %+v, want its own message (no press)", ev)
	}
}
