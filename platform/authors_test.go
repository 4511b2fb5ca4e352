package platform_test

import (
	"testing"

	"connector/platform"
)

func TestParseLinkCommand(t *testing.T) {
	for _, c := range []struct {
		text, code string
		ok         bool
	}{
		{"/link ABCDE-FGHJK", "ABCDE-FGHJK", true},
		{"  /LINK   abc  ", "abc", true},
		{"/link@hermes_bot XYZ", "XYZ", true},
		{"/link", "", true},
		{"/link\u00a0X", "X", true},
		{"/linked X", "", false},
		{"/lin", "", false},
		{"hello /link X", "", false},
		{"", "", false},
	} {
		code, ok := platform.ParseLinkCommand(c.text)
		if code != c.code || ok != c.ok {
			t.Errorf("%q: %q %v, want %q %v", c.text, code, ok, c.code, c.ok)
		}
	}
}

// FuzzParseLinkCommand: any text parses without panicking, a command's
// code is a suffix of the text and never longer than it.
func FuzzParseLinkCommand(f *testing.F) {
	for _, s := range []string{"/link ABC", "/link@bot x", "/LINK", "/linkx", "\u00a0/link\u2003c", "/link@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		code, ok := platform.ParseLinkCommand(text)
		if !ok && code != "" {
			t.Fatalf("%q: not a command but code %q", text, code)
		}
		if len(code) > len(text) {
			t.Fatalf("%q: code %q longer than the text", text, code)
		}
	})
}
