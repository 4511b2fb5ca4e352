package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
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
	if got := describeStore(&cfg.Store); got != "redis at 127.0.0.1:6390/3" {
		t.Errorf("describe = %q", got)
	}

	for doc, want := range map[string]string{
		"store: {backend: bolt}\n":          `store.backend: "bolt" is not one of embedded, redis`,
		"store: {backend: redis}\n":         "store.redis_url: required for the redis backend (or set CONNECTOR_REDIS_URL)",
		"relay: {buffer_bytes_total: -1}\n": "relay.buffer_bytes_total: must not be negative",
		"relay: {buffer_max_age: -1s}\n":    "relay.buffer_max_age: must not be negative",
	} {
		_, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", strings.TrimSpace(doc), err, want)
		}
	}
}
