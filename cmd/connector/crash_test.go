package main

// Crash tests: the connector binary runs as a child process on the embedded
// store, against the fake Bot API, the fake Discord and real nexscope
// clients on loopback, and is killed (SIGKILL, or SIGTERM) while events
// confirmed to their sources wait for a gateway, and again while a gateway
// is part way through their replay. Every confirmed event must reach the
// gateway after the restart, in order per session, with the bufferId it had
// before, and no acknowledged one may come back (docs/durability.md).

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/platform/discord/discordtest"
	"connector/platform/slack/slacktest"
	"connector/platform/telegram/telegramtest"
	"connector/relay/relaytest"
	"connector/session"
)

// crashWait bounds every wait of the crash tests.
const crashWait = 30 * time.Second

// crashEvents is how many events each scenario confirms while the gateway
// is away, over crashSessions sessions; crashAcked of them are acknowledged
// before the second kill.
const (
	crashEvents   = 60
	crashSessions = 4
	crashAcked    = 25
)

const (
	crashGatewaySecret = "crash-gw-secret-1f0e"
	crashDiscordToken  = "MTQwMDAwMDAwMDAwMDAwMDAw.crash-discord-token"
	crashTelegramToken = "123456:CRASH-telegram-token"
	crashWebhookSecret = "crash-tg-webhook-secret"
	crashNexscopeToken = "crash-nexscope-token"
)

// ingestPath is one way events reach the connector, with the confirmation
// its source waits for.
type ingestPath struct {
	name    string
	polling bool // Telegram long polling instead of its webhook
	// confirm sends events [from, to) and returns once each was confirmed
	// to its source. Event i belongs to session i%crashSessions and carries
	// i as the last word of its text.
	confirm func(t *testing.T, r *crashRig, from, to int)
}

var ingestPaths = []ingestPath{
	{name: "telegram_webhook", confirm: confirmTelegramWebhook},
	{name: "telegram_polling", polling: true, confirm: confirmTelegramPolling},
	{name: "discord_interactions", confirm: confirmDiscordInteractions},
	{name: "discord_gateway", confirm: confirmDiscordGateway},
	{name: "nexscope", confirm: confirmNexscope},
	{name: "slack_events", confirm: confirmSlackEvents},
}

// TestCrashKeepsConfirmedInbound runs every ingest path through two kills:
// one while the gateway is away, one while it is part way through the
// replay, with SIGKILL and with SIGTERM.
func TestCrashKeepsConfirmedInbound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	bin := connectorBinary(t)
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		for _, path := range ingestPaths {
			t.Run(path.name+"/"+strings.ToLower(sig.String()[:4]), func(t *testing.T) {
				crashScenario(t, newCrashRig(t, bin, path.polling), path, sig)
			})
		}
	}
}

