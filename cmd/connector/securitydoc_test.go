package main

import (
	"testing"

	"connector/internal/doctable"
	"connector/media"
)

// TestSecurityDocDefaults: the defaults docs/security.md's limits table
// states for the http.* and ops.* keys are the ones the config fills in
// (the unauthenticated-connection bound as under a high open-file limit).
func TestSecurityDocDefaults(t *testing.T) {
	c := Config{HTTP: HTTPConfig{MaxUnauthenticatedConns: maxUnauthConnsFor(0)}}
	c.normalizeHTTP()
	if err := c.validateHTTP(); err != nil {
		t.Fatal(err)
	}
	const doc = "../../docs/security.md"
	total := 0
	m := media.Config{}.WithDefaults()
	for prefix, cfg := range map[string]any{"http": &c.HTTP, "ops": &c.Ops, "media": &m} {
		n, errs := doctable.CheckDefaults(doc, "## Limits", prefix, cfg)
		for _, err := range errs {
			t.Error(err)
		}
		total += n
	}
	if total < 13 {
		t.Errorf("%d http, ops and media keys checked, want at least 13", total)
	}
}
