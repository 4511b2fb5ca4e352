package contract

import (
	"encoding/json"

	"connector/descriptor"
	"connector/session"
)

// Encoders for connector -> gateway frames. Each returns (or appends) one
// complete "\n"-terminated frame: a frame without its newline is silently
// lost by the gateway together with the one after it.

// AppendInbound appends an inbound frame carrying ev. bufferID, when set,
// makes the gateway answer with inbound_ack after handling it.
func AppendInbound(dst []byte, bufferID string, ev *Event) []byte {
	dst = appendInboundHead(dst, bufferID)
	dst = ev.AppendJSON(dst)
	return append(dst, "}\n"...)
}

// AppendInboundEvent is AppendInbound for an event already encoded as JSON
// (by Event.AppendJSON), such as one read back from the inbound ledger.
func AppendInboundEvent(dst []byte, bufferID string, eventJSON []byte) []byte {
	dst = appendInboundHead(dst, bufferID)
	dst = append(dst, eventJSON...)
	return append(dst, "}\n"...)
}

// appendInboundHead appends an inbound frame up to its event's value.
func appendInboundHead(dst []byte, bufferID string) []byte {
	dst = append(dst, `{"type":"inbound"`...)
	if bufferID != "" {
		dst = append(dst, `,"bufferId":`...)
		dst = session.AppendJSONString(dst, bufferID)
	}
	return append(dst, `,"event":`...)
}

// AppendPassthroughForward appends a passthrough_forward frame; forwardJSON is
// the encoded Forward.
func AppendPassthroughForward(dst []byte, bufferID string, forwardJSON []byte) []byte {
	dst = append(dst, `{"type":"passthrough_forward"`...)
	if bufferID != "" {
		dst = append(dst, `,"bufferId":`...)
		dst = session.AppendJSONString(dst, bufferID)
	}
	dst = append(dst, `,"forward":`...)
	dst = append(dst, forwardJSON...)
	return append(dst, "}\n"...)
}

// AppendOutboundResult appends the outbound_result answering requestID.
func AppendOutboundResult(dst []byte, requestID string, r Result) []byte {
	dst = append(dst, `{"type":"outbound_result","requestId":`...)
	dst = session.AppendJSONString(dst, requestID)
	dst = append(dst, `,"result":`...)
	b, _ := json.Marshal(r) // Result has only plain fields: cannot fail
	dst = append(dst, b...)
	return append(dst, "}\n"...)
}

// AppendInterruptInbound appends an interrupt_inbound frame.
func AppendInterruptInbound(dst []byte, sessionKey, chatID string) []byte {
	dst = append(dst, `{"type":"interrupt_inbound","session_key":`...)
	dst = session.AppendJSONString(dst, sessionKey)
	dst = append(dst, `,"chat_id":`...)
	dst = session.AppendJSONString(dst, chatID)
	return append(dst, "}\n"...)
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
