package discord

import (
	"testing"

	"connector/internal/doctable"
)

// TestSecurityDocDefaults: the defaults docs/security.md's limits table
// states for the discord.* keys are the ones the code fills in.
func TestSecurityDocDefaults(t *testing.T) {
	cfg := Config{}.withDefaults()
	n, errs := doctable.CheckDefaults("../../docs/security.md", "## Limits", "discord", &cfg)
	for _, err := range errs {
		t.Error(err)
	}
	if n < 4 {
		t.Errorf("%d discord keys checked, want at least 4", n)
	}
}
