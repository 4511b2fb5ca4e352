package telegram

import (
	"strings"
	"unicode/utf8"
)

// maxMessageRunes is sendMessage's limit: 4,096 characters after entity
// parsing, counted by TDLib in Unicode code points.
const maxMessageRunes = 4096

// fenceCloser closes a code fence left open at the end of a chunk; the next
// chunk reopens it with fenceOpener.
const (
	fenceCloser = "\n```"
	fenceOpener = "```\n"
)

// splitMessage splits content into chunks of at most limit code points,
// cutting at a paragraph break, else a line break, else a space, as long as
// that keeps at least half a chunk; otherwise it cuts between code points. A
// code fence open at a cut is closed there and reopened in the next chunk.
// limit must leave room for the fence markers (at least 16). The separator
// at a cut is dropped, and chunks that are only whitespace
// are skipped. Each chunk's markdown renders to no more visible characters
// than the chunk has, so both the MarkdownV2 and the plain-text sends fit.
func splitMessage(content string, limit int) []string {
	if utf8.RuneCountInString(content) <= limit {
		return []string{content}
	}
	var chunks []string
	prefix := ""
	for content != "" {
		budget := limit - len(prefix)
		if utf8.RuneCountInString(content) <= budget {
			chunks = appendChunk(chunks, prefix+content)
			break
		}
		budget = max(budget-len(fenceCloser), 1)
		cut, skip := cutPoint(content, budget)
		chunk := prefix + content[:cut]
		content = content[cut+skip:]
		prefix = ""
		if fenceOpenAtEnd(chunk) {
			chunk += fenceCloser
			prefix = fenceOpener
		}
		chunks = appendChunk(chunks, chunk)
	}
	return chunks
}

func appendChunk(chunks []string, c string) []string {
	if strings.TrimSpace(c) == "" || c == fenceOpener+fenceCloser[1:] {
		return chunks
	}
	return append(chunks, c)
}

// cutPoint returns where to cut s so that s[:cut] has at most budget code
// points, and how many separator bytes after the cut to drop.
func cutPoint(s string, budget int) (cut, skip int) {
	end := 0
	for n := 0; n < budget && end < len(s); n++ {
		_, size := utf8.DecodeRuneInString(s[end:])
		end += size
	}
	window := s[:end]
	for _, sep := range []string{"\n\n", "\n", " "} {
		if i := strings.LastIndex(window, sep); i > 0 && i >= end/2 {
			return i, len(sep)
		}
	}
	return end, 0
}

// fenceOpenAtEnd reports whether a code fence is still open at the end of
// s, judged line by line exactly as renderMarkdownV2 judges fences.
func fenceOpenAtEnd(s string) bool {
	open := false
	for line := range strings.SplitSeq(s, "\n") {
		switch {
		case open && isFenceClose(line):
			open = false
		case !open:
			_, open = fenceOpen(line)
		}
	}
	return open
}
