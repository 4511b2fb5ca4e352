package main

// The cross-tenant authorization matrix (issue 22 §2, docs/security.md
// "The authorization matrix"): every route of the public listener, every
// kind of credential a tenant holds, both directions between two tenants.
//
// How to add a route: register it where build assembles the public routes
// (publicRoutes) and run this test: it fails, naming the route, until
// matrixRows has a row for it. A row says which route it covers (the
// ServeMux pattern exactly as registered; on "/relay" also the gateway
// frame or "outbound <op>"), its phase, and its attack: a function of the
// attacker x, the victim y and x's credential kind c that tries to read,
// claim, change or write into something of y's through the route, checks
// that the answer is the route's documented refusal, and checks that y's
// state (m.unchanged: y's registry entry; m.deliver: y's messages still
// reach y alone) did not move. A credential the route does not take is
// refused like none (m.refusedHTTP, m.relayRefused). A platform's routes
// (Slack's /slack/*, WhatsApp's /whatsapp/webhook) are registered only when
// its section is in matrixConfig: add the section too (checkRows fails
// while a platform section of Config is missing there), give each tenant
// its chats in newTenant and setUp, and teach m.post to send a message
// there, so that the outbound op rows and the final checks cover it.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/slack/slacktest"
	"connector/platform/whatsapp/whatsapptest"
	"connector/relay/relaytest"
)

// mxCred is a kind of credential a tenant holds.
type mxCred string

const (
	// credUpgrade: the /relay upgrade tokens of the tenant's gateways (the
	// admin-created and the provisioned one).
	credUpgrade mxCred = "upgrade_token"
	// credIdentity: identity tokens of the tenant (aud "connector" for the
	// credential routes, "agent:<its gateway>" for the management plane).
	credIdentity mxCred = "identity_token"
	// credEnroll: the tenant's enrollment token.
	credEnroll mxCred = "enrollment_token"
	// credNone: no credential at all.
	credNone mxCred = "none"
)

var mxCreds = []mxCred{credUpgrade, credIdentity, credEnroll, credNone}

// mxPhase is when a row runs.
type mxPhase int

const (
	// phaseParallel rows change nothing another row observes; they run
	// in parallel.
	phaseParallel mxPhase = iota
	// phaseSerial rows change routing, sessions or the attacker's own
	// registry entry; they run one at a time.
	phaseSerial
	// phaseLast rows remove the attacker's own state (deprovision); they
	// run after the final checks.
	phaseLast
)

// mxRow is one route of the public listener in the matrix.
type mxRow struct {
	// route is the ServeMux pattern as the public listener registers it.
	route string
	// frame, on "/relay" only, is the gateway frame type or "outbound <op>".
	frame string
	phase mxPhase
	// attack is x's attack on y with credential kind c, with its checks.
	attack func(t *testing.T, m *matrix, x, y *mxTenant, c mxCred)
}

// matrixRows is the table: one row per route (per frame and op on /relay).
func matrixRows() []mxRow {
	rows := []mxRow{
		{route: "/relay", frame: contract.TypeHello, phase: phaseParallel, attack: attackHello},
		{route: "/relay", frame: contract.TypeInterrupt, phase: phaseSerial, attack: attackInterrupt},
		{route: "/relay", frame: contract.TypeGoingIdle, phase: phaseParallel, attack: attackGoingIdle},
		{route: "/relay", frame: contract.TypeInboundAck, phase: phaseSerial, attack: attackInboundAck},
	}
	for _, op := range contract.Ops {
		rows = append(rows, mxRow{route: "/relay", frame: contract.TypeOutbound + " " + op, phase: phaseParallel,
			attack: func(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) { attackOp(t, m, x, y, c, op) }})
	}
	return append(rows,
		mxRow{route: "/relay/media", phase: phaseParallel, attack: attackMediaUpload},
		mxRow{route: "/relay/media/{id}", phase: phaseParallel, attack: attackMediaGet},
		mxRow{route: "POST /relay/policy", phase: phaseSerial, attack: attackPolicy},
		mxRow{route: "POST /relay/enroll", phase: phaseParallel, attack: attackEnroll},
		mxRow{route: "POST /relay/provision", phase: phaseSerial, attack: attackProvision},
		mxRow{route: "POST /manage/link", phase: phaseSerial, attack: attackLink},
		mxRow{route: "POST /manage/scope", phase: phaseSerial, attack: attackScope},
		mxRow{route: "POST /manage/scope/release", phase: phaseSerial, attack: attackRelease},
		mxRow{route: "POST /manage/principal", phase: phaseSerial, attack: attackPrincipal},
		mxRow{route: "POST /manage/dm-default", phase: phaseSerial, attack: attackDMDefault},
		mxRow{route: "POST /manage/deprovision", phase: phaseLast, attack: attackDeprovision},
		mxRow{route: "GET /ws", phase: phaseParallel, attack: attackNexscope("")},
		mxRow{route: "GET /ws/{room}", phase: phaseParallel, attack: attackNexscope("room")},
		mxRow{route: "POST /discord/interactions", phase: phaseParallel, attack: attackDiscordInteractions},
		mxRow{route: "POST /telegram/webhook", phase: phaseParallel, attack: attackTelegramWebhook},
		mxRow{route: "GET /whatsapp/webhook", phase: phaseParallel, attack: attackWhatsAppVerify},
		mxRow{route: "POST /whatsapp/webhook", phase: phaseParallel, attack: attackWhatsAppWebhook},
		mxRow{route: "POST /slack/events", phase: phaseParallel, attack: attackSlackSigned("/slack/events")},
		mxRow{route: "POST /slack/interactions", phase: phaseParallel, attack: attackSlackSigned("/slack/interactions")},
		mxRow{route: "POST /slack/commands", phase: phaseParallel, attack: attackSlackSigned("/slack/commands")},
		mxRow{route: "GET /slack/install", phase: phaseParallel, attack: attackSlackInstall},
		mxRow{route: "GET /slack/oauth/callback", phase: phaseParallel, attack: attackSlackCallback},
		mxRow{route: "GET /healthz", phase: phaseParallel, attack: attackHealthz},
	)
}

// TestAuthorizationMatrix starts the connector binary once with tenants ta
// and tb and runs every row of matrixRows with every credential kind in
// both directions; then it checks what no single row can: that nothing of
// an attack ever reached a platform or a member, that no message of one
// tenant reached the other's gateways, that interrupts went to their own
// tenant only, and that each tenant's chats, capability, media and
// enrollment token still serve it. Every route of the admin listener,
// which takes the admin token only, refuses each credential kind too
// (attackAdminListener).
func TestAuthorizationMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	rows := matrixRows()
	m := newMatrix(t, rows)
	var cases atomic.Int64
	run := func(name string, phase mxPhase) {
		t.Run(name, func(t *testing.T) {
			for _, r := range rows {
				if r.phase != phase {
					continue
				}
				for _, c := range mxCreds {
					for _, d := range [][2]*mxTenant{{m.ta, m.tb}, {m.tb, m.ta}} {
						x, y := d[0], d[1]
						t.Run(fmt.Sprintf("%s/%s/%s→%s", rowKey(r.route, r.frame), c, x.id, y.id), func(t *testing.T) {
							if phase == phaseParallel {
								t.Parallel()
							}
							cases.Add(1)
							r.attack(t, m, x, y, c)
						})
					}
				}
			}
		})
	}
	before := [2]string{m.view(t, m.ta), m.view(t, m.tb)}
	run("parallel", phaseParallel)
	if after := [2]string{m.view(t, m.ta), m.view(t, m.tb)}; after != before {
		t.Errorf("the parallel rows changed a tenant's registry entry:\nbefore %q\nafter  %q", before, after)
	}
	t.Run("admin listener", m.attackAdminListener)
	run("serial", phaseSerial)
	t.Run("afterwards", m.checkAfterwards)
	run("last", phaseLast)
	m.checkAlive(t)
	routes := map[string]bool{}
	for _, r := range rows {
		routes[r.route] = true
	}
	t.Logf("authorization matrix: %d rows (%d routes of the public listener; /relay as %d rows, one per gateway frame and outbound op) × %d credential kinds × 2 directions = %d cases",
		len(rows), len(routes), len(rows)-len(routes)+1, len(mxCreds), cases.Load())
}

