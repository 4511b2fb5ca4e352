package main

// Multi-instance tests: three connector processes share one real
// redis-server. Gateways of one tenant sit on different instances; events
// are ingested on every instance; the instance driving the tenant and the
// one holding the Telegram long poll and Discord Gateway leases are killed
// with SIGKILL while events flow. Every confirmed event must arrive (at
// least once), and the takeover times are logged (docs/durability.md).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/redistest"
	"connector/relay/relaytest"
	"connector/session"
	"connector/store"
)

// multiLeaseTTL is the instances' store.lease_ttl.
const multiLeaseTTL = 1500 * time.Millisecond

func TestThreeInstancesOnRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and redis-server")
	}
	rds := redistest.Start(t, redistest.Options{})
	bin := connectorBinary(t)
	base := newCrashRig(t, bin, true)
	doc, err := os.ReadFile(base.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(doc), "tenants:\n", fmt.Sprintf("store: {backend: redis, redis_url: %q, lease_ttl: %s}\ntenants:\n", rds.URL(), multiLeaseTTL), 1)
	cfg = strings.Replace(cfg, "      - id: gw1\n", "      - id: gw2\n        secrets: [\"gw2-secret\"]\n      - id: gw1\n", 1)
	base.config = filepath.Join(t.TempDir(), "multi.yaml")
	if err := os.WriteFile(base.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), store.Config{Backend: store.BackendRedis, RedisURL: rds.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// Three instances, each a rig sharing the fakes, started in order.
	rigs := make([]*crashRig, 3)
	for i := range rigs {
		r := *base
		r.dir = t.TempDir()
		r.env = append(append([]string(nil), base.env...), fmt.Sprintf("CONNECTOR_INSTANCE=i%d", i))
		rigs[i] = &r
		startInstance(t, rigs[i])
	}
	holder := func(name string) string {
		l, ok, err := st.Leases().Holder(context.Background(), name)
		if err != nil || !ok {
			return ""
		}
		return l.Holder
	}
	waitHolder := func(name, not string) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		for {
			if h := holder(name); h != "" && h != not {
				return h, time.Since(start)
			}
			if time.Since(start) > crashWait {
				t.Fatalf("timed out after %v waiting for lease %s to leave %q", crashWait, name, not)
			}
			time.Sleep(20 * time.Millisecond) // polling another process's lease
		}
	}
	ingest, _ := waitHolder("ingest/telegram/poll", "")
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	if err := base.dfake.WaitSession(ctx, 1); err != nil {
		t.Fatalf("waiting for the Discord Gateway session: %v", err)
	}

	// Gateways of tenant t1 on instances 1 and 2.
	gws := newGatewaySet(t)
	gws.dial(t, rigs[1], "gw1", crashGatewaySecret)
	gws.dial(t, rigs[2], "gw2", "gw2-secret")
	driver, _ := waitHolder("relay/tenant/t1", "")
	t.Logf("telegram and discord ingest on %s, tenant t1 driven by %s", ingest, driver)

	// Interactions ingested on every instance reach the gateways.
	for i := range 12 {
		confirmDiscordInteractions(t, rigs[i%3], i, i+1)
	}
	got := gws.wait(t, 0, 12)
	// follow_up from the gateway on instance 2 for an interaction ingested
	// on instance 0 (its token is in the shared vault).
	gws.followUp(t, 1, got[0])
	// interrupt from the gateway that does not own session 1.
	owner := got[1].gw
	other := 1 - owner
	gws.interrupt(t, other, got[1].session)
	if f := gws.next(t, contract.TypeInterruptInbound); f.SessionKey != got[1].session {
		t.Fatalf("interrupt_inbound for %q, want %q", f.SessionKey, got[1].session)
	}
	// Telegram long polling on the lease holder.
	confirmTelegramPolling(t, base, 100, 110)
	gws.wait(t, 100, 110)

	// Kill the driver while interactions flow into the others.
	victim := instanceIndex(driver)
	killed := time.Now()
	stopInstance(t, rigs[victim])
	gws.redial(t, victim, rigs)
	for i := 200; i < 212; i++ {
		confirmDiscordInteractions(t, rigs[surviving(victim, -1, i)], i, i+1)
	}
	next, took := waitHolder("relay/tenant/t1", driver)
	gws.wait(t, 200, 212)
	t.Logf("tenant driver %s killed: %s drives t1 after %v; all 12 events flowing meanwhile delivered %v after the kill",
		driver, next, took.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

	// Kill the Telegram/Discord lease holder (if still alive) while updates
	// wait at Telegram.
	iv := instanceIndex(ingest)
	if iv == victim {
		t.Logf("the ingest leases were on the killed driver too")
		return
	}
	killed = time.Now()
	stopInstance(t, rigs[iv])
	gws.redial(t, iv, rigs)
	for i := 300; i < 310; i++ {
		base.tfake.Enqueue([]byte(telegramUpdate(i)))
	}
	nt, tookT := waitHolder("ingest/telegram/poll", ingest)
	nd, tookD := waitHolder("ingest/discord/gateway", ingest)
	gws.wait(t, 300, 310)
	t.Logf("ingest holder %s killed: telegram poll on %s after %v, discord gateway on %s after %v; 10 updates delivered %v after the kill",
		ingest, nt, tookT.Round(time.Millisecond), nd, tookD.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
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
	t       *testing.T
	mu      sync.Mutex
	clients []*relaytest.Client
	on      []int // instance of each gateway
	ids     []string
	secrets []string
	got     map[int]received
	changed chan struct{}
	other   chan relaytest.Frame // frames other than inbound, of any gateway
	dead    map[int]bool         // killed instances
}

type received struct {
	gw      int
	session string
	f       relaytest.Frame
}

func newGatewaySet(t *testing.T) *gatewaySet {
	return &gatewaySet{t: t, got: map[int]received{}, changed: make(chan struct{}, 1), other: make(chan relaytest.Frame, 64), dead: map[int]bool{}}
}

func (g *gatewaySet) dial(t *testing.T, r *crashRig, id, secret string) {
	t.Helper()
	g.ids, g.secrets = append(g.ids, id), append(g.secrets, secret)
	g.clients = append(g.clients, nil)
	g.on = append(g.on, -1)
	g.connect(t, len(g.clients)-1, r, instanceIndex(strings.TrimPrefix(r.env[len(r.env)-1], "CONNECTOR_INSTANCE=")))
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
	for _, p := range []string{"discord", "telegram"} {
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
			g.other <- f
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

func (g *gatewaySet) followUp(t *testing.T, k int, r received) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	err := g.clients[k].Send(ctx, map[string]any{"type": "outbound", "requestId": "follow-1", "platform": "discord",
		"action": map[string]any{"op": "follow_up", "session_key": r.session, "kind": "discord.interaction_token",
			"content": "answered from another instance", "metadata": map[string]any{}}})
	if err != nil {
		t.Fatal(err)
	}
	f := g.next(t, contract.TypeOutboundResult)
	if !f.Result.Success {
		t.Fatalf("follow_up from another instance: %+v", f.Result)
	}
}

// next waits for the next frame of typ other than inbound.
func (g *gatewaySet) next(t *testing.T, typ string) relaytest.Frame {
	t.Helper()
	deadline := time.After(crashWait)
	for {
		select {
		case f := <-g.other:
			if f.Type == typ {
				return f
			}
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s", crashWait, typ)
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
