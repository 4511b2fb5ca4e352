package nativecfg

import (
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// node parses doc and returns its "v" value node.
func node(t *testing.T, doc string) *yaml.Node {
	t.Helper()
	var m map[string]yaml.Node
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	n, ok := m["v"]
	if !ok {
		t.Fatalf("%s: no key v", doc)
	}
	return &n
}

// TestBridged: plain scalars become the str() of the value PyYAML reads;
// quoted, tagged and block scalars stay as written.
func TestBridged(t *testing.T) {
	for doc, want := range map[string]string{
		"v: 12":             "12",
		"v: -1001112223334": "-1001112223334",
		"v: 010":            "8",
		"v: -010":           "-8",
		"v: 0x1F":           "31",
		"v: 0b101":          "5",
		"v: 1_000":          "1000",
		"v: 1:30":           "90",
		"v: +7":             "7",
		"v: 0":              "0",
		"v: 08":             "08",
		"v: 1.5":            "1.5",
		"v: yes":            "True",
		"v: Off":            "False",
		"v: ~":              "None",
		"v: '010'":          "010",
		"v: !!str 010":      "010",
		"v: \"yes\"":        "yes",
		"v: |\n  010\n":     "010\n",
		"v: abc":            "abc",
	} {
		if got := Bridged(node(t, doc)); got != want {
			t.Errorf("%q: %q, want %q", doc, got, want)
		}
	}
}

// TestIsYAML11String: only what PyYAML reads as a str.
func TestIsYAML11String(t *testing.T) {
	for doc, want := range map[string]bool{
		"v: hermes":    true,
		"v: '42'":      true,
		"v: !!str yes": true,
		"v: \"\"":      true,
		"v: 42":        false,
		"v: 1.5":       false,
		"v: .inf":      false,
		"v: on":        false,
		"v: null":      false,
		"v:":           false,
		"v: !!int 42":  false,
		"v: [a]":       false,
		"v: 1e3":       true, // PyYAML's float needs a dot
		"v: '(?i)bot'": true,
	} {
		if got := IsYAML11String(node(t, doc)); got != want {
			t.Errorf("%q: %v, want %v", doc, got, want)
		}
	}
}

// TestLists: List reads items as the bridge writes them; it refuses
// mappings and nested lists.
func TestLists(t *testing.T) {
	if got, _ := List(node(t, "v: [010, 'a, b', null, yes, '0700']")); !slices.Equal(got, []string{"8", "a, b", "None", "True", "0700"}) {
		t.Errorf("List: %q", got)
	}
	if got, _ := List(node(t, "v: 0x10")); !slices.Equal(got, []string{"16"}) {
		t.Errorf("List scalar: %q", got)
	}
	if got, err := List(node(t, "v: null")); got != nil || err != nil {
		t.Errorf("null: %q %v", got, err)
	}
	for doc, want := range map[string]string{
		"v: {a: 1}":   "want a list or a comma-separated string",
		"v: [[1]]":    "line 1: want a list of ids or names",
		"v: [{a: 1}]": "want a list of ids or names",
	} {
		if _, err := List(node(t, doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", doc, err, want)
		}
	}
}

// TestDecodeList: a JSON list literal is that list (its elements not split
// again); anything else, malformed JSON included, is split on commas.
func TestDecodeList(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want []string
	}{
		{[]string{"-100, -200", " -300 "}, []string{"-100", "-200", "-300"}},
		{[]string{` ["-100", -200, " 7 ", ""]`}, []string{"-100", "-200", "7"}},
		{[]string{`["a,b"]`}, []string{"a,b"}},
		{[]string{`["-100"`, `"-200"]`}, []string{"-100", "-200"}},
		{[]string{`["-100"] x`}, []string{`["-100"] x`}},
		{[]string{`[-100`}, []string{"[-100"}},
		{[]string{`[-0]`}, []string{"0"}},
		{nil, nil},
	} {
		got, err := DecodeList(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %q %v, want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{`[1.5]`, `[true]`, `[null]`, `[["a"]]`} {
		if _, err := DecodeList([]string{bad}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestFlag: YAML booleans, the variable spellings, null, and refusals.
func TestFlag(t *testing.T) {
	for doc, want := range map[string]string{
		"v: on":         "true",
		"v: 'on'":       "true",
		"v: OFF":        "false",
		"v: ' 1 '":      "true",
		"v: 0":          "false",
		"v: null":       "nil",
		"v: maybe":      `"maybe" is not a boolean`,
		"v: [true]":     "want a boolean",
		"v: !!str True": "true",
	} {
		v, err := Flag(node(t, doc), true)
		got := "nil"
		switch {
		case err != nil:
			got = err.Error()
		case v != nil && *v:
			got = "true"
		case v != nil:
			got = "false"
		}
		if !strings.Contains(got, want) {
			t.Errorf("%s: %s, want %s", doc, got, want)
		}
	}
	if v, _ := Flag(node(t, "v: 'on'"), false); v == nil || *v {
		t.Errorf("'on' with onIsTrue false: %v, want false", v)
	}
}

// FuzzDecodeList: any text decodes without a panic into trimmed,
// non-empty entries.
func FuzzDecodeList(f *testing.F) {
	for _, s := range []string{`["-100", 7]`, "a,b", `[`, `[1e400]`, `["\u0000"]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := DecodeList([]string{s})
		if err != nil {
			return
		}
		for _, e := range out {
			if e == "" || e != strings.TrimSpace(e) {
				t.Fatalf("%q: entry %q", s, e)
			}
		}
	})
}
