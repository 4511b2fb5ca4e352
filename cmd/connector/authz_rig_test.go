package main

// The rig of TestAuthorizationMatrix (authz_matrix_test.go): one connector
// binary (the adminRig's child, connectorBinary's build) on loopback with
// the fake Discord, the fake Bot API and real nexscope members; two
// tenants, each with its chats on every platform and every way a chat
// becomes a tenant's, an admin-created and a provisioned gateway, an
// enrollment token, a linked user, an interaction token and a media
// object; and the recorders the rows read: every frame each gateway
// connection receives, every frame a nexscope member in each room
// receives, every request the fakes see.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/descriptor"
	"connector/idtoken/idtokentest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/slack/slacktest"
	"connector/platform/telegram/telegramtest"
	"connector/platform/whatsapp/whatsapptest"
	"connector/relay/relaytest"
)

// mxAdminGW and mxProvGW index a tenant's connected gateways: made through
// the admin API, and provisioned with an identity token.
const (
	mxAdminGW = 0
	mxProvGW  = 1
)

// matrixConfig is the connector's config: tenants ta (n=1) and tb (n=2),
// each owning Discord guild 5n0 (channel 5n1), Telegram chat -100n,
// WhatsApp business number 106n, Slack workspace TMX0000n (channel
// CMX0000n) and nexscope room room-<x> by configuration; ta is Discord's
// dm_tenant, so tb's linked user's Discord DM is where rule 4 must not
// reach (docs/security.md "Chat ownership"). The admin API, provisioning and
// the management plane add the rest in setup (mxTenant).
const matrixConfig = `listen: 127.0.0.1:0
ops: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0}
log: {level: debug, format: json}
tenants:
  - id: ta
  - id: tb
discord:
  public_key: %s
  application_id: "9000"
  api_base_url: %s
  gateway_url: %s
  guilds: {"510": ta, "520": tb}
  dm_tenant: ta
  command_sync_debounce: 50ms
  tenants:
    ta: {free_response_channels: ["*"], auto_thread: false}
    tb: {free_response_channels: ["*"], auto_thread: false}
telegram:
  api_server_url: %s
  webhook_url: https://connector.example/telegram/webhook
  chats: {"-1001": ta, "-1002": tb}
  tenants:
    ta: {require_mention: false}
    tb: {require_mention: false}
whatsapp:
  api_url: %s
  phone_numbers: {"1061": ta, "1062": tb}
  allow_all_users: true
slack:
  api_url: %s
  teams: {"TMX00001": ta, "TMX00002": tb}
  tenants:
    ta: {require_mention: false}
    tb: {require_mention: false}
nexscope:
  rooms: [{name: room-ta, tenant: ta}, {name: room-tb, tenant: tb}]
enroll: {public_key_file: %q, audience: connector}
`

// The WhatsApp credentials of the matrix (WHATSAPP_* variables).
const (
	mxWAAppSecret   = "mx-wa-app-secret"
	mxWAVerifyToken = "mx-wa-verify-token"
	mxWAAccessToken = "mx-wa-access-token"
)

// The Slack credentials of the matrix (SLACK_* variables), and its
// workspaces: ta's (its bot token is slack.bot_token), tb's (installed
// through the OAuth routes) and a shared one bound to nobody (installed
// too), whose channels the admin API binds.
const (
	mxSlackSecret       = "mx-slack-signing-secret"
	mxSlackClientSecret = "mx-slack-client-secret"
	mxSlackShared       = "TMX00009"
)

// mxSlackTeam is workspace n's fake (n 9: the shared one).
func mxSlackTeam(n int) slacktest.Team {
	return slacktest.Team{ID: fmt.Sprintf("TMX0000%d", n), Name: fmt.Sprintf("ws%d", n), Token: fmt.Sprintf("xoxb-mx-%d", n),
		BotUser: fmt.Sprintf("UMXBOT00%d", n), BotID: fmt.Sprintf("BMXBOT00%d", n)}
}

// mxTarget is one chat of a tenant: where its messages arrive and where an
// outbound op or a claim names it.
type mxTarget struct {
	platform string // discord, telegram, whatsapp_cloud, slack or nexscope
	guild    string // Discord: the guild the chat is in; Slack: the workspace
	number   string // WhatsApp: the business number the user writes to
	chat     string // the chat_id an op names (a nexscope room's as its inbound says)
	how      string // how it is the tenant's: configured, admin binding, …
	// user is the author of the tenant's messages there (Telegram: a
	// linked user's DM is that user's chat).
	user string
	// room is a nexscope target's room name.
	room string
}

func (g mxTarget) String() string { return g.platform + " " + g.chat + " (" + g.how + ")" }

// mxGateway is one gateway of a tenant and the connection the rows use.
type mxGateway struct {
	id, secret string
	conn       *mxConn // the connection the rows act on; replaced when closed
}

// token is a fresh upgrade token of g.
func (g *mxGateway) token() string { return relaytest.Token(g.id, g.secret, time.Now()) }

// mxTenant is one tenant with everything the matrix gives it.
type mxTenant struct {
	id    string // ta or tb
	gws   [2]*mxGateway
	spare *mxGateway // not connected; spent by the deprovision row

	enrollToken string // minted by the admin API, never redeemed before the final check
	mediaID     string // uploaded by its admin gateway
	mediaBody   string

	discordChannel, boundChannel, claimedChannel, thread, claimedThread mxTarget
	discordDM                                                           mxTarget
	tgChat, tgBound, tgProvisioned, tgClaimed, tgDM                     mxTarget
	room, boundRoom                                                     mxTarget
	waChat, waBound                                                     mxTarget
	slackChat, slackBound                                               mxTarget

	discordMsg, tgMsg  string // ids of messages its gateway sent in its configured chats
	interactionToken   string
	interactionSession string
	tgSession          string // the session of its configured Telegram chat (interrupts)
	wakeURL            string // of its provisioned gateway
}

