package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
	"connector/store"
	"connector/vault"
)

// sharedPair is two instances of the platform on one real redis-server
// against one fake Discord: holder runs the Gateway session, other never
// gets the lease.
type sharedPair struct {
	holder, other *env
	st            store.Store
}

func newSharedPair(t *testing.T) *sharedPair {
	t.Helper()
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendRedis, RedisURL: redistest.Start(t, redistest.Options{}).URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	node := func(name string) *cluster.Node {
		n, err := cluster.New(cluster.Config{Instance: name, PubSub: st.PubSub()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	holder := newEnvDeps(t, platform.Deps{Store: st, Cluster: node("i0")}, discordtest.Options{}, nil)
	holder.startReady(t)
	standby := func(ctx context.Context, _ string, _ func(context.Context) error) error {
		<-ctx.Done() // the Gateway lease stays with holder
		return nil
	}
	other := &env{fake: holder.fake, sink: newSink(), logs: newLogCapture(), metrics: newMetrics(), priv: holder.priv, cfg: holder.cfg}
	other.p, err = New(holder.cfg, platform.Deps{Log: other.logs.Logger(), Metrics: other.metrics, Store: st, Cluster: node("i1"),
		Vault: sharedVault, Exclusive: standby})
	if err != nil {
		t.Fatal(err)
	}
	other.start(t)
	return &sharedPair{holder: holder, other: other, st: st}
}

// declared is SetTenants' argument for the declared tenants ids (no
// creation time).
func declared(ids ...string) map[string]time.Time {
	out := make(map[string]time.Time, len(ids))
	for _, id := range ids {
		out[id] = time.Time{}
	}
	return out
}

// storedManifest is the stored value of a manifest of a declared tenant.
func storedManifest(commands string) []byte {
	return []byte(`{"commands":` + commands + `}`)
}

// waitGuildDescriptions waits until guild's registry holds exactly the
// commands named in names, each described with prefix (manifestOf).
func waitGuildDescriptions(t *testing.T, f *discordtest.Server, guild, prefix string, names []string) {
	t.Helper()
	platformtest.WaitUntil(t, fmt.Sprintf("guild %s's registry holding %v described %q", guild, names, prefix), func() bool {
		cmds := f.GuildCommands(guild)
		if len(cmds) != len(names) {
			return false
		}
		for _, c := range cmds {
			name, _ := c["name"].(string)
			if !slices.Contains(names, name) || c["description"] != prefix+" "+name {
				return false
			}
		}
		return true
	})
}

// seedGuildCommands overwrites guild's registry at the fake directly, as
// if someone else had changed it.
func seedGuildCommands(t *testing.T, f *discordtest.Server, guild, manifest string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", f.URL+fmt.Sprintf(guildCommandsPath, guild), strings.NewReader(manifest))
	req.Header.Set("Authorization", "Bot "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestCommandsFromAHelloOnAnotherInstance: with two instances on one
// Redis, a tenant's hello reaching the instance without the Gateway
// session still gets its manifest registered on its guild (by the
// instance that has the guild), and a newer one replaces it there.
func TestCommandsFromAHelloOnAnotherInstance(t *testing.T) {
	t.Parallel()
	sp := newSharedPair(t)
	sp.other.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("B1", []string{"ask", "bstatus"}, nil)))
	waitGuildDescriptions(t, sp.holder.fake, guildOther, "B1", []string{"ask", "bstatus"})
	sp.other.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("B2", []string{"ask"}, nil)))
	waitGuildDescriptions(t, sp.holder.fake, guildOther, "B2", []string{"ask"})
}

// TestNewSessionKeepsTheNewestManifest: the Gateway's instance saw t2's
// first manifest; a newer one reaches the other instance. A new Gateway
// session (Discord refused the RESUME) delivers the guilds again and
// reconciles them: with the newest manifest, never the older one the
// Gateway's instance had seen itself.
func TestNewSessionKeepsTheNewestManifest(t *testing.T) {
	t.Parallel()
	sp := newSharedPair(t)
	f := sp.holder.fake
	sp.holder.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("Old", []string{"ask"}, nil)))
	waitGuildDescriptions(t, f, guildOther, "Old", []string{"ask"})
	sp.other.p.ObserveHello("t2", time.Time{}, "gw-c", helloWith(manifestOf("New", []string{"ask", "bstatus"}, nil)))
	waitGuildDescriptions(t, f, guildOther, "New", []string{"ask", "bstatus"})
	// Someone changes the registry behind the connector's back; only a
	// reconcile on the new session puts the manifest back.
	seedGuildCommands(t, f, guildOther, manifestOf("Junk", []string{"junk"}, nil))
	f.RefuseResumes(4009)
	if err := f.CloseGateway(4000, "Unknown error"); err != nil { // resumable
		t.Fatal(err)
	}
	if err := f.WaitSession(waitCtx(t), 2); err != nil {
		t.Fatal(err)
	}
	waitGuildDescriptions(t, f, guildOther, "New", []string{"ask", "bstatus"})
}

