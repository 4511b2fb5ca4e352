package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigTypeErrorsNameTheKeyAndTheFix: a value of the wrong kind is
// reported with its key path, its line and how to write it.
func TestConfigTypeErrorsNameTheKeyAndTheFix(t *testing.T) {
	for doc, want := range map[string][]string{
		"shutdown_grace: 30\n":                                                        {"shutdown_grace (line 1)", "write a duration such as 30s"},
		"listen: 127.0.0.1:0\nrelay:\n  ack_window: lots\n":                           {"relay.ack_window (line 3)", `"lots" is not a whole number`},
		"relay: {ping_interval: 1.5}\n":                                               {"relay.ping_interval (line 1)", "write a duration such as 1.5s"},
		"relay: {clock_skew: soon}\n":                                                 {"relay.clock_skew (line 1)", `"soon" is not a duration`},
		"tenants:\n  - id: t1\n    gateways:\n      - id: gw1\n        secrets: s1\n": {"tenants[0].gateways[0].secrets (line 5)", "where a list belongs"},
		"tenants:\n  - id: t1\n    session:\n      group_sessions_per_user: maybe\n":  {"tenants[0].session.group_sessions_per_user (line 4)", "write true or false"},
		"log: [debug]\n":                        {"log (line 1)", "where a section of keys belongs"},
		"http: {max_header_bytes: 64k}\n":       {"http.max_header_bytes (line 1)", "not a whole number"},
		"listen: 127.0.0.1:0\nlisten_typo: x\n": {`unknown key "listen_typo" (line 2)`},
	} {
		_, err := ParseConfig([]byte(doc))
		if err == nil {
			t.Errorf("%q: accepted", doc)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not say %q", doc, err, w)
			}
		}
		if strings.Contains(err.Error(), "cannot unmarshal") {
			t.Errorf("%q: error %q still reads as yaml's", doc, err)
		}
	}
}

// TestConfigSyntaxErrorsNameTheLineOfTheProblem: the YAML parser names the
// line where the enclosing block starts; the error names the line of the
// problem (and the block's when they differ).
func TestConfigSyntaxErrorsNameTheLineOfTheProblem(t *testing.T) {
	for doc, want := range map[string]string{
		"listen: 127.0.0.1:8080\ntenants:\n  - id: t1\n   gateways: []\n": `line 4: did not find expected '-' indicator (in the block that starts on line 2)`,
		"listen: x\ntenants:\n  - id: t1\n    gateways:\n   - id: gw1\n":  `line 5: did not find expected '-' indicator (in the block that starts on line 2)`,
		"listen: x\nlog:\n  level: info\n format: json\n":                 `line 4: did not find expected key (in the block that starts on line 3)`,
		"listen: x\nlog:\n  level: info\n   format: json\n":               `line 4: mapping values are not allowed in this context`,
		"tenants: [{id: t1}\nlisten: x\n":                                 `line 1: did not find expected ',' or ']'`,
	} {
		_, err := ParseConfig([]byte(doc))
		if err == nil || err.Error() != "config: "+want {
			t.Errorf("%q: error %v, want %q", doc, err, want)
		}
	}
}

// TestConfigErrorsNameTheFile: an error about the file's content names the
// file, whether the parser, the decoder or validation found it.
func TestConfigErrorsNameTheFile(t *testing.T) {
	for doc, want := range map[string]string{
		"listen: 127.0.0.1:8080\ntenants:\n  - id: t1\n   gateways: []\n": ": line 4: did not find",
		"listen_typo: x\n":      `: unknown key "listen_typo" (line 1)`,
		"log:\n  level: loud\n": ": log.level:",
		"listen: nowhere\n":     ": listen:",
	} {
		path := filepath.Join(t.TempDir(), "connector.yaml")
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCmd(t, "serve", "-config", path, "-check")
		if code != 1 || !strings.HasPrefix(errOut, "connector: config "+path+want) {
			t.Errorf("%q: exit %d, stderr %q, want it to start with %q", doc, code, errOut, "connector: config "+path+want)
		}
	}
}

