package telegram

import (
	"slices"
	"strings"

	"connector/internal/textsplit"
)

// renderMarkdownV2 converts the gateway's markdown to Telegram MarkdownV2.
//
// Understood: ``` fences (with a language), `code`, **bold** and __bold__,
// *italic* and _italic_, ~~strike~~, [text](http(s)|tg|mailto URL),
// "# heading" lines (rendered bold) and "> quote" lines. A marker only
// becomes formatting when it is closed on the same line; everything else is
// escaped (including the backslash, which bot.EscapeMarkdown misses), so the
// result always parses. The visible text never has more code points than src,
// which lets the splitter measure the source.
func renderMarkdownV2(src string) string {
	r := mdRenderer{}
	r.b.Grow(len(src) + len(src)/8 + 16)
	inFence := false
	for first := true; ; first = false {
		line, rest, more := strings.Cut(src, "\n")
		if !first {
			r.raw("\n")
		}
		switch {
		case inFence && textsplit.IsFenceClose(line):
			r.raw("```")
			inFence = false
		case inFence:
			r.code(line)
		default:
			if info, ok := textsplit.FenceOpen(line); ok {
				r.raw("```")
				r.raw(fenceLang(info))
				inFence = true
			} else {
				r.block(line)
			}
		}
		if !more {
			break
		}
		src = rest
	}
	if inFence {
		r.raw("\n```")
	}
	return r.b.String()
}

type mdRenderer struct {
	b strings.Builder
	// afterItalic is set when the last byte written is an italic marker: a
	// following italic marker would form "__" (underline), so a \r (ignored
	// by Telegram) is put between them.
	afterItalic bool
}

// spans are inline formats that are open; the same kind never nests.
type spans uint8

const (
	spanBold spans = 1 << iota
	spanItalic
	spanStrike
	spanLink
)

// block renders one line outside a fence.
func (r *mdRenderer) block(line string) {
	if text, ok := heading(line); ok {
		r.raw("*")
		r.inline(text, spanBold)
		r.raw("*")
		return
	}
	if rest, ok := strings.CutPrefix(line, ">"); ok {
		r.raw(">")
		r.inline(strings.TrimPrefix(rest, " "), 0)
		return
	}
	r.inline(line, 0)
}

// heading recognizes "# text" to "###### text".
func heading(line string) (string, bool) {
	n := 0
	for n < len(line) && line[n] == '#' {
		n++
	}
	if n == 0 || n > 6 || n >= len(line) || line[n] != ' ' {
		return "", false
	}
	text := strings.TrimSpace(line[n:])
	return text, text != ""
}

// fenceLang returns the language of an opening fence's info string, kept
// only when it is a plain identifier such as go or c++.
func fenceLang(info string) string {
	lang, _, _ := strings.Cut(strings.TrimSpace(info), " ")
	if len(lang) > 32 {
		return ""
	}
	for i := 0; i < len(lang); i++ {
		c := lang[i]
		if !(isAlnum(c) || c == '_' || c == '+' || c == '-' || c == '#') {
			return ""
		}
	}
	return lang
}

// inline renders a line's inline spans; open lists the spans already open.
func (r *mdRenderer) inline(s string, open spans) {
	for i := 0; i < len(s); {
		c := s[i]
		switch c {
		case '\\':
			if i+1 < len(s) && isASCIIPunct(s[i+1]) {
				r.escaped(s[i+1])
				i += 2
				continue
			}
			r.escaped('\\')
			i++
		case '`':
			i = r.codeSpan(s, i)
		case '*', '_':
			i = r.emphasis(s, i, open)
		case '~':
			i = r.strike(s, i, open)
		case '[':
			i = r.link(s, i, open)
		default:
			j := i + 1
			for j < len(s) && !isReserved(s[j]) {
				j++
			}
			if isReserved(c) {
				r.escaped(c)
				r.raw(s[i+1 : j])
			} else {
				r.raw(s[i:j])
			}
			i = j
		}
	}
}

// codeSpan renders the code span opened by the run of backticks at s[i];
// an unclosed run of backticks is literal.
func (r *mdRenderer) codeSpan(s string, i int) int {
	n := runLen(s, i, '`')
	for j := i + n; j < len(s); {
		k := strings.IndexByte(s[j:], '`')
		if k < 0 {
			break
		}
		k += j
		if m := runLen(s, k, '`'); m != n {
			j = k + m
			continue
		}
		content := s[i+n : k]
		if len(content) >= 2 && content[0] == ' ' && content[len(content)-1] == ' ' && strings.TrimSpace(content) != "" {
			content = content[1 : len(content)-1]
		}
		if content == "" {
			break
		}
		r.raw("`")
		r.code(content)
		r.raw("`")
		return k + n
	}
	for range n {
		r.escaped('`')
	}
	return i + n
}

