package discord

import (
	"testing"

	"connector/session"
)

func loadFixtures(t testing.TB) []session.EventCase {
	t.Helper()
	cases, err := session.LoadEventCases("../../testdata/platform_events.json", platformName)
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestFixtures runs every Discord case of platform_events.json through
// NormalizeFixture, the live normalization path: every key of the expected
// source must match the connector's Source JSON, and the session key must be
// identical.
func TestFixtures(t *testing.T) {
	t.Parallel()
	results, err := session.CheckOutcomes("../../testdata/platform_events.json", platformName,
		func(c session.EventCase) (session.Outcome, error) { return NormalizeFixture(c.Raw, c.Context) })
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 34 {
		t.Fatalf("found %d discord cases, want 34", len(results))
	}
	for _, r := range results {
		for _, d := range r.Diffs {
			t.Errorf("%s: %s", r.Name, d)
		}
	}
}
