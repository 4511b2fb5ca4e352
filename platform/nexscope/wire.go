package nexscope

import (
	"bytes"
	"strconv"

	"connector/session"
)

// Encoders for relay -> member text frames. Every frame is one line of JSON
// with a "type" field.

// appendWithTS appends the member's frame raw with `,"ts":<ts>` spliced in
// before its closing brace: the frame is forwarded byte for byte, unknown
// fields included, and only ts is added. raw must be a JSON object with at
// least one member (every valid frame has "type"). A ts the sender put in
// stays too; readers take the last of duplicate names, which is the relay's.
func appendWithTS(dst, raw []byte, ts int64) []byte {
	end := bytes.LastIndexByte(raw, '}')
	dst = append(dst, raw[:end]...)
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, ts, 10)
	return append(dst, '}')
}

// appendPresence appends {"type":"presence","users":[...],"ts":ts}; users
// must be sorted.
func appendPresence(dst []byte, users []string, ts int64) []byte {
	dst = append(dst, `{"type":"presence","users":`...)
	dst = appendList(dst, users, session.AppendJSONString)
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, ts, 10)
	return append(dst, '}')
}

// appendAck appends the sender's ack. msgID and threadID are raw JSON values
// from the acknowledged frame (null when absent); delivered and offline are
// raw JSON strings.
func appendAck(dst, msgID, threadID []byte, delivered, offline [][]byte) []byte {
	dst = append(dst, `{"type":"ack","msgId":`...)
	dst = appendRaw(dst, msgID)
	dst = append(dst, `,"threadId":`...)
	dst = appendRaw(dst, threadID)
	dst = append(dst, `,"delivered":`...)
	dst = appendList(dst, delivered, appendRaw)
	dst = append(dst, `,"offline":`...)
	dst = appendList(dst, offline, appendRaw)
	return append(dst, '}')
}

// ackSize is the exact length of the ack appendAck writes.
func ackSize(msgID, threadID []byte, delivered, offline [][]byte) int {
	n := len(`{"type":"ack","msgId":,"threadId":,"delivered":[],"offline":[]}`) +
		max(len(msgID), 4) + max(len(threadID), 4) + len(delivered) + len(offline)
	for _, v := range delivered {
		n += len(v)
	}
	for _, v := range offline {
		n += len(v)
	}
	return n
}

func appendRaw(dst, raw []byte) []byte {
	if len(raw) == 0 {
		return append(dst, "null"...)
	}
	return append(dst, raw...)
}

// appendList appends list as a JSON array, each element by add.
func appendList[T any](dst []byte, list []T, add func([]byte, T) []byte) []byte {
	dst = append(dst, '[')
	for i, v := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = add(dst, v)
	}
	return append(dst, ']')
}

// errorFrame returns {"type":"error","code":code,"message":message}.
func errorFrame(code ErrorCode, message string) []byte {
	return appendError(nil, code, message, nil)
}

// appendError appends an error frame; msgID (a raw JSON value) is added when
// set, and retryAfterMs for transfer_busy.
func appendError(dst []byte, code ErrorCode, message string, msgID []byte) []byte {
	dst = append(dst, `{"type":"error","code":`...)
	dst = session.AppendJSONString(dst, string(code))
	dst = append(dst, `,"message":`...)
	dst = session.AppendJSONString(dst, message)
	if len(msgID) > 0 {
		dst = append(dst, `,"msgId":`...)
		dst = append(dst, msgID...)
	}
	if code == CodeTransferBusy {
		dst = append(dst, `,"retryAfterMs":`...)
		dst = strconv.AppendInt(dst, retryAfterMs, 10)
	}
	return append(dst, '}')
}

// appendPong appends {"type":"pong","ts":ts}.
func appendPong(dst []byte, ts int64) []byte {
	dst = append(dst, `{"type":"pong","ts":`...)
	dst = strconv.AppendInt(dst, ts, 10)
	return append(dst, '}')
}

// botMsg is a msg the connector's bot sends.
type botMsg struct {
	msgID, from, threadID, text string
	to                          []string
	hopCount                    int
}

// appendBotMsg appends the bot's msg frame with ts.
func appendBotMsg(dst []byte, m *botMsg, ts int64) []byte {
	dst = append(dst, `{"type":"msg","msgId":`...)
	dst = session.AppendJSONString(dst, m.msgID)
	dst = append(dst, `,"from":`...)
	dst = session.AppendJSONString(dst, m.from)
	dst = append(dst, `,"to":`...)
	dst = appendList(dst, m.to, session.AppendJSONString)
	dst = append(dst, `,"role":"userAgent","threadId":`...)
	dst = session.AppendJSONString(dst, m.threadID)
	dst = append(dst, `,"text":`...)
	dst = session.AppendJSONString(dst, m.text)
	dst = append(dst, `,"hopCount":`...)
	dst = strconv.AppendInt(dst, int64(m.hopCount), 10)
	dst = append(dst, `,"attachments":[],"ts":`...)
	dst = strconv.AppendInt(dst, ts, 10)
	return append(dst, '}')
}
