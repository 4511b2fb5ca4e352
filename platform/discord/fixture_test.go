package discord

import (
	"encoding/json"
	"os"
	"testing"

	"connector/session"
)

type fixtureCase struct {
	Name     string          `json:"name"`
	Platform string          `json:"platform"`
	Raw      json.RawMessage `json:"raw"`
	Context  json.RawMessage `json:"context"`
	Source   json.RawMessage `json:"source"`
	Key      string          `json:"key"`
}

func loadFixtures(t testing.TB) []fixtureCase {
	t.Helper()
	b, err := os.ReadFile("../../testdata/platform_events.json")
	if err != nil {
		t.Fatal(err)
	}
	var all []fixtureCase
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	var out []fixtureCase
	for _, c := range all {
		if c.Platform == "discord" {
			out = append(out, c)
		}
	}
	return out
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
			var want map[string]any
			if err := json.Unmarshal(c.Source, &want); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(src)
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range want {
				gv, ok := got[k]
				if !ok {
					t.Errorf("source misses %q (want %v)", k, v)
					continue
				}
				if !jsonEqual(gv, v) {
					t.Errorf("source[%q] = %#v, want %#v", k, gv, v)
				}
			}
			if key := session.Key(&src, session.DefaultOptions); key != c.Key {
				t.Errorf("key = %q, want %q", key, c.Key)
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	return string(ab) == string(bb)
}