// targets are every chat of t, in a fixed order.
func (t *mxTenant) targets() []mxTarget {
	return []mxTarget{t.discordChannel, t.boundChannel, t.claimedChannel, t.thread, t.claimedThread, t.discordDM,
		t.tgChat, t.tgBound, t.tgProvisioned, t.tgClaimed, t.tgDM, t.room, t.boundRoom, t.waChat, t.waBound, t.slackChat, t.slackBound}
}

// ids are the ids of t's chats, messages and gateways: none may show up
// in the other tenant's registry entries.
func (t *mxTenant) ids() []string {
	var out []string
	for _, g := range t.targets() {
		out = append(out, g.chat)
	}
	return append(out, t.discordChannel.guild, t.boundChannel.guild, t.room.room, t.boundRoom.room, t.waChat.number, t.waBound.number, t.slackChat.guild,
		t.gws[0].id, t.gws[1].id, t.spare.id, t.discordMsg, t.tgMsg)
}

// matrix is the running connector and both tenants.
type matrix struct {
	top    *testing.T // the whole test: cleanups that outlive a row
	r      *adminRig
	dfake  *discordtest.Server
	wfake  *whatsapptest.Server
	sfake  *slacktest.Server
	priv   ed25519.PrivateKey
	idKey  *rsa.PrivateKey
	base   string // http://<public listener>
	ta, tb *mxTenant
	client *http.Client

	seq     atomic.Int64 // unique message, update and user ids
	changed wakeup       // a frame was recorded somewhere

	mu            sync.Mutex
	conns         map[*mxTenant][]*mxConn // every connection ever opened, closed ones too
	members       map[string]*mxMember    // a watching nexscope member per room
	descriptors   map[string]descriptor.Descriptor
	ownInterrupts map[string]int // interrupts each tenant sent for its own sessions, by session key
	setupCalls    int            // fake Telegram calls before the attacks
	setupReqs     int            // fake Discord requests before the attacks
	setupSent     int            // fake WhatsApp messages before the attacks
	setupSlack    int            // fake Slack calls before the attacks
}

// wakeup wakes every waiter when something was recorded.
type wakeup struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next bump.
func (s *wakeup) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *wakeup) bump() {
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.mu.Unlock()
}

// await waits until cond holds (it is asked again after each recorded
// frame), for at most crashWait; cond's error ends the wait at once.
func (m *matrix) await(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.After(crashWait)
	for {
		ch := m.changed.wait()
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ch:
		case <-m.r.child.exited:
			t.Fatalf("the connector exited while waiting for %s: %v", what, m.r.child.err)
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s", crashWait, what)
		}
	}
}

// mxConn is one gateway connection whose frames a reader records; it
// acknowledges every inbound but those whose text has "hold".
type mxConn struct {
	m    *matrix
	gw   *mxGateway
	c    *relaytest.Client
	done chan struct{}

	mu     sync.Mutex
	frames []relaytest.Frame
}

// connect opens a connection of gw (a gateway of x), says hello for
// discord (with manifest as its command_manifest when not nil), telegram,
// whatsapp_cloud and relay, and records its frames from then on.
func (m *matrix) connect(t *testing.T, x *mxTenant, gw *mxGateway, manifest []any) *mxConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	c, err := relaytest.Dial(ctx, "ws://"+m.r.child.addr+"/relay", gw.token())
	if err != nil {
		t.Fatalf("%s dial: %v", gw.id, err)
	}
	for _, p := range []string{"discord", "telegram", "whatsapp_cloud", "slack", contract.PlatformRelay} {
		hello := map[string]any{"type": contract.TypeHello, "platform": p, "botId": ""}
		if p == "discord" && manifest != nil {
			hello["command_manifest"] = manifest
		}
		if err := c.Send(ctx, hello); err != nil {
			t.Fatalf("%s hello %s: %v", gw.id, p, err)
		}
		f, err := c.Next(ctx, contract.TypeDescriptor)
		if err != nil {
			t.Fatalf("%s hello %s: %v", gw.id, p, err)
		}
		m.mu.Lock()
		m.descriptors[p] = f.Descriptor
		m.mu.Unlock()
	}
	conn := &mxConn{m: m, gw: gw, c: c, done: make(chan struct{})}
	go conn.read()
	m.top.Cleanup(func() { // connections outlive the row that opened them
		_ = c.CloseNow()
		<-conn.done
	})
	m.mu.Lock()
	m.conns[x] = append(m.conns[x], conn)
	m.mu.Unlock()
	return conn
}

func (c *mxConn) read() {
	defer c.m.changed.bump()
	defer close(c.done)
	for {
		f, err := c.c.Next(context.Background())
		if err != nil {
			return
		}
		if f.Type == contract.TypeInbound && !strings.Contains(f.Event.Text, "hold") {
			ctx, cancel := context.WithTimeout(context.Background(), crashWait)
			_ = c.c.Ack(ctx, f.BufferID)
			cancel()
		}
		c.mu.Lock()
		c.frames = append(c.frames, f)
		c.mu.Unlock()
		c.m.changed.bump()
	}
}

