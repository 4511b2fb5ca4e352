package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readDeploy returns deploy/name.
func readDeploy(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDockerfileProbesAndExposesWhatTheConnectorServes: the image's
// HEALTHCHECK runs a subcommand the binary has (the distroless base has no
// shell or curl), finding the config serve reads, and EXPOSE names the
// public listener only: the operations listener is on loopback unless the
// config opens it.
func TestDockerfileProbesAndExposesWhatTheConnectorServes(t *testing.T) {
	df := readDeploy(t, "Dockerfile")
	health := regexp.MustCompile(`(?m)^HEALTHCHECK .*\\\n\s+CMD \["/usr/local/bin/connector", "(\w+)"\]`).FindStringSubmatch(df)
	if health == nil || !slices.ContainsFunc(commands, func(c command) bool { return c.name == health[1] }) {
		t.Fatalf("HEALTHCHECK %v does not run a connector subcommand", health)
	}
	if !strings.Contains(df, "\nENV CONNECTOR_CONFIG=/etc/connector/connector.yaml\n") ||
		!strings.Contains(df, `CMD ["serve", "-config", "/etc/connector/connector.yaml"]`) {
		t.Error("serve and health do not read the same config file")
	}
	expose := regexp.MustCompile(`(?m)^EXPOSE (.*)$`).FindAllStringSubmatch(df, -1)
	if len(expose) != 1 || expose[0][1] != "8080" {
		t.Errorf("EXPOSE %v, want 8080 alone", expose)
	}
	if !strings.Contains(df, "USER 65532:65532") || !strings.Contains(df, "chown 65532:65532") {
		t.Error("the Dockerfile does not say which owner a bind-mounted data directory needs")
	}
}

// TestSystemdUnitReloadsTheFileItServes: systemctl reload (SIGHUP) re-reads
// the config file, so the unit must serve the file in place, not a
// credential copy made at start; systemd-analyze verify accepts the unit
// where it is installed.
func TestSystemdUnitReloadsTheFileItServes(t *testing.T) {
	unit := readDeploy(t, "connector.service")
	if strings.Contains(unit, "\nLoadCredential=") || strings.Contains(unit, "CREDENTIALS_DIRECTORY") {
		t.Error("the config is a credential: a reload would re-read the copy made at start")
	}
	if !strings.Contains(unit, "\nExecStart=/usr/local/bin/connector serve -config /etc/connector/connector.yaml\n") ||
		!strings.Contains(unit, "\nExecReload=/bin/kill -HUP $MAINPID\n") {
		t.Error("ExecStart does not serve /etc/connector/connector.yaml, or ExecReload does not send SIGHUP")
	}
	if !strings.Contains(unit, "\nUser=connector\n") || !strings.Contains(unit, "install -m 0640 -g connector connector.yaml") {
		t.Error("the service's user cannot read the config it reloads")
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: the unit was not verified")
		return
	}
	dir := t.TempDir()
	bin := connectorBinary(t)
	local := strings.ReplaceAll(unit, "/usr/local/bin/connector", bin)
	if err := os.WriteFile(filepath.Join(dir, "connector.service"), []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", filepath.Join(dir, "connector.service")).CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
