package nexscope

import "time"

// handleText dispatches one text frame from the member.
func (m *member) handleText(data []byte) {
	f, err := parseFrame(data)
	if err != nil {
		m.send(errorFrame(CodeBadJSON, err.Error(), nil))
		return
	}
	typ, _ := stringValue(f.typ)
	switch string(typ) {
	case "msg":
		m.handleMsg(&f)
	case "file-start":
		m.handleFileStart(&f)
	case "file-end":
		m.handleFileEnd(&f)
	case "ping":
		m.send(appendTS(append(make([]byte, 0, 40), `{"type":"pong"`...), m.p.nowMs()))
	default:
		m.send(errorFrame(CodeUnknownType, "unknown frame type", nil))
	}
}

// handleMsg relays a msg verbatim plus ts and acks the sender.
func (m *member) handleMsg(f *clientFrame) {
	if !m.checkFrom(f) || !m.checkTo(f) {
		return
	}
	r := m.room
	out := appendWithTS(make([]byte, 0, len(f.raw)+24), f.raw, m.p.nowMs())
	res := &m.routed
	res.delivered, res.offline, res.toBot = res.delivered[:0], res.offline[:0], false
	r.mu.Lock()
	tenant := r.tenant() // the tenant whose bot the msg is addressed to
	r.routeLocked(m, f, out, false, res)
	var created time.Time // of the tenant the route was decided for, as file-start's
	if res.toBot {
		created = r.p.creation(tenant)
	}
	r.unlock()
	// The ack confirms the bot only once the bridge's delivery is stored.
	if res.toBot && !r.bridge(f, tenant, created, "", nil) {
		res.botOffline()
	}
	m.send(appendAck(make([]byte, 0, ackSize(f.msgID, f.threadID, res.delivered, res.offline)),
		f.msgID, f.threadID, res.delivered, res.offline))
	clear(res.delivered) // drop references into the frame
	clear(res.offline)
	if cap(res.offline) > maxKeptRouted { // a msg to many absent names
		res.offline = nil
	}
}

// maxKeptRouted bounds the offline list a member keeps between msgs (a msg
// may name a million members who are not there; the room's cap bounds the
// delivered one).
const maxKeptRouted = 1024

// checkFrom enforces that from is present and is the member's own name;
// a failure is a strike.
func (m *member) checkFrom(f *clientFrame) bool {
	if len(f.from) == 0 || string(f.from) == "null" {
		m.strike(CodeMissingFrom, "frame has no from", f.msgID)
		return false
	}
	if from, ok := stringValue(f.from); !ok || string(from) != m.name {
		m.strike(CodeFromMismatch, "from does not match your name", f.msgID)
		return false
	}
	return true
}

// checkTo enforces that to is an array of names; a failure is a strike.
func (m *member) checkTo(f *clientFrame) bool {
	if !namesOf(f.to, func(_, _ []byte) {}) {
		m.strike(CodeMissingTo, "to must be an array of names", f.msgID)
		return false
	}
	return true
}

// strike answers a missing_from / from_mismatch / missing_to error; the
// strikeLimit-th closes the connection with 4013 after the error frame.
func (m *member) strike(code ErrorCode, message string, msgID []byte) {
	m.strikes++
	m.send(errorFrame(code, message, msgID))
	if m.strikes >= strikeLimit {
		m.log.Info("nexscope member closed after too many errors", "strikes", m.strikes)
		m.closeAfterFlush(CloseTooManyErrors)
	}
}
