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
	return appendTS(append(dst, raw[:bytes.LastIndexByte(raw, '}')]...), ts)
}

// appendTS ends a frame with `,"ts":<ts>}`.
func appendTS(dst []byte, ts int64) []byte {
	return append(strconv.AppendInt(append(dst, `,"ts":`...), ts, 10), '}')
}

// appendPresence appends {"type":"presence","users":[...],"ts":ts}; users
// must be sorted.
func appendPresence(dst []byte, users []string, ts int64) []byte {
	dst = appendList(append(dst, `{"type":"presence","users":`...), users, session.AppendJSONString)
	return appendTS(dst, ts)
}

// appendAck appends the sender's ack. msgID and threadID are raw JSON values
// from the acknowledged frame (null when absent); delivered and offline are
// raw JSON strings.
func appendAck(dst, msgID, threadID []byte, delivered, offline [][]byte) []byte {
	dst = appendRaw(append(dst, `{"type":"ack","msgId":`...), msgID)
	dst = appendRaw(append(dst, `,"threadId":`...), threadID)
	dst = appendList(append(dst, `,"delivered":`...), delivered, appendRaw)
	dst = appendList(append(dst, `,"offline":`...), offline, appendRaw)
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

// errorFrame returns {"type":"error","code":code,"message":message}; msgID
// (a raw JSON value) is added when set, and retryAfterMs for transfer_busy.
func errorFrame(code ErrorCode, message string, msgID []byte) []byte {
	dst := session.AppendJSONField(nil, `{"type":"error","code":`, string(code))
	dst = session.AppendJSONField(dst, `,"message":`, message)
	if len(msgID) > 0 {
		dst = append(append(dst, `,"msgId":`...), msgID...)
	}
	if code == CodeTransferBusy {
		dst = strconv.AppendInt(append(dst, `,"retryAfterMs":`...), retryAfterMs, 10)
	}
	return append(dst, '}')
}

// botMsg is a msg or file-start the connector's bot sends.
type botMsg struct {
	msgID, from, threadID, text string
	to                          []string
	hopCount                    int
}

// appendBotMsg appends the bot's frame of type typ (msg, file-start) with
// ts; tail is the raw members that end it (a msg's `,"attachments":[]`, a
// file-start's attachment).
func appendBotMsg(dst []byte, typ string, m *botMsg, tail string, ts int64) []byte {
	dst = session.AppendJSONField(dst, `{"type":`, typ)
	dst = session.AppendJSONField(dst, `,"msgId":`, m.msgID)
	dst = session.AppendJSONField(dst, `,"from":`, m.from)
	dst = appendList(append(dst, `,"to":`...), m.to, session.AppendJSONString)
	dst = session.AppendJSONField(dst, `,"role":"userAgent","threadId":`, m.threadID)
	dst = session.AppendJSONField(dst, `,"text":`, m.text)
	dst = strconv.AppendInt(append(dst, `,"hopCount":`...), int64(m.hopCount), 10)
	return appendTS(append(dst, tail...), ts)
}
