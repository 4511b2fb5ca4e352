package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock"
	"connector/registry"
	"connector/relay/relaytest"
)

// bannerPlatforms returns the GATEWAY_RELAY_PLATFORMS value a banner
// recommends, failing the test when it recommends none.
func bannerPlatforms(t *testing.T, banner string) string {
	t.Helper()
	m := regexp.MustCompile(`GATEWAY_RELAY_PLATFORMS=(\S+)`).FindStringSubmatch(banner)
	if m == nil {
		t.Fatalf("banner recommends no GATEWAY_RELAY_PLATFORMS:\n%s", banner)
	}
	return m[1]
}

// TestBannerRecommendsGatewaySettings: the banner gives every gateway
// setting, names the data directory on embedded defaults, and lists the
// platforms a gateway should say hello for: those it knows by name, then
// relay for nexscope, which it files under relay.
func TestBannerRecommendsGatewaySettings(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	cfg, gen, err := loadOrDefault(sources{dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, discard, memStore(t))
	if err != nil {
		t.Fatal(err)
	}
	var banner bytes.Buffer
	printBanner(&banner, listenAddrs{Addr: "127.0.0.1:8080", OpsAddr: "127.0.0.1:9090"}, false, cfg, gen, c.platforms, len(cfg.Tenants))
	for _, want := range []string{
		"GATEWAY_RELAY_URL=http://127.0.0.1:8080", "GATEWAY_RELAY_ID=local",
		"GATEWAY_RELAY_SECRET=" + gen.GatewaySecret, gen.DataDir,
	} {
		if !strings.Contains(banner.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, banner.String())
		}
	}
	if got := bannerPlatforms(t, banner.String()); got != "relay" {
		t.Errorf("embedded defaults (nexscope only): GATEWAY_RELAY_PLATFORMS=%s, want relay", got)
	}

	cfg, gen, err = loadOrDefault(sources{configPath: writeConfig(t, everyPlatformConfig(t)), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c, err = build(cfg, discard, memStore(t)); err != nil {
		t.Fatal(err)
	}
	banner.Reset()
	printBanner(&banner, listenAddrs{Addr: "127.0.0.1:8080", OpsAddr: "127.0.0.1:9090"}, false, cfg, gen, c.platforms, len(cfg.Tenants))
	if got := bannerPlatforms(t, banner.String()); got != "discord,telegram,relay" {
		t.Errorf("every platform: GATEWAY_RELAY_PLATFORMS=%s, want discord,telegram,relay", got)
	}
}

// TestBannerPlatformsGetEachPlatformsOps: a gateway that says hello for the
// platforms the banner recommends gets Discord's and Telegram's own
// descriptors (edit, follow_up), which hello relay alone does not, and
// still reaches nexscope rooms through its relay identity.
func TestBannerPlatformsGetEachPlatformsOps(t *testing.T) {
	cfg, gen, err := loadOrDefault(sources{configPath: writeConfig(t, everyPlatformConfig(t)), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var banner syncBuffer
	go func() {
		done <- serve(ctx, randomOpsPort(cfg), gen, relaytest.TestLogger(t), &banner, func(a listenAddrs) { ready <- a.Addr })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(serveWait):
		t.Fatalf("timed out after %v waiting for serve to listen", serveWait)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), serveWait)
	defer dcancel()
	dial := func() *relaytest.Client {
		gw, err := relaytest.Dial(dctx, "ws://"+addr+"/relay", relaytest.Token("gw1", "s1", time.Now()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = gw.CloseNow() })
		return gw
	}

	gw := dial()
	for _, name := range strings.Split(bannerPlatforms(t, banner.String()), ",") {
		d, err := gw.Hello(dctx, name, "")
		if err != nil || d.Platform != name {
			t.Fatalf("hello %s: %+v %v", name, d, err)
		}
		if name == "discord" && !(d.HasOp(contract.OpEdit) && d.HasOp(contract.OpFollowUp)) {
			t.Errorf("discord descriptor ops %v lack edit or follow_up", d.SupportedOps)
		}
		if name == "telegram" && !d.HasOp(contract.OpEdit) {
			t.Errorf("telegram descriptor ops %v lack edit", d.SupportedOps)
		}
	}

	// A nexscope member's message reaches the gateway, and the reply,
	// tagged relay as the gateway files nexscope chats, reaches the member.
	member, _, err := websocket.Dial(dctx, "ws://"+addr+"/ws?name=alice&v=1&token=check-nexscope-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer member.CloseNow()
	err = member.Write(dctx, websocket.MessageText, []byte(`{"type":"msg","msgId":"m1","from":"alice","to":["hermes"],"role":"user","threadId":"t1","text":"hello bot"}`))
	if err != nil {
		t.Fatal(err)
	}
	in, err := gw.Next(dctx, contract.TypeInbound)
	if err != nil || in.Event.Text != "hello bot" {
		t.Fatalf("inbound from nexscope: %+v %v", in.Event, err)
	}
	for _, tag := range []string{"relay", "nexscope"} {
		r, err := gw.Outbound(dctx, tag, map[string]any{"op": "send", "chat_id": in.Event.Source.ChatID, "content": "reply tagged " + tag,
			"reply_to": nil, "metadata": map[string]any{"thread_id": in.Event.Source.ThreadID.Value}})
		if err != nil || !r.Success {
			t.Fatalf("reply tagged %q: %+v %v", tag, r, err)
		}
		for {
			_, msg, err := member.Read(dctx)
			if err != nil {
				t.Fatalf("waiting for the reply tagged %q: %v", tag, err)
			}
			if strings.Contains(string(msg), "reply tagged "+tag) {
				break
			}
		}
	}

	// What the gateway gets without GATEWAY_RELAY_PLATFORMS.
	stock := dial()
	if d, err := stock.Hello(dctx, "relay", ""); err != nil || d.HasOp(contract.OpEdit) || d.HasOp(contract.OpFollowUp) {
		t.Fatalf("hello relay alone: %v, ops %v; the premise (no edit, no follow_up) no longer holds", err, d.SupportedOps)
	}
}

// TestReadmeExplainsEveryBannerSetting: each GATEWAY_RELAY_* variable the
// banner prints has a row in the README's table, and the README still gives
// a newcomer its two commands.
func TestReadmeExplainsEveryBannerSetting(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg, gen, err := loadOrDefault(sources{configPath: writeConfig(t, everyPlatformConfig(t)), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), memStore(t))
	if err != nil {
		t.Fatal(err)
	}
	var banner bytes.Buffer
	printBanner(&banner, listenAddrs{Addr: "127.0.0.1:8080", OpsAddr: "127.0.0.1:9090"}, false, cfg, gen, c.platforms, len(cfg.Tenants))
	if _, gen, err = loadOrDefault(sources{dataDir: t.TempDir()}, noEnv); err != nil {
		t.Fatal(err)
	}
	printBanner(&banner, listenAddrs{Addr: "127.0.0.1:8080", OpsAddr: "127.0.0.1:9090"}, false, cfg, gen, c.platforms, len(cfg.Tenants))
	names := regexp.MustCompile(`GATEWAY_RELAY_[A-Z_]+`).FindAllString(banner.String(), -1)
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) < 4 {
		t.Fatalf("banner names %v, want at least URL, ID, SECRET and PLATFORMS", names)
	}
	for _, name := range names {
		if !strings.Contains(string(readme), "| `"+name+"` |") {
			t.Errorf("README's gateway table has no row for %s", name)
		}
	}
	for _, cmd := range []string{"```sh\ngo run ./cmd/connector\n```", "```sh\ngo test -race ./...\n```"} {
		if !strings.Contains(string(readme), cmd) {
			t.Errorf("README lost the newcomer's command %q", cmd)
		}
	}
}

// TestBannerCountsEveryTenantAndNamesTheAdminToken: the banner counts the
// tenants the admin API added (kept in the store) with the config's, says
// the store holds them, and names where the admin token came from.
func TestBannerCountsEveryTenantAndNamesTheAdminToken(t *testing.T) {
	st := memStore(t)
	if err := registry.New(st, clock.System).CreateTenant(context.Background(), registry.Tenant{ID: "added"}); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\ntenants:\n  - id: t1\n    gateways: [{id: gw1, secrets: [s1]}]\n")
	env := map[string]string{"CONNECTOR_ADMIN_TOKEN": "admin-token-0123456789"}
	cfg, gen, err := loadOrDefault(sources{configPath: path, dataDir: t.TempDir()}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	conn, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.relay.Shutdown(context.Background())
	var banner bytes.Buffer
	addrs := listenAddrs{Addr: "127.0.0.1:8080", OpsAddr: "127.0.0.1:9090", AdminAddr: "127.0.0.1:9091"}
	printBanner(&banner, addrs, false, cfg, gen, conn.platforms, int(conn.live.tenants.Load()))
	for _, want := range []string{"tenants: 2 (1 from the config, 1 added with the admin API)", "(bearer $CONNECTOR_ADMIN_TOKEN; keep private)",
		"the tenants, gateways, secrets and\n             bindings added with the admin API; restoring a backup rolls all of them back"} {
		if !strings.Contains(banner.String(), want) {
			t.Errorf("banner lacks %q:\n%s", want, banner.String())
		}
	}
	// Written in the file, the token is named as the file's key.
	cfg, gen, err = loadOrDefault(sources{configPath: writeConfig(t, "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0, token: admin-token-0123456789}\n"), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	banner.Reset()
	printBanner(&banner, addrs, false, cfg, gen, nil, 0)
	if !strings.Contains(banner.String(), "(bearer admin.token of the config file; keep private)") {
		t.Errorf("banner:\n%s", banner.String())
	}
}
