package main

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"connector/platform/discord"
	"connector/platform/nexscope"
	"connector/platform/slack"
	"connector/platform/telegram"
	"connector/platform/whatsapp"
)

// TestEveryKeyVariableSetsItsKey sets each key's variable to a value of its
// type and checks that exactly that value changed, so no row of the
// generated table is a dead variable; and that every key has a variable or
// is set by its list's or map's.
func TestEveryKeyVariableSetsItsKey(t *testing.T) {
	samples := map[reflect.Type]string{
		reflect.TypeFor[string]():                           "127.0.0.1:7",
		reflect.TypeFor[int]():                              "7",
		reflect.TypeFor[int64]():                            "7",
		reflect.TypeFor[float64]():                          "7.5",
		reflect.TypeFor[bool]():                             "true",
		reflect.TypeFor[time.Duration]():                    "7s",
		reflect.TypeFor[[]string]():                         "[a]",
		reflect.TypeFor[map[string]string]():                `{"7": t1}`,
		reflect.TypeFor[[]TenantConfig]():                   "[{id: t1}]",
		reflect.TypeFor[map[string]discord.TenantConfig]():  "{t1: {weight: 2}}",
		reflect.TypeFor[map[string]telegram.TenantConfig](): "{t1: {require_mention: true}}",
		reflect.TypeFor[map[string]slack.TenantConfig]():    "{t1: {require_mention: true}}",
		reflect.TypeFor[*bool]():                            "true",
		reflect.TypeFor[telegram.TopicBindings]():           `[{chat_id: "-100", topics: []}]`,
		reflect.TypeFor[[]nexscope.Room]():                  "[{name: r1}]",
		reflect.TypeFor[*whatsapp.OptIn]():                  "yes",
		reflect.TypeFor[whatsapp.List]():                    "+44 7700 900123, 15550100",
		reflect.TypeFor[map[string]whatsapp.TenantConfig](): "{t1: {dm_policy: pairing}}",
	}
	keys := configKeys()
	if len(keys) < 100 {
		t.Fatalf("only %d keys", len(keys))
	}
	reserved := []string{envConfigPath, envTokenSecret}
	seen := map[string]string{}
	for _, k := range keys {
		if k.Env == "" {
			if k.index != nil && !k.isSection() { // index is nil within a list or map
				t.Errorf("key %s has no variable and is in no list or map", k.Key)
			}
			continue
		}
		for _, name := range []string{k.Env, envAliases[k.Key]} {
			if other, dup := seen[name]; dup && name != "" {
				t.Errorf("keys %s and %s share the variable %s", other, k.Key, name)
			}
			seen[name] = k.Key
		}
		if slices.Contains(reserved, k.Env) {
			t.Errorf("key %s takes the variable %s, which means something else", k.Key, k.Env)
		}
		if strings.HasPrefix(k.Env, "CONNECTOR_GATEWAY_SECRETS_") {
			t.Errorf("key %s collides with the gateway secrets variables", k.Key)
		}
		if k.Env == envDataDir {
			continue // read by dataDir: TestDataDirOrder
		}
		raw, ok := samples[k.typ()]
		if !ok {
			t.Errorf("%s: no sample value for type %s; add one", k.Env, k.typ())
			continue
		}
		var c Config
		if err := c.applyKeyEnv(envOf(map[string]string{k.Env: raw})); err != nil {
			t.Errorf("%s=%s: %v", k.Env, raw, err)
			continue
		}
		if fieldAt(reflect.ValueOf(&c).Elem(), k.index).IsZero() {
			t.Errorf("%s=%s did not set %s", k.Env, raw, k.Key)
		}
		if c.fromEnv[k.Key] != k.Env {
			t.Errorf("%s=%s: the key's source is recorded as %q", k.Env, raw, c.fromEnv[k.Key])
		}
		c.fromEnv = nil // where the value came from, not a value
		if n := countNonZero(reflect.ValueOf(c)); n != 1 {
			t.Errorf("%s=%s set %d values, want only %s: %+v", k.Env, raw, n, k.Key, c)
		}
		if alias := envAliases[k.Key]; alias != "" {
			var c Config
			if err := c.applyKeyEnv(envOf(map[string]string{alias: raw})); err != nil || fieldAt(reflect.ValueOf(&c).Elem(), k.index).IsZero() {
				t.Errorf("%s=%s did not set %s: %v", alias, raw, k.Key, err)
			}
			c = Config{}
			if err := c.applyKeyEnv(envOf(map[string]string{alias: raw, k.Env: ""})); err != nil || fieldAt(reflect.ValueOf(&c).Elem(), k.index).IsZero() {
				t.Errorf("%s= (empty) hid %s=%s: %v", k.Env, alias, raw, err)
			}
		}
	}
}

// countNonZero counts the non-zero leaves of a value: struct fields,
// section pointers, list items and map entries.
func countNonZero(v reflect.Value) int {
	switch {
	case v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct:
		return countNonZero(v.Elem())
	case v.Kind() == reflect.Struct && v.Type().PkgPath() != "time":
		n := 0
		for i := range v.NumField() {
			n += countNonZero(v.Field(i))
		}
		return n
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
		n := 0
		for i := range v.Len() {
			n += countNonZero(v.Index(i))
		}
		return n
	case v.Kind() == reflect.Map && v.Type().Elem().Kind() == reflect.Struct:
		n := 0
		for it := v.MapRange(); it.Next(); {
			n += countNonZero(it.Value())
		}
		return n
	case v.IsZero():
		return 0
	}
	return 1
}