// closed reports whether the connector closed c (or c was closed).
func (c *mxConn) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// find returns the first recorded frame match accepts.
func (c *mxConn) find(match func(relaytest.Frame) bool) (relaytest.Frame, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.frames {
		if match(f) {
			return f, true
		}
	}
	return relaytest.Frame{}, false
}

// count counts the recorded frames match accepts.
func (c *mxConn) count(match func(relaytest.Frame) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, f := range c.frames {
		if match(f) {
			n++
		}
	}
	return n
}

// send writes frame on c.
func (c *mxConn) send(t *testing.T, frame any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if err := c.c.Send(ctx, frame); err != nil {
		t.Fatalf("%s: send: %v", c.gw.id, err)
	}
}

// outbound sends action (tagged with platform unless "") and returns its
// result.
func (c *mxConn) outbound(t *testing.T, platform string, action map[string]any) contract.Result {
	t.Helper()
	id := relaytest.NewRequestID()
	frame := map[string]any{"type": contract.TypeOutbound, "requestId": id, "action": action}
	if platform != "" {
		frame["platform"] = platform
	}
	c.send(t, frame)
	var res contract.Result
	c.m.await(t, fmt.Sprintf("%s's outbound_result of %v on %s", c.gw.id, action["op"], platform), func() (bool, error) {
		f, ok := c.find(func(f relaytest.Frame) bool { return f.Type == contract.TypeOutboundResult && f.RequestID == id })
		if ok {
			res = f.Result
			return true, nil
		}
		if c.closed() {
			return false, fmt.Errorf("%s's connection closed", c.gw.id)
		}
		return false, nil
	})
	return res
}

// inbound is every inbound frame the connections of x received whose text
// contains s.
func (m *matrix) inbound(x *mxTenant, s string) []relaytest.Frame {
	m.mu.Lock()
	conns := slices.Clone(m.conns[x])
	m.mu.Unlock()
	var out []relaytest.Frame
	for _, c := range conns {
		c.mu.Lock()
		for _, f := range c.frames {
			if (f.Type == contract.TypeInbound && strings.Contains(f.Event.Text, s)) ||
				(f.Type == contract.TypePassthroughForward && bytes.Contains(f.Raw, []byte(s))) {
				out = append(out, f)
			}
		}
		c.mu.Unlock()
	}
	return out
}

// other is the tenant that is not x.
func (m *matrix) other(x *mxTenant) *mxTenant {
	if x == m.ta {
		return m.tb
	}
	return m.ta
}

// mxMember is a nexscope member watching a room: it records every frame.
type mxMember struct {
	mu     sync.Mutex
	frames []string
}

// watchRoom joins room as a member that records what it is sent.
func (m *matrix) watchRoom(t *testing.T, room string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+m.r.child.addr+"/ws/"+room+"?name=watch"+strconv.FormatInt(m.seq.Add(1), 10)+"&v=1&token="+adminNexToken, nil)
	if err != nil {
		t.Fatalf("watching room %s: %v", room, err)
	}
	ws.SetReadLimit(-1)
	mem := &mxMember{}
	go func() {
		for {
			_, data, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			mem.mu.Lock()
			mem.frames = append(mem.frames, string(data))
			mem.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = ws.CloseNow() })
	m.mu.Lock()
	m.members[room] = mem
	m.mu.Unlock()
}

// mxAnswer is an HTTP answer.
type mxAnswer struct {
	status int
	body   string
}

// do sends an HTTP request to the public listener: bearer "" sends no
// Authorization; body is JSON-encoded unless it is a string.
func (m *matrix) do(t *testing.T, method, path, bearer string, body any, header ...string) mxAnswer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, m.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	for waits := 0; ; waits++ {
		resp, err := m.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v (a refusal is an answer, not a dropped request)", method, path, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a := mxAnswer{resp.StatusCode, string(data)}
		// The matrix sends each gateway more /manage requests, refused ones
		// included, than change.GatewayBurst: past it, wait as told
		// (Retry-After) and send again; the limiter has tests of its own.
		if a.status != http.StatusTooManyRequests || !strings.Contains(a.body, "changing the registry too fast") || req.GetBody == nil {
			return a
		}
		retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || retry < 1 || waits == 30 {
			t.Fatalf("%s %s: %d %s after %d waits (Retry-After %q)", method, path, a.status, a.body, waits, resp.Header.Get("Retry-After"))
		}
		<-time.After(time.Duration(retry) * time.Second)
		if req.Body, err = req.GetBody(); err != nil {
			t.Fatal(err)
		}
	}
}

// admin calls the admin API and checks the status.
func (m *matrix) admin(t *testing.T, method, path string, body any, want int) string {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, "http://"+m.r.child.admin+path, rd)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	return post(t, req, want, method+" "+path)
}

