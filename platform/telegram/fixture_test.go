package telegram

import (
	"encoding/json"
	"os"
	"testing"

	"connector/session"
)

type fixtureCase struct {
	Name     string                     `json:"name"`
	Platform string                     `json:"platform"`
	Raw      json.RawMessage            `json:"raw"`
	Context  json.RawMessage            `json:"context"`
	Source   map[string]json.RawMessage `json:"source"`
	Key      string                     `json:"key"`
}

func telegramFixtures(t testing.TB) []fixtureCase {
	t.Helper()
	data, err := os.ReadFile("../../testdata/platform_events.json")
	if err != nil {
		t.Fatal(err)
	}
	var all []fixtureCase
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatal(err)
	}
	var out []fixtureCase
	for _, c := range all {
		if c.Platform == platformName {
			out = append(out, c)
		}
	}
	return out
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
			var got map[string]json.RawMessage
			if err := json.Unmarshal(src.AppendJSON(nil), &got); err != nil {
				t.Fatal(err)
			}
			for k, want := range c.Source {
				if !jsonEqual(t, got[k], want) {
					t.Errorf("source[%q] = %s, want %s", k, got[k], want)
				}
			}
			if key := session.Key(&src, session.DefaultOptions); key != c.Key {
				t.Errorf("key = %q, want %q", key, c.Key)
			}
		})
	}
}

func jsonEqual(t testing.TB, a, b json.RawMessage) bool {
	t.Helper()
	if a == nil {
		return false
	}
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}
