package telegram

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"connector/internal/textsplit"
)

func splitAt(s string, limit int) []string {
	r := splitRules
	r.Limit = limit
	return textsplit.Split(s, r)
}

func TestSplitMessage(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		limit int
		want  []string
	}{
		{"fits", "hello world", 20, []string{"hello world"}},
		{"paragraph", "aaaa aaaa\n\nbbbb bbbb", 16, []string{"aaaa aaaa", "bbbb bbbb"}},
		{"line", "aaaa aaaa\nbbbb bbbb", 16, []string{"aaaa aaaa", "bbbb bbbb"}},
		{"word", "aaaa bbbb cccc dddd", 16, []string{"aaaa bbbb cccc", "dddd"}},
		{"short piece avoided", "a bbbbbbbbbbbbbbbbbbbbbbb", 16, []string{"a bbbbbbbbbbbbbb", "bbbbbbbbb"}},
		{"hard cut on runes", strings.Repeat("é", 30), 16, []string{strings.Repeat("é", 16), strings.Repeat("é", 14)}},
		{"emoji counted as one", strings.Repeat("👀", 20), 20, []string{strings.Repeat("👀", 20)}},
		{"fence carried", "```\nline one\nline two\nline three\n```", 26,
			[]string{"```\nline one\nline two\n```", "```\nline three\n```"}},
		{"fence reopened bare", "```go\nline one\nline two\nline three\n```", 28,
			[]string{"```go\nline one\nline two\n```", "```\nline three\n```"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := splitAt(c.in, c.limit)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
				t.Errorf("split(%q, %d) = %q, want %q", c.in, c.limit, got, c.want)
			}
		})
	}
}

func TestSplitMessageAtTelegramLimit(t *testing.T) {
	para := strings.Repeat("word ", 200) + "\n\n"
	in := strings.Repeat(para, 10) // ~10,000 code points
	chunks := textsplit.Split(in, splitRules)
	if len(chunks) != 3 {
		t.Fatalf("got %d chunks, want 3", len(chunks))
	}
	for i, c := range chunks {
		if n := utf8.RuneCountInString(c); n > maxMessageRunes {
			t.Errorf("chunk %d has %d code points", i, n)
		}
	}
}
