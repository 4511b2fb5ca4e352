package main

// Slack black-box tests: the connector binary runs as a child process
// against the fake Slack (platform/slack/slacktest) on loopback, with
// gateways of relay/relaytest. Every check goes through the real routes:
// signed events, interactions, slash commands and the OAuth install on
// the public listener, gateway actions over /relay, bindings through the
// admin API.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/redistest"
	"connector/platform/slack/slacktest"
	"connector/relay/relaytest"
	"connector/store"
)

const (
	slackSecret      = "bb-slack-signing-secret"
	slackAdminToken  = "bb-admin-token-41f2"
	slackClientID    = "100.200"
	slackClientSecre = "bb-client-secret"
)

// The black-box world: workspace A (tenant t1 by slack.teams; channel ops
// bound to t3 through the admin API), workspace B (tenant t2, installed
// through OAuth in the test).
var (
	bbTeamA = slacktest.Team{ID: "T0BBA00001", Name: "Alpha", Token: "xoxb-bb-alpha", BotUser: "U0BOTA0001", BotID: "B0BOTA0001"}
	bbTeamB = slacktest.Team{ID: "T0BBB00002", Name: "Beta", Token: "xoxb-bb-beta", BotUser: "U0BOTB0002", BotID: "B0BOTB0002"}
)

const (
	bbGeneral = "C0GENA0001"
	bbOps     = "C0OPSA0002"
	bbBeta    = "C0GENB0001"
	bbAda     = "U0ADA00001"
	bbBob     = "U0BOB00002"
)

// slackRig is a connector configuration with the Slack section, its fake
// and its data directory.
type slackRig struct {
	bin, dir, config string
	env              []string
	fake             *slacktest.Server
	child            *child
	admin            string
}

// newSlackRig writes the config; extra is appended to the slack section.
func newSlackRig(t *testing.T, extra string) *slackRig {
	t.Helper()
	r := &slackRig{bin: connectorBinary(t), dir: t.TempDir(), fake: slacktest.New(t)}
	r.fake.AddTeam(bbTeamA)
	for _, team := range []string{bbTeamA.ID, bbTeamB.ID} {
		r.fake.AddUser(team, slacktest.User{ID: bbAda, Name: "ada", DisplayName: "Ada"})
		r.fake.AddUser(team, slacktest.User{ID: bbBob, Name: "bob", DisplayName: "Bob"})
	}
	r.fake.AddChannel(bbTeamA.ID, slacktest.Channel{ID: bbGeneral, Name: "general"})
	r.fake.AddChannel(bbTeamA.ID, slacktest.Channel{ID: bbOps, Name: "ops"})
	r.fake.AddChannel(bbTeamB.ID, slacktest.Channel{ID: bbBeta, Name: "beta-general"})
	for i := range crashSessions {
		r.fake.AddChannel(bbTeamA.ID, slacktest.Channel{ID: fmt.Sprintf("D0CRASH%03d", i), IsIM: true, Peer: bbAda})
	}
	doc := fmt.Sprintf(`listen: 127.0.0.1:0
ops: {listen: 127.0.0.1:0}
admin: {listen: 127.0.0.1:0, token: %q}
shutdown_grace: 10s
log: {level: debug, format: json}
tenants:
  - {id: t1, gateways: [{id: gw1, secrets: ["gw1-secret"]}]}
  - {id: t2, gateways: [{id: gw2, secrets: ["gw2-secret"]}]}
  - {id: t3, gateways: [{id: gw3, secrets: ["gw3-secret"]}]}
slack:
  api_url: %s
  client_id: %q
  teams: {%q: t1, %q: t2}
  channel_per_second: -1
%s`, slackAdminToken, r.fake.URL, slackClientID, bbTeamA.ID, bbTeamB.ID, extra)
	r.config = filepath.Join(t.TempDir(), "connector.yaml")
	if err := os.WriteFile(r.config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env = []string{"PATH=" + os.Getenv("PATH"), "SLACK_SIGNING_SECRET=" + slackSecret, "SLACK_BOT_TOKEN=" + bbTeamA.Token,
		"SLACK_CLIENT_SECRET=" + slackClientSecre}
	return r
}

// start runs the connector and waits until it listens and asked Slack who
// its bot token is.
func (r *slackRig) start(t *testing.T) {
	t.Helper()
	r.child = startChild(t, r.bin, r.env, r.config, r.dir, true)
	r.admin = r.child.admin
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if _, err := r.fake.WaitCalls(ctx, "auth.test", 1); err != nil {
		t.Fatal(err)
	}
}

// stop ends the child with sig and waits for it.
func (r *slackRig) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	(&crashRig{child: r.child}).stop(t, sig)
}

