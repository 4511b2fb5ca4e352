package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/store"
	"connector/store/storetest"
)

// TestBuiltBinaryRefusesADamagedStore runs the built binary on an embedded
// data file with a damaged data page, and on an empty one. Each time it
// exits 1 with one error line that names the file and says to restore it
// from a backup, without listening and without touching the file. Before,
// the damaged page made it panic (exit 2, a goroutine dump) and the empty
// file was silently made a fresh store.
func TestBuiltBinaryRefusesADamagedStore(t *testing.T) {
	bin := connectorBinary(t)
	full := t.TempDir()
	st, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: full})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]store.Record, 300)
	for i := range recs {
		recs[i] = store.Record{Platform: "telegram", SessionKey: "agent:main:telegram:group:42", ChatID: "42", Payload: []byte(strings.Repeat("x", 1024))}
	}
	if _, err := st.Ledger().Append(context.Background(), "t1", recs); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(full, store.DataFile))
	if err != nil {
		t.Fatal(err)
	}
	config := writeConfig(t, "listen: 127.0.0.1:0\nops: {listen: 127.0.0.1:0}\n"+
		"tenants: [{id: t1, gateways: [{id: gw1, secrets: [s3cr3t-gw1-secret]}]}]\n")

	for name, damage := range map[string]func(t *testing.T, path string){
		"a damaged data page": func(t *testing.T, path string) { storetest.DamageDataPage(t, path) },
		"an empty file": func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, store.DataFile)
			if err := os.WriteFile(path, src, 0o600); err != nil {
				t.Fatal(err)
			}
			damage(t, path)
			before, _ := os.ReadFile(path)
			code, stderr := runUntilListeningOrExit(t, bin, "serve", "-config", config, "-data-dir", dir)
			var lines []string
			for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, "panic") || strings.HasPrefix(line, "goroutine ") {
					lines = append(lines, line)
				}
			}
			if code != 1 || len(lines) != 1 || !strings.Contains(lines[0], path) || !strings.Contains(lines[0], "restore connector.db from a backup") {
				t.Fatalf("exit %d, error lines %d; want exit 1 and one error line naming %s and saying to restore a backup; stderr:\n%s", code, len(lines), path, stderr)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Fatalf("the refused data file changed: %d bytes before, %d after", len(before), len(after))
			}
		})
	}
}

// runUntilListeningOrExit runs bin with args until it exits and returns its
// exit code and stderr. A connector that starts listening instead (its
// banner on stdout) fails the test and is killed.
func runUntilListeningOrExit(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	banner := &bannerWatch{listening: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = banner, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-banner.listening:
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the connector started listening on the data file; stderr:\n%s", stderr.String())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("timed out after 60s waiting for the connector to exit or listen; stderr:\n%s", stderr.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// bannerWatch is a process's stdout that closes listening once the
// connector's banner says it listens.
type bannerWatch struct {
	mu        sync.Mutex
	out       []byte
	listening chan struct{}
}

func (w *bannerWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := bytes.Contains(w.out, []byte(" listening on "))
	w.out = append(w.out, p...)
	if !had && bytes.Contains(w.out, []byte(" listening on ")) {
		close(w.listening)
	}
	return len(p), nil
}