// bearers are the Authorization bearers of x's credential kind c ("" for
// none).
func (m *matrix) bearers(t *testing.T, x *mxTenant, c mxCred) []string {
	switch c {
	case credUpgrade:
		return []string{x.gws[mxAdminGW].token(), x.gws[mxProvGW].token()}
	case credIdentity:
		return []string{m.identity(t, x, "connector"), m.identity(t, x, "agent:"+x.gws[mxAdminGW].id)}
	case credEnroll:
		return []string{x.enrollToken}
	}
	return []string{""}
}

// refusedHTTP sends the request with each bearer of x's kind c and wants
// status (a credential the route does not take is refused as none).
func (m *matrix) refusedHTTP(t *testing.T, x *mxTenant, c mxCred, want int, method, path string, body any, header ...string) {
	t.Helper()
	for _, b := range m.bearers(t, x, c) {
		if a := m.do(t, method, path, b, body, header...); a.status != want {
			t.Errorf("%s %s with %s's %s: %d %s, want %d", method, path, x.id, c, a.status, a.body, want)
		}
	}
}

// relayRefused dials /relay with each bearer of x's kind c: the upgrade
// must be closed 4401 (with no Authorization at all an HTTP 401 is the
// other documented refusal). Were one accepted, frame would act on y.
func (m *matrix) relayRefused(t *testing.T, x *mxTenant, c mxCred, frame any) {
	t.Helper()
	for _, b := range m.bearers(t, x, c) {
		ctx, cancel := context.WithTimeout(context.Background(), crashWait)
		cl, err := relaytest.Dial(ctx, "ws://"+m.r.child.addr+"/relay", b)
		if err != nil {
			if b != "" || !strings.Contains(err.Error(), "401") {
				t.Errorf("/relay upgrade with %s's %s failed without a 4401: %v", x.id, c, err)
			}
			cancel()
			continue
		}
		_ = cl.Send(ctx, map[string]any{"type": contract.TypeHello, "platform": contract.PlatformRelay, "botId": ""})
		_ = cl.Send(ctx, frame)
		code, _, err := cl.Closed(ctx)
		if err != nil || code != websocket.StatusCode(contract.CloseUnauthorized) {
			t.Errorf("/relay upgrade with %s's %s: closed %d (%v), want 4401", x.id, c, code, err)
		}
		_ = cl.CloseNow()
		cancel()
	}
}

// opAction is op aimed at target g of y, carrying marker where it carries
// text; nil for follow_up, which names a session, not a chat.
func opAction(t *testing.T, m *matrix, op string, x, y *mxTenant, g mxTarget, marker string) map[string]any {
	t.Helper()
	msg := y.discordMsg
	if g.platform == "telegram" {
		msg = y.tgMsg
	}
	a := map[string]any{"op": op, "chat_id": g.chat, "metadata": map[string]any{}}
	switch op {
	case contract.OpSend:
		a["content"], a["reply_to"] = marker, nil
	case contract.OpEdit:
		a["message_id"], a["content"] = msg, marker
	case contract.OpTyping, contract.OpGetChatInfo:
	case contract.OpFollowUp:
		return nil
	case contract.OpSendMedia:
		a["media_kind"], a["source_url"], a["content"], a["filename"] = "document", m.base+"/relay/media/"+x.mediaID, marker, marker+".txt"
	case contract.OpPrompt:
		a["content"], a["prompt_kind"], a["prompt_id"] = marker, "approval", "p1"
		a["options"] = []any{map[string]any{"id": "ok", "label": "OK"}}
	case contract.OpReact:
		a["message_id"], a["emoji"] = msg, "👍"
	case contract.OpThreadCreate:
		a["thread_name"], a["message_id"] = marker, msg
	case contract.OpThreadRename:
		a["message_id"], a["thread_name"] = y.thread.chat, marker
		switch {
		case g.platform == "telegram":
			a["message_id"] = "1"
		case g == y.claimedThread:
			a["message_id"] = g.chat
		}
	case contract.OpDelete:
		a["message_id"] = msg
	case contract.OpDraft:
		a["draft_id"], a["content"], a["final"] = 7, marker, false
	case contract.OpTaskCard:
		a["card_id"], a["chunks"] = "c1", []any{map[string]any{"type": "text", "text": marker}}
	case contract.OpTaskCardStop:
		a["card_id"] = "c1"
	default:
		t.Fatalf("op %q has no action in the authorization matrix: add one to opAction", op)
	}
	return a
}

// declined checks that res refuses x's op on y's chat: egress_declined
// with the uniform text, or unsupported_op where the frame's platform does
// not advertise the op.
func (m *matrix) declined(t *testing.T, res contract.Result, op, tag, what string) {
	t.Helper()
	m.mu.Lock()
	d, known := m.descriptors[tag]
	m.mu.Unlock()
	switch {
	case res.Success:
		t.Errorf("%s succeeded: %+v", what, res)
	case res.Code == contract.CodeEgressDeclined:
		if !strings.HasSuffix(res.Error, " egress declined: target is not an approved destination for this connection") {
			t.Errorf("%s: declined with a text that is not the uniform one: %q", what, res.Error)
		}
	case res.Code == contract.CodeUnsupportedOp && !(known && d.HasOp(op)):
	default:
		t.Errorf("%s: %s %q, want egress_declined", what, res.Code, res.Error)
	}
}

