package telegram

import (
	"testing"

	"connector/session"
)

func telegramFixtures(t testing.TB) []session.EventCase {
	t.Helper()
	cases, err := session.LoadEventCases("../../testdata/platform_events.json", platformName)
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestFixtures runs every Telegram case of the oracle through the live
// normalization path: each key of the expected source must match the
// connector's Source JSON, and the session key must be identical.
func TestFixtures(t *testing.T) {
	cases := telegramFixtures(t)
	if len(cases) != 28 {
		t.Fatalf("found %d telegram fixture cases, want 28", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			src, err := NormalizeFixture(c.Raw, c.Context)
			if err != nil {
				t.Fatal(err)
			}
			diffs, err := session.Mismatches(&src, c.Source, c.Key)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Error(d)
			}
		})
	}
}
