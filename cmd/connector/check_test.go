package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connector/platform/discord/discordtest"
	"connector/platform/telegram/telegramtest"
	"connector/relay/relaytest"
	"connector/store"
)

// noEnv is an empty environment.
func noEnv(string) (string, bool) { return "", false }

// memStore is an in-memory store closed when the test ends.
func memStore(t *testing.T) store.Store {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// writeConfig writes doc to a config file in a fresh directory.
func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "connector.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// everyPlatformConfig is a config enabling Discord, Telegram and nexscope
// against local fakes, with its credentials inline.
func everyPlatformConfig(t *testing.T) string {
	dfake := discordtest.New(t, discordtest.Options{Token: "MTQwMDAwMDAwMDAwMDAwMDAw.check-bot-token"})
	dfake.AddGuild(discordtest.Guild{ID: "500", Name: "Lab"})
	tfake := telegramtest.New(t, "123456:TELEGRAM-check-token")
	pub, _, _ := ed25519.GenerateKey(nil)
	return fmt.Sprintf(`listen: 127.0.0.1:0
tenants:
  - id: t1
    gateways:
      - id: gw1
        secrets: ["s1"]
discord:
  bot_token: MTQwMDAwMDAwMDAwMDAwMDAw.check-bot-token
  public_key: %s
  application_id: "9000"
  api_base_url: %s
  gateway_url: %s
  guilds: {"500": t1}
telegram:
  token: "123456:TELEGRAM-check-token"
  api_server_url: %s
  chats: {"42": t1}
nexscope:
  token: check-nexscope-token
  rooms: [{name: default, tenant: t1}]
`, hex.EncodeToString(pub), dfake.URL, dfake.GatewayURL, tfake.URL)
}

// TestCheckAcceptsWhatServeRuns: a config with every platform passes -check,
// and serve starts with the same file.
func TestCheckAcceptsWhatServeRuns(t *testing.T) {
	path := writeConfig(t, everyPlatformConfig(t))
	if code, out, errOut := runCmd(t, "serve", "-config", path, "-check"); code != 0 || out != "config ok\n" {
		t.Fatalf("-check: exit %d %q %q", code, out, errOut)
	}
	cfg, gen, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, randomOpsPort(cfg), gen, relaytest.TestLogger(t), &syncBuffer{}, func(a listenAddrs) { ready <- a.Addr })
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve refused what -check accepted: %v", err)
	case <-time.After(serveWait):
		t.Fatalf("timed out after %v waiting for serve to listen", serveWait)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// TestCheckRejectsWhatServeWouldFailOn: TLS files that are missing or not
// readable as a certificate, and listen addresses serve cannot listen on,
// fail -check with an error naming the key.
func TestCheckRejectsWhatServeWouldFailOn(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, _ := selfSigned(t, dir)
	base := "tenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}]\n"
	cases := map[string]string{
		"tls: {cert_file: " + filepath.Join(dir, "missing.pem") + ", key_file: " + keyFile + "}\n":      "missing.pem",
		"tls: {cert_file: " + certFile + ", key_file: " + filepath.Join(dir, "missing-key.pem") + "}\n": "missing-key.pem",
		"tls: {cert_file: " + dir + ", key_file: " + keyFile + "}\n":                                    "tls",
		"tls: {cert_file: " + garbage + ", key_file: " + keyFile + "}\n":                                "tls",
		"tls: {cert_file: " + certFile + ", key_file: " + certFile + "}\n":                              "tls",
		"listen: 127.0.0.1\n":           "listen",
		"listen: 127.0.0.1:99999\n":     "listen",
		"listen: localhost:http-nope\n": "listen",
	}
	for doc, want := range cases {
		path := writeConfig(t, base+doc)
		code, _, errOut := runCmd(t, "serve", "-config", path, "-check")
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("config %q: exit %d, stderr %q, want exit 1 naming %q", doc, code, errOut, want)
		}
	}
	// With a good certificate the same shape passes.
	path := writeConfig(t, base+"tls: {cert_file: "+certFile+", key_file: "+keyFile+"}\n")
	if code, out, errOut := runCmd(t, "serve", "-config", path, "-check"); code != 0 {
		t.Fatalf("good TLS files: exit %d %q %q", code, out, errOut)
	}
}

