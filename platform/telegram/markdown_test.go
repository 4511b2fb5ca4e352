package telegram

import (
	"strings"
	"testing"
	"unicode/utf8"

	"connector/platform/telegram/telegramtest"
)

func TestRenderMarkdownV2(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain punctuation", "Hello, world. 1+1=2!", `Hello, world\. 1\+1\=2\!`},
		{"backslash escaped", `C:\path\file`, `C:\\path\\file`},
		{"markdown escape kept literal", `a \* b`, `a \* b`},
		{"bold", "**bold** and __also__", "*bold* and *also*"},
		{"italic", "*it* and _it_", "_it_ and _it_"},
		{"snake case stays literal", "snake_case_name", `snake\_case\_name`},
		{"lone stars", "2 * 3 * 4", `2 \* 3 \* 4`},
		{"strike", "~~gone~~", "~gone~"},
		{"inline code", "run `a_b(1)` now", "run `a_b(1)` now"},
		{"code escapes", "`a\\b`", "`a\\\\b`"},
		{"double backtick code", "``a`b``", "`a\\`b`"},
		{"unclosed code", "`oops", "\\`oops"},
		{"fence", "```go\nfmt.Println(`x`)\n```", "```go\nfmt.Println(\\`x\\`)\n```"},
		{"unclosed fence closed", "```\ncode", "```\ncode\n```"},
		{"link", "see [docs](https://x.y/a_(b))", "see [docs](https://x.y/a_(b)\\)"},
		{"link without scheme literal", "[a](b)", `\[a\]\(b\)`},
		{"heading", "## Title *x*", "*Title _x_*"},
		{"quote", "> quoted.", `>quoted\.`},
		{"adjacent italics", "*a*_b_", "_a_\r_b_"},
		{"nested bold in bold literal", "**a **b** c**", `*a \*\*b* c\*\*`},
		{"unicode", "héllo 👀 _wörld_", "héllo 👀 _wörld_"},
		{"trailing newline", "a\n", "a\n"},
		{"empty", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := renderMarkdownV2(c.in)
			if got != c.want {
				t.Errorf("render(%q) = %q, want %q", c.in, got, c.want)
			}
			if _, err := telegramtest.ParseMarkdownV2(got); err != nil {
				t.Errorf("output %q does not parse: %v", got, err)
			}
		})
	}
}

// FuzzRenderMarkdownV2 checks that any input renders to MarkdownV2 that
// Telegram's rules accept and whose visible text is no longer than the input.
func FuzzRenderMarkdownV2(f *testing.F) {
	for _, s := range []string{
		"**bold** _it_ `code` ~~s~~ [l](https://e.x)", "```py\nx = 1\n```", "> q\n# h\n- item",
		`\\*x*\\`, "*a**b*", "_a_b_", "[x](tg://user?id=1)", "a__b__c", "***x***", "~~~", "``` \n```",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if !utf8.ValidString(in) || strings.ContainsRune(in, 0) {
			return
		}
		out := renderMarkdownV2(in)
		visible, err := telegramtest.ParseMarkdownV2(out)
		if err != nil {
			t.Fatalf("render(%q) = %q: %v", in, out, err)
		}
		if n, m := utf8.RuneCountInString(visible), utf8.RuneCountInString(in); n > m {
			t.Fatalf("render(%q): visible %q has %d code points, input %d", in, visible, n, m)
		}
	})
}