// gateway dials gateway id and says hello slack.
func (r *slackRig) gateway(t *testing.T, id string) *relaytest.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	gw, err := relaytest.Dial(ctx, "ws://"+r.child.addr+"/relay", relaytest.Token(id, id+"-secret", time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.CloseNow() })
	d, err := gw.Hello(ctx, "slack", "")
	if err != nil || d.Platform != "slack" || !d.HasOp("send_media") {
		t.Fatalf("hello slack: %+v %v", d, err)
	}
	return gw
}

// signed posts a signed body to path (at ts) and returns its status.
func (r *slackRig) signed(t *testing.T, path, contentType string, ts time.Time, body []byte) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(slacktest.SignedRequest("http://"+r.child.addr+path, slackSecret, ts, contentType, body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// event posts an event of team and wants status.
func (r *slackRig) event(t *testing.T, team slacktest.Team, id string, ev map[string]any, want int) {
	t.Helper()
	if code, body := r.signed(t, "/slack/events", "application/json", time.Now(), slacktest.Envelope(team.ID, team.BotUser, id, ev)); code != want {
		t.Fatalf("event %s: %d %s, want %d", id, code, body, want)
	}
}

// next reads gw's next inbound and checks its text.
func next(t *testing.T, gw *relaytest.Client, text string) relaytest.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	f, err := gw.Next(ctx, contract.TypeInbound)
	if err != nil {
		t.Fatalf("waiting for %q: %v", text, err)
	}
	if f.Event.Text != text {
		t.Fatalf("got %q, want %q", f.Event.Text, text)
	}
	if err := gw.Ack(ctx, f.BufferID); err != nil {
		t.Fatal(err)
	}
	return f
}

// slackOutbound runs an action on gw for platform slack.
func slackOutbound(t *testing.T, gw *relaytest.Client, action map[string]any) contract.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	r, err := gw.Outbound(ctx, "slack", action)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSlackBlackBox runs the Slack platform end to end through the binary.
func TestSlackBlackBox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newSlackRig(t, "")
	r.start(t)
	bindChannel(t, r, "t3", bbOps)
	gw1, gw2, gw3 := r.gateway(t, "gw1"), r.gateway(t, "gw2"), r.gateway(t, "gw3")

	// A signed event reaches its workspace's tenant; forged, stale and
	// unsigned ones are refused and deliver nothing (gw1's next event is
	// the good one).
	ev := slacktest.MessageEvent(bbTeamA.ID, bbGeneral, bbAda, "1768490100.000100", "", "<@U0BOTA0001> forged")
	body := slacktest.Envelope(bbTeamA.ID, bbTeamA.BotUser, "EvF", ev)
	for name, req := range map[string]*http.Request{
		"forged": slacktest.SignedRequest("http://"+r.child.addr+"/slack/events", "wrong-secret", time.Now(), "application/json", body),
		"stale":  slacktest.SignedRequest("http://"+r.child.addr+"/slack/events", slackSecret, time.Now().Add(-6*time.Minute), "application/json", body),
	} {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: %d, want 401", name, resp.StatusCode)
		}
	}
	first := slacktest.MessageEvent(bbTeamA.ID, bbGeneral, bbAda, "1768490100.000200", "", "<@U0BOTA0001> deploy the site")
	r.event(t, bbTeamA, "Ev1", first, http.StatusOK)
	f := next(t, gw1, "deploy the site")
	if src := f.Event.Source; src.ScopeID != bbTeamA.ID || src.ChatName.Value != "general" || src.UserName.Value != "Ada" || src.ThreadID.Value != "1768490100.000200" {
		t.Fatalf("%+v", src)
	}
	// Slack's retry of it is answered and not delivered again.
	req := slacktest.SignedRequest("http://"+r.child.addr+"/slack/events", slackSecret, time.Now(), "application/json",
		slacktest.Envelope(bbTeamA.ID, bbTeamA.BotUser, "Ev1", first))
	req.Header.Set("X-Slack-Retry-Num", "1")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("retry: %v %v", resp, err)
	}

	// The gateway's send reaches chat.postMessage in the chat and thread.
	res := slackOutbound(t, gw1, map[string]any{"op": "send", "chat_id": bbGeneral, "content": "**on it**", "reply_to": nil,
		"metadata": map[string]any{"thread_id": "1768490100.000200", "scope_id": bbTeamA.ID}})
	msgs := r.fake.Messages(bbGeneral)
	if !res.Success || len(msgs) != 1 || msgs[0].ThreadTS != "1768490100.000200" || msgs[0].Text != "*on it*" || msgs[0].TS != res.MessageID {
		t.Fatalf("send %+v, messages %+v", res, msgs)
	}
	// A reply in that thread needs no mention (the bot posted there); the
	// retried event above was not delivered, so this is gw1's next.
	r.event(t, bbTeamA, "Ev2", slacktest.MessageEvent(bbTeamA.ID, bbGeneral, bbAda, "1768490100.000300", "1768490100.000200", "and the docs"), http.StatusOK)
	next(t, gw1, "and the docs")

	// A prompt round trip.
	res = slackOutbound(t, gw1, map[string]any{"op": "prompt", "chat_id": bbGeneral, "content": "Ship it?", "prompt_kind": "approval",
		"prompt_id": "ab12cd.00000001", "options": []any{map[string]any{"id": "once", "label": "Approve once", "style": "primary"},
			map[string]any{"id": "deny", "label": "Deny", "style": "danger"}},
		"metadata": map[string]any{"thread_id": "1768490100.000200"}})
	if !res.Success {
		t.Fatalf("prompt %+v", res)
	}
	press := slacktest.Press(bbTeamA.ID, bbGeneral, bbAda, res.MessageID, "1768490100.000200", "hp1:ab12cd.00000001:once", "Approve once")
	if code, body := r.signed(t, "/slack/interactions", "application/x-www-form-urlencoded", time.Now(), press); code != http.StatusOK {
		t.Fatalf("press: %d %s", code, body)
	}
	f = next(t, gw1, "/once")
	if pr := f.Event.PromptResponse; pr == nil || pr.PromptID != "ab12cd.00000001" || pr.PromptMessageID != res.MessageID {
		t.Fatalf("%+v", f.Event)
	}

	// send_media: the gateway's upload reaches Slack byte for byte.
	data := bytes.Repeat([]byte("slack-media-"), 40_000) // 480 KB
	id := uploadMedia(t, r.child.addr, "gw1", data)
	res = slackOutbound(t, gw1, map[string]any{"op": "send_media", "chat_id": bbGeneral, "media_kind": "document",
		"source_url": "http://" + r.child.addr + "/relay/media/" + id, "content": "the build log", "filename": "build.log",
		"metadata": map[string]any{"thread_id": "1768490100.000200"}})
	sum := sha256.Sum256(data)
	ups := r.fake.Uploads()
	if !res.Success || len(ups) != 1 || ups[0].SHA256 != hex.EncodeToString(sum[:]) || ups[0].Channel != bbGeneral || ups[0].ThreadTS != "1768490100.000200" {
		t.Fatalf("send_media %+v uploads %+v", res, ups)
	}

	// Two tenants in one workspace: the channel bound to t3 reaches t3, and
	// neither acts in the other's channel.
	r.event(t, bbTeamA, "Ev3", slacktest.MessageEvent(bbTeamA.ID, bbOps, bbAda, "1768490100.000400", "", "<@U0BOTA0001> page the on-call"), http.StatusOK)
	next(t, gw3, "page the on-call")
	for _, c := range []struct {
		gw   *relaytest.Client
		chat string
	}{{gw1, bbOps}, {gw3, bbGeneral}, {gw2, bbGeneral}} {
		if res := slackOutbound(t, c.gw, map[string]any{"op": "send", "chat_id": c.chat, "content": "x", "metadata": map[string]any{"scope_id": bbTeamA.ID}}); res.Code != contract.CodeEgressDeclined {
			t.Fatalf("a send into %s: %+v", c.chat, res)
		}
	}

	// OAuth install of workspace B, then an event from it reaches t2, whose
	// sends use B's token; t1 may not act there.
	installWorkspace(t, r, bbTeamB, "code-beta")
	r.event(t, bbTeamB, "Ev4", slacktest.MessageEvent(bbTeamB.ID, bbBeta, bbBob, "1768490100.000500", "", "<@U0BOTB0002> hello from beta"), http.StatusOK)
	next(t, gw2, "hello from beta")
	if res := slackOutbound(t, gw2, map[string]any{"op": "send", "chat_id": bbBeta, "content": "hi beta", "metadata": map[string]any{"scope_id": bbTeamB.ID}}); !res.Success {
		t.Fatalf("%+v", res)
	}
	if calls := r.fake.Calls("chat.postMessage"); calls[len(calls)-1].Team != bbTeamB.ID {
		t.Fatalf("posted with %s's token", calls[len(calls)-1].Team)
	}
	if res := slackOutbound(t, gw1, map[string]any{"op": "send", "chat_id": bbBeta, "content": "x", "metadata": map[string]any{"scope_id": bbTeamB.ID}}); res.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1 in workspace B: %+v", res)
	}
	// Nothing reached the wrong gateway: each one's next frame is its own.
	r.event(t, bbTeamA, "Ev5", slacktest.MessageEvent(bbTeamA.ID, bbGeneral, bbAda, "1768490100.000600", "", "<@U0BOTA0001> last"), http.StatusOK)
	next(t, gw1, "last")
	for _, s := range []string{bbTeamA.Token, bbTeamB.Token, slackSecret, slackClientSecre} {
		if strings.Contains(r.child.stderr.String(), s) {
			t.Fatal("a secret reached the log")
		}
	}
	r.stop(t, syscall.SIGTERM)
}

