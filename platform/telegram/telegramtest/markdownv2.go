package telegramtest

import (
	"fmt"
	"strings"
)

// ParseMarkdownV2 parses text as the Bot API's parse_mode=MarkdownV2 does
// (https://core.telegram.org/bots/api#markdownv2-style) and returns the
// visible text. It is strict where Telegram is: an unescaped reserved
// character outside entity syntax, an unclosed entity, or a mis-nested one
// is an error, worded like Telegram's "can't parse entities" reasons.
// Carriage returns are ignored, as Telegram ignores them.
func ParseMarkdownV2(text string) (string, error) {
	p := mdv2{src: text}
	return p.parse()
}

type mdv2 struct {
	src   string
	out   strings.Builder
	stack []string
}

func (p *mdv2) parse() (string, error) {
	lineStart := true
	for i := 0; i < len(p.src); {
		c := p.src[i]
		start := lineStart
		lineStart = c == '\n'
		var err error
		switch {
		case c == '\r':
			i++
		case c == '\\':
			i, err = p.escape(i)
		case c == '`':
			i, err = p.code(i)
		case c == '*' || c == '~':
			i, err = p.toggle(i, string(c))
		case c == '_' && i+1 < len(p.src) && p.src[i+1] == '_':
			i, err = p.toggle(i, "__")
		case c == '_':
			i, err = p.toggle(i, "_")
		case c == '|' && i+1 < len(p.src) && p.src[i+1] == '|':
			i, err = p.toggle(i, "||")
		case c == '[':
			p.stack = append(p.stack, "[")
			i++
		case c == '!' && i+1 < len(p.src) && p.src[i+1] == '[':
			p.stack = append(p.stack, "[")
			i += 2
		case c == ']':
			i, err = p.linkEnd(i)
		case c == '>' && start:
			i++
		case reserved(c):
			return "", fmt.Errorf("can't parse entities: Character '%c' is reserved and must be escaped with the preceding '\\'", c)
		default:
			p.out.WriteByte(c)
			i++
		}
		if err != nil {
			return "", err
		}
	}
	if len(p.stack) > 0 {
		return "", fmt.Errorf("can't parse entities: Can't find end of %s entity", entityName(p.stack[len(p.stack)-1]))
	}
	return p.out.String(), nil
}

// escape handles "\x": any character with code 1-126 is taken literally.
func (p *mdv2) escape(i int) (int, error) {
	if i+1 >= len(p.src) || p.src[i+1] == 0 || p.src[i+1] > 126 {
		return 0, fmt.Errorf("can't parse entities: Character '\\' is reserved and must be escaped with the preceding '\\'")
	}
	p.out.WriteByte(p.src[i+1])
	return i + 2, nil
}

// toggle opens the entity marker m, or closes it when it is the innermost
// open entity. Re-opening an entity that is open further out is an error.
func (p *mdv2) toggle(i int, m string) (int, error) {
	if n := len(p.stack); n > 0 && p.stack[n-1] == m {
		p.stack = p.stack[:n-1]
		return i + len(m), nil
	}
	for _, open := range p.stack {
		if open == m {
			return 0, fmt.Errorf("can't parse entities: Can't find end of %s entity", entityName(m))
		}
	}
	p.stack = append(p.stack, m)
	return i + len(m), nil
}

// code parses `inline code` or a ```pre block```; inside, only ` and \ are
// special and \ escapes.
func (p *mdv2) code(i int) (int, error) {
	pre := strings.HasPrefix(p.src[i:], "```")
	j := i + 1
	if pre {
		j = i + 3
		// The first line is the language when a newline follows it.
		if nl := strings.IndexByte(p.src[j:], '\n'); nl >= 0 && !strings.ContainsAny(p.src[j:j+nl], "`\\ ") {
			j += nl + 1
		}
	}
	for j < len(p.src) {
		switch c := p.src[j]; {
		case c == '\\':
			if j+1 >= len(p.src) || p.src[j+1] == 0 || p.src[j+1] > 126 {
				return 0, fmt.Errorf("can't parse entities: Character '\\' is reserved and must be escaped with the preceding '\\'")
			}
			p.out.WriteByte(p.src[j+1])
			j += 2
		case c == '`' && pre:
			if !strings.HasPrefix(p.src[j:], "```") {
				return 0, fmt.Errorf("can't parse entities: Character '`' is reserved and must be escaped with the preceding '\\'")
			}
			return j + 3, nil
		case c == '`':
			return j + 1, nil
		case c == '\r':
			j++
		default:
			p.out.WriteByte(c)
			j++
		}
	}
	if pre {
		return 0, fmt.Errorf("can't parse entities: Can't find end of Pre entity")
	}
	return 0, fmt.Errorf("can't parse entities: Can't find end of Code entity")
}

// linkEnd parses "](url)" closing a [text_link] or ![custom emoji].
func (p *mdv2) linkEnd(i int) (int, error) {
	n := len(p.stack)
	if n == 0 || p.stack[n-1] != "[" {
		return 0, fmt.Errorf("can't parse entities: Character ']' is reserved and must be escaped with the preceding '\\'")
	}
	p.stack = p.stack[:n-1]
	if i+1 >= len(p.src) || p.src[i+1] != '(' {
		return 0, fmt.Errorf("can't parse entities: Can't find end of a URL")
	}
	for j := i + 2; j < len(p.src); j++ {
		switch p.src[j] {
		case '\\':
			j++
		case ')':
			if j == i+2 {
				return 0, fmt.Errorf("can't parse entities: empty URL")
			}
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("can't parse entities: Can't find end of a URL")
}

func reserved(c byte) bool {
	return strings.IndexByte("_*[]()~`>#+-=|{}.!", c) >= 0
}

func entityName(m string) string {
	switch m {
	case "*":
		return "Bold"
	case "_":
		return "Italic"
	case "__":
		return "Underline"
	case "~":
		return "Strikethrough"
	case "||":
		return "Spoiler"
	case "[":
		return "TextUrl"
	}
	return m
}
