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
// NormalizeFixture: every key of the expected source must match the
// connector's Source JSON, and the session key must be identical.
func TestFixtures(t *testing.T) {
	cases := loadFixtures(t)
	if len(cases) != 34 {
		t.Fatalf("found %d discord cases, want 34", len(cases))
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
