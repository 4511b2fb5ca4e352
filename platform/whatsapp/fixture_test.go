package whatsapp

import (
	"testing"

	"connector/session"
)

// TestFixtures runs every whatsapp_cloud case of
// platform_events_slack_whatsapp.json through NormalizeFixture, the live
// classification path: drops must be drops, and for the rest every key of
// the expected source, the session key and the event fields must match.
func TestFixtures(t *testing.T) {
	results, err := session.CheckOutcomes("../../testdata/platform_events_slack_whatsapp.json", platformName,
		func(c session.EventCase) (session.Outcome, error) { return NormalizeFixture(c.Raw, c.Context) })
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 19 {
		t.Fatalf("found %d whatsapp_cloud cases, want 19", len(results))
	}
	for _, r := range results {
		for _, d := range r.Diffs {
			t.Errorf("%s: %s", r.Name, d)
		}
	}
}
