package main

// Multi-instance tests: three connector processes share one real
// redis-server. Gateways of one tenant sit on different instances; events
// are ingested on every instance; the instance driving the tenant and the
// one holding the Telegram long poll and Discord Gateway leases are killed
// with SIGKILL while events flow. Every confirmed event must arrive (at
// least once), and the takeover times are logged (docs/durability.md).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/redistest"
	"connector/platform/discord/discordtest"
	"connector/relay/relaytest"
	"connector/session"
	"connector/store"
)

// multiLeaseTTL is the instances' store.lease_ttl.
const multiLeaseTTL = 1500 * time.Millisecond

// TestThreeInstancesOnRedis, with the three instances i0, i1, i2:
//
//   - gateways spread over the three: gw1 on i1 (telegram only, so discord
//     inbound goes to the others), gw2 on i2 and gw3 on i0;
//   - inbound ingested on every instance reaches them; outbound from each
//     (a Telegram send from all three, a Discord send from gw2 and gw3, at
//     least one of them on an instance without the Discord Gateway
//     lease); follow_up of an interaction
//     ingested on another instance; an interrupt from a gateway that does
//     not own the session;
//   - kill -9 of the instance driving the tenant while interactions keep
//     being confirmed to the survivors: all delivered, and right after
//     the takeover an interrupt reaches the owner (from the stored owner)
//     and follow_up works;
//   - kill -9 of the instance holding the Telegram poll and Discord
//     Gateway leases (or their new holder, if the first kill took them):
//     updates waiting at Telegram and a Discord Gateway message sent after
//     the takeover are delivered, and Discord sends from gw2 and gw3 reach
//     Discord.
//
// Every confirmed event must arrive; the takeover times are logged
// (docs/durability.md).
func TestThreeInstancesOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and redis-server")
	}
	base, rigs, st := startThreeInstances(t)
	waitHolder := func(name, not string) (string, time.Duration) {
		t.Helper()
		return waitLeaseHolder(t, st, name, not)
	}
	ingest, _ := waitHolder("ingest/telegram/poll", "")
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if err := base.dfake.WaitSession(ctx, 1); err != nil {
		t.Fatalf("waiting for the Discord Gateway session: %v", err)
	}

	// Gateways of tenant t1 on every instance; gw1 first, so i1 drives.
	gws := newGatewaySet(t)
	gws.dial(t, rigs, 1, "gw1", crashGatewaySecret, "telegram")
	driver, _ := waitHolder("relay/tenant/t1", "")
	gws.dial(t, rigs, 2, "gw2", "gw2-secret", "discord", "telegram")
	gws.dial(t, rigs, 0, "gw3", "gw3-secret", "discord", "telegram")
	t.Logf("telegram and discord ingest on %s, tenant t1 driven by %s", ingest, driver)

	// Interactions ingested on every instance reach the gateways.
	for i := range 12 {
		confirmDiscordInteractions(t, rigs[i%3], i, i+1)
	}
	got := gws.wait(t, 0, 12)
	// follow_up from the other discord gateway (on another instance than
	// the one that got it; the token is in the shared vault).
	gws.followUp(t, otherDiscord(got[0].gw), got[0])
	// Outbound from every gateway, each on its own instance: Telegram
	// sends from all three, Discord sends from both discord gateways, at
	// least one of them on an instance without the Discord Gateway lease
	// (which looks the channel's owner up at Discord; see
	// docs/durability.md).
	for k := range 3 {
		gws.send(t, base, k, "telegram", "42", fmt.Sprintf("sent from %s on %s", gws.ids[k], rigName(gws.on[k])))
	}
	standbySends := 0
	for _, k := range []int{1, 2} {
		if rigName(gws.on[k]) != ingest {
			standbySends++
		}
		gws.send(t, base, k, "discord", "501", fmt.Sprintf("sent from %s on %s", gws.ids[k], rigName(gws.on[k])))
	}
	if standbySends == 0 {
		t.Fatalf("no discord gateway on an instance without the Gateway lease (%s holds it)", ingest)
	}
	// An interrupt from a gateway that does not own the session.
	owner := got[1].gw
	gws.interrupt(t, otherDiscord(owner), got[1].session)
	gws.nextInterrupt(t, owner, got[1].session)
	// Telegram long polling on the lease holder.
	confirmTelegramPolling(t, base, 100, 110)
	gws.wait(t, 100, 110)

	// A session of its own (user 99), owned by gw2 or gw3, which survive
	// the driver's death; the driver stores its owner.
	confirmDiscordInteraction(t, rigs[0], 150, "99")
	probe := gws.wait(t, 150, 151)[0]
	// Its ack removed it from the stream, so the next driver does not
	// deliver it again (which could give the session another owner).
	waitRemoved(t, st, "t1", probe.f.BufferID)

	// Kill the driver while interactions keep being confirmed to the
	// others: ten before the kill, ten while its lease runs out and its
	// gateway is away, ten after gw1 found another instance.
	victim := instanceIndex(driver)
	var killed time.Time
	var takeover <-chan holderChange
	for i := 200; i < 230; i++ {
		switch i {
		case 210:
			killed = time.Now()
			stopInstance(t, rigs[victim])
			takeover = watchHolder(st, "relay/tenant/t1", driver, killed)
		case 220:
			gws.redial(t, victim, rigs)
		}
		confirmDiscordInteractions(t, rigs[surviving(victim, -1, i)], i, i+1)
	}
	var tk holderChange
	select {
	case tk = <-takeover:
	case <-time.After(crashWait):
		t.Fatalf("timed out after %v waiting for another instance to drive t1", crashWait)
	}
	// After the takeover: an interrupt for the probe session, which got no
	// inbound since, from the gateway that does not own it; the new
	// driver knows its owner only from the store.
	gws.interrupt(t, otherDiscord(probe.gw), probe.session)
	gws.nextInterrupt(t, probe.gw, probe.session)
	flowed := gws.wait(t, 200, 230)
	t.Logf("tenant driver %s killed: %s drove t1 %v after the kill; the 30 interactions confirmed around the kill all delivered %v after it",
		driver, tk.holder, tk.after.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	gws.followUp(t, otherDiscord(flowed[25].gw), flowed[25])

	// Kill the holder of the Discord Gateway lease: the first holder, or
	// the one that took it over from the killed driver. The Telegram poll
	// is usually on the same instance and must move too; a loaded machine
	// can leave it on another (each lease is taken on its own), where it
	// must keep polling.
	ingest, _ = waitHolder("ingest/discord/gateway", rigName(victim))
	iv := instanceIndex(ingest)
	poller, _ := waitHolder("ingest/telegram/poll", rigName(victim))
	sessions := base.dfake.Identifies() + base.dfake.Resumes()
	for i := 300; i < 310; i++ {
		base.tfake.Enqueue([]byte(telegramUpdate(i)))
	}
	killed = time.Now()
	stopInstance(t, rigs[iv])
	sessionsTaken := watchHolder(st, "ingest/discord/gateway", ingest, killed)
	type move struct {
		ch  <-chan holderChange
		got *holderChange
	}
	var nd holderChange
	nt := holderChange{holder: poller}
	moves := []move{{sessionsTaken, &nd}}
	if poller == ingest {
		moves = append(moves, move{watchHolder(st, "ingest/telegram/poll", ingest, killed), &nt})
	}
	gws.redial(t, iv, rigs)
	for _, w := range moves {
		select {
		case *w.got = <-w.ch:
		case <-time.After(crashWait):
			t.Fatalf("timed out after %v waiting for the ingest leases to move", crashWait)
		}
	}
	wctx, wcancel := context.WithTimeout(context.Background(), crashWait)
	defer wcancel()
	if err := base.dfake.WaitSession(wctx, sessions+1); err != nil {
		t.Fatalf("waiting for the Discord Gateway session on the new lease holder: %v", err)
	}
	dispatchDiscordMessage(t, base, 310)
	gws.wait(t, 300, 311)
	// Discord sends from both discord gateways after the takeover, from the
	// new lease holder and from an instance without it alike.
	for _, k := range []int{1, 2} {
		gws.send(t, base, k, "discord", "501", fmt.Sprintf("after the takeover, from %s on %s", gws.ids[k], rigName(gws.on[k])))
	}
	t.Logf("ingest holder %s killed: telegram poll on %s after %v, discord gateway on %s after %v (after the kill); 10 updates and a gateway message delivered %v after the kill",
		ingest, nt.holder, nt.after.Round(time.Millisecond), nd.holder, nd.after.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
}

func rigName(i int) string { return fmt.Sprintf("i%d", i) }

// waitRemoved waits until tenant's stored ledger no longer holds the
// record of bufferID ("<epoch>-<seq>").
func waitRemoved(t *testing.T, st store.Store, tenant, bufferID string) {
	t.Helper()
	_, seqText, _ := strings.Cut(bufferID, "-")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		t.Fatalf("bufferId %q: %v", bufferID, err)
	}
	start := time.Now()
	for {
		recs, err := st.Ledger().Read(context.Background(), tenant, seq-1, 1, 0)
		if err == nil && (len(recs) == 0 || recs[0].Seq != seq) {
			return
		}
		if time.Since(start) > crashWait {
			t.Fatalf("timed out after %v waiting for the acknowledged %s to leave the stored ledger", crashWait, bufferID)
		}
		time.Sleep(10 * time.Millisecond) // polling the store other processes write
	}
}

