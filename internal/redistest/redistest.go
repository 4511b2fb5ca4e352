// Package redistest runs a real redis-server for tests: a child process on
// a free loopback port with its data in a temporary directory, stopped when
// the test ends. There is no fake Redis: the tests talk to the server the
// Debian package installs.
//
// Without redis-server on PATH, Start skips the test with a message saying
// how to install it, or fails it when the environment variable CI is set,
// so CI never passes by skipping.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long Start waits for the server to accept
// connections.
const startTimeout = 10 * time.Second

// Options configure the server.
type Options struct {
	// AppendFsync, when set, turns on the append-only file with this
	// appendfsync policy: "always" (every acknowledged write survives a
	// kill -9 of the server) or "everysec". Empty: the server persists
	// nothing, which is fastest.
	AppendFsync string
}

// Server is a running redis-server.
type Server struct {
	opt Options
	dir string

	mu   sync.Mutex
	addr string
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
}

// Start runs a redis-server for the rest of t.
func Start(t testing.TB, opt Options) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		const install = "apt-get install -y redis-server"
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not on PATH, and CI is set: the Redis tests must run in CI (%s)", install)
		}
		t.Skipf("redis-server is not on PATH: install it (%s) to run the Redis tests", install)
	}
	s := &Server{opt: opt, dir: t.TempDir()}
	s.start(t, bin)
	t.Cleanup(s.stop)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.stop()
}

// Restart starts the server again over the same data directory (its port
// may change: use Addr or URL afterwards).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	s.start(t, bin)
}

// start launches the server on a free port, retrying when another process
// took the port between choosing and binding it.
func (s *Server) start(t testing.TB, bin string) {
	t.Helper()
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: find a free port: %v", err)
		}
		lastErr = s.launch(bin, port)
		if lastErr == nil {
			return
		}
		if !strings.Contains(lastErr.Error(), "Address already in use") {
			break
		}
	}
	t.Fatalf("redistest: %v", lastErr)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch runs redis-server on port and waits until it logs that it accepts
// connections, or exits, or startTimeout passes.
func (s *Server) launch(bin string, port int) error {
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--daemonize", "no", "--logfile", "", "--loglevel", "notice",
	}
	if s.opt.AppendFsync != "" {
		args = append(args, "--appendonly", "yes", "--appendfsync", s.opt.AppendFsync)
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = procAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	ready := make(chan struct{})
	logged := &tail{}
	exit := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			logged.add(sc.Text())
			if !signalled && strings.Contains(sc.Text(), "Ready to accept connections") {
				signalled = true
				close(ready)
			}
		}
		_ = cmd.Wait()
		close(exit)
	}()
	select {
	case <-ready:
	case <-exit:
		return fmt.Errorf("redis-server exited before accepting connections:\n%s", logged)
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-exit
		return fmt.Errorf("timed out after %v waiting for redis-server to accept connections:\n%s", startTimeout, logged)
	}
	s.mu.Lock()
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.cmd, s.exit = cmd, exit
	s.mu.Unlock()
	return nil
}

// stop kills the server and waits for it; it does nothing when none runs.
func (s *Server) stop() {
	s.mu.Lock()
	cmd, exit := s.cmd, s.exit
	s.cmd, s.exit = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exit
}

// tail keeps the server's last log lines for error messages.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (l *tail) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 50 {
		l.lines = l.lines[1:]
	}
	l.lines = append(l.lines, line)
}

func (l *tail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
