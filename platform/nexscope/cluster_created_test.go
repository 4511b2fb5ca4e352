package nexscope

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/redistest"
	"connector/media"
	"connector/platform"
	"connector/vault"
)

// TestForwardedActionOfAnEarlierTenant: a gateway's send_media that the
// edge forwarded to the room's home, while the home waits on its source
// (or on the room's transfer lock), is not sent once the room's tenant
// was deleted and created again under its id meanwhile: the relay revokes
// the earlier tenant's actions on the edge, which the home does not hear
// of, so the home declines it as an action of another creation than the
// room's now. Before, the earlier tenant's file went out as the bot of the
// tenant made again.
func TestForwardedActionOfAnEarlierTenant(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	first := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	created := first
	since := func(string) time.Time { mu.Lock(); defer mu.Unlock(); return created }
	with := func(d *platform.Deps) {
		s, err := media.New(media.Config{Dir: t.TempDir(), AllowPrivateURLs: true})
		if err != nil {
			t.Fatal(err)
		}
		d.Media, d.Vault = s, vault.NewMemory(vault.Config{Since: since})
	}
	ins := []*instance{
		startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, with),
		startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, with),
	}
	for _, in := range ins {
		in.p.SetTenants(map[string]time.Time{"t1": first})
	}
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice", "hermes")

	asked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	source := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { close(asked) })
		<-release
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write([]byte("the earlier tenant's picture"))
	}))
	t.Cleanup(source.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	done := make(chan contract.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		done <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: DefaultRoom,
			MediaKind: "image", SourceURL: source.URL + "/pic.png", Content: "from the earlier t1"})
	}()
	select {
	case <-asked:
	case <-time.After(testTimeout):
		t.Fatal("the home never asked for the send_media's source")
	}
	mu.Lock()
	created = first.Add(time.Hour) // t1 deleted and created again
	mu.Unlock()
	for _, in := range ins {
		in.p.SetTenants(map[string]time.Time{"t1": first.Add(time.Hour)})
	}
	close(release)
	var res contract.Result
	select {
	case res = <-done:
	case <-time.After(testTimeout):
		t.Fatal("the forwarded send_media never answered")
	}
	if res.Success || res.Code != contract.CodeEgressDeclined {
		t.Fatalf("the earlier t1's forwarded send_media = %+v, want egress_declined", res)
	}
	alice.SendJSON(map[string]any{"type": "ping"})
	if f := alice.Next(); f["type"] != "pong" {
		t.Fatalf("alice got %v: the earlier t1's file reached the room of the t1 made again", f)
	}
}

// TestForwardUnderTheCreationCheck8Approved: the edge's check 8
// (platform.Execute) approved t1's send as dispatched for t1 as first
// created, and the vault had t1 deleted and created again as soon as
// check 8 read it, the room's home already serving the new t1. The edge
// forwards the send under the creation check 8 approved, which the home
// declines, and alice gets nothing. Before, the edge read the creation
// afresh as it forwarded: the earlier t1's send went to the home under
// the new creation, and the bot spoke for the earlier t1 in the new t1's
// room.
func TestForwardUnderTheCreationCheck8Approved(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	first := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	again := first.Add(time.Hour)
	// remaking is an instance's vault.Config.Since: once armed, t1 is made
	// again (again) as its creation is read.
	type remaking struct {
		mu      sync.Mutex
		created time.Time
		armed   bool
		remade  bool
	}
	at := map[string]*remaking{"i0": {created: first}, "i1": {created: first}}
	with := func(name string) func(*platform.Deps) {
		v := at[name]
		return func(d *platform.Deps) {
			d.Vault = vault.NewMemory(vault.Config{Since: func(string) time.Time {
				v.mu.Lock()
				defer v.mu.Unlock()
				c := v.created
				if v.armed && !v.remade {
					v.created, v.remade = again, true
				}
				return c
			}})
		}
	}
	ins := []*instance{
		startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, with("i0")),
		startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, with("i1")),
	}
	for _, in := range ins {
		in.p.SetTenants(map[string]time.Time{"t1": first})
	}
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice", "hermes")

	h := at[home.name]
	h.mu.Lock()
	h.created = again // the home serves the new t1
	h.mu.Unlock()
	home.p.SetTenants(map[string]time.Time{"t1": again})
	e := at[edge.name]
	e.mu.Lock()
	e.armed = true // check 8 reads first, and the vault has again from then on
	e.mu.Unlock()

	ctx, cancel := context.WithTimeout(platform.WithCreation(t.Context(), first), testTimeout)
	defer cancel()
	res := edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "from the earlier t1"})
	e.mu.Lock()
	remade := e.remade
	e.mu.Unlock()
	if !remade {
		t.Fatal("check 8 never read the edge's vault")
	}
	if res.Success || res.Code != contract.CodeEgressDeclined {
		t.Fatalf("the earlier t1's forwarded send = %+v, want egress_declined", res)
	}
	alice.SendJSON(map[string]any{"type": "ping"})
	if f := alice.Next(); f["type"] != "pong" {
		t.Fatalf("alice got %v: the earlier t1's send reached the room of the t1 made again", f)
	}
}