// attackOp: x's gateways run op on every chat of y, tagged with the chat's
// platform and with relay; follow_up names y's interaction session. Each
// is declined without a platform call (the final checks look at the
// fakes); the follow_up answers capability_missing, as for a session
// nobody has. send_media from y's media id into x's own chat is refused as an
// unknown id; edit, react, delete and thread_rename of y's message or
// thread from x's own channel leave them as they are.
func attackOp(t *testing.T, m *matrix, x, y *mxTenant, c mxCred, op string) {
	marker := fmt.Sprintf("xt-attack-%s-%s", x.id, op)
	if c != credUpgrade {
		a := opAction(t, m, op, x, y, y.discordChannel, marker)
		if a == nil {
			a = map[string]any{"op": op, "session_key": y.interactionSession, "kind": "discord.interaction_token", "content": marker}
		}
		m.relayRefused(t, x, c, map[string]any{"type": contract.TypeOutbound, "requestId": relaytest.NewRequestID(), "action": a, "platform": "discord"})
		return
	}
	for _, g := range x.gws {
		if op == contract.OpFollowUp {
			// Another tenant's session answers as a session nobody has:
			// its capability is looked up under the caller's tenant only
			// (docs/contract.md), so the answer tells nothing of y.
			a := map[string]any{"op": op, "session_key": y.interactionSession, "kind": "discord.interaction_token", "content": marker, "metadata": map[string]any{}}
			none := maps.Clone(a)
			none["session_key"] = "agent:main:discord:dm:no-such-session"
			want := g.conn.outbound(t, "discord", none)
			for _, tag := range []string{"discord", contract.PlatformRelay, ""} {
				if res := g.conn.outbound(t, tag, a); res.Success || res.Code != contract.CodeCapabilityMissing || res != want {
					t.Errorf("%s's follow_up of %s's interaction (tag %q): %+v, want capability_missing as for no session (%+v)", g.id, y.id, tag, res, want)
				}
			}
			continue
		}
		for _, target := range y.targets() {
			a := opAction(t, m, op, x, y, target, marker)
			for _, tag := range []string{target.platform, contract.PlatformRelay} {
				m.declined(t, g.conn.outbound(t, tag, a), op, tag, fmt.Sprintf("%s's %s on %s's %s (tag %s)", g.id, op, y.id, target, tag))
			}
		}
	}
	gw := x.gws[mxAdminGW].conn
	switch op {
	case contract.OpSendMedia:
		// y's media id names nothing of x's: the answer is the one for an
		// unknown id.
		for _, own := range []mxTarget{x.discordChannel, x.tgChat} {
			a := opAction(t, m, op, x, y, own, marker)
			a["source_url"] = m.base + "/relay/media/" + y.mediaID
			res := gw.outbound(t, own.platform, a)
			a["source_url"] = m.base + "/relay/media/" + strings.Repeat("0", 32)
			unknown := gw.outbound(t, own.platform, a)
			if res.Success || res.Code != contract.CodeBadRequest || res != unknown {
				t.Errorf("%s's send_media of %s's media into its own %s: %+v, want the answer to an unknown id %+v", x.id, y.id, own, res, unknown)
			}
		}
	case contract.OpEdit, contract.OpReact, contract.OpDelete, contract.OpThreadRename:
		// y's message or thread, named from x's own channel; thread_rename
		// also names y's thread in its claimed channel from x's own claimed
		// channel, in the same guild nobody is bound to.
		targets := [][2]mxTarget{{x.discordChannel, y.thread}}
		if op == contract.OpThreadRename {
			targets = append(targets, [2]mxTarget{x.claimedChannel, y.claimedThread})
		}
		for _, g := range targets {
			own, victim := g[0], g[1]
			before := m.dfake.Messages(y.discordChannel.chat)
			thread, _ := m.dfake.Channel(victim.chat)
			a := opAction(t, m, op, x, y, own, "xt-own-"+x.id) // x's own channel: not an attack's text
			if op == contract.OpThreadRename {
				a["message_id"] = victim.chat
			} else {
				a["message_id"] = y.discordMsg
			}
			_ = gw.outbound(t, "discord", a)
			after := m.dfake.Messages(y.discordChannel.chat)
			threadAfter, _ := m.dfake.Channel(victim.chat)
			if fmt.Sprint(after) != fmt.Sprint(before) || fmt.Sprint(threadAfter) != fmt.Sprint(thread) {
				t.Errorf("%s's %s from its own %s changed %s's message or %s:\nbefore %v %v\nafter  %v %v", x.id, op, own, y.id, victim, before, thread, after, threadAfter)
			}
		}
	}
}

// attackHello: x's hello with a Discord command manifest registers x's
// commands on x's guild, never on y's guilds nor globally.
func attackHello(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	name := "xtcmd-" + x.id
	manifest := []any{map[string]any{"name": name, "description": "x's command"}}
	if c != credUpgrade {
		m.relayRefused(t, x, c, map[string]any{"type": contract.TypeHello, "platform": "discord", "botId": "", "command_manifest": manifest})
		return
	}
	conn := m.connect(t, x, x.gws[mxAdminGW], manifest)
	defer conn.c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if _, err := m.dfake.WaitRequest(ctx, func(q discordtest.Request) bool {
		return q.Method == http.MethodPut && q.Path == "/api/v9/applications/9000/guilds/"+x.discordChannel.guild+"/commands" && strings.Contains(string(q.Body), name)
	}); err != nil {
		t.Fatalf("%s's commands never reached its own guild: %v", x.id, err)
	}
	has := func(cmds []map[string]any) bool {
		return slices.ContainsFunc(cmds, func(c map[string]any) bool { return c["name"] == name })
	}
	for _, g := range []string{y.discordChannel.guild, y.boundChannel.guild} {
		if has(m.dfake.GuildCommands(g)) {
			t.Errorf("%s's command %s is registered on %s's guild %s", x.id, name, y.id, g)
		}
	}
	if has(m.dfake.Commands()) && x != m.ta { // ta, the dm_tenant, has the global (DM-only) commands
		t.Errorf("%s's command %s is registered globally", x.id, name)
	}
}

// attackGoingIdle: x's going_idle idles x's connection only: y's inbound
// still reaches y at once.
func attackGoingIdle(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	frame := map[string]any{"type": contract.TypeGoingIdle}
	if c != credUpgrade {
		m.relayRefused(t, x, c, frame)
		return
	}
	conn := m.connect(t, x, x.gws[mxProvGW], nil)
	defer conn.c.Close()
	conn.send(t, frame)
	m.await(t, x.id+"'s going_idle_ack", func() (bool, error) {
		_, ok := conn.find(func(f relaytest.Frame) bool { return f.Type == contract.TypeGoingIdleAck })
		return ok, nil
	})
	m.deliver(t, y, y.tgChat, "")
	m.deliver(t, y, y.room, "")
}

// interrupts counts the interrupt_inbound frames x's connections received
// for session.
func (m *matrix) interrupts(x *mxTenant, session string) int {
	m.mu.Lock()
	conns := slices.Clone(m.conns[x])
	m.mu.Unlock()
	n := 0
	for _, c := range conns {
		n += c.count(func(f relaytest.Frame) bool {
			return f.Type == contract.TypeInterruptInbound && f.SessionKey == session
		})
	}
	return n
}

// attackInterrupt: x's interrupt of y's session reaches nobody; y's own
// interrupt of it reaches y's owning connection (once: the final checks
// count every interrupt_inbound).
func attackInterrupt(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	frame := func(reason string) map[string]any {
		return map[string]any{"type": contract.TypeInterrupt, "session_key": y.tgSession, "reason": reason}
	}
	if c != credUpgrade {
		m.relayRefused(t, x, c, frame("xt-attack"))
		return
	}
	for _, g := range x.gws {
		g.conn.send(t, frame("xt-attack"))
	}
	m.mu.Lock()
	m.ownInterrupts[y.tgSession]++
	want := m.ownInterrupts[y.tgSession]
	m.mu.Unlock()
	y.gws[mxAdminGW].conn.send(t, frame("own"))
	m.await(t, fmt.Sprintf("%s's interrupt of its own session", y.id), func() (bool, error) {
		return m.interrupts(y, y.tgSession) >= want, nil
	})
	if n := m.interrupts(y, y.tgSession); n != want {
		t.Errorf("%s's session got %d interrupts, %d of them its own", y.id, n, want)
	}
	if n := m.interrupts(x, y.tgSession); n != 0 {
		t.Errorf("%s's connections got %d interrupts of %s's session", x.id, n, y.id)
	}
}

