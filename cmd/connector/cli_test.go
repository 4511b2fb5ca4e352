package main

import (
	"strings"
	"testing"

	"connector/contract"
)

// TestBuiltBinaryHelp runs the built binary: --help lists every subcommand
// with a line each and exits 0, and every subcommand's --help exits 0
// without doing its work (conformance keys --help opens no file).
func TestBuiltBinaryHelp(t *testing.T) {
	bin := connectorBinary(t)
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errOut := runBinary(t, bin, "", nil, args...)
		if code != 0 {
			t.Fatalf("connector %v: exit %d, stderr %s", args, code, errOut)
		}
		for _, c := range commands {
			if !strings.Contains(out, "\n  "+c.name+" ") || !strings.Contains(out, c.summary) {
				t.Errorf("connector %v does not list %q with its summary:\n%s", args, c.name, out)
			}
		}
	}
	for _, args := range [][]string{
		{"serve", "--help"}, {"--config", "x", "--help"}, {"config", "--help"}, {"config", "example", "--help"},
		{"conformance", "--help"}, {"conformance", "keys", "--help"},
		{"conformance", "events", "-h"}, {"token", "--help"}, {"version", "--help"},
	} {
		code, out, errOut := runBinary(t, bin, "", nil, args...)
		if code != 0 || !strings.HasPrefix(out, "usage: connector") || errOut != "" {
			t.Errorf("connector %v: exit %d, stdout %q, stderr %q; want exit 0 and the usage on stdout", args, code, out, errOut)
		}
	}
	if code, _, errOut := runBinary(t, bin, "", nil, "frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runBinary(t, bin, "", nil, "serve", "-no-such-flag"); code != 2 || !strings.Contains(errOut, "no-such-flag") {
		t.Errorf("unknown flag: exit %d, stderr %q", code, errOut)
	}
	code, out, _ := runBinary(t, bin, "", nil, "version")
	if code != 0 || !strings.HasPrefix(out, "connector ") || !strings.Contains(out, "\ncommit ") || !strings.Contains(out, "\ngo1.") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

// TestBuiltBinaryTokenSecretOutsideArgv: the secret comes from the
// environment or stdin; -secret still works but warns.
func TestBuiltBinaryTokenSecretOutsideArgv(t *testing.T) {
	bin := connectorBinary(t)
	const id, secret = "gw-example", "s3cr3t-example-secret"
	verify := func(how, out string) {
		t.Helper()
		tok, err := contract.ParseToken(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("%s: %v (%q)", how, err, out)
		}
		keys, _ := contract.NewTokenKeys([]string{secret})
		if tok.GatewayID != id || !verified(tok, &keys) {
			t.Fatalf("%s: token %q does not verify", how, out)
		}
	}
	code, out, errOut := runBinary(t, bin, "", []string{envTokenSecret + "=" + secret}, "token", "-gateway-id", id)
	if code != 0 || errOut != "" {
		t.Fatalf("from the environment: exit %d, stderr %q", code, errOut)
	}
	verify("from the environment", out)

	code, out, errOut = runBinary(t, bin, secret+"\n", nil, "token", "-gateway-id", id)
	if code != 0 || errOut != "" {
		t.Fatalf("from stdin: exit %d, stderr %q", code, errOut)
	}
	verify("from stdin", out)

	code, out, errOut = runBinary(t, bin, "", nil, "token", "-gateway-id", id, "-secret", secret)
	if code != 0 || !strings.Contains(errOut, "-secret is deprecated") {
		t.Fatalf("-secret: exit %d, stderr %q", code, errOut)
	}
	verify("-secret", out)

	if code, _, errOut := runBinary(t, bin, "", nil, "token", "-gateway-id", id); code != 2 || !strings.Contains(errOut, envTokenSecret) {
		t.Fatalf("no secret: exit %d, stderr %q", code, errOut)
	}
}
