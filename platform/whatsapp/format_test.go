package whatsapp

import (
	"strings"
	"testing"
)

// TestFormatMessageAsNative checks format_message's conversions, with
// the outputs the native regular expressions give.
func TestFormatMessageAsNative(t *testing.T) {
	for in, want := range map[string]string{
		"**bold** and *it*":           "*bold* and _it_",
		"__bold__ ~~gone~~":           "*bold* ~gone~",
		"# **Title**\ntext":           "*Title*\ntext",
		"see [docs](https://x.y/z)":   "see docs (https://x.y/z)",
		"```\n**kept**\n``` `*kept*`": "```\n**kept**\n``` `*kept*`",
		"* item\n* item":              "* item\n* item",
		"a\u200bb\u00a0c":             "ab c",
		"2 * 3 * 4":                   "2 * 3 * 4",
		"*a*b*":                       "_a_b*",
	} {
		if got := formatMessage(in); got != want {
			t.Errorf("formatMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkFormatManySpans: many code spans are restored in one pass.
func BenchmarkFormatManySpans(b *testing.B) {
	s := strings.Repeat("`a` *b* ", 20_000)
	for b.Loop() {
		formatMessage(s)
	}
}
