package discord

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitMessage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		limit int
		want  []string
	}{
		{"short", "hello", 10, []string{"hello"}},
		{"exact", "0123456789", 10, []string{"0123456789"}},
		{"lines", "aaaa\nbbbb\ncccc", 10, []string{"aaaa\nbbbb", "cccc"}},
		{"words", "aaa bbb ccc ddd", 8, []string{"aaa bbb", "ccc ddd"}},
		{"hard", "abcdefghijklmnop", 8, []string{"abcdefgh", "ijklmnop"}},
		{"runes", "ééééé", 3, []string{"ééé", "éé"}},
		{"fence", "```go\nline1\nline2\nline3\n```", 22, []string{"```go\nline1\nline2\n```", "```go\nline3\n```"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := splitMessage(tc.in, tc.limit)
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("split(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
			}
		})
	}
}

func FuzzSplitMessage(f *testing.F) {
	f.Add("hello world", 5)
	f.Add("```py\nprint(1)\n```\ntext after the fence", 12)
	f.Add(strings.Repeat("😀 ", 50), 7)
	f.Add("a\n\n\n\nb", 2)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit < 64 || limit > 4000 || !utf8.ValidString(s) {
			return
		}
		pieces := splitMessage(s, limit)
		total := 0
		for _, p := range pieces {
			if n := utf8.RuneCountInString(p); n > limit {
				t.Fatalf("piece of %d code points > %d: %q", n, limit, p)
			}
			total += len(p)
		}
		if strings.TrimSpace(s) != "" && total == 0 {
			t.Fatal("non-blank text produced nothing")
		}
		if !strings.Contains(s, "`") && len(pieces) > 0 {
			// Without fences nothing is added: only separators are dropped.
			if total > len(s) || total < len(s)-len(pieces) {
				t.Fatalf("pieces hold %d bytes of %d (with %d cuts)", total, len(s), len(pieces)-1)
			}
		}
	})
}
