// Package pytext holds the character classes of Python's str that the
// native Hermes adapters' text handling relies on (str.strip(), and the \s
// and \w of their regular expressions, which Python applies to all of
// Unicode), so the Discord and Telegram platforms normalize message text
// exactly as the adapters do. Go's unicode.IsSpace and regexp's ASCII \s and
// \w differ from them. Truthy is Python's truth value of a JSON value.
package pytext

import (
	"strings"
	"unicode"
)

// IsSpace reports whether Python's str.isspace() (and the \s of a str
// pattern) counts r as whitespace: Go's unicode.IsSpace plus the
// information separators U+001C to U+001F.
func IsSpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1c && r <= 0x1f
}

// IsWord reports whether the \w of a Python str pattern matches r: a
// letter, a number or "_".
func IsWord(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

// Strip is Python's s.strip(): leading and trailing IsSpace removed.
func Strip(s string) string {
	return strings.TrimFunc(s, IsSpace)
}
