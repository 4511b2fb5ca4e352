package store

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisReadTimeout is the clients' read timeout (go-redis's is 5 s) unless a
// pipeline ending in WAIT needs longer (readTimeoutFor).
const redisReadTimeout = 3 * time.Second

// redisSends is how many times go-redis sends a command or pipeline at
// most: with its default MaxRetries (3) it sends it again after an EOF or
// a read timeout, even when the server ran it and only the reply was lost.
const redisSends = 4

// redisDialBudget is how long go-redis may take to get a connection for a
// send (its default DialerRetries, 5, dials of DialTimeout, 5 s, 100 ms
// apart): a resend after a failover may dial that long before it is sent.
const redisDialBudget = 5 * (5*time.Second + 100*time.Millisecond)

// redisHandshake is how many round trips go-redis makes on a new
// connection before it sends a command on it (HELLO, the connection's
// options, its maintenance notifications, CLIENT SETINFO), each within a
// write and a read timeout.
const redisHandshake = 4

// resendWindow is how long after a command's first send go-redis may still
// send it again, under c's options (which a redis_url may set): each send
// may first wait its pool timeout, dial for the client's dial budget (twice
// DialTimeout a dial through Sentinel with TLS, sentinelTLS: the lookup of
// the primary, then the dial), set the connection up (redisHandshake),
// write and read, then back off. On a Redis Cluster the pipelines go
// through node clients that go-redis gives no retries, so they are sent
// once; the window is then go-redis's defaults: more than enough.
func resendWindow(c redis.UniversalClient, read time.Duration, sentinelTLS bool) time.Duration {
	o, ok := c.(interface{ Options() *redis.Options })
	if !ok {
		return redisSends * (redisDialBudget + read + time.Second)
	}
	opt := o.Options()
	dial := opt.DialTimeout
	if sentinelTLS {
		dial *= 2
	}
	dials := time.Duration(opt.DialerRetries) * (dial + opt.DialerRetryTimeout)
	trip := max(opt.WriteTimeout, 0) + max(opt.ReadTimeout, 0)
	send := opt.PoolTimeout + dials + (redisHandshake+1)*trip + opt.MaxRetryBackoff + time.Second
	return time.Duration(max(opt.MaxRetries, 0)+1) * send
}

// readTimeoutFor is the client's read timeout under cfg: a pipeline ending
// in WAIT is read within it.
func readTimeoutFor(cfg Config) time.Duration {
	return max(redisReadTimeout, cfg.RedisReplicaTimeout+time.Second)
}

// redisClient connects to the server or servers cfg names: one server
// (RedisURL), a primary through Sentinel (RedisSentinel: go-redis's
// failover client, which asks the Sentinels for the primary and follows
// their switch-master announcements) or a Redis Cluster (RedisCluster).
// cluster is the same client as c on a Redis Cluster, else nil; where names
// the servers for errors and logs, never with credentials.
func redisClient(cfg Config) (c redis.UniversalClient, cluster *redis.ClusterClient, where string, err error) {
	if err := CheckRedis(cfg); err != nil {
		return nil, nil, "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// A call's own deadline bounds the read timeout further
	// (ContextTimeoutEnabled): go-redis otherwise reads and writes without
	// it.
	readTimeout := readTimeoutFor(cfg)
	switch {
	case cfg.RedisSentinel != nil:
		sc := cfg.RedisSentinel
		c = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: sc.Master, SentinelAddrs: sc.Addrs,
			SentinelUsername: sc.SentinelUsername, SentinelPassword: sc.SentinelPassword,
			Username: sc.Username, Password: sc.Password,
			TLSConfig: redisTLS(cfg.RedisTLS, sc.TLS), ReadTimeout: readTimeout, ContextTimeoutEnabled: true,
		})
		return c, nil, fmt.Sprintf("primary %q through the Sentinels at %s", sc.Master, strings.Join(sc.Addrs, ",")), nil
	case cfg.RedisCluster != nil:
		rc := cfg.RedisCluster
		cluster = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: rc.Addrs, Username: rc.Username, Password: rc.Password,
			TLSConfig: redisTLS(cfg.RedisTLS, rc.TLS), ReadTimeout: readTimeout, ContextTimeoutEnabled: true,
		})
		return cluster, cluster, "the cluster at " + strings.Join(rc.Addrs, ","), nil
	}
	opt, _ := redis.ParseURL(cfg.RedisURL) // parses: CheckRedis
	if opt.TLSConfig != nil && cfg.RedisTLS != nil {
		t := cfg.RedisTLS.Clone()
		t.ServerName = cmp.Or(t.ServerName, opt.TLSConfig.ServerName)
		opt.TLSConfig = t
	}
	opt.ReadTimeout, opt.ContextTimeoutEnabled = readTimeout, true
	return redis.NewClient(opt), nil, opt.Addr, nil
}

// LogRedisClient sends go-redis's own log lines (a Sentinel announcing a
// new primary, a pool failing to dial) to log, so they keep the
// connector's format. go-redis has one logger for the whole process.
func LogRedisClient(log *slog.Logger) { redis.SetLogger(redisLogger{log}) }

// redisLogger is go-redis's logger on a slog.Logger.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.InfoContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}

