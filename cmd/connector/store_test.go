package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connector/internal/redistest"
	"connector/store"
)

// TestStoreSection: the store section, its environment variables and what
// the banner says about it.
func TestStoreSection(t *testing.T) {
	dir := t.TempDir()
	cfg, gen, err := loadOrDefault(sources{dataDir: dir}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store.Backend != "" || cfg.Store.Path != dir || gen.DataDir != dir {
		t.Fatalf("embedded defaults: store %+v, secrets in %q; want the embedded store and the secrets in %s", cfg.Store, gen.DataDir, dir)
	}
	var banner bytes.Buffer
	printBanner(&banner, listenAddrs{Addr: "127.0.0.1:8080", OpsAddr: "127.0.0.1:9090"}, false, cfg, gen, nil, len(cfg.Tenants))
	if want := "store:     embedded, in " + filepath.Join(dir, "connector.db"); !strings.Contains(banner.String(), want) {
		t.Errorf("banner lacks %q:\n%s", want, banner.String())
	}

	// A config file's store.path is the data directory unless
	// CONNECTOR_DATA_DIR or -data-dir says otherwise.
	doc := "store: {path: " + filepath.Join(dir, "from-config") + "}\n"
	for _, c := range []struct {
		flag string
		env  map[string]string
		want string
	}{
		{"", nil, filepath.Join(dir, "from-config")},
		{"", map[string]string{"CONNECTOR_DATA_DIR": "/from-env"}, "/from-env"},
		{"/from-flag", map[string]string{"CONNECTOR_DATA_DIR": "/from-env"}, "/from-flag"},
	} {
		cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: c.flag}, envOf(c.env))
		if err != nil || cfg.Store.Path != c.want {
			t.Errorf("flag %q env %v: store.path %q %v, want %q", c.flag, c.env, cfg.Store.Path, err, c.want)
		}
	}

	// Redis: the URL may come from the environment; the banner never shows
	// its password.
	cfg, _, err = loadOrDefault(sources{configPath: writeConfig(t, "store: {backend: redis}\n")},
		envOf(map[string]string{"CONNECTOR_REDIS_URL": "redis://:hunter2-pw@127.0.0.1:6390/3"}))
	if err != nil || cfg.Store.RedisURL != "redis://:hunter2-pw@127.0.0.1:6390/3" {
		t.Fatalf("redis from the environment: %+v %v", cfg, err)
	}
	if got := cfg.Store.describe(); got != "redis at 127.0.0.1:6390/3" {
		t.Errorf("describe = %q", got)
	}

	// Sentinel, as issue 26 pins it; its passwords never in the banner.
	pinned := "store:\n  backend: redis\n  redis_sentinel: {master: mymaster, addrs: [\"10.0.0.1:26379\", \"10.0.0.2:26379\"], password: sentinel-pw-77}\n  redis_min_replicas: 1\n"
	cfg, _, err = loadOrDefault(sources{configPath: writeConfig(t, pinned)}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := cfg.Store.storeConfig()
	if err != nil || sc.RedisSentinel == nil || sc.RedisSentinel.Master != "mymaster" || len(sc.RedisSentinel.Addrs) != 2 ||
		sc.RedisSentinel.Password != "sentinel-pw-77" || sc.RedisMinReplicas != 1 || sc.RedisURL != "" {
		t.Fatalf("the pinned Sentinel config: %+v %v", sc, err)
	}
	if got := cfg.Store.describe(); got != `redis primary "mymaster" through the Sentinels at 10.0.0.1:26379,10.0.0.2:26379` {
		t.Errorf("describe = %q", got)
	}
	cluster := "store: {backend: redis, redis_cluster_addrs: [\"10.0.0.5:7000\"], redis_cluster_password: cl-pw, redis_cluster_tls: true}\n"
	cfg, _, err = loadOrDefault(sources{configPath: writeConfig(t, cluster)}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if sc, err := cfg.Store.storeConfig(); err != nil || sc.RedisCluster == nil || !sc.RedisCluster.TLS || sc.RedisCluster.Password != "cl-pw" {
		t.Fatalf("a cluster config: %+v %v", sc, err)
	}

	for doc, want := range map[string]string{
		"store: {backend: bolt}\n":  `store.backend: "bolt" is not one of embedded, redis`,
		"store: {backend: redis}\n": "store.redis_url: required for the redis backend (or set CONNECTOR_REDIS_URL)",
		"store: {backend: redis, redis_url: \"redis://h/0\", redis_cluster_addrs: [\"h:7000\"]}\n":  "set only one of redis_url, redis_sentinel and redis_cluster_addrs",
		"store: {backend: redis, redis_sentinel: {addrs: [\"h:26379\"]}}\n":                         "store.redis_sentinel.master: required",
		"store: {backend: redis, redis_url: \"http://h/0\"}\n":                                      "the scheme must be redis or rediss",
		"store: {backend: redis, redis_url: \"redis://h:99999/0\"}\n":                               "store.redis_url: port 99999 is not one of 1-65535",
		"store: {backend: redis, redis_url: \"redis://h/0\", redis_min_replicas: -1}\n":             "store.redis_min_replicas: must not be negative",
		"store: {backend: redis, redis_url: \"redis://h/0\", lease_ttl: -1s}\n":                     "store.lease_ttl: must not be negative",
		"store: {backend: redis, redis_url: \"redis://h/0\", redis_tls: {ca_file: /nonexistent}}\n": "store.redis_tls.ca_file",
		"relay: {buffer_bytes_total: -1}\n":                                                         "relay.buffer_bytes_total: must not be negative",
		"relay: {buffer_max_age: -1s}\n":                                                            "relay.buffer_max_age: must not be negative",
	} {
		_, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", strings.TrimSpace(doc), err, want)
		}
	}
}

