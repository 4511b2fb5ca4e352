package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// A TLS-only server with a password and an ACL user: the user gets in over
// TLS with the test's CA, a plain connection does not, a wrong password
// does not, and a replica follows over TLS.
func TestTLSAndUsers(t *testing.T) {
	ca := NewCA(t)
	s := Start(t, Options{TLS: ca, Password: "admin-pw", Users: []string{"app on >app-pw ~* &* +@all"}})
	ctx := context.Background()
	app := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "app-pw", TLSConfig: ca.ClientConfig()})
	defer app.Close()
	if err := app.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET as the ACL user over TLS: %v", err)
	}
	wrong := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "nope", TLSConfig: ca.ClientConfig()})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	plain := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "app-pw", MaxRetries: -1})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("a plain connection was accepted by a TLS-only server")
	}
	if !strings.HasPrefix(s.URL(), "rediss://") {
		t.Fatalf("URL %s of a TLS server", s.URL())
	}
	r := StartReplicas(t, s, 1)[0]
	if v, err := r.Client(t).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET on the replica = %q, %v", v, err)
	}
}

// Three shards form one cluster: keys in every shard's slots are served,
// each by its own primary.
func TestCluster(t *testing.T) {
	c := StartCluster(t, 3, 0, Options{})
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	shards := map[string]bool{}
	for i := range 30 {
		key := fmt.Sprintf("k%d", i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		shards[m.Options().Addr] = true
	}
	if len(shards) != 3 {
		t.Fatalf("30 keys landed on %d shards, want 3", len(shards))
	}
}

// Three Sentinels find the primary, its two replicas and each other.
func TestSentinels(t *testing.T) {
	p := Start(t, Options{Password: "pw"})
	StartReplicas(t, p, 2)
	ss := StartSentinels(t, p, 2, 3, SentinelOptions{Master: "mymaster"})
	ctx := context.Background()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{ss[0].Addr()}, Password: "pw"})
	defer fc.Close()
	if err := fc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the Sentinels: %v", err)
	}
}
