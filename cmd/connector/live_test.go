package main

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/internal/leakcheck"
	"connector/platform"
	"connector/registry"
)

// TestRegistryPollAppliesOnlyAChange: the periodic look (applyChanged)
// re-applies nothing while the stored layer is unchanged, and applies a
// change another instance made whose notification never came.
func TestRegistryPollAppliesOnlyAChange(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	applied := func() float64 {
		var m dto.Metric
		if err := c.live.metrics.applies.WithLabelValues("ok").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := applied()
	c.live.applyChanged(ctx)
	c.live.applyChanged(ctx)
	if got := applied(); got != before {
		t.Fatalf("an unchanged registry was applied again: %v applies after the looks, %v before", got, before)
	}
	// Another instance adds a tenant; this one never hears of it.
	if err := registry.New(st, clock.System).CreateTenant(ctx, registry.Tenant{ID: "added"}); err != nil {
		t.Fatal(err)
	}
	c.live.applyChanged(ctx)
	if got := applied(); got != before+1 {
		t.Fatalf("a stored change was not applied by the look: %v applies, want %v", got, before+1)
	}
	if n := c.live.tenants.Load(); n != 2 {
		t.Fatalf("serving %d tenants after the look, want 2 (t1 and added)", n)
	}
	c.live.applyChanged(ctx)
	if got := applied(); got != before+1 {
		t.Fatalf("the change was applied twice: %v applies, want %v", got, before+1)
	}
}

// TestNoExpiryApplyAfterStop: once the live loop is stopped, an apply that
// still runs (an admin change or a change notification before the live
// context ends, as run's deferred calls order them) arms no timer for a
// rotated-out secret's grace end, so nothing re-applies the registry to a
// connector that stopped following it.
func TestNoExpiryApplyAfterStop(t *testing.T) {
	st := memStore(t)
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := c.live.reg
	if err := reg.CreateTenant(ctx, registry.Tenant{ID: "t1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CreateGateway(ctx, "t1", "gw1"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Rotate(ctx, "t1", "gw1", time.Hour); err != nil {
		t.Fatal(err)
	}
	fake := clocktest.New(time.Now())
	c.live.clock = fake
	// Under the live loop's lock, as a registry poll may re-arm the timer
	// meanwhile (stop and arm under that lock).
	pending := func() int {
		c.live.lock()
		defer c.live.unlock()
		return fake.Pending()
	}
	if err := c.live.start(ctx); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != 1 {
		t.Fatalf("%d timers pending after start, want 1 (the old secret's grace end)", n)
	}
	c.live.stop()
	if err := c.live.apply(ctx); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != 0 {
		t.Fatalf("%d timers pending after stop and a later apply, want 0: the stopped loop would re-apply at the grace end", n)
	}
}

// TestSighupNotAppliedChangesNothing: a file with nine secrets for a
// gateway, which the relay refuses, does not validate (a SIGHUP with it is
// unreadable; before, it validated and was counted not_applied). A config
// the relay refuses all the same (here that one, made past validation) is
// counted not_applied and leaves the declared layer as it was: later
// applies (admin changes, polls) are not refused for it.
func TestSighupNotAppliedChangesNothing(t *testing.T) {
	st := memStore(t)
	good := "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, good), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	nine := "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1, s2, s3, s4, s5, s6, s7, s8, s9]}]\n"
	if _, _, err := loadOrDefault(sources{configPath: writeConfig(t, nine), dataDir: t.TempDir()}, noEnv); err == nil ||
		!strings.Contains(err.Error(), "tenants[0].gateways[0].secrets: 9 secrets, at most 8") {
		t.Fatalf("a file with nine secrets for a gateway: %v, want refused naming the key", err)
	}
	bad, _, err := loadOrDefault(sources{configPath: writeConfig(t, good), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	bad.Tenants[0].Gateways[0].Secrets = strings.Fields("s1 s2 s3 s4 s5 s6 s7 s8 s9")
	hangups := make(chan os.Signal, 1)
	c.reload = &reloader{hangups: hangups, read: func() (*Config, error) { return bad, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := c.reloadOnHangup(ctx)
	defer stop()
	hangups <- syscall.SIGHUP
	notApplied := c.live.metrics.reloads.WithLabelValues(reloadNotApplied)
	for deadline := time.Now().Add(10 * time.Second); value(notApplied) != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("no not_applied reload counted 10 s after SIGHUP (%v)", value(notApplied))
		}
		time.Sleep(10 * time.Millisecond)
	}
	gws, secrets := c.live.reg.Declared().Gateways, 0
	for _, g := range gws {
		secrets += len(g.Secrets)
	}
	if len(gws) != 1 || secrets != 1 {
		t.Fatalf("%d declared gateways with %d secrets after the refused reload, want gw1 with its one secret", len(gws), secrets)
	}
	if err := c.live.apply(ctx); err != nil {
		t.Fatalf("an apply after the refused reload: %v", err)
	}
}

// tenantKeeper records the tenants each apply gives it: their ids, and
// their creation times.
type tenantKeeper struct {
	last    []string
	created map[string]time.Time
}

func (k *tenantKeeper) SetTenants(created map[string]time.Time) {
	k.last, k.created = slices.Sorted(maps.Keys(created)), created
}

// TestApplyTellsKeepersTheTenants: every apply gives the platforms that keep
// per-tenant state (platform.TenantKeeper: Discord's command manifests) the
// configured tenants with their creation times, so a deleted tenant's
// state is forgotten, and a re-created one's kept state is told apart.
func TestApplyTellsKeepersTheTenants(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	k := &tenantKeeper{}
	c.live.keepers = append(c.live.keepers, k)
	reg := registry.New(st, clock.System)
	if err := reg.CreateTenant(ctx, registry.Tenant{ID: "added"}); err != nil {
		t.Fatal(err)
	}
	if err := c.live.apply(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.last, []string{"added", "t1"}) {
		t.Fatalf("tenants given after a create = %v, want [added t1]", k.last)
	}
	if k.created["added"].IsZero() || !k.created["t1"].IsZero() {
		t.Fatalf("creation times given = %v, want added's set and t1's (declared) zero", k.created)
	}
	if err := reg.DeleteTenant(ctx, "added"); err != nil {
		t.Fatal(err)
	}
	if err := c.live.apply(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(k.last, []string{"t1"}) {
		t.Fatalf("tenants given after a delete = %v, want [t1]", k.last)
	}
}

// TestDeletedTenantsMediaGoesWithIt: an apply that finds a stored tenant
// deleted removes its media objects then, not at their expiry (media.ttl),
// and one that finds it made again under its id removes the earlier
// one's, so the new tenant's gateways never fetch them.
func TestDeletedTenantsMediaGoesWithIt(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()); c.media.Close() })
	reg := registry.New(st, clock.System)
	put := func(tenant string) string {
		t.Helper()
		info, err := c.media.Put(tenant, strings.NewReader("bytes"), "text/plain", "")
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	fetchable := func(tenant, id string) bool {
		obj, err := c.media.Open(tenant, id)
		if err == nil {
			obj.Close()
		}
		return err == nil
	}
	for round := range 2 {
		if err := reg.CreateTenant(ctx, registry.Tenant{ID: "added"}); err != nil {
			t.Fatal(err)
		}
		if err := c.live.apply(ctx); err != nil {
			t.Fatal(err)
		}
		id, declared := put("added"), put("t1")
		if err := reg.DeleteTenant(ctx, "added"); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			if err := c.live.apply(ctx); err != nil {
				t.Fatal(err)
			}
		} else if err := reg.CreateTenant(ctx, registry.Tenant{ID: "added"}); err != nil {
			t.Fatal(err) // made again before this instance applied the deletion
		} else if err := c.live.apply(ctx); err != nil {
			t.Fatal(err)
		}
		if fetchable("added", id) {
			t.Errorf("round %d: the deleted tenant's media object is still fetchable under its id", round)
		}
		if !fetchable("t1", declared) {
			t.Errorf("round %d: the declared tenant's media object went too", round)
		}
	}
}