// holderChange is a lease's new holder and when it was first seen, after
// the moment watchHolder was given.
type holderChange struct {
	holder string
	after  time.Duration
}

// watchHolder polls lease name, from since, until a holder other than old
// has it, and sends that holder; it gives up after crashWait.
func watchHolder(st store.Store, name, old string, since time.Time) <-chan holderChange {
	ch := make(chan holderChange, 1)
	go func() {
		for time.Since(since) < crashWait {
			if l, ok, err := st.Leases().Holder(context.Background(), name); err == nil && ok && l.Holder != old {
				ch <- holderChange{l.Holder, time.Since(since)}
				return
			}
			time.Sleep(10 * time.Millisecond) // polling another process's lease
		}
	}()
	return ch
}

// otherDiscord is, of the two gateways serving discord (gw2 and gw3, the
// second and third dialed), the one that is not k.
func otherDiscord(k int) int {
	if k == 1 {
		return 2
	}
	return 1
}

// confirmDiscordInteraction is confirmDiscordInteractions for one
// interaction i from user.
func confirmDiscordInteraction(t *testing.T, r *crashRig, i int, user string) {
	t.Helper()
	token := fmt.Sprintf("crash-interaction-token-%d", i)
	r.dfake.AddInteractionToken(token)
	body := fmt.Sprintf(`{"type":2,"id":"%d","application_id":"9000","token":%q,"guild_id":"500","channel_id":"501",`+
		`"channel":{"id":"501","type":0,"guild_id":"500","name":"general"},"member":{"user":{"id":%q,"username":"u%s"}},`+
		`"data":{"id":"1","name":"evt","type":1,"options":[{"type":3,"name":"n","value":"%d"}]}}`, 8000+i, token, user, user, i)
	req := discordtest.InteractionRequest("http://"+r.child.addr+"/discord/interactions", r.priv, time.Now(), []byte(body))
	if ack := post(t, req, http.StatusOK, fmt.Sprintf("discord interaction %d", i)); ack != `{"type":5}` {
		t.Fatalf("interaction %d answered %s, want the deferred response", i, ack)
	}
}

