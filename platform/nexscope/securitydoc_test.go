package nexscope

import (
	"testing"

	"connector/internal/doctable"
)

// TestSecurityDocDefaults: the defaults docs/security.md's limits table
// states for the nexscope.* keys are the ones the code fills in.
func TestSecurityDocDefaults(t *testing.T) {
	cfg := Config{}.withDefaults()
	n, errs := doctable.CheckDefaults("../../docs/security.md", "## Limits", "nexscope", &cfg)
	for _, err := range errs {
		t.Error(err)
	}
	if n < 9 {
		t.Errorf("%d nexscope keys checked, want at least 9", n)
	}
}
