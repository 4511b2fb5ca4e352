package slack

import (
	"testing"

	"connector/session"
)

// TestFixtures runs every Slack case of platform_events_slack_whatsapp.json
// through NormalizeFixture, the live normalization path: a drop case must
// be dropped; a turn's source must match key by key, its session key
// exactly, and its event fields (text, message_type, message_id,
// reply_to_message_id) too.
func TestFixtures(t *testing.T) {
	results, err := session.CheckOutcomes("../../testdata/platform_events_slack_whatsapp.json", platformName,
		func(c session.EventCase) (session.Outcome, error) { return NormalizeFixture(c.Raw, c.Context) })
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 29 {
		t.Fatalf("found %d slack cases, want 29", len(results))
	}
	for _, r := range results {
		for _, d := range r.Diffs {
			t.Errorf("%s: %s", r.Name, d)
		}
	}
}
