package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"connector/platform"
	"connector/platform/discord"
	"connector/platform/discord/discordtest"
	"connector/relay"
	"connector/vault"
)

// discordWorkers is how many interaction webhooks are in flight at once.
const discordWorkers = 16

// discordDriver drives events as Discord would: signed Ed25519 slash-command
// interactions POSTed to /discord/interactions, one guild per tenant, with
// a fake Discord (discordtest) for the REST API and the Gateway session the
// platform keeps. Latency runs from the scheduled POST to the gateway's read.
type discordDriver struct {
	fake     *discordtest.Server
	cleanups []func()
	priv     ed25519.PrivateKey
	guilds   []string // per tenant
	channels []string // per tenant

	url string
	webhookPool
}

// Helper lets the driver stand in for the testing.TB discordtest.New asks for.
func (d *discordDriver) Helper() {}

// Cleanup registers fn to run when the driver closes.
func (d *discordDriver) Cleanup(fn func()) { d.cleanups = append(d.cleanups, fn) }

// newPlatform starts the fake Discord and builds the platform with a guild
// per tenant.
func (d *discordDriver) newPlatform(tenants []relay.Tenant) (platform.Platform, error) {
	botToken := randomToken()
	d.fake = discordtest.New(d, discordtest.Options{Token: botToken})
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	d.priv = priv
	guilds := make(map[string]string, len(tenants))
	for i, t := range tenants {
		g := strconv.Itoa(800_000_000_000_000_000 + i)
		c := strconv.Itoa(810_000_000_000_000_000 + i)
		d.fake.AddGuild(discordtest.Guild{ID: g, Name: "Guild " + strconv.Itoa(i)},
			discordtest.Channel{ID: c, Type: 0, GuildID: g, Name: "general"})
		guilds[g] = t.ID
		d.guilds, d.channels = append(d.guilds, g), append(d.channels, c)
	}
	return discord.New(discord.Config{
		BotToken: botToken, PublicKey: hex.EncodeToString(pub), ApplicationID: d.fake.Options().AppID,
		Guilds: guilds, APIBaseURL: d.fake.URL, GatewayURL: d.fake.GatewayURL,
	}, platform.Deps{
		Log: slog.New(slog.DiscardHandler), Vault: vault.NewMemory(vault.Config{}),
		Key: relay.KeyFunc(tenants), Metrics: dropCounter{&d.webhookPool},
	})
}

// start waits for the platform's Gateway session and starts the webhook
// workers; progress is signalled when an interaction fails.
func (d *discordDriver) start(baseURL string, progress chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	if err := d.fake.WaitSession(ctx, 1); err != nil {
		return fmt.Errorf("discord platform never opened its Gateway session: %w", err)
	}
	d.url = baseURL + "/discord/interactions"
	d.webhookPool.start(discordWorkers, progress, d.post)
	return nil
}

// post sends interaction seq and reports whether Discord's webhook
// contract was met: 200 with a deferred response.
func (d *discordDriver) post(j webhookJob) bool {
	t := j.seq % len(d.guilds)
	user := strconv.Itoa(900_000_000_000_000_000 + (j.seq/len(d.guilds))%sessionsPerGateway)
	text := string(append(appendStamp(nil, j.at), messageBody...))
	body, _ := json.Marshal(map[string]any{
		"id": strconv.Itoa(1_300_000_000_000_000_000 + j.seq), "application_id": d.fake.Options().AppID,
		"type": 2, "token": "bench-interaction-token-" + strconv.Itoa(j.seq), "version": 1,
		"guild_id": d.guilds[t], "channel_id": d.channels[t],
		"channel": map[string]any{"id": d.channels[t], "type": 0, "guild_id": d.guilds[t], "name": "general"},
		"data": map[string]any{"id": "1", "name": "ask", "type": 1, "options": []any{
			map[string]any{"type": 3, "name": "prompt", "value": text},
		}},
		"member": map[string]any{"roles": []any{}, "user": map[string]any{
			"id": user, "username": "user" + user[len(user)-1:], "global_name": "Bench"}},
	})
	resp, err := d.client.Do(discordtest.InteractionRequest(d.url, d.priv, time.Now(), body))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	ack, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && string(ack) == `{"type":5}`
}

// close stops the workers and the fake Discord.
func (d *discordDriver) close() {
	d.stop()
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
}