// TestManifestForgottenWithItsTenant: once the registry no longer
// configures a tenant its stored manifest is deleted, and a tenant made
// again under the id has none until its gateway sends one.
func TestManifestForgottenWithItsTenant(t *testing.T) {
	t.Parallel()
	sp := newSharedPair(t)
	sp.other.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("B", []string{"ask"}, nil)))
	waitGuildDescriptions(t, sp.holder.fake, guildOther, "B", []string{"ask"})
	stored := func() bool {
		_, ok, err := sp.st.Registry().Get(waitCtx(t), manifestsNamespace, "t2")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !stored() {
		t.Fatal("t2's manifest is not in the store")
	}
	sp.holder.p.SetTenants(declared("t1"))
	sp.other.p.SetTenants(declared("t1"))
	platformtest.WaitUntil(t, "t2's stored manifest deleted", func() bool { return !stored() })
	sp.holder.p.SetTenants(declared("t1", "t2"))
	sp.other.p.SetTenants(declared("t1", "t2"))
	manifests, err := sp.holder.p.cmds.load(waitCtx(t), []scopeSync{{scope: guildOther}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := manifests["t2"]; ok {
		t.Fatal("t2 made again has its old manifest")
	}
}

// TestLostNoticeMadeUpByThePoll: a manifest stored by another instance
// whose notice never came (written to the store without one) is
// registered by the Gateway's instance at its next look, commandPoll
// later on the injected clock.
func TestLostNoticeMadeUpByThePoll(t *testing.T) {
	t.Parallel()
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n, err := cluster.New(cluster.Config{Instance: "i0", PubSub: st.PubSub()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	clk := clocktest.New(epoch)
	holder := newEnvDeps(t, platform.Deps{Clock: clk, Store: st, Cluster: n}, discordtest.Options{}, nil)
	holder.startReady(t)
	registered := func(what string, want string, step time.Duration) {
		t.Helper()
		platformtest.WaitUntil(t, what+" registered on guild 200 as the injected clock moves "+step.String()+" at a time", func() bool {
			clk.Advance(step)
			cmds := holder.fake.GuildCommands(guildOther)
			return len(cmds) == 1 && cmds[0]["description"] == want
		})
	}
	// A hello here first: its reconcile also takes the guilds the
	// Gateway delivered, so none is left queued.
	holder.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("A", []string{"ask"}, nil)))
	registered("the hello's manifest", "A ask", holder.cfg.CommandSyncDebounce)
	if _, err := st.Registry().Put(waitCtx(t), manifestsNamespace, "t2", storedManifest(manifestOf("B", []string{"ask"}, nil))); err != nil {
		t.Fatal(err)
	}
	registered("the manifest stored without a notice", "B ask", commandPoll)
}

// TestStaleTenantsKeepANewerTenantsManifest: an instance whose last
// registry apply is older than a tenant (its next apply failed, or has not
// come yet) does not know the tenant; its look must not delete the
// manifest another instance stored for it. A tenant it saw leave is
// forgotten as before (TestManifestForgottenWithItsTenant).
func TestStaleTenantsKeepANewerTenantsManifest(t *testing.T) {
	t.Parallel()
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, discordtest.Options{}, nil)
	c := newCommandSync(e.p) // no loop: each look is the test's
	c.shared, c.ps = st.Registry(), st.PubSub()
	c.setTenants(declared("t1", "t3"))
	c.look(waitCtx(t))
	put := func(tenant string) {
		if _, err := st.Registry().Put(waitCtx(t), manifestsNamespace, tenant, storedManifest(manifestOf("X", []string{"ask"}, nil))); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(tenant string) bool {
		_, ok, err := st.Registry().Get(waitCtx(t), manifestsNamespace, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	put("t2") // t2 made and its hello stored on another instance
	put("t3")
	c.setTenants(declared("t1")) // t3 deleted; t2 not seen yet
	c.look(waitCtx(t))
	if !stored("t2") {
		t.Fatal("a tenant newer than this instance's registry apply lost its stored manifest")
	}
	if stored("t3") {
		t.Fatal("a deleted tenant's manifest is still stored")
	}
}

// failingGets is a Registry whose Get fails once armed; a write (a
// manifest stored) arms it when armOnPut is set.
type failingGets struct {
	store.Registry
	armOnPut, armed atomic.Bool
}

func (r *failingGets) Get(ctx context.Context, ns, key string) (store.Entry, bool, error) {
	if r.armed.Load() {
		return store.Entry{}, false, errors.New("store unreachable")
	}
	return r.Registry.Get(ctx, ns, key)
}

func (r *failingGets) CompareAndSwap(ctx context.Context, ns, key string, old, value []byte) (bool, error) {
	swapped, err := r.Registry.CompareAndSwap(ctx, ns, key, old, value)
	if swapped && r.armOnPut.Load() {
		r.armed.Store(true)
	}
	return swapped, err
}

// TestManifestsReadFailureRetried: a reconcile whose stored manifests
// could not be read (the store unreachable for a moment) keeps its scopes
// queued; the guild gets its manifest once the store answers again, a
// commandPoll later on the injected clock, with no new hello.
func TestManifestsReadFailureRetried(t *testing.T) {
	t.Parallel()
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n, err := cluster.New(cluster.Config{Instance: "i0", PubSub: st.PubSub()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	clk := clocktest.New(epoch)
	holder := newEnvDeps(t, platform.Deps{Clock: clk, Store: st, Cluster: n}, discordtest.Options{}, nil)
	reg := &failingGets{Registry: st.Registry()}
	holder.p.cmds.shared = reg
	holder.startReady(t)
	registered := func(what string, want string, step time.Duration) {
		t.Helper()
		platformtest.WaitUntil(t, what+" registered on guild 200 as the injected clock moves "+step.String()+" at a time", func() bool {
			clk.Advance(step)
			cmds := holder.fake.GuildCommands(guildOther)
			return len(cmds) == 1 && cmds[0]["description"] == want
		})
	}
	holder.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("A", []string{"ask"}, nil)))
	registered("the first hello's manifest", "A ask", holder.cfg.CommandSyncDebounce)
	reg.armOnPut.Store(true) // the store fails right after the next manifest is stored
	holder.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("B", []string{"ask"}, nil)))
	platformtest.WaitUntil(t, "the reconcile's read of the manifests failing as the injected clock moves", func() bool {
		clk.Advance(holder.cfg.CommandSyncDebounce)
		return strings.Contains(holder.logs.Text(), "the manifests could not be read")
	})
	reg.armOnPut.Store(false)
	reg.armed.Store(false)
	registered("the manifest whose read failed", "B ask", commandPoll)
}

// TestRemadeTenantLosesTheEarlierManifest: t2 deleted and made again
// under its id within one registry apply (the keeper sees t2 throughout,
// with a later creation time): the earlier t2's stored manifest is
// ignored and deleted, and t2's guild emptied, until the new t2's gateway
// sends a manifest; the new one is then registered.
func TestRemadeTenantLosesTheEarlierManifest(t *testing.T) {
	t.Parallel()
	sp := newSharedPair(t)
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	apply := func(created time.Time) {
		tenants := map[string]time.Time{"t1": {}, "t2": created}
		sp.holder.p.SetTenants(tenants)
		sp.other.p.SetTenants(tenants)
	}
	apply(first)
	sp.other.p.ObserveHello("t2", first, "gw-b", helloWith(manifestOf("Old", []string{"ask"}, nil)))
	waitGuildDescriptions(t, sp.holder.fake, guildOther, "Old", []string{"ask"})
	apply(again)
	platformtest.WaitUntil(t, "the earlier t2's stored manifest deleted", func() bool {
		_, ok, err := sp.st.Registry().Get(waitCtx(t), manifestsNamespace, "t2")
		if err != nil {
			t.Fatal(err)
		}
		return !ok
	})
	waitGuildDescriptions(t, sp.holder.fake, guildOther, "", nil)
	sp.other.p.ObserveHello("t2", again, "gw-c", helloWith(manifestOf("New", []string{"ask"}, nil)))
	waitGuildDescriptions(t, sp.holder.fake, guildOther, "New", []string{"ask"})
}

// TestRemadeTenantLosesTheEarlierManifestOneInstance is
// TestRemadeTenantLosesTheEarlierManifest with one instance, whose
// manifests are kept in memory; the first hello comes before the first
// registry apply. Also when t2 is made again by an instance whose clock
// runs 5 s behind the one that made it first, within those 5 s (skewed:
// the new creation time is the earlier one). Creations were ordered by
// time, so then the earlier t2's manifest was still t2's, and its guild
// kept the earlier t2's commands.
func TestRemadeTenantLosesTheEarlierManifestOneInstance(t *testing.T) {
	t.Parallel()
	for _, skewed := range []bool{false, true} {
		t.Run(fmt.Sprintf("skewed %v", skewed), func(t *testing.T) {
			t.Parallel()
			remadeTenantLosesTheEarlierManifestOneInstance(t, skewed)
		})
	}
}

// remadeTenantLosesTheEarlierManifestOneInstance is
// TestRemadeTenantLosesTheEarlierManifestOneInstance, t2 made again by a
// clock 5 s behind (skewed).
func remadeTenantLosesTheEarlierManifestOneInstance(t *testing.T, skewed bool) {
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	again := first.Add(24 * time.Hour)
	if skewed {
		again = first.Add(2*time.Second - 5*time.Second)
	}
	e.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("Old", []string{"ask"}, nil)))
	waitGuildDescriptions(t, e.fake, guildOther, "Old", []string{"ask"})
	e.p.SetTenants(map[string]time.Time{"t1": {}, "t2": first})
	manifests, err := e.p.cmds.load(waitCtx(t), []scopeSync{{scope: guildOther}})
	if err != nil || len(manifests["t2"]) != 1 {
		t.Fatalf("t2's manifest after the first apply = %v (%v), want its one command kept", manifests["t2"], err)
	}
	e.p.SetTenants(map[string]time.Time{"t1": {}, "t2": again})
	waitGuildDescriptions(t, e.fake, guildOther, "", nil)
	e.p.ObserveHello("t2", again, "gw-c", helloWith(manifestOf("New", []string{"ask"}, nil)))
	waitGuildDescriptions(t, e.fake, guildOther, "New", []string{"ask"})
}

