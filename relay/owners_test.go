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
