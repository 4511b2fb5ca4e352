package textsplit

import "strings"

// A FenceRule is one markdown dialect's code-block syntax, read a line at a
// time: given the fence line of the block open before line ("" outside a
// block), it returns the one open after it. The fence line is what reopens
// the block in the next piece; it starts with ``` and has at most
// MaxFenceLine bytes. A line of only whitespace must leave the state as it
// is.
type FenceRule func(open, line string) string

// MaxFenceLine bounds the fence line a FenceRule reopens a block with.
const MaxFenceLine = 24

// OddFences is Discord's code-block syntax, approximated: a line holding an
// odd number of ``` opens or closes a block. The opening line, trimmed,
// reopens it when it starts with ```, has no other backtick and fits
// MaxFenceLine (so "```go" keeps its language); otherwise ``` does.
func OddFences(open, line string) string {
	if strings.Count(line, "```")%2 == 0 {
		return open
	}
	if open != "" {
		return ""
	}
	if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") && len(t) <= MaxFenceLine && !strings.Contains(t[3:], "`") {
		return t
	}
	return "```"
}

// LineFences is the fenced-block syntax Telegram's MarkdownV2 renderer
// reads: a line starting with ``` (after spaces) opens a block, a line of
// backticks only closes it. A block is reopened with a bare ```.
func LineFences(open, line string) string {
	if open != "" {
		if IsFenceClose(line) {
			return ""
		}
		return open
	}
	if _, ok := FenceOpen(line); ok {
		return "```"
	}
	return ""
}

// FenceOpen reports whether line opens a LineFences block and returns the
// info string after the ``` (such as "go"), untrimmed.
func FenceOpen(line string) (info string, ok bool) {
	return strings.CutPrefix(strings.TrimLeft(line, " "), "```")
}

// IsFenceClose reports whether line closes a LineFences block: three or
// more backticks and nothing else but whitespace.
func IsFenceClose(line string) bool {
	t := strings.TrimSpace(line)
	return len(t) >= 3 && strings.Trim(t, "`") == ""
}
