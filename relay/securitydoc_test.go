package relay

import (
	"testing"

	"connector/internal/doctable"
)

// TestSecurityDocDefaults: the defaults docs/security.md's limits table
// states for the relay.* keys are the ones the code fills in.
func TestSecurityDocDefaults(t *testing.T) {
	var cfg Config
	cfg.setDefaults()
	n, errs := doctable.CheckDefaults("../docs/security.md", "## Limits", "relay", &cfg)
	for _, err := range errs {
		t.Error(err)
	}
	if n < 10 {
		t.Errorf("%d relay keys checked, want at least 10", n)
	}
}