// TestStaleCreationDoesNotReplaceTheManifest: t2 was deleted and made
// again; instance other has not applied it yet, and the earlier t2's
// gateway, still connected there, says hello. Its manifest, of the
// earlier creation, must not replace the new t2's stored one: holder would
// ignore and delete it, and the new t2 would have no manifest until its
// gateway's next hello.
func TestStaleCreationDoesNotReplaceTheManifest(t *testing.T) {
	t.Parallel()
	sp := newSharedPair(t)
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	sp.other.p.SetTenants(map[string]time.Time{"t1": {}, "t2": first})
	sp.holder.p.SetTenants(map[string]time.Time{"t1": {}, "t2": again})
	sp.holder.p.ObserveHello("t2", again, "gw-c", helloWith(manifestOf("New", []string{"ask"}, nil)))
	waitGuildDescriptions(t, sp.holder.fake, guildOther, "New", []string{"ask"})
	stored := func() manifest {
		e, ok, err := sp.st.Registry().Get(waitCtx(t), manifestsNamespace, "t2")
		if err != nil || !ok {
			t.Fatalf("t2's stored manifest: found %v, %v", ok, err)
		}
		var m manifest
		if err := json.Unmarshal(e.Value, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	sp.other.p.ObserveHello("t2", first, "gw-b", helloWith(manifestOf("Old", []string{"ask"}, nil)))
	platformtest.WaitUntil(t, "other's save of the earlier t2's manifest refused, or done", func() bool {
		return strings.Contains(sp.other.logs.Text(), "earlier creation") || !stored().Created.Equal(again)
	})
	if m := stored(); !m.Created.Equal(again) || m.Commands[0]["description"] != "New ask" {
		t.Fatalf("t2's stored manifest = %+v, want the new t2's (created %v)", m, again)
	}
}

// TestDeletionSeenKeepsTheRemadeTenantsManifest: an instance that applied
// t2's deletion but not yet its creation again (its next apply failed, or
// has not come yet) must not delete the manifest another instance stored
// for the new t2: it is of a later creation than the t2 it saw leave.
func TestDeletionSeenKeepsTheRemadeTenantsManifest(t *testing.T) {
	t.Parallel()
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, discordtest.Options{}, nil)
	c := newCommandSync(e.p) // no loop: each look is the test's
	c.shared, c.ps = st.Registry(), st.PubSub()
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	c.setTenants(map[string]time.Time{"t1": {}, "t2": first})
	c.look(waitCtx(t))
	c.setTenants(declared("t1")) // t2 deleted
	c.look(waitCtx(t))
	value, _ := json.Marshal(manifest{Created: again, Commands: []map[string]any{{"name": "ask", "description": "New ask"}}})
	if _, err := st.Registry().Put(waitCtx(t), manifestsNamespace, "t2", value); err != nil { // the new t2's hello, on another instance
		t.Fatal(err)
	}
	c.look(waitCtx(t))
	if _, ok, err := st.Registry().Get(waitCtx(t), manifestsNamespace, "t2"); err != nil || !ok {
		t.Fatalf("the new t2's stored manifest: found %v, %v; want it kept by an instance that saw only the earlier t2 leave", ok, err)
	}
}

// racingRegistry is a Registry whose next Get runs meanwhile once it read.
type racingRegistry struct {
	store.Registry
	meanwhile func()
}

func (r *racingRegistry) Get(ctx context.Context, namespace, key string) (store.Entry, bool, error) {
	e, ok, err := r.Registry.Get(ctx, namespace, key)
	if f := r.meanwhile; f != nil {
		r.meanwhile = nil
		f()
	}
	return e, ok, err
}

// TestStaleCreationRacingTheManifest: an instance that has not applied
// t2's creation again stores the earlier t2's manifest while another
// instance stores the new t2's, between its read and its write. The new
// t2's manifest must stay: the earlier one would be deleted by every
// instance that knows the new t2, leaving it none until its next hello.
func TestStaleCreationRacingTheManifest(t *testing.T) {
	t.Parallel()
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, discordtest.Options{}, nil)
	c := newCommandSync(e.p) // no loop: each save is the test's
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	newer, _ := json.Marshal(manifest{Created: again, Commands: []map[string]any{{"name": "ask", "description": "New ask"}}})
	c.shared = &racingRegistry{Registry: st.Registry(), meanwhile: func() {
		if _, err := st.Registry().Put(waitCtx(t), manifestsNamespace, "t2", newer); err != nil { // the new t2's hello, on another instance
			t.Error(err)
		}
	}}
	c.ps = st.PubSub()
	c.setTenants(map[string]time.Time{"t1": {}, "t2": first})
	c.unsaved["t2"] = manifest{Created: first, Commands: []map[string]any{{"name": "ask", "description": "Old ask"}}}
	c.save(waitCtx(t)) // read before the new t2's was stored, written after
	c.save(waitCtx(t)) // tried again, if it was kept
	got, ok, err := st.Registry().Get(waitCtx(t), manifestsNamespace, "t2")
	if err != nil || !ok || !bytes.Equal(got.Value, newer) {
		t.Fatalf("t2's stored manifest = %s (found %v, %v), want the new t2's %s", got.Value, ok, err, newer)
	}
}

