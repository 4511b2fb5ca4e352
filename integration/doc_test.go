// Package integration holds the tests that run a platform behind the real
// relay: a fake Discord, Telegram or nexscope client on one side, gateway
// sockets of relay/relaytest on the other. They live here so that no
// platform/... test binary imports relay (TestPlatformsDoNotImportRelay).
package integration

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"testing"
	"time"

	"connector/platform/discord"
	"connector/platform/discord/discordtest"
	"connector/vault"
)

// Secrets of the gateways gw1 (tenant t1) and gw2 (tenant t2).
const (
	secretGW1 = "gw1-hmac-secret-0123456789abcdef"
	secretGW2 = "gw2-hmac-secret-fedcba9876543210"
)

// sharedVault is one per process: each vault owns sweeper goroutines.
var sharedVault = vault.NewMemory(vault.Config{})

// waitCtx is a context ending 10 s from now or with the test.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// discordConfig is the Discord platform of the discordtest world on f: Lab
// is t1's, Other t2's, DMs t1's; fast reconnects and command sync.
func discordConfig(f *discordtest.Server, pub ed25519.PublicKey) discord.Config {
	return discord.Config{
		BotToken: discordtest.Token, PublicKey: hex.EncodeToString(pub), ApplicationID: f.Options().AppID,
		Guilds: map[string]string{discordtest.GuildLab: "t1", discordtest.GuildOther: "t2"}, DMTenant: "t1",
		APIBaseURL: f.URL, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		HandshakeTimeout: 2 * time.Second, CommandSyncDebounce: 20 * time.Millisecond,
	}
}
