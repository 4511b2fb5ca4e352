package telegram

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

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
		{"word", "aaaa bbbb cccc dddd", 16, []string{"aaaa bbbb", "cccc dddd"}},
		{"hard cut on runes", strings.Repeat("é", 30), 16, []string{strings.Repeat("é", 12), strings.Repeat("é", 12), strings.Repeat("é", 6)}},
		{"emoji counted as one", strings.Repeat("👀", 20), 20, []string{strings.Repeat("👀", 20)}},
		{"fence carried", "```\nline one\nline two\nline three\n```", 26,
			[]string{"```\nline one\nline two\n```", "```\nline three\n```"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := splitMessage(c.in, c.limit)
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("split(%q, %d) = %q, want %q", c.in, c.limit, got, c.want)
			}
		})
	}
}

func TestSplitMessageAtTelegramLimit(t *testing.T) {
	para := strings.Repeat("word ", 200) + "\n\n"
	in := strings.Repeat(para, 10) // ~10,000 code points
	chunks := splitMessage(in, maxMessageRunes)
	if len(chunks) != 3 {
		t.Fatalf("got %d chunks, want 3", len(chunks))
	}
	for i, c := range chunks {
		if n := utf8.RuneCountInString(c); n > maxMessageRunes {
			t.Errorf("chunk %d has %d code points", i, n)
		}
	}
}

// FuzzSplitMessage checks that chunks fit, are valid UTF-8, and together keep
// every non-space character of the input in order (fence markers aside).
func FuzzSplitMessage(f *testing.F) {
	f.Add("aaaa bbbb\n\ncccc dddd eeee", 16)
	f.Add("```go\nx := 1\ny := 2\nz := 3\n```\ntail text here", 20)
	f.Add(strings.Repeat("👀 ", 40), 17)
	f.Fuzz(func(t *testing.T, in string, limit int) {
		if !utf8.ValidString(in) || limit < 16 || limit > 5000 {
			return
		}
		chunks := splitMessage(in, limit)
		for i, c := range chunks {
			if n := utf8.RuneCountInString(c); n > limit {
				t.Fatalf("chunk %d of %q has %d code points > %d", i, in, n, limit)
			}
			if strings.TrimSpace(c) == "" && len(chunks) > 1 {
				t.Fatalf("chunk %d of %q is blank", i, in)
			}
		}
		if got, want := squeeze(strings.Join(chunks, "")), squeeze(in); got != want {
			t.Fatalf("split(%q) lost or added text: %q vs %q", in, got, want)
		}
	})
}

func squeeze(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == '`' {
			return -1
		}
		return r
	}, s)
}