// TestHelloDuringAReconcileIsReconciledOnceStored: a reconcile that took
// t2's guild after its hello and before the save stored the manifest
// found nothing stored and left the guild alone; the save queues the
// guild again, so the next reconcile registers the manifest (it was never
// registered, with the hello's scopes taken already).
func TestHelloDuringAReconcileIsReconciledOnceStored(t *testing.T) {
	t.Parallel()
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, discordtest.Options{}, nil)
	c := newCommandSync(e.p) // no loop: each step is the test's
	c.shared, c.ps = st.Registry(), st.PubSub()
	e.p.gwHere.Store(true)
	c.guildDelivered(guildOther)
	c.take() // the delivery's reconcile
	entries, _, err := parseManifest(json.RawMessage(manifestOf("B", []string{"ask"}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c.set("t2", time.Time{}, entries)
	scopes := c.take() // a reconcile running when the hello came
	if manifests, err := c.load(waitCtx(t), scopes); err != nil || manifests["t2"] != nil {
		t.Fatalf("before the save: manifests %v, %v; want none stored", manifests, err)
	}
	c.save(waitCtx(t))
	scopes = c.take()
	if !slices.Contains(scopes, scopeSync{scope: guildOther}) {
		t.Fatalf("after the save the reconcile takes %v, want guild %s (t2's) again", scopes, guildOther)
	}
	if manifests, err := c.load(waitCtx(t), scopes); err != nil || len(manifests["t2"]) != 1 {
		t.Fatalf("after the save: manifests %v, %v; want t2's stored one", manifests, err)
	}
}

// TestHelloBeforeThePlatformsApplyOfTheRemadeTenant: t2 was deleted and
// made again; the relay applied it first (it serves the new t2's gateway)
// and that gateway's hello comes before the platform's SetTenants. Its
// manifest is the new t2's: the platform's apply must not take it for
// the earlier t2's and delete it.
func TestHelloBeforeThePlatformsApplyOfTheRemadeTenant(t *testing.T) {
	t.Parallel()
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	// settled waits, with several instances, until the hello's manifest
	// is stored.
	check := func(t *testing.T, p *Platform, fake *discordtest.Server, apply func(time.Time), settled func()) {
		apply(first)
		p.ObserveHello("t2", first, "gw-b", helloWith(manifestOf("Old", []string{"ask"}, nil)))
		waitGuildDescriptions(t, fake, guildOther, "Old", []string{"ask"})
		p.ObserveHello("t2", again, "gw-c", helloWith(manifestOf("New", []string{"ask"}, nil)))
		settled()
		apply(again)
		waitGuildDescriptions(t, fake, guildOther, "New", []string{"ask"})
		manifests, err := p.cmds.load(waitCtx(t), []scopeSync{{scope: guildOther}})
		if err != nil || len(manifests["t2"]) != 1 || manifests["t2"][0]["description"] != "New ask" {
			t.Fatalf("t2's manifest after the platform's apply = %v (%v), want the new t2's", manifests["t2"], err)
		}
	}
	t.Run("one instance", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, discordtest.Options{}, nil)
		e.startReady(t)
		check(t, e.p, e.fake, func(created time.Time) { e.p.SetTenants(map[string]time.Time{"t1": {}, "t2": created}) }, func() {})
	})
	t.Run("two instances", func(t *testing.T) {
		t.Parallel()
		sp := newSharedPair(t)
		check(t, sp.holder.p, sp.holder.fake, func(created time.Time) {
			tenants := map[string]time.Time{"t1": {}, "t2": created}
			sp.holder.p.SetTenants(tenants)
			sp.other.p.SetTenants(tenants)
		}, func() {
			platformtest.WaitUntil(t, "the new t2's manifest stored", func() bool {
				e, ok, err := sp.st.Registry().Get(waitCtx(t), manifestsNamespace, "t2")
				return err == nil && ok && strings.Contains(string(e.Value), "New ask")
			})
		})
	})
}

