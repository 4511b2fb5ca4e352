package nexscope

import (
	"bytes"
	"slices"

	"github.com/coder/websocket"

	"connector/internal/wsconn"
)

// With several instances the room's home answers a member's msgs and
// files, and may die, move or be cut off while they are on the way. So the
// member's edge keeps what the home has not answered (pending) and, before
// a close that means the home will not answer any more (1012, 1011, 1001),
// answers it itself: docs/nexscope.md, "When the home dies".

// pending is an edge member's unanswered frames, under edgeLink.mu.
type pending struct {
	sent     [][]byte // raw msgIds forwarded and not yet answered, oldest first
	incoming []byte   // raw msgId of the file being received, nil when none
	closed   bool     // the member was abandoned: nothing more is forwarded
}

// answerable returns the raw msgId of a msg or file-start the member sends
// (a copy: data is the read buffer), nil for any other frame.
func answerable(data []byte) []byte {
	f, err := parseFrame(data)
	if err != nil || len(f.msgID) == 0 {
		return nil
	}
	if t, _ := stringValue(f.typ); string(t) != "msg" && string(t) != "file-start" {
		return nil
	}
	return bytes.Clone(f.msgID)
}

// relayed notes a text frame from the home on its way to the member: an
// ack or error answers the oldest sent frame with its msgId; file-start
// begins an incoming file, which its file-end or transfer_incomplete ends.
func (l *edgeLink) relayed(data []byte) {
	f, err := parseFrame(data)
	if err != nil || f.msgID == nil {
		return
	}
	typ, _ := stringValue(f.typ)
	code, _ := stringValue(f.code)
	msgID := f.msgID
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &l.pending
	switch string(typ) {
	case "ack", "error":
		if string(typ) == "error" && string(code) == string(CodeTransferIncomplete) && sameValue(p.incoming, msgID) {
			p.incoming = nil
			return
		}
		if i := slices.IndexFunc(p.sent, func(id []byte) bool { return sameValue(id, msgID) }); i >= 0 {
			// Answers come oldest first but for a file-start's (at its
			// file-end, after the msgs sent meanwhile): the entries before
			// the answered one move up one, none after it.
			copy(p.sent[1:i+1], p.sent[:i])
			p.sent[0] = nil
			p.sent = p.sent[1:]
		}
	case "file-start":
		p.incoming = bytes.Clone(msgID)
	case "file-end":
		if sameValue(p.incoming, msgID) {
			p.incoming = nil
		}
	}
}

// abandons reports whether closing an edge member with c means its home
// will not answer it any more.
func abandons(c Close) bool {
	return c.Code == CloseRoomMoved.Code || c.Code == CloseFramesLost.Code || c.Code == CloseGoingAway.Code
}

// abandon closes m, an edge member whose room's home will not answer it
// any more, with c: first undelivered for each msg or file it sent that
// the home had not answered, and transfer_incomplete for a file it was
// receiving, after the frames already queued for it. Frames the member
// sends from now on are not forwarded (the close is on its way).
func (l *edgeLink) abandon(m *member, c Close) {
	l.mu.Lock()
	p := l.pending
	l.pending = pending{closed: true}
	l.mu.Unlock()
	m.leave()
	if p.closed {
		return // abandoned before
	}
	for _, id := range p.sent {
		_ = m.q.Push(wsconn.Frame{Type: websocket.MessageText,
			Data: errorFrame(CodeUndelivered, "the room's home instance did not answer this before the connection to it ended; it may not have been delivered", id)})
	}
	if p.incoming != nil {
		_ = m.q.Push(wsconn.Frame{Type: websocket.MessageText,
			Data: errorFrame(CodeTransferIncomplete, "the sender's file transfer did not complete", p.incoming)})
	}
	if len(p.sent) > 0 || p.incoming != nil {
		m.log.Info("nexscope member's room home lost; unanswered frames reported", "undelivered", len(p.sent), "transfer_incomplete", p.incoming != nil, "close", int(c.Code))
	}
	m.closeQueue(c, true)
}