// bindChannel binds a Slack channel to tenant through the admin API.
func bindChannel(t *testing.T, r *slackRig, tenant, channel string) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"platform": "slack", "kind": "channel", "id": channel})
	req, _ := http.NewRequest(http.MethodPut, "http://"+r.admin+"/admin/v1/tenants/"+tenant+"/bindings", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+slackAdminToken)
	post(t, req, http.StatusNoContent, "bind "+channel)
}

// installWorkspace runs the OAuth install of team through the binary.
func installWorkspace(t *testing.T, r *slackRig, team slacktest.Team, code string) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get("http://" + r.child.addr + "/slack/install")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.StatusCode != http.StatusFound || len(resp.Cookies()) != 1 {
		t.Fatalf("install: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	r.fake.AddOAuthCode(code, team)
	req, _ := http.NewRequest(http.MethodGet, "http://"+r.child.addr+"/slack/oauth/callback?"+url.Values{"code": {code}, "state": {loc.Query().Get("state")}}.Encode(), nil)
	req.AddCookie(resp.Cookies()[0])
	post(t, req, http.StatusOK, "oauth callback")
}

// uploadMedia stores data in the connector's media store as gateway id.
func uploadMedia(t *testing.T, addr, id string, data []byte) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/relay/media", bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+relaytest.Token(id, id+"-secret", time.Now()))
	req.Header.Set("Content-Type", "text/plain")
	var out struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(post(t, req, http.StatusOK, "media upload")), &out); err != nil || out.ID == "" {
		t.Fatalf("upload answered %v", err)
	}
	return out.ID
}

