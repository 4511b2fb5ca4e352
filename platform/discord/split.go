package discord

import "connector/internal/textsplit"

// MaxMessageLength is Discord's content limit for bots, in code points.
const MaxMessageLength = 2000

// splitRules cut content longer than MaxMessageLength: at the last line
// break in reach, else the last space, else between code points, keeping
// ``` code blocks whole (a cut block is closed and reopened with its fence
// line, language kept).
var splitRules = textsplit.Rules{
	Limit:  MaxMessageLength,
	Breaks: []string{"\n", " "},
	Fence:  textsplit.OddFences,
}
