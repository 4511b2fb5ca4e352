package media

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseRef: any source_url a gateway sends is either not a reference or
// yields the id part of the path; it never panics, and an id it yields
// that ValidID accepts is exactly 32 lowercase hex characters.
func FuzzParseRef(f *testing.F) {
	s, err := New(Config{Dir: f.TempDir(), PublicURL: "https://c.example:8443/base"})
	if err != nil {
		f.Fatal(err)
	}
	bare, err := New(Config{Dir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		"https://c.example:8443/base/relay/media/" + strings.Repeat("a", 32),
		"https://c.example:8443/base/relay/media/../../x", "http://[::1]:80/relay/media/%zz",
		"https://cdn.example/a.png", "relay/media/x", "", "://", "https://c.example:8443/base/relay/media/",
		"https://c.example:08443/base/relay/media/x", "https://c.example:/base/relay/media/x", "https://c.example:99999/base/relay/media/x",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, u string) {
		for _, st := range []*Store{s, bare} {
			id, ok := st.ParseRef(u)
			if !ok && id != "" {
				t.Fatalf("ParseRef(%q) = %q without ok", u, id)
			}
			if ValidID(id) && (len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "") {
				t.Fatalf("ValidID accepted %q", id)
			}
		}
	})
}

// FuzzCleanFilename: a gateway's X-Media-Filename becomes a base name of
// valid UTF-8, at most 255 bytes, without path separators, quotes or
// control characters.
func FuzzCleanFilename(f *testing.F) {
	for _, seed := range []string{"report.pdf", "../../etc/passwd", "a\\b\\c.txt", "\"x\"\r\n.png", "\xff\xfe", strings.Repeat("é", 200), "/", "."} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := cleanFilename(name)
		if len(got) > 255 || !utf8.ValidString(got) || strings.ContainsAny(got, "/\\\"\r\n\x00") {
			t.Fatalf("cleanFilename(%q) = %q", name, got)
		}
	})
}
