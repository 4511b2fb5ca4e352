package textsplit

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// The rules Discord and Telegram split with; FuzzSplit names them by mode 0
// and 13.
var (
	discordRules  = Rules{Breaks: []string{"\n", " "}, Fence: OddFences}
	telegramRules = Rules{Breaks: []string{"\n\n", "\n", " "}, KeepHalf: true, Fence: LineFences}
)

func withLimit(r Rules, limit int) Rules {
	r.Limit = limit
	return r
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		rules Rules
		want  []string
	}{
		{"fits", "hello", withLimit(discordRules, 10), []string{"hello"}},
		{"fits blank", "  \n ", withLimit(discordRules, 10), []string{"  \n "}},
		{"exact", "0123456789", withLimit(discordRules, 10), []string{"0123456789"}},
		{"line break", "aaaa\nbbbb\ncccc", withLimit(discordRules, 10), []string{"aaaa\nbbbb", "cccc"}},
		{"space", "aaa bbb ccc ddd", withLimit(discordRules, 8), []string{"aaa bbb", "ccc ddd"}},
		{"hard cut", "abcdefghijklmnop", withLimit(discordRules, 8), []string{"abcdefgh", "ijklmnop"}},
		{"code points", "ééééé", withLimit(discordRules, 3), []string{"ééé", "éé"}},
		{"any break", "a\nbcdefghijk", withLimit(discordRules, 8), []string{"a", "bcdefghi", "jk"}},
		{"half kept", "a\nbcdefghijk", withLimit(telegramRules, 8), []string{"a\nbcdefg", "hijk"}},
		{"paragraph first", "aa bb\ncc\n\ndd ee", withLimit(telegramRules, 12), []string{"aa bb\ncc", "dd ee"}},
		{"blank stretch dropped", "a " + strings.Repeat("\t", 20) + " b", withLimit(discordRules, 8), []string{"a", "\t\t\t\t b"}},
		{"fence reopened with its line", "```go\nline1\nline2\nline3\n```", withLimit(discordRules, 22),
			[]string{"```go\nline1\nline2\n```", "```go\nline3\n```"}},
		{"fence reopened bare", "```go\nline1\nline2\nline3\n```", withLimit(telegramRules, 22),
			[]string{"```go\nline1\nline2\n```", "```\nline3\n```"}},
		{"no room kept for a close outside code", "aaaa bbbb cccc dddd", withLimit(telegramRules, 16),
			[]string{"aaaa bbbb cccc", "dddd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Split(tc.in, tc.rules)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("Split(%.80q, limit %d)\n got %.80q\nwant %.80q", tc.in, tc.rules.Limit, got, tc.want)
			}
			checkSplit(t, tc.in, tc.rules)
		})
	}
}

// TestSplitFormFeedRun is the fuzzer's find (testdata/fuzz/FuzzSplit): two
// characters and 3,372 form feeds at limit 101 gave a last piece of 41 form
// feeds, which Discord refuses as an empty message.
func TestSplitFormFeedRun(t *testing.T) {
	in := "0G" + strings.Repeat("\f", 3372)
	got := Split(in, withLimit(discordRules, 101))
	if want := []string{in[:101]}; fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("got %d pieces %.80q, want %.80q", len(got), got, want)
	}
	checkSplit(t, in, withLimit(discordRules, 101))
}

