package relay_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"connector/internal/cluster"
	"connector/relay"
	"connector/relay/relaytest"
	"connector/store"
)

// gatedOwners is a store whose session-owner writes wait until open is
// closed, and which reports each owner it stored on stored (tenant "/"
// session key).
type gatedOwners struct {
	store.Store
	open   chan struct{}
	stored chan string
}

func (g gatedOwners) Owners() store.Owners { return gatedOwnerSet{g.Store.Owners(), g} }

type gatedOwnerSet struct {
	store.Owners
	g gatedOwners
}

func (o gatedOwnerSet) Set(ctx context.Context, tenant, sessionKey string, owner store.Owner, ttl time.Duration) error {
	select {
	case <-o.g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := o.Owners.Set(ctx, tenant, sessionKey, owner, ttl)
	if err == nil {
		select {
		case o.g.stored <- tenant + "/" + sessionKey:
		default:
		}
	}
	return err
}

// A tenant whose sessions change owner faster than the store takes the
// writes fills only its share of the instance's owner writes: another
// tenant's owner is still queued and stored, where it was skipped at every
// dispatch while the churning tenant kept the queue full.
func TestOwnerWritesOfAChurningTenantLeaveOthersTheirShare(t *testing.T) {
	mem := store.NewMemory(nil)
	t.Cleanup(func() { _ = mem.Close() })
	st := gatedOwners{Store: mem, open: make(chan struct{}), stored: make(chan string, 8192)}
	node, err := cluster.New(cluster.Config{Instance: "i0", PubSub: st.PubSub(), LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	tenants := []relay.Tenant{
		{ID: "t1", Gateways: []relay.Gateway{{ID: "gw1", Secrets: []string{"s1"}}}},
		{ID: "t2", Gateways: []relay.Gateway{{ID: "gw2", Secrets: []string{"s2"}}}},
	}
	h := relaytest.StartConfig(t, relay.Config{Tenants: tenants, Log: relaytest.TestLogger(t), Store: st, Cluster: node})
	for i := range 5000 {
		relay.NoteOwner(h.Server, "t1", "churn-"+strconv.Itoa(i), "c"+strconv.Itoa(i))
	}
	relay.NoteOwner(h.Server, "t2", "quiet", "c")
	close(st.open)
	deadline := time.After(relaytest.Timeout)
	for {
		select {
		case k := <-st.stored:
			if k == "t2/quiet" {
				return
			}
		case <-deadline:
			t.Fatalf("timed out after %v waiting for t2's session owner to be stored behind t1's churn", relaytest.Timeout)
		}
	}
}

// A tenant's part of the instance's owner writes follows its weight, and
// a busy tenant takes more than an eighth while the queue has room: with
// the store holding every write, a tenant of weight 3 beside one of weight
// 1 has 3,072 of the 4,096 queued, the other then half of what it leaves
// (512), and the only tenant of a deployment the whole queue. A fixed
// share held every tenant at 512 however idle the queue.
func TestOwnerWritesShareFollowsWeight(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tenants []relay.Tenant
		want    map[string]int
	}{
		{"heavy beside light", []relay.Tenant{{ID: "t1", Weight: 3}, {ID: "t2", Weight: 1}}, map[string]int{"t1": 3072, "t2": 512}},
		{"the only tenant", []relay.Tenant{{ID: "t1"}}, map[string]int{"t1": 4096}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := store.NewMemory(nil)
			t.Cleanup(func() { _ = mem.Close() })
			st := gatedOwners{Store: mem, open: make(chan struct{}), stored: make(chan string, 1)}
			node, err := cluster.New(cluster.Config{Instance: "i0", PubSub: st.PubSub(), LeaseTTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(node.Close)
			h := relaytest.StartConfig(t, relay.Config{Tenants: tc.tenants, Log: relaytest.TestLogger(t), Store: st, Cluster: node})
			t.Cleanup(func() { close(st.open) })
			for _, tn := range tc.tenants {
				for i := range 5000 {
					relay.NoteOwner(h.Server, tn.ID, "s"+strconv.Itoa(i), "c")
				}
				if got := relay.OwnerWrites(h.Server, tn.ID); got != tc.want[tn.ID] {
					t.Errorf("tenant %s (weight %d) has %d owner writes queued or being written; want %d", tn.ID, tn.Weight, got, tc.want[tn.ID])
				}
			}
		})
	}
}