// dispatchDiscordMessage sends MESSAGE_CREATE "evt i" on the fake's
// Gateway session.
func dispatchDiscordMessage(t *testing.T, r *crashRig, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	m := map[string]any{
		"id": strconv.Itoa(7000 + i), "channel_id": "501", "guild_id": "500", "content": fmt.Sprintf("evt %d", i),
		"type": 0, "timestamp": "2026-01-15T12:00:00.000000+00:00", "author": map[string]any{"id": "71", "username": "u71"},
		"member": map[string]any{"roles": []any{}}, "mentions": []any{}, "attachments": []any{}, "embeds": []any{},
	}
	if err := r.dfake.Dispatch(ctx, "MESSAGE_CREATE", m); err != nil {
		t.Fatalf("dispatch message %d: %v", i, err)
	}
}

// startThreeInstances starts three connector processes sharing a fresh
// redis-server (store.instance i0, i1, i2), tenant t1 with gateways gw1, gw2
// and gw3, and returns the rig of their shared fakes, each instance's rig and a
// store on the same Redis to watch the leases.
func startThreeInstances(t *testing.T) (*crashRig, []*crashRig, store.Store) {
	t.Helper()
	rds := redistest.Start(t, redistest.Options{})
	bin := connectorBinary(t)
	base := newCrashRig(t, bin, true)
	var st store.Store
	base.config, st = onRedis(t, base.config, rds.URL(), func(cfg string) string {
		return strings.Replace(cfg, "      - id: gw1\n", "      - id: gw2\n        secrets: [\"gw2-secret\"]\n      - id: gw3\n        secrets: [\"gw3-secret\"]\n      - id: gw1\n", 1)
	})

	// Three instances, each a rig sharing the fakes, started in order.
	rigs := make([]*crashRig, 3)
	for i := range rigs {
		r := *base
		r.dir = t.TempDir()
		r.env = append(append([]string(nil), base.env...), fmt.Sprintf("CONNECTOR_INSTANCE=i%d", i))
		rigs[i] = &r
		startInstance(t, rigs[i])
	}
	return base, rigs, st
}