// TestSlackBurstKill: events are posted in a burst (four sessions at once)
// and the connector is killed with SIGKILL in the middle of it; after the
// restart, every event Slack got a 200 for reaches the gateway, each
// session's in order.
func TestSlackBurstKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newSlackRig(t, "")
	r.start(t)
	const perSession = 40
	var mu sync.Mutex
	confirmed := map[int]bool{}
	killAt := make(chan struct{})
	var posters sync.WaitGroup
	for s := range crashSessions {
		posters.Go(func() {
			for k := range perSession {
				i := k*crashSessions + s
				req := slacktest.SignedRequest("http://"+r.child.addr+"/slack/events", slackSecret, time.Now(), "application/json", slackCrashEvent(i))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return // killed
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return
				}
				mu.Lock()
				confirmed[i] = true
				if len(confirmed) == perSession*crashSessions/3 {
					close(killAt)
				}
				mu.Unlock()
			}
		})
	}
	<-killAt
	r.stop(t, syscall.SIGKILL)
	posters.Wait()
	r.start(t)
	gw := r.gateway(t, "gw1")
	seen := map[int]bool{}
	last := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	missing := func() int {
		n := 0
		for i := range confirmed {
			if !seen[i] {
				n++
			}
		}
		return n
	}
	for missing() > 0 {
		f, err := gw.Next(ctx, contract.TypeInbound)
		if err != nil {
			t.Fatalf("after the restart %d of %d confirmed events are missing: %v", missing(), len(confirmed), err)
		}
		var i int
		if _, err := fmt.Sscanf(f.Event.Text, "evt %d", &i); err != nil {
			t.Fatalf("inbound %q", f.Event.Text)
		}
		key := f.Event.Source.ChatID
		if prev, ok := last[key]; ok && i <= prev {
			t.Fatalf("session %s: event %d after %d", key, i, prev)
		}
		last[key] = i
		seen[i] = true
		if err := gw.Ack(ctx, f.BufferID); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d events confirmed before the kill, %d delivered after the restart", len(confirmed), len(seen))
}

