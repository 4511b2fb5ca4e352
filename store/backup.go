package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Backuper is implemented by a Store whose whole state is one file: the
// embedded backend. (Redis is backed up with Redis's own persistence.)
type Backuper interface {
	// Backup writes a consistent copy of the data file, as it was at one
	// moment, while writes go on: it calls start with the copy's size in
	// bytes, then writes exactly that many bytes to the writer start
	// returned, and reports how many it wrote. It stops with ctx's error
	// when ctx ends.
	Backup(ctx context.Context, start func(size int64) (io.Writer, error)) (int64, error)
}

var _ Backuper = (*embedded)(nil)

// ErrInUse is returned by BackupFile when a process (a running connector)
// has the data file open: back it up through that process instead.
var ErrInUse = errors.New("store: the data file is in use by another process")

// Backup implements Backuper. A bbolt read transaction holds back every
// write that needs the file to grow, so the transaction only copies the
// file to a temporary one in the data directory (unlinked at once, so a
// crash leaves nothing behind), at disk speed; the copy then goes to w from
// there, however slowly w takes it, with writes going on.
func (e *embedded) Backup(ctx context.Context, start func(size int64) (io.Writer, error)) (int64, error) {
	f, err := os.CreateTemp(e.dir, ".backup-*.tmp")
	if err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	defer f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	var size int64
	err = e.view(ctx, func(tx *bolt.Tx) error {
		return writeCopy(ctx, tx, func(int64) (io.Writer, error) { return f, nil }, &size)
	})
	if err != nil {
		return 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("store: backup: %w", err)
	}
	w, err := start(size)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(ctxWriter{ctx: ctx, w: w}, io.LimitReader(f, size))
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return n, fmt.Errorf("store: backup: %w", err)
	}
	return n, nil
}

// BackupFile writes a copy of the data file in dir, as Backup does, while
// no process has it open; it opens the file read-only and changes nothing.
// It fails with ErrInUse when a process holds the file (it waits one
// second for it first).
func BackupFile(ctx context.Context, dir string, start func(size int64) (io.Writer, error)) (int64, error) {
	path := filepath.Join(dir, DataFile)
	if _, err := os.Stat(path); err != nil {
		return 0, fmt.Errorf("store: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return 0, fmt.Errorf("%w: %s", ErrInUse, path)
	}
	if err != nil {
		return 0, fmt.Errorf("store: open %s: %w", path, err)
	}
	defer db.Close()
	var n int64
	err = db.View(func(tx *bolt.Tx) error { return writeCopy(ctx, tx, start, &n) })
	return n, err
}

func writeCopy(ctx context.Context, tx *bolt.Tx, start func(int64) (io.Writer, error), n *int64) error {
	w, err := start(tx.Size())
	if err != nil {
		return err
	}
	*n, err = tx.WriteTo(ctxWriter{ctx: ctx, w: w})
	if err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	return nil
}

// ctxWriter stops a copy once ctx ends.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
