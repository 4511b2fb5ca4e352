package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connector/contract"
)

// buildBinary builds this command into a temporary directory and returns
// the binary's path.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "connector")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runBinary runs bin with args, stdin and extra environment variables, and
// returns its exit code and output. It fails the test after 60 s.
func runBinary(t *testing.T, bin, stdin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("timed out after 60s waiting for connector %v to exit", args)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// TestBuiltBinaryHelp runs the built binary: --help lists every subcommand
// with a line each and exits 0, and every subcommand's --help exits 0
// without doing its work (conformance keys --help opens no file).
func TestBuiltBinaryHelp(t *testing.T) {
	bin := buildBinary(t)
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
	bin := buildBinary(t)
	const id, secret = "gw-example", "s3cr3t-example-secret"
	verify := func(how, out string) {
		t.Helper()
		tok, err := contract.ParseToken(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("%s: %v (%q)", how, err, out)
		}
		keys, _ := contract.NewTokenKeys([]string{secret})
		if tok.GatewayID != id || tok.Verify(&keys, time.Now(), contract.TokenWindow{}) != nil {
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
