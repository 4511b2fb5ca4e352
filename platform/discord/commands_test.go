package discord

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/platform/platformtest"
)

func helloWith(manifest string) *contract.GatewayFrame {
	return &contract.GatewayFrame{Type: "hello", Platform: "discord", BotID: "9000", CommandManifest: json.RawMessage(manifest)}
}

const manifestV1 = `[{"name":"new","description":"Start a new conversation"},
 {"name":"model","description":"Show or change the model","options":[{"type":3,"name":"name","description":"Model name","required":false}]},
 {"name":"UPPER","description":"invalid name"},
 {"name":"new","description":"duplicate"},
 {"name":"empty","description":""},
 "not an object"]`

// waitRegistry waits until the fake's registry of scope (a guild id, or
// globalScope) holds n commands.
func waitRegistry(t *testing.T, e *env, scope string, n int) {
	t.Helper()
	platformtest.WaitUntil(t, fmt.Sprintf("%d commands in the registry of scope %q", n, scope), func() bool {
		if scope == globalScope {
			return len(e.fake.Commands()) == n
		}
		return len(e.fake.GuildCommands(scope)) == n
	})
}

func countRequests(f *discordtest.Server, method, path string) int {
	n := 0
	for _, r := range f.Requests() {
		if r.Method == method && r.Path == path {
			n++
		}
	}
	return n
}

const (
	globalCommandsPath = "/api/v9/applications/9000/commands"
	guildCommandsPath  = "/api/v9/applications/9000/guilds/%s/commands"
)

// manifestOf builds a command_manifest of the named commands, each
// described by prefix and name; extra is merged into every entry.
func manifestOf(prefix string, names []string, extra map[string]any) string {
	entries := make([]map[string]any, 0, len(names))
	for _, n := range names {
		e := map[string]any{"name": n, "description": prefix + " " + n}
		maps.Copy(e, extra)
		entries = append(entries, e)
	}
	b, _ := json.Marshal(entries)
	return string(b)
}

func byName(cmds []map[string]any) map[string]map[string]any {
	m := make(map[string]map[string]any, len(cmds))
	for _, c := range cmds {
		m[c["name"].(string)] = c
	}
	return m
}

