package telegramtest

import "testing"

// The examples of https://core.telegram.org/bots/api#markdownv2-style parse;
// the classic mistakes do not.
func TestParseMarkdownV2(t *testing.T) {
	valid := map[string]string{
		`*bold \*text*`:   "bold *text",
		`_italic \*text_`: "italic *text",
		`__underline__`:   "underline",
		`~strikethrough~`: "strikethrough",
		`||spoiler||`:     "spoiler",
		`*bold _italic bold ~italic bold strikethrough ||italic bold strikethrough spoiler||~ __underline italic bold___ bold*`: "bold italic bold italic bold strikethrough italic bold strikethrough spoiler underline italic bold bold",
		`[inline URL](http://www.example.com/)`:                                               "inline URL",
		`[mention](tg://user?id=123456789)`:                                                   "mention",
		"`inline fixed-width code`":                                                           "inline fixed-width code",
		"```\npre-formatted fixed-width code block\n```":                                      "pre-formatted fixed-width code block\n",
		"```python\npre-formatted code block written in the Python programming language\n```": "pre-formatted code block written in the Python programming language\n",
		">Block quotation started\n>Block quotation continued":                                "Block quotation started\nBlock quotation continued",
		`1\+1\=2\. C:\\dir`:                                                                   `1+1=2. C:\dir`,
		"_a_\r__b__":                                                                          "ab",
	}
	for in, want := range valid {
		got, err := ParseMarkdownV2(in)
		if err != nil || got != want {
			t.Errorf("ParseMarkdownV2(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"1+1=2.", "end.", "*unclosed", "_a *b_ c*", "[text](", "[text] no url", "`code", "```\ncode", `trailing \`,
		"a > b", "x|y",
	} {
		if got, err := ParseMarkdownV2(in); err == nil {
			t.Errorf("ParseMarkdownV2(%q) = %q, want an error", in, got)
		}
	}
}
