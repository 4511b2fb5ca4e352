package integration

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/media"
	"connector/media/mediatest"
	"connector/platform"
	"connector/platform/discord"
	"connector/platform/discord/discordtest"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/session"
	"connector/vault"
)

// Secrets of the gateways gw1 (tenant t1) and gw2 (tenant t2).
const (
	secretGW1 = "gw1-hmac-secret-0123456789abcdef"
	secretGW2 = "gw2-hmac-secret-fedcba9876543210"
)

// waitCtx is a context ending 10 s from now or with the test.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// discordConfig is the Discord platform of the discordtest world on f: Lab
// is t1's, Other t2's, DMs t1's; fast reconnects and command sync.
func discordConfig(f *discordtest.Server, pub ed25519.PublicKey) discord.Config {
	return discord.Config{
		BotToken: discordtest.Token, PublicKey: hex.EncodeToString(pub), ApplicationID: f.Options().AppID,
		Guilds: map[string]string{discordtest.GuildLab: "t1", discordtest.GuildOther: "t2"}, DMTenant: "t1",
		APIBaseURL: f.URL, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		HandshakeTimeout: 2 * time.Second, CommandSyncDebounce: 20 * time.Millisecond,
	}
}

// discordLoop is the platform behind the real relay with tenant t1's gateway
// (gw) and tenant t2's (gw2) connected and hello'd for discord.
type discordLoop struct {
	fake *discordtest.Server
	priv ed25519.PrivateKey
	h    *relaytest.Harness
	gw   *relaytest.Gateway
	gw2  *relaytest.Gateway
	p    *discord.Platform
}

func startDiscordLoop(t *testing.T) *discordLoop {
	t.Helper()
	return startDiscordLoopWith(t, nil)
}

// startDiscordLoopWith is startDiscordLoop with the platform's configuration
// adjusted by mutate (nil: as discordConfig makes it).
func startDiscordLoopWith(t *testing.T, mutate func(*discord.Config)) *discordLoop {
	t.Helper()
	fake := discordtest.New(t, discordtest.Options{Token: discordtest.Token})
	discordtest.World(fake)
	pub, priv, _ := ed25519.GenerateKey(nil)
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secretGW1}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{secretGW2}}}},
	}
	logs := discordtest.NewLogCapture()
	cfg := discordConfig(fake, pub)
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := discord.New(cfg, platform.Deps{Log: logs.Logger(), Vault: newVault(), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p}, Log: logs.Logger()})
	if err := fake.WaitSession(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	discordtest.WaitOwners(t, p)
	l := &discordLoop{fake: fake, priv: priv, h: h, p: p, gw: h.Dial(t, "gw1", secretGW1), gw2: h.Dial(t, "gw2", secretGW2)}
	l.gw.Hello(t, "discord", "9000")
	l.gw2.Hello(t, "discord", "9000")
	return l
}

// inbound returns gw's next inbound event, acknowledged.
func (l *discordLoop) inbound(t *testing.T, gw *relaytest.Gateway) contract.Event {
	t.Helper()
	ev, buf := gw.NextInbound(t)
	if buf != "" {
		gw.Ack(t, buf)
	}
	return ev
}

// interact posts a signed interaction body to the connector's endpoint and
// returns the status and the answer.
func (l *discordLoop) interact(t *testing.T, body []byte) (int, string) {
	t.Helper()
	return discordtest.Post(t, discordtest.InteractionRequest(l.h.URL+"/discord/interactions", l.priv, time.Now(), body))
}

