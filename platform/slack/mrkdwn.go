package slack

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"connector/internal/textsplit"
)

// This file converts the gateway's markdown to Slack mrkdwn as the native
// adapter's format_message does, and splits it as its send does: tables
// fenced and aligned, code kept as it is (a fence's language tag
// dropped), [t](u) as <u|t>, headers and **b** as *b*, *i* as _i_, ~~s~~
// as ~s~, & < > escaped outside links, mentions, code and quotes, and
// <!here>, <!channel>, <!everyone> neutralized so a reply never pings a
// channel. Go's regexp has no lookarounds: the native patterns' (?<!!),
// (?<!\*) and (?!\*) are checked in code.

// maxMessageRunes is the native MAX_MESSAGE_LENGTH (Slack takes 40,000).
const maxMessageRunes = 39000

// splitRules cut formatted text longer than maxMessageRunes at a
// paragraph, line or word break (keeping at least half a part), carrying
// an open code fence over to the next part.
var splitRules = textsplit.Rules{
	Limit:    maxMessageRunes,
	Breaks:   []string{"\n\n", "\n", " "},
	KeepHalf: true,
	Fence:    textsplit.LineFences,
}

// mrkdwnParts is content as mrkdwn, split into messages.
func mrkdwnParts(content string) []string {
	return textsplit.Split(toMrkdwn(content), splitRules)
}

var (
	specialMention = regexp.MustCompile(`(?i)<!(?:everyone|channel|here)(?:\|[^>\n]*)?>`)
	fenceBlock     = regexp.MustCompile("(```(?:[^\n]*\n)?[\\s\\S]*?```)")
	fenceLang      = regexp.MustCompile("\\A```[^\\s`]+[ \t]*(\r?\n)")
	codeSpan       = regexp.MustCompile("(`[^`]+`)")
	mdLink         = regexp.MustCompile(`\[([^\]]+)\]\(([^()]*(?:\([^()]*\)[^()]*)*)\)`)
	slackEntity    = regexp.MustCompile(`(<(?:[@#!]|(?:https?|mailto|tel):)[^>\n]+>)`)
	quoteMarker    = regexp.MustCompile(`(?m)^(>+\s)`)
	mdHeader       = regexp.MustCompile(`(?m)^#{1,6}\s+(.+)$`)
	boldInHeader   = regexp.MustCompile(`\*\*(.+?)\*\*`)
	boldItalic     = regexp.MustCompile(`\*\*\*(.+?)\*\*\*`)
	mdBold         = regexp.MustCompile(`\*\*(.+?)\*\*`)
	mdItalic       = regexp.MustCompile(`\*(\S(?:[^*\n]*?\S)?)\*`)
	mdStrike       = regexp.MustCompile(`~~(.+?)~~`)
	tableSep       = regexp.MustCompile(`^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*){1,}\|?\s*$`)
	entityEscape   = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
)

// placeholders stash converted spans behind keys ("\x00SL<n>\x00") later
// passes do not touch.
type placeholders struct {
	values []string
}

func (p *placeholders) put(v string) string {
	p.values = append(p.values, v)
	return "\x00SL" + strconv.Itoa(len(p.values)-1) + "\x00"
}

// restore puts the stashed spans back, in one pass: a span may hold keys
// stashed before it, which are put back in it in turn (and only those,
// as if the last stashed were put back first).
func (p *placeholders) restore(s string) string {
	var b strings.Builder
	p.restoreBelow(&b, s, len(p.values))
	return b.String()
}

// restoreBelow writes s with the keys of the spans before limit put back.
func (p *placeholders) restoreBelow(b *strings.Builder, s string, limit int) {
	for {
		i := strings.Index(s, "\x00SL")
		if i < 0 {
			b.WriteString(s)
			return
		}
		digits, _, closed := strings.Cut(s[i+3:], "\x00")
		n, err := strconv.Atoi(digits)
		if !closed || err != nil || n < 0 || n >= limit || digits != strconv.Itoa(n) {
			b.WriteString(s[:i+1])
			s = s[i+1:]
			continue
		}
		b.WriteString(s[:i])
		p.restoreBelow(b, p.values[n], n)
		s = s[i+3+len(digits)+1:]
	}
}