// TestRemadeTenantGetsNoEarlierChannelContext: guild chatter the earlier
// t2 held back as channel context must not reach t2 made again under its
// id, while chatter held for the new t2 still does, also before the
// platform's SetTenants (the registry's apply gives the vault the new
// creation first). The chatter was keyed under the platform's own copy
// of the creation, which that apply updates after the relay's.
func TestRemadeTenantGetsNoEarlierChannelContext(t *testing.T) {
	t.Parallel()
	var t2 atomic.Pointer[time.Time] // t2's creation, as the vault gives it
	since := func(tenant string) time.Time {
		if c := t2.Load(); c != nil && tenant == "t2" {
			return *c
		}
		return time.Time{}
	}
	e := newEnvDeps(t, platform.Deps{Vault: vault.NewMemory(vault.Config{Since: since})}, discordtest.Options{}, nil)
	e.startReady(t)
	first, again := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	t2.Store(&first)
	e.p.SetTenants(map[string]time.Time{"t1": {}, "t2": first})
	chatter := func(id, text string) {
		e.dispatch(t, "MESSAGE_CREATE", msg(id, chanOther, guildOther, text, false))
		// Logged once kept.
		platformtest.WaitUntil(t, "message "+id+" held back as channel context", func() bool {
			return strings.Contains(e.logs.Text(), "message_id="+id+" reason=not_mentioned")
		})
	}
	chatter("7600", "the earlier t2's chatter")
	t2.Store(&again) // the registry's apply, before the platform's SetTenants
	chatter("7601", "the new t2's chatter")
	e.dispatch(t, "MESSAGE_CREATE", msg("7602", chanOther, guildOther, "hello", true))
	d := e.sink.Next(t)
	if d.Event == nil || len(d.Event.Context) != 1 || d.Event.Context[0].Text != "the new t2's chatter" {
		t.Fatalf("the new t2's inbound carries context %+v, want its own chatter only", d.Event)
	}
}

