package telegram

import (
	"testing"

	"connector/session"
)

// TestFixtures runs every Telegram case of platform_events.json through
// NormalizeFixture, the live normalization path: every key of the expected
// source must match the connector's Source JSON, and the session key must be
// identical.
func TestFixtures(t *testing.T) {
	results, err := session.CheckOutcomes("../../testdata/platform_events.json", platformName,
		func(c session.EventCase) (session.Outcome, error) { return NormalizeFixture(c.Raw, c.Context) })
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 28 {
		t.Fatalf("found %d telegram cases, want 28", len(results))
	}
	for _, r := range results {
		for _, d := range r.Diffs {
			t.Errorf("%s: %s", r.Name, d)
		}
	}
}
