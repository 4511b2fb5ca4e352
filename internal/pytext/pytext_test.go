package pytext

import "testing"

// TestIsSpace: every character Python's str.isspace() accepts (bidi class
// WS, B or S, or category Zs) and a few it does not.
func TestIsSpace(t *testing.T) {
	python := []rune{'\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, ' ', 0x85, 0xa0, 0x1680,
		0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000}
	for _, r := range python {
		if !IsSpace(r) {
			t.Errorf("%U: not a space, Python says it is", r)
		}
	}
	for _, r := range []rune{0, 0x1b, 0x7f, 0x180e, 0x200b, 0xfeff, 'a', '_'} {
		if IsSpace(r) {
			t.Errorf("%U: a space, Python says it is not", r)
		}
	}
}

// TestIsWord: letters and numbers of any script and "_" are word
// characters; punctuation, symbols and spaces are not.
func TestIsWord(t *testing.T) {
	for _, r := range []rune{'a', 'Z', '0', '_', 'é', 'ı', 'ſ', 'K', 'Ж', '٣', '²', 'Ⅻ', '中'} {
		if !IsWord(r) {
			t.Errorf("%q: not a word character", r)
		}
	}
	for _, r := range []rune{'@', '-', ',', ':', '.', ' ', '`', '/', '😀', 0x1f} {
		if IsWord(r) {
			t.Errorf("%q: a word character", r)
		}
	}
}

func TestStrip(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "",
		"  hi  ":                 "hi",
		"\x1f\u3000hi there\x1c": "hi there",
		"\u200bhi":               "\u200bhi",
		"\u00a0 \n":              "",
	} {
		if got := Strip(in); got != want {
			t.Errorf("Strip(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTruthyIsPythonBool(t *testing.T) {
	for raw, want := range map[string]bool{
		"": false, "null": false, "false": false, "true": true, "0": false, "0.0": false, "-0": false, "2": true,
		`""`: false, `"0"`: true, "{}": false, "{ }": false, `{"a":1}`: true, "[]": false, "[ ]": false, "[0]": true, " true ": true,
	} {
		if got := Truthy([]byte(raw)); got != want {
			t.Errorf("Truthy(%q) = %v, want %v", raw, got, want)
		}
	}
}