// TestRemadeByASlowerClockGetsItsManifest: t2 is deleted and made again in
// one registry apply by an instance whose clock runs behind the one that
// made it first (the new creation time is the earlier). The earlier t2's
// stored manifest is deleted by a look, and the new t2's hello replaces
// it, as when the clocks agree: this instance saw the earlier creation
// end. Before, creations were ordered by their times only: the new t2's
// manifest was refused as of an earlier creation and the earlier one's
// kept, so t2 had no commands until the entry was deleted by hand.
func TestRemadeByASlowerClockGetsItsManifest(t *testing.T) {
	t.Parallel()
	for _, lookFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("look first %v", lookFirst), func(t *testing.T) {
			t.Parallel()
			st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendMemory})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			e := newEnvDeps(t, platform.Deps{Store: st}, discordtest.Options{}, nil)
			c := newCommandSync(e.p) // no loop: each look and save is the test's
			c.shared, c.ps = st.Registry(), st.PubSub()
			first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			again := first.Add(-3 * time.Second)
			c.setTenants(map[string]time.Time{"t1": {}, "t2": first})
			c.unsaved["t2"] = manifest{Created: first, Commands: []map[string]any{{"name": "ask", "description": "Old ask"}}}
			c.save(waitCtx(t))
			c.setTenants(map[string]time.Time{"t1": {}, "t2": again})
			if lookFirst {
				c.look(waitCtx(t))
				if _, ok, err := st.Registry().Get(waitCtx(t), manifestsNamespace, "t2"); err != nil || ok {
					t.Fatalf("the earlier t2's stored manifest: found %v, %v; want it deleted", ok, err)
				}
			}
			newer := manifest{Created: again, Commands: []map[string]any{{"name": "ask", "description": "New ask"}}}
			c.unsaved["t2"] = newer
			c.save(waitCtx(t))
			want, _ := json.Marshal(newer)
			if got, ok, err := st.Registry().Get(waitCtx(t), manifestsNamespace, "t2"); err != nil || !ok || !bytes.Equal(got.Value, want) {
				t.Fatalf("t2's stored manifest = %s (found %v, %v), want the new t2's %s", got.Value, ok, err, want)
			}
		})
	}
}

