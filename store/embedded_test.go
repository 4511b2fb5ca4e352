package store_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/store"
	"connector/store/storetest"
)

func TestEmbedded(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		Fresh: func(t *testing.T) storetest.Opener {
			return opener(t, store.Config{Backend: store.BackendEmbedded, Path: t.TempDir()})
		},
		Durable: true,
	})
}

func TestEmbeddedLocksItsDirectory(t *testing.T) {
	dir := t.TempDir()
	s := opener(t, store.Config{Backend: store.BackendEmbedded, Path: dir})(clock.System)
	_, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: dir})
	if err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second Open of %s: err %v, want in use", dir, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	opener(t, store.Config{Backend: store.BackendEmbedded, Path: dir})(clock.System)
}

// crashChildEnv tells a re-executed test binary to be the appender that
// TestEmbeddedSurvivesKill9 kills; its value is the data directory.
const crashChildEnv = "CONNECTOR_STORE_CRASH_CHILD_DIR"

// crashWriters append concurrently in the child, so commits are batched.
const crashWriters = 4

func TestEmbeddedSurvivesKill9(t *testing.T) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(t, dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedSurvivesKill9$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	// Every line is "<writer> <i> <seq>", printed after Append returned.
	const killAfter = 300
	type ack struct {
		writer, i int
		seq       uint64
	}
	lines := make(chan ack)
	bad := make(chan string, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 {
				continue // the test framework's own output
			}
			w, err1 := strconv.Atoi(f[0])
			i, err2 := strconv.Atoi(f[1])
			seq, err3 := strconv.ParseUint(f[2], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil {
				select {
				case bad <- sc.Text():
				default:
				}
				continue
			}
			lines <- ack{w, i, seq}
		}
	}()
	var acked []ack
	deadline := time.After(30 * time.Second)
	killed := false
	for done := false; !done; {
		select {
		case a, ok := <-lines:
			if !ok {
				done = true
				break
			}
			acked = append(acked, a)
			if len(acked) == killAfter && !killed {
				if err := cmd.Process.Kill(); err != nil {
					t.Fatalf("kill the child: %v", err)
				}
				killed = true
			}
		case <-deadline:
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("timed out after 30s waiting for the child to report %d appends (got %d); stderr:\n%s", killAfter, len(acked), stderr.String())
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("the child ended before being killed (%v); stderr:\n%s", err, stderr.String())
	}
	select {
	case line := <-bad:
		t.Fatalf("the child printed a malformed line %q", line)
	default:
	}

	s := opener(t, store.Config{Backend: store.BackendEmbedded, Path: dir})(clock.System)
	var all []store.Record
	for {
		page, err := s.Ledger().Read(context.Background(), "t1", uint64(len(all)), 1000, 0)
		if err != nil {
			t.Fatalf("Read after the crash: %v", err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
	}
	bySeq := make(map[uint64]store.Record, len(all))
	for i, r := range all {
		if r.Seq != uint64(i+1) {
			t.Fatalf("after the crash record %d has seq %d: a gap or reordering", i, r.Seq)
		}
		bySeq[r.Seq] = r
	}
	last := make(map[int]uint64)
	for _, a := range acked {
		r, ok := bySeq[a.seq]
		if !ok {
			t.Fatalf("seq %d was confirmed to writer %d before the kill and is gone (%d records survived)", a.seq, a.writer, len(all))
		}
		if want := fmt.Sprintf("w%d-%d", a.writer, a.i); string(r.Payload) != want {
			t.Fatalf("seq %d holds %q, confirmed for %q", a.seq, r.Payload, want)
		}
		if a.seq <= last[a.writer] {
			t.Fatalf("writer %d got seq %d after %d", a.writer, a.seq, last[a.writer])
		}
		last[a.writer] = a.seq
	}
	t.Logf("%d appends confirmed before kill -9, %d records on disk after it", len(acked), len(all))
	// Numbers handed out before the crash may have had no commit; the
	// restarted store never assigns them again, and so resumes past them.
	next, err := s.Ledger().Append(context.Background(), "t1", []store.Record{{Payload: []byte("after")}})
	if err != nil || next[0] <= uint64(len(all)) {
		t.Fatalf("Append after the crash = %v, %v; want a seq above %d", next, err, len(all))
	}
}

// crashChild appends until it is killed, printing each confirmed seq.
func crashChild(t *testing.T, dir string) {
	s, err := store.Open(context.Background(), store.Config{Backend: store.BackendEmbedded, Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range crashWriters {
		wg.Go(func() {
			for i := range 1_000_000 {
				seqs, err := s.Ledger().Append(context.Background(), "t1",
					[]store.Record{{Kind: 1, Platform: "p", Payload: []byte(fmt.Sprintf("w%d-%d", w, i))}})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "%d %d %d\n", w, i, seqs[0])
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	_ = s.Close()
}