// attackInboundAck: x acknowledges the bufferId of an inbound y holds
// unacknowledged: the entry stays y's, and is delivered again once y's
// connection holding it closes.
func attackInboundAck(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	if c != credUpgrade {
		m.relayRefused(t, x, c, map[string]any{"type": contract.TypeInboundAck, "bufferId": "1"})
		return
	}
	f, ok := m.deliver(t, y, y.tgChat, "-hold")
	if !ok {
		return
	}
	for _, g := range x.gws {
		g.conn.send(t, map[string]any{"type": contract.TypeInboundAck, "bufferId": f.BufferID})
	}
	var holder *mxGateway
	for _, g := range y.gws {
		if _, ok := g.conn.find(func(h relaytest.Frame) bool { return h.BufferID == f.BufferID }); ok {
			holder = g
		}
	}
	if holder == nil {
		t.Fatalf("no connection of %s holds %s", y.id, f.BufferID)
	}
	_ = holder.conn.c.CloseNow()
	<-holder.conn.done
	holder.conn = m.connect(t, y, holder, nil)
	count := func() (n int, last *mxConn) {
		for _, g := range y.gws {
			if k := g.conn.count(func(h relaytest.Frame) bool { return h.BufferID == f.BufferID }); k > 0 {
				n, last = n+k, g.conn
			}
		}
		return n, last
	}
	m.await(t, fmt.Sprintf("%s's unacknowledged %s delivered again (%s acknowledged it)", y.id, f.BufferID, x.id), func() (bool, error) {
		n, _ := count()
		return n >= 1, nil
	})
	_, last := count()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if err := last.c.Ack(ctx, f.BufferID); err != nil {
		t.Fatal(err)
	}
}

// attackMediaUpload: x's upload is x's: y cannot read it, x can; a
// credential that is not an upgrade token is refused 401.
func attackMediaUpload(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	body := "xt-attack upload of " + x.id
	if c != credUpgrade {
		m.refusedHTTP(t, x, c, http.StatusUnauthorized, http.MethodPost, "/relay/media", body, "Content-Type", "text/plain")
		return
	}
	for _, g := range x.gws {
		a := m.do(t, http.MethodPost, "/relay/media", g.token(), body, "Content-Type", "text/plain")
		var up struct{ ID string }
		if err := json.Unmarshal([]byte(a.body), &up); a.status != http.StatusOK || err != nil {
			t.Fatalf("%s's upload: %d %s", g.id, a.status, a.body)
		}
		for _, yg := range y.gws {
			if a := m.do(t, http.MethodGet, "/relay/media/"+up.ID, yg.token(), nil); a.status != http.StatusNotFound {
				t.Errorf("%s read %s's upload: %d", yg.id, x.id, a.status)
			}
		}
		if a := m.do(t, http.MethodGet, "/relay/media/"+up.ID, g.token(), nil); a.status != http.StatusOK || a.body != body {
			t.Errorf("%s reads its own upload: %d %q", g.id, a.status, a.body)
		}
	}
}

// attackMediaGet: y's media id answers x as an unknown id does (GET and
// HEAD, a query naming y too); other credentials are refused 401.
func attackMediaGet(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	path := "/relay/media/" + y.mediaID
	if c != credUpgrade {
		m.refusedHTTP(t, x, c, http.StatusUnauthorized, http.MethodGet, path, nil)
		return
	}
	for _, g := range x.gws {
		unknown := m.do(t, http.MethodGet, "/relay/media/"+strings.Repeat("0", 32), g.token(), nil)
		for _, p := range []string{path, path + "?tenant=" + y.id} {
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				a := m.do(t, method, p, g.token(), nil)
				want := unknown
				if method == http.MethodHead {
					want.body = ""
				}
				if a != want || strings.Contains(a.body, y.mediaBody) {
					t.Errorf("%s %s by %s: %d %q, want the unknown id's %d %q", method, p, g.id, a.status, a.body, want.status, want.body)
				}
			}
		}
	}
}

// attackPolicy: x's relevance policy is x's: x requiring an address on
// Discord and Telegram leaves y's unaddressed messages reaching y.
func attackPolicy(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	policy := func(p string, require bool) map[string]any {
		return map[string]any{"platform": p, "requireAddress": require, "freeResponseScopes": []string{}, "allowOtherBots": false,
			"tenant": y.id, "gatewayId": y.gws[mxAdminGW].id}
	}
	if c != credUpgrade {
		m.refusedHTTP(t, x, c, http.StatusUnauthorized, http.MethodPost, "/relay/policy", policy("discord", true))
		return
	}
	for _, p := range []string{"discord", "telegram"} {
		if a := m.do(t, http.MethodPost, "/relay/policy", x.gws[mxAdminGW].token(), policy(p, true)); a.status != http.StatusOK {
			t.Fatalf("%s's policy: %d %s", x.id, a.status, a.body)
		}
	}
	m.deliver(t, y, y.discordChannel, "")
	m.deliver(t, y, y.tgChat, "")
	for _, p := range []string{"discord", "telegram"} {
		if a := m.do(t, http.MethodPost, "/relay/policy", x.gws[mxAdminGW].token(), policy(p, false)); a.status != http.StatusOK {
			t.Fatalf("%s's policy: %d %s", x.id, a.status, a.body)
		}
	}
}

// attackEnroll: x enrolls with y's gateway ids (its own enrollment token,
// 409) or with y's enrollment token (403: the token stays y's and
// redeemable, which the final checks show); a bearer that is not an
// identity token is refused 401. No answer carries a secret.
func attackEnroll(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	want := func(a mxAnswer, status int, what string) {
		t.Helper()
		if a.status != status || strings.Contains(a.body, `"secret"`) {
			t.Errorf("%s: %d %s, want %d without a secret", what, a.status, a.body, status)
		}
	}
	switch c {
	case credIdentity:
		for _, g := range []*mxGateway{y.gws[mxAdminGW], y.gws[mxProvGW], y.spare} {
			var tok struct{ Token string }
			_ = json.Unmarshal([]byte(m.admin(t, http.MethodPost, "/admin/v1/tenants/"+x.id+"/enroll-tokens", map[string]string{"ttl": "1h"}, http.StatusCreated)), &tok)
			a := m.do(t, http.MethodPost, "/relay/enroll", m.identity(t, x, "connector"), map[string]string{"enrollmentToken": tok.Token, "gatewayId": g.id})
			want(a, http.StatusConflict, x.id+" enrolls as "+g.id)
		}
	case credEnroll:
		for _, id := range []string{"gw-" + x.id + "-stolen", y.gws[mxAdminGW].id} {
			a := m.do(t, http.MethodPost, "/relay/enroll", m.identity(t, x, "connector"), map[string]string{"enrollmentToken": y.enrollToken, "gatewayId": id})
			want(a, http.StatusForbidden, x.id+" redeems "+y.id+"'s enrollment token as "+id)
		}
		m.refusedHTTP(t, x, c, http.StatusUnauthorized, http.MethodPost, "/relay/enroll", map[string]string{"enrollmentToken": x.enrollToken, "gatewayId": y.gws[mxAdminGW].id})
	default:
		m.refusedHTTP(t, x, c, http.StatusUnauthorized, http.MethodPost, "/relay/enroll", map[string]string{"enrollmentToken": x.enrollToken, "gatewayId": y.gws[mxAdminGW].id})
	}
}