// TestOneInstanceKeepsNoEndedCreations: with one instance the manifests
// live in memory and go with their tenant's creation, so the creations it
// saw end are not kept (before, one entry per tenant deleted or made again
// stayed for the life of the process).
func TestOneInstanceKeepsNoEndedCreations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.p.SetTenants(map[string]time.Time{"t1": {}, "t2": first, "t3": first})
	e.p.SetTenants(map[string]time.Time{"t1": {}, "t2": first.Add(time.Hour)}) // t2 made again, t3 deleted
	for _, tenant := range []string{"t2", "t3"} {
		if ended, ok := e.p.cmds.forget.Get(tenant); ok {
			t.Fatalf("one instance keeps %s's ended creation %v", tenant, ended)
		}
	}
}

// TestEndedCreationsAreBounded: with several instances, the creations an
// instance saw end are kept for forgetFor, to delete a late stored
// manifest of one (here, while kept, the look deletes the ended t2's), and
// no longer: a deployment that deletes tenants for months does not grow
// the instance. Before, one entry per tenant deleted or made again stayed
// for the life of the process.
func TestEndedCreationsAreBounded(t *testing.T) {
	t.Parallel()
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnvDeps(t, platform.Deps{Clock: clk, Store: st}, discordtest.Options{}, nil)
	c := newCommandSync(e.p) // no loop: each look is the test's
	c.shared, c.ps = st.Registry(), st.PubSub()
	first := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	ended := func(tenant string) bool {
		_, ok := c.forget.Get(tenant)
		return ok
	}
	c.setTenants(map[string]time.Time{"t1": {}, "t2": first})
	c.setTenants(map[string]time.Time{"t1": {}}) // t2 deleted
	late, _ := json.Marshal(manifest{Created: first, Commands: []map[string]any{{"name": "ask", "description": "Late ask"}}})
	if _, err := st.Registry().CompareAndSwap(waitCtx(t), manifestsNamespace, "t2", nil, late); err != nil {
		t.Fatal(err) // stored by an instance whose apply lags
	}
	c.look(waitCtx(t))
	if _, ok, err := st.Registry().Get(waitCtx(t), manifestsNamespace, "t2"); err != nil || ok {
		t.Fatalf("the ended t2's late manifest: found %v, %v; want it deleted", ok, err)
	}
	clk.Advance(forgetFor - time.Second)
	if !ended("t2") {
		t.Fatal("t2's ended creation forgotten before forgetFor")
	}
	clk.Advance(time.Second)
	if ended("t2") {
		t.Fatal("t2's ended creation kept past forgetFor")
	}
	tenants := map[string]time.Time{}
	for i := range maxForget + 1 {
		tenants[fmt.Sprint("d", i)] = first
	}
	c.setTenants(tenants)
	c.setTenants(map[string]time.Time{}) // all deleted at once
	kept := 0
	for tenant := range tenants {
		if ended(tenant) {
			kept++
		}
	}
	if kept != maxForget {
		t.Fatalf("%d ended creations kept, want the cap %d", kept, maxForget)
	}
}