// TestSlackSocketModeOnRedis: three instances on one redis-server with
// app_token: one holds the Socket Mode connection (the lease
// ingest/slack/socket); its envelopes reach the gateway on another
// instance. The holder is killed with SIGKILL: another takes the lease
// within the lease's TTL and connects, the envelope Slack sent while no
// instance was connected arrives, and so do the next ones.
func TestSlackSocketModeOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and redis-server")
	}
	rds := redistest.Start(t, redistest.Options{})
	base := newSlackRig(t, "")
	var st store.Store
	base.config, st = onRedis(t, base.config, rds.URL(), func(cfg string) string {
		return strings.Replace(cfg, "admin: {listen: 127.0.0.1:0, token: \""+slackAdminToken+"\"}\n", "", 1)
	})
	children := make([]*child, 3)
	for i := range children {
		env := append(append([]string(nil), base.env...), "SLACK_APP_TOKEN=xapp-1-A0FAKE-socket", fmt.Sprintf("CONNECTOR_INSTANCE=i%d", i))
		children[i] = startChild(t, base.bin, env, base.config, t.TempDir(), false)
	}
	holder, _ := waitLeaseHolder(t, st, "ingest/slack/socket", "")
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if err := base.fake.WaitSocket(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// The gateway on an instance that does not hold the socket.
	gwOn := (instanceIndex(holder) + 1) % 3
	base.child = children[gwOn]
	gw := base.gateway(t, "gw1")
	push := func(i int, text string) string {
		t.Helper()
		ts := fmt.Sprintf("1768492%03d.000100", i)
		id, err := base.fake.PushEvent(ctx, "events_api", slacktest.Envelope(bbTeamA.ID, bbTeamA.BotUser, fmt.Sprintf("EvS%d", i),
			slacktest.MessageEvent(bbTeamA.ID, bbGeneral, bbAda, ts, "", "<@U0BOTA0001> "+text)))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := push(1, "before the kill")
	next(t, gw, "before the kill")
	if _, err := base.fake.WaitAck(ctx, id); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	c := children[instanceIndex(holder)]
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.exited
	push(2, "while nobody held the socket")
	newHolder, took := waitLeaseHolder(t, st, "ingest/slack/socket", holder)
	if err := base.fake.WaitSocket(ctx, 2); err != nil {
		t.Fatal(err)
	}
	t.Logf("socket mode moved from %s to %s %v after the kill (lease seen after %v)", holder, newHolder, time.Since(killed).Round(time.Millisecond), took.Round(time.Millisecond))
	next(t, gw, "while nobody held the socket")
	push(3, "after the move")
	next(t, gw, "after the move")
}