// emphasis renders **bold**, __bold__, *italic* or _italic_ at s[i].
func (r *mdRenderer) emphasis(s string, i int, open spans) int {
	c := s[i]
	n := runLen(s, i, c)
	if n >= 2 && open&spanBold == 0 && canOpen(s, i, 2) {
		if j := closer(s, i+2, c, 2); j >= 0 {
			r.raw("*")
			r.inline(s[i+2:j], open|spanBold)
			r.raw("*")
			return j + 2
		}
	}
	if n == 1 && open&spanItalic == 0 && canOpen(s, i, 1) {
		if j := closer(s, i+1, c, 1); j >= 0 {
			r.italicMarker()
			r.inline(s[i+1:j], open|spanItalic)
			r.italicMarker()
			return j + 1
		}
	}
	for range n {
		r.escaped(c)
	}
	return i + n
}

// strike renders ~~strike~~ at s[i].
func (r *mdRenderer) strike(s string, i int, open spans) int {
	if runLen(s, i, '~') == 2 && open&spanStrike == 0 && canOpen(s, i, 2) {
		if j := closer(s, i+2, '~', 2); j >= 0 {
			r.raw("~")
			r.inline(s[i+2:j], open|spanStrike)
			r.raw("~")
			return j + 2
		}
	}
	r.escaped('~')
	return i + 1
}

// link renders [text](url) at s[i] when the URL has a scheme Telegram links.
func (r *mdRenderer) link(s string, i int, open spans) int {
	if open&spanLink == 0 {
		if text, url, end, ok := parseLink(s, i); ok {
			r.raw("[")
			r.inline(text, open|spanLink)
			r.raw("](")
			for k := 0; k < len(url); k++ {
				if url[k] == ')' || url[k] == '\\' {
					r.raw("\\")
				}
				r.b.WriteByte(url[k])
			}
			r.raw(")")
			r.afterItalic = false
			return end
		}
	}
	r.escaped('[')
	return i + 1
}

// parseLink parses [text](url) at s[i]; end is the index after ")".
func parseLink(s string, i int) (text, url string, end int, ok bool) {
	close := strings.IndexByte(s[i+1:], ']')
	if close <= 0 {
		return "", "", 0, false
	}
	close += i + 1
	if close+1 >= len(s) || s[close+1] != '(' {
		return "", "", 0, false
	}
	paren := strings.IndexByte(s[close+2:], ')')
	if paren <= 0 {
		return "", "", 0, false
	}
	url = s[close+2 : close+2+paren]
	if strings.ContainsAny(url, " \t") || !linkable(url) {
		return "", "", 0, false
	}
	return s[i+1 : close], url, close + 2 + paren + 1, true
}

func linkable(url string) bool {
	return slices.ContainsFunc([]string{"https://", "http://", "tg://", "mailto:"}, func(p string) bool {
		return len(url) > len(p) && strings.EqualFold(url[:len(p)], p)
	})
}

// canOpen reports whether the n-character marker at s[i] may open a span:
// it is followed by a non-space, and an underscore is not inside a word
// (snake_case stays literal).
func canOpen(s string, i, n int) bool {
	if i+n >= len(s) || s[i+n] == ' ' {
		return false
	}
	return s[i] != '_' || i == 0 || !isAlnum(s[i-1])
}

// closer finds the n-character marker c closing a span whose content starts
// at from: not preceded by a space, not part of a longer run (for n == 1),
// and for underscores not followed by a letter or digit.
func closer(s string, from int, c byte, n int) int {
	for j := from + 1; j+n <= len(s); j++ {
		if s[j] != c {
			continue
		}
		run := runLen(s, j, c)
		if s[j-1] == ' ' || s[j-1] == '\\' || (n == 1 && run != 1) || run < n {
			j += run - 1
			continue
		}
		if c == '_' && j+n < len(s) && isAlnum(s[j+n]) {
			j += run - 1
			continue
		}
		return j
	}
	return -1
}

func runLen(s string, i int, c byte) int {
	n := 0
	for i+n < len(s) && s[i+n] == c {
		n++
	}
	return n
}

func (r *mdRenderer) italicMarker() {
	if r.afterItalic {
		r.b.WriteByte('\r')
	}
	r.b.WriteByte('_')
	r.afterItalic = true
}

func (r *mdRenderer) raw(s string) {
	if s != "" {
		r.b.WriteString(s)
		r.afterItalic = false
	}
}

func (r *mdRenderer) escaped(c byte) {
	r.b.WriteByte('\\')
	r.b.WriteByte(c)
	r.afterItalic = false
}

// code writes the content of a code span or block: only ` and \ are escaped.
func (r *mdRenderer) code(s string) {
	for i := 0; i < len(s); i++ {
		if s[i] == '`' || s[i] == '\\' {
			r.b.WriteByte('\\')
		}
		r.b.WriteByte(s[i])
	}
	r.afterItalic = false
}

// isReserved reports the characters MarkdownV2 requires escaped outside
// entities, the backslash included.
func isReserved(c byte) bool { return strings.IndexByte("_*[]()~`>#+-=|{}.!\\", c) >= 0 }

func isASCIIPunct(c byte) bool {
	return c >= '!' && c <= '/' || c >= ':' && c <= '@' || c >= '[' && c <= '`' || c >= '{' && c <= '~'
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}
