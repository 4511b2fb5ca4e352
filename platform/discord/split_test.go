package discord

import (
	"fmt"
	"strings"
	"testing"

	"connector/internal/textsplit"
)

func splitAt(s string, limit int) []string {
	r := splitRules
	r.Limit = limit
	return textsplit.Split(s, r)
}

func TestSplitMessage(t *testing.T) {
	t.Parallel()
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
		// The fuzzer's find: the last piece was 41 form feeds, which
		// Discord refuses as an empty message.
		{"form feed run", "0G" + strings.Repeat("\f", 3372), 101, []string{"0G" + strings.Repeat("\f", 99)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := splitAt(tc.in, tc.limit)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("split(%.80q, %d) = %.80q, want %.80q", tc.in, tc.limit, got, tc.want)
			}
		})
	}
}