// crashScenario: N events confirmed with the gateway away; kill; restart;
// the gateway gets all N and acknowledges some; kill; restart; it gets
// exactly the others, with the same bufferIds; a live event follows them.
func crashScenario(t *testing.T, r *crashRig, path ingestPath, sig syscall.Signal) {
	r.start(t)
	path.confirm(t, r, 0, crashEvents)
	r.stop(t, sig)

	r.start(t)
	gw := r.gateway(t)
	first := receive(t, gw, crashEvents)
	checkReplay(t, first, allIndexes(crashEvents))
	if path.name == "discord_interactions" {
		r.followUp(t, gw, first[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	acked := map[int]bool{}
	for _, f := range first[:crashAcked] {
		if err := gw.Ack(ctx, f.BufferID); err != nil {
			t.Fatal(err)
		}
		acked[f.index] = true
	}
	r.waitMetric(t, "connector_ledger_removed_total", "", crashAcked)
	r.stop(t, sig)

	r.start(t)
	gw = r.gateway(t)
	var rest []int
	ids := map[int]string{}
	for _, f := range first {
		ids[f.index] = f.BufferID
		if !acked[f.index] {
			rest = append(rest, f.index)
		}
	}
	second := receive(t, gw, len(rest))
	checkReplay(t, second, rest)
	for _, f := range second {
		if f.BufferID != ids[f.index] {
			t.Errorf("event %d came back as bufferId %q, was %q", f.index, f.BufferID, ids[f.index])
		}
		if err := gw.Ack(ctx, f.BufferID); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing acknowledged comes back: the next frame is a new event.
	path.confirm(t, r, crashEvents, crashEvents+1)
	if live := receive(t, gw, 1); live[0].index != crashEvents {
		t.Fatalf("after the replay the gateway got event %d, want the new event %d", live[0].index, crashEvents)
	}
	r.stop(t, syscall.SIGTERM)
}

// replayed is one inbound frame the gateway got.
type replayed struct {
	relaytest.Frame
	index   int
	session string
}

// receive reads n inbound frames.
func receive(t *testing.T, gw *relaytest.Client, n int) []replayed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	out := make([]replayed, 0, n)
	for len(out) < n {
		f, err := gw.Next(ctx, contract.TypeInbound)
		if err != nil {
			t.Fatalf("got %d of %d inbound frames, then: %v", len(out), n, err)
		}
		words := strings.Fields(f.Event.Text)
		i, err := strconv.Atoi(words[len(words)-1])
		if err != nil {
			t.Fatalf("inbound %q does not end with an event number", f.Event.Text)
		}
		out = append(out, replayed{Frame: f, index: i, session: session.Key(&f.Event.Source, session.DefaultOptions)})
	}
	return out
}

// checkReplay checks that got holds exactly the events want, once each,
// with distinct bufferIds, and each session's in increasing order.
func checkReplay(t *testing.T, got []replayed, want []int) {
	t.Helper()
	var indexes []int
	ids := map[string]bool{}
	last := map[string]int{}
	for _, f := range got {
		indexes = append(indexes, f.index)
		if ids[f.BufferID] || f.BufferID == "" {
			t.Errorf("bufferId %q repeated or empty", f.BufferID)
		}
		ids[f.BufferID] = true
		if prev, ok := last[f.session]; ok && f.index <= prev {
			t.Errorf("session %s: event %d came after %d", f.session, f.index, prev)
		}
		last[f.session] = f.index
	}
	// The sessions of the events wanted: after some were acknowledged, a
	// session whose events all came first may have none left.
	sessions := map[int]bool{}
	for _, i := range want {
		sessions[i%crashSessions] = true
	}
	if len(last) != len(sessions) {
		t.Errorf("events came in %d sessions, want %d", len(last), len(sessions))
	}
	slices.Sort(indexes)
	want = slices.Sorted(slices.Values(want)) // sessions (chats) are ingested side by side: in order per session only
	if !slices.Equal(indexes, want) {
		t.Fatalf("replayed events %v, want %v", indexes, want)
	}
}

func allIndexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// crashRig is a connector configuration on its own data directory and
// fakes, started and stopped as a child process.
type crashRig struct {
	bin, dir, config string
	env              []string
	dfake            *discordtest.Server
	tfake            *telegramtest.Server
	sfake            *slacktest.Server
	priv             ed25519.PrivateKey

	child    *child
	sessions int // Discord Gateway sessions the fake saw
	queued   int // discord inbound this child queued, for confirmDiscordGateway
	member   *websocket.Conn
}

func newCrashRig(t *testing.T, bin string, polling bool) *crashRig {
	r := &crashRig{bin: bin, dir: t.TempDir()}
	r.dfake = discordtest.New(t, discordtest.Options{Token: crashDiscordToken})
	r.dfake.AddGuild(discordtest.Guild{ID: "500", Name: "Lab"},
		discordtest.Channel{ID: "501", Type: 0, GuildID: "500", Name: "general"})
	r.tfake = telegramtest.New(t, crashTelegramToken)
	r.sfake = slacktest.New(t)
	r.sfake.AddTeam(bbTeamA)
	r.sfake.AddUser(bbTeamA.ID, slacktest.User{ID: bbAda, Name: "ada", DisplayName: "Ada"})
	for i := range crashSessions {
		r.sfake.AddChannel(bbTeamA.ID, slacktest.Channel{ID: crashSlackDM(i), IsIM: true, Peer: bbAda})
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	r.priv = priv
	telegram := fmt.Sprintf("  api_server_url: %s\n  chats: {\"42\": t1, \"43\": t1, \"44\": t1, \"45\": t1, \"-4001\": t1}\n", r.tfake.URL)
	if polling {
		telegram += "  poll_timeout: 2s\n"
	} else {
		telegram += "  webhook_url: https://connector.example/telegram/webhook\n"
	}
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
ops: {listen: 127.0.0.1:0}
shutdown_grace: 10s
log: {level: debug, format: json}
tenants:
  - id: t1
    gateways:
      - id: gw1
        secrets: [%q]
discord:
  public_key: %s
  application_id: "9000"
  api_base_url: %s
  gateway_url: %s
  guilds: {"500": t1}
  tenants: {t1: {free_response_channels: ["*"]}}
telegram:
%snexscope:
  rooms: [{name: default, tenant: t1}]
slack:
  api_url: %s
  teams: {%q: t1}
`, crashGatewaySecret, hex.EncodeToString(pub), r.dfake.URL, r.dfake.GatewayURL, telegram, r.sfake.URL, bbTeamA.ID)
	r.config = filepath.Join(t.TempDir(), "connector.yaml")
	if err := os.WriteFile(r.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env = []string{
		"PATH=" + os.Getenv("PATH"),
		"DISCORD_BOT_TOKEN=" + crashDiscordToken, "TELEGRAM_BOT_TOKEN=" + crashTelegramToken,
		"TELEGRAM_WEBHOOK_SECRET=" + crashWebhookSecret, "NEXSCOPE_TOKEN=" + crashNexscopeToken,
		"SLACK_SIGNING_SECRET=" + slackSecret, "SLACK_BOT_TOKEN=" + bbTeamA.Token,
	}
	return r
}

// start runs the connector on the rig's data directory and waits until it
// listens, its Discord Gateway session is up and every platform is ready
// (a webhook before its platform runs is answered 503, to be retried).
func (r *crashRig) start(t *testing.T) {
	t.Helper()
	r.child, r.queued, r.member = startChild(t, r.bin, r.env, r.config, r.dir, false), 0, nil
	r.sessions++
	ctx, cancel := r.child.alive()
	defer cancel()
	if r.dfake.WaitSession(ctx, r.sessions) != nil {
		t.Fatalf("waiting for Discord Gateway session %d: %v", r.sessions, context.Cause(ctx))
	}
	r.child.waitReady(t)
}

// stop ends the child with sig and waits for it: SIGTERM must end it
// cleanly, SIGKILL at once.
func (r *crashRig) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	c := r.child
	if r.member != nil {
		_ = r.member.CloseNow()
	}
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
	case <-time.After(crashWait):
		t.Fatalf("timed out after %v waiting for the connector to exit on %v", crashWait, sig)
	}
	if sig == syscall.SIGTERM && c.err != nil {
		t.Fatalf("connector exited with %v on SIGTERM\n%s", c.err, tail(c.stderr.String(), 40))
	}
}

// gateway connects a gateway for every platform.
func (r *crashRig) gateway(t *testing.T) *relaytest.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	gw, err := relaytest.Dial(ctx, "ws://"+r.child.addr+"/relay", relaytest.Token("gw1", crashGatewaySecret, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.CloseNow() })
	for _, p := range []string{"discord", "telegram", "nexscope", "slack"} {
		if _, err := gw.Hello(ctx, p, ""); err != nil {
			t.Fatalf("hello %s: %v", p, err)
		}
	}
	return gw
}

// followUp answers the interaction of f after the restart: its token came
// back from the store.
func (r *crashRig) followUp(t *testing.T, gw *relaytest.Client, f replayed) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	res, err := gw.Outbound(ctx, "discord", map[string]any{"op": "follow_up", "session_key": f.session,
		"kind": "discord.interaction_token", "content": "answered after a restart", "metadata": map[string]any{}})
	if err != nil || !res.Success {
		t.Fatalf("follow_up after a restart: %+v %v", res, err)
	}
}

// metric returns the sum of the samples of name whose labels contain
// labels, from the child's /metrics.
func (r *crashRig) metric(t *testing.T, name, labels string) float64 {
	t.Helper()
	return r.child.metric(t, name, labels)
}

// metric returns the sum of the samples of name whose labels contain
// labels, from the child's /metrics.
func (c *child) metric(t *testing.T, name, labels string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + c.ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") || !strings.Contains(line, labels) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// waitMetric polls /metrics until name (with labels) reaches want.
func (r *crashRig) waitMetric(t *testing.T, name, labels string, want float64) {
	t.Helper()
	deadline := time.Now().Add(crashWait)
	for {
		got := r.metric(t, name, labels)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s{%s} to reach %v (at %v)", crashWait, name, labels, want, got)
		}
		select {
		case <-r.child.exited:
			t.Fatalf("connector exited while waiting for %s", name)
		case <-time.After(20 * time.Millisecond): // polling interval of another process's counter
		}
	}
}

// post sends req and checks its status.
func post(t *testing.T, req *http.Request, want int, what string) string {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s: %d %s, want %d", what, resp.StatusCode, body, want)
	}
	return string(body)
}

// telegramUpdate is update i: a private message in chat 42+session.
func telegramUpdate(i int) string {
	chat := 42 + i%crashSessions
	return fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1767225300,"chat":{"id":%d,"type":"private","first_name":"U"},"from":{"id":%d,"is_bot":false,"first_name":"U"},"text":"evt %d"}}`,
		1000+i, 1+i, chat, chat, i)
}

// confirmTelegramWebhook: each update is confirmed by the webhook's 200.
func confirmTelegramWebhook(t *testing.T, r *crashRig, from, to int) {
	for i := from; i < to; i++ {
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.child.addr+"/telegram/webhook", strings.NewReader(telegramUpdate(i)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", crashWebhookSecret)
		post(t, req, http.StatusOK, fmt.Sprintf("telegram webhook update %d", i))
	}
}

// confirmTelegramPolling: the updates are confirmed once a getUpdates asks
// for an offset past the last of them.
func confirmTelegramPolling(t *testing.T, r *crashRig, from, to int) {
	for i := from; i < to; i++ {
		r.tfake.Enqueue([]byte(telegramUpdate(i)))
	}
	last := int64(1000 + to - 1)
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	for n := 1; ; n++ {
		calls, err := r.tfake.WaitCalls(ctx, "getUpdates", n)
		if err != nil {
			t.Fatalf("timed out after %v waiting for getUpdates to confirm update %d", crashWait, last)
		}
		if off, _ := strconv.ParseInt(calls[n-1].Form["offset"], 10, 64); off > last {
			return
		}
	}
}

// confirmDiscordInteractions: each slash command, from user 70+session, is
// confirmed by its deferred response; its token is one the fake accepts
// for a follow-up.
func confirmDiscordInteractions(t *testing.T, r *crashRig, from, to int) {
	for i := from; i < to; i++ {
		token := fmt.Sprintf("crash-interaction-token-%d", i)
		r.dfake.AddInteractionToken(token)
		user := strconv.Itoa(70 + i%crashSessions)
		body := fmt.Sprintf(`{"type":2,"id":"%d","application_id":"9000","token":%q,"guild_id":"500","channel_id":"501",`+
			`"channel":{"id":"501","type":0,"guild_id":"500","name":"general"},"member":{"user":{"id":%q,"username":"u%s"}},`+
			`"data":{"id":"1","name":"evt","type":1,"options":[{"type":3,"name":"n","value":"%d"}]}}`, 8000+i, token, user, user, i)
		req := discordtest.InteractionRequest("http://"+r.child.addr+"/discord/interactions", r.priv, time.Now(), []byte(body))
		if ack := post(t, req, http.StatusOK, fmt.Sprintf("discord interaction %d", i)); ack != `{"type":5}` {
			t.Fatalf("interaction %d answered %s, want the deferred response", i, ack)
		}
	}
}

// confirmDiscordGateway: MESSAGE_CREATE has no confirmation but the
// Gateway's own sequence (RESUME); the events count once the connector
// reports them queued.
func confirmDiscordGateway(t *testing.T, r *crashRig, from, to int) {
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	for i := from; i < to; i++ {
		user := strconv.Itoa(70 + i%crashSessions)
		m := map[string]any{
			"id": strconv.Itoa(7000 + i), "channel_id": "501", "guild_id": "500", "content": fmt.Sprintf("evt %d", i),
			"type": 0, "timestamp": "2026-01-15T12:00:00.000000+00:00", "author": map[string]any{"id": user, "username": "u" + user},
			"member": map[string]any{"roles": []any{}}, "mentions": []any{}, "attachments": []any{}, "embeds": []any{},
		}
		if err := r.dfake.Dispatch(ctx, "MESSAGE_CREATE", m); err != nil {
			t.Fatalf("dispatch message %d: %v", i, err)
		}
	}
	r.queued += to - from
	r.waitMetric(t, "connector_inbound_events_total", `outcome="queued",platform="discord"`, float64(r.queued))
}

// confirmNexscope: each msg to the bot, in thread t<session>, is confirmed
// by an ack that lists the bot as delivered.
func confirmNexscope(t *testing.T, r *crashRig, from, to int) {
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if r.member == nil {
		m, _, err := websocket.Dial(ctx, "ws://"+r.child.addr+"/ws?name=ada&v=1&token="+crashNexscopeToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.member = m
	}
	for i := from; i < to; i++ {
		id := fmt.Sprintf("m%d", i)
		msg := fmt.Sprintf(`{"type":"msg","msgId":%q,"from":"ada","to":["hermes"],"role":"user","threadId":"t%d","text":"evt %d"}`,
			id, i%crashSessions, i)
		if err := r.member.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		for {
			_, data, err := r.member.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for the ack of %s: %v", id, err)
			}
			var ack struct {
				Type, MsgID string
				Delivered   []string
			}
			if json.Unmarshal(data, &ack) != nil || ack.Type != "ack" || ack.MsgID != id {
				continue
			}
			if !slices.Contains(ack.Delivered, "hermes") {
				t.Fatalf("ack of %s does not list the bot as delivered: %s", id, data)
			}
			break
		}
	}
}

// crashSlackDM is the DM channel of session i (Ada's DMs with the app).
func crashSlackDM(i int) string { return fmt.Sprintf("D0CRASH%03d", i%crashSessions) }

// slackCrashEvent is event i: a reply in the thread of session i%4's DM,
// so a session's events share its thread.
func slackCrashEvent(i int) []byte {
	session := i % crashSessions
	ts := fmt.Sprintf("1768491%03d.%06d", i, i)
	ev := slacktest.MessageEvent(bbTeamA.ID, crashSlackDM(session), bbAda, ts, fmt.Sprintf("1768400000.%06d", session), fmt.Sprintf("evt %d", i))
	return slacktest.Envelope(bbTeamA.ID, bbTeamA.BotUser, fmt.Sprintf("EvCrash%d", i), ev)
}

// confirmSlackEvents: each event is confirmed by the Events API's 200.
func confirmSlackEvents(t *testing.T, r *crashRig, from, to int) {
	for i := from; i < to; i++ {
		req := slacktest.SignedRequest("http://"+r.child.addr+"/slack/events", slackSecret, time.Now(), "application/json", slackCrashEvent(i))
		post(t, req, http.StatusOK, fmt.Sprintf("slack event %d", i))
	}
}