// FuzzParseConfig: any document parses and validates or fails with an
// error (numbers out of range among the seeds), never a panic or a hang,
// whatever line syntaxLine finds for a syntax error. The files
// store.redis_tls names are not read.
func FuzzParseConfig(f *testing.F) {
	for _, doc := range []string{"listen: 127.0.0.1:8080\ntenants:\n  - id: t1\n   gateways: []\n", "a: [1, 2\nb: 3\n",
		"log:\n  level: info\n format: json\n", "tenants: [{id: t1, gateways: [{id: g, secrets: [s]}]}]\n", exampleConfig,
		// Numbers out of range: refused by Validate, never a panic.
		"relay: {buffer_entries: -1, send_queue_bytes: 9223372036854775807}\nmedia: {max_bytes: -5}\n",
		"http: {max_header_bytes: -1}\nstore: {redis_min_replicas: -1}\ntenants: [{id: t1, max_gateways: -3}]\n",
		"discord: {global_per_second: .nan, tenants: {t1: {weight: 9007199254740993}}}\n",
		"nexscope: {token: x, max_payload: 9223372036854775807, rooms: [{name: r, max_users: -1}]}\n",
		"telegram: {token: \"1:a\", dedupe_window: -1, tenants: {t1: {weight: -1}}}\nshutdown_grace: 1ns\n"} {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if len(doc) > 64<<10 {
			return
		}
		c, err := ParseConfig(doc)
		if err == nil {
			c.Store.RedisTLS = RedisTLSConfig{} // Validate reads its files: a fuzzed path (a FIFO, /dev/zero) would hang
			err = cmp.Or(c.normalize(), c.Validate())
		}
		if err != nil && err.Error() == "" {
			t.Fatal("an empty error")
		}
	})
}

// TestConfigTypeErrorsKeepLongSecretsOut: a long value of the wrong kind,
// which yaml shortens in its error ("s3cr3tV..."), is still placed at its
// key, so a secret's first characters are not repeated: a gateway secret,
// a token, a Redis URL.
func TestConfigTypeErrorsKeepLongSecretsOut(t *testing.T) {
	for doc, key := range map[string]string{
		"tenants: [{id: acme, gateways: [{id: g, secrets: s3cr3tVALUE-long}]}]\n":       "tenants[0].gateways[0].secrets (line 1)",
		"telegram: {webhook_secret: [x]}\nhttp: {max_header_bytes: s3cr3tVALUE-long}\n": "http.max_header_bytes (line 2)",
	} {
		_, err := ParseConfig([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: error %v does not name %s", doc, err, key)
			continue
		}
		if strings.Contains(doc, "secrets:") && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%q: error %q repeats the secret's beginning", doc, err)
		}
	}
}

// TestConfigTypeErrorsOnOneLineNameTheirKeys: on a one-line flow-style
// section, a value of the wrong kind is placed at its own key, not at the
// first value of the same kind on the line: the Go type the key decodes
// into tells them apart, and of two of one type each error takes its own.
// A secret's value stays out. Before, both were blamed on addrs or master.
func TestConfigTypeErrorsOnOneLineNameTheirKeys(t *testing.T) {
	for doc, want := range map[string][]string{
		"store: {backend: redis, redis_sentinel: {addrs: [a:1], password: [x]}}\n":              {"store.redis_sentinel.password (line 1)"},
		"store: {backend: redis, redis_sentinel: {master: [m], addrs: [a:1], password: [x]}}\n": {"store.redis_sentinel.master (line 1)", "store.redis_sentinel.password (line 1)"},
		"relay: {ack_window: 7, clock_skew: 7}\n":                                               {"relay.clock_skew (line 1)"},
	} {
		_, err := ParseConfig([]byte(doc))
		if err == nil {
			t.Errorf("%q: accepted", doc)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not name %s", doc, err, w)
			}
		}
		if n := strings.Count(err.Error(), "(line 1)"); n != len(want) {
			t.Errorf("%q: error %q places %d errors, want %d", doc, err, n, len(want))
		}
	}
}