// TestCommandsRegisteredPerTenantGuild: the case. t1's manifest
// fills the 100-command cap and defines "ask"; t2's defines its own "ask"
// and "bstatus". Each tenant's commands land on its own guild, whole and in
// its definitions; only the DM tenant's (t1) are global, and only for DMs.
func TestCommandsRegisteredPerTenantGuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	aNames := []string{"ask"}
	for i := range maxCommands - 1 {
		aNames = append(aNames, fmt.Sprintf("a%02d", i))
	}
	e.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("B", []string{"ask", "bstatus"}, map[string]any{"dm_permission": true, "contexts": []int{0, 1, 2}})))
	e.p.ObserveHello("t1", time.Time{}, "gw-a", helloWith(manifestOf("A", aNames, nil)))
	waitRegistry(t, e, guildLab, maxCommands)
	waitRegistry(t, e, guildOther, 2)
	waitRegistry(t, e, globalScope, maxCommands)

	lab, other, global := byName(e.fake.GuildCommands(guildLab)), byName(e.fake.GuildCommands(guildOther)), byName(e.fake.Commands())
	if len(lab) != maxCommands || lab["ask"]["description"] != "A ask" || lab["bstatus"] != nil {
		t.Fatalf("t1's guild holds %d commands, ask %v, bstatus %v", len(lab), lab["ask"], lab["bstatus"])
	}
	if len(other) != 2 || other["ask"]["description"] != "B ask" || other["bstatus"] == nil {
		t.Fatalf("t2's guild = %v", other)
	}
	put, err := e.fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		return r.Method == "PUT" && r.Path == fmt.Sprintf(guildCommandsPath, guildOther)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range globalOnlyKeys {
		if strings.Contains(string(put.Body), `"`+k+`"`) {
			t.Fatalf("guild commands sent with the global-only %s: %s", k, put.Body)
		}
	}
	if len(global) != maxCommands || global["ask"]["description"] != "A ask" || global["bstatus"] != nil {
		t.Fatalf("global holds %d commands, ask %v, bstatus %v", len(global), global["ask"], global["bstatus"])
	}
	if ctx, _ := json.Marshal(global["ask"]["contexts"]); string(ctx) != "[1]" {
		t.Fatalf("global command contexts = %s, want [1] (DMs with the bot only)", ctx)
	}
	// The same manifests again (Discord echoes ids, versions, type and its
	// defaults): GETs, no PUT. A changed one after it is the next
	// reconcile, so its PUT is the only one.
	puts := func() int {
		return countRequests(e.fake, "PUT", globalCommandsPath) + countRequests(e.fake, "PUT", fmt.Sprintf(guildCommandsPath, guildLab)) +
			countRequests(e.fake, "PUT", fmt.Sprintf(guildCommandsPath, guildOther))
	}
	before, gets := puts(), countRequests(e.fake, "GET", fmt.Sprintf(guildCommandsPath, guildOther))
	e.p.ObserveHello("t2", time.Time{}, "gw-b2", helloWith(manifestOf("B", []string{"ask", "bstatus"}, map[string]any{"dm_permission": true, "contexts": []int{0, 1, 2}})))
	seen := 0 // WaitRequest offers each request once, in order
	if _, err := e.fake.WaitRequest(waitCtx(t), func(r discordtest.Request) bool {
		if r.Method == "GET" && r.Path == fmt.Sprintf(guildCommandsPath, guildOther) {
			seen++
		}
		return seen > gets
	}); err != nil {
		t.Fatalf("timed out after 10s waiting for the second reconcile of t2's guild: %v", err)
	}
	e.p.ObserveHello("t2", time.Time{}, "gw-b3", helloWith(manifestOf("B", []string{"ask", "bstatus", "bnew"}, nil)))
	waitRegistry(t, e, guildOther, 3)
	if after := puts(); after != before+1 {
		t.Fatalf("%d PUTs for an unchanged manifest then a changed one, want 1", after-before)
	}
}

// TestCommandsWaitForTheGuild: a claimed guild the Gateway has not
// delivered (the bot is not in it) is left alone, so it draws no 403; its
// GUILD_CREATE registers its tenant's commands.
func TestCommandsWaitForTheGuild(t *testing.T) {
	t.Parallel()
	const guildLate = "300"
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.Guilds[guildLate] = "t2" })
	e.startReady(t)
	e.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("B", []string{"bstatus"}, nil)))
	waitRegistry(t, e, guildOther, 1)
	if n := countRequests(e.fake, "GET", fmt.Sprintf(guildCommandsPath, guildLate)); n != 0 {
		t.Fatalf("%d calls for a guild the bot is not in", n)
	}
	e.fake.AddGuild(discordtest.Guild{ID: guildLate, Name: "Late"})
	e.dispatch(t, "GUILD_CREATE", map[string]any{"id": guildLate, "name": "Late", "channels": []any{}, "threads": []any{}})
	waitRegistry(t, e, guildLate, 1)
	if cmds := e.fake.GuildCommands(guildLate); len(cmds) != 1 || cmds[0]["name"] != "bstatus" {
		t.Fatalf("guild 300 = %v", cmds)
	}
}

// TestGlobalCommandsEmptyWithoutDMTenant: with no DM tenant no manifest is
// global; the union an earlier version registered is removed.
func TestGlobalCommandsEmptyWithoutDMTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.DMTenant = "" })
	req, _ := http.NewRequest("PUT", e.fake.URL+globalCommandsPath, strings.NewReader(manifestOf("old", []string{"ask", "bstatus"}, nil)))
	req.Header.Set("Authorization", "Bot "+testToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(e.fake.Commands()) != 2 {
		t.Fatal("could not seed the global registry")
	}
	e.startReady(t)
	e.p.ObserveHello("t1", time.Time{}, "gw-a", helloWith(manifestOf("A", []string{"ask"}, nil)))
	waitRegistry(t, e, guildLab, 1)
	waitRegistry(t, e, globalScope, 0)
}

func TestCommandManifestValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.p.ObserveHello("t1", time.Time{}, "gw1", helloWith(manifestV1))
	waitRegistry(t, e, guildLab, 2)
	cmds := byName(e.fake.GuildCommands(guildLab))
	if len(cmds) != 2 || cmds["model"] == nil || cmds["new"]["description"] != "Start a new conversation" {
		t.Fatalf("guild registry = %v", cmds)
	}
	// The operator's only word of a bad manifest is the log (ObserveHello
	// logs before it returns).
	if !strings.Contains(e.logs.Text(), "entries dropped") {
		t.Error("the dropped entries were not logged")
	}
	// Hellos of other platforms, without a manifest, or with a non-array
	// manifest change nothing and never block.
	e.p.ObserveHello("t1", time.Time{}, "gw1", &contract.GatewayFrame{Type: "hello", Platform: "telegram", CommandManifest: json.RawMessage(manifestV1)})
	e.p.ObserveHello("t1", time.Time{}, "gw1", helloWith(`{"name":"x"}`))
	if !strings.Contains(e.logs.Text(), "command_manifest ignored") {
		t.Error("the manifest that is not an array was not logged")
	}
}

func TestCommandManifestFailureIsBestEffort(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.fake.SetHook(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if !strings.HasSuffix(r.URL.Path, "/commands") {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"message":"boom","code":0}`))
		return true
	})
	e.p.ObserveHello("t1", time.Time{}, "gw1", helloWith(manifestV1))
	e.logs.WaitFor(t, "discord command registry sync failed")
	if st := e.p.Status(); !st.Ready {
		t.Fatalf("a failed sync changed readiness: %+v", st)
	}
}

func TestSameCommandsIgnoresServerFields(t *testing.T) {
	t.Parallel()
	want, _, _ := parseManifest(json.RawMessage(`[{"name":"a","description":"d","options":[{"type":3,"name":"x","description":"y","required":false}]}]`))
	var have []map[string]any
	_ = json.Unmarshal([]byte(`[{"id":"1","application_id":"9","version":"2","type":1,"name":"a","description":"d","dm_permission":true,
		"options":[{"type":3,"name":"x","description":"y"}]}]`), &have)
	if !sameCommands(want, have) {
		t.Fatal("equal commands compared different")
	}
	have[0]["description"] = "changed"
	if sameCommands(want, have) {
		t.Fatal("a changed description compared equal")
	}
}

// TestCommandsLeaveAGuildTheBotLeft: a guild the bot was removed from
// (GUILD_DELETE without unavailable) is no longer reconciled: its calls
// would draw 403s, each an invalid request against the bot's budget, for
// as long as the process runs.
func TestCommandsLeaveAGuildTheBotLeft(t *testing.T) {
	t.Parallel()
	const guildGone = "150" // reconciled before guild 200 (scopes go in order)
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.Guilds[guildGone] = "t2" })
	e.fake.AddGuild(discordtest.Guild{ID: guildGone, Name: "Gone"})
	e.startReady(t)
	e.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("A", []string{"ask"}, nil)))
	waitGuildDescriptions(t, e.fake, guildGone, "A", []string{"ask"})
	waitGuildDescriptions(t, e.fake, guildOther, "A", []string{"ask"})
	e.dispatch(t, "GUILD_DELETE", map[string]any{"id": guildGone})
	// A later event shows the reader has handled the GUILD_DELETE.
	e.dispatch(t, "CHANNEL_CREATE", map[string]any{"id": "1999", "type": 0, "guild_id": guildOther, "name": "marker"})
	platformtest.WaitUntil(t, "the channel created after the GUILD_DELETE cached", func() bool {
		_, ok := e.p.cache.cachedChannel("1999")
		return ok
	})
	gets := countRequests(e.fake, "GET", fmt.Sprintf(guildCommandsPath, guildGone))
	e.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("B", []string{"ask"}, nil)))
	waitGuildDescriptions(t, e.fake, guildOther, "B", []string{"ask"})
	if n := countRequests(e.fake, "GET", fmt.Sprintf(guildCommandsPath, guildGone)) - gets; n != 0 {
		t.Fatalf("%d calls for guild %s after the bot left it", n, guildGone)
	}
}

// TestCommandsForgetGuildsOfAnEarlierSession: a new Gateway session
// (IDENTIFY) delivers the guilds the bot is in now; one it was removed from
// meanwhile, whose GUILD_DELETE went to no session here (another instance
// held the Gateway, or the session was down), is no longer reconciled.
func TestCommandsForgetGuildsOfAnEarlierSession(t *testing.T) {
	t.Parallel()
	const guildGone = "150" // reconciled before guild 200 (scopes go in order)
	e := newEnv(t, discordtest.Options{}, func(c *Config) { c.Guilds[guildGone] = "t2" })
	e.fake.AddGuild(discordtest.Guild{ID: guildGone, Name: "Gone"})
	e.startReady(t)
	e.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("A", []string{"ask"}, nil)))
	waitGuildDescriptions(t, e.fake, guildGone, "A", []string{"ask"})
	waitGuildDescriptions(t, e.fake, guildOther, "A", []string{"ask"})
	e.fake.RemoveGuild(guildGone)
	e.fake.RefuseResumes(4009) // the next connection starts a new session
	if err := e.fake.CloseGateway(4000, "Unknown error"); err != nil {
		t.Fatal(err)
	}
	platformtest.WaitUntil(t, "a second session identified", func() bool { return e.fake.Identifies() == 2 })
	if err := e.fake.WaitSession(waitCtx(t), 2); err != nil { // and its connection up
		t.Fatal(err)
	}
	// A later event shows the reader has handled the new session's READY.
	e.dispatch(t, "CHANNEL_CREATE", map[string]any{"id": "1999", "type": 0, "guild_id": guildOther, "name": "marker"})
	platformtest.WaitUntil(t, "the channel created after the new session's READY cached", func() bool {
		_, ok := e.p.cache.cachedChannel("1999")
		return ok
	})
	gets := countRequests(e.fake, "GET", fmt.Sprintf(guildCommandsPath, guildGone))
	e.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("B", []string{"ask"}, nil)))
	waitGuildDescriptions(t, e.fake, guildOther, "B", []string{"ask"})
	if n := countRequests(e.fake, "GET", fmt.Sprintf(guildCommandsPath, guildGone)) - gets; n != 0 {
		t.Fatalf("%d calls for guild %s, which the new session did not deliver", n, guildGone)
	}
}

// TestCommandsInAGuildBoundLater: a guild the bot is in, bound to a
// tenant only after the Gateway delivered it (a provision's route key, an
// admin bind), gets the tenant's commands, without waiting for a new
// Gateway session to deliver it again.
func TestCommandsInAGuildBoundLater(t *testing.T) {
	t.Parallel()
	const guildLater = "300"
	e := newEnv(t, discordtest.Options{}, nil)
	e.fake.AddGuild(discordtest.Guild{ID: guildLater, Name: "Later"})
	e.startReady(t)
	e.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("A", []string{"ask"}, nil)))
	waitGuildDescriptions(t, e.fake, guildOther, "A", []string{"ask"})
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"},
		{Kind: platform.BindGuild, ID: guildOther, Tenant: "t2"},
		{Kind: platform.BindGuild, ID: guildLater, Tenant: "t2"},
	}); err != nil {
		t.Fatal(err)
	}
	waitGuildDescriptions(t, e.fake, guildLater, "A", []string{"ask"})
}

// TestCommandsLeaveAnUnboundGuild: a guild whose binding is removed loses
// its former tenant's commands, as a guild rebound to another tenant gets
// the new tenant's: no tenant's commands stay in a guild it no longer owns.
func TestCommandsLeaveAnUnboundGuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.p.ObserveHello("t2", time.Time{}, "gw-b", helloWith(manifestOf("B", []string{"ask", "bstatus"}, nil)))
	waitRegistry(t, e, guildOther, 2)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindGuild, ID: guildLab, Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	waitRegistry(t, e, guildOther, 0)
}
