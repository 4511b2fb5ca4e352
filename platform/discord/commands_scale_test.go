package discord

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/store"
)

// countingRegistry counts the store round trips a reconcile's read of the
// manifests makes.
type countingRegistry struct {
	store.Registry
	reads atomic.Int64
}

func (r *countingRegistry) Get(ctx context.Context, namespace, key string) (store.Entry, bool, error) {
	r.reads.Add(1)
	return r.Registry.Get(ctx, namespace, key)
}

func (r *countingRegistry) List(ctx context.Context, namespace string) ([]store.Entry, uint64, error) {
	r.reads.Add(1)
	return r.Registry.List(ctx, namespace)
}

// TestManyTenantsManifestsRead: a new Gateway session delivering the
// guilds of 2,000 tenants reads all their stored manifests in a bounded
// number of store round trips (one per tenant ran past storeTimeout with
// thousands, failed, and failed again every commandPoll), on the memory
// store and on a real redis-server.
func TestManyTenantsManifestsRead(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{store.BackendMemory, store.BackendRedis} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			cfg := store.Config{Backend: backend}
			if backend == store.BackendRedis {
				cfg.RedisURL = redistest.Start(t, redistest.Options{}).URL()
			}
			st, err := store.Open(waitCtx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			node, err := cluster.New(cluster.Config{Instance: "i0", PubSub: st.PubSub()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(node.Close)
			e := newEnvDeps(t, platform.Deps{Store: st, Cluster: node}, discordtest.Options{}, nil)
			const n = 2000
			var bindings []platform.Binding
			var ids []string
			var scopes []scopeSync
			for i := range n {
				tenant, guild := fmt.Sprintf("m%d", i), strconv.Itoa(900000+i)
				ids = append(ids, tenant)
				bindings = append(bindings, platform.Binding{Kind: platform.BindGuild, ID: guild, Tenant: tenant})
				scopes = append(scopes, scopeSync{scope: guild})
				if _, err := st.Registry().Put(waitCtx(t), manifestsNamespace, tenant, storedManifest(`[{"name":"ask","description":"`+tenant+`"}]`)); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.p.Bind(bindings); err != nil {
				t.Fatal(err)
			}
			e.p.SetTenants(declared(ids...))
			reg := &countingRegistry{Registry: st.Registry()}
			e.p.cmds.shared = reg
			manifests, err := e.p.cmds.load(waitCtx(t), scopes)
			if err != nil {
				t.Fatalf("reading %d tenants' manifests: %v", n, err)
			}
			if len(manifests) != n || manifests["m1999"][0]["description"] != "m1999" {
				t.Fatalf("read %d manifests (m1999: %v), want %d", len(manifests), manifests["m1999"], n)
			}
			if got := reg.reads.Load(); got > 1 {
				t.Fatalf("reading %d tenants' manifests took %d store round trips, want 1", n, got)
			}
		})
	}
}
