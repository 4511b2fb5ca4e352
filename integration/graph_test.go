package integration

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPlatformsDoNotImportRelay holds the package graph rule of
// docs/architecture.md for tests too: no package under platform/, and no
// test binary of one, depends on relay or a package below it (directly or
// through a test-support package). Tests that need the relay live here.
func TestPlatformsDoNotImportRelay(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to read the package graph: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-test",
		"-f", "{{.ImportPath}}\t{{join .Deps \" \"}}", "connector/platform/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		pkg, deps, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		if !ok {
			continue
		}
		checked[pkg] = true
		for dep := range strings.FieldsSeq(deps) {
			if dep == "connector/relay" || strings.HasPrefix(dep, "connector/relay/") {
				t.Errorf("%s depends on %s: a test that needs the relay belongs in integration/", pkg, dep)
			}
		}
	}
	// The listing must hold the test binaries, or the check proves nothing.
	for _, want := range []string{"connector/platform/discord.test", "connector/platform/telegram.test", "connector/platform/nexscope.test"} {
		if !checked[want] {
			t.Errorf("go list did not report %s; reported %d packages", want, len(checked))
		}
	}
}

// TestContractLinksNoWebSocketLibrary: the wire contract (frames, close
// values) is plain data; it depends on no WebSocket library, so a client or
// a tool can take it without one.
func TestContractLinksNoWebSocketLibrary(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to read the package graph: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "connector/contract").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if !strings.Contains(string(out), "connector/internal/textsplit") {
		t.Fatalf("go list -deps connector/contract did not list its known dependency; got %q", out)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.Contains(dep, "websocket") || dep == "connector/internal/wsconn" {
			t.Errorf("connector/contract depends on %s", dep)
		}
	}
}
