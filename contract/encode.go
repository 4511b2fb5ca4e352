package contract

import (
	"bytes"
	"encoding/json"

	"connector/descriptor"
	"connector/session"
)

// Encoders for connector -> gateway frames. Each returns (or appends) one
// complete "\n"-terminated frame: a frame without its newline is silently
// lost by the gateway together with the one after it.

// AppendInboundEvent appends an inbound frame carrying an event encoded as
// JSON by Event.AppendJSON (such as one read back from the inbound ledger).
// bufferID, when set, makes the gateway answer with inbound_ack after
// handling it; the relay passes it as bytes from a buffer of its own, which
// costs no allocation.
func AppendInboundEvent[ID ~string | ~[]byte](dst []byte, bufferID ID, eventJSON []byte) []byte {
	return append(append(appendHead(dst, TypeInbound, bufferID, "event"), eventJSON...), "}\n"...)
}

// AppendPassthroughForward appends a passthrough_forward frame; forwardJSON is
// the encoded Forward.
func AppendPassthroughForward[ID ~string | ~[]byte](dst []byte, bufferID ID, forwardJSON []byte) []byte {
	return append(append(appendHead(dst, TypePassthroughForward, bufferID, "forward"), forwardJSON...), "}\n"...)
}

// passthroughHead starts every frame AppendPassthroughForward appends with
// a bufferId.
const passthroughHead = `{"type":"` + TypePassthroughForward + `","bufferId":"`

// PassthroughBufferID returns the bufferId of a frame
// AppendPassthroughForward appended, and false for any other frame (or
// one without a bufferId).
func PassthroughBufferID(frame []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(frame, []byte(passthroughHead))
	if !ok {
		return "", false
	}
	id, _, ok := bytes.Cut(rest, []byte(`"`))
	return string(id), ok
}

// appendHead appends a frame of type typ with its bufferId (when set) up
// to the value of its body member key. A bufferId that needs no escaping
// (the relay's) is copied as it is.
func appendHead[ID ~string | ~[]byte](dst []byte, typ string, bufferID ID, key string) []byte {
	dst = append(append(append(dst, `{"type":"`...), typ...), '"')
	if len(bufferID) > 0 {
		if plainJSON(bufferID) {
			dst = append(append(append(dst, `,"bufferId":"`...), bufferID...), '"')
		} else {
			dst = session.AppendJSONField(dst, `,"bufferId":`, string(bufferID))
		}
	}
	return append(append(append(dst, `,"`...), key...), `":`...)
}

// plainJSON reports whether s is printable ASCII with no '"' or '\\': its
// JSON string is s between quotes.
func plainJSON[S ~string | ~[]byte](s S) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// AppendOutboundResult appends the outbound_result answering requestID.
func AppendOutboundResult(dst []byte, requestID string, r Result) []byte {
	dst = session.AppendJSONField(dst, `{"type":"outbound_result","requestId":`, requestID)
	b, _ := json.Marshal(r) // Result has only plain fields: cannot fail
	return append(append(append(dst, `,"result":`...), b...), "}\n"...)
}

// AppendInterruptInbound appends an interrupt_inbound frame.
func AppendInterruptInbound(dst []byte, sessionKey, chatID string) []byte {
	dst = session.AppendJSONField(dst, `{"type":"interrupt_inbound","session_key":`, sessionKey)
	return append(session.AppendJSONField(dst, `,"chat_id":`, chatID), "}\n"...)
}

// EncodeDescriptor returns the descriptor frame for d.
func EncodeDescriptor(d descriptor.Descriptor) []byte {
	b, _ := json.Marshal(struct {
		Type       string                `json:"type"`
		Descriptor descriptor.Descriptor `json:"descriptor"`
	}{TypeDescriptor, d})
	return append(b, '\n')
}

// GoingIdleAck is the complete going_idle_ack frame.
const GoingIdleAck = `{"type":"going_idle_ack"}` + "\n"
