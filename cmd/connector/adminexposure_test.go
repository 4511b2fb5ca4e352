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
