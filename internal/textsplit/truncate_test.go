package textsplit

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"hello", 0, ""},
		{"hello", -1, ""},
		{"héllo", 2, "h"},                       // é is 2 bytes: not cut
		{"héllo", 3, "hé"},                      // é fits
		{"a😀b", 4, "a"},                         // 😀 is 4 bytes
		{"a😀b", 5, "a😀"},                        // 😀 fits
		{"\x80\x80\x80\x80\x80", 2, "\x80\x80"}, // invalid: cut at n
		{"a\xe2\x82", 2, "a\xe2"},               // truncated rune: invalid, cut at n
		{"\xff\x80\x80", 1, "\xff"},
	} {
		if got := Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestTruncateRunes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"héllo", 2, "hé"},
		{"héllo", 9, "héllo"},
		{"😀😀😀", 1, "😀"},
		{"a\xffb", 2, "a\xff"},
		{"abc", 0, ""},
	} {
		if got := TruncateRunes(tc.in, tc.n); got != tc.want {
			t.Errorf("TruncateRunes(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestSplitBytes(t *testing.T) {
	for _, s := range []string{"", "short", strings.Repeat("a", 33), strings.Repeat("é", 20), strings.Repeat("😀", 9), "\xff\xfe" + strings.Repeat("\x80", 40)} {
		checkSplitBytes(t, s, 16)
	}
	if got := SplitBytes("😀😀", 3); strings.Join(got, "") != "😀😀" || len(got) != 4 {
		t.Errorf("SplitBytes below UTFMax = %q, want 4 pieces that join back", got)
	}
}

// checkSplitBytes fails t unless SplitBytes(s, n) joins back to s, in
// pieces of at most n bytes that cut no valid rune.
func checkSplitBytes(t *testing.T, s string, n int) {
	t.Helper()
	pieces := SplitBytes(s, n)
	if strings.Join(pieces, "") != s {
		t.Fatalf("%q: pieces %q do not join back", s, pieces)
	}
	at := 0
	for _, p := range pieces {
		at += len(p)
		if len(p) > n || p == "" && s != "" || n >= utf8.UTFMax && cutsRune(s, at) {
			t.Fatalf("%q: bad piece %q", s, p)
		}
	}
}

// FuzzTruncate checks that Truncate keeps the longest prefix that cuts no
// valid rune, TruncateRunes the first n code points, and SplitBytes the
// whole string.
func FuzzTruncate(f *testing.F) {
	f.Add("héllo wörld 😀", 5)
	f.Add("\xe2\x82\xac\x80\x80\x80", 4)
	f.Add("a\xf0\x9f\x98", 3)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := Truncate(s, n)
		if !strings.HasPrefix(s, got) || len(got) > max(n, 0) {
			t.Fatalf("Truncate(%q, %d) = %q: not a prefix within n", s, n, got)
		}
		if rest := s[len(got):]; rest != "" {
			// The cut falls between runes (an invalid byte is a rune of its
			// own), and no more than one rune's bytes short of n.
			first, size := utf8.DecodeRuneInString(rest)
			valid := first != utf8.RuneError || size > 1
			if n > 0 && len(got) < n && (!valid || len(got)+size <= n) {
				t.Fatalf("Truncate(%q, %d) = %q: cut short", s, n, got)
			}
			if cutsRune(s, len(got)) {
				t.Fatalf("Truncate(%q, %d) = %q: a valid rune is cut", s, n, got)
			}
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Truncate(%q, %d) = %q: invalid UTF-8", s, n, got)
		}
		if n >= 0 && n < 1<<20 {
			if r := TruncateRunes(s, n); !strings.HasPrefix(s, r) || utf8.RuneCountInString(r) != min(n, utf8.RuneCountInString(s)) {
				t.Fatalf("TruncateRunes(%q, %d) = %q", s, n, r)
			}
		}
		if n > 0 {
			checkSplitBytes(t, s, max(n%64, utf8.UTFMax))
		}
	})
}

// cutsRune reports whether cutting s at i splits a valid encoded rune.
func cutsRune(s string, i int) bool {
	for j := max(0, i-utf8.UTFMax+1); j < i; j++ {
		if r, size := utf8.DecodeRuneInString(s[j:]); (r != utf8.RuneError || size > 1) && j+size > i {
			return true
		}
	}
	return false
}
