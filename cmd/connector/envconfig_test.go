package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestEveryKeyVariableSetsItsKey sets each key's variable to a value of its
// type and checks that exactly that field changed, so no row of the
// generated table is a dead variable.
func TestEveryKeyVariableSetsItsKey(t *testing.T) {
	samples := map[reflect.Type]string{
		reflect.TypeFor[string]():        "127.0.0.1:7",
		reflect.TypeFor[int]():           "7",
		reflect.TypeFor[int64]():         "7",
		reflect.TypeFor[bool]():          "true",
		reflect.TypeFor[time.Duration](): "7s",
	}
	keys := envKeys()
	if len(keys) < 10 {
		t.Fatalf("only %d key variables", len(keys))
	}
	reserved := []string{envConfigPath, envDataDir, envTokenSecret}
	for _, k := range keys {
		if k.own {
			continue // read where the key is owned, tested there
		}
		raw, ok := samples[k.typ]
		if !ok {
			t.Errorf("%s: no sample value for type %s; add one", k.Env, k.typ)
			continue
		}
		for _, r := range reserved {
			if k.Env == r {
				t.Errorf("key %s takes the variable %s, which means something else", k.Key, r)
			}
		}
		if strings.HasPrefix(k.Env, "CONNECTOR_GATEWAY_SECRETS_") {
			t.Errorf("key %s collides with the gateway secrets variables", k.Key)
		}
		var c Config
		if err := c.applyKeyEnv(envOf(map[string]string{k.Env: raw})); err != nil {
			t.Errorf("%s=%s: %v", k.Env, raw, err)
			continue
		}
		if reflect.ValueOf(c).FieldByIndex(k.index).IsZero() {
			t.Errorf("%s=%s did not set %s", k.Env, raw, k.Key)
		}
		if n := countNonZero(reflect.ValueOf(c)); n != 1 {
			t.Errorf("%s=%s set %d values, want only %s: %+v", k.Env, raw, n, k.Key, c)
		}
	}
}

// countNonZero counts the non-zero leaves of a struct value.
func countNonZero(v reflect.Value) int {
	if v.Kind() != reflect.Struct || v.Type().PkgPath() == "time" {
		if v.IsZero() {
			return 0
		}
		return 1
	}
	n := 0
	for i := range v.NumField() {
		n += countNonZero(v.Field(i))
	}
	return n
}

// TestKeyVariablesOverrideTheFileAndFlagsOverrideThem: file < environment
// < -listen, and a bad value names its variable, its key and the fix.
func TestKeyVariablesOverrideTheFileAndFlagsOverrideThem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	doc := "listen: 127.0.0.1:1\nhttp: {idle_timeout: 1s}\nlog: {level: warn}\ntenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}]\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CONNECTOR_LISTEN": "127.0.0.1:2", "CONNECTOR_HTTP_IDLE_TIMEOUT": "2m", "CONNECTOR_RELAY_ACK_WINDOW": "64"}
	cfg, _, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:2" || cfg.HTTP.IdleTimeout != 2*time.Minute || cfg.Relay.AckWindow != 64 || cfg.Log.Level != "warn" {
		t.Fatalf("environment over file: listen %s idle %s ack %d level %s", cfg.Listen, cfg.HTTP.IdleTimeout, cfg.Relay.AckWindow, cfg.Log.Level)
	}
	cfg, _, err = loadOrDefault(sources{configPath: path, listen: "127.0.0.1:3", dataDir: t.TempDir()}, envOf(env))
	if err != nil || cfg.Listen != "127.0.0.1:3" {
		t.Fatalf("-listen over environment: %v %v", cfg, err)
	}
	for v, want := range map[string]string{
		"CONNECTOR_SHUTDOWN_GRACE=30":     "write a duration such as 30s",
		"CONNECTOR_RELAY_ACK_WINDOW=lots": `"lots" is not a whole number`,
		"CONNECTOR_LOG_LEVEL=loud":        "log.level",
	} {
		k, val, _ := strings.Cut(v, "=")
		_, _, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, envOf(map[string]string{k: val}))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want mention of %q", v, err, want)
		}
		if err != nil && k != "CONNECTOR_LOG_LEVEL" && !strings.Contains(err.Error(), k) {
			t.Errorf("%s: error %v does not name the variable", v, err)
		}
	}
}

// TestConfigFileSearch: -config, then $CONNECTOR_CONFIG, then the first
// search path that exists, else embedded defaults ("").
func TestConfigFileSearch(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	search := []string{first, second}
	if got := configPath("", search, noEnv); got != "" {
		t.Fatalf("nothing there: %q", got)
	}
	if err := os.WriteFile(second, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := configPath("", search, noEnv); got != second {
		t.Fatalf("only the second exists: %q", got)
	}
	if err := os.WriteFile(first, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := configPath("", search, noEnv); got != first {
		t.Fatalf("both exist: %q", got)
	}
	env := envOf(map[string]string{envConfigPath: "/from/env.yaml"})
	if got := configPath("", search, env); got != "/from/env.yaml" {
		t.Fatalf("$CONNECTOR_CONFIG: %q", got)
	}
	if got := configPath("/from/flag.yaml", search, env); got != "/from/flag.yaml" {
		t.Fatalf("-config: %q", got)
	}
}

// TestConfigExampleParses: connector config example prints a file the
// connector reads.
func TestConfigExampleParses(t *testing.T) {
	code, out, errOut := runCmd(t, "config", "example")
	if code != 0 || !strings.Contains(out, "ops: {listen: 127.0.0.1:9090}") {
		t.Fatalf("exit %d %q %q", code, out, errOut)
	}
	if _, err := ParseConfig([]byte(out)); err != nil {
		t.Fatalf("the example does not parse: %v", err)
	}
}