// TestStoreRedisTLSFromConfig: a rediss:// URL with an ACL user and
// store.redis_tls.ca_file reach a TLS-only redis-server whose certificate
// the test's CA signed; without the CA file the server is not trusted.
func TestStoreRedisTLSFromConfig(t *testing.T) {
	ca := redistest.NewCA(t)
	srv := redistest.Start(t, redistest.Options{TLS: ca, Users: []string{"app on >app-pw-3b1 ~* &* +@all"}})
	url := fmt.Sprintf("rediss://app:app-pw-3b1@%s/0", srv.Addr())
	doc := fmt.Sprintf("store: {backend: redis, redis_url: %q, redis_tls: {ca_file: %q}}\n", url, ca.CAFile)
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc)}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStore(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open over TLS with the CA file: %v", err)
	}
	defer st.Close()
	if _, err := st.Ledger().Append(context.Background(), "t1", []store.Record{{Payload: []byte("over tls")}}); err != nil {
		t.Fatal(err)
	}
	cfg.Store.RedisTLS = RedisTLSConfig{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err := openStore(ctx, cfg); err == nil {
		st.Close()
		t.Fatal("a server signed by an unknown CA was trusted")
	}
}

// TestTooShortDurationsRefused: a duration set shorter than anything a
// timer can mean is refused by name, where it was accepted before:
// store.lease_ttl 1ns made an idle instance spin (its renewal and bid
// interval, a quarter of it, and its beat, a third, are zero: measured
// 64% of a core and about 10,000 Redis commands a second, and the log
// flooded), relay.ping_interval 1ns a ping per nanosecond to every
// gateway; so did a platform's (discord.reconnect_min 1ns a reconnect
// loop, nexscope.heartbeat_interval 1ns a ping per nanosecond to every
// member, slack.request_timeout 1ns every call failing at once). Zero stays the
// default; the shortest accepted values pass.
func TestTooShortDurationsRefused(t *testing.T) {
	for doc, want := range map[string]string{
		"store: {backend: redis, redis_url: \"redis://h/0\", lease_ttl: 1ns}\n":  "store.lease_ttl: 1ns is shorter than 100ms",
		"store: {backend: redis, redis_url: \"redis://h/0\", lease_ttl: 99ms}\n": "store.lease_ttl: 99ms is shorter than 100ms",
		"relay: {ping_interval: 1ns}\n":                                          "relay.ping_interval: 1ns is shorter than 1ms",
		"relay: {write_timeout: 500us}\n":                                        "relay.write_timeout: 500µs is shorter than 1ms",
		"http: {idle_timeout: 1ns}\n":                                            "http.idle_timeout: 1ns is shorter than 1ms",
		"media: {ttl: 1ns}\n":                                                    "media.ttl: 1ns is shorter than 1ms",
		"enroll: {max_token_lifetime: 1ns}\n":                                    "enroll.max_token_lifetime: 1ns is shorter than 1ms",
		"shutdown_grace: 1ns\n":                                                  "shutdown_grace: 1ns is shorter than 1ms",
		"discord: {bot_token: x.y.z, public_key: \"" + strings.Repeat("00", 32) + "\", application_id: \"9000\", reconnect_min: 1ns}\n":   "discord.reconnect_min: 1ns is shorter than 1ms",
		"telegram: {token: \"123456:abc\", request_timeout: 1ns}\n":                                                                       "telegram.request_timeout: 1ns is shorter than 1ms",
		"slack: {bot_token: xoxb-1, signing_secret: s, request_timeout: 1ns}\n":                                                           "slack.request_timeout: 1ns is shorter than 1ms",
		"whatsapp: {app_secret: s, access_token: a, verify_token: v, request_timeout: 1us}\n":                                             "whatsapp.request_timeout: 1µs is shorter than 1ms",
		"nexscope: {token: x, heartbeat_interval: 1ns}\n":                                                                                 "nexscope: heartbeat_interval: 1ns is shorter than 1ms",
		"store: {backend: redis, redis_url: \"redis://h/0\", lease_ttl: 100ms, redis_replica_timeout: 1ms}\nrelay: {ping_interval: 0s}\n": "",
	} {
		_, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", strings.TrimSpace(doc), err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error saying %q", strings.TrimSpace(doc), err, want)
		}
	}
}