// checkSplit fails t unless Split(s, r) keeps the package's guarantee.
func checkSplit(t *testing.T, s string, r Rules) {
	t.Helper()
	got := Split(s, r)
	if utf8.RuneCountInString(s) <= r.Limit {
		if len(got) != 1 || got[0] != s {
			t.Fatalf("text that fits came back as %q", got)
		}
		return
	}
	pieces := r.pieces(s)
	if len(got) != len(pieces) {
		t.Fatalf("%d pieces sent, %d split", len(got), len(pieces))
	}
	pos, reopen := 0, ""
	for i, p := range pieces {
		sent := got[i]
		if sent != p.String() {
			t.Fatalf("piece %d sent as %q, split as %+v", i, sent, p)
		}
		if n := utf8.RuneCountInString(sent); n > r.Limit {
			t.Fatalf("piece %d has %d code points > %d: %q", i, n, r.Limit, sent)
		}
		if utf8.ValidString(s) && !utf8.ValidString(sent) {
			t.Fatalf("piece %d is not valid UTF-8: %q", i, sent)
		}
		if strings.TrimSpace(p.body) == "" {
			t.Fatalf("piece %d is blank: %q", i, sent)
		}
		// Bodies are the input in order, with only whitespace between them.
		if p.start < pos || p.start+len(p.body) > len(s) || s[p.start:p.start+len(p.body)] != p.body {
			t.Fatalf("piece %d body %q is not the input at %d (after %d)", i, p.body, p.start, pos)
		}
		if gap := s[pos:p.start]; strings.TrimSpace(gap) != "" {
			t.Fatalf("text dropped before piece %d: %q", i, gap)
		}
		pos = p.start + len(p.body)
		// Fences: a piece starts in the block the one before left open, and
		// every piece but the last, read alone, leaves no block open.
		if p.reopen != reopen {
			t.Fatalf("piece %d reopens %q, the block open was %q", i, p.reopen, reopen)
		}
		if r.Fence == nil {
			continue
		}
		text := p.body
		if p.reopen != "" {
			text = p.reopen + "\n" + p.body
		}
		reopen = readFences(r.Fence, "", text)
		if last := i == len(pieces)-1; !last && p.close != (reopen != "") ||
			!last && readFences(r.Fence, "", sent) != "" || last && p.close {
			t.Fatalf("piece %d (last %v) leaves a block open or closes none: %q", i, last, sent)
		}
	}
	if gap := s[pos:]; strings.TrimSpace(gap) != "" {
		t.Fatalf("text dropped after the last piece: %q", gap)
	}
}

// readFences reads text line by line with rule, as a platform renders one
// message.
func readFences(rule FenceRule, open, text string) string {
	for _, line := range strings.Split(text, "\n") {
		open = rule(open, line)
	}
	return open
}

// FuzzSplit checks Split's guarantee (see checkSplit) for every combination
// of the rules' parameters; mode 0 is Discord's rules and 13 Telegram's:
// bit 0 LineFences (else OddFences), bit 1 no fences, bit 2 KeepHalf, bit 3
// paragraph breaks first.
func FuzzSplit(f *testing.F) {
	f.Add("hello world", 5, uint8(0))
	f.Add("```py\nprint(1)\n```\ntext after the fence and more text", 31, uint8(0))
	f.Add("```go\nx := 1\ny := 2\nz := 3\n```\ntail text here", 30, uint8(13))
	f.Add(strings.Repeat("😀 ", 50), 37, uint8(13))
	f.Add("a\n\n\n\nb"+strings.Repeat("c", 40), 30, uint8(4))
	f.Add("x ```go\n"+strings.Repeat("```a b ``", 10), 40, uint8(1))
	f.Fuzz(func(t *testing.T, s string, limit int, mode uint8) {
		if limit < MaxFenceLine+6 || limit > 5000 {
			return
		}
		r := Rules{Limit: limit, Breaks: []string{"\n", " "}, Fence: OddFences, KeepHalf: mode&4 != 0}
		if mode&1 != 0 {
			r.Fence = LineFences
		}
		if mode&2 != 0 {
			r.Fence = nil
		}
		if mode&8 != 0 {
			r.Breaks = []string{"\n\n", "\n", " "}
		}
		checkSplit(t, s, r)
	})
}

func BenchmarkSplit(b *testing.B) {
	shapes := map[string]string{
		"prose":     "lorem ipsum dolor sit amet, consectetur\nadipiscing elit ",
		"nospace":   "x",
		"formfeeds": "\f",
		"fenced":    "```go\nfunc f() { return }\n```\n",
	}
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		for _, shape := range []string{"prose", "nospace", "formfeeds", "fenced"} {
			in := "0G" + strings.Repeat(shapes[shape], size/len(shapes[shape]))
			for _, rules := range []struct {
				name string
				r    Rules
			}{{"discord", discordRules}, {"telegram", telegramRules}} {
				r := withLimit(rules.r, 64)
				b.Run(fmt.Sprintf("%s/%s/%dKiB", rules.name, shape, size>>10), func(b *testing.B) {
					b.SetBytes(int64(len(in)))
					for b.Loop() {
						Split(in, r)
					}
				})
			}
		}
	}
}
