package relay

import (
	"encoding/json"
	"unicode/utf8"

	"connector/contract"
)

// truncationMark ends a text the relay had to shorten.
const truncationMark = " […]"

// frameHeadroom is kept free below contract.MaxFrameBytes when an event has
// to be shortened, for the frame's envelope and JSON escaping slack.
const frameHeadroom = 4096

// encodeInbound returns the inbound frame for ev under bufferId id. An event
// that would exceed the gateway's 1 MiB message limit (the gateway closes the
// socket with 1009 and would be fed the same frame forever) is shortened:
// first its reference-only context goes, then its text is cut.
func encodeInbound(id string, ev *contract.Event) (frame []byte, truncated bool) {
	frame = contract.AppendInbound(make([]byte, 0, 1024), id, ev)
	if len(frame) <= contract.MaxFrameBytes {
		return frame, false
	}
	short := *ev
	short.Context = nil
	frame = contract.AppendInbound(frame[:0], id, &short)
	for len(frame) > contract.MaxFrameBytes && short.Text != "" {
		over := len(frame) - contract.MaxFrameBytes + frameHeadroom
		short.Text = cutUTF8(short.Text, len(short.Text)-over-len(truncationMark)) + truncationMark
		frame = contract.AppendInbound(frame[:0], id, &short)
	}
	return frame, true
}

// encodePassthrough returns the passthrough_forward frame for f.
func encodePassthrough(id string, f *contract.Forward) []byte {
	body, _ := json.Marshal(f) // plain strings and slices: cannot fail
	return contract.AppendPassthroughForward(nil, id, body)
}

// cutUTF8 returns the longest prefix of s of at most n bytes that ends on a
// rune boundary.
func cutUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
