package discord

import (
	"strings"
	"unicode/utf8"
)

// MaxMessageLength is Discord's content limit for bots, in code points.
const MaxMessageLength = 2000

// fenceClose ends a code block cut by a split.
const fenceClose = "\n```"

// maxFenceHeader bounds the reopened fence line ("```lang").
const maxFenceHeader = 24

// splitMessage cuts s into pieces of at most limit code points, preferring a
// line break, then a space, and cutting mid-word only when a piece has
// neither. A piece that ends inside a ``` code block is closed with ``` and
// the next piece reopens it with the same fence line, so no code block is
// broken. The separator at a cut is dropped. limit must leave room for a
// reopened fence line and its close (at least 64 when s has fences).
func splitMessage(s string, limit int) []string {
	if utf8.RuneCountInString(s) <= limit {
		return []string{s}
	}
	var out []string
	fence := ""
	for s != "" {
		prefix := ""
		if fence != "" {
			prefix = fence + "\n"
		}
		room := limit - utf8.RuneCountInString(prefix)
		if utf8.RuneCountInString(s) <= room {
			out = append(out, prefix+s)
			break
		}
		cut, skip := cutPoint(s, room)
		next := fenceAfter(fence, s[:cut])
		if next != "" {
			// The piece ends inside a code block: make room to close it.
			cut, skip = cutPoint(s, room-len(fenceClose))
			next = fenceAfter(fence, s[:cut])
		}
		piece := s[:cut]
		s = s[cut+skip:]
		fence = next
		text := prefix + piece
		if fence != "" {
			text += fenceClose
		}
		if strings.TrimSpace(piece) != "" || fence != "" {
			out = append(out, text)
		}
	}
	return out
}

// cutPoint returns where to cut s so the piece holds at most room code
// points, and how many separator bytes to drop after it.
func cutPoint(s string, room int) (cut, skip int) {
	room = max(room, 1)
	end, n := 0, 0
	for i := range s {
		if n == room {
			end = i
			break
		}
		n++
	}
	if end == 0 {
		end = len(s)
	}
	window := s[:end]
	if i := strings.LastIndexByte(window, '\n'); i > 0 {
		return i, 1
	}
	if i := strings.LastIndexByte(window, ' '); i > 0 {
		return i, 1
	}
	return end, 0
}

// fenceAfter returns the fence line open after piece, given the one open
// before it ("" when none). A line holding an odd number of ``` toggles the
// state; the opening line (trimmed, capped) is what reopens the block.
func fenceAfter(open, piece string) string {
	for line := range strings.SplitSeq(piece, "\n") {
		if strings.Count(line, "```")%2 == 0 {
			continue
		}
		if open != "" {
			open = ""
			continue
		}
		open = "```"
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") && len(t) <= maxFenceHeader && !strings.Contains(t[3:], "`") {
			open = t
		}
	}
	return open
}