// replaceFunc is ReplaceAllStringFunc with the match's submatch indexes,
// for the passes that check a neighbour the pattern cannot.
func replaceFunc(re *regexp.Regexp, s string, fn func(s string, m []int) (string, bool)) string {
	var b strings.Builder
	last := 0
	for _, m := range re.FindAllStringSubmatchIndex(s, -1) {
		repl, ok := fn(s, m)
		if !ok {
			continue
		}
		b.WriteString(s[last:m[0]])
		b.WriteString(repl)
		last = m[1]
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// toMrkdwn is format_message.
func toMrkdwn(content string) string {
	if content == "" {
		return content
	}
	var ph placeholders
	text := wrapTables(content)
	text = specialMention.ReplaceAllStringFunc(text, func(m string) string { return "&lt;" + m[1:] })
	text = replaceFunc(fenceBlock, text, func(s string, m []int) (string, bool) {
		block := s[m[0]:m[1]]
		if m[0] == 0 || s[m[0]-1] == '\n' {
			block = fenceLang.ReplaceAllString(block, "```$1")
		}
		return ph.put(block), true
	})
	text = codeSpan.ReplaceAllStringFunc(text, ph.put)
	text = replaceFunc(mdLink, text, func(s string, m []int) (string, bool) {
		if m[0] > 0 && s[m[0]-1] == '!' {
			return "", false // an image, not a link
		}
		url := strings.TrimSpace(s[m[4]:m[5]])
		if strings.HasPrefix(url, "<") && strings.HasSuffix(url, ">") {
			url = strings.TrimSpace(url[1 : len(url)-1])
		}
		return ph.put("<" + url + "|" + s[m[2]:m[3]] + ">"), true
	})
	text = slackEntity.ReplaceAllStringFunc(text, ph.put)
	text = quoteMarker.ReplaceAllStringFunc(text, ph.put)
	text = entityEscape.Replace(htmlEntity.Replace(text))
	text = mdHeader.ReplaceAllStringFunc(text, func(m string) string {
		inner := strings.TrimSpace(mdHeader.FindStringSubmatch(m)[1])
		return ph.put("*" + boldInHeader.ReplaceAllString(inner, "$1") + "*")
	})
	text = boldItalic.ReplaceAllStringFunc(text, func(m string) string {
		return ph.put("*_" + boldItalic.FindStringSubmatch(m)[1] + "_*")
	})
	text = mdBold.ReplaceAllStringFunc(text, func(m string) string {
		inner := mdBold.FindStringSubmatch(m)[1]
		zw := ""
		if r := []rune(inner); len(r) > 0 && !unicode.IsLetter(r[len(r)-1]) && !unicode.IsDigit(r[len(r)-1]) && r[len(r)-1] != '_' {
			zw = "\u200b" // Slack misses a closing * after punctuation
		}
		return ph.put("*" + inner + zw + "*")
	})
	text = replaceFunc(mdItalic, text, func(s string, m []int) (string, bool) {
		if (m[0] > 0 && s[m[0]-1] == '*') || (m[1] < len(s) && s[m[1]] == '*') {
			return "", false
		}
		return ph.put("_" + s[m[2]:m[3]] + "_"), true
	})
	text = mdStrike.ReplaceAllStringFunc(text, func(m string) string {
		return ph.put("~" + mdStrike.FindStringSubmatch(m)[1] + "~")
	})
	return ph.restore(text)
}

// wrapTables fences GFM pipe tables and aligns their columns, as Slack
// shows pipes literally (_wrap_markdown_tables).
func wrapTables(text string) string {
	if !strings.Contains(text, "|") || !strings.Contains(text, "-") {
		return text
	}
	lines := strings.Split(text, "\n")
	out := make([]string, 0, len(lines))
	inFence := false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(strings.TrimLeft(line, " \t"), "```"):
			inFence = !inFence
		case !inFence && strings.Contains(line, "|") && i+1 < len(lines) && tableSep.MatchString(lines[i+1]):
			block := []string{line, lines[i+1]}
			j := i + 2
			for ; j < len(lines) && strings.TrimSpace(lines[j]) != "" && strings.Contains(lines[j], "|"); j++ {
				block = append(block, lines[j])
			}
			out = append(out, "```")
			out = append(out, alignTable(block)...)
			out = append(out, "```")
			i = j - 1
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// alignTable pads a table's cells to their column's display width; row 1
// is the separator, regenerated.
func alignTable(rows []string) []string {
	cells := make([][]string, len(rows))
	cols := 0
	for i, r := range rows {
		s := strings.TrimSpace(r)
		s = strings.TrimPrefix(s, "|")
		s = strings.TrimSuffix(s, "|")
		for _, c := range strings.Split(s, "|") {
			cells[i] = append(cells[i], strings.TrimSpace(c))
		}
		cols = max(cols, len(cells[i]))
	}
	widths := make([]int, cols)
	for i := range cells {
		for len(cells[i]) < cols {
			cells[i] = append(cells[i], "")
		}
		if i == 1 {
			for c := range cells[i] {
				cells[i][c] = "---" // regenerated below
			}
		}
		for c, v := range cells[i] {
			widths[c] = max(widths[c], displayWidth(v))
		}
	}
	out := make([]string, len(rows))
	for i := range cells {
		parts := make([]string, cols)
		for c := range cols {
			if i == 1 {
				parts[c] = strings.Repeat("-", widths[c])
				continue
			}
			parts[c] = cells[i][c] + strings.Repeat(" ", widths[c]-displayWidth(cells[i][c]))
		}
		out[i] = "| " + strings.Join(parts, " | ") + " |"
	}
	return out
}

// displayWidth counts East Asian wide and fullwidth characters as two
// columns.
func displayWidth(s string) int {
	w := 0
	for _, r := range s {
		w++
		if wide(r) {
			w++
		}
	}
	return w
}

// wide reports East Asian Wide or Fullwidth code points (the common
// ranges of Unicode's EastAsianWidth.txt).
func wide(r rune) bool {
	switch {
	case r >= 0x1100 && r <= 0x115F, r >= 0x2E80 && r <= 0x303E, r >= 0x3041 && r <= 0x33FF,
		r >= 0x3400 && r <= 0x4DBF, r >= 0x4E00 && r <= 0x9FFF, r >= 0xA000 && r <= 0xA4CF,
		r >= 0xAC00 && r <= 0xD7A3, r >= 0xF900 && r <= 0xFAFF, r >= 0xFE30 && r <= 0xFE4F,
		r >= 0xFF00 && r <= 0xFF60, r >= 0xFFE0 && r <= 0xFFE6, r >= 0x1F300 && r <= 0x1F64F,
		r >= 0x1F900 && r <= 0x1F9FF, r >= 0x20000 && r <= 0x3FFFD:
		return true
	}
	return false
}
