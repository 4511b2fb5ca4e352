// Package textsplit fits text into the limits of the places it is sent to:
// it cuts a long chat message into pieces a platform accepts without
// breaking its code blocks (Split), and shortens or chunks a string by bytes
// without cutting a UTF-8 encoded rune (Truncate, TruncateRunes,
// SplitBytes).
//
// Split is the one splitter of Discord and Telegram messages; Rules hold
// what differs between them. Text that fits is returned unchanged. For
// longer text the guarantee, checked by FuzzSplit, is: every piece has at
// most Rules.Limit code points and none is blank; valid UTF-8 stays valid
// (no cut falls inside a rune); with each piece's reopened fence line and
// appended fence close taken off, the pieces are the input in order, and
// what lies between them (and before the first or after the last) is
// whitespace only; and every piece but the last leaves no code block open.
// So nothing but whitespace is ever dropped: the separator at a cut, and
// whitespace that would otherwise make a blank piece, which both platforms
// refuse.
package textsplit

import (
	"strings"
	"unicode/utf8"
)

// Rules say how one platform's messages are cut.
type Rules struct {
	// Limit is the most code points a piece may hold, reopened fence line
	// and fence close included. When the text has code blocks it must be
	// at least MaxFenceLine+6: the longest reopen line, its line break, the
	// close and one code point.
	Limit int
	// Breaks are the separators a cut falls on, most preferred first
	// (such as "\n" then " "). The separator at a cut is dropped. Without
	// one in reach, a cut falls between two code points.
	Breaks []string
	// KeepHalf takes a break only when the piece before it keeps at least
	// half of the bytes that would fit; a cut between code points is
	// preferred to a short piece.
	KeepHalf bool
	// Fence tracks code blocks; nil means the text has none.
	Fence FenceRule
}

// closeFence ends a piece that stops inside a code block; the next piece
// starts with the block's fence line, so no block is broken.
const closeFence = "\n```"

// Split cuts s into pieces of at most r.Limit code points. Text that fits
// is returned unchanged as the only piece. Otherwise each cut falls on the
// last of r.Breaks in reach, in order of preference; a piece that ends
// inside a code block is closed with ``` and the next piece reopens the
// block with its fence line. The separator at a cut is dropped, and so is
// a stretch between two cuts holding only whitespace. A text with any
// other character yields at least one piece. Invalid UTF-8 is cut like
// text, each invalid byte counting as one code point.
func Split(s string, r Rules) []string {
	if utf8.RuneCountInString(s) <= r.Limit {
		return []string{s}
	}
	pieces := r.pieces(s)
	out := make([]string, len(pieces))
	for i, p := range pieces {
		out[i] = p.String()
	}
	return out
}

// piece is one message of a split: body is s[start:start+len(body)].
type piece struct {
	// reopen is the fence line of the code block the piece starts in, or ""
	// when it starts outside one.
	reopen string
	start  int
	body   string
	// close is set when the piece ends inside a code block.
	close bool
}

// String is the piece as sent.
func (p piece) String() string {
	if p.reopen == "" && !p.close {
		return p.body
	}
	var b strings.Builder
	b.Grow(len(p.reopen) + 1 + len(p.body) + len(closeFence))
	if p.reopen != "" {
		b.WriteString(p.reopen)
		b.WriteByte('\n')
	}
	b.WriteString(p.body)
	if p.close {
		b.WriteString(closeFence)
	}
	return b.String()
}

// pieces does Split's work; each piece costs time in proportion to the
// bytes it can hold, so the whole split is linear in len(s).
func (r Rules) pieces(s string) []piece {
	out := make([]piece, 0, len(s)/max(r.Limit, 1)+1)
	open := "" // fence line of the code block open where the rest starts
	for pos := 0; pos < len(s); {
		rest := s[pos:]
		room := r.Limit
		if open != "" {
			room -= utf8.RuneCountInString(open) + 1
		}
		end := runeOffset(rest, max(room, 1))
		cut, skip, next := len(rest), 0, ""
		if end < len(rest) {
			cut, skip = r.cutPoint(rest, end)
			if next = r.fenceAfter(open, rest[:cut]); next != "" {
				// The piece ends inside a code block: make room to close it.
				end = runeOffset(rest, max(room-len(closeFence), 1))
				cut, skip = r.cutPoint(rest, end)
				next = r.fenceAfter(open, rest[:cut])
			}
		}
		// A blank body is dropped; it changes no fence state (FenceRule).
		if body := rest[:cut]; strings.TrimSpace(body) != "" {
			out = append(out, piece{reopen: open, start: pos, body: body, close: next != ""})
			open = next
		}
		pos += cut + skip
	}
	return out
}

// cutPoint returns where to cut rest, given that rest[:end] is what fits,
// and how many separator bytes after the cut to drop.
func (r Rules) cutPoint(rest string, end int) (cut, skip int) {
	window := rest[:end]
	for _, sep := range r.Breaks {
		if i := strings.LastIndex(window, sep); i > 0 && (!r.KeepHalf || i >= end/2) {
			return i, len(sep)
		}
	}
	return end, 0
}

// fenceAfter returns the fence line of the code block open after text,
// given the one open before it.
func (r Rules) fenceAfter(open, text string) string {
	if r.Fence == nil {
		return ""
	}
	for line := range strings.SplitSeq(text, "\n") {
		open = r.Fence(open, line)
	}
	return open
}

// runeOffset returns the byte offset just past the first n code points of
// s, or len(s) when s has fewer.
func runeOffset(s string, n int) int {
	if n <= 0 {
		return 0
	}
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}