// TestDiscordPromptRoundTrip: the gateway's prompt becomes buttons on the fake
// Discord; a member's press arrives as a signed interaction, is
// acknowledged with a deferred update (type 6) and reaches t1's gateway as
// a prompt_response inbound whose source is the member who clicked, never
// reaching t2. A foreign button keeps the legacy custom_id-as-text shape.
func TestDiscordPromptRoundTrip(t *testing.T) {
	l := startDiscordLoop(t)
	res := l.gw.Outbound(t, "discord", map[string]any{"op": "prompt", "chat_id": discordtest.ThreadPlan, "content": "Run `make deploy`?",
		"prompt_kind": "approval", "prompt_id": "f00dba.1234abcd", "reply_to": nil, "metadata": map[string]any{"scope_id": discordtest.GuildLab},
		"options": []any{map[string]any{"id": "once", "label": "Approve once", "style": "primary"}, map[string]any{"id": "deny", "label": "Deny", "style": "danger"}}})
	if !res.Success || res.MessageID == "" {
		t.Fatalf("prompt = %+v", res)
	}

	deny := "" // the button's custom_id: the token and its tenant's tag
	for _, m := range l.fake.Messages(discordtest.ThreadPlan) {
		for _, row := range m.Components {
			for _, b := range row.Components {
				if m.ID == res.MessageID && strings.HasPrefix(b.CustomID, "hp1:f00dba.1234abcd:deny:") {
					deny = b.CustomID
				}
			}
		}
	}
	body, err := l.fake.PressButton("8400", "press-token-8400", res.MessageID, deny, "777", "grace.h")
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
	if src.UserID.Value != "777" || src.UserName.Value != "grace.h" || src.ChatID != discordtest.ThreadPlan || src.ChatType != "thread" || src.ScopeID != discordtest.GuildLab {
		t.Fatalf("source = %+v, want the clicking user in the thread", src)
	}

	// Another integration's button: text, no prompt_response.
	foreign, _ := json.Marshal(map[string]any{"id": "8401", "application_id": "9000", "type": 3, "token": "press-token-8401",
		"guild_id": discordtest.GuildLab, "channel_id": discordtest.ChanGeneral, "data": map[string]any{"custom_id": "poll:vote:2", "component_type": 2},
		"member": map[string]any{"user": map[string]any{"id": "778", "username": "linus"}, "roles": []any{}}})
	if code, _ := l.interact(t, foreign); code != http.StatusOK {
		t.Fatalf("foreign press = %d", code)
	}
	ev = l.inbound(t, l.gw)
	if ev.PromptResponse != nil || ev.Text != "poll:vote:2" || ev.MessageType != contract.MessageText {
		t.Fatalf("foreign press = %+v", ev)
	}

	// t2 never saw either press, and cannot prompt in t1's chat.
	if res := l.gw2.Outbound(t, "discord", map[string]any{"op": "prompt", "chat_id": discordtest.ThreadPlan, "content": "q", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "a", "label": "A"}}, "reply_to": nil, "metadata": map[string]any{}}); res.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 prompt = %+v", res)
	}
	if err := l.fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", discordtest.MessageCreate("7200", discordtest.ChanOther, discordtest.GuildOther, "t2 here", true)); err != nil {
		t.Fatal(err)
	}
	if ev := l.inbound(t, l.gw2); ev.MessageID != "7200" {
		t.Fatalf("t2's first inbound = %+v, want its own message (no press)", ev)
	}
}

// TestDiscordActsThroughRelay drives react and delete from a gateway socket: t1's
// act on its chat, t2's on t1's chat are declined, and an op Discord does
// not advertise fails with unsupported_op.
func TestDiscordActsThroughRelay(t *testing.T) {
	l := startDiscordLoop(t)
	sent := l.gw.Outbound(t, "discord", map[string]any{"op": "send", "chat_id": discordtest.ChanGeneral, "content": "hi", "reply_to": nil, "metadata": map[string]any{}})
	if !sent.Success {
		t.Fatalf("send = %+v", sent)
	}
	react := map[string]any{"op": "react", "chat_id": discordtest.ChanGeneral, "message_id": sent.MessageID, "emoji": "👀", "remove": false, "metadata": map[string]any{}}
	if r := l.gw2.Outbound(t, "discord", react); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 react = %+v", r)
	}
	if r := l.gw.Outbound(t, "discord", react); !r.Success {
		t.Fatalf("react = %+v", r)
	}
	if got := l.fake.Messages(discordtest.ChanGeneral)[0].Reactions; len(got) != 1 || got[0] != "👀" {
		t.Fatalf("reactions = %v", got)
	}
	del := map[string]any{"op": "delete", "chat_id": discordtest.ChanGeneral, "message_id": sent.MessageID, "metadata": map[string]any{}}
	if r := l.gw2.Outbound(t, "discord", del); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 delete = %+v", r)
	}
	if r := l.gw.Outbound(t, "discord", del); !r.Success || len(l.fake.Messages(discordtest.ChanGeneral)) != 0 {
		t.Fatalf("delete = %+v", r)
	}
	if r := l.gw.Outbound(t, "discord", map[string]any{"op": "draft", "chat_id": discordtest.ChanGeneral, "draft_id": 1, "content": "x", "final": false, "metadata": map[string]any{}}); r.Code != contract.CodeUnsupportedOp {
		t.Fatalf("draft = %+v, want unsupported_op", r)
	}

	// Threads: created, renamed under the connector-created guard.
	create := map[string]any{"op": "thread_create", "chat_id": discordtest.ChanGeneral, "thread_name": "Handoff", "metadata": map[string]any{}}
	if r := l.gw2.Outbound(t, "discord", create); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 thread_create = %+v", r)
	}
	created := l.gw.Outbound(t, "discord", create)
	if th, ok := l.fake.Channel(created.ThreadID); !created.Success || !ok || th.Name != "Handoff" || th.ParentID != discordtest.ChanGeneral {
		t.Fatalf("thread_create = %+v, thread %+v", created, th)
	}
	rename := map[string]any{"op": "thread_rename", "chat_id": discordtest.ChanGeneral, "message_id": created.ThreadID, "thread_name": "Deploy",
		"only_if_connector_created": true, "metadata": map[string]any{}}
	if r := l.gw2.Outbound(t, "discord", rename); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 thread_rename = %+v", r)
	}
	if r := l.gw.Outbound(t, "discord", rename); !r.Success {
		t.Fatalf("thread_rename = %+v", r)
	}
	if th, _ := l.fake.Channel(created.ThreadID); th.Name != "Deploy" {
		t.Fatalf("thread renamed to %q", th.Name)
	}
}

