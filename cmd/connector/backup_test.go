package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/registry"
	"connector/store"
)

// openBackup opens a copy of the embedded data file at path as a store,
// closed when the test ends.
func openBackup(t *testing.T, path string) store.Store {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, store.DataFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: dir})
	if err != nil {
		t.Fatalf("opening the backup %s: %v", path, err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// backupRecords opens the embedded data file at path (a copy) and returns
// tenant t1's payloads.
func backupRecords(t *testing.T, path string) []string {
	t.Helper()
	recs, err := openBackup(t, path).Ledger().Read(context.Background(), "t1", 0, 100_000, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Payload)
	}
	return out
}

// holdsAll reports the first of texts[from:to] no payload carries, "" when
// every one is there.
func holdsAll(payloads []string, prefix string, from, to int) string {
	for i := from; i < to; i++ {
		want := fmt.Sprintf("%q", fmt.Sprintf("%s %d", prefix, i))
		found := false
		for _, p := range payloads {
			found = found || strings.Contains(p, want)
		}
		if !found {
			return want
		}
	}
	return ""
}

// TestAdminBackupWhileWriting: `connector admin backup -o FILE` copies the
// running connector's store while Telegram webhook updates keep being
// buffered; the copy opens as an embedded store holding every update
// confirmed before the backup began. A direct copy (-data-dir) is refused
// while the connector runs, and works once it has stopped.
func TestAdminBackupWhileWriting(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newAdminRig(t)
	r.start(t)
	for i := range 20 {
		r.telegram(t, 5000+i, 42, fmt.Sprintf("before %d", i))
	}
	stop := make(chan struct{})
	written := make(chan int, 1)
	go func() {
		n := 0
		defer func() { written <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := http.DefaultClient.Do(r.telegramRequest(6000+n, 42, fmt.Sprintf("during %d", n)))
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return
			}
			n++
		}
	}()
	out := filepath.Join(t.TempDir(), "online.db")
	msg := r.cli(t, "backup", "-o", out)
	close(stop)
	during := <-written
	if !strings.Contains(msg, "bytes written to "+out) {
		t.Fatalf("backup printed %q", msg)
	}
	payloads := backupRecords(t, out)
	if miss := holdsAll(payloads, "before", 0, 20); miss != "" {
		t.Fatalf("the online backup (%d records) lacks %s", len(payloads), miss)
	}
	t.Logf("online backup: %d records; %d updates were confirmed while it ran or after", len(payloads), during)

	direct := exec.Command(r.bin, "admin", "backup", "-o", filepath.Join(t.TempDir(), "direct.db"), "-data-dir", r.dataDir)
	direct.Env = r.env
	if b, err := direct.CombinedOutput(); err == nil || !strings.Contains(string(b), "in use by another process") {
		t.Fatalf("a direct backup of a running connector's file: %v\n%s", err, b)
	}

	r.terminate(t)
	stopped := filepath.Join(t.TempDir(), "stopped.db")
	msg = r.cli(t, "backup", "-o", stopped, "-data-dir", r.dataDir)
	if !strings.Contains(msg, "bytes written to "+stopped) {
		t.Fatalf("direct backup printed %q", msg)
	}
	payloads = backupRecords(t, stopped)
	if miss := holdsAll(payloads, "before", 0, 20); miss != "" {
		t.Fatalf("the stopped backup lacks %s", miss)
	}
	if miss := holdsAll(payloads, "during", 0, during); miss != "" {
		t.Fatalf("the stopped backup lacks %s (of %d confirmed)", miss, during)
	}
}

// TestUpgradeGuideBackupCommandsAndRestore runs the backup commands of
// docs/guides/upgrade-backup.md as they are written (the file names
// replaced by a test's): the online one against the running connector, the
// offline one once it stopped. Both copies hold the registry (a tenant
// the admin API added). Restoring the online copy, taken before a second
// tenant was added, rolls that tenant back, as the guide says.
func TestUpgradeGuideBackupCommandsAndRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	guide, err := os.ReadFile("../../docs/guides/upgrade-backup.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds := regexp.MustCompile(`(?m)^(?:CONNECTOR_ADMIN_TOKEN=\.\.\. )?connector admin backup .*$`).FindAllString(string(guide), -1)
	if len(cmds) != 2 || strings.Contains(cmds[0], "-data-dir") || !strings.Contains(cmds[1], "-data-dir /var/lib/connector") {
		t.Fatalf("the guide's backup commands are %q, want the online one then the offline one", cmds)
	}
	r := newAdminRig(t)
	r.start(t)
	r.cli(t, "tenant", "add", "acme")
	run := func(line string) string {
		t.Helper()
		out := filepath.Join(t.TempDir(), "connector-backup.db")
		line = strings.TrimPrefix(line, "CONNECTOR_ADMIN_TOKEN=... ") // r.env sets it
		line = strings.ReplaceAll(line, "/backups/connector-$(date +%F).db", out)
		line = strings.ReplaceAll(line, "/var/lib/connector", r.dataDir)
		cmd := exec.Command(r.bin, strings.Fields(line)[1:]...)
		cmd.Env = append(slices.Clone(r.env), "CONNECTOR_ADMIN_URL=http://"+r.child.admin)
		if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "bytes written to "+out) {
			t.Fatalf("%s: %v\n%s", line, err, b)
		}
		return out
	}
	online := run(cmds[0])
	r.cli(t, "tenant", "add", "later")
	r.terminate(t)
	offline := run(cmds[1])
	for path, want := range map[string][]string{online: {"acme"}, offline: {"acme", "later"}} {
		if got := backupTenants(t, path); !slices.Equal(got, want) {
			t.Errorf("backup %s holds the tenants %v, want %v", filepath.Base(filepath.Dir(path)), got, want)
		}
	}

	// Restore the online copy: "later" was added after it.
	data, err := os.ReadFile(online)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dataDir, store.DataFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	r.start(t)
	listing := r.cli(t, "tenants")
	if !strings.Contains(listing, `"id": "acme"`) || strings.Contains(listing, `"id": "later"`) {
		t.Fatalf("after restoring the backup the tenants are\n%s", listing)
	}
}

// backupTenants opens the embedded data file at path (a copy) and returns
// the tenants its registry stores.
func backupTenants(t *testing.T, path string) []string {
	t.Helper()
	s, err := registry.New(openBackup(t, path), clock.System).Stored(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tn := range s.Tenants {
		ids = append(ids, tn.ID)
	}
	slices.Sort(ids)
	return ids
}

// terminate stops the rig's connector with SIGTERM and waits until it
// exited.
func (r *adminRig) terminate(t *testing.T) {
	t.Helper()
	if err := r.child.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.child.exited:
	case <-time.After(crashWait):
		t.Fatalf("timed out after %v waiting for the connector to stop on SIGTERM", crashWait)
	}
}
