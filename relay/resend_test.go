package relay_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/cluster"
	"connector/internal/cluster/clustertest"
	"connector/internal/redistest"
	"connector/platform"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/store"
)

// twiceFrames is a pub/sub that, while on is set, publishes each frame
// (relay.ClusterMsgFrame) a second time right after the first, as go-redis
// sends a PUBLISH again when its reply was lost.
type twiceFrames struct {
	store.PubSub
	on *atomic.Bool
}

func (p twiceFrames) Publish(ctx context.Context, channel string, msg []byte) error {
	if err := p.PubSub.Publish(ctx, channel, msg); err != nil || !p.on.Load() || clustertest.Type(msg) != relay.ClusterMsgFrame {
		return err
	}
	return p.PubSub.Publish(ctx, channel, msg)
}

// TestClusterResentFrameKeepsTheLink, on a real redis-server: i0 drives
// t1, and each frame it sends for gb's socket on i1 reaches i1 twice. The
// copy is dropped: before, it looked like a gap in the link's frames,
// which broke the link, and gb got e1 a second time before e2.
func TestClusterResentFrameKeepsTheLink(t *testing.T) {
	if testing.Short() {
		t.Skip("runs redis-server")
	}
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: redistest.Start(t, redistest.Options{}).URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	tenants := []relay.Tenant{{ID: "t1", Gateways: []relay.Gateway{{ID: "ga", Secrets: []string{"sa"}}, {ID: "gb", Secrets: []string{"sb"}}}}}
	var twice atomic.Bool
	var hs []*relaytest.Harness
	var ps []*fakePlatform
	for i := range 2 {
		p := newFake("discord", map[string]string{"c1": "t1"})
		node, err := cluster.New(cluster.Config{Instance: fmt.Sprintf("i%d", i), PubSub: twiceFrames{st.PubSub(), &twice},
			LeaseTTL: time.Hour, ResendWindow: store.ResendWindow(st)}) // held throughout: no renewal on the real clock to miss
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(node.Close)
		hs = append(hs, relaytest.StartConfig(t, relay.Config{Tenants: tenants, Platforms: []platform.Platform{p, newFake("telegram", nil)},
			Log: relaytest.TestLogger(t), Store: st, Cluster: node}))
		ps = append(ps, p)
	}
	ga := hs[0].Dial(t, "ga", "sa")
	ga.Hello(t, "telegram", "") // i0 drives t1, and takes no discord inbound
	deadline := time.Now().Add(relaytest.Timeout)
	for relay.ClusterTenure(hs[0].Server, "t1") == nil {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for i0 to drive t1", relaytest.Timeout)
		}
		runtime.Gosched() // polling: taking the lease signals nothing here
	}
	gb := hs[1].Dial(t, "gb", "sb")
	gb.Hello(t, "discord", "")
	twice.Store(true)
	ps[1].deliver("t1", "c1", "u1", "e1")
	if ev, _ := gb.NextInbound(t); ev.Text != "e1" {
		t.Fatalf("gb got %q, want e1", ev.Text)
	}
	ps[1].deliver("t1", "c1", "u1", "e2")
	if ev, _ := gb.NextInbound(t); ev.Text != "e2" {
		t.Fatalf("after e1's frame arrived twice gb got %q, want e2 (e1 is unacknowledged, not lost)", ev.Text)
	}
}