// TestConfigTagMismatchKeepsSecretsOut: a value whose explicit tag does
// not fit it (bot_token: !!int ...), which yaml reports with the whole
// value, is placed at its key, and a secret's value is not repeated, in
// the file or in a variable's value. Before, the error (and the SIGHUP
// reload's log line) held the whole secret.
func TestConfigTagMismatchKeepsSecretsOut(t *testing.T) {
	for doc, key := range map[string]string{
		"discord: {bot_token: !!int s3cr3tVALUE-long}\n":                                       "discord.bot_token (line 1)",
		"admin:\n  listen: 127.0.0.1:0\n  token: !!float s3cr3tVALUE-long\n":                   "admin.token (line 3)",
		"tenants: [{id: acme, gateways: [{id: g, secrets: [ok, !!bool s3cr3tVALUE-long]}]}]\n": "tenants[0].gateways[0].secrets[1] (line 1)",
		"http: {max_header_bytes: !!int s3cr3t}\n":                                             "http.max_header_bytes (line 1): tagged !!int but not one",
	} {
		_, err := ParseConfig([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: error %v does not name %s", doc, err, key)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%q: error %q repeats the secret", doc, err)
		}
	}
	var c Config
	err := c.applyKeyEnv(func(name string) (string, bool) {
		return "[{id: acme, gateways: [{id: g, secrets: [!!int s3cr3tVALUE-long]}]}]", name == "CONNECTOR_TENANTS"
	})
	if err == nil || !strings.Contains(err.Error(), "CONNECTOR_TENANTS") || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("CONNECTOR_TENANTS: error %v, want one naming the variable, without the secret", err)
	}
}

// TestConfigNestedMergesAreCheckedAtOnce: a chain of anchors, each merged
// several times into the next, is checked for unknown keys in one pass
// over each anchor; before, the check walked every merge of every merge
// (8^11 visits for this 1 KB file), and serve, -check and a SIGHUP reload
// spun for hours.
func TestConfigNestedMergesAreCheckedAtOnce(t *testing.T) {
	doc := "{level: info}"
	for i := 1; i < 12; i++ {
		doc = fmt.Sprintf("{<<: &a%d %s%s}", i-1, doc, strings.Repeat(fmt.Sprintf(", <<: *a%d", i-1), 7))
	}
	done := make(chan error, 1)
	go func() {
		_, err := ParseConfig([]byte("log: " + doc + "\n"))
		done <- err
	}()
	// A bound on a hang (the old code spun for hours), not on speed.
	const wait = 2 * time.Minute
	select {
	case err := <-done:
		if err == nil {
			t.Error("a mapping repeating the merge key was accepted")
		}
	case <-time.After(wait):
		t.Fatalf("ParseConfig of a %d-byte document of nested merges had not returned after %v", len(doc)+6, wait)
	}
}

// TestConfigWithManyTypeErrorsIsRefusedAtOnce: a file with thousands of
// values of the wrong kind is refused at once, naming the first ten and
// counting the rest; before, placing each error scanned every value (40,000
// of them: minutes), and the message named them all.
func TestConfigWithManyTypeErrorsIsRefusedAtOnce(t *testing.T) {
	const n = 40_000
	doc := "tenants:\n  - id: t\n    gateways:\n      - id: g\n        secrets:\n" + strings.Repeat("          - [x]\n", n)
	done := make(chan error, 1)
	go func() {
		_, err := ParseConfig([]byte(doc))
		done <- err
	}()
	// A bound on a hang, not on speed: the old code also named every error,
	// which the check below refuses however long it took.
	const wait = 2 * time.Minute
	select {
	case err := <-done:
		want := fmt.Sprintf("; and %d more", n-10)
		if err == nil || !strings.HasSuffix(err.Error(), want) || !strings.Contains(err.Error(), "secrets[9] (line 15)") {
			t.Errorf("error %.300v..., want the first ten placed and ending %q", err, want)
		}
	case <-time.After(wait):
		t.Fatalf("ParseConfig of %d values of the wrong kind had not returned after %v", n, wait)
	}
}
