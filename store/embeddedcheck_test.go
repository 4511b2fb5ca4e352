package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"connector/store"
	"connector/store/storetest"
)

// filledDataFile returns the path of an embedded store's data file holding
// 400 ledger records of 1 KiB for two tenants (many data pages), closed.
func filledDataFile(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"t1", "t2"} {
		recs := make([]store.Record, 200)
		for i := range recs {
			recs[i] = store.Record{Platform: "telegram", SessionKey: "k", ChatID: "42", Payload: []byte(strings.Repeat("x", 1024))}
		}
		if _, err := s.Ledger().Append(context.Background(), tenant, recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, store.DataFile)
}

// copyDataFile copies the data file src into a new data directory and returns
// that directory and the copy's path.
func copyDataFile(t *testing.T, src string) (string, string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, store.DataFile)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

// TestDamagedDataFileIsRefused: a data file that existed and cannot be
// read whole is refused at Open with ErrDamaged, a message naming the file
// and saying to restore a backup, and is left as it was; never a panic
// later, never a fresh store over it. Before, a damaged data page made the
// first read of it panic, and an empty file was silently made a new store.
func TestDamagedDataFileIsRefused(t *testing.T) {
	src := filledDataFile(t)
	for name, damage := range map[string]func(t *testing.T, path string){
		"a data page overwritten": func(t *testing.T, path string) { storetest.DamageDataPage(t, path) },
		"empty": func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		},
		"truncated to half": func(t *testing.T, path string) {
			info, _ := os.Stat(path)
			if err := os.Truncate(path, info.Size()/2); err != nil {
				t.Fatal(err)
			}
		},
		"not a bbolt file": func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(strings.Repeat("not a database\n", 1000)), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"another program's bbolt file": func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucket([]byte("settings"))
				if err != nil {
					return err
				}
				return b.Put([]byte("theme"), []byte("dark"))
			})
			if cerr := db.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, path := copyDataFile(t, src)
			damage(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: dir})
			if err == nil {
				s.Close()
				t.Fatal("Open accepted it")
			}
			t.Logf("refused: %v", err)
			msg := err.Error()
			if !errors.Is(err, store.ErrDamaged) || !strings.Contains(msg, path) || !strings.Contains(msg, "restore "+store.DataFile+" from a backup") || strings.Contains(msg, "\n") {
				t.Fatalf("Open: %v\nwant one line, ErrDamaged, naming %s and saying to restore a backup", err, path)
			}
			after, err := os.ReadFile(path)
			if err != nil || string(after) != string(before) {
				t.Fatalf("the refused file changed (%d bytes before, %d after, %v)", len(before), len(after), err)
			}
		})
	}

	t.Run("intact", func(t *testing.T) {
		dir, _ := copyDataFile(t, src)
		s, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: dir})
		if err != nil {
			t.Fatalf("Open of an intact copy: %v", err)
		}
		defer s.Close()
		recs, err := s.Ledger().Read(context.Background(), "t2", 0, 1000, 0)
		if err != nil || len(recs) != 200 {
			t.Fatalf("read %d records, %v; want 200", len(recs), err)
		}
	})
}
