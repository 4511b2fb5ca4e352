package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/discord/discordtest"
	"connector/registry"
	"connector/vault"
)

// TestGrantPerPlatform: Telegram private chats and Discord channels share
// id space in practice (both are decimal integers), and the connector's
// platforms share one capability vault. Tenant a's linked Discord user 94
// speaks in channel 801 of unbound guild 800 (a is granted Discord 801);
// tenant b's linked Telegram users 801 and 802 write in their private
// chats, whose ids are theirs (b is granted Telegram 801 and 802). Each
// grant counts on its own platform only, through every gateway's real
// send (platform.Execute, Authorize): b may not post into a's Discord
// channel 801 nor into nobody's Discord channel 802, a may not post into
// b's user's Telegram DM 801, and each tenant's own sends pass.
func TestGrantPerPlatform(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary")
	}
	r := newHijackRig(t)
	r.dfake.AddChannel(discordtest.Channel{ID: "802", Type: 0, GuildID: "800", Name: "quiet"})
	r.cli(t, "bind", "a", "discord", "user", "94")
	r.cli(t, "bind", "b", "telegram", "user", "801")
	r.cli(t, "bind", "b", "telegram", "user", "802")

	r.discordSay(t, "94", "801", "800", "a's 94 in discord 801")
	r.expect(t, "a", "a's 94 in discord 801")
	for _, user := range []int64{801, 802} {
		r.n++
		r.telegram(t, r.n, user, "b's user in its telegram DM")
		r.expect(t, "b", "b's user in its telegram DM")
	}

	for _, c := range []struct{ tenant, platform, chat, whose string }{
		{"b", "discord", "801", "a's channel, by a's Discord grant"},
		{"b", "discord", "802", "nobody's channel; b's grant is Telegram's 802"},
		{"a", "telegram", "801", "b's user's DM; a's grant is Discord's 801"},
	} {
		if res := r.send(t, c.tenant, c.platform, c.chat, "hijacked by "+c.tenant); res.Success || res.Code != contract.CodeEgressDeclined {
			t.Errorf("tenant %s's send into %s %s (%s): %+v, want %s", c.tenant, c.platform, c.chat, c.whose, res, contract.CodeEgressDeclined)
		}
	}
	for _, c := range []struct{ tenant, platform, chat string }{
		{"a", "discord", "801"}, {"b", "telegram", "801"}, {"b", "telegram", "802"},
	} {
		if res := r.send(t, c.tenant, c.platform, c.chat, c.tenant+" answers"); !res.Success {
			t.Fatalf("tenant %s's send into its own %s %s: %+v", c.tenant, c.platform, c.chat, res)
		}
	}
	if got := r.dfake.Messages("801"); len(got) != 1 || got[0].Content != "a answers" {
		t.Fatalf("Discord channel 801 holds %+v, want a's answer alone", got)
	}
	if got := r.dfake.Messages("802"); len(got) != 0 {
		t.Fatalf("Discord channel 802 holds %+v, want nothing", got)
	}
	for _, call := range r.tfake.Calls("sendMessage") {
		if strings.Contains(call.Form["text"], "hijacked") {
			t.Fatalf("a's message reached Telegram: %v", call.Form)
		}
	}
}

// TestTenantMadeAgainInheritsNoGrants: tenant acme, stored through the
// registry, holds a Discord channel by grant and posted a message there;
// acme is deleted and created again under its id, and the registry is
// applied. The vault the platforms are built with (platformDeps) knows
// acme no longer once it was deleted (vault.Known: check 8 declines its
// actions), and once it was made again finds neither the grant nor the mark for the new acme, which may
// neither post there nor edit the earlier acme's message, by grant nor by a
// binding or claim (Grants.PostedByAnother); what it is
// granted itself counts.
func TestTenantMadeAgainInheritsNoGrants(t *testing.T) {
	st := memStore(t)
	ctx := t.Context()
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	cfg.Media.Dir = "" // build's platforms hold it
	deps, err := platformDeps(cfg, slog.New(slog.DiscardHandler), st, c.live.keys, newMetrics(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, clock.System)
	create := func() {
		t.Helper()
		if err := reg.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
			t.Fatal(err)
		}
		if err := c.live.apply(ctx); err != nil {
			t.Fatal(err)
		}
	}
	create()
	grants := platform.NewGrants("discord", deps.Vault, nil, nil)
	grants.Add(ctx, "801", "800", "acme", time.Time{})
	grants.Posted(ctx, "801", "901", "acme", time.Time{})
	if !grants.Has(ctx, "801", "acme") || !grants.PostedBy(ctx, "801", "901", "acme") {
		t.Fatal("acme's grant or mark not found")
	}
	if err := reg.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := c.live.apply(ctx); err != nil {
		t.Fatal(err)
	}
	if vault.Known(deps.Vault, "acme") || !vault.Known(deps.Vault, "t1") {
		t.Fatalf("once acme was deleted the vault knows acme: %v, declared t1: %v; want false, true (check 8)", vault.Known(deps.Vault, "acme"), vault.Known(deps.Vault, "t1"))
	}
	create()
	for name, g := range map[string]*platform.Grants{"the instance that stored them": grants, "a fresh look": platform.NewGrants("discord", deps.Vault, nil, nil)} {
		if g.Has(ctx, "801", "acme") {
			t.Errorf("%s: acme made again holds the earlier acme's grant", name)
		}
		if g.PostedBy(ctx, "801", "901", "acme") {
			t.Errorf("%s: acme made again may edit the earlier acme's message", name)
		}
		if another, err := g.PostedByAnother(ctx, "801", "901", "acme"); !another || err != nil {
			t.Errorf("%s: acme made again, binding or claiming 801, may edit the earlier acme's message (err %v)", name, err)
		}
	}
	grants.Add(ctx, "801", "800", "acme", time.Time{})
	grants.Posted(ctx, "801", "902", "acme", time.Time{})
	if !grants.Has(ctx, "801", "acme") || !grants.PostedBy(ctx, "801", "902", "acme") {
		t.Error("acme made again lost its own grant or mark")
	}
}

// TestRelayTenantsCarryTheirCreation: the relay is handed each stored
// tenant's creation (registry.Tenant.Created), which changes when the
// tenant is deleted and created again under its id: the relay then drops
// what the earlier tenant left (its buffered inbound, session owners and
// profiles; relay.Tenant.Created).
func TestRelayTenantsCarryTheirCreation(t *testing.T) {
	st := memStore(t)
	ctx := t.Context()
	clk := clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	reg := registry.New(st, clk)
	created := func() time.Time {
		t.Helper()
		if err := reg.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
			t.Fatal(err)
		}
		s, _, err := reg.Effective(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tenants := relayTenants(s, nil)
		if len(tenants) != 1 || tenants[0].Created.IsZero() {
			t.Fatalf("relay tenants %+v, want acme with its creation", tenants)
		}
		return tenants[0].Created
	}
	first := created()
	if err := reg.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if again := created(); !again.After(first) {
		t.Fatalf("acme made again is handed %v, want after %v", again, first)
	}
}
