package main

// Test support for the tests that run the connector binary as a child
// process: the one build of the binary, one-shot runs (runBinary), and a
// served child (startChild) with its listeners' addresses read from its
// banner, its log, and its exit.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// TestMain removes the connector binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// connectorBinary builds this package's binary once per test run and
// returns its path.
func connectorBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "connector-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "connector")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// runBinary runs bin with args, stdin and extra environment variables, and
// returns its exit code and output. It fails the test after 60 s.
func runBinary(t *testing.T, bin, stdin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("timed out after 60s waiting for connector %v to exit", args)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// child is one run of `connector serve`.
type child struct {
	cmd *exec.Cmd
	// addr, ops and admin are the public, operations and admin listeners'
	// host:port, as the banner names them (admin empty when off).
	addr, ops, admin string
	stderr           *syncBuffer // the log
	exited           chan struct{}
	err              error // Wait's, set before exited is closed
}

// startChild runs `bin serve -config config -data-dir dataDir` with the
// environment env and returns once its banner named its listeners (the
// admin one too when admin). The child is killed when the test ends, and
// the tail of its log shown if the test failed.
func startChild(t *testing.T, bin string, env []string, config, dataDir string, admin bool) *child {
	t.Helper()
	c, err := launchChild(t, bin, env, config, dataDir, admin)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// launchChild is startChild, returning an error, with the child (its log),
// when the child exits before listening.
func launchChild(t *testing.T, bin string, env []string, config, dataDir string, admin bool) (*child, error) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "-config", config, "-data-dir", dataDir)
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan [3]string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var addrs [3]string // public, ops, admin
		for sc.Scan() {
			line := sc.Text()
			if _, rest, ok := strings.Cut(line, " listening on http://"); ok {
				addrs[0], _, _ = strings.Cut(rest, " ")
			}
			if _, rest, ok := strings.Cut(line, "operations (keep private): http://"); ok {
				addrs[1], _, _ = strings.Cut(rest, "/")
				if !admin {
					listening <- addrs
				}
			}
			if _, rest, ok := strings.Cut(line, "admin:     http://"); ok && admin {
				addrs[2], _, _ = strings.Cut(rest, "/")
				listening <- addrs
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			t.Logf("connector log (pid %d):\n%s", cmd.Process.Pid, tail(c.stderr.String(), 80))
		}
	})
	select {
	case a := <-listening:
		c.addr, c.ops, c.admin = a[0], a[1], a[2]
	case <-c.exited:
		return c, fmt.Errorf("connector exited before listening: %v\n%s", c.err, c.stderr.String())
	case <-time.After(crashWait):
		t.Fatalf("timed out after %v waiting for the connector to listen\n%s", crashWait, c.stderr.String())
	}
	return c, nil
}

// alive returns a context that ends after crashWait or as soon as the
// child exits, whichever comes first; context.Cause says which, so a wait
// on the child's doing does not sit out crashWait for a dead process.
func (c *child) alive() (context.Context, context.CancelFunc) {
	timed, stopTimer := context.WithTimeoutCause(context.Background(), crashWait,
		fmt.Errorf("timed out after %v", crashWait))
	ctx, cancel := context.WithCancelCause(timed)
	go func() {
		select {
		case <-c.exited:
			cancel(fmt.Errorf("the connector exited (%v)", c.err))
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil); stopTimer() }
}

// waitExit waits for the child to exit and returns its exit code.
func (c *child) waitExit(t *testing.T, what string) int {
	t.Helper()
	select {
	case <-c.exited:
		return c.cmd.ProcessState.ExitCode()
	case <-time.After(crashWait):
		t.Fatalf("timed out after %v waiting for the connector to exit %s\n%s", crashWait, what, c.stderr.String())
	}
	return 0
}

// waitLog waits until the child's log holds s. Only for a log line that is
// itself what a test checks (an audit line): a test waits on state or
// metrics, not on the log.
func (c *child) waitLog(t *testing.T, s string) {
	t.Helper()
	c.waitLogPast(t, 0, s)
}

// waitLogPast waits until the child's log past the offset from holds s, and
// returns the log past from.
func (c *child) waitLogPast(t *testing.T, from int, s string) string {
	t.Helper()
	deadline := time.Now().Add(crashWait)
	for {
		logged := c.stderr.String()[from:]
		if strings.Contains(logged, s) {
			return logged
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for the log line %q", crashWait, s)
		}
		time.Sleep(10 * time.Millisecond) // the pipe's bytes arrive on exec's copying goroutine
	}
}

// waitLogOrder waits until the child's log, past the offset from (the
// length of c.stderr taken before the request), holds then, and fails
// unless first comes before it there: what logged first was done before
// what logged then (one process's log is written in order).
func (c *child) waitLogOrder(t *testing.T, from int, first, then string) {
	t.Helper()
	logged := c.waitLogPast(t, from, then)
	if i := strings.Index(logged, first); i < 0 || i > strings.Index(logged, then) {
		t.Fatalf("the log line %q does not come before %q:\n%s", first, then, logged)
	}
}

// tail returns the last lines of s.
func tail(s string, lines int) string {
	all := strings.Split(s, "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger
// or a process.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