// TestIDsAreNormalizedAndDuplicatesRefused: a guild or chat id is read as
// the number it spells, so "0500" routes guild 500, and one id under two
// spellings is an error naming both.
func TestIDsAreNormalizedAndDuplicatesRefused(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	base := fmt.Sprintf(`tenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}, {id: t2, gateways: [{id: gw2, secrets: [s2]}]}]
discord: {bot_token: x.y.z, public_key: %s, application_id: "9000"}
telegram: {token: "123456:abc"}
`, hex.EncodeToString(pub))
	refused := map[string][]string{
		`discord: {guilds: {"500": t1, "0500": t2}}`:         {`"500"`, `"0500"`, "discord.guilds"},
		`telegram: {chats: {"42": t1, "042": t1}}`:           {`"42"`, `"042"`, "telegram.chats"},
		`telegram: {chats: {"-100123": t1, "-0100123": t2}}`: {`"-100123"`, `"-0100123"`, "telegram.chats"},
	}
	for section, want := range refused {
		doc := strings.Replace(base, section[:strings.Index(section, ":")]+": {", section[:len(section)-1]+", ", 1)
		path := writeConfig(t, doc)
		code, _, errOut := runCmd(t, "serve", "-config", path, "-check")
		for _, w := range want {
			if code != 1 || !strings.Contains(errOut, w) {
				t.Errorf("%s: exit %d, stderr %q, want exit 1 naming %s", section, code, errOut, w)
			}
		}
	}

	doc := strings.Replace(base, "discord: {", `discord: {guilds: {"0500": t1}, `, 1)
	doc = strings.Replace(doc, "telegram: {", `telegram: {chats: {"042": t2, "-0100123": t1}, `, 1)
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.Discord.Guilds; len(g) != 1 || g["500"] != "t1" {
		t.Errorf("discord.guilds %v, want guild 500 -> t1", g)
	}
	if c := cfg.Telegram.Chats; len(c) != 2 || c["42"] != "t2" || c["-100123"] != "t1" {
		t.Errorf("telegram.chats %v, want 42 -> t2 and -100123 -> t1", c)
	}
}

// TestGatewaysSharingASecretsVariableAreRefused: gw-a and gw.a would both
// read CONNECTOR_GATEWAY_SECRETS_GW_A, so one tenant's secret would
// authenticate the other tenant's gateway. serve and -check refuse it.
func TestGatewaysSharingASecretsVariableAreRefused(t *testing.T) {
	path := writeConfig(t, `listen: 127.0.0.1:0
tenants:
  - id: a
    gateways: [{id: gw-a, secrets: [secret-a]}]
  - id: b
    gateways: [{id: gw.a, secrets: [secret-b]}]
`)
	code, _, errOut := runCmd(t, "serve", "-config", path, "-check")
	// serve loads its config the same way before it listens.
	_, _, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, noEnv)
	for _, w := range []string{`"gw-a"`, `"gw.a"`, "CONNECTOR_GATEWAY_SECRETS_GW_A"} {
		if code != 1 || !strings.Contains(errOut, w) {
			t.Errorf("-check: exit %d, stderr %q, want exit 1 naming %s", code, errOut, w)
		}
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("serve: config error %v, want one naming %s", err, w)
		}
	}
}

// TestDeclaredIDsFollowTheAPIRule: a YAML tenant id "acme/gateways" would
// share registry keys with tenant acme's guards (and ids are parts of vault
// keys, store prefixes and metrics labels), so a declared tenant or gateway
// id the admin API would refuse fails serve and -check, naming the key and
// the rule.
func TestDeclaredIDsFollowTheAPIRule(t *testing.T) {
	for _, c := range []struct{ doc, key string }{
		{"tenants:\n  - id: acme\n  - id: acme/gateways\n", "tenants[1].id"},
		{"tenants:\n  - id: \"a:b\"\n", "tenants[0].id"},
		{"tenants:\n  - id: a\n    gateways: [{id: gw/1, secrets: [s]}]\n", "tenants[0].gateways[0].id"},
	} {
		path := writeConfig(t, "listen: 127.0.0.1:0\n"+c.doc)
		code, _, errOut := runCmd(t, "serve", "-config", path, "-check")
		_, _, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, noEnv)
		for _, w := range []string{c.key, "want 1 to 64 of A-Z a-z 0-9 . _ -"} {
			if code != 1 || !strings.Contains(errOut, w) {
				t.Errorf("%q -check: exit %d, stderr %q, want exit 1 naming %s", c.doc, code, errOut, w)
			}
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q serve: config error %v, want one naming %s", c.doc, err, w)
			}
		}
	}
}

// TestCheckRejectsDirectoriesServeCannotCreate: a store.path or media.dir
// that cannot be created (under /proc, or below a file) fails -check with
// an error naming the key, as serve would fail on it; one that can be
// created passes, and -check leaves it uncreated.
func TestCheckRejectsDirectoriesServeCannotCreate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	base := "tenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}]\n"
	good := "store: {path: " + filepath.Join(dir, "data") + "}\nmedia: {dir: " + filepath.Join(dir, "new", "media") + "}\n"
	for doc, want := range map[string]string{
		"store: {path: /proc/connector-check}\n":            "store.path",
		"store: {path: " + file + "}\n":                     "store.path",
		"store: {path: " + filepath.Join(file, "x") + "}\n": "store.path",
		"media: {dir: /proc/connector-check/media}\n":       "media.dir",
		"media: {dir: " + filepath.Join(file, "m") + "}\n":  "media.dir",
	} {
		path := writeConfig(t, base+doc)
		code, _, errOut := runCmd(t, "serve", "-config", path, "-check")
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("config %q: exit %d, stderr %q, want exit 1 naming %s", doc, code, errOut, want)
		}
	}
	path := writeConfig(t, base+good)
	if code, out, errOut := runCmd(t, "serve", "-config", path, "-check"); code != 0 {
		t.Fatalf("creatable directories: exit %d %q %q", code, out, errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("-check left %v in %s, want only a-file", entries, dir)
	}
}