// TestDiscordProfileRoundTrip: the profile a gateway names in an outbound's
// metadata is stamped on the next inbound of that chat (and only that
// chat); a declined outbound of another tenant stamps nothing.
func TestDiscordProfileRoundTrip(t *testing.T) {
	l := startDiscordLoop(t)
	if r := l.gw2.Outbound(t, "discord", map[string]any{"op": "send", "chat_id": discordtest.ChanDMAda, "content": "x", "reply_to": nil,
		"metadata": map[string]any{"profile": "intruder"}}); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 send = %+v", r)
	}
	if r := l.gw.Outbound(t, "discord", map[string]any{"op": "send", "chat_id": discordtest.ThreadPlan, "content": "hi", "reply_to": nil,
		"metadata": map[string]any{"scope_id": discordtest.GuildLab, "profile": "writer"}}); !r.Success {
		t.Fatalf("send = %+v", r)
	}
	if err := l.fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", discordtest.MessageCreate("7400", discordtest.ChanDMAda, "", "in the DM", false)); err != nil {
		t.Fatal(err)
	}
	if ev := l.inbound(t, l.gw); ev.Source.ChatID != discordtest.ChanDMAda || ev.Source.Profile != "" {
		t.Fatalf("inbound of the DM = %+v, want no profile", ev.Source)
	}
	if err := l.fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", discordtest.MessageCreate("7401", discordtest.ThreadPlan, discordtest.GuildLab, "in thread", true)); err != nil {
		t.Fatal(err)
	}
	if ev := l.inbound(t, l.gw); ev.Source.ChatID != discordtest.ThreadPlan || ev.Source.Profile != "writer" {
		t.Fatalf("inbound of the thread = %+v, want profile writer", ev.Source)
	}
	// A later outbound naming another profile moves the chat to it.
	if r := l.gw.Outbound(t, "discord", map[string]any{"op": "typing", "chat_id": discordtest.ThreadPlan, "metadata": map[string]any{"profile": "coder"}}); !r.Success {
		t.Fatalf("typing = %+v", r)
	}
	if err := l.fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", discordtest.MessageCreate("7402", discordtest.ThreadPlan, discordtest.GuildLab, "again", true)); err != nil {
		t.Fatal(err)
	}
	if ev := l.inbound(t, l.gw); ev.Source.Profile != "coder" {
		t.Fatalf("inbound after the profile change = %+v, want coder", ev.Source)
	}
}

const (
	loopInteraction = "aW50ZXJhY3Rpb246MTIzNDU2Nzg5MDEyMzQ1Njc4OTA-full-loop-token"
)

