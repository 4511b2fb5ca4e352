package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"connector/media"
)

// TestCheckRefusesMaxBytesOverAQuota: a media.max_bytes larger than
// quota_bytes or tenant_quota_bytes (written or by default) would answer
// every upload between the two 507; -check refuses it naming both keys,
// and accepts max_bytes equal to the quotas.
func TestCheckRefusesMaxBytesOverAQuota(t *testing.T) {
	base := "tenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}]\n"
	for doc, want := range map[string][]string{
		"media: {max_bytes: 2000, quota_bytes: 1000}\n":                           {"media.max_bytes", "media.quota_bytes"},
		"media: {quota_bytes: 1000}\n":                                            {"media.max_bytes", "media.quota_bytes"},
		"media: {max_bytes: 2000, quota_bytes: 3000, tenant_quota_bytes: 1000}\n": {"media.max_bytes", "media.tenant_quota_bytes"},
	} {
		code, _, errOut := runCmd(t, "serve", "-config", writeConfig(t, base+doc), "-check")
		if code != 1 || !strings.Contains(errOut, want[0]) || !strings.Contains(errOut, want[1]) {
			t.Errorf("config %q: exit %d, stderr %q; want exit 1 naming %q", doc, code, errOut, want)
		}
	}
	doc := base + "media: {max_bytes: 1000, quota_bytes: 1000}\n"
	if code, out, errOut := runCmd(t, "serve", "-config", writeConfig(t, doc), "-check"); code != 0 {
		t.Fatalf("max_bytes equal to the quota: exit %d %q %q", code, out, errOut)
	}
}

// TestMediaMetrics: the media store's bytes, its quota and the writes it
// refused for lack of room are exported, so an operator sees the store
// filling up before gateways are answered 507.
func TestMediaMetrics(t *testing.T) {
	doc := "listen: 127.0.0.1:0\ntenants: [{id: t1, gateways: [{id: gw1, secrets: [s1]}]}]\nmedia: {dir: " + t.TempDir() + ", max_bytes: 100, quota_bytes: 100}\n"
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), memStore(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()); c.media.Close() })
	if _, err := c.media.Put("t1", strings.NewReader(strings.Repeat("x", 60)), "text/plain", "a.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.media.Put("t1", strings.NewReader(strings.Repeat("y", 60)), "text/plain", "b.txt"); !errors.Is(err, media.ErrQuota) {
		t.Fatalf("a write past the quota: %v, want media.ErrQuota", err)
	}
	got := map[string]float64{}
	families, err := c.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			got[f.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{"connector_media_bytes": 60, "connector_media_quota_bytes": 100, "connector_media_quota_refusals_total": 1} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (exported %v), want %v", name, v, ok, want)
		}
	}
}
