package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/redistest"
	"connector/relay"
)

// TestAdminAcrossInstances: two instances share a Redis store. A tenant,
// a nexscope room binding and a gateway made through instance 0's admin
// API reach instance 1 without a restart: the gateway connects to
// instance 1 with the returned secret and receives the room's inbound
// there (the new tenant's delivery runs under the cluster's lease), and
// deleting the gateway on instance 0 closes its socket on instance 1 with
// 4401.
func TestAdminAcrossInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and redis-server")
	}
	rigs := adminRigsOnRedis(t, 2, func(r *adminRig, redisURL string) string {
		doc, err := os.ReadFile(r.config)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Replace(string(doc), "tenants:\n", fmt.Sprintf("store: {backend: redis, redis_url: %q, lease_ttl: 2s}\ntenants:\n", redisURL), 1)
	})
	r0, r1 := rigs[0], rigs[1]
	r0.cli(t, "tenant", "add", "acme")
	r0.cli(t, "bind", "acme", "nexscope", "room", "lab")
	secret := envLine(t, r0.cli(t, "gateway", "add", "acme", "acme-gw"), "GATEWAY_RELAY_SECRET")

	deadline := time.Now().Add(crashWait)
	for r1.refused(t, "acme-gw", secret) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for instance 1 to accept the gateway made on instance 0", crashWait)
		}
	}
	gw := r1.connect(t, "acme-gw", secret)
	nexscopeSay(t, r1.child.addr, "lab", "ada", "to acme on i1")
	inbound(t, gw, "to acme on i1")

	r0.cli(t, "gateway", "rm", "acme", "acme-gw")
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	start := time.Now()
	code, reason, err := gw.Closed(ctx)
	if err != nil {
		t.Fatalf("instance 1 did not close the deleted gateway's socket: %v", err)
	}
	if code != websocket.StatusCode(contract.CloseUnauthorized) || reason != relay.ReasonRevoked {
		t.Fatalf("closed %d %q, want 4401 %q", code, reason, relay.ReasonRevoked)
	}
	t.Logf("instance 1 closed the socket %v after the CLI returned", time.Since(start))
}

// adminRigsOnRedis starts n connectors (instances i0, i1, …) sharing one
// fresh redis-server; config returns each one's YAML.
func adminRigsOnRedis(t *testing.T, n int, config func(r *adminRig, redisURL string) string) []*adminRig {
	t.Helper()
	rds := redistest.Start(t, redistest.Options{})
	rigs := make([]*adminRig, n)
	for i := range rigs {
		r := newAdminRig(t)
		if err := os.WriteFile(r.config, []byte(config(r, rds.URL())), 0o600); err != nil {
			t.Fatal(err)
		}
		r.env = append(r.env, fmt.Sprintf("CONNECTOR_INSTANCE=i%d", i))
		r.start(t)
		rigs[i] = r
	}
	return rigs
}
