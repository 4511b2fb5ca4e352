package whatsapp

import (
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"connector/internal/doctabletest"
)

// whatsappParity is one row of docs/settings-parity.md's WhatsApp table:
// a tenant's setting, and whom of Ada and Bob its gate admits ("refused":
// the setting is refused at startup).
var whatsappParity = []struct {
	knob, setting, admits string
}{
	{"allow_all_users", `{allow_all_users: "yes"}`, "ada bob"},
	{"allow_all_users", `{allow_all_users: "on"}`, ""},
	{"allow_all_users", `{allow_all_users: true}`, "ada bob"},
	{"dm_policy", `{dm_policy: open}`, ""},
	{"dm_policy", `{dm_policy: pairing}`, "ada bob"},
	{"dm_policy", `{dm_policy: disabled}`, ""},
	{"dm_policy", `{dm_policy: everyone}`, "refused"},
	{"allow_from", `{allow_from: "+44 7700 900123"}`, "ada"},
	{"allow_from", `{allow_from: ["*"]}`, "ada bob"},
	{"allow_from", `{allow_from: "447700900123", allow_all_users: true}`, "ada bob"},
	{"allow_from", `{allow_from: [], allowed_users: "447700900123"}`, ""},
	{"allowed_users", `{allowed_users: "447700900123, 14155550142"}`, "ada bob"},
}

func TestWhatsAppSettingsParity(t *testing.T) {
	probes := map[string]string{"ada": "447700900123", "bob": "14155550142"}
	for _, c := range whatsappParity {
		var tc TenantConfig
		dec := yaml.NewDecoder(strings.NewReader(c.setting))
		dec.KnownFields(true)
		if err := dec.Decode(&tc); err != nil {
			t.Fatalf("%s: %v", c.setting, err)
		}
		acc, err := newAccess(TenantConfig{}, &tc)
		if c.admits == "refused" {
			if err == nil {
				t.Errorf("%s was accepted", c.setting)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.setting, err)
			continue
		}
		var admitted []string
		for _, who := range []string{"ada", "bob"} {
			if acc.intake(probes[who]) == "" {
				admitted = append(admitted, who)
			}
		}
		if got := strings.Join(admitted, " "); got != c.admits {
			t.Errorf("%s admits %q, want %q", c.setting, got, c.admits)
		}
	}
}

func TestWhatsAppSettingsParityDocInSync(t *testing.T) {
	rows, err := doctabletest.Rows("../../docs/settings-parity.md", "## WhatsApp Cloud")
	if err != nil {
		t.Fatal(err)
	}
	var doc, cases []string
	for _, r := range rows {
		if len(r) != 4 {
			t.Fatalf("row %q: want 4 cells (knob, setting, native, connector)", r)
		}
		doc = append(doc, doctabletest.Code(r[0])+" "+doctabletest.Code(r[1]))
	}
	for _, c := range whatsappParity {
		cases = append(cases, c.knob+" "+c.setting)
	}
	if !slices.Equal(doc, cases) {
		t.Fatalf("docs/settings-parity.md WhatsApp rows and whatsappParity differ:\ndoc:   %q\ncases: %q", doc, cases)
	}
}
