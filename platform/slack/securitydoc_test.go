package slack

import (
	"testing"

	"connector/internal/doctable"
)

// TestSecurityDocDefaults: the defaults docs/security.md's limits table
// states for the slack.* keys are the ones the code fills in.
func TestSecurityDocDefaults(t *testing.T) {
	cfg := Config{}.withDefaults()
	n, errs := doctable.CheckDefaults("../../docs/security.md", "## Limits", "slack", &cfg)
	for _, err := range errs {
		t.Error(err)
	}
	if n < 1 {
		t.Errorf("%d slack keys checked, want at least 1", n)
	}
}
