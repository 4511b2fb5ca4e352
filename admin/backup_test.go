package admin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"connector/admin"
	"connector/internal/clock"
	"connector/registry"
	"connector/store"
)

// getBackup downloads GET /admin/v1/backup from srv with auth.
func getBackup(t *testing.T, srv *httptest.Server, auth string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/admin/v1/backup", nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// TestBackupRoute: over HTTP, GET /admin/v1/backup with the token answers
// the embedded store's data file, which opens as a store holding what was
// appended, never to be stored by a cache (it holds the tenants'
// secrets); without the token it is 401; a store without Backuper is 501.
func TestBackupRoute(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendEmbedded, Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte("in the copy")}}); err != nil {
		t.Fatal(err)
	}
	m := &counts{changes: map[string]int{}}
	h, err := admin.New(admin.Config{Registry: registry.New(st, clock.System), Token: token, Metrics: m,
		Apply: func(context.Context) error { return nil }, Backup: st.(store.Backuper)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	if resp, _, _ := getBackup(t, srv, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("backup without the token = %d", resp.StatusCode)
	}
	resp, body, err := getBackup(t, srv, "Bearer "+token)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("backup = %d, %v", resp.StatusCode, err)
	}
	if resp.Header.Get("Content-Length") != strconv.Itoa(len(body)) || resp.Header.Get("Content-Type") != "application/octet-stream" ||
		resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("backup headers %v for %d bytes", resp.Header, len(body))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, store.DataFile), body, 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := store.Open(ctx, store.Config{Backend: store.BackendEmbedded, Path: dir})
	if err != nil {
		t.Fatalf("opening the downloaded copy: %v", err)
	}
	defer cp.Close()
	recs, err := cp.Ledger().Read(ctx, "t1", 0, 10, 0)
	if err != nil || len(recs) != 1 || string(recs[0].Payload) != "in the copy" || cp.Epoch() != st.Epoch() {
		t.Fatalf("the copy: records %+v, %v; epoch %q, want %q", recs, err, cp.Epoch(), st.Epoch())
	}
	srv.Close() // waits for the handler, which counts after the copy
	if m.changes["backup/ok"] != 1 {
		t.Fatalf("counted %v", m.changes)
	}

	h, _, _ = newHandler(t) // a memory store: no Backuper
	if w := do(h, http.MethodGet, "/admin/v1/backup", "Bearer "+token, ""); w.Code != http.StatusNotImplemented {
		t.Fatalf("backup without a Backuper = %d %s", w.Code, w.Body)
	}
}

// failingBackup announces size bytes and fails after half of them.
type failingBackup struct{ size int64 }

func (f failingBackup) Backup(_ context.Context, start func(int64) (io.Writer, error)) (int64, error) {
	w, err := start(f.size)
	if err != nil {
		return 0, err
	}
	n, _ := w.Write(make([]byte, f.size/2))
	return int64(n), errors.New("disk read failed")
}

// TestBackupCutShortIsNotWhole: a copy that fails after it began reaches
// the client short of its Content-Length, so the client's read fails
// instead of taking half a file for a backup.
func TestBackupCutShortIsNotWhole(t *testing.T) {
	h, err := admin.New(admin.Config{Registry: registry.New(store.NewMemory(nil), clock.System), Token: token,
		Apply: func(context.Context) error { return nil }, Backup: failingBackup{size: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, body, err := getBackup(t, srv, "Bearer "+token)
	if err == nil {
		t.Fatalf("a failed copy read whole: %d, %d bytes", resp.StatusCode, len(body))
	}
	if int64(len(body)) >= 1<<20 {
		t.Fatalf("read %d bytes of a copy that failed at half", len(body))
	}
}
