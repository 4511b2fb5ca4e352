package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"connector/store"
)

// adminBackup is `connector admin backup -o FILE [-data-dir DIR]`: a
// consistent copy of the embedded store's data file, from the running
// connector's admin API (GET /admin/v1/backup), or with -data-dir straight
// from DIR while no connector has it open. The copy is written under a
// temporary name beside FILE (mode 0600), synced, and renamed to FILE only
// once whole.
func adminBackup(base string, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("admin backup", "connector admin [-url URL] backup -o FILE [-data-dir DIR]",
		"Copies the embedded store's data file ("+store.DataFile+") to FILE while the connector runs, through\n"+
			"its admin API (token in $"+envAdminToken+"). With -data-dir, copies DIR's data file directly,\n"+
			"which works only while no connector has it open.")
	out := fs.String("o", "", "the file to write (required); replaced only once the copy is whole")
	dir := fs.String("data-dir", "", "copy this data directory's file directly instead of asking the running connector")
	if code := parseFlags(fs, args, stdout, stderr); code >= 0 {
		return code
	}
	if *out == "" || fs.NArg() != 0 {
		fmt.Fprint(stderr, "connector admin backup: want -o FILE and no arguments\n\n")
		fs.Usage()
		return 2
	}
	ctx := context.Background()
	var copyTo func(w io.Writer) (int64, error)
	if *dir != "" {
		copyTo = func(w io.Writer) (int64, error) {
			n, err := store.BackupFile(ctx, *dir, func(int64) (io.Writer, error) { return w, nil })
			if errors.Is(err, store.ErrInUse) {
				err = fmt.Errorf("%w; while the connector runs, back up through its admin API (without -data-dir)", err)
			}
			return n, err
		}
	} else {
		token := os.Getenv(envAdminToken)
		if token == "" {
			fmt.Fprintf(stderr, "connector admin backup: set %s to the admin token (or copy a stopped connector's file with -data-dir)\n", envAdminToken)
			return 2
		}
		copyTo = func(w io.Writer) (int64, error) { return downloadBackup(ctx, base, token, w) }
	}
	var n int64
	err := writeFile(*out, os.Rename, func(f *os.File) (err error) {
		n, err = copyTo(f)
		return err
	})
	if err != nil {
		fmt.Fprintf(stderr, "connector admin backup: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "backup: %d bytes written to %s\n", n, *out)
	return 0
}

// backupHeaderWait bounds the wait for the backup's answer to begin: the
// connector copies its data file to a temporary file before it answers,
// and gives a backup at most 10 minutes (admin's backupTimeout). Tests
// lower it.
var backupHeaderWait = 11 * time.Minute

// downloadBackup streams GET /admin/v1/backup into w; a body short of
// its announced size fails. A big copy may
// take long, so the transfer as a whole is not bounded here: the wait for
// the answer's headers is, by backupHeaderWait, and then each wait for
// more of its bytes, by adminWait.
func downloadBackup(ctx context.Context, base, token string, w io.Writer) (int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	idle := time.AfterFunc(backupHeaderWait, func() {
		cancel(fmt.Errorf("no answer after %v: the admin API took the request but does not answer", backupHeaderWait))
	})
	defer idle.Stop()
	req, err := newAdminRequest(ctx, http.MethodGet, base+"/admin/v1/backup", token, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, cmp.Or(context.Cause(ctx), unreachable(base, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return 0, answerError(resp, data)
	}
	if resp.ContentLength < 0 {
		return 0, errors.New("the answer has no Content-Length; not taken for a whole copy")
	}
	stalled := fmt.Errorf("no progress for %v: the copy stopped coming", adminWait)
	idle.Stop()
	idle = time.AfterFunc(adminWait, func() { cancel(stalled) })
	n, err := io.Copy(w, progress{resp.Body, func() { idle.Reset(adminWait) }})
	if err == nil && n != resp.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	if cause := context.Cause(ctx); err != nil && cause != nil {
		err = cause
	}
	if err != nil {
		return n, fmt.Errorf("the copy was cut short after %d of %d bytes: %w", n, resp.ContentLength, err)
	}
	return n, nil
}

// progress is a reader calling moved after each read that yields bytes.
type progress struct {
	io.Reader
	moved func()
}

func (p progress) Read(b []byte) (int, error) {
	n, err := p.Reader.Read(b)
	if n > 0 {
		p.moved()
	}
	return n, err
}

// writeFile puts a file at path whole or not at all: write fills a new
// temporary file beside it (mode 0600), which is synced and then
// published at path: os.Rename replaces what is there, os.Link fails with
// fs.ErrExist instead. The directory is synced after, so the new name
// survives a power loss (a data directory's secret, which was printed,
// must not be generated again). The temporary file never stays; on
// failure path is left as it was.
func writeFile(path string, publish func(tmp, path string) error, write func(*os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = publish(f.Name(), path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	return err
}

// syncDir flushes dir's entries to stable storage.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
