package relay

import (
	"sync"

	"connector/contract"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/relay/ledger"
)

// truncationMark ends a text the relay had to shorten.
const truncationMark = " […]"

// frameHeadroom is kept free below maxPayloadBytes when an event has to be
// shortened, for JSON escaping slack.
const frameHeadroom = 4096

// maxEnvelopeBytes bounds what a frame adds around its payload: the frame
// type, the bufferId (a store epoch of at most maxEpochBytes and a sequence
// number) and the JSON punctuation.
const maxEnvelopeBytes = frameEnvelopeBytes + maxBufferIDBytes

// maxPayloadBytes is the largest encoded event or forward whose frame stays
// within the gateway's 1 MiB message limit.
const maxPayloadBytes = contract.MaxFrameBytes - maxEnvelopeBytes

// encodeBufs are scratch buffers for encoding payloads: the frame kept in
// the ledger is then one allocation of exactly its size.
var encodeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// maxPooledBuffer keeps a rare huge payload's buffer out of the pool.
const maxPooledBuffer = 64 << 10

func getEncodeBuf() *[]byte { return encodeBufs.Get().(*[]byte) }

func putEncodeBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledBuffer {
		*bp = (*bp)[:0]
		encodeBufs.Put(bp)
	}
}

// appendEvent appends ev's JSON to dst. An event whose frame would exceed
// the gateway's 1 MiB message limit (the gateway closes the socket with 1009
// and would be fed the same frame forever) is shortened: first its
// reference-only context goes, then its text is cut, to nothing when the
// rest alone is too large (the caller then drops it).
func appendEvent(dst []byte, ev *contract.Event) (out []byte, truncated bool) {
	start := len(dst)
	dst = ev.AppendJSON(dst)
	if len(dst)-start <= maxPayloadBytes {
		return dst, false
	}
	short := *ev
	short.Context = nil
	dst = short.AppendJSON(dst[:start])
	for len(dst)-start > maxPayloadBytes && short.Text != "" {
		over := len(dst) - start - maxPayloadBytes + frameHeadroom
		if keep := len(short.Text) - over - len(truncationMark); keep > 0 {
			short.Text = textsplit.Truncate(short.Text, keep) + truncationMark
		} else {
			short.Text = ""
		}
		dst = short.AppendJSON(dst[:start])
	}
	return dst, true
}

// frameEnvelopeBytes is what a passthrough_forward frame, the longer kind,
// adds around its payload and bufferId.
const frameEnvelopeBytes = len(`{"type":"passthrough_forward","bufferId":"","forward":}`) + 1

// framer frames ledger entries: an inbound frame around an encoded event, a
// passthrough_forward around an encoded forward.
type framer struct{}

// Frame implements ledger.Framer in one allocation of (almost exactly) the
// frame's size: the bufferId is written in a buffer on the stack.
func (framer) Frame(kind uint8, idPrefix string, seq uint64, payload []byte) []byte {
	var b [maxBufferIDBytes]byte
	bufferID := ledger.AppendBufferID(b[:0], idPrefix, seq)
	frame := make([]byte, 0, len(payload)+len(bufferID)+frameEnvelopeBytes)
	if platform.Kind(kind) == platform.KindPassthrough {
		return contract.AppendPassthroughForward(frame, bufferID, payload)
	}
	return contract.AppendInboundEvent(frame, bufferID, payload)
}

// Windowed implements ledger.Framer: older gateways never acknowledge
// passthrough frames, so they must not stall a connection's inbound window
// (a socket on another instance bounds them by bytes apart, WindowBytes).
func (framer) Windowed(kind uint8) bool { return platform.Kind(kind) != platform.KindPassthrough }
