package storetest

import (
	"math/rand/v2"
	"os"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// DamageDataPage overwrites one data page of the bbolt file at path (the
// in-use leaf page holding the most entries) with pseudo-random bytes, as a
// failing disk or a stray write would, and returns its page id. The file
// must not be open.
func DamageDataPage(t testing.TB, path string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatalf("open %s to find a data page: %v", path, err)
	}
	pageSize := db.Info().PageSize
	victim, most := -1, 0
	err = db.View(func(tx *bolt.Tx) error {
		for id := 2; ; id++ {
			p, err := tx.Page(id)
			if err != nil {
				return err
			}
			if p == nil {
				return nil
			}
			if p.Type == "leaf" && p.Count > most {
				victim, most = id, p.Count
			}
		}
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil || victim < 0 {
		t.Fatalf("finding a data page of %s: page %d, %v", path, victim, err)
	}
	garbage := make([]byte, pageSize)
	rng := rand.New(rand.NewPCG(uint64(victim), 22))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(garbage, int64(victim)*int64(pageSize)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return victim
}