// TestForwardOfATenantTheHomeDeleted: the room's home applied t1's
// deletion (its vault knows t1 no more: vault.Config.Known) and the edge
// has not yet, so the edge's check 8 approves t1's send and forwards it.
// The home declines it as it declines an action of its own gateways of a
// tenant it does not know, and alice gets nothing. Before, the home ran
// no check 8 (its egress had no vault): the deleted t1 spoke as the bot in
// the apply gap.
func TestForwardOfATenantTheHomeDeleted(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	var mu sync.Mutex
	deleted := map[string]bool{}
	with := func(name string) func(*platform.Deps) {
		return func(d *platform.Deps) {
			d.Vault = vault.NewMemory(vault.Config{Known: func(string) bool { mu.Lock(); defer mu.Unlock(); return !deleted[name] }})
		}
	}
	ins := []*instance{
		startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, with("i0")),
		startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, with("i1")),
	}
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice", "hermes")
	mu.Lock()
	deleted[home.name] = true // the home applied t1's deletion; the edge not yet
	mu.Unlock()

	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	res := edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "from the deleted t1"})
	if res.Success || res.Code != contract.CodeEgressDeclined {
		t.Fatalf("the deleted t1's forwarded send = %+v, want egress_declined", res)
	}
	alice.SendJSON(map[string]any{"type": "ping"})
	if f := alice.Next(); f["type"] != "pong" {
		t.Fatalf("alice got %v: the deleted t1's send reached the room", f)
	}
}

// TestForwardOfATenantTheHomeHasNotApplied: t1 was created, the edge
// applied it and its check 8 approved t1's send under that creation, and
// the room's home has not applied it yet (its vault knows no t1). The home
// answers unavailable, which the gateway retries, and runs nothing; once
// it applied t1, the send is sent. Before, the home's check 8 declined it
// (egress_declined, final to the gateway), where a home that applied an
// earlier creation only answers unavailable (actsForLocked).
func TestForwardOfATenantTheHomeHasNotApplied(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	created := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	applied := map[string]bool{}
	with := func(name string) func(*platform.Deps) {
		return func(d *platform.Deps) {
			d.Vault = vault.NewMemory(vault.Config{
				Known: func(string) bool { mu.Lock(); defer mu.Unlock(); return applied[name] },
				Since: func(string) time.Time {
					mu.Lock()
					defer mu.Unlock()
					if applied[name] {
						return created
					}
					return time.Time{}
				},
			})
		}
	}
	ins := []*instance{
		startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, with("i0")),
		startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, with("i1")),
	}
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	mu.Lock()
	applied[edge.name] = true // the edge applied t1's creation; the home not yet
	mu.Unlock()
	edge.p.SetTenants(map[string]time.Time{"t1": created})
	alice := edge.joinWith(t, "alice", "alice", "hermes")

	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	send := &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "from the new t1"}
	if res := edge.p.Execute(ctx, "t1", send); res.Success || res.Code != contract.CodeUnavailable || res.Ambiguous {
		t.Fatalf("t1's forwarded send to a home that has not applied t1 = %+v, want unavailable (retryable), not ambiguous", res)
	}
	mu.Lock()
	applied[home.name] = true
	mu.Unlock()
	home.p.SetTenants(map[string]time.Time{"t1": created})
	if res := edge.p.Execute(ctx, "t1", send); !res.Success {
		t.Fatalf("t1's send again once the home applied t1 = %+v", res)
	}
	if m := alice.Expect("msg"); m["text"] != "from the new t1" {
		t.Fatalf("alice got %v, want the new t1's send once", m)
	}
}
