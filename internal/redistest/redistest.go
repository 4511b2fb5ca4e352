// Package redistest runs a real redis-server for tests: a child process on
// a free loopback port with its data in a temporary directory, stopped when
// the test ends. There is no fake Redis: the tests talk to the server the
// Debian package installs. Beside a lone server it starts a primary's
// replicas, Sentinels watching it (sentinel.go) and a Redis Cluster of
// several shards (cluster.go), each optionally serving TLS only with a CA
// made for the test (tls.go) and requiring a password or ACL users.
//
// Without redis-server on PATH, Start skips the test with a message saying
// how to install it, or fails it when the environment variable CI is set,
// so CI never passes by skipping.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	// Password is the default user's password (requirepass), and the one
	// a replica gives its primary (masterauth). Empty: none.
	Password string
	// Users are ACL users, each one ACL SETUSER rule list
	// ("app on >secret ~* &* +@all").
	Users []string
	// TLS, when set, makes the server serve TLS only (no plain port), with
	// the CA's server certificate, and replicate and talk to its cluster
	// over TLS.
	TLS *CA
	// ReplicaOf makes the server a replica of the primary at this
	// host:port.
	ReplicaOf string
	// Cluster starts the server with cluster-enabled yes (StartCluster).
	Cluster bool
}

// Server is a running redis-server (or Sentinel).
type Server struct {
	opt Options
	dir string
	// sentinel, when set, runs the server as a Sentinel with this
	// configuration (sentinel.go).
	sentinel *sentinelConf
	// busPort is a cluster node's cluster bus port, kept across restarts.
	busPort string

	mu   sync.Mutex
	addr string
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
}

// Start runs a redis-server for the rest of t.
func Start(t testing.TB, opt Options) *Server {
	t.Helper()
	s := &Server{opt: opt, dir: t.TempDir()}
	s.start(t, serverBinary(t), "")
	t.Cleanup(s.stop)
	return s
}

// serverBinary finds redis-server, or skips t (fails it when CI is set).
func serverBinary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		const install = "apt-get install -y redis-server"
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not on PATH, and CI is set: the Redis tests must run in CI (%s)", install)
		}
		t.Skipf("redis-server is not on PATH: install it (%s) to run the Redis tests", install)
	}
	return bin
}

// Addr is the server's host:port.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL is the server's redis:// URL (rediss:// with TLS), with no
// credentials.
func (s *Server) URL() string {
	if s.opt.TLS != nil {
		return "rediss://" + s.Addr() + "/0"
	}
	return "redis://" + s.Addr() + "/0"
}

// Port is the server's port.
func (s *Server) Port() string {
	_, port, _ := net.SplitHostPort(s.Addr())
	return port
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.stop()
}

// Restart starts the server again over the same data directory, on the
// port it had unless another process took it meanwhile (use Addr or URL
// afterwards).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	port := s.Port()
	s.stop()
	s.start(t, serverBinary(t), port)
}

// start launches the server on port, or on a free one when port is empty
// or taken, retrying when another process took the port between choosing
// and binding it.
func (s *Server) start(t testing.TB, bin, port string) {
	t.Helper()
	var lastErr error
	for range 5 {
		if port == "" {
			p, err := freePort()
			if err != nil {
				t.Fatalf("redistest: find a free port: %v", err)
			}
			port = strconv.Itoa(p)
		}
		lastErr = s.launch(bin, port)
		if lastErr == nil {
			return
		}
		if !strings.Contains(lastErr.Error(), "Address already in use") {
			break
		}
		port, s.busPort = "", ""
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

// args are redis-server's arguments for serving on port.
func (s *Server) args(port string) ([]string, error) {
	if s.sentinel != nil {
		return s.sentinel.args(s, port)
	}
	args := []string{
		"--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--daemonize", "no", "--logfile", "", "--loglevel", "notice",
		"--repl-diskless-sync-delay", "0",
	}
	if s.opt.TLS != nil {
		args = append(args, s.opt.TLS.serverArgs(port)...)
	} else {
		args = append(args, "--port", port)
	}
	if s.opt.AppendFsync != "" {
		args = append(args, "--appendonly", "yes", "--appendfsync", s.opt.AppendFsync)
	} else {
		args = append(args, "--appendonly", "no")
	}
	if s.opt.Password != "" {
		args = append(args, "--requirepass", s.opt.Password, "--masterauth", s.opt.Password)
	}
	if s.opt.ReplicaOf != "" {
		host, port, err := net.SplitHostPort(s.opt.ReplicaOf)
		if err != nil {
			return nil, fmt.Errorf("ReplicaOf %q: %w", s.opt.ReplicaOf, err)
		}
		args = append(args, "--replicaof", host, port)
	}
	if s.opt.Cluster {
		if s.busPort == "" {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			s.busPort = strconv.Itoa(p)
		}
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", s.busPort, "--cluster-node-timeout", "2000")
	}
	if len(s.opt.Users) > 0 {
		// An ACL file replaces requirepass: it defines the default user too.
		acl := filepath.Join(s.dir, "users.acl")
		var b strings.Builder
		pass := "nopass"
		if s.opt.Password != "" {
			pass = ">" + s.opt.Password
		}
		b.WriteString("user default on " + pass + " ~* &* +@all\n")
		for _, u := range s.opt.Users {
			b.WriteString("user " + u + "\n")
		}
		if err := os.WriteFile(acl, []byte(b.String()), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--aclfile", acl)
	}
	return args, nil
}

// launch runs redis-server on port and waits until it logs that it accepts
// connections, or exits, or startTimeout passes.
func (s *Server) launch(bin string, port string) error {
	args, err := s.args(port)
	if err != nil {
		return err
	}
	ready := "Ready to accept connections"
	if s.sentinel != nil {
		ready = "+monitor master"
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
	accepting := make(chan struct{})
	logged := &tail{}
	exit := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			logged.add(sc.Text())
			if !signalled && strings.Contains(sc.Text(), ready) {
				signalled = true
				close(accepting)
			}
		}
		_ = cmd.Wait()
		close(exit)
	}()
	select {
	case <-accepting:
	case <-exit:
		return fmt.Errorf("redis-server exited before accepting connections:\n%s", logged)
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-exit
		return fmt.Errorf("timed out after %v waiting for redis-server to accept connections:\n%s", startTimeout, logged)
	}
	s.mu.Lock()
	s.addr = net.JoinHostPort("127.0.0.1", port)
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

// tlsConfig is the TLS client configuration for s; nil without TLS.
func (s *Server) tlsConfig() *tls.Config {
	if s.opt.TLS == nil {
		return nil
	}
	return s.opt.TLS.ClientConfig()
}

// Client returns a client of s as the default user (with Options.Password
// and TLS), closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.opt.Password, TLSConfig: s.tlsConfig()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// StartReplicas runs n replicas of primary, with its options, and waits
// until the primary sees every one of them online.
func StartReplicas(t testing.TB, primary *Server, n int) []*Server {
	t.Helper()
	opt := primary.opt
	opt.ReplicaOf = primary.Addr()
	out := make([]*Server, n)
	for i := range out {
		out[i] = Start(t, opt)
	}
	primary.WaitReplicas(t, n)
	return out
}

// WaitReplicas waits until s, a primary, has n replicas online.
func (s *Server) WaitReplicas(t testing.TB, n int) {
	t.Helper()
	c := s.Client(t)
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Count(info, ",state=online,") >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: timed out after %v waiting for %d replicas of %s online:\n%s%v", startTimeout, n, s.Addr(), info, err)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's state
	}
}
