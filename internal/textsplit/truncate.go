package textsplit

import "unicode/utf8"

// Truncate returns the longest prefix of s of at most n bytes that does not
// end inside a UTF-8 encoded rune. Bytes that are not valid UTF-8 are
// units of their own, so invalid input may be cut anywhere among them.
func Truncate(s string, n int) string {
	switch {
	case n >= len(s):
		return s
	case n <= 0:
		return ""
	}
	return s[:runeBoundary(s, n)]
}

// runeBoundary returns the largest cut at or below n (0 < n < len(s)) that
// does not split a valid encoded rune: s[n] is a continuation byte of a rune
// starting at most UTFMax-1 bytes earlier, or the cut is n.
func runeBoundary(s string, n int) int {
	for i := n; i >= 0 && i > n-utf8.UTFMax; i-- {
		if !utf8.RuneStart(s[i]) {
			continue
		}
		if i < n {
			if r, size := utf8.DecodeRuneInString(s[i:]); (r != utf8.RuneError || size > 1) && i+size > n {
				return i
			}
		}
		return n
	}
	return n
}

// TruncateRunes returns the prefix of s holding at most n code points (an
// invalid byte counts as one).
func TruncateRunes(s string, n int) string {
	return s[:runeOffset(s, n)]
}

// SplitBytes cuts s into pieces of at most n bytes that join back to s,
// cutting only between runes (an n below utf8.UTFMax may have to split
// one). n must be positive.
func SplitBytes(s string, n int) []string {
	if len(s) <= n {
		return []string{s}
	}
	out := make([]string, 0, len(s)/n+1)
	for len(s) > n {
		cut := runeBoundary(s, n)
		if cut == 0 {
			cut = n
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}