// failingSwaps is a registry whose next fail swaps fail.
type failingSwaps struct {
	store.Registry
	fail *atomic.Int32
}

func (f failingSwaps) CompareAndSwap(ctx context.Context, namespace, key string, old, value []byte) (bool, error) {
	if f.fail.Add(-1) >= 0 {
		return false, errors.New("store down")
	}
	return f.Registry.CompareAndSwap(ctx, namespace, key, old, value)
}

// TestForgottenManifestDeletedAfterAFailedDelete: the look that finds a
// deleted tenant's stored manifest cannot delete it (the store fails the
// write); the next look deletes it, though the namespace did not change.
// Before, a look of an unchanged namespace read nothing, so the manifest
// stayed until some other manifest was stored, maybe after the ended
// creation was no longer kept (forgetFor).
func TestForgottenManifestDeletedAfterAFailedDelete(t *testing.T) {
	t.Parallel()
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, discordtest.Options{}, nil)
	fail := &atomic.Int32{}
	c := newCommandSync(e.p) // no loop: each look is the test's
	c.shared, c.ps = failingSwaps{st.Registry(), fail}, st.PubSub()
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.setTenants(map[string]time.Time{"t1": {}, "t2": first})
	stored, _ := json.Marshal(manifest{Created: first, Commands: []map[string]any{{"name": "ask", "description": "Old ask"}}})
	if _, err := st.Registry().CompareAndSwap(waitCtx(t), manifestsNamespace, "t2", nil, stored); err != nil {
		t.Fatal(err)
	}
	c.look(waitCtx(t))
	c.setTenants(map[string]time.Time{"t1": {}}) // t2 deleted
	fail.Store(1)
	c.look(waitCtx(t))
	if _, ok, err := st.Registry().Get(waitCtx(t), manifestsNamespace, "t2"); err != nil || !ok {
		t.Fatalf("t2's manifest: found %v, %v; want it kept by the failed delete", ok, err)
	}
	c.look(waitCtx(t))
	if _, ok, err := st.Registry().Get(waitCtx(t), manifestsNamespace, "t2"); err != nil || ok {
		t.Fatalf("t2's manifest: found %v, %v; want it deleted by the next look", ok, err)
	}
}

// TestManifestOfATenantGoneBeforeStartDeletedAfterAFailedDelete: an
// instance starts without t2, deleted while it was not running; its first
// look finds t2's stored manifest but cannot delete it (the store fails
// the write); the next look (commandPoll) deletes it. Before, the first
// look ended forgetAll whatever the delete did, and the manifest stayed
// until the instance started again.
func TestManifestOfATenantGoneBeforeStartDeletedAfterAFailedDelete(t *testing.T) {
	t.Parallel()
	st, err := store.Open(waitCtx(t), store.Config{Backend: store.BackendMemory})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, discordtest.Options{}, nil)
	fail := &atomic.Int32{}
	c := newCommandSync(e.p) // no loop: each look is the test's
	c.shared, c.ps = failingSwaps{st.Registry(), fail}, st.PubSub()
	stored, _ := json.Marshal(manifest{Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Commands: []map[string]any{{"name": "ask", "description": "Old ask"}}})
	if _, err := st.Registry().CompareAndSwap(waitCtx(t), manifestsNamespace, "t2", nil, stored); err != nil {
		t.Fatal(err)
	}
	c.setTenants(map[string]time.Time{"t1": {}})
	fail.Store(1)
	c.look(waitCtx(t))
	if _, ok, err := st.Registry().Get(waitCtx(t), manifestsNamespace, "t2"); err != nil || !ok {
		t.Fatalf("t2's manifest: found %v, %v; want it kept by the failed delete", ok, err)
	}
	c.look(waitCtx(t))
	if _, ok, err := st.Registry().Get(waitCtx(t), manifestsNamespace, "t2"); err != nil || ok {
		t.Fatalf("t2's manifest: found %v, %v; want it deleted by the next look", ok, err)
	}
}
