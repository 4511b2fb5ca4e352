package main

import (
	"strings"
	"testing"
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