// attackProvision: x provisions y's gateway ids, or its own gateway with
// route keys naming y's chats, guilds and rooms: each is refused 409
// without a secret, y's registry entry stays as it was and x's names none
// of y's ids; y's chats still reach y.
func attackProvision(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	if c != credIdentity {
		m.refusedHTTP(t, x, c, http.StatusUnauthorized, http.MethodPost, "/relay/provision", map[string]any{"gatewayId": y.gws[mxProvGW].id, "platform": "relay"})
		return
	}
	bearer := m.identity(t, x, "connector")
	try := func(t *testing.T, what string, body map[string]any) {
		t.Helper()
		m.unchanged(t, x, y, func() {
			a := m.do(t, http.MethodPost, "/relay/provision", bearer, body)
			if a.status != http.StatusConflict || strings.Contains(a.body, `"secret"`) {
				t.Errorf("%s provisions %s: %d %s, want 409 without a secret", x.id, what, a.status, a.body)
			}
			if keys, _ := body["routeKeys"].([]string); a.status == http.StatusOK && len(keys) == 1 {
				// Undo the binding, so that the rows after this one start
				// from y's own routing.
				kind := map[string]string{"telegram": platform.BindChat, "discord": platform.BindGuild, "nexscope": platform.BindRoom,
					"whatsapp_cloud": platform.BindPhoneNumber, "slack": platform.BindTeam}[body["platform"].(string)]
				t.Cleanup(func() {
					m.admin(t, http.MethodDelete, "/admin/v1/tenants/"+x.id+"/bindings", map[string]string{"platform": body["platform"].(string), "kind": kind, "id": keys[0]}, http.StatusNoContent)
				})
			}
		})
	}
	for _, g := range []*mxGateway{y.gws[mxProvGW], y.gws[mxAdminGW], y.spare} {
		try(t, y.id+"'s gateway "+g.id, map[string]any{"gatewayId": g.id, "platform": contract.PlatformRelay, "wakeUrl": "http://127.0.0.1:1/xt-attack"})
	}
	// Each route key with the chat of y it would take.
	keys := []struct {
		platform, key string
		chat          mxTarget
	}{
		{"telegram", y.tgChat.chat, y.tgChat}, {"telegram", y.tgBound.chat, y.tgBound},
		{"telegram", y.tgProvisioned.chat, y.tgProvisioned}, {"telegram", y.tgClaimed.chat, y.tgClaimed},
		{"telegram", y.tgDM.chat, y.tgDM},
		{"discord", y.discordChannel.guild, y.discordChannel}, {"discord", y.boundChannel.guild, y.boundChannel},
		{"nexscope", y.room.room, y.room}, {"nexscope", y.boundRoom.room, y.boundRoom},
		{"whatsapp_cloud", y.waChat.number, y.waChat}, {"whatsapp_cloud", y.waBound.number, y.waBound},
		{"slack", y.slackChat.guild, y.slackChat},
	}
	for _, k := range keys {
		t.Run(k.chat.String(), func(t *testing.T) {
			try(t, fmt.Sprintf("its gateway with routeKey %s (%s's %s)", k.key, y.id, k.chat), map[string]any{
				"gatewayId": x.gws[mxProvGW].id, "platform": k.platform, "routeKeys": []string{k.key}, "instanceId": "i-" + x.id, "wakeUrl": x.wakeURL})
			m.deliver(t, y, k.chat, "")
			m.cannotSend(t, x, y, k.chat, "provision")
		})
	}
}

// attackLink: x's link codes link users to x only, whatever the body
// names; x exhausting its outstanding codes (429) leaves y's budget
// alone; an identity token naming y's gateway is 404, the answer for no
// gateway.
func attackLink(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	body := map[string]any{"platform": "telegram", "instanceId": y.gws[mxAdminGW].id, "tenant": y.id}
	switch c {
	case credUpgrade:
		var answers []string
		status := 0
		for range 17 {
			a := m.do(t, http.MethodPost, "/manage/link", x.gws[mxAdminGW].token(), body)
			if status = a.status; status != http.StatusOK {
				break
			}
			answers = append(answers, a.body)
		}
		if status != http.StatusTooManyRequests {
			t.Errorf("%s's link codes: %d after %d codes, want 429 at most 16 outstanding", x.id, status, len(answers))
		}
		if a := m.do(t, http.MethodPost, "/manage/link", y.gws[mxAdminGW].token(), map[string]string{"platform": "telegram"}); a.status != http.StatusOK {
			t.Errorf("%s's link code while %s is at its bound: %d %s", y.id, x.id, a.status, a.body)
		}
		m.redeemAll(t, x, y, answers)
	case credIdentity:
		m.notYourGateway(t, x, y, "/manage/link", body)
		a := m.do(t, http.MethodPost, "/manage/link", m.identity(t, x, "agent:"+x.gws[mxAdminGW].id), body)
		if a.status != http.StatusOK {
			t.Fatalf("%s's link code with its identity token: %d %s", x.id, a.status, a.body)
		}
		m.redeemAll(t, x, y, []string{a.body})
	default:
		m.refusedHTTP(t, x, c, http.StatusUnauthorized, http.MethodPost, "/manage/link", body)
	}
}

// redeemAll redeems x's link codes, one fresh Telegram user each: every
// user is linked to x, none to y.
func (m *matrix) redeemAll(t *testing.T, x, y *mxTenant, answers []string) {
	t.Helper()
	var users []string
	m.unchanged(t, x, y, func() {
		for _, a := range answers {
			user := strconv.FormatInt(m.next(), 10)
			m.redeem(t, a, user)
			users = append(users, user)
		}
	})
	v := m.view(t, x)
	for _, u := range users {
		if !strings.Contains(v, "telegram/"+platform.BindUser+"/"+u) {
			t.Errorf("user %s redeemed %s's code and is not linked to %s: %s", u, x.id, x.id, v)
		}
	}
}

// manageBearer is x's bearer of kind c on path, a management route: its
// admin gateway's upgrade token, or its identity token naming that
// gateway, once x's identity tokens naming y's gateways are shown to get
// the answer for no gateway. For a kind the plane does not take it checks
// that body with it is refused 401 and returns "".
func (m *matrix) manageBearer(t *testing.T, x, y *mxTenant, c mxCred, path string, body any) string {
	t.Helper()
	switch c {
	case credUpgrade:
		return x.gws[mxAdminGW].token()
	case credIdentity:
		m.notYourGateway(t, x, y, path, body)
		return m.identity(t, x, "agent:"+x.gws[mxAdminGW].id)
	}
	m.refusedHTTP(t, x, c, http.StatusUnauthorized, http.MethodPost, path, body)
	return ""
}

// cannotSend checks that x's send into y's chat g is declined.
func (m *matrix) cannotSend(t *testing.T, x, y *mxTenant, g mxTarget, after string) {
	t.Helper()
	res := x.gws[mxAdminGW].conn.outbound(t, g.platform, map[string]any{"op": contract.OpSend, "chat_id": g.chat,
		"content": "xt-attack-" + x.id + "-" + after, "reply_to": nil, "metadata": map[string]any{}})
	m.declined(t, res, contract.OpSend, g.platform, fmt.Sprintf("%s's send into %s's %s after its %s", x.id, y.id, g, after))
}

// notYourGateway checks that x's identity tokens naming y's gateways get
// the answer of a token naming no gateway (404, the named id echoed).
func (m *matrix) notYourGateway(t *testing.T, x, y *mxTenant, path string, body any) {
	t.Helper()
	m.unchanged(t, x, y, func() {
		none := m.do(t, http.MethodPost, path, m.identity(t, x, "agent:gw-none"), body)
		for _, g := range []*mxGateway{y.gws[mxAdminGW], y.gws[mxProvGW], y.spare} {
			a := m.do(t, http.MethodPost, path, m.identity(t, x, "agent:"+g.id), body)
			if a.status != http.StatusNotFound || strings.ReplaceAll(a.body, g.id, "gw-none") != none.body {
				t.Errorf("POST %s with %s's identity token naming %s: %d %s, want the answer for no gateway %d %s", path, x.id, g.id, a.status, a.body, none.status, none.body)
			}
		}
	})
}

