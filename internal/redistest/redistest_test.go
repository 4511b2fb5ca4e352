package redistest

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// ping sends PING over a raw connection and returns the reply line.
func ping(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read PING reply from %s: %v", addr, err)
	}
	return strings.TrimSpace(line)
}

func TestStartKillRestart(t *testing.T) {
	s := Start(t, Options{AppendFsync: "always"})
	if got := ping(t, s.Addr()); got != "+PONG" {
		t.Fatalf("PING = %q", got)
	}
	old := s.Addr()
	s.Kill(t)
	if c, err := net.DialTimeout("tcp", old, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Kill", old)
	}
	s.Restart(t)
	if got := ping(t, s.Addr()); got != "+PONG" {
		t.Fatalf("PING after Restart = %q", got)
	}
}

// childEnv marks the re-executed binary of TestWithoutServer.
const childEnv = "REDISTEST_CHILD"

func TestWithoutServer(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		Start(t, Options{})
		t.Fatal("Start returned without redis-server on PATH")
	}
	run := func(ci string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWithoutServer$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), childEnv+"=1", "PATH=/nonexistent", "CI="+ci)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	if err != nil || !strings.Contains(out, "--- SKIP") || !strings.Contains(out, "apt-get install -y redis-server") {
		t.Fatalf("without CI: want a skip naming the install command; got %v:\n%s", err, out)
	}
	out, err = run("true")
	if err == nil || !strings.Contains(out, "--- FAIL") || !strings.Contains(out, "CI is set") {
		t.Fatalf("with CI set: want a failure; got %v:\n%s", err, out)
	}
}
