package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelOptions configure the Sentinels StartSentinels runs.
type SentinelOptions struct {
	// Master is the name the Sentinels monitor the primary under.
	Master string
	// DownAfter is how long the primary must be unreachable before a
	// Sentinel deems it down (down-after-milliseconds); 0 means 1 s.
	DownAfter time.Duration
	// Password, when set, is required of the Sentinels' own clients
	// (requirepass on the Sentinels).
	Password string
}

// sentinelConf is one Sentinel's configuration.
type sentinelConf struct {
	opt     SentinelOptions
	primary *Server
	quorum  int
}

// StartSentinels runs n Sentinels watching primary (a quorum of a
// majority of them), with the primary's TLS and password, and waits until
// each has found the primary's replicas and the other Sentinels.
func StartSentinels(t testing.TB, primary *Server, replicas, n int, opt SentinelOptions) []*Server {
	t.Helper()
	if opt.DownAfter == 0 {
		opt.DownAfter = time.Second
	}
	bin := serverBinary(t)
	out := make([]*Server, n)
	for i := range out {
		s := &Server{opt: Options{TLS: primary.opt.TLS}, dir: t.TempDir(),
			sentinel: &sentinelConf{opt: opt, primary: primary, quorum: n/2 + 1}}
		s.start(t, bin, "")
		t.Cleanup(s.stop)
		out[i] = s
	}
	for _, s := range out {
		waitSentinel(t, s, opt, replicas, n-1)
	}
	return out
}

// args writes the Sentinel's configuration file (Sentinel rewrites it) and
// returns the arguments that run it.
func (c *sentinelConf) args(s *Server, port string) ([]string, error) {
	conf := fmt.Sprintf("bind 127.0.0.1\ndir %s\nsentinel resolve-hostnames no\n", s.dir)
	if ca := s.opt.TLS; ca != nil {
		conf += fmt.Sprintf("port 0\ntls-port %s\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients no\ntls-replication yes\n",
			port, ca.CertFile, ca.KeyFile, ca.CAFile)
	} else {
		conf += "port " + port + "\n"
	}
	if c.opt.Password != "" {
		conf += "requirepass " + c.opt.Password + "\n"
	}
	m := c.opt.Master
	conf += fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s %d\n", m, c.primary.Port(), c.quorum)
	conf += fmt.Sprintf("sentinel down-after-milliseconds %s %d\n", m, c.opt.DownAfter.Milliseconds())
	conf += fmt.Sprintf("sentinel failover-timeout %s %d\n", m, 10*c.opt.DownAfter.Milliseconds())
	if pw := c.primary.opt.Password; pw != "" {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\n", m, pw)
	}
	if c.opt.Password != "" {
		// The Sentinels ask each other with the password they require.
		conf += "sentinel sentinel-pass " + c.opt.Password + "\n"
	}
	path := filepath.Join(s.dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return []string{path, "--sentinel"}, nil
}

// waitSentinel waits until s sees the primary with replicas replicas and
// others other Sentinels, so a failover can start at once.
func waitSentinel(t testing.TB, s *Server, opt SentinelOptions, replicas, others int) {
	t.Helper()
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), Password: opt.Password, TLSConfig: s.tlsConfig()})
	defer c.Close()
	deadline := time.Now().Add(startTimeout + 2*opt.DownAfter)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m, err := c.Master(ctx, opt.Master).Result()
		cancel()
		if err == nil && m["num-slaves"] == strconv.Itoa(replicas) && m["num-other-sentinels"] == strconv.Itoa(others) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: Sentinel %s: timed out waiting for %d replicas and %d other Sentinels of %s (last: %v, %v)",
				s.Addr(), replicas, others, opt.Master, m, err)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's view
	}
}
