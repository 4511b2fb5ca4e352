package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// envOf is a lookup over a fixed environment.
func envOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// TestDefaultsKeepTheirSecretsAcrossRestarts: two starts on embedded
// defaults against the same data directory give the gateway the same
// secret (the gateway stops dialing for good after a 4401 that follows a
// handshake, so a new secret per start would end the local dev loop).
func TestDefaultsKeepTheirSecretsAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	_, first, err := loadOrDefault(sources{dataDir: dir}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	_, second, err := loadOrDefault(sources{dataDir: dir}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if first.GatewaySecret == "" || first.GatewaySecret != second.GatewaySecret || first.NexscopeToken != second.NexscopeToken {
		t.Fatalf("restart changed the generated secrets: %+v then %+v", first, second)
	}
	if first.DataDir != dir {
		t.Fatalf("DataDir %q, want %q", first.DataDir, dir)
	}
	for _, name := range []string{gatewaySecretFile, nexscopeTokenFile} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v, want 0600", name, err, st.Mode())
		}
	}
	_, other, err := loadOrDefault(sources{dataDir: t.TempDir()}, noEnv)
	if err != nil || other.GatewaySecret == first.GatewaySecret {
		t.Fatalf("another data directory got the same secret (%v)", err)
	}
}

// TestStoredSecretConcurrentStartsAgree: starts racing on an empty data
// directory all end up with the one secret that was stored.
func TestStoredSecretConcurrentStartsAgree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "connector")
	got := make([]string, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			s, err := storedSecret(dir, gatewaySecretFile)
			if err != nil {
				t.Error(err)
			}
			got[i] = s
		})
	}
	wg.Wait()
	for _, s := range got {
		if s == "" || s != got[0] {
			t.Fatalf("concurrent starts disagree: %q", got)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("data directory holds %d files, want just %s", len(entries), gatewaySecretFile)
	}
	if err := os.WriteFile(filepath.Join(dir, gatewaySecretFile), []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := storedSecret(dir, gatewaySecretFile); err == nil || !strings.Contains(err.Error(), gatewaySecretFile) {
		t.Fatalf("an empty secret file: %v, want an error naming it", err)
	}
}

// TestDataDirLocation: -data-dir, then CONNECTOR_DATA_DIR, then
// store.path, then the XDG state directory, then ~/.local/state; with none
// of them an error.
func TestDataDirLocation(t *testing.T) {
	every := map[string]string{"CONNECTOR_DATA_DIR": "/env", "XDG_STATE_HOME": "/xdg", "HOME": "/home/u"}
	cases := []struct {
		flag, config string
		env          map[string]string
		want         string
	}{
		{"/flag", "/config", every, "/flag"},
		{"", "/config", every, "/env"},
		{"", "/config", map[string]string{"XDG_STATE_HOME": "/xdg", "HOME": "/home/u"}, "/config"},
		{"", "", every, "/env"},
		{"", "", map[string]string{"XDG_STATE_HOME": "/xdg", "HOME": "/home/u"}, "/xdg/connector"},
		{"", "", map[string]string{"XDG_STATE_HOME": "relative", "HOME": "/home/u"}, "/home/u/.local/state/connector"},
		{"", "", map[string]string{"HOME": "/home/u"}, "/home/u/.local/state/connector"},
	}
	for _, c := range cases {
		if got, err := dataDir(c.flag, c.config, envOf(c.env)); err != nil || got != c.want {
			t.Errorf("flag %q store.path %q env %v: %q %v, want %q", c.flag, c.config, c.env, got, err, c.want)
		}
	}
	if _, err := dataDir("", "", noEnv); err == nil || !strings.Contains(err.Error(), "CONNECTOR_DATA_DIR") {
		t.Errorf("no home: %v, want an error pointing at CONNECTOR_DATA_DIR", err)
	}
}

// TestMediaFollowsTheDataDirOnRedis: on the redis backend the data
// directory holds only media, and -data-dir and $CONNECTOR_DATA_DIR
// override store.path there as on the embedded backend: the media
// directory is <data directory>/media, not store.path's.
func TestMediaFollowsTheDataDirOnRedis(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "connector.yaml")
	yaml := "store: {backend: redis, redis_url: \"redis://127.0.0.1:6379/0\", path: " + filepath.Join(dir, "config") + "}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		flag string
		env  map[string]string
		want string
	}{
		{filepath.Join(dir, "flag"), nil, filepath.Join(dir, "flag", "media")},
		{"", map[string]string{"CONNECTOR_DATA_DIR": filepath.Join(dir, "env")}, filepath.Join(dir, "env", "media")},
		{"", nil, filepath.Join(dir, "config", "media")},
	}
	for _, c := range cases {
		cfg, _, err := loadOrDefault(sources{configPath: path, dataDir: c.flag}, envOf(c.env))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Media.Dir != c.want {
			t.Errorf("-data-dir %q, env %v: media.dir %q, want %q", c.flag, c.env, cfg.Media.Dir, c.want)
		}
	}
}
