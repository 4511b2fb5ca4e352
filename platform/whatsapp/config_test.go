package whatsapp

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"connector/platform/fairshare"
)

// TestConfigReadsNativeSpellings reads the pinned section and the native
// spellings of the access knobs, then checks the gates they make.
func TestConfigReadsNativeSpellings(t *testing.T) {
	doc := `
app_secret: s
verify_token: v
access_token: a
api_url: https://graph.facebook.com/
api_version: v20.0
phone_numbers: {"106540352242922": t1, "206540352242922": t2}
allow_all_users: "YES"
tenants:
  t2: {allow_from: "+44 7700 900123, 1 415 555 0142", allow_all_users: off}
  t3: {dm_policy: pairing, weight: 3}
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	top, _ := newAccess(c.access(), nil)
	t2c, t3c := c.Tenants["t2"], c.Tenants["t3"]
	t2, _ := newAccess(c.access(), &t2c)
	t3, _ := newAccess(c.access(), &t3c)
	for _, x := range []struct {
		a      *access
		sender string
		want   string
	}{
		{top, "999", ""}, // open, opted in with "YES"
		{t2, "447700900123", ""},
		{t2, "14155550142", ""},
		{t2, "999", dropNotAllowlisted}, // allowlist by default once a list is set
		{t3, "999", ""},                 // pairing
		{t3, "", dropNoSender},
		{top, "status@broadcast", dropBroadcast},
	} {
		if got := x.a.intake(x.sender); got != x.want {
			t.Errorf("%+v: %q", x, got)
		}
	}
	if t3.tapAllowed("999") {
		t.Error("pairing admitted a tap")
	}
	if w := fairshare.WeightsOf(c.Tenants, func(tc TenantConfig) int { return tc.Weight }); w["t3"] != 3 || w["t2"] != 0 {
		t.Errorf("weights %v", w)
	}
}

func TestConfigRefusals(t *testing.T) {
	ok := Config{AppSecret: "s", VerifyToken: "v", AccessToken: "a"}
	for key, edit := range map[string]func(*Config){
		"whatsapp.app_secret":    func(c *Config) { c.AppSecret = "" },
		"whatsapp.access_token":  func(c *Config) { c.AccessToken = "tok en" },
		"whatsapp.verify_token":  func(c *Config) { c.VerifyToken = "" },
		"whatsapp.api_url":       func(c *Config) { c.APIURL = "ftp://x" },
		"whatsapp.api_version":   func(c *Config) { c.APIVersion = "20" },
		"whatsapp.phone_numbers": func(c *Config) { c.PhoneNumbers = map[string]string{"+1555": "t1"} },
		"whatsapp.dm_policy":     func(c *Config) { c.DMPolicy = "everyone" },
		"whatsapp.tenants":       func(c *Config) { c.Tenants = map[string]TenantConfig{"t1": {Weight: -1}} },
	} {
		c := ok
		edit(&c)
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), key) {
			t.Errorf("%s: %v", key, err)
		}
		if err != nil && strings.Contains(err.Error(), "tok en") {
			t.Errorf("%s: the secret is in the error", key)
		}
	}
}
