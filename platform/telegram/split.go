package telegram

import "connector/internal/textsplit"

// maxMessageRunes is sendMessage's limit: 4,096 characters after entity
// parsing, counted by TDLib in Unicode code points.
const maxMessageRunes = 4096

// splitRules cut content longer than maxMessageRunes: at a paragraph break,
// else a line break, else a space, as long as that keeps at least half a
// piece; otherwise between code points. A code fence open at a cut is closed
// there and reopened (bare ```) in the next piece, judged line by line as
// renderMarkdownV2 judges fences (textsplit.LineFences). The limit is
// measured on the source: each piece's markdown renders to no more visible
// characters than the piece has, and MarkdownV2 markers and escapes do not
// count toward Telegram's limit, so both the MarkdownV2 and the plain-text
// sends fit.
var splitRules = textsplit.Rules{
	Limit:    maxMessageRunes,
	Breaks:   []string{"\n\n", "\n", " "},
	KeepHalf: true,
	Fence:    textsplit.LineFences,
}