// leaseHolder returns the holder of the lease name, "" when it is free.
func leaseHolder(st store.Store, name string) string {
	l, ok, err := st.Leases().Holder(context.Background(), name)
	if err != nil || !ok {
		return ""
	}
	return l.Holder
}

// waitLeaseHolder waits until the lease name has a holder other than not,
// and returns it and how long that took.
func waitLeaseHolder(t *testing.T, st store.Store, name, not string) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		if h := leaseHolder(st, name); h != "" && h != not {
			return h, time.Since(start)
		}
		if time.Since(start) > crashWait {
			t.Fatalf("timed out after %v waiting for lease %s to leave %q", crashWait, name, not)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's lease
	}
}

func instanceIndex(name string) int {
	var i int
	_, _ = fmt.Sscanf(name, "i%d", &i)
	return i
}

// surviving picks, round robin by n, an instance other than a and b.
func surviving(a, b, n int) int {
	var alive []int
	for i := range 3 {
		if i != a && i != b {
			alive = append(alive, i)
		}
	}
	return alive[n%len(alive)]
}

// startInstance starts r's child and waits until it listens.
func startInstance(t *testing.T, r *crashRig) {
	t.Helper()
	sessions := r.sessions
	r.sessions = -1 << 30 // WaitSession(ctx, <=0) returns at once: only one instance holds the session
	r.start(t)
	r.sessions = sessions
}

func stopInstance(t *testing.T, r *crashRig) {
	t.Helper()
	if err := r.child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.child.exited:
	case <-time.After(crashWait):
		t.Fatalf("timed out after %v waiting for the killed connector to exit", crashWait)
	}
}

// gatewaySet is the tenant's gateways, each on some instance; it gathers
// what they receive, acknowledging each inbound.
type gatewaySet struct {
	t        *testing.T
	mu       sync.Mutex
	clients  []*relaytest.Client
	on       []int // instance of each gateway
	ids      []string
	secrets  []string
	hellos   [][]string // platforms each gateway says hello for
	requests int        // outbound request ids used
	got      map[int]received
	changed  chan struct{}
	other    chan gatewayFrame // frames other than inbound, of any gateway
	dead     map[int]bool      // killed instances
}

type received struct {
	gw      int
	session string
	f       relaytest.Frame
}

func newGatewaySet(t *testing.T) *gatewaySet {
	return &gatewaySet{t: t, got: map[int]received{}, changed: make(chan struct{}, 1), other: make(chan gatewayFrame, 64), dead: map[int]bool{}}
}

