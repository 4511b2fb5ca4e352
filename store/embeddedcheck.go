package store

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrDamaged reports an embedded data file the connector refuses to start
// on: empty, truncated, not a bbolt file, a bbolt file of another program,
// or with a damaged page. Its message names the file and what to do.
var ErrDamaged = errors.New("damaged")

// damaged is the error of the data file at path, what describing the
// damage.
func damaged(path, what string) error {
	return fmt.Errorf("store: data file %s is %w (%s); the connector does not start on it: restore %s from a backup "+
		"(docs/durability.md, Backup and restore), or move it away to start with an empty store (what it held is lost)",
		path, ErrDamaged, what, DataFile)
}

// openData opens the bbolt file at path. A file that existed is read
// whole first (verify), so damage is found here, as an error, rather than
// later as a panic or a fault in whatever reads the damaged page: an empty
// file is refused instead of being made a fresh store, and so is a file
// bbolt cannot open as its own. Opening and verifying run on a goroutine
// of their own that turns bbolt's panics, and faults reading the mapped
// file, into errors.
func openData(path string) (*bolt.DB, error) {
	info, err := os.Stat(path)
	existed := err == nil
	if existed && info.Size() == 0 {
		return nil, damaged(path, "it is empty: 0 bytes")
	}
	type opened struct {
		db  *bolt.DB
		err error
	}
	done := make(chan opened, 1)
	go func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		var db *bolt.DB
		defer func() {
			if r := recover(); r != nil {
				if db != nil {
					_ = db.Close()
				}
				done <- opened{err: damaged(path, fmt.Sprint(r))}
			}
		}()
		var err error
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout})
		switch {
		case errors.Is(err, berrors.ErrTimeout):
			err = fmt.Errorf("store: %s is in use by another process", path)
		case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
			err = damaged(path, "not a data file bbolt can open: "+err.Error())
		case err != nil:
			err = fmt.Errorf("store: open %s: %w", path, err)
		case existed:
			if verr := verify(db); verr != nil {
				_ = db.Close()
				db, err = nil, damaged(path, verr.Error())
			}
		}
		done <- opened{db: db, err: err}
	}()
	o := <-done
	return o.db, o.err
}

// verify reads every key and value of every bucket, then runs bbolt's
// consistency check (every page reachable or free, once), and returns the
// first damage found. A file whose root holds buckets but not this
// package's meta bucket is another program's. The caller recovers from
// the panics bbolt raises on a damaged page.
func verify(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) error {
		hasBuckets := false
		var sum uint32
		var walk func(b *bolt.Bucket) error
		walk = func(b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if v != nil {
					sum = crc32.Update(sum, crc32.IEEETable, v) // reads every byte
					return nil
				}
				if child := b.Bucket(k); child != nil {
					return walk(child)
				}
				return nil
			})
		}
		err := tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			hasBuckets = true
			return walk(b)
		})
		if err != nil {
			return err
		}
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		if first != nil {
			return first
		}
		if hasBuckets && tx.Bucket(bMeta) == nil {
			return errors.New("a bbolt file, but not the connector's: it has no meta bucket")
		}
		return nil
	})
}
