package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connector/idtoken/idtokentest"
)

// TestAdminTokenMustNotBeWeak: an admin token must have 16 characters and
// about 64 bits by tokenBits. Before, any 16 characters were accepted, 16
// identical ones included.
func TestAdminTokenMustNotBeWeak(t *testing.T) {
	for token, ok := range map[string]bool{
		"aaaaaaaaaaaaaaaa":                 false, // 0 bits
		"abababababababababababababababab": false, // 32 bits
		"changeme-changeme":                false, // 50 bits
		"0000000000000000000000000000000000000000000000000000000000000001": false,
		"short-but-random":                 false, // 16 characters, 57 bits
		"3f9c1b7e52a04d8e9b6c2f1a7d5e8c03": true,  // openssl rand -hex 16
		"Zx8-Qm2_Lr5pWv9sTk3nYb7cHd1fGj4a": true,
		adminToken:                         true, // the admin tests' own
	} {
		doc := "admin: {listen: 127.0.0.1:0, token: \"" + token + "\"}\n"
		_, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
		switch {
		case ok && err != nil:
			t.Errorf("%q refused: %v", token, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), "admin.token")):
			t.Errorf("%q: %v, want it refused naming admin.token", token, err)
		}
	}
	// From the environment the same rule holds.
	_, _, err := loadOrDefault(sources{configPath: writeConfig(t, "admin: {listen: 127.0.0.1:0}\n"), dataDir: t.TempDir()},
		envOf(map[string]string{"CONNECTOR_ADMIN_TOKEN": strings.Repeat("x", 40)}))
	if err == nil || !strings.Contains(err.Error(), "too weak") {
		t.Errorf("40 identical characters from CONNECTOR_ADMIN_TOKEN: %v, want refused as too weak", err)
	}
}

// TestListenerSecretsMustNotBeWeak: the Telegram webhook secret (in
// webhook mode) and the nexscope token, which anyone reaching the public
// listener may try with nothing counting the tries, must be as strong as
// an admin token (16 characters, about 64 bits by tokenBits), from the file
// or the environment, and the refusal does not show them. Before, a
// webhook secret or nexscope token of one character was taken: 64 requests
// found it, and with it any user's updates in any tenant's chat, or every
// tenant's rooms.
func TestListenerSecretsMustNotBeWeak(t *testing.T) {
	tenants := "tenants: [{id: t1, gateways: [{id: gw1, secrets: [s3cr3t-gateway]}]}]\n"
	for _, c := range []struct{ key, doc string }{
		{"telegram.webhook_secret", "telegram: {bot_token: \"123456:abc\", webhook_url: \"https://connector.example/telegram/webhook\", webhook_secret: %q}\n"},
		{"nexscope.token", "nexscope: {token: %q, rooms: [{name: default, tenant: t1}]}\n"},
	} {
		for secret, ok := range map[string]bool{
			"a":                                false,
			"abababababababababababababababab": false, // 32 bits
			"short-but-random":                 false, // 16 characters, 57 bits
			"3f9c1b7e52a04d8e9b6c2f1a7d5e8c03": true,  // openssl rand -hex 16
		} {
			_, _, err := loadOrDefault(sources{configPath: writeConfig(t, tenants+fmt.Sprintf(c.doc, secret)), dataDir: t.TempDir()}, noEnv)
			switch {
			case ok && err != nil:
				t.Errorf("%s %q refused: %v", c.key, secret, err)
			case !ok && (err == nil || !strings.Contains(err.Error(), c.key)):
				t.Errorf("%s %q: %v, want it refused naming %s", c.key, secret, err, c.key)
			case err != nil && len(secret) > 1 && strings.Contains(err.Error(), secret):
				t.Errorf("%s: the refusal %q shows the secret", c.key, err)
			}
		}
	}
	// From the environment the same rule holds; polling needs no secret.
	for v, want := range map[string]string{"TELEGRAM_WEBHOOK_SECRET": "telegram.webhook_secret", "NEXSCOPE_TOKEN": "nexscope.token"} {
		doc := tenants + "telegram: {bot_token: \"123456:abc\", webhook_url: \"https://connector.example/telegram/webhook\", webhook_secret: 3f9c1b7e52a04d8e9b6c2f1a7d5e8c03}\n" +
			"nexscope: {token: 3f9c1b7e52a04d8e9b6c2f1a7d5e8c03, rooms: [{name: default, tenant: t1}]}\n"
		_, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, envOf(map[string]string{v: "x1"}))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=x1: %v, want refused naming %s", v, err, want)
		}
	}
	polling := tenants + "telegram: {bot_token: \"123456:abc\", webhook_secret: x}\n"
	if _, _, err := loadOrDefault(sources{configPath: writeConfig(t, polling), dataDir: t.TempDir()}, noEnv); err != nil {
		t.Errorf("polling with a short, unused webhook_secret: %v", err)
	}
}

// TestAdminListenerOffLoopbackWarns: serving the admin API on an address
// other hosts can reach (0.0.0.0) logs a warning when it starts; on
// loopback it does not. Before, 0.0.0.0 was taken without a word.
func TestAdminListenerOffLoopbackWarns(t *testing.T) {
	for listen, warn := range map[string]bool{"0.0.0.0:0": true, "127.0.0.1:0": false} {
		doc := "listen: 127.0.0.1:0\nadmin: {listen: \"" + listen + "\", token: \"" + adminToken + "\"}\n"
		cfg, gen, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
		if err != nil {
			t.Fatal(err)
		}
		logs := &syncBuffer{}
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			done <- serve(ctx, randomOpsPort(cfg), gen, slog.New(slog.NewJSONHandler(logs, nil)), &syncBuffer{},
				func(a listenAddrs) { ready <- a.AdminAddr })
		}()
		listening(t, ready, done)
		// The warning is logged before the listeners are announced.
		got := strings.Contains(logs.String(), "admin API listening on a non-loopback address")
		cancel()
		served(t, done)
		if got != warn {
			t.Errorf("admin.listen %s: warned %v, want %v; log:\n%s", listen, got, warn, logs.String())
		}
	}
}

// TestEnrollWithoutAudienceWarns: identity tokens verified without
// enroll.audience log a warning when the connector starts (a /manage/*
// token then provisions any gateway of its tenant); with it, none. Before,
// only the docs said so.
func TestEnrollWithoutAudienceWarns(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "authority.pem")
	if err := os.WriteFile(keyFile, idtokentest.PublicPEM(t, idtokentest.Key(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	for audience, warn := range map[string]bool{"": true, "connector": false} {
		doc := fmt.Sprintf("listen: 127.0.0.1:0\nenroll: {public_key_file: %q, audience: %q}\n", keyFile, audience)
		cfg, gen, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
		if err != nil {
			t.Fatal(err)
		}
		logs := &syncBuffer{}
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			done <- serve(ctx, randomOpsPort(cfg), gen, slog.New(slog.NewJSONHandler(logs, nil)), &syncBuffer{},
				func(a listenAddrs) { ready <- a.Addr })
		}()
		listening(t, ready, done)
		// The warning is logged before the listeners are announced.
		got := strings.Contains(logs.String(), "enroll.audience is unset")
		cancel()
		served(t, done)
		if got != warn {
			t.Errorf("enroll.audience %q: warned %v, want %v; log:\n%s", audience, got, warn, logs.String())
		}
	}
}