// view is x's registry entry as the admin API lists it: its gateways
// (ids, secret counts, wake URLs) and bindings (management-plane ones
// included), in a canonical form.
func (m *matrix) view(t *testing.T, x *mxTenant) string {
	t.Helper()
	var listing struct {
		Tenants []struct {
			ID       string          `json:"id"`
			Gateways json.RawMessage `json:"gateways"`
			Bindings []struct {
				Platform, Kind, ID string
			} `json:"bindings"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal([]byte(m.admin(t, http.MethodGet, "/admin/v1/tenants", nil, http.StatusOK)), &listing); err != nil {
		t.Fatal(err)
	}
	for _, v := range listing.Tenants {
		if v.ID != x.id {
			continue
		}
		var b []string
		for _, e := range v.Bindings {
			b = append(b, e.Platform+"/"+e.Kind+"/"+e.ID)
		}
		slices.Sort(b)
		return fmt.Sprintf("gateways %s\nbindings %s", v.Gateways, strings.Join(b, " "))
	}
	t.Fatalf("the admin listing has no tenant %s", x.id)
	return ""
}

// unchanged runs attack and checks that y's registry entry is the same
// after it and that x's names none of y's ids.
func (m *matrix) unchanged(t *testing.T, x, y *mxTenant, attack func()) {
	t.Helper()
	before := m.view(t, y)
	attack()
	if after := m.view(t, y); after != before {
		t.Errorf("%s's registry entry changed under %s's attack:\nbefore %s\nafter  %s", y.id, x.id, before, after)
	}
	m.namesNoneOf(t, x, y)
}

// namesNoneOf checks that x's registry entry names none of y's ids.
func (m *matrix) namesNoneOf(t *testing.T, x, y *mxTenant) {
	t.Helper()
	v := m.view(t, x)
	fields := strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == '\n' || r == '/' || r == '"' })
	var named []string
	for _, id := range y.ids() {
		if slices.Contains(fields, id) {
			named = append(named, id)
		}
	}
	if len(named) > 0 {
		t.Errorf("%s's registry entry names %s's %v: %s", x.id, y.id, named, v)
	}
}

// identity is an identity token of tenant x with audience aud.
func (m *matrix) identity(t *testing.T, x *mxTenant, aud string) string {
	return idtokentest.Sign(t, m.idKey, map[string]any{"tid": x.id, "aud": aud, "sub": "owner-of-" + x.id,
		"exp": time.Now().Add(5 * time.Minute).Unix()})
}

// next is a fresh number for a message, update or user id.
func (m *matrix) next() int64 { return 10000 + m.seq.Add(1) }

// deliver posts a message from y's user into target g (one of y's chats)
// by the platform's own path and waits until a gateway receives it: it
// must be one of y's. A message that reaches the other tenant fails the
// test (ok false).
func (m *matrix) deliver(t *testing.T, y *mxTenant, g mxTarget, tag string) (relaytest.Frame, bool) {
	t.Helper()
	text := fmt.Sprintf("xt-to-%s-%d%s", y.id, m.next(), tag)
	m.post(t, g, text)
	x := m.other(y)
	var got relaytest.Frame
	leaked := false
	m.await(t, fmt.Sprintf("%q in %s's %s to reach a gateway", text, y.id, g), func() (bool, error) {
		if len(m.inbound(x, text)) > 0 {
			leaked = true
			return true, nil
		}
		if in := m.inbound(y, text); len(in) > 0 {
			got = in[0]
			return true, nil
		}
		return false, nil
	})
	if leaked {
		t.Errorf("%s's message in its %s reached %s's gateway", y.id, g, x.id)
	}
	return got, !leaked
}

// post sends text as a user's message in g.
func (m *matrix) post(t *testing.T, g mxTarget, text string) {
	t.Helper()
	switch g.platform {
	case "discord":
		ctx, cancel := context.WithTimeout(context.Background(), crashWait)
		defer cancel()
		msg := discordtest.MessageCreate(strconv.FormatInt(m.next(), 10), g.chat, g.guild, text, false)
		if g.user != "" {
			msg["author"] = map[string]any{"id": g.user, "username": "u" + g.user}
		}
		if err := m.dfake.Dispatch(ctx, "MESSAGE_CREATE", msg); err != nil {
			t.Fatalf("dispatch %q: %v", text, err)
		}
	case "telegram":
		m.telegramMessage(t, g.chat, cmp.Or(g.user, "7001"), text)
	case "whatsapp_cloud":
		body := whatsapptest.Text(whatsapptest.Business{PhoneNumberID: g.number, DisplayNumber: "1555" + g.number}, g.chat, "U",
			"wamid.mx"+strconv.FormatInt(m.next(), 10), text)
		post(t, whatsapptest.SignedRequest(m.base+"/whatsapp/webhook", mxWAAppSecret, body), http.StatusOK, "whatsapp webhook "+text)
	case "slack":
		n := m.next()
		team := g.guild
		bot := mxSlackTeam(int(team[len(team)-1] - '0')).BotUser
		ev := slacktest.MessageEvent(team, g.chat, cmp.Or(g.user, "UMXUSER01"), fmt.Sprintf("1768490000.%06d", n), "", text)
		body := slacktest.Envelope(team, bot, "EvMX"+strconv.FormatInt(n, 10), ev)
		post(t, slacktest.SignedRequest(m.base+"/slack/events", mxSlackSecret, time.Now(), "application/json", body), http.StatusOK, "slack event "+text)
	case "nexscope":
		nexscopeSay(t, m.r.child.addr, g.room, "ada"+strconv.FormatInt(m.next(), 10), text)
	default:
		t.Fatalf("no way to post in %s", g)
	}
}

// telegramMessage posts a message of user in chat (a group when the id is
// negative, else the user's private chat) to the webhook.
func (m *matrix) telegramMessage(t *testing.T, chat, user, text string) {
	t.Helper()
	chatJSON := fmt.Sprintf(`{"id":%s,"type":"private","first_name":"U"}`, chat)
	if strings.HasPrefix(chat, "-") {
		chatJSON = fmt.Sprintf(`{"id":%s,"type":"group","title":"G"}`, chat)
	}
	id := m.next()
	body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1767225300,"chat":%s,"from":{"id":%s,"is_bot":false,"first_name":"U"},"text":%q}}`,
		id, id, chatJSON, user, text)
	req, _ := http.NewRequest(http.MethodPost, m.base+"/telegram/webhook", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Telegram-Bot-Api-Secret-Token", adminTGSecret)
	post(t, req, http.StatusOK, "telegram webhook "+text)
}

// telegramCall waits for a call of method to the fake Bot API that match
// accepts.
func (m *matrix) telegramCall(t *testing.T, method string, match func(form map[string]string) bool, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	for n := 1; ; {
		calls, err := m.r.tfake.WaitCalls(ctx, method, n)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if slices.ContainsFunc(calls, func(c telegramtest.Call) bool { return match(c.Form) }) {
			return
		}
		n = len(calls) + 1
	}
}

// link links user (a Telegram user) to x: x's gateway asks for a code, the
// user DMs "/link <code>" and the bot answers it linked.
func (m *matrix) link(t *testing.T, x *mxTenant, bearer, user string, body any) {
	t.Helper()
	a := m.do(t, http.MethodPost, "/manage/link", bearer, body)
	if a.status != http.StatusOK {
		t.Fatalf("%s's /manage/link: %d %s", x.id, a.status, a.body)
	}
	m.redeem(t, a.body, user)
}

// linkDiscord links dm's user (a Discord user) to x: x's gateway asks for a
// code, the user sends "/link <code>" in their DM dm and the bot answers
// it linked there.
func (m *matrix) linkDiscord(t *testing.T, x *mxTenant, bearer string, dm mxTarget) {
	t.Helper()
	a := m.do(t, http.MethodPost, "/manage/link", bearer, map[string]string{"platform": "discord"})
	var out struct{ Code string }
	if a.status != http.StatusOK || json.Unmarshal([]byte(a.body), &out) != nil || out.Code == "" {
		t.Fatalf("%s's Discord /manage/link: %d %s", x.id, a.status, a.body)
	}
	m.post(t, dm, "/link "+out.Code)
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if _, err := m.dfake.WaitRequest(ctx, func(q discordtest.Request) bool {
		return q.Method == http.MethodPost && q.Path == "/api/v9/channels/"+dm.chat+"/messages" && strings.Contains(string(q.Body), platform.LinkedReply)
	}); err != nil {
		t.Fatalf("the /link reply in %s: %v", dm, err)
	}
}

// redeem DMs "/link <code>" of the /manage/link answer as user and waits
// for the bot to say it linked.
func (m *matrix) redeem(t *testing.T, answer, user string) {
	t.Helper()
	var out struct{ Code string }
	if err := json.Unmarshal([]byte(answer), &out); err != nil || out.Code == "" {
		t.Fatalf("link answer %s", answer)
	}
	m.telegramMessage(t, user, user, "/link "+out.Code)
	m.telegramCall(t, "sendMessage", func(f map[string]string) bool {
		return f["chat_id"] == user && f["text"] == platform.LinkedReply
	}, "the /link reply to user "+user)
}

// newMatrix writes the config, checks that every public route has its rows
// (before anything runs), starts the connector and sets both tenants up.
func newMatrix(t *testing.T, rows []mxRow) *matrix {
	m := &matrix{top: t, r: newAdminRig(t), conns: map[*mxTenant][]*mxConn{}, members: map[string]*mxMember{},
		descriptors: map[string]descriptor.Descriptor{}, ownInterrupts: map[string]int{},
		client: &http.Client{Timeout: crashWait}}
	m.dfake = discordtest.New(t, discordtest.Options{Token: crashDiscordToken})
	m.wfake = whatsapptest.New(t, mxWAAccessToken)
	m.sfake = slacktest.New(t)
	m.sfake.AddTeam(mxSlackTeam(1)) // ta's, by bot_token; the others are installed below
	pub, priv, _ := ed25519.GenerateKey(nil)
	m.priv = priv
	m.idKey = idtokentest.Key(t)
	keyFile := filepath.Join(t.TempDir(), "authority.pem")
	if err := os.WriteFile(keyFile, idtokentest.PublicPEM(t, m.idKey), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf(matrixConfig, hex.EncodeToString(pub), m.dfake.URL, m.dfake.GatewayURL, m.r.tfake.URL, m.wfake.URL, m.sfake.URL, keyFile)
	if err := os.WriteFile(m.r.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	m.r.env = append(m.r.env, "DISCORD_BOT_TOKEN="+crashDiscordToken,
		"WHATSAPP_APP_SECRET="+mxWAAppSecret, "WHATSAPP_VERIFY_TOKEN="+mxWAVerifyToken, "WHATSAPP_ACCESS_TOKEN="+mxWAAccessToken,
		"SLACK_SIGNING_SECRET="+mxSlackSecret, "SLACK_BOT_TOKEN="+mxSlackTeam(1).Token, "SLACK_CLIENT_ID=1.2", "SLACK_CLIENT_SECRET="+mxSlackClientSecret)
	checkRows(t, m.r.config, m.r.env, rows)

	m.ta, m.tb = newTenant(1, "ta"), newTenant(2, "tb")
	for _, x := range []*mxTenant{m.ta, m.tb} {
		m.dfake.AddGuild(discordtest.Guild{ID: x.discordChannel.guild, Name: "configured " + x.id},
			discordtest.Channel{ID: x.discordChannel.chat, Type: 0, GuildID: x.discordChannel.guild, Name: "general"})
		m.dfake.AddGuild(discordtest.Guild{ID: x.boundChannel.guild, Name: "bound " + x.id},
			discordtest.Channel{ID: x.boundChannel.chat, Type: 0, GuildID: x.boundChannel.guild, Name: "general"})
		m.dfake.AddChannel(discordtest.Channel{ID: x.discordDM.chat, Type: 1, Recipients: []discordtest.Recipient{{ID: x.discordDM.user, Username: "u" + x.discordDM.user}}})
	}
	for _, x := range []*mxTenant{m.ta, m.tb} {
		m.sfake.AddChannel(x.slackChat.guild, slacktest.Channel{ID: x.slackChat.chat, Name: "general"})
		m.sfake.AddChannel(mxSlackShared, slacktest.Channel{ID: x.slackBound.chat, Name: "desk-" + x.id})
	}
	m.dfake.AddGuild(discordtest.Guild{ID: "530", Name: "shared"},
		discordtest.Channel{ID: m.ta.claimedChannel.chat, Type: 0, GuildID: "530", Name: "desk-ta"},
		discordtest.Channel{ID: m.tb.claimedChannel.chat, Type: 0, GuildID: "530", Name: "desk-tb"})

	m.r.start(t)
	m.base = "http://" + m.r.child.addr
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if err := m.dfake.WaitSession(ctx, 1); err != nil {
		t.Fatalf("waiting for the Discord Gateway session: %v", err)
	}
	waitMetrics(t, "http://"+m.r.child.ops+"/metrics", `connector_platform_ready{platform="discord"} 1`,
		`connector_platform_ready{platform="telegram"} 1`, `connector_platform_ready{platform="nexscope"} 1`,
		`connector_platform_ready{platform="whatsapp_cloud"} 1`, `connector_platform_ready{platform="slack"} 1`)
	m.slackInstall(t, mxSlackTeam(2))
	m.slackInstall(t, mxSlackTeam(9))
	for _, x := range []*mxTenant{m.ta, m.tb} {
		m.setUp(t, x)
	}
	m.setupReqs, m.setupCalls, m.setupSent, m.setupSlack = len(m.dfake.Requests()), len(m.r.tfake.Calls("")), len(m.wfake.Sent()), len(m.sfake.Calls(""))
	return m
}

// newTenant names tenant n's chats and gateways.
func newTenant(n int, id string) *mxTenant {
	d := func(format string) string { return fmt.Sprintf(format, n) }
	return &mxTenant{id: id,
		gws: [2]*mxGateway{{id: "gw-" + id + "-admin"}, {id: "gw-" + id + "-prov"}}, spare: &mxGateway{id: "gw-" + id + "-spare"},
		discordChannel: mxTarget{platform: "discord", guild: d("5%d0"), chat: d("5%d1"), how: "configured guild"},
		boundChannel:   mxTarget{platform: "discord", guild: d("5%d5"), chat: d("5%d6"), how: "guild bound by the admin API"},
		claimedChannel: mxTarget{platform: "discord", guild: "530", chat: d("53%d"), how: "claimed channel"},
		thread:         mxTarget{platform: "discord", guild: d("5%d0"), how: "thread in its configured channel"},
		claimedThread:  mxTarget{platform: "discord", guild: "530", how: "thread in its claimed channel"},
		discordDM:      mxTarget{platform: "discord", chat: d("31%d"), user: d("61%d"), how: "its linked user's Discord DM"},
		tgChat:         mxTarget{platform: "telegram", chat: d("-100%d"), how: "configured chat"},
		tgBound:        mxTarget{platform: "telegram", chat: d("-110%d"), how: "chat bound by the admin API"},
		tgProvisioned:  mxTarget{platform: "telegram", chat: d("-120%d"), how: "chat bound by its provision's routeKeys"},
		tgClaimed:      mxTarget{platform: "telegram", chat: d("-130%d"), how: "claimed chat"},
		tgDM:           mxTarget{platform: "telegram", chat: d("400%d"), user: d("400%d"), how: "its linked user's DM"},
		room:           mxTarget{platform: "nexscope", room: "room-" + id, how: "configured room"},
		boundRoom:      mxTarget{platform: "nexscope", room: "lab-" + id, how: "room bound by the admin API"},
		waChat:         mxTarget{platform: "whatsapp_cloud", number: d("106%d"), chat: d("4477009001%d"), how: "user of its configured number"},
		waBound:        mxTarget{platform: "whatsapp_cloud", number: d("116%d"), chat: d("4477009002%d"), how: "user of its number bound by the admin API"},
		slackChat:      mxTarget{platform: "slack", guild: d("TMX0000%d"), chat: d("CMX0000%d"), how: "channel of its configured workspace"},
		slackBound:     mxTarget{platform: "slack", guild: mxSlackShared, chat: d("CMXB000%d"), how: "channel bound by the admin API"},
	}
}

// setUp gives x its gateways, bindings, claims, linked user, enrollment
// token, media, messages and sessions, and checks that each of its chats
// reaches it.
func (m *matrix) setUp(t *testing.T, x *mxTenant) {
	t.Helper()
	var created struct{ Secret string }
	for _, g := range []*mxGateway{x.gws[mxAdminGW], x.spare} {
		if err := json.Unmarshal([]byte(m.admin(t, http.MethodPost, "/admin/v1/tenants/"+x.id+"/gateways", map[string]string{"id": g.id}, http.StatusCreated)), &created); err != nil {
			t.Fatal(err)
		}
		g.secret = created.Secret
	}
	for _, b := range []struct{ platform, kind, id string }{
		{"discord", platform.BindGuild, x.boundChannel.guild}, {"telegram", platform.BindChat, x.tgBound.chat}, {"nexscope", platform.BindRoom, x.boundRoom.room},
		{"whatsapp_cloud", platform.BindPhoneNumber, x.waBound.number}, {"slack", platform.BindChannel, x.slackBound.chat},
	} {
		m.admin(t, http.MethodPut, "/admin/v1/tenants/"+x.id+"/bindings", map[string]string{"platform": b.platform, "kind": b.kind, "id": b.id}, http.StatusNoContent)
	}
	var token struct{ Token string }
	if err := json.Unmarshal([]byte(m.admin(t, http.MethodPost, "/admin/v1/tenants/"+x.id+"/enroll-tokens", map[string]string{"ttl": "1h"}, http.StatusCreated)), &token); err != nil {
		t.Fatal(err)
	}
	x.enrollToken = token.Token
	x.wakeURL = "http://127.0.0.1:1/wake-" + x.id
	a := m.do(t, http.MethodPost, "/relay/provision", m.identity(t, x, "connector"), map[string]any{
		"gatewayId": x.gws[mxProvGW].id, "platform": "telegram", "botId": "", "gatewayEndpoint": "",
		"routeKeys": []string{x.tgProvisioned.chat}, "instanceId": "i-" + x.id, "wakeUrl": x.wakeURL})
	if a.status != http.StatusOK {
		t.Fatalf("provision %s: %d %s", x.gws[mxProvGW].id, a.status, a.body)
	}
	if err := json.Unmarshal([]byte(a.body), &created); err != nil {
		t.Fatal(err)
	}
	x.gws[mxProvGW].secret = created.Secret
	for _, g := range x.gws {
		g.conn = m.connect(t, x, g, nil)
	}
	gw := x.gws[mxAdminGW]
	for _, claim := range []map[string]any{
		{"platform": "discord", "guildId": "530", "channelId": x.claimedChannel.chat},
		{"platform": "telegram", "channelId": x.tgClaimed.chat},
	} {
		if a := m.do(t, http.MethodPost, "/manage/scope", gw.token(), claim); a.status != http.StatusOK {
			t.Fatalf("%s claims %v: %d %s", x.id, claim, a.status, a.body)
		}
	}
	m.principalAny(t, x)
	m.link(t, x, gw.token(), x.tgDM.user, map[string]string{"platform": "telegram"})
	m.linkDiscord(t, x, gw.token(), x.discordDM)
	for _, room := range []string{x.room.room, x.boundRoom.room} {
		m.watchRoom(t, room)
	}

	// Every chat reaches x; the inbound names each chat as ops must.
	for _, g := range []*mxTarget{&x.discordChannel, &x.boundChannel, &x.claimedChannel, &x.discordDM, &x.tgChat, &x.tgBound, &x.tgProvisioned, &x.tgClaimed, &x.tgDM, &x.room, &x.boundRoom, &x.waChat, &x.waBound, &x.slackChat, &x.slackBound} {
		f, ok := m.deliver(t, x, *g, "")
		if !ok {
			t.FailNow()
		}
		if g.chat == "" {
			g.chat = f.Event.Source.ChatID
		}
		if g == &x.tgChat {
			x.tgSession = sessionOf(f)
		}
	}
	// x's messages and thread, the targets of edit, react, delete and
	// thread_rename.
	res := gw.conn.outbound(t, "discord", map[string]any{"op": contract.OpSend, "chat_id": x.discordChannel.chat, "content": "x's own message", "reply_to": nil, "metadata": map[string]any{}})
	if !res.Success {
		t.Fatalf("%s sends in its Discord channel: %+v", x.id, res)
	}
	x.discordMsg = res.MessageID
	res = gw.conn.outbound(t, "telegram", map[string]any{"op": contract.OpSend, "chat_id": x.tgChat.chat, "content": "x's own message", "reply_to": nil, "metadata": map[string]any{}})
	if !res.Success {
		t.Fatalf("%s sends in its Telegram chat: %+v", x.id, res)
	}
	x.tgMsg = res.MessageID
	res = gw.conn.outbound(t, "discord", map[string]any{"op": contract.OpThreadCreate, "chat_id": x.discordChannel.chat, "thread_name": "thread of " + x.id, "metadata": map[string]any{}})
	if !res.Success {
		t.Fatalf("%s creates a thread: %+v", x.id, res)
	}
	x.thread.chat = cmp.Or(res.ThreadID, res.MessageID)
	m.deliver(t, x, x.thread, "")
	// A thread in its claimed channel (a guild nobody is bound to), which
	// it may rename as it may create it: both authorize by the claim.
	res = gw.conn.outbound(t, "discord", map[string]any{"op": contract.OpThreadCreate, "chat_id": x.claimedChannel.chat, "thread_name": "claimed thread", "metadata": map[string]any{}})
	if !res.Success {
		t.Fatalf("%s creates a thread in its claimed channel: %+v", x.id, res)
	}
	x.claimedThread.chat = cmp.Or(res.ThreadID, res.MessageID)
	res = gw.conn.outbound(t, "discord", map[string]any{"op": contract.OpThreadRename, "chat_id": x.claimedChannel.chat, "message_id": x.claimedThread.chat,
		"thread_name": "claimed thread of " + x.id, "metadata": map[string]any{}})
	if th, _ := m.dfake.Channel(x.claimedThread.chat); !res.Success || th.Name != "claimed thread of "+x.id {
		t.Fatalf("%s renames its thread in its claimed channel: %+v, the thread is named %q", x.id, res, th.Name)
	}
	m.deliver(t, x, x.claimedThread, "")

	// An interaction in x's guild: its token goes to the vault under x.
	x.interactionToken = "xt-interaction-" + x.id
	m.dfake.AddInteractionToken(x.interactionToken)
	body := discordtest.SlashCommand(strconv.FormatInt(m.next(), 10), x.interactionToken, x.discordChannel.guild, x.discordChannel.chat)
	req := discordtest.InteractionRequest(m.base+"/discord/interactions", m.priv, time.Now(), body)
	post(t, req, http.StatusOK, "slash command in "+x.id+"'s guild")
	m.await(t, x.id+"'s slash command", func() (bool, error) {
		for _, f := range m.inbound(x, "") {
			if f.Event.Source.ChatID == x.discordChannel.chat && f.Event.MessageType == "command" {
				x.interactionSession = sessionOf(f)
				return true, nil
			}
		}
		return false, nil
	})

	x.mediaBody = "media of " + x.id
	a = m.do(t, http.MethodPost, "/relay/media", gw.token(), x.mediaBody, "Content-Type", "text/plain")
	var up struct{ ID string }
	if err := json.Unmarshal([]byte(a.body), &up); a.status != http.StatusOK || err != nil {
		t.Fatalf("%s uploads media: %d %s", x.id, a.status, a.body)
	}
	x.mediaID = up.ID
}

// principalAny lets every author in x's claims reach x, on Discord and
// Telegram.
func (m *matrix) principalAny(t *testing.T, x *mxTenant) {
	t.Helper()
	for _, p := range []string{"discord", "telegram"} {
		body := map[string]string{"platform": p, "principal": platform.PrincipalAny}
		if a := m.do(t, http.MethodPost, "/manage/principal", x.gws[mxAdminGW].token(), body); a.status != http.StatusOK {
			t.Fatalf("%s's principal any on %s: %d %s", x.id, p, a.status, a.body)
		}
	}
}

// checkRows builds, in this process, the connector the config at path
// describes (what serve builds, without listening) and fails the test
// unless every route of its public listener has its rows: one per route,
// and on /relay one per gateway frame of docs/contract.md and per op of
// contract.Ops. The config must enable every platform the connector has,
// so that each platform's routes are registered.
func checkRows(t *testing.T, path string, env []string, rows []mxRow) {
	t.Helper()
	lookup := func(key string) (string, bool) {
		for _, kv := range env {
			if k, v, ok := strings.Cut(kv, "="); ok && k == key {
				return v, true
			}
		}
		return "", false
	}
	cfg, _, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(cfg).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() == reflect.Pointer && strings.HasPrefix(f.Type.Elem().PkgPath(), "connector/platform/") && v.Field(i).IsNil() {
			t.Errorf("the matrix config (matrixConfig) leaves the platform section %q out: its routes would have no rows", f.Tag.Get("yaml"))
		}
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), memStore(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.relay.Shutdown(context.Background())

	doc, err := os.ReadFile("../../docs/contract.md")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range c.publicPatterns {
		if p != "/relay" {
			want = append(want, rowKey(p, ""))
			continue
		}
		for _, r := range markdownTables(string(doc))["Gateway → connector frames"] {
			if frame := strings.Trim(r[0], "`"); frame != contract.TypeOutbound {
				want = append(want, rowKey(p, frame))
			}
		}
		for _, op := range contract.Ops {
			want = append(want, rowKey(p, contract.TypeOutbound+" "+op))
		}
	}
	var have []string
	for _, r := range rows {
		have = append(have, rowKey(r.route, r.frame))
	}
	for _, k := range want {
		if !slices.Contains(have, k) {
			t.Errorf("the public listener serves %s and the authorization matrix has no row for it: add one to matrixRows (docs/security.md says how)", k)
		}
	}
	for _, k := range have {
		if !slices.Contains(want, k) {
			t.Errorf("the matrix has a row for %s, which the public listener does not serve", k)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// rowKey names a row: its route, and on /relay its frame.
func rowKey(route, frame string) string { return strings.TrimSpace(route + " " + frame) }

// slackInstall installs the app in team through the OAuth routes, as the
// workspace's admin would: /slack/install sets the browser's cookie and
// sends it to Slack with a state, Slack sends it back to
// /slack/oauth/callback with a code.
func (m *matrix) slackInstall(t *testing.T, team slacktest.Team) {
	t.Helper()
	browser := &http.Client{Timeout: crashWait, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := browser.Get(m.base + "/slack/install")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusFound {
		t.Fatalf("/slack/install: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	code := "mx-code-" + team.ID
	m.sfake.AddOAuthCode(code, team)
	req, _ := http.NewRequest(http.MethodGet, m.base+"/slack/oauth/callback?"+url.Values{"code": {code}, "state": {loc.Query().Get("state")}}.Encode(), nil)
	for _, c := range resp.Cookies() {
		req.AddCookie(c)
	}
	post(t, req, http.StatusOK, "the OAuth callback of "+team.ID)
}