// tableTaker records the bindings and policies each apply gives it, and
// refuses its bindings when refuse is set.
type tableTaker struct {
	refuse   error
	bindings []platform.Binding
	policies map[string]platform.Relevance
}

func (p *tableTaker) Bind(bs []platform.Binding) error {
	if p.refuse != nil {
		return p.refuse
	}
	p.bindings = bs
	return nil
}

func (p *tableTaker) SetRelevance(byTenant map[string]platform.Relevance) { p.policies = byTenant }

// TestRefusedTableHoldsBackNoOtherPlatform: a platform refusing its
// bindings (one a tenant stored that it cannot route) fails the apply,
// but every other platform gets its bindings and every platform its
// tenants' policies. Before, the apply stopped at the refusal: the
// platforms after it, and the policies, kept the tables of the last
// apply, on every instance, until the binding went.
func TestRefusedTableHoldsBackNoOtherPlatform(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	refuser, taker := &tableTaker{refuse: errors.New("refused (injected)")}, &tableTaker{}
	c.live.binders = map[string]platform.Binder{"telegram": refuser, "discord": taker}
	c.live.relevance = map[string]platform.RelevanceTaker{"telegram": refuser, "discord": taker}
	reg := c.live.reg
	err = cmp.Or(reg.Bind(ctx, registry.Binding{Platform: "discord", Kind: platform.BindGuild, ID: "900", Tenant: "t1"}),
		reg.SetPolicy(ctx, registry.Policy{Tenant: "t1", Platform: "discord", RequireAddress: true}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.live.apply(ctx); !errors.Is(err, refuser.refuse) {
		t.Fatalf("an apply one platform refused: %v, want its refusal", err)
	}
	if len(taker.bindings) != 1 || taker.bindings[0].ID != "900" {
		t.Errorf("the other platform's bindings: %v, want guild 900", taker.bindings)
	}
	if !taker.policies["t1"].RequireAddress || refuser.policies == nil {
		t.Errorf("policies given: %v and %v, want t1's to both platforms", taker.policies, refuser.policies)
	}
}

// TestSighupRefusedTableKeepsTheFile: a SIGHUP whose file removes gateway
// gw2, applied while a platform refuses its bindings (a stored binding),
// keeps the file's layer: gw2, whose sockets the relay closed, stays
// gone, and the reload counts ok. Before, the reload was rolled back
// after the relay had taken it: gw2 was declared again, its sockets
// closed 4401 all the same. It is logged at Warn naming the platform whose
// routing was not applied: before, at Info as "routing reloaded".
func TestSighupRefusedTableKeepsTheFile(t *testing.T) {
	st := memStore(t)
	two := "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}, {id: gw2, secrets: [s2]}]\n"
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, two), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	c, err := build(cfg, slog.New(slog.NewJSONHandler(&logs, nil)), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	one, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c.live.binders = map[string]platform.Binder{"telegram": &tableTaker{refuse: errors.New("refused (injected)")}}
	hangups := make(chan os.Signal, 1)
	c.reload = &reloader{hangups: hangups, read: func() (*Config, error) { return one, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := c.reloadOnHangup(ctx)
	defer stop()
	hangups <- syscall.SIGHUP
	ok, notApplied := c.live.metrics.reloads.WithLabelValues(reloadOK), c.live.metrics.reloads.WithLabelValues(reloadNotApplied)
	for deadline := time.Now().Add(10 * time.Second); value(ok)+value(notApplied) != 1; {
		if time.Now().After(deadline) {
			t.Fatal("no reload counted 10 s after SIGHUP")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if value(ok) != 1 {
		t.Errorf("the reload counted not_applied, want ok")
	}
	if gws := c.live.reg.Declared().Gateways; len(gws) != 1 || gws[0].ID != "gw1" {
		t.Errorf("declared gateways after the reload: %v, want gw1 alone (the file's)", gws)
	}
	// Logged before the reload is counted.
	if l := logs.String(); !strings.Contains(l, `"level":"WARN","msg":"SIGHUP: tenants and gateways reloaded`) ||
		!strings.Contains(l, "bindings (telegram)") || strings.Contains(l, "routing reloaded") {
		t.Errorf("the reload's log %s, want a Warn naming telegram, no Info of routing reloaded", l)
	}
}

// TestDeletedTenantsSeriesGo: an apply that finds a tenant deleted
// deletes its metric series (inbound, buffered, ignored frames, delivery
// statuses), its connection gauge at the first apply that reads it 0 (or
// at its last socket's close), and the tenant made again under its id
// reports to new ones. Before, a
// deleted tenant's series stayed for good (its connection gauge still
// did): the metrics grew with every tenant made and deleted.
func TestDeletedTenantsSeriesGo(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	seriesOf := func(tenant string) (n int) {
		families, err := c.metrics.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "tenant" && l.GetValue() == tenant {
						n++
					}
				}
			}
		}
		return n
	}
	report := func(tenant string) {
		c.metrics.Inbound("telegram", tenant, "queued")
		c.metrics.BufferedOf(tenant)(3)
		c.metrics.FrameIgnored(tenant, "malformed")
		c.metrics.DeliveryStatus("whatsapp_cloud", tenant, "read")
	}
	reg := c.live.reg
	if err := cmp.Or(reg.CreateTenant(ctx, registry.Tenant{ID: "gone"}), c.live.apply(ctx)); err != nil {
		t.Fatal(err)
	}
	report("gone")
	report("t1")
	c.metrics.ConnOpened("gone")
	if err := cmp.Or(reg.DeleteTenant(ctx, "gone"), c.live.apply(ctx)); err != nil {
		t.Fatal(err)
	}
	if n := seriesOf("gone"); n != 1 { // its connection gauge stays, one socket closing
		t.Errorf("%d series of the deleted tenant after the apply, want its connection gauge alone", n)
	}
	c.metrics.ConnClosed("gone")
	if err := c.live.apply(ctx); err != nil {
		t.Fatal(err)
	}
	if n := seriesOf("gone"); n != 0 {
		t.Errorf("%d series of the deleted tenant, its last socket closed, after the next apply; want none", n)
	}
	// A socket authenticated just before the deletion, counted after its
	// gauge went: its close deletes the gauge it made again, with no
	// apply to come (nothing else changes). Before, it stayed for good.
	c.metrics.ConnOpened("gone")
	c.metrics.ConnClosed("gone")
	if n := seriesOf("gone"); n != 0 {
		t.Errorf("%d series of the deleted tenant after a late socket opened and closed, want none", n)
	}
	if n := seriesOf("t1"); n < 4 {
		t.Errorf("%d series of t1, which stays, want its 4 at least", n)
	}
	if err := cmp.Or(reg.CreateTenant(ctx, registry.Tenant{ID: "gone"}), c.live.apply(ctx)); err != nil {
		t.Fatal(err)
	}
	report("gone")
	if n := seriesOf("gone"); n < 4 {
		t.Errorf("%d series of the tenant made again, want its 4 at least", n)
	}
}

// TestDeliveryCatchesTheRegistryUp: a delivery to a tenant another
// instance created, which this one has not applied yet, has the registry
// applied (live.catchUp) and is kept for the tenant, not dropped as an
// unknown tenant's.
func TestDeliveryCatchesTheRegistryUp(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	if err := registry.New(st, clock.System).CreateTenant(ctx, registry.Tenant{ID: "added"}); err != nil {
		t.Fatal(err)
	}
	ev := &contract.Event{Text: "hi", MessageID: "m1"}
	ev.Source.Platform, ev.Source.ChatID, ev.Source.ChatType = "discord", "c1", "group"
	if err := c.relay.Deliver(ctx, platform.Delivery{Kind: platform.KindInbound, Tenant: "added", Platform: "discord",
		SessionKey: "k", ChatID: "c1", Event: ev, Received: time.Now()}); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if b := c.relay.TenantBufferBytes()["added"]; b == 0 {
		t.Fatal("nothing buffered for a tenant another instance created after a delivery to it: dropped as unknown")
	}
}

// TestCatchUpWaitsForTheApplyUnderWay: a delivery to a tenant an apply
// under way adds waits for that apply and is kept for the tenant (before,
// it was refused at once, and a Discord or nexscope message lost: they
// are not delivered again); one while an apply hangs waits until its
// caller's deadline. After an apply failed a delivery is refused at once,
// not a new apply each (a flood of deliveries to a tenant gone, one apply
// of the whole registry per event).
func TestCatchUpWaitsForTheApplyUnderWay(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	c.live.lock() // the apply that adds the tenant, under way
	if err := registry.New(st, clock.System).CreateTenant(ctx, registry.Tenant{ID: "added"}); err != nil {
		t.Fatal(err)
	}
	delivered := make(chan error, 1)
	go func() {
		ev := &contract.Event{Text: "hi", MessageID: "m1"}
		ev.Source.Platform, ev.Source.ChatID, ev.Source.ChatType = "discord", "c1", "group"
		delivered <- c.relay.Deliver(ctx, platform.Delivery{Kind: platform.KindInbound, Tenant: "added", Platform: "discord",
			SessionKey: "k", ChatID: "c1", Event: ev, Received: time.Now()})
	}()
	for deadline := time.Now().Add(10 * time.Second); !leakcheck.Parked(".(*live).catchUp("); {
		select {
		case err := <-delivered:
			t.Fatalf("a delivery to a tenant the apply under way adds: %v, want it to wait for the apply", err)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the delivery never waited for the apply under way")
		}
	}
	err = c.live.applyLocked(ctx)
	c.live.unlock()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-delivered:
		if err != nil {
			t.Fatalf("a delivery to a tenant the apply under way added: %v, want kept", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a delivery still waits 10s after the apply it waited for ended")
	}
	if b := c.relay.TenantBufferBytes()["added"]; b == 0 {
		t.Fatal("nothing buffered for the tenant the apply added: dropped as unknown")
	}

	c.live.lock() // an apply that hangs
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = c.live.catchUp(short)
	cancel()
	c.live.unlock()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a catch-up while an apply hangs: %v, want it to wait until its deadline", err)
	}

	c.live.lock()
	c.live.relayed = false // as after an apply that failed
	applied := c.live.applied
	c.live.unlock()
	refused := make(chan error, 1)
	go func() { refused <- c.live.catchUp(ctx) }()
	select {
	case err := <-refused:
		if !errors.Is(err, errCatchUpFailed) {
			t.Fatalf("a catch-up after an apply failed: %v, want refused", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a catch-up after an apply failed still waits after 10s, want it refused at once")
	}
	if c.live.applied != applied {
		t.Fatal("a catch-up after an apply failed applied the registry again, want refused until the watch's next apply")
	}
	if err := c.live.apply(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.live.catchUp(ctx); err != nil {
		t.Fatalf("catch-up once the registry is applied: %v", err)
	}
}

// TestCorruptEntryHoldsBackItsPlatformsTable: a binding that does not
// decode (passed over, registry.State.Corrupt) leaves its platform the
// last table it applied, as a refused table does: applied without it,
// a scope claim of another tenant it set aside would route that tenant
// the chat. A tenant record that does not decode holds back the apply:
// applied without it, the tenant is taken for deleted (its buffered
// inbound and media dropped, its bindings gone). Before, both were
// applied: tenant b's claim in a's guild took a's channel.
func TestCorruptEntryHoldsBackItsPlatformsTable(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	discord, telegram := &tableTaker{}, &tableTaker{}
	c.live.binders = map[string]platform.Binder{"discord": discord, "telegram": telegram}
	reg := c.live.reg
	chat := platform.Chat{ID: "701", Space: "700"}
	err = cmp.Or(reg.CreateTenant(ctx, registry.Tenant{ID: "a"}), reg.CreateTenant(ctx, registry.Tenant{ID: "b"}),
		reg.Claim(ctx, "b", "discord", chat),
		reg.Bind(ctx, registry.Binding{Platform: "discord", Kind: platform.BindGuild, ID: "700", Tenant: "a"}),
		reg.Bind(ctx, registry.Binding{Platform: "telegram", Kind: platform.BindChat, ID: "-1001", Tenant: "a"}))
	if err != nil {
		t.Fatal(err)
	}
	owner := func() string {
		o, _ := platform.NewOwnership(discord.bindings).Owner(chat)
		return o
	}
	if err := c.live.apply(ctx); err != nil || owner() != "a" {
		t.Fatalf("apply: %v; channel 701 owned by %q, want a", err, owner())
	}
	put := func(ns, key, value string) {
		t.Helper()
		if _, err := st.Registry().Put(ctx, ns, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	guild, _, err := st.Registry().Get(ctx, "registry/bindings", "discord/guild/700")
	if err != nil {
		t.Fatal(err)
	}
	put("registry/bindings", "discord/guild/700", "{not json")
	telegram.bindings = nil
	if err := c.live.apply(ctx); !errors.Is(err, errTableRefused) || owner() != "a" || len(telegram.bindings) != 1 {
		t.Fatalf("apply with a's guild binding corrupt: %v; channel 701 owned by %q, telegram table %v: want discord held back, telegram applied", err, owner(), telegram.bindings)
	}
	put("registry/bindings", "discord/guild/700", string(guild.Value))
	put("registry/tenants", "a", "{not json")
	discord.bindings, telegram.bindings = nil, nil
	k := &tenantKeeper{}
	c.live.keepers = append(c.live.keepers, k)
	if err := c.live.apply(ctx); err == nil || discord.bindings != nil || telegram.bindings != nil || k.last != nil {
		t.Fatalf("apply with a's record corrupt: %v; tables %v, %v, tenants %v: want none applied (a taken for deleted, its inbound and media dropped)", err, discord.bindings, telegram.bindings, k.last)
	}
}

// TestHeldBackPlatformBacksOff: while a corrupt binding holds back a
// platform, the periodic look applies the same revision again after
// registryPoll, then twice as long each time up to maxHeldBack, not at
// every look (each apply reads every entry and logs the refusal); a
// change of the registry applies at once. Before, it applied every look.
func TestHeldBackPlatformBacksOff(t *testing.T) {
	st := memStore(t)
	ctx := context.Background()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	fake := clocktest.New(time.Unix(1_700_000_000, 0))
	c.live.clock = fake
	telegram := &tableTaker{}
	c.live.binders = map[string]platform.Binder{"discord": &tableTaker{}, "telegram": telegram}
	reg := c.live.reg
	if err := cmp.Or(reg.CreateTenant(ctx, registry.Tenant{ID: "a"}),
		reg.Bind(ctx, registry.Binding{Platform: "telegram", Kind: platform.BindChat, ID: "-1001", Tenant: "a"})); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Registry().Put(ctx, "registry/bindings", "discord/guild/700", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if err := c.live.apply(ctx); !errors.Is(err, errTableRefused) {
		t.Fatalf("apply with a corrupt discord binding: %v, want errTableRefused", err)
	}
	applied := func() bool { // telegram's table taken again: an apply ran
		was := telegram.bindings != nil
		telegram.bindings = nil
		return was
	}
	applied()
	wait := registryPoll
	for range 6 {
		fake.Advance(wait - time.Second)
		c.live.applyChanged(ctx)
		if applied() {
			t.Fatalf("applied again %v after the refusal, before its wait of %v ended", wait-time.Second, wait)
		}
		fake.Advance(time.Second)
		c.live.applyChanged(ctx)
		if !applied() {
			t.Fatalf("not applied again once its wait of %v ended", wait)
		}
		wait = min(2*wait, maxHeldBack)
	}
	if err := reg.CreateTenant(ctx, registry.Tenant{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	c.live.applyChanged(ctx)
	if !applied() {
		t.Fatal("a registry change was not applied at once while held back")
	}
}