// scopeBody names target g as the management plane does.
func scopeBody(g mxTarget) map[string]any {
	b := map[string]any{"platform": g.platform, "channelId": g.chat}
	if g.guild != "" {
		b["guildId"] = g.guild
	}
	return b
}

// attackScope: x claims each chat of y (configured, bound by the admin API
// or a provision, claimed by y, y's thread, y's linked user's DM, y's
// room, y's WhatsApp users), with principal any: every claim is refused
// (403 or 409; 400 for nexscope and WhatsApp, which take no claims), y's messages there keep reaching y
// alone, and x's send there is declined. This is issue 22 §1's hijack.
func attackScope(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	bearer := m.manageBearer(t, x, y, c, "/manage/scope", scopeBody(y.tgChat))
	if bearer == "" {
		return
	}
	for _, g := range y.targets() {
		t.Run(g.String(), func(t *testing.T) {
			body := scopeBody(g)
			m.unchanged(t, x, y, func() {
				a := m.do(t, http.MethodPost, "/manage/scope", bearer, body)
				switch {
				case a.status == http.StatusOK:
					t.Errorf("%s claimed %s's %s: 200 %s", x.id, y.id, g, a.body)
					t.Cleanup(func() { m.do(t, http.MethodPost, "/manage/scope/release", bearer, body) })
				case (g.platform == "nexscope" || g.platform == "whatsapp_cloud") && a.status == http.StatusBadRequest: // no claims there
				case a.status != http.StatusForbidden && a.status != http.StatusConflict:
					t.Errorf("%s claims %s's %s: %d %s, want 403 or 409", x.id, y.id, g, a.status, a.body)
				}
			})
			m.deliver(t, y, g, "")
			m.cannotSend(t, x, y, g, "claim")
		})
	}
}

// attackRelease: x releases y's claims and chats: 404 (400 on nexscope and
// WhatsApp),
// y's claims stay and keep routing to y.
func attackRelease(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	bearer := m.manageBearer(t, x, y, c, "/manage/scope/release", scopeBody(y.claimedChannel))
	if bearer == "" {
		return
	}
	m.unchanged(t, x, y, func() {
		for _, g := range y.targets() {
			want := http.StatusNotFound
			if g.platform == "nexscope" || g.platform == "whatsapp_cloud" {
				want = http.StatusBadRequest
			}
			if a := m.do(t, http.MethodPost, "/manage/scope/release", bearer, scopeBody(g)); a.status != want {
				t.Errorf("%s releases %s's %s: %d %s, want %d", x.id, y.id, g, a.status, a.body, want)
			}
		}
	})
	m.deliver(t, y, y.claimedChannel, "")
	m.deliver(t, y, y.tgClaimed, "")
}

// attackPrincipal: x's principal is x's: x narrowing its own (owner-only,
// an allow-list of y's user) with a body naming y leaves y's claims open
// to every author.
func attackPrincipal(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	narrow := []map[string]any{
		{"platform": "discord", "principal": platform.PrincipalOwnerOnly, "tenant": y.id, "instanceId": y.gws[mxAdminGW].id},
		{"platform": "telegram", "principal": platform.PrincipalAllowList, "allow": []string{y.tgDM.user}, "tenant": y.id},
	}
	bearer := m.manageBearer(t, x, y, c, "/manage/principal", narrow[0])
	if bearer == "" {
		return
	}
	m.unchanged(t, x, y, func() {
		for _, b := range narrow {
			if a := m.do(t, http.MethodPost, "/manage/principal", bearer, b); a.status != http.StatusOK {
				t.Errorf("%s sets its principal %v: %d %s", x.id, b, a.status, a.body)
			}
		}
		m.deliver(t, y, y.claimedChannel, "")
		m.deliver(t, y, y.tgClaimed, "")
		m.principalAny(t, x) // x's allow-list named y's user; any drops it
	})
}

// attackDMDefault: x cannot make itself the DM default of y's linked user
// (404: the user is not linked to x); the user's DMs keep reaching y.
func attackDMDefault(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	body := map[string]any{"platform": "telegram", "userId": y.tgDM.user}
	bearer := m.manageBearer(t, x, y, c, "/manage/dm-default", body)
	if bearer == "" {
		return
	}
	m.unchanged(t, x, y, func() {
		for _, p := range []string{"telegram", "discord"} {
			body["platform"] = p
			if a := m.do(t, http.MethodPost, "/manage/dm-default", bearer, body); a.status != http.StatusNotFound {
				t.Errorf("%s makes itself %s's user's DM default on %s: %d %s, want 404", x.id, y.id, p, a.status, a.body)
			}
		}
	})
	m.deliver(t, y, y.tgDM, "")
}

// attackDeprovision: an identity token of x naming y's gateways is 404 (the
// answer for none); x's upgrade token deprovisions x's own gateway whatever
// the body names. y's connections stay open, its entry and chats as they
// were.
func attackDeprovision(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	body := map[string]any{"instanceId": y.gws[mxAdminGW].id, "gatewayId": y.gws[mxAdminGW].id, "tenant": y.id}
	switch c {
	case credIdentity:
		m.notYourGateway(t, x, y, "/manage/deprovision", body)
	case credUpgrade:
		m.unchanged(t, x, y, func() {
			if a := m.do(t, http.MethodPost, "/manage/deprovision", x.spare.token(), body); a.status != http.StatusOK {
				t.Errorf("%s deprovisions its own spare gateway: %d %s", x.id, a.status, a.body)
			}
		})
		if strings.Contains(m.view(t, x), `"`+x.spare.id+`"`) {
			t.Errorf("%s's spare gateway was not deprovisioned", x.id)
		}
	default:
		m.refusedHTTP(t, x, c, http.StatusUnauthorized, http.MethodPost, "/manage/deprovision", body)
	}
	for _, g := range y.gws {
		if g.conn.closed() {
			t.Errorf("%s's connection closed under %s's deprovision", g.id, x.id)
		}
	}
	m.deliver(t, y, y.tgChat, "")
	m.deliver(t, y, y.discordChannel, "")
}

// attackNexscope: a tenant's credentials are not nexscope's token: as the
// token parameter or a bearer, /ws and /ws/<y's room> close the member
// 1008 before it joins.
func attackNexscope(room string) func(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	return func(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
		path := "/ws"
		if room != "" {
			path += "/" + y.room.room
		}
		for _, b := range m.bearers(t, x, c) {
			ctx, cancel := context.WithTimeout(context.Background(), crashWait)
			h := http.Header{}
			if b != "" {
				h.Set("Authorization", "Bearer "+b)
			}
			url := "ws://" + m.r.child.addr + path + "?name=mallory" + strconv.FormatInt(m.next(), 10) + "&v=1&token=" + b
			ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
			if err != nil {
				t.Errorf("%s with %s's %s: %v, want a 1008 close", path, x.id, c, err)
				cancel()
				continue
			}
			_, _, err = ws.Read(ctx)
			if code := websocket.CloseStatus(err); code != websocket.StatusPolicyViolation {
				t.Errorf("%s with %s's %s: %v, want a 1008 close", path, x.id, c, err)
			}
			_ = ws.CloseNow()
			cancel()
		}
	}
}

