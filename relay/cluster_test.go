package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/cluster"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/store"
)

// instance is one relay of a fleet sharing a store.
type instance struct {
	h *relaytest.Harness
	p *fakePlatform
}

// fleet starts n relays named i0, i1, ... on one memory store (its leases
// and pub/sub stand for a Redis), serving tenant t1 (gateways gw1, gw1b).
func fleet(t *testing.T, n int) []instance {
	t.Helper()
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}, {ID: "gw1b", Secrets: []string{"s1b"}}}}}
	out := make([]instance, n)
	for i := range out {
		p := newFake("discord", map[string]string{"c1": "t1"})
		node, err := cluster.New(cluster.Config{Instance: fmt.Sprintf("i%d", i), PubSub: st.PubSub(), LeaseTTL: time.Hour}) // held throughout: no renewal on the real clock to miss
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Close)
		h := relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p}, Log: relaytest.TestLogger(t),
			Store: st, Cluster: node})
		out[i] = instance{h: h, p: p}
	}
	return out
}

// collect reads inbound from gws until every text in want arrived, acking
// each, and returns which gateway got each text.
func collect(t *testing.T, want []string, gws ...*relaytest.Gateway) map[string]int {
	t.Helper()
	got := map[string]int{}
	frames := make(chan [2]any, 64)
	ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
	defer cancel()
	for i, gw := range gws {
		go func() {
			for {
				f, err := gw.Client.Next(ctx, contract.TypeInbound)
				if err != nil {
					return
				}
				_ = gw.Client.Ack(ctx, f.BufferID)
				frames <- [2]any{i, f.Event.Text}
			}
		}()
	}
	for len(got) < len(want) {
		select {
		case f := <-frames:
			got[f[1].(string)] = f[0].(int)
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for inbound: got %d of %d (%v)", relaytest.Timeout, len(got), len(want), got)
		}
	}
	cancel()
	for _, w := range want {
		if _, ok := got[w]; !ok {
			t.Fatalf("inbound %q never arrived (got %v)", w, got)
		}
	}
	return got
}

// Gateways of one tenant on two instances; inbound ingested on either
// reaches them, a session stays with one gateway, and an interrupt from the
// other gateway reaches the session's owner. (A takeover after the driver
// stops or lapses is tested on an injected clock in cluster_loss_test.go.)
func TestInstancesShareATenant(t *testing.T) {
	f := fleet(t, 2)
	gwA := f[0].h.Dial(t, "gw1", "s1")
	gwA.Hello(t, "discord", "")
	gwB := f[1].h.Dial(t, "gw1b", "s1b")
	gwB.Hello(t, "discord", "")

	var want []string
	for i := range 10 {
		text := fmt.Sprint("e", i)
		want = append(want, text)
		f[i%2].p.deliver("t1", "c1", fmt.Sprint("u", i%2), text)
	}
	got := collect(t, want, gwA, gwB)
	for i := 2; i < 10; i++ {
		if got[want[i]] != got[want[i%2]] {
			t.Fatalf("session u%d went to two gateways: %v", i%2, got)
		}
	}

	// The interrupt comes from the gateway that does not own session u0.
	owner, other := gwA, gwB
	if got["e0"] == 1 {
		owner, other = gwB, gwA
	}
	other.Send(t, map[string]any{"type": "interrupt", "session_key": sessionKey("discord", "c1", "u0")})
	if fr := owner.Next(t, contract.TypeInterruptInbound); fr.SessionKey != sessionKey("discord", "c1", "u0") {
		t.Fatalf("interrupt_inbound for %q, want session u0", fr.SessionKey)
	}
}

// TestClusterBurstToARemoteSocketWaitsInTheLedger: a burst of large
// inbound, or of passthrough (which is outside the ack window), for a
// gateway whose socket is on another instance than the tenant's driver
// waits in the driver's ledger while the socket's send queue is over half
// its bound, as it does for a socket on the driver, instead of overflowing
// the queue and closing the socket 4408 (after which the same burst would
// close its next connection too).
func TestClusterBurstToARemoteSocketWaitsInTheLedger(t *testing.T) {
	const events, size = 16, 500 << 10 // 8 MB, over the queue bound and the socket buffers together
	for _, frameType := range []string{contract.TypeInbound, contract.TypePassthroughForward} {
		t.Run(frameType, func(t *testing.T) { burstToARemoteSocket(t, frameType, events, size, true) })
	}
}