// TestFullLoop runs the platform behind the real relay: a Gateway event and
// a signed slash command reach tenant t1's gateway socket, its replies (send
// and follow_up) reach the fake Discord as the right REST requests, tenant
// t2 can neither see nor act on t1's chats and capabilities, the gateway's
// command manifest is reconciled, and no log line of the whole run holds
// the bot token or the interaction token.
func TestDiscordFullLoop(t *testing.T) {
	logs := discordtest.NewLogCapture()
	fake := discordtest.New(t, discordtest.Options{Token: discordtest.Token})
	discordtest.World(fake)
	fake.AddInteractionToken(loopInteraction)
	pub, priv, _ := ed25519.GenerateKey(nil)
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secretGW1}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{secretGW2}}}},
	}
	cfg := discordConfig(fake, pub)
	p, err := discord.New(cfg, platform.Deps{Log: logs.Logger(), Vault: newVault(), Key: relay.KeyFunc(tenants)})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p}, Log: logs.Logger()})
	if err := fake.WaitSession(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}

	gw := h.Dial(t, "gw1", secretGW1)
	gw.Send(t, map[string]any{"type": "hello", "platform": "discord", "botId": "9000", "command_manifest": []any{
		map[string]any{"name": "new", "description": "Start a new conversation"},
		map[string]any{"name": "model", "description": "Show or change the model", "options": []any{
			map[string]any{"type": 3, "name": "name", "description": "Model name", "required": false}}},
		map[string]any{"name": "Bad Name!", "description": "dropped"},
	}})
	d := gw.Next(t, contract.TypeDescriptor).Descriptor
	if d.Platform != "discord" || d.MaxMessageLength != 2000 || !d.HasOp("follow_up") || !d.HasOp("get_chat_info") || !d.HasOp("react") || d.HasOp("draft") {
		t.Fatalf("descriptor = %+v", d)
	}
	gw2 := h.Dial(t, "gw2", secretGW2)
	gw2.Hello(t, "discord", "9000")

	// Platform event -> t1's gateway socket -> reply -> fake REST.
	if err := fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", discordtest.MessageCreate("7100", discordtest.ThreadPlan, discordtest.GuildLab, "how is the deploy going?", true)); err != nil {
		t.Fatal(err)
	}
	ev, buf := gw.NextInbound(t)
	if buf != "" {
		gw.Ack(t, buf)
	}
	if ev.Source.ChatID != discordtest.ThreadPlan || ev.Source.ChatType != "thread" || ev.Source.ScopeID != discordtest.GuildLab || ev.MessageID != "7100" {
		t.Fatalf("inbound = %+v", ev)
	}
	res := gw.Outbound(t, "discord", map[string]any{"op": "send", "chat_id": ev.Source.ChatID, "content": "Deploy is at 80% \U0001F680",
		"reply_to": ev.MessageID, "metadata": map[string]any{}})
	if !res.Success || res.MessageID == "" {
		t.Fatalf("send = %+v", res)
	}
	req, err := fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Method == "POST" && r.Path == "/api/v9/channels/103/messages"
	})
	if err != nil || !strings.Contains(string(req.Body), `"message_reference":{"message_id":"7100"`) ||
		!strings.Contains(string(req.Body), "Deploy is at 80% \U0001F680") {
		t.Fatalf("send request = %s %v", req.Body, err)
	}

	// Slash command via the signed webhook -> inbound without the token ->
	// follow_up resolves the token from the vault.
	body := discordtest.SlashCommand("8300", loopInteraction, discordtest.GuildLab, discordtest.ChanGeneral)
	resp, err := http.DefaultClient.Do(discordtest.InteractionRequest(h.URL+"/discord/interactions", priv, time.Now(), body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("webhook status %d", resp.StatusCode)
	}
	f := gw.Next(t, contract.TypeInbound)
	if f.BufferID != "" {
		gw.Ack(t, f.BufferID)
	}
	if strings.Contains(string(f.Raw), loopInteraction) || f.Event.Text != "/model gpt" {
		t.Fatalf("slash inbound = %s", f.Raw)
	}
	key := session.Key(&f.Event.Source, session.DefaultOptions)
	followUp := map[string]any{"op": "follow_up", "session_key": key, "kind": "discord.interaction_token", "content": "Model set to gpt", "metadata": map[string]any{}}
	if res := gw.Outbound(t, "discord", followUp); !res.Success {
		t.Fatalf("follow_up = %+v", res)
	}
	if _, err := fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Method == "POST" && r.Path == "/api/v9/webhooks/9000/"+loopInteraction && strings.Contains(string(r.Body), "Model set to gpt")
	}); err != nil {
		t.Fatal(err)
	}

	// Tenant t2 can neither act on t1's chat nor wield t1's capability.
	if res := gw2.Outbound(t, "discord", map[string]any{"op": "send", "chat_id": discordtest.ThreadPlan, "content": "hijack", "reply_to": nil, "metadata": map[string]any{}}); res.Success || res.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 send to t1's chat = %+v", res)
	}
	if res := gw2.Outbound(t, "discord", followUp); res.Success || res.Code != contract.CodeCapabilityMissing {
		t.Fatalf("t2 follow_up with t1's session = %+v", res)
	}
	// t2 only ever sees its own guild's events.
	if err := fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", discordtest.MessageCreate("7101", discordtest.ChanOther, discordtest.GuildOther, "hello t2", true)); err != nil {
		t.Fatal(err)
	}
	ev2, buf2 := gw2.NextInbound(t)
	if buf2 != "" {
		gw2.Ack(t, buf2)
	}
	if ev2.Source.ScopeID != discordtest.GuildOther || ev2.MessageID != "7101" {
		t.Fatalf("t2's first inbound = %+v", ev2)
	}

	// The manifest was reconciled: a PUT with the valid entries on t1's
	// guild, and globally for DMs (t1 is the DM tenant).
	for _, path := range []string{"/api/v9/applications/9000/guilds/" + discordtest.GuildLab + "/commands", "/api/v9/applications/9000/commands"} {
		put, err := fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
			return r.Method == "PUT" && r.Path == path
		})
		if err != nil || strings.Contains(string(put.Body), "Bad Name") || !strings.Contains(string(put.Body), `"name":"model"`) {
			t.Fatalf("command PUT %s = %s %v", path, put.Body, err)
		}
	}

	// Log scan: the whole run's logs hold neither secret.
	logs.WaitFor(t, `msg="discord commands updated" platform=discord scope="guild 100"`)
	all := logs.Text()
	for _, secret := range []string{discordtest.Token, loopInteraction, secretGW1, secretGW2} {
		if strings.Contains(all, secret) {
			t.Fatalf("a secret appears in the logs")
		}
	}
	if !strings.Contains(all, "discord gateway connected") {
		t.Fatalf("capture missed the platform's logs:\n%s", all)
	}
}

