package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/store"
)

// copyInto returns a Backup start function writing to a new data file in a
// fresh directory, and that directory.
func copyInto(t *testing.T) (func(int64) (io.Writer, error), string, *os.File) {
	t.Helper()
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, store.DataFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return func(int64) (io.Writer, error) { return f, nil }, dir, f
}

// readAll opens the embedded data in dir and returns its epoch and tenant's
// records.
func readAll(t *testing.T, dir, tenant string) (string, []store.Record) {
	t.Helper()
	s, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: dir})
	if err != nil {
		t.Fatalf("opening the copy: %v", err)
	}
	defer s.Close()
	recs, err := s.Ledger().Read(context.Background(), tenant, 0, 1_000_000, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s.Epoch(), recs
}

// TestEmbeddedBackupWhileWriting: copies taken while two writers append
// open as embedded stores with the same epoch and hold, in order, every
// record whose Append had returned before the copy began, each with its
// payload, and nothing but records that were appended.
func TestEmbeddedBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{Backend: store.BackendEmbedded, Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, ok := s.(store.Backuper)
	if !ok {
		t.Fatal("the embedded store is not a store.Backuper")
	}
	payload := func(seq uint64) string { return fmt.Sprintf("record %d", seq) }
	var done atomic.Uint64 // records whose Append returned
	// Payloads are named after the seq they get: appends are serialized
	// through mu so the name is known before the call.
	var mu sync.Mutex
	var next uint64 = 1
	write := func() error {
		mu.Lock()
		defer mu.Unlock()
		seqs, err := s.Ledger().Append(ctx, "t1", []store.Record{{Platform: "discord", SessionKey: "k", ChatID: "c", Payload: []byte(payload(next))}})
		if err != nil {
			return err
		}
		if seqs[0] != next {
			return fmt.Errorf("seq %d, want %d", seqs[0], next)
		}
		next++
		done.Add(1)
		return nil
	}
	for range 50 {
		if err := write(); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if err := write(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for round := range 3 {
		start, dir, f := copyInto(t)
		before := done.Load()
		var size int64
		n, err := b.Backup(ctx, func(sz int64) (io.Writer, error) { size = sz; return start(sz) })
		after := done.Load()
		if err != nil {
			t.Fatalf("round %d: backup: %v", round, err)
		}
		if n != size {
			t.Fatalf("round %d: wrote %d bytes, announced %d", round, n, size)
		}
		_ = f.Close()
		epoch, recs := readAll(t, dir, "t1")
		if epoch != s.Epoch() {
			t.Fatalf("round %d: the copy's epoch %q, the store's %q", round, epoch, s.Epoch())
		}
		if uint64(len(recs)) < before || uint64(len(recs)) > after+1 {
			t.Fatalf("round %d: the copy holds %d records; %d were appended before the copy began, %d when it ended", round, len(recs), before, after)
		}
		for i, r := range recs {
			if r.Seq != uint64(i+1) || string(r.Payload) != payload(r.Seq) {
				t.Fatalf("round %d: record %d of the copy is seq %d %q", round, i, r.Seq, r.Payload)
			}
		}
		t.Logf("round %d: %d bytes, %d records (%d appended before, %d after)", round, n, len(recs), before, after)
	}
	close(stop)
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestBackupFileOnlyWhileClosed: BackupFile refuses a data file a store
// has open (ErrInUse) and copies it once closed.
func TestBackupFileOnlyWhileClosed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.Open(ctx, store.Config{Backend: store.BackendEmbedded, Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte("kept")}}); err != nil {
		t.Fatal(err)
	}
	start, copyDir, f := copyInto(t)
	if _, err := store.BackupFile(ctx, dir, start); !errors.Is(err, store.ErrInUse) {
		t.Fatalf("BackupFile of an open store = %v, want ErrInUse", err)
	}
	epoch := s.Epoch()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.BackupFile(ctx, dir, start); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	gotEpoch, recs := readAll(t, copyDir, "t1")
	if gotEpoch != epoch || len(recs) != 1 || string(recs[0].Payload) != "kept" {
		t.Fatalf("the copy: epoch %q (want %q), records %+v", gotEpoch, epoch, recs)
	}
	if _, err := store.BackupFile(ctx, t.TempDir(), start); err == nil {
		t.Fatal("BackupFile of a directory without a data file succeeded")
	}
}

// blockingWriter signals its first Write and holds it until release closes.
type blockingWriter struct {
	w       io.Writer
	first   chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.once.Do(func() {
		close(b.first)
		<-b.release
	})
	return b.w.Write(p)
}

// TestEmbeddedBackupSlowReaderDoesNotHoldWrites: while a backup's reader
// takes nothing, appends that make the data file grow several times over
// still return; the copy, once taken, is the store as it was when the
// backup began.
func TestEmbeddedBackupSlowReaderDoesNotHoldWrites(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{Backend: store.BackendEmbedded, Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Ledger().Append(ctx, "t1", []store.Record{{Payload: []byte("before")}}); err != nil {
		t.Fatal(err)
	}
	start, dir, f := copyInto(t)
	bw := &blockingWriter{first: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := s.(store.Backuper).Backup(ctx, func(size int64) (io.Writer, error) {
			w, err := start(size)
			bw.w = w
			return bw, err
		})
		done <- err
	}()
	select {
	case <-bw.first:
	case err := <-done:
		t.Fatalf("backup returned before writing: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the backup's first write")
	}
	appended := make(chan error, 1)
	go func() {
		big := make([]byte, 256<<10)
		for range 64 { // 16 MiB: the file grows past several remaps
			if _, err := s.Ledger().Append(ctx, "t1", []store.Record{{Payload: big}}); err != nil {
				appended <- err
				return
			}
		}
		appended <- nil
	}()
	select {
	case err := <-appended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		close(bw.release)
		t.Fatal("timed out after 30s waiting for appends while a backup's reader was stalled")
	}
	close(bw.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if _, recs := readAll(t, dir, "t1"); len(recs) != 1 || string(recs[0].Payload) != "before" {
		t.Fatalf("the copy holds %d records, want the one appended before the backup", len(recs))
	}
}