// TestListAndMapVariables: a list or map variable replaces the file's value
// whole, is read strictly (an unknown key is named with its path) and a
// type error names the key inside it without echoing a secret.
func TestListAndMapVariables(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	doc := "tenants: [{id: file, gateways: [{id: gwf, secrets: [sf]}]}]\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"CONNECTOR_TENANTS":             `[{"id": "acme", "gateways": [{"id": "gw1", "secrets": ["s1"]}]}, {id: globex, gateways: [{id: gw2}]}]`,
		"CONNECTOR_GATEWAY_SECRETS_GW2": "s2",
		"CONNECTOR_TELEGRAM_CHATS":      `{"-0100": acme}`,
		"TELEGRAM_BOT_TOKEN":            "123456:abc",
		"CONNECTOR_TELEGRAM_TENANTS":    "{acme: {weight: 3, require_mention: yes}}",
		"CONNECTOR_NEXSCOPE_ROOMS":      "[{name: default, tenant: globex}]",
		"CONNECTOR_NEXSCOPE_TOKEN":      "n-token-7f3a9c2e5b1d8e04",
	}
	cfg, _, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tenants) != 2 || cfg.Tenants[0].ID != "acme" || cfg.Tenants[1].Gateways[0].Secrets[0] != "s2" {
		t.Fatalf("tenants: %+v", cfg.Tenants)
	}
	if cfg.Telegram == nil || cfg.Telegram.Chats["-100"] != "acme" || cfg.Telegram.Tenants["acme"].Weight != 3 || !*cfg.Telegram.Tenants["acme"].RequireMention {
		t.Fatalf("telegram: %+v", cfg.Telegram)
	}
	if cfg.Nexscope == nil || cfg.Nexscope.Rooms[0].Tenant != "globex" || cfg.Nexscope.Token != "n-token-7f3a9c2e5b1d8e04" {
		t.Fatalf("nexscope: %+v", cfg.Nexscope)
	}
	for v, want := range map[string]string{
		"CONNECTOR_TENANTS=[{id: a, gatways: []}]":                           `unknown key "gatways" in tenants[0]`,
		"CONNECTOR_TENANTS=[{id: a, gateways: [{id: g, secrets: hunter2}]}]": "tenants[0].gateways[0].secrets: a str where a list belongs",
		"CONNECTOR_DISCORD_TENANTS={a: {weight: many}}":                      "weight",
		"CONNECTOR_TELEGRAM_GLOBAL_PER_SECOND=fast":                          `telegram.global_per_second: "fast" is not a whole number`,
	} {
		k, val, _ := strings.Cut(v, "=")
		_, _, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, envOf(map[string]string{k: val}))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), k) {
			t.Errorf("%s: error %v, want the variable and %q", v, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error %v shows the secret", v, err)
		}
	}
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
// connector reads, whose listeners are on loopback: without tls it serves
// plain HTTP, which belongs behind a reverse proxy, not on every interface.
func TestConfigExampleParses(t *testing.T) {
	code, out, errOut := runCmd(t, "config", "example")
	if code != 0 {
		t.Fatalf("exit %d %q %q", code, out, errOut)
	}
	cfg, err := ParseConfig([]byte(out))
	if err != nil {
		t.Fatalf("the example does not parse: %v", err)
	}
	for key, addr := range map[string]string{"listen": cfg.Listen, "ops.listen": cfg.Ops.Listen} {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("the example's %s is %q, not a loopback address", key, addr)
		}
	}
	if cfg.TLS.CertFile != "" {
		t.Errorf("the example sets tls: %+v", cfg.TLS)
	}
}

// TestStrayConnectorVariablesAreWarned: a CONNECTOR_* variable nothing
// reads (a misspelling) is warned about at start, with the closest name the
// connector reads; the ones it reads are not.
func TestStrayConnectorVariablesAreWarned(t *testing.T) {
	got := strayEnvVars([]string{"CONNECTOR_LOG_LEVL=debug", "CONNECTOR_TENANTS=[]", "CONNECTOR_GATEWAY_SECRETS_GW1=s",
		"CONNECTOR_ADMIN_TOKEN=x", "CONNECTOR_DATADIR=/x", "CONNECTOR_WHATEVER=1", "HOME=/root", "CONNECTOR_TOKEN_SECRET=s"})
	want := []strayEnv{{"CONNECTOR_LOG_LEVL", "CONNECTOR_LOG_LEVEL"}, {"CONNECTOR_DATADIR", "CONNECTOR_DATA_DIR"}, {"CONNECTOR_WHATEVER", ""}}
	if !slices.Equal(got, want) {
		t.Fatalf("stray %v, want %v", got, want)
	}
	t.Setenv("CONNECTOR_OPS_LISTN", "127.0.0.1:9999")
	code, _, errOut := runCmd(t, "serve", "-data-dir", t.TempDir(), "-check")
	if code != 0 || !strings.Contains(errOut, `"variable":"CONNECTOR_OPS_LISTN","did_you_mean":"CONNECTOR_OPS_LISTEN"`) {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
}