// attackDiscordInteractions: a tenant's credential signs nothing: an
// interaction in y's guild carrying it is refused 401.
func attackDiscordInteractions(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	body := string(discordtest.SlashCommand(strconv.FormatInt(m.next(), 10), "xt-attack-token", y.discordChannel.guild, y.discordChannel.chat))
	for _, b := range m.bearers(t, x, c) {
		a := m.do(t, http.MethodPost, "/discord/interactions", b, body,
			"X-Signature-Ed25519", fmt.Sprintf("%x", b), "X-Signature-Timestamp", strconv.FormatInt(time.Now().Unix(), 10))
		if a.status != http.StatusUnauthorized {
			t.Errorf("interaction in %s's guild with %s's %s: %d %s, want 401", y.id, x.id, c, a.status, a.body)
		}
	}
}

// attackTelegramWebhook: a tenant's credential is not the webhook secret:
// an update in y's chat carrying it is refused 401.
func attackTelegramWebhook(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	id := m.next()
	body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1767225300,"chat":{"id":%s,"type":"group","title":"G"},"from":{"id":7001,"is_bot":false,"first_name":"U"},"text":"xt-attack-%s-webhook"}}`,
		id, id, y.tgChat.chat, x.id)
	for _, b := range m.bearers(t, x, c) {
		var header []string
		if b != "" {
			header = []string{"X-Telegram-Bot-Api-Secret-Token", b}
		}
		if a := m.do(t, http.MethodPost, "/telegram/webhook", b, body, header...); a.status != http.StatusUnauthorized {
			t.Errorf("update in %s's chat with %s's %s: %d %s, want 401", y.id, x.id, c, a.status, a.body)
		}
	}
}

// attackWhatsAppVerify: no credential of a tenant completes Meta's
// subscription handshake: as hub.verify_token or as a bearer, 403, and the
// challenge is not echoed.
func attackWhatsAppVerify(t *testing.T, m *matrix, x, _ *mxTenant, c mxCred) {
	for _, b := range m.bearers(t, x, c) {
		path := "/whatsapp/webhook?hub.mode=subscribe&hub.challenge=xt-attack-challenge&hub.verify_token=" + url.QueryEscape(b)
		if a := m.do(t, http.MethodGet, path, b, nil); a.status != http.StatusForbidden || strings.Contains(a.body, "xt-attack") {
			t.Errorf("the WhatsApp handshake with %s's %s: %d %q, want 403", x.id, c, a.status, a.body)
		}
	}
}

// attackWhatsAppWebhook: a message into y's business number signed with
// x's credential (as the HMAC key of X-Hub-Signature-256, or sent as that
// header or a bearer) is 401 and delivers nothing.
func attackWhatsAppWebhook(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	body := whatsapptest.Text(whatsapptest.Business{PhoneNumberID: y.waChat.number, DisplayNumber: "1555"}, y.waChat.chat, "U",
		"wamid.xt"+strconv.FormatInt(m.next(), 10), "xt-attack-"+x.id+"-whatsapp")
	for _, b := range m.bearers(t, x, c) {
		for _, sig := range []string{whatsapptest.Sign(b, body), b} {
			var header []string
			if b != "" {
				header = []string{"X-Hub-Signature-256", sig}
			}
			if a := m.do(t, http.MethodPost, "/whatsapp/webhook", b, string(body), header...); a.status != http.StatusUnauthorized {
				t.Errorf("a message to %s's number signed with %s's %s: %d %s, want 401", y.id, x.id, c, a.status, a.body)
			}
		}
	}
}

// slackWrites are the Slack Web API methods that write into a channel.
var slackWrites = map[string]bool{"chat.postMessage": true, "chat.postEphemeral": true, "chat.update": true, "chat.delete": true,
	"chat.startStream": true, "chat.appendStream": true, "chat.stopStream": true, "reactions.add": true, "reactions.remove": true,
	"files.completeUploadExternal": true, "assistant.threads.setStatus": true}

// attackSlackSigned: a tenant's credential is not Slack's signing
// secret: an event, a press or a slash command in y's channel signed with
// it (as the HMAC key of X-Slack-Signature, or sent as that header or a
// bearer) is 401 and delivers nothing.
func attackSlackSigned(path string) func(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	return func(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
		g := y.slackChat
		text := "xt-attack-" + x.id + "-slack"
		n := m.next()
		ts := fmt.Sprintf("1768490000.%06d", n)
		body, contentType := slacktest.Envelope(g.guild, "UMXBOT001", "EvXT"+strconv.FormatInt(n, 10),
			slacktest.MessageEvent(g.guild, g.chat, "UMXUSER01", ts, "", text)), "application/json"
		switch path {
		case "/slack/interactions":
			body, contentType = slacktest.Press(g.guild, g.chat, "UMXUSER01", ts, "", "hp1:p1:ok", text), "application/x-www-form-urlencoded"
		case "/slack/commands":
			body, contentType = slacktest.Command(g.guild, g.chat, "UMXUSER01", "/status", text, ""), "application/x-www-form-urlencoded"
		}
		now := strconv.FormatInt(time.Now().Unix(), 10)
		for _, b := range m.bearers(t, x, c) {
			for _, sig := range []string{slacktest.Sign(b, time.Now(), body), b} {
				header := []string{"Content-Type", contentType}
				if b != "" {
					header = append(header, "X-Slack-Signature", sig, "X-Slack-Request-Timestamp", now)
				}
				if a := m.do(t, http.MethodPost, path, b, string(body), header...); a.status != http.StatusUnauthorized {
					t.Errorf("POST %s in %s's channel signed with %s's %s: %d %s, want 401", path, y.id, x.id, c, a.status, a.body)
				}
			}
		}
	}
}

// attackSlackInstall: /slack/install takes no credential and binds
// nothing: with any of x's it answers the redirect to Slack's consent
// page, and neither tenant's registry entry moves.
func attackSlackInstall(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	m.unchanged(t, x, y, func() {
		for _, b := range m.bearers(t, x, c) {
			browser := &http.Client{Timeout: crashWait, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			req, _ := http.NewRequest(http.MethodGet, m.base+"/slack/install", nil)
			if b != "" {
				req.Header.Set("Authorization", "Bearer "+b)
			}
			resp, err := browser.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusFound || !strings.HasPrefix(resp.Header.Get("Location"), strings.TrimSuffix(m.sfake.URL, "/")+"/oauth/v2/authorize") {
				t.Errorf("/slack/install with %s's %s: %d %s", x.id, c, resp.StatusCode, resp.Header.Get("Location"))
			}
		}
	})
}

// attackSlackCallback: an install's callback needs the state the install
// route signed and the cookie of the browser that asked: x's credential
// as the state (with or without a cookie carrying it), and a code of y's
// workspace, is 400 and installs nothing; y's workspace keeps serving y.
func attackSlackCallback(t *testing.T, m *matrix, x, y *mxTenant, c mxCred) {
	code := "xt-code-" + x.id + "-" + string(c)
	m.sfake.AddOAuthCode(code, mxSlackTeam(int(y.slackChat.guild[len(y.slackChat.guild)-1]-'0')))
	exchanges := len(m.sfake.Calls("oauth.v2.access"))
	m.unchanged(t, x, y, func() {
		for _, b := range m.bearers(t, x, c) {
			state := cmp.Or(b, "xt-state")
			path := "/slack/oauth/callback?" + url.Values{"code": {code}, "state": {state}}.Encode()
			for _, header := range [][]string{nil, {"Cookie", "slack_oauth_state=" + state}} {
				if a := m.do(t, http.MethodGet, path, b, nil, header...); a.status != http.StatusBadRequest {
					t.Errorf("the Slack OAuth callback with %s's %s as the state: %d %s, want 400", x.id, c, a.status, a.body)
				}
			}
		}
	})
	if n := len(m.sfake.Calls("oauth.v2.access")); n != exchanges {
		t.Errorf("a forged callback exchanged Slack's code (%d calls)", n-exchanges)
	}
	m.deliver(t, y, y.slackChat, "")
}

// attackHealthz: /healthz says "ok" to anyone and nothing else.
func attackHealthz(t *testing.T, m *matrix, x, _ *mxTenant, c mxCred) {
	for _, b := range m.bearers(t, x, c) {
		if a := m.do(t, http.MethodGet, "/healthz", b, nil); a.status != http.StatusOK || a.body != "ok\n" {
			t.Errorf("/healthz with %s's %s: %d %q", x.id, c, a.status, a.body)
		}
	}
}

// checkAfterwards checks, after every row but deprovision, what the rows
// could not see alone.
func (m *matrix) checkAfterwards(t *testing.T) {
	for _, y := range []*mxTenant{m.ta, m.tb} {
		x := m.other(y)
		// No message of y reached x; nothing of an attack reached anyone.
		m.mu.Lock()
		conns := slices.Clone(m.conns[x])
		m.mu.Unlock()
		for _, c := range conns {
			c.mu.Lock()
			for _, f := range c.frames {
				if strings.Contains(string(f.Raw), "xt-to-"+y.id) || strings.Contains(string(f.Raw), "xt-attack") {
					t.Errorf("%s's connection got %s", x.id, f.Raw)
				}
			}
			c.mu.Unlock()
		}
		if n, want := m.interrupts(y, y.tgSession), m.ownInterrupts[y.tgSession]; n != want {
			t.Errorf("%s's session got %d interrupts, %d of them its own", y.id, n, want)
		}
		// No platform call wrote into y's chats after the setup.
		ids := []string{y.discordChannel.chat, y.boundChannel.chat, y.claimedChannel.chat, y.thread.chat, y.claimedThread.chat, y.discordDM.chat, y.interactionToken}
		for _, q := range m.dfake.Requests()[m.setupReqs:] {
			if q.Method == http.MethodGet || strings.Contains(q.Path, "/messages/"+x.discordMsg) {
				continue // a read, or x's op in its own channel naming y's message
			}
			for _, id := range ids {
				if strings.Contains(q.Path, "/"+id) {
					t.Errorf("Discord got %s %s, a write to %s's %s, during the attacks", q.Method, q.Path, y.id, id)
				}
			}
		}
		slackChats := []string{y.slackChat.chat, y.slackBound.chat}
		for _, call := range m.sfake.Calls("")[m.setupSlack:] {
			if slackWrites[call.Method] && slices.Contains(slackChats, call.Form.Get("channel")) {
				t.Errorf("Slack got %s %v, a write to %s's channel, during the attacks", call.Method, call.Form, y.id)
			}
		}
		for _, s := range m.wfake.Sent()[m.setupSent:] {
			if s.To == y.waChat.chat || s.To == y.waBound.chat {
				t.Errorf("WhatsApp got a message from %s to %s's user %s during the attacks", s.PhoneNumberID, y.id, s.To)
			}
		}
		chats := []string{y.tgChat.chat, y.tgBound.chat, y.tgProvisioned.chat, y.tgClaimed.chat, y.tgDM.chat}
		for _, call := range m.r.tfake.Calls("")[m.setupCalls:] {
			if !strings.HasPrefix(call.Method, "get") && slices.Contains(chats, call.Form["chat_id"]) {
				t.Errorf("Telegram got %s %v, a write to %s's chat, during the attacks", call.Method, call.Form, y.id)
			}
		}
	}
	for _, q := range m.dfake.Requests() {
		if strings.Contains(string(q.Body), "xt-attack") || strings.Contains(q.Path, "xt-attack") {
			t.Errorf("Discord got an attack: %s %s %s", q.Method, q.Path, q.Body)
		}
	}
	for _, call := range m.r.tfake.Calls("") {
		for _, v := range call.Form {
			if strings.Contains(v, "xt-attack") {
				t.Errorf("Telegram got an attack: %s %v", call.Method, call.Form)
			}
		}
	}
	for _, call := range m.sfake.Calls("") {
		if strings.Contains(call.Form.Encode(), "xt-attack") || strings.Contains(string(call.JSON), "xt-attack") {
			t.Errorf("Slack got an attack: %s %v %s", call.Method, call.Form, call.JSON)
		}
	}
	for _, s := range m.wfake.Sent() {
		if raw, _ := json.Marshal(s.Body); strings.Contains(string(raw), "xt-attack") {
			t.Errorf("WhatsApp got an attack: from %s to %s: %s", s.PhoneNumberID, s.To, raw)
		}
	}
	m.mu.Lock()
	for room, mem := range m.members {
		mem.mu.Lock()
		for _, f := range mem.frames {
			if strings.Contains(f, "xt-attack") {
				t.Errorf("a member of room %s got an attack: %s", room, f)
			}
		}
		mem.mu.Unlock()
	}
	m.mu.Unlock()

	// Each tenant is served as before: its chats, its interaction's
	// capability, its media and its enrollment token.
	for _, y := range []*mxTenant{m.ta, m.tb} {
		for _, g := range y.targets() {
			m.deliver(t, y, g, "")
		}
		res := y.gws[mxAdminGW].conn.outbound(t, "discord", map[string]any{"op": contract.OpFollowUp, "session_key": y.interactionSession,
			"kind": "discord.interaction_token", "content": "answered after the attacks", "metadata": map[string]any{}})
		if !res.Success {
			t.Errorf("%s's follow_up of its interaction after the attacks: %+v", y.id, res)
		}
		if a := m.do(t, http.MethodGet, "/relay/media/"+y.mediaID, y.gws[mxProvGW].token(), nil); a.status != http.StatusOK || a.body != y.mediaBody {
			t.Errorf("%s reads its media after the attacks: %d %q", y.id, a.status, a.body)
		}
		a := m.do(t, http.MethodPost, "/relay/enroll", m.identity(t, y, "connector"), map[string]string{"enrollmentToken": y.enrollToken, "gatewayId": "gw-" + y.id + "-enrolled"})
		if a.status != http.StatusOK {
			t.Errorf("%s redeems its enrollment token after the attacks: %d %s", y.id, a.status, a.body)
		}
	}
}

// checkAlive checks that the connector still runs and answers, and that
// its log holds no secret or token of either tenant.
func (m *matrix) checkAlive(t *testing.T) {
	select {
	case <-m.r.child.exited:
		t.Fatalf("the connector exited: %v", m.r.child.err)
	default:
	}
	if a := m.do(t, http.MethodGet, "/healthz", "", nil); a.status != http.StatusOK {
		t.Errorf("/healthz after the matrix: %d", a.status)
	}
	logs := m.r.child.stderr.String()
	for _, x := range []*mxTenant{m.ta, m.tb} {
		for _, s := range []string{x.gws[0].secret, x.gws[1].secret, x.spare.secret, x.enrollToken, x.interactionToken} {
			if strings.Contains(logs, s) {
				t.Errorf("the connector's log shows a secret or token of %s", x.id)
			}
		}
	}
}