// TestCheckRefusesARedisURLOpenCannotParse: a redis_url store.Open would
// refuse (a database that is not a number, an option that does not parse)
// fails config load and -check too, and the error does not carry the
// URL's password.
func TestCheckRefusesARedisURLOpenCannotParse(t *testing.T) {
	for _, u := range []string{"redis://u:hunter2@h:6379/x", "redis://u:hunter2@h:6379/0?dial_timeout=zz", "redis://u:hunter2@h:6379/0?nope=1"} {
		doc := fmt.Sprintf("tenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}]\nstore: {backend: redis, redis_url: %q}\n", u)
		code, out, errOut := runCmd(t, "serve", "-config", writeConfig(t, doc), "-check")
		if code != 1 || !strings.Contains(errOut, "store.redis_url") || strings.Contains(out+errOut, "hunter2") {
			t.Errorf("redis_url %q: exit %d, stdout %q, stderr %q; want exit 1 naming store.redis_url without the password", u, code, out, errOut)
		}
	}
}

// TestRedisAddressNeedsTheRedisBackend: a Redis address (redis_url, from
// the file or $CONNECTOR_REDIS_URL, redis_sentinel, redis_cluster_addrs)
// with store.backend left embedded is refused by name, never ignored: each
// instance meant to share that Redis would otherwise run on its own
// embedded store. The error never shows the URL's password.
func TestRedisAddressNeedsTheRedisBackend(t *testing.T) {
	for _, c := range []struct {
		doc  string
		env  map[string]string
		want string
	}{
		{"store: {redis_url: \"redis://:hunter2-pw@h:6379/0\"}\n", nil, "store.redis_url"},
		{"store: {backend: embedded, redis_url: \"redis://:hunter2-pw@h:6379/0\"}\n", nil, "store.redis_url"},
		{"listen: 127.0.0.1:0\n", map[string]string{"CONNECTOR_REDIS_URL": "redis://:hunter2-pw@h:6379/0"}, "store.redis_url"},
		{"store: {redis_sentinel: {master: m, addrs: [\"h:26379\"]}}\n", nil, "store.redis_sentinel"},
		{"store: {redis_cluster_addrs: [\"h:7000\"]}\n", nil, "store.redis_cluster_addrs"},
	} {
		_, _, err := loadOrDefault(sources{configPath: writeConfig(t, c.doc), dataDir: t.TempDir()}, envOf(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "store.backend: redis") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s %v: %v; want an error naming %s and store.backend: redis, without the password", strings.TrimSpace(c.doc), c.env, err, c.want)
		}
	}
}