// TestMediaSendMedia10MB runs send_media behind the real relay: a gateway
// uploads 10 MiB to /relay/media with its bearer and sends it; the fake
// Discord receives it byte-exact as files[0] of a multipart message with
// its payload_json, while the heap stays far below the file's size. The
// failures (unsupported kind, another tenant's, unknown, malformed and
// expired media ids, another tenant's channel) touch no REST route.
func TestDiscordMediaSendMedia10MB(t *testing.T) {
	fake := discordtest.New(t, discordtest.Options{Token: discordtest.Token})
	discordtest.World(fake)
	pub, _, _ := ed25519.GenerateKey(nil)
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{secretGW1}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{secretGW2}}}},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New(time.Now())
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://" + ln.Addr().String(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	logs := discordtest.NewLogCapture()
	p, err := discord.New(discordConfig(fake, pub), platform.Deps{Log: logs.Logger(), Vault: newVault(), Key: relay.KeyFunc(tenants), Media: store})
	if err != nil {
		t.Fatal(err)
	}
	h := relaytest.StartWith(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p}, Log: logs.Logger()},
		relaytest.Options{Listener: ln, Routes: func(srv *relay.Server) map[string]http.Handler {
			return media.Routes(store.Handler(media.HandlerConfig{Auth: srv}))
		}})
	if err := fake.WaitSession(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	gw := h.Dial(t, "gw1", secretGW1)
	if d := gw.Hello(t, "discord", "9000"); !d.HasOp("send_media") {
		t.Fatalf("descriptor without send_media: %v", d.SupportedOps)
	}
	tok1, tok2 := relaytest.Token("gw1", secretGW1, time.Now()), relaytest.Token("gw2", secretGW2, time.Now())
	upload := func(token string, seed uint64, size int64, name string) string {
		t.Helper()
		status, id := mediatest.Upload(t, h.URL, token, mediatest.Content(seed, size), size, "video/mp4", name)
		if status != http.StatusOK {
			t.Fatalf("upload: HTTP %d", status)
		}
		return h.URL + "/relay/media/" + id
	}
	sendMedia := func(chat, kind, url, caption string) contract.Result {
		return gw.Outbound(t, "discord", map[string]any{"op": "send_media", "chat_id": chat, "media_kind": kind,
			"source_url": url, "content": caption, "reply_to": "7100", "metadata": map[string]any{}, "filename": "clip.mp4"})
	}

	const size = 10 << 20
	want, _ := mediatest.SHA256(mediatest.Content(11, size))
	peak := mediatest.StartHeapPeak(5 * time.Millisecond)
	url := upload(tok1, 11, size, "upload.bin")
	res := sendMedia(discordtest.ChanGeneral, "video", url, "the clip "+strings.Repeat("é", 2000))
	heap := peak.Stop()
	t.Logf("10 MiB send_media (gateway upload, multipart POST to Discord): heap in use peaked %s above baseline", mediatest.MiB(heap))
	if !res.Success || res.MessageID == "" {
		t.Fatalf("send_media = %+v", res)
	}
	msgs := fake.Messages(discordtest.ChanGeneral)
	if len(msgs) != 2 || msgs[0].ID != res.MessageID || len(msgs[0].Attachments) != 1 || msgs[0].ReplyTo != "7100" ||
		!strings.HasPrefix(msgs[0].Content, "the clip") || len(msgs[1].Attachments) != 0 {
		t.Fatalf("messages %+v", msgs)
	}
	a := msgs[0].Attachments[0]
	if a.Field != "files[0]" || a.Filename != "clip.mp4" || a.ContentType != "video/mp4" || a.Size != size || a.SHA256 != want {
		t.Fatalf("attachment %+v, want %d bytes sha256 %s", a, size, want)
	}
	if heap > 8<<20 {
		t.Errorf("heap grew %s during a 10 MiB transfer: the file was held in memory", mediatest.MiB(heap))
	}

	// A 429 on the multipart POST sends the whole form again.
	small := upload(tok1, 12, 2048, "s.bin")
	var limited atomic.Bool
	fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if limited.Load() || r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
			return false
		}
		limited.Store(true)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"message":"You are being rate limited.","retry_after":0.01,"global":false}`))
		return true
	})
	if res := sendMedia(discordtest.ThreadPlan, "image", small, ""); !res.Success {
		t.Fatalf("send_media after a 429: %+v", res)
	}
	fake.SetHook(nil)
	smallSum, _ := mediatest.SHA256(mediatest.Content(12, 2048))
	if msgs := fake.Messages(discordtest.ThreadPlan); !limited.Load() || len(msgs) != 1 || len(msgs[0].Attachments) != 1 ||
		msgs[0].Attachments[0].Size != 2048 || msgs[0].Attachments[0].SHA256 != smallSum {
		t.Fatalf("after a 429 (hit %v): messages %+v", limited.Load(), msgs)
	}

	// A caption-less send of each kind is one attachment message.
	for _, kind := range platform.MediaKinds {
		if res := sendMedia(discordtest.ChanRandom, kind, small, ""); !res.Success {
			t.Errorf("%s: %+v", kind, res)
		}
	}
	if msgs := fake.Messages(discordtest.ChanRandom); len(msgs) != len(platform.MediaKinds) || msgs[0].Content != "" {
		t.Errorf("messages %+v", msgs)
	}

	before := len(fake.Requests())
	foreign := upload(tok2, 13, 100, "f.bin")
	expiring := upload(tok1, 14, 100, "e.bin")
	check := func(name, chat, kind, url, code string) {
		t.Helper()
		if res := sendMedia(chat, kind, url, "x"); res.Success || res.Code != code {
			t.Errorf("%s: %+v, want code %s", name, res, code)
		}
	}
	check("unsupported kind", discordtest.ChanGeneral, "gif", small, contract.CodeBadRequest)
	check("another tenant's media id", discordtest.ChanGeneral, "image", foreign, contract.CodeBadRequest)
	check("unknown media id", discordtest.ChanGeneral, "image", h.URL+"/relay/media/"+strings.Repeat("f", 32), contract.CodeBadRequest)
	check("malformed media id", discordtest.ChanGeneral, "image", h.URL+"/relay/media/%2e%2e", contract.CodeBadRequest)
	check("another tenant's channel", discordtest.ChanOther, "image", small, contract.CodeEgressDeclined)
	clk.Advance(media.DefaultTTL)
	check("expired media id", discordtest.ChanGeneral, "image", expiring, contract.CodeBadRequest)
	if after := len(fake.Requests()); after != before {
		t.Errorf("%d REST requests for refused send_media", after-before)
	}
	if strings.Contains(logs.Text(), discordtest.Token) {
		t.Error("the bot token reached a log line")
	}
}

// TestAttachmentsPassThrough: a Discord attachment reaches the gateway as
// its CDN URL in media_urls and media[], unchanged (it is public).
func TestDiscordAttachmentsPassThrough(t *testing.T) {
	l := startDiscordLoop(t)
	m := discordtest.MessageCreate("7500", discordtest.ChanGeneral, discordtest.GuildLab, "look at this", true)
	cdn := "https://cdn.discordapp.com/attachments/101/7500/graph.png?ex=1&is=2&hm=3"
	m["attachments"] = []any{map[string]any{"id": "9100", "filename": "graph.png", "size": 20480,
		"url": cdn, "proxy_url": cdn, "content_type": "image/png", "width": 640, "height": 480}}
	if err := l.fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", m); err != nil {
		t.Fatal(err)
	}
	ev, buf := l.gw.NextInbound(t)
	if buf != "" {
		l.gw.Ack(t, buf)
	}
	want := contract.Media{URL: cdn, MIME: "image/png", Kind: "image", Size: 20480, Filename: "graph.png"}
	if len(ev.MediaURLs) != 1 || ev.MediaURLs[0] != cdn || len(ev.Media) != 1 || ev.Media[0] != want {
		t.Fatalf("media_urls %v, media %+v, want %+v", ev.MediaURLs, ev.Media, want)
	}
}

// TestChannelContext runs channel context behind the real relay: guild
// messages the mention gates held back ride the channel's next delivered
// message (auto-threaded here) as its context, oldest first, once; another
// channel's, an edit's, an ignored channel's and another tenant's messages
// never do; a DM carries none; the descriptor says supports_context.
func TestDiscordChannelContext(t *testing.T) {
	l := startDiscordLoopWith(t, func(cfg *discord.Config) {
		cfg.Tenants = map[string]discord.TenantConfig{"t1": {IgnoredChannels: []string{discordtest.ChanRandom}}}
	})
	fake, p, gw, gw2 := l.fake, l.p, l.gw, l.gw2
	if d := gw.Hello(t, "discord", "9000"); !d.SupportsContext {
		t.Fatalf("descriptor without supports_context: %+v", d)
	}
	dispatch := func(typ string, m map[string]any) {
		t.Helper()
		if err := fake.Dispatch(waitCtx(t), typ, m); err != nil {
			t.Fatal(err)
		}
	}
	next := func(g *relaytest.Gateway) contract.Event {
		t.Helper()
		ev, buf := g.NextInbound(t)
		if buf != "" {
			g.Ack(t, buf)
		}
		return ev
	}

	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7200", discordtest.ChanGeneral, discordtest.GuildLab, "the build is red again", false))
	others := discordtest.MessageCreate("7201", discordtest.ChanGeneral, discordtest.GuildLab, "<@777> can you look?", false)
	others["author"] = map[string]any{"id": "502", "username": "grace.h", "global_name": "Grace", "discriminator": "0"}
	others["mentions"] = []any{map[string]any{"id": "777", "username": "linus"}}
	dispatch("MESSAGE_CREATE", others)
	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7202", discordtest.ThreadPlan, discordtest.GuildLab, "lunch?", false))
	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7203", discordtest.ChanRandom, discordtest.GuildLab, "in an ignored channel", false))
	edited := discordtest.MessageCreate("7200", discordtest.ChanGeneral, discordtest.GuildLab, "the build is red again (edited)", false)
	edited["edited_timestamp"] = "2026-01-15T12:01:00.000000+00:00"
	dispatch("MESSAGE_UPDATE", edited)
	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7300", discordtest.ChanOther, discordtest.GuildOther, "t2 chatter", false))

	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7204", discordtest.ChanGeneral, discordtest.GuildLab, "what broke?", true))
	ev := next(gw)
	want := []contract.ContextMessage{
		{Text: "the build is red again", Source: contract.ContextAuthor{UserName: "Ada", UserID: discordtest.UserAda}},
		{Text: "<@777> can you look?", Source: contract.ContextAuthor{UserName: "Grace", UserID: "502"}},
	}
	if ev.MessageID != "7204" || !reflect.DeepEqual(ev.Context, want) {
		t.Fatalf("inbound %s with context %+v, want %+v", ev.MessageID, ev.Context, want)
	}
	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7205", discordtest.ChanGeneral, discordtest.GuildLab, "and now?", true))
	if ev := next(gw); ev.MessageID != "7205" || ev.Context != nil {
		t.Fatalf("second inbound %s carries context again: %+v", ev.MessageID, ev.Context)
	}
	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7400", discordtest.ChanDMAda, "", "hi in private", false))
	if ev := next(gw); ev.MessageID != "7400" || ev.Context != nil {
		t.Fatalf("DM %s carries context %+v", ev.MessageID, ev.Context)
	}
	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7301", discordtest.ChanOther, discordtest.GuildOther, "and t2?", true))
	ev2 := next(gw2)
	if len(ev2.Context) != 1 || ev2.Context[0].Text != "t2 chatter" {
		t.Fatalf("t2 inbound context %+v, want its own chatter only", ev2.Context)
	}

	// Bindings come before author links: Grace is linked to t2, but her
	// messages in t1's guild are t1's, held back by t1's mention rule as
	// anyone's, and nothing of that channel ever reaches t2.
	if err := p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: discordtest.GuildLab, Tenant: "t1"},
		{Kind: platform.BindGuild, ID: discordtest.GuildOther, Tenant: "t2"}, {Kind: platform.BindUser, ID: "502", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7206", discordtest.ChanGeneral, discordtest.GuildLab, "t1's plan, not for t2", false))
	grace := discordtest.MessageCreate("7207", discordtest.ChanGeneral, discordtest.GuildLab, "hello from Grace", false)
	grace["author"] = others["author"]
	dispatch("MESSAGE_CREATE", grace)
	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7208", discordtest.ChanGeneral, discordtest.GuildLab, "plan?", true))
	if ev := next(gw); ev.MessageID != "7208" || len(ev.Context) != 2 || ev.Context[0].Text != "t1's plan, not for t2" || ev.Context[1].Text != "hello from Grace" {
		t.Fatalf("t1 got %s with context %+v", ev.MessageID, ev.Context)
	}
	dispatch("MESSAGE_CREATE", discordtest.MessageCreate("7302", discordtest.ChanOther, discordtest.GuildOther, "t2 again", true))
	if ev := next(gw2); ev.MessageID != "7302" || ev.Context != nil {
		t.Fatalf("t2 got %s with context %+v, want its own 7302 alone", ev.MessageID, ev.Context)
	}
}

// TestChannelContextOff: with channel_context off, held-back messages are
// dropped as natively and the next delivered message carries no context.
func TestDiscordChannelContextOff(t *testing.T) {
	l := startDiscordLoopWith(t, func(cfg *discord.Config) {
		cfg.Tenants = map[string]discord.TenantConfig{"t1": {ChannelContext: new(false)}}
	})
	for _, m := range []map[string]any{
		discordtest.MessageCreate("7600", discordtest.ChanGeneral, discordtest.GuildLab, "chatter", false),
		discordtest.MessageCreate("7601", discordtest.ChanGeneral, discordtest.GuildLab, "question", true),
	} {
		if err := l.fake.Dispatch(waitCtx(t), "MESSAGE_CREATE", m); err != nil {
			t.Fatal(err)
		}
	}
	if ev := l.inbound(t, l.gw); ev.MessageID != "7601" || ev.Context != nil {
		t.Fatalf("inbound %s with context %+v, want none", ev.MessageID, ev.Context)
	}
}

// newVault is a vault for one test's platform: a chat grant (or an
// interaction token) one test stores must not open a chat to a tenant in
// another, nor in the same test's next run under -count. Each vault keeps
// a sweeper goroutine the leak check does not watch.
func newVault() *vault.Memory { return vault.NewMemory(vault.Config{}) }

// TestDiscordClaimedThreadRename: a tenant that claimed a channel of a
// guild no tenant is bound to may create a thread there and rename it, as
// Authorize (claims and grants, not bindings alone) lets it act in both;
// the other tenant may rename it neither naming the claimed channel nor
// from its own channel, and the thread keeps its name.
func TestDiscordClaimedThreadRename(t *testing.T) {
	l := startDiscordLoopWith(t, func(c *discord.Config) { c.Guilds = map[string]string{discordtest.GuildLab: "t1"} })
	if err := l.p.Bind([]platform.Binding{
		{Kind: platform.BindGuild, ID: discordtest.GuildLab, Tenant: "t1"},
		{Kind: platform.BindScope, ID: discordtest.ChanOther, Tenant: "t2", Space: discordtest.GuildOther},
	}); err != nil {
		t.Fatal(err)
	}
	create := map[string]any{"op": "thread_create", "chat_id": discordtest.ChanOther, "thread_name": "Claimed", "metadata": map[string]any{}}
	if r := l.gw.Outbound(t, "discord", create); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1 thread_create in t2's claimed channel = %+v", r)
	}
	created := l.gw2.Outbound(t, "discord", create)
	if !created.Success || created.ThreadID == "" {
		t.Fatalf("t2 thread_create in its claimed channel = %+v", created)
	}
	rename := func(chat, name string) map[string]any {
		return map[string]any{"op": "thread_rename", "chat_id": chat, "message_id": created.ThreadID, "thread_name": name, "metadata": map[string]any{}}
	}
	for _, chat := range []string{discordtest.ChanOther, discordtest.ChanGeneral} {
		if r := l.gw.Outbound(t, "discord", rename(chat, "t1 was here")); r.Code != contract.CodeEgressDeclined {
			t.Fatalf("t1 thread_rename of t2's thread naming %s = %+v, want egress_declined", chat, r)
		}
	}
	if th, _ := l.fake.Channel(created.ThreadID); th.Name != "Claimed" {
		t.Fatalf("t1 renamed t2's thread to %q", th.Name)
	}
	if r := l.gw2.Outbound(t, "discord", rename(discordtest.ChanOther, "Renamed")); !r.Success {
		t.Fatalf("t2 thread_rename of its thread in its claimed channel = %+v", r)
	}
	if th, _ := l.fake.Channel(created.ThreadID); th.Name != "Renamed" {
		t.Fatalf("t2's thread is named %q, want Renamed", th.Name)
	}
}
