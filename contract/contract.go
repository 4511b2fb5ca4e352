// Package contract is the wire format of the /relay WebSocket between Hermes
// gateways and the connector (Relay <-> Connector contract v1, as the real
// gateway client gateway/relay/ws_transport.py speaks it).
//
// Protocol flow:
//
//	gateway                                            connector
//	  GET /relay, Authorization: Bearer <HMAC token> ->  verify (else close 4401)
//	  hello {platform, botId} (one per identity)     ->
//	                                                  <-  descriptor (one per hello, in order)
//	                                                  <-  inbound {event, bufferId}
//	  inbound_ack {bufferId}                         ->
//	  outbound {requestId, action}                   ->
//	                                                  <-  outbound_result {requestId, result}
//	  interrupt {session_key, reason}                ->   (to the session's owner)
//	                                                  <-  interrupt_inbound {session_key, chat_id}
//	  going_idle                                     ->
//	                                                  <-  going_idle_ack
//
// Every frame is one JSON object terminated by "\n", one frame per WebSocket
// text message. We are strict in what we send (required keys always present,
// every frame newline-terminated, under MaxFrameBytes) and tolerant in what we
// accept (unknown frame types and fields are ignored, ids may be numbers).
//
// The package works on []byte only; it never touches a socket, so every
// parser is table-tested and fuzzed without one.
package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"connector/session"
)

// Version is the contract_version the connector implements.
const Version = 1

// MaxFrameBytes is the largest message the gateway accepts (websockets'
// default max_size, 1 MiB, measured after decompression); a bigger one makes
// it close the socket with 1009. Frames we send stay below it.
const MaxFrameBytes = 1 << 20

// Frame types sent by the gateway.
const (
	TypeHello      = "hello"
	TypeOutbound   = "outbound"
	TypeInterrupt  = "interrupt"
	TypeGoingIdle  = "going_idle"
	TypeInboundAck = "inbound_ack"
)

// Frame types sent by the connector.
const (
	TypeDescriptor         = "descriptor"
	TypeInbound            = "inbound"
	TypeOutboundResult     = "outbound_result"
	TypeInterruptInbound   = "interrupt_inbound"
	TypeGoingIdleAck       = "going_idle_ack"
	TypePassthroughForward = "passthrough_forward"
)

// PlatformRelay is the platform a gateway says hello with when its deployment
// configures no platform list (GATEWAY_RELAY_PLATFORMS unset). The connector
// reads it as "every platform my tenant is configured for". It is also the
// platform a gateway reads an inbound source's unknown platform as, and so
// tags that chat's outbound with.
const PlatformRelay = session.PlatformRelay

// ID is an identifier that the gateway sends as a string but that tolerant
// decoding also accepts as a JSON number (kept in its JSON spelling) or null.
type ID string

// UnmarshalJSON accepts a string, a number or null.
func (id *ID) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case len(data) == 0 || string(data) == "null":
		*id = ""
	case data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*id = ID(s)
	case data[0] == '-' || (data[0] >= '0' && data[0] <= '9'):
		if _, err := strconv.ParseFloat(string(data), 64); err != nil {
			return fmt.Errorf("id: %w", err)
		}
		*id = ID(data)
	default:
		return fmt.Errorf("id: want a string or a number, got %.20s", data)
	}
	return nil
}

// GatewayFrame is any frame a gateway sends, decoded leniently: fields of
// other frame types are simply empty. Action is kept raw so that an outbound
// with a malformed action can still be answered under its requestId.
type GatewayFrame struct {
	Type string `json:"type"`

	// hello (and the optional target of an outbound)
	Platform        string          `json:"platform"`
	BotID           ID              `json:"botId"`
	CommandManifest json.RawMessage `json:"command_manifest"`

	// outbound
	RequestID ID              `json:"requestId"`
	Action    json.RawMessage `json:"action"`

	// interrupt
	SessionKey string  `json:"session_key"`
	Reason     *string `json:"reason"`

	// inbound_ack
	BufferID ID `json:"bufferId"`
}

// ErrNotObject reports a frame line that is valid JSON but not an object.
var ErrNotObject = errors.New("frame is not a JSON object")

// DecodeGatewayFrame parses one line (without or with its trailing "\n").
// A frame of an unknown type decodes without error; the caller ignores it.
func DecodeGatewayFrame(line []byte) (GatewayFrame, error) {
	line = bytes.TrimSpace(line)
	if id, ok := DecodeAck(line); ok {
		return GatewayFrame{Type: TypeInboundAck, BufferID: ID(id)}, nil
	}
	if len(line) == 0 || line[0] != '{' {
		if json.Valid(line) {
			return GatewayFrame{}, ErrNotObject
		}
		return GatewayFrame{}, errors.New("frame is not valid JSON")
	}
	// Declared here, past the ack path: json.Unmarshal moves f to the heap.
	var f GatewayFrame
	if err := json.Unmarshal(line, &f); err != nil {
		return GatewayFrame{}, fmt.Errorf("decode frame: %w", err)
	}
	return f, nil
}

// ackPrefix is an inbound_ack frame up to its bufferId value, spelled the
// way the gateway's json.dumps writes it.
const ackPrefix = `{"type": "inbound_ack", "bufferId": "`

// DecodeAck decodes the gateway's most frequent frame, an inbound_ack,
// without reflection or allocation: it returns the bufferId, a slice of
// line. It only accepts the exact spelling the gateway sends (blanks around
// it aside), with a bufferId free of escapes and control characters (ours
// never have any); every other line takes DecodeGatewayFrame's general
// path, so both agree.
func DecodeAck(line []byte) (bufferID []byte, ok bool) {
	rest, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte(ackPrefix))
	if !ok {
		return nil, false
	}
	id, tail, ok := bytes.Cut(rest, []byte{'"'})
	if !ok || string(tail) != "}" {
		return nil, false
	}
	for _, b := range id {
		if b < 0x20 || b == '\\' || b >= 0x80 {
			return nil, false
		}
	}
	return id, true
}

// SplitLines calls fn for every non-blank "\n"-separated line of msg. The
// gateway sends one frame per message, but splitting is what its own reader
// does, so a message carrying several frames is handled the same way.
func SplitLines(msg []byte, fn func(line []byte)) {
	for line := range bytes.SplitSeq(msg, []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) > 0 {
			fn(line)
		}
	}
}
