package whatsapp

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// This file converts the gateway's markdown to WhatsApp's syntax before a
// send, as the native adapter's format_message (whatsapp_common.py) does:
// zero-width characters stripped and unusual spaces made plain; code
// fences and inline code kept as they are; *i* -> _i_, **b** and __b__ ->
// *b*, ~~s~~ -> ~s~, headers -> *bold*, [t](u) -> t (u).

var (
	invisibleChars = strings.NewReplacer("\u200b", "", "\u2060", "", "\u2063", "", "\ufeff", "")
	oddSpaces      = regexp.MustCompile("[\u00a0\u1680\u180e\u2000-\u200a\u202f\u205f\u3000]")
	fenceBlock     = regexp.MustCompile("```[\\s\\S]*?```")
	inlineCode     = regexp.MustCompile("`[^`\n]+`")
	boldStars      = regexp.MustCompile(`\*\*(.+?)\*\*`)
	boldUnders     = regexp.MustCompile(`__(.+?)__`)
	strike         = regexp.MustCompile(`~~(.+?)~~`)
	header         = regexp.MustCompile(`(?m)^#{1,6}[\s\p{Z}]+(.+)$`)
	mdLink         = regexp.MustCompile(`\[([^\]]+)\]\(([^)]+)\)`)
	placeholder    = regexp.MustCompile("\x00(?:FENCE|CODE)[0-9]+\x00")
)

// formatMessage converts content as format_message does.
func formatMessage(content string) string {
	if content == "" {
		return content
	}
	s := oddSpaces.ReplaceAllString(invisibleChars.Replace(content), " ")
	s, fences := stash(fenceBlock, s, "FENCE")
	s, codes := stash(inlineCode, s, "CODE")
	s = italics(s)
	s = boldStars.ReplaceAllString(s, "*$1*")
	s = boldUnders.ReplaceAllString(s, "*$1*")
	s = strike.ReplaceAllString(s, "~$1~")
	s = header.ReplaceAllStringFunc(s, headerToBold)
	s = mdLink.ReplaceAllString(s, "$1 ($2)")
	// One pass puts every stashed span back (a pass per span would be
	// quadratic in the number of spans).
	s = placeholder.ReplaceAllStringFunc(s, func(m string) string {
		list := codes
		if strings.HasPrefix(m, "\x00FENCE") {
			list = fences
		}
		i, err := strconv.Atoi(strings.Trim(m, "\x00FENCOD"))
		if err != nil || i >= len(list) {
			return m
		}
		return list[i]
	})
	return s
}

// stash replaces every match of re with a numbered placeholder and returns
// the matches.
func stash(re *regexp.Regexp, s, tag string) (string, []string) {
	var saved []string
	out := re.ReplaceAllStringFunc(s, func(m string) string {
		saved = append(saved, m)
		return "\x00" + tag + strconv.Itoa(len(saved)-1) + "\x00"
	})
	return out, saved
}

// italics rewrites *text* as _text_ where Python's
// (?<!\*)\*(?!\s|\*)([^*\n]*?\S[^*\n]*?)\*(?!\*) matches: an opening star
// not after a star and not before a space or star, the text up to the
// next star on the line, and a closing star not before another star.
func italics(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '*' || (i > 0 && s[i-1] == '*') || i+1 >= len(s) || s[i+1] == '*' {
			continue
		}
		if r := []rune(s[i+1 : min(len(s), i+5)]); len(r) == 0 || unicode.IsSpace(r[0]) {
			continue
		}
		end := strings.IndexAny(s[i+1:], "*\n")
		if end < 0 {
			continue
		}
		k := i + 1 + end
		if s[k] != '*' || (k+1 < len(s) && s[k+1] == '*') {
			continue
		}
		b.WriteString(s[last:i])
		b.WriteString("_" + s[i+1:k] + "_")
		last = k + 1
		i = k
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// headerToBold is a header line as bold, stripping stars already around
// its text (# **Title** does not keep literal stars).
func headerToBold(line string) string {
	m := header.FindStringSubmatch(line)
	inner := strings.TrimSpace(m[1])
	for len(inner) > 1 && strings.HasPrefix(inner, "*") && strings.HasSuffix(inner, "*") {
		inner = strings.TrimSpace(inner[1 : len(inner)-1])
	}
	return "*" + inner + "*"
}
