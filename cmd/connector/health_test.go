package main

import (
	"net"
	"strings"
	"testing"

	"connector/internal/refusedtest"
)

// TestHealthProbesTheOpsListener: connector health exits 0 against a
// running connector, finding its operations listener from the config file
// (an address on every interface probed on loopback), from
// $CONNECTOR_OPS_LISTEN, or from -url; and 1 when nothing answers.
func TestHealthProbesTheOpsListener(t *testing.T) {
	cfg, gen, err := loadOrDefault(sources{dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = "127.0.0.1:0"
	addrs := startServe(t, cfg, gen)
	_, port, _ := net.SplitHostPort(addrs.OpsAddr)
	wildcard := writeConfig(t, "ops: {listen: 0.0.0.0:"+port+"}\n")
	if code, out, errOut := runCmd(t, "health", "-config", wildcard); code != 0 || out != "ok: http://127.0.0.1:"+port+"/healthz\n" {
		t.Fatalf("health -config (ops on 0.0.0.0): exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "health", "-url", "http://"+addrs.OpsAddr); code != 0 {
		t.Fatalf("health -url: exit %d %q", code, errOut)
	}
	t.Setenv("CONNECTOR_OPS_LISTEN", addrs.OpsAddr)
	if code, _, errOut := runCmd(t, "health", "-config", writeConfig(t, "listen: 127.0.0.1:0\n")); code != 0 {
		t.Fatalf("health with $CONNECTOR_OPS_LISTEN: exit %d %q", code, errOut)
	}

	code, _, errOut := runCmd(t, "health", "-url", "http://"+refusedtest.Addr(t))
	if code != 1 || !strings.Contains(errOut, "connection refused") {
		t.Fatalf("health against nothing: exit %d %q", code, errOut)
	}
}