// redisTLS is the TLS configuration of a mode that turned TLS on, nil for
// one that did not.
func redisTLS(t *tls.Config, on bool) *tls.Config {
	switch {
	case !on:
		return nil
	case t != nil:
		return t.Clone()
	}
	return &tls.Config{MinVersion: tls.VersionTLS12}
}

// portInRange reports whether port, a URL's (digits; "": the default),
// is a TCP port.
func portInRange(port string) bool {
	n, err := strconv.Atoi(port)
	return port == "" || err == nil && n >= 1 && n <= 65535
}

// CheckRedis returns what makes cfg's redis configuration unusable, naming
// the config key: no servers or several kinds of them, an incomplete one, a
// URL that is not redis[s]:// or whose port is no TCP port, or a setting the key layout cannot work
// with; nil when there is none. Open wraps it in ErrInvalid.
func CheckRedis(cfg Config) error {
	modes := 0
	for _, set := range []bool{cfg.RedisURL != "", cfg.RedisSentinel != nil, cfg.RedisCluster != nil} {
		if set {
			modes++
		}
	}
	// The URL may carry a password: errors name the problem, not the URL.
	u, err := url.Parse(cfg.RedisURL)
	_, perr := redis.ParseURL(cfg.RedisURL)
	switch {
	case modes == 0:
		return errors.New("the redis backend needs store.redis_url, store.redis_sentinel or store.redis_cluster_addrs")
	case modes > 1:
		return errors.New("store: set only one of redis_url, redis_sentinel and redis_cluster_addrs")
	case cfg.RedisSentinel != nil && cfg.RedisSentinel.Master == "":
		return errors.New("store.redis_sentinel.master: required")
	case cfg.RedisSentinel != nil && len(cfg.RedisSentinel.Addrs) == 0:
		return errors.New("store.redis_sentinel.addrs: required")
	case cfg.RedisCluster != nil && len(cfg.RedisCluster.Addrs) == 0:
		return errors.New("store.redis_cluster_addrs: empty")
	case cfg.RedisURL != "" && err != nil:
		return errors.New("store.redis_url: not a URL")
	case cfg.RedisURL != "" && u.Scheme != "redis" && u.Scheme != "rediss":
		return errors.New("store.redis_url: the scheme must be redis or rediss (TLS)")
	case cfg.RedisURL != "" && perr != nil:
		return errors.New("store.redis_url: does not parse as redis[s]://[user:password@]host[:port][/db][?option=value]")
	case cfg.RedisURL != "" && !portInRange(u.Port()):
		return fmt.Errorf("store.redis_url: port %s is not one of 1-65535", u.Port())
	case cfg.RedisMinReplicas < 0:
		return fmt.Errorf("store.redis_min_replicas: %d is negative", cfg.RedisMinReplicas)
	case cfg.RedisReplicaTimeout < 0:
		return fmt.Errorf("store.redis_replica_timeout: %v is negative", cfg.RedisReplicaTimeout)
	case strings.ContainsAny(cfg.RedisPrefix, "{}"):
		return fmt.Errorf("the redis key prefix %q contains { or }, which would make it the keys' hash tag", cfg.RedisPrefix)
	}
	return nil
}

// redisLayout names the key layout (redis.go) this version writes: every
// multi-key script's keys share a hash tag. Data sets written before it
// (no layout key) keep their ledgers under other names.
const redisLayout = "hashtags"

// init checks the server and the key layout, and loads or creates the
// epoch.
func (s *redisStore) init(ctx context.Context) error {
	info, err := s.c.InfoMap(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("store: redis (%s): %w", s.where, err)
	}
	if v := info["Server"]["redis_version"]; !versionAtLeast(v, minRedisVersion) {
		return fmt.Errorf("store: redis (%s) is version %q; the store needs %s or later", s.where, v, minRedisVersion)
	}
	// The epoch is read before the layout and written after it, so a
	// store that finds an epoch without a layout found a data set of an
	// earlier version, not one being created beside it.
	epoch, err := s.c.Get(ctx, s.p+"epoch").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("store: redis epoch: %w", err)
	}
	layout, err := s.c.Get(ctx, s.p+"layout").Result()
	switch {
	case err != nil && !errors.Is(err, redis.Nil):
		return fmt.Errorf("store: redis key layout: %w", err)
	case layout == "" && epoch != "":
		return fmt.Errorf("store: redis (%s) holds a data set under %q written by an earlier connector, whose ledger keys this version does not read: stop every instance, let the gateways acknowledge what is buffered, delete the keys under %q, and start again", s.where, s.p, s.p)
	case layout != "" && layout != redisLayout:
		return fmt.Errorf("store: redis (%s) holds a data set under %q of key layout %q, not %q", s.where, s.p, layout, redisLayout)
	}
	if err := s.c.SetNX(ctx, s.p+"layout", redisLayout, 0).Err(); err != nil {
		return fmt.Errorf("store: redis key layout: %w", err)
	}
	if err := s.c.SetNX(ctx, s.p+"epoch", newEpoch(), 0).Err(); err != nil {
		return fmt.Errorf("store: redis epoch: %w", err)
	}
	if s.epoch, err = s.c.Get(ctx, s.p+"epoch").Result(); err != nil {
		return fmt.Errorf("store: redis epoch: %w", err)
	}
	return nil
}