// TestClusterPassthroughToARemoteGatewayThatNeverAcks: an older gateway
// never acknowledges passthrough; on an instance that does not drive its
// tenant it still gets a burst of it past its byte window (a quarter of its
// send queue), which frees as the frames are written, not only on an ack.
func TestClusterPassthroughToARemoteGatewayThatNeverAcks(t *testing.T) {
	burstToARemoteSocket(t, contract.TypePassthroughForward, 16, 500<<10, false)
}

// burstToARemoteSocket has events deliveries of size bytes of frameType
// burst to a gateway on an instance that does not drive its tenant, which
// reads them all, acknowledging each when ack is set.
func burstToARemoteSocket(t *testing.T, frameType string, events, size int, ack bool) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}, {ID: "gw1b", Secrets: []string{"s1b"}}}}}
	var hs []*relaytest.Harness
	var ps []*fakePlatform
	for i := range 2 {
		p := newFake("discord", map[string]string{"c1": "t1"})
		node, err := cluster.New(cluster.Config{Instance: fmt.Sprintf("i%d", i), PubSub: st.PubSub(), LeaseTTL: time.Hour}) // held throughout: no renewal on the real clock to miss
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Close)
		hs = append(hs, relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p},
			Log: relaytest.TestLogger(t), Store: st, Cluster: node,
			SendQueueBytes: 2 << 20, WriteTimeout: time.Hour}))
		ps = append(ps, p)
	}
	// Each wait has a deadline of its own: the next frame comes within it,
	// where the whole burst, megabytes through two instances under -race on
	// a loaded machine, may take longer.
	step := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
		t.Cleanup(cancel)
		return ctx
	}

	// i0 drives the tenant: its gateway is the only one, and gets the
	// first inbound. Then it goes idle, so the burst is for i1's socket.
	gwA := hs[0].Dial(t, "gw1", "s1")
	gwA.Hello(t, "discord", "")
	ps[0].deliver("t1", "c1", "u0", "warm")
	if _, id := gwA.NextInbound(t); id != "" {
		gwA.Ack(t, id)
	}
	gwA.Send(t, map[string]string{"type": "going_idle"})
	gwA.Next(t, contract.TypeGoingIdleAck)

	// i1's gateway says hello and reads nothing until the burst is stored.
	ws, _, err := websocket.Dial(step(), hs[1].RelayURL(), &websocket.DialOptions{HTTPHeader: map[string][]string{
		"Authorization": {"Bearer " + relaytest.Token("gw1b", "s1b", time.Now())}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(contract.MaxFrameBytes)
	if err := ws.Write(step(), websocket.MessageText, []byte(`{"type": "hello", "platform": "discord", "botId": ""}`+"\n")); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", size)
	for i := range events {
		if frameType == contract.TypeInbound {
			ps[0].deliver("t1", "c1", "u1", fmt.Sprint(i, pad))
		} else {
			ps[0].publish(platform.Delivery{Kind: platform.KindPassthrough, Tenant: "t1", Platform: "discord",
				Forward: &contract.Forward{Platform: "discord", Method: "POST", Path: "/interactions", BodyB64: pad}})
		}
	}

	got := 0
	for got < events {
		_, msg, err := ws.Read(step())
		if err != nil {
			t.Fatalf("after %d of %d %s: %v (code %d)", got, events, frameType, err, websocket.CloseStatus(err))
		}
		for line := range strings.SplitSeq(strings.TrimSpace(string(msg)), "\n") {
			var f struct {
				Type     string `json:"type"`
				BufferID string `json:"bufferId"`
			}
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				t.Fatal(err)
			}
			if f.Type != frameType {
				continue
			}
			got++
			if !ack {
				continue
			}
			if err := ws.Write(step(), websocket.MessageText, []byte(`{"type": "inbound_ack", "bufferId": "`+f.BufferID+`"}`+"\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// heldPubSub holds each publication on the channel "held" until release
// is closed.
type heldPubSub struct {
	store.PubSub
	release chan struct{}
}

func (p heldPubSub) Publish(ctx context.Context, channel string, msg []byte) error {
	if channel == "held" {
		select {
		case <-p.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return p.PubSub.Publish(ctx, channel, msg)
}

// TestClusterRoomAgainPokesOnlyTheTenantWaiting: i0 drives t1 and t2;
// the cluster outbox says no to t1 only (Roomy, as t1's remote seats ask
// before each frame), and once it has room again the relay pokes t1's
// ledger only. Before, it poked the ledger of every tenant it drives, each
// under its mutex: one tenant's burst made the instance sweep them all.
func TestClusterRoomAgainPokesOnlyTheTenantWaiting(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	ps := heldPubSub{st.PubSub(), make(chan struct{})}
	node, err := cluster.New(cluster.Config{Instance: "i0", PubSub: ps, LeaseTTL: time.Hour}) // held throughout: no renewal on the real clock to miss
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(ps.release) }) }) // before Close: it publishes what is queued
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{newFake("discord", nil)},
		Log: relaytest.TestLogger(t), Store: st, Cluster: node})
	h.Dial(t, "gw1", "s1").Hello(t, "discord", "")
	h.Dial(t, "gw2", "s2").Hello(t, "discord", "")
	deadline := time.Now().Add(relaytest.Timeout)
	for relay.ClusterTenure(h.Server, "t1") == nil || relay.ClusterTenure(h.Server, "t2") == nil {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for i0 to drive t1 and t2", relaytest.Timeout)
		}
		runtime.Gosched() // polling: taking the lease signals nothing here
	}
	var mu sync.Mutex
	var poked []string
	relay.SetRoomHook(h.Server, func(tenant string) {
		mu.Lock()
		poked = append(poked, tenant)
		mu.Unlock()
	})
	done := make(chan []string, 1)
	node.OnRoom(func(due []string) { done <- slices.Clone(due) }) // after the relay's
	for sent := 0; node.SendFor("t1", "held", 'x'); sent++ {
		if sent > cluster.OutboxSize {
			t.Fatal("t1's share of the outbox never filled")
		}
	}
	if node.Roomy("t1") {
		t.Fatal("Roomy(t1) with its share of the outbox full")
	}
	release.Do(func() { close(ps.release) })
	select {
	case due := <-done:
		if !slices.Equal(due, []string{"t1"}) {
			t.Fatalf("room again for %q, want t1", due)
		}
	case <-time.After(relaytest.Timeout):
		t.Fatalf("timed out after %v waiting for room again", relaytest.Timeout)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(poked, []string{"t1"}) {
		t.Fatalf("room again for t1 poked the ledgers of %q, want t1's only", poked)
	}
}

// TestSetTenantsDuringShutdown: an apply (a registry watch's, an admin
// change's) that adds tenants while Shutdown stops the fleet starts no
// tenant loop on its WaitGroup while Shutdown waits on it (a WaitGroup
// misuse: a panic, or a loop Shutdown does not wait for).
func TestSetTenantsDuringShutdown(t *testing.T) {
	for round := range 20 {
		in := fleet(t, 1)[0]
		tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}}}
		for i := range 200 {
			tenants = append(tenants, relay.Tenant{ID: fmt.Sprintf("a%d", i)})
		}
		applied := make(chan error, 1)
		go func() { applied <- in.h.Server.SetTenants(tenants) }()
		ctx, cancel := context.WithTimeout(context.Background(), relaytest.Timeout)
		_ = in.h.Server.Shutdown(ctx)
		cancel()
		select {
		case err := <-applied:
			if err != nil {
				t.Fatalf("round %d: SetTenants: %v", round, err)
			}
		case <-time.After(relaytest.Timeout):
			t.Fatalf("round %d: SetTenants did not return within %v of a shutdown", round, relaytest.Timeout)
		}
	}
}
