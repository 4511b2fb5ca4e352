package relay

import (
	"bytes"
	"encoding/json"
	"sync"

	"connector/contract"
	"connector/internal/textsplit"
)

// truncationMark ends a text the relay had to shorten.
const truncationMark = " […]"

// frameHeadroom is kept free below contract.MaxFrameBytes when an event has
// to be shortened, for the frame's envelope and JSON escaping slack.
const frameHeadroom = 4096

// encodeBufs are scratch buffers for encoding frames: the frame kept in the
// ledger is then one allocation of exactly its size.
var encodeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBuffer keeps a rare huge frame's buffer out of the pool.
const maxPooledBuffer = 64 << 10

// encodeInbound returns the inbound frame for ev under bufferId id. An event
// that would exceed the gateway's 1 MiB message limit (the gateway closes the
// socket with 1009 and would be fed the same frame forever) is shortened:
// first its reference-only context goes, then its text is cut.
func encodeInbound(id string, ev *contract.Event) (frame []byte, truncated bool) {
	bp := encodeBufs.Get().(*[]byte)
	buf := contract.AppendInbound((*bp)[:0], id, ev)
	if len(buf) > contract.MaxFrameBytes {
		truncated = true
		short := *ev
		short.Context = nil
		buf = contract.AppendInbound(buf[:0], id, &short)
		for len(buf) > contract.MaxFrameBytes && short.Text != "" {
			over := len(buf) - contract.MaxFrameBytes + frameHeadroom
			short.Text = textsplit.Truncate(short.Text, len(short.Text)-over-len(truncationMark)) + truncationMark
			buf = contract.AppendInbound(buf[:0], id, &short)
		}
	}
	frame = bytes.Clone(buf)
	if cap(buf) <= maxPooledBuffer {
		*bp = buf[:0]
		encodeBufs.Put(bp)
	}
	return frame, truncated
}

// encodePassthrough returns the passthrough_forward frame for f.
func encodePassthrough(id string, f *contract.Forward) []byte {
	body, _ := json.Marshal(f) // plain strings and slices: cannot fail
	return contract.AppendPassthroughForward(nil, id, body)
}
