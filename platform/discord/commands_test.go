package discord

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"connector/contract"
	"connector/platform/discord/discordtest"
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

func countRequests(f *discordtest.Server, method string) int {
	n := 0
	for _, r := range f.Requests() {
		if r.Method == method && strings.HasSuffix(r.Path, "/applications/9000/commands") {
			n++
		}
	}
	return n
}

func TestCommandManifestReconcile(t *testing.T) {
	e := newEnv(t, discordtest.Options{}, nil)
	e.startReady(t)
	e.p.ObserveHello("t1", "gw1", helloWith(manifestV1))
	e.logs.waitFor(t, "discord global commands updated")
	cmds := e.fake.Commands()
	if len(cmds) != 2 || cmds[0]["name"] != "model" || cmds[1]["name"] != "new" {
		t.Fatalf("registry = %v", cmds)
	}
	e.logs.waitFor(t, "entries dropped")
	// The same manifest again (Discord echoes ids, versions, type, and drops
	// required:false): GET, no PUT.
	e.p.ObserveHello("t2", "gw2", helloWith(manifestV1))
	e.logs.waitFor(t, "discord global commands already in sync")
	if puts := countRequests(e.fake, "PUT"); puts != 1 {
		t.Fatalf("%d PUTs, want 1", puts)
	}
	// Hellos of other platforms, without a manifest, or with a non-array
	// manifest change nothing and never block.
	e.p.ObserveHello("t1", "gw1", &contract.GatewayFrame{Type: "hello", Platform: "telegram", CommandManifest: json.RawMessage(manifestV1)})
	e.p.ObserveHello("t1", "gw1", helloWith(`{"name":"x"}`))
	e.logs.waitFor(t, "command_manifest ignored")
}

func TestCommandManifestFailureIsBestEffort(t *testing.T) {
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
	e.p.ObserveHello("t1", "gw1", helloWith(manifestV1))
	e.logs.waitFor(t, "discord command registry sync failed")
	if st := e.p.Status(); !st.Ready {
		t.Fatalf("a failed sync changed readiness: %+v", st)
	}
}

func TestSameCommandsIgnoresServerFields(t *testing.T) {
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