func (g *gatewaySet) dial(t *testing.T, rigs []*crashRig, inst int, id, secret string, platforms ...string) {
	t.Helper()
	g.ids, g.secrets, g.hellos = append(g.ids, id), append(g.secrets, secret), append(g.hellos, platforms)
	g.clients = append(g.clients, nil)
	g.on = append(g.on, -1)
	g.connect(t, len(g.clients)-1, rigs[inst], inst)
}

func (g *gatewaySet) connect(t *testing.T, k int, r *crashRig, inst int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	c, err := relaytest.Dial(ctx, "ws://"+r.child.addr+"/relay", relaytest.Token(g.ids[k], g.secrets[k], time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	for _, p := range g.hellos[k] {
		if _, err := c.Hello(ctx, p, ""); err != nil {
			t.Fatalf("hello %s: %v", p, err)
		}
	}
	g.mu.Lock()
	g.clients[k], g.on[k] = c, inst
	g.mu.Unlock()
	go g.read(k, c)
}

// redial moves the gateways of the killed instance to another, as a load
// balancer would.
func (g *gatewaySet) redial(t *testing.T, killed int, rigs []*crashRig) {
	t.Helper()
	g.dead[killed] = true
	var alive []int
	for i := range rigs {
		if !g.dead[i] {
			alive = append(alive, i)
		}
	}
	for k := range g.clients {
		if g.on[k] == killed {
			to := alive[k%len(alive)]
			g.connect(t, k, rigs[to], to)
		}
	}
}

func (g *gatewaySet) read(k int, c *relaytest.Client) {
	ctx := context.Background()
	for {
		f, err := c.Next(ctx)
		if err != nil {
			return
		}
		if f.Type != contract.TypeInbound {
			g.other <- gatewayFrame{k, f}
			continue
		}
		words := strings.Fields(f.Event.Text)
		var n int
		if _, err := fmt.Sscan(words[len(words)-1], &n); err == nil {
			g.mu.Lock()
			g.got[n] = received{gw: k, session: sessionOf(f), f: f}
			g.mu.Unlock()
			select {
			case g.changed <- struct{}{}:
			default:
			}
		}
		_ = c.Ack(ctx, f.BufferID)
	}
}

// wait waits until events [from, to) all arrived and returns them in order.
func (g *gatewaySet) wait(t *testing.T, from, to int) []received {
	t.Helper()
	deadline := time.After(crashWait)
	for {
		g.mu.Lock()
		var missing []int
		out := make([]received, 0, to-from)
		for i := from; i < to; i++ {
			if r, ok := g.got[i]; ok {
				out = append(out, r)
			} else {
				missing = append(missing, i)
			}
		}
		g.mu.Unlock()
		if len(missing) == 0 {
			return out
		}
		select {
		case <-g.changed:
		case <-deadline:
			sort.Ints(missing)
			t.Fatalf("timed out after %v waiting for events %v", crashWait, missing)
		}
	}
}

// gatewayFrame is a frame gateway gw received.
type gatewayFrame struct {
	gw int
	f  relaytest.Frame
}

func (g *gatewaySet) followUp(t *testing.T, k int, r received) {
	t.Helper()
	res := g.outbound(t, k, "discord", map[string]any{"op": "follow_up", "session_key": r.session,
		"kind": "discord.interaction_token", "content": "answered from another instance", "metadata": map[string]any{}})
	if !res.Success {
		t.Fatalf("follow_up from %s on another instance: %+v", g.ids[k], res)
	}
}

// send has gateway k send text to chat on platform, and checks that the
// platform's fake got it.
func (g *gatewaySet) send(t *testing.T, r *crashRig, k int, platform, chat, text string) {
	t.Helper()
	res := g.outbound(t, k, platform, map[string]any{"op": "send", "chat_id": chat, "content": text, "metadata": map[string]any{}})
	if !res.Success {
		t.Fatalf("send from %s on i%d: %+v", g.ids[k], g.on[k], res)
	}
	var found bool
	switch platform {
	case "discord":
		for _, m := range r.dfake.Messages(chat) {
			found = found || m.Content == text
		}
	case "telegram":
		for _, c := range r.tfake.Calls("sendMessage") {
			found = found || c.Form["text"] == text
		}
	}
	if !found {
		t.Fatalf("%s answered the send from %s with success, but its fake has no %q in %s", platform, g.ids[k], text, chat)
	}
}

// outbound sends one outbound op from gateway k and waits for its result.
func (g *gatewaySet) outbound(t *testing.T, k int, platform string, action map[string]any) contract.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	g.requests++
	id := fmt.Sprint("multi-", g.requests)
	if err := g.clients[k].Send(ctx, map[string]any{"type": "outbound", "requestId": id, "platform": platform, "action": action}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(crashWait)
	for {
		select {
		case f := <-g.other:
			if f.f.Type == contract.TypeOutboundResult && f.f.RequestID == id {
				return f.f.Result
			}
		case <-deadline:
			t.Fatalf("timed out after %v waiting for the result of %s from %s", crashWait, action["op"], g.ids[k])
		}
	}
}

// nextInterrupt waits for interrupt_inbound of sessionKey, which must come
// to gateway k.
func (g *gatewaySet) nextInterrupt(t *testing.T, k int, sessionKey string) {
	t.Helper()
	deadline := time.After(crashWait)
	for {
		select {
		case f := <-g.other:
			if f.f.Type != contract.TypeInterruptInbound {
				continue
			}
			if f.gw != k || f.f.SessionKey != sessionKey {
				t.Fatalf("interrupt_inbound for %q at %s, want %q at %s (its owner)", f.f.SessionKey, g.ids[f.gw], sessionKey, g.ids[k])
			}
			return
		case <-deadline:
			t.Fatalf("timed out after %v waiting for interrupt_inbound of %q at %s", crashWait, sessionKey, g.ids[k])
		}
	}
}

func (g *gatewaySet) interrupt(t *testing.T, k int, sessionKey string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if err := g.clients[k].Send(ctx, map[string]any{"type": "interrupt", "session_key": sessionKey}); err != nil {
		t.Fatal(err)
	}
}

func sessionOf(f relaytest.Frame) string { return session.Key(&f.Event.Source, session.DefaultOptions) }

// nexscopeRoomLease is the lease whose holder hosts the default room.
const nexscopeRoomLease = "ingest/nexscope/room/default"

// TestThreeInstancesNexscope spreads one nexscope room over three connector
// processes: the room's home hosts carol, the two other instances alice and
// bob, and tenant t1's gateway sits on alice's instance. Presence, msg and
// ack, the room's file lock and a file's chunks cross the instances; bob's
// msg to the bot reaches the gateway on a third instance through the relay
// ledger, and the gateway's reply reaches bob. Then the home is killed with
// SIGKILL: the members elsewhere are closed with 1012, another instance
// hosts the room, and after reconnecting they talk to the bot again.
func TestThreeInstancesNexscope(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and redis-server")
	}
	_, rigs, st := startThreeInstances(t)
	homeName, _ := waitLeaseHolder(t, st, nexscopeRoomLease, "")
	home := instanceIndex(homeName)
	e1, e2 := (home+1)%3, (home+2)%3
	t.Logf("room default homed on %s; alice on i%d, bob on i%d, the gateway on i%d", homeName, e1, e2, e1)

	alice := dialNexscope(t, rigs[e1], "alice")
	alice.presence(t, "alice", "hermes")
	bob := dialNexscope(t, rigs[e2], "bob")
	bob.presence(t, "alice", "bob", "hermes")
	alice.presence(t, "alice", "bob", "hermes")
	carol := dialNexscope(t, rigs[home], "carol")
	carol.presence(t, "alice", "bob", "carol", "hermes")
	alice.presence(t, "alice", "bob", "carol", "hermes")
	bob.presence(t, "alice", "bob", "carol", "hermes")

	// msg and ack across instances.
	alice.send(t, `{"type":"msg","msgId":"m1","from":"alice","to":["bob","carol"],"role":"user","threadId":"t","text":"hi"}`)
	for _, m := range []*nexMember{bob, carol} {
		if f := m.expect(t, "msg"); f["msgId"] != "m1" || f["text"] != "hi" {
			t.Fatalf("%s got %v", m.name, f)
		}
	}
	if a := alice.expect(t, "ack"); fmt.Sprint(a["delivered"], a["offline"]) != "[bob carol] []" {
		t.Fatalf("ack %v", a)
	}

	// The file lock is the room's; a file's chunks reach another instance
	// in order.
	const chunks, chunkSize = 64, 8 << 10
	alice.send(t, fmt.Sprintf(`{"type":"file-start","msgId":"f1","from":"alice","to":["bob"],"role":"user","threadId":"t","text":"file","attachment":{"name":"a.bin","size":%d}}`, chunks*chunkSize))
	bob.expect(t, "file-start")
	carol.send(t, `{"type":"file-start","msgId":"f2","from":"carol","to":["bob"],"role":"user","threadId":"t","text":"file","attachment":{"name":"c.bin","size":1}}`)
	if e := carol.expect(t, "error"); e["code"] != "transfer_busy" {
		t.Fatalf("carol's file-start while alice holds the lock: %v", e)
	}
	for i := range chunks {
		alice.sendBinary(t, bytes.Repeat([]byte{byte(i)}, chunkSize))
	}
	for i := range chunks {
		b := bob.binary(t)
		if len(b) != chunkSize || b[0] != byte(i) || b[chunkSize-1] != byte(i) {
			t.Fatalf("chunk %d: got %d bytes starting with %d", i, len(b), b[0])
		}
	}
	alice.send(t, `{"type":"file-end","msgId":"f1","from":"alice"}`)
	bob.expect(t, "file-end")
	if a := alice.expect(t, "ack"); a["msgId"] != "f1" || fmt.Sprint(a["delivered"]) != "[bob]" {
		t.Fatalf("file ack %v", a)
	}

	// bob (instance e2) -> the bot, bridged at the home, -> the gateway on
	// instance e1; its reply goes back through e1 and the home to bob.
	gw := dialNexscopeGateway(t, rigs[e1])
	askBot(t, bob, gw, "q1")

	// Kill the home: its members elsewhere are closed, the room moves.
	killed := time.Now()
	stopInstance(t, rigs[home])
	for _, m := range []*nexMember{alice, bob} {
		if code := m.closed(t); code != websocket.StatusServiceRestart {
			t.Fatalf("%s closed with %v after the home was killed, want 1012", m.name, code)
		}
	}
	closedAfter := time.Since(killed)
	next, took := waitLeaseHolder(t, st, nexscopeRoomLease, homeName)
	t.Logf("home %s killed: members elsewhere closed with 1012 after %v; room homed on %s after %v",
		homeName, closedAfter.Round(time.Millisecond), next, took.Round(time.Millisecond))
	alice = dialNexscope(t, rigs[e1], "alice")
	alice.presence(t, "alice", "hermes")
	bob = dialNexscope(t, rigs[e2], "bob")
	bob.presence(t, "alice", "bob", "hermes")
	askBot(t, bob, gw, "q2")
}

// askBot sends a msg to the bot from m, waits for the gateway to get it,
// answers it through the gateway and waits for m to get the answer.
func askBot(t *testing.T, m *nexMember, gw *relaytest.Client, id string) {
	t.Helper()
	m.send(t, fmt.Sprintf(`{"type":"msg","msgId":%q,"from":%q,"to":["hermes"],"role":"user","threadId":"t","text":"question %s"}`, id, m.name, id))
	if a := m.expect(t, "ack"); fmt.Sprint(a["delivered"]) != "[hermes]" {
		t.Fatalf("ack of %s: %v", id, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	f, err := gw.Next(ctx, contract.TypeInbound)
	if err != nil {
		t.Fatalf("waiting for %s at the gateway: %v", id, err)
	}
	if f.Event.Text != "question "+id || f.Event.Source.UserID.Value != m.name {
		t.Fatalf("gateway got %q from %q, want %s's question %s", f.Event.Text, f.Event.Source.UserID.Value, m.name, id)
	}
	if err := gw.Ack(ctx, f.BufferID); err != nil {
		t.Fatal(err)
	}
	res, err := gw.Outbound(ctx, "nexscope", map[string]any{"op": "send", "chat_id": "default", "content": "answer " + id, "reply_to": id})
	if err != nil || !res.Success {
		t.Fatalf("gateway send: %+v %v", res, err)
	}
	if r := m.expect(t, "msg"); r["text"] != "answer "+id || r["from"] != "hermes" {
		t.Fatalf("%s got %v, want the bot's answer", m.name, r)
	}
}

// dialNexscopeGateway connects tenant t1's gateway gw1 for nexscope.
func dialNexscopeGateway(t *testing.T, r *crashRig) *relaytest.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	gw, err := relaytest.Dial(ctx, "ws://"+r.child.addr+"/relay", relaytest.Token("gw1", crashGatewaySecret, time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.CloseNow() })
	if _, err := gw.Hello(ctx, "nexscope", ""); err != nil {
		t.Fatalf("hello nexscope: %v", err)
	}
	return gw
}

// nexMember is a nexscope client in the multi-instance test.
type nexMember struct {
	name string
	ws   *websocket.Conn
}

func dialNexscope(t *testing.T, r *crashRig, name string) *nexMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+r.child.addr+"/ws?name="+name+"&v=1&token="+crashNexscopeToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(-1)
	t.Cleanup(func() { _ = ws.CloseNow() })
	return &nexMember{name: name, ws: ws}
}

func (m *nexMember) send(t *testing.T, frame string) {
	t.Helper()
	m.write(t, websocket.MessageText, []byte(frame))
}

func (m *nexMember) sendBinary(t *testing.T, b []byte) {
	t.Helper()
	m.write(t, websocket.MessageBinary, b)
}

func (m *nexMember) write(t *testing.T, typ websocket.MessageType, b []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if err := m.ws.Write(ctx, typ, b); err != nil {
		t.Fatalf("%s: write: %v", m.name, err)
	}
}

func (m *nexMember) read(t *testing.T) (websocket.MessageType, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	typ, b, err := m.ws.Read(ctx)
	if err != nil {
		t.Fatalf("%s: read: %v", m.name, err)
	}
	return typ, b
}

// expect reads the next frame, which must be a text frame of type typ.
func (m *nexMember) expect(t *testing.T, typ string) map[string]any {
	t.Helper()
	kind, b := m.read(t)
	var f map[string]any
	if kind != websocket.MessageText || json.Unmarshal(b, &f) != nil || f["type"] != typ {
		t.Fatalf("%s: got %.200q, want a %s frame", m.name, b, typ)
	}
	return f
}

// presence reads presences until one lists exactly want (joins on other
// instances may show up first).
func (m *nexMember) presence(t *testing.T, want ...string) {
	t.Helper()
	for {
		f := m.expect(t, "presence")
		if fmt.Sprint(f["users"]) == fmt.Sprint(want) {
			return
		}
	}
}

func (m *nexMember) binary(t *testing.T) []byte {
	t.Helper()
	kind, b := m.read(t)
	if kind != websocket.MessageBinary {
		t.Fatalf("%s: got %.200q, want a binary frame", m.name, b)
	}
	return b
}

// closed reads until the connection ends and returns its close code.
func (m *nexMember) closed(t *testing.T) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	for {
		if _, _, err := m.ws.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("timed out after %v waiting for %s's connection to close", crashWait, m.name)
			}
			return websocket.CloseStatus(err)
		}
	}
}

// onRedis writes a copy of the config at path on the redis-server at url
// (store.backend redis, lease_ttl multiLeaseTTL), edit applied to its
// text, and returns the copy's path and a store on that Redis for the
// test to watch.
func onRedis(t *testing.T, path, url string, edit func(string) string) (string, store.Store) {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(doc), "tenants:\n", fmt.Sprintf("store: {backend: redis, redis_url: %q, lease_ttl: %s}\ntenants:\n", url, multiLeaseTTL), 1)
	out := filepath.Join(t.TempDir(), "redis.yaml")
	if err := os.WriteFile(out, []byte(edit(cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), store.Config{Backend: store.BackendRedis, RedisURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return out, st
}
