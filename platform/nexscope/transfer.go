package nexscope

import (
	"bytes"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/wsconn"
	"connector/media"
	"connector/session"
)

// transfer is a file stream in progress: the room's lock while it is the
// room's transfer. Recipients are fixed at file-start (those who got it).
type transfer struct {
	sender     *member
	start      clientFrame // the forwarded file-start (spans of its own copy)
	size       int64
	received   int64 // sender's reader only (read under room.mu by nobody else)
	recipients []*member
	offline    [][]byte
	toBot      bool // the bot takes the file: delivered to it, bridged at file-end
	// tenant is, when toBot, the tenant bound at file-start, created at
	// created (Platform.creation): the file was addressed to its bot and
	// is re-hosted in its store, so it is the only tenant the file may
	// reach. rebound is set when the room is bound to another tenant (or
	// unbound) before the file-end (loseBot).
	tenant  string
	created time.Time
	rebound atomic.Bool
	// upload re-hosts a file the bot takes (nil without a media store);
	// set under room.mu by the sender's reader (rehost), which writes it;
	// aborted by room.unlock after finish or loseBot unless committed.
	upload *media.Upload
	timer  clock.Timer
	done   chan struct{} // closed when the transfer ends either way
}

func (t *transfer) finished() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// dropStream is the rest of a file stream the relay refused (transfer_busy)
// or aborted (size_mismatch) while the client, which does not wait for an
// answer, keeps sending it: its binary frames, up to left bytes, and its
// file-end are dropped quietly, so one refused transfer costs the client one
// error frame. The first binary frame past the bound ends the drop and is
// unexpected_binary.
type dropStream struct {
	active bool
	msgID  []byte // the stream's raw msgId, owned (not in the read buffer)
	left   int64
}

// chunk reports whether a binary frame of n bytes is dropped as part of the
// stream.
func (d *dropStream) chunk(n int) bool {
	if d.active && int64(n) <= d.left {
		d.left -= int64(n)
		return true
	}
	*d = dropStream{}
	return false
}

// end reports whether a file-end with msgID ends the stream (and the drop).
func (d *dropStream) end(msgID []byte) bool {
	if d.active && sameValue(msgID, d.msgID) {
		*d = dropStream{}
		return true
	}
	return false
}

// handleFileStart takes the room's transfer lock and forwards file-start.
func (m *member) handleFileStart(f *clientFrame) {
	if !m.checkFrom(f) || !m.checkTo(f) {
		return
	}
	size, ok := attachmentSize(f.attachment)
	if !ok {
		m.send(errorFrame(CodeBadFileStart, "file-start needs attachment.size, a non-negative integer", f.msgID))
		return
	}
	if size > m.p.cfg.MaxFile {
		m.send(errorFrame(CodeFileTooLarge, "attachment.size exceeds the relay's max file size", f.msgID))
		return
	}
	m.dropping = dropStream{}
	out := appendWithTS(make([]byte, 0, len(f.raw)+24), f.raw, m.p.nowMs())
	start, _ := parseFrame(out) // out is f.raw plus ts: valid

	r := m.room
	r.mu.Lock()
	if r.transfer != nil {
		r.unlock()
		m.send(errorFrame(CodeTransferBusy, "another file transfer is in progress in this room", f.msgID))
		m.dropping = dropStream{active: true, msgID: bytes.Clone(f.msgID), left: size}
		return
	}
	t := &transfer{sender: m, start: start, size: size, done: make(chan struct{})}
	// Armed before file-start goes out: a recipient that has it knows the
	// deadline runs.
	t.timer = m.p.deps.Clock.AfterFunc(m.p.cfg.TransferTimeout, func() { r.stall(t) })
	// The tenant and its creation as the route is decided, before
	// file-start reaches anyone: a recipient that has it may see the
	// tenant made again, and the file is still the earlier one's.
	tenant := r.tenant()
	created := m.p.creation(tenant)
	var res routed
	r.routeLocked(m, &start, out, true, &res)
	t.recipients, t.offline, t.toBot = res.recipients, res.offline, res.toBot
	if t.toBot {
		t.tenant, t.created = tenant, created
	}
	r.transfer = t
	r.unlock()
	m.transfer = t
	if t.toBot {
		m.rehost(t)
	}
}

// rehost begins the re-host of t, the member's file to the bot, with the
// room's lock released (it creates a file: the lock is never held across
// disk I/O), and gives it to t unless t ended or lost the bot meanwhile.
// The member's reader runs it before reading t's first chunk.
func (m *member) rehost(t *transfer) {
	u := m.p.beginRehost(m.room, t.tenant, t.start.attachment)
	if u == nil {
		return
	}
	r := m.room
	r.mu.Lock()
	live := r.transfer == t && !t.rebound.Load()
	if live {
		t.upload = u // under mu: finish and loseBot read it there
	}
	r.unlock()
	if !live {
		u.Abort()
	}
}

// handleChunk forwards a binary frame of the member's transfer, waiting
// while any recipient's queue is full; held is the chunk data lies in when
// it came from another instance's stream (see pushChunk), else nil.
func (m *member) handleChunk(data []byte, held *chunk) {
	t := m.transfer
	if t == nil || t.finished() {
		m.transfer = nil
		if !m.dropping.chunk(len(data)) {
			m.send(errorFrame(CodeUnexpectedBinary, "binary frame outside a file transfer", nil))
		}
		return
	}
	if t.received+int64(len(data)) > t.size {
		m.abortTransfer(t, "chunks exceed attachment.size", true)
		return
	}
	m.alive.Hold(true)
	pushed := m.room.pushChunk(t, data, held)
	m.alive.Hold(false)
	if !pushed {
		return
	}
	if t.upload != nil {
		// A failed write (quota) is remembered by the upload and reported
		// at file-end, where the file is bridged without it.
		_, _ = t.upload.Write(data)
	}
}

// pushChunk queues one chunk of t for its recipients once each of their
// queues has room; false when t ended meanwhile. The recipients' frames
// borrow data from held when it is not nil (a chunk read from another
// instance), else from a copy.
func (r *room) pushChunk(t *transfer, data []byte, held *chunk) bool {
	for _, rc := range t.recipients {
		rc.q.WaitSpace(t.done)
	}
	r.mu.Lock()
	defer r.unlock()
	if r.transfer != t {
		return false
	}
	if len(t.recipients) > 0 {
		// Every recipient holds a reference; the queue of one that left is
		// closed (or about to be) and releases its reference at once.
		c, buf := held, data
		if c == nil {
			c = newChunk(data, len(t.recipients))
			buf = c.buf
		} else {
			c.refs.Add(int32(len(t.recipients)))
		}
		for _, rc := range t.recipients {
			r.pushFrameLocked(rc, wsconn.Frame{Type: websocket.MessageBinary, Data: buf, Owner: c})
		}
	}
	t.received += int64(len(data))
	return true
}

// handleFileEnd completes the member's transfer: file-end to the
// recipients, the lock released, the ack to the sender.
func (m *member) handleFileEnd(f *clientFrame) {
	if !m.checkFrom(f) {
		return
	}
	t := m.transfer
	if t == nil || t.finished() || !sameValue(f.msgID, t.start.msgID) {
		if m.dropping.end(f.msgID) {
			return // the end of a stream refused or aborted
		}
		m.send(errorFrame(CodeBadFileEnd, "file-end msgId does not match the file-start in progress", f.msgID))
		return
	}
	if t.received != t.size {
		m.abortTransfer(t, "file-end before attachment.size bytes arrived", false)
		return
	}
	var att *contract.Media
	if t.upload != nil && !t.rebound.Load() {
		att = m.p.commitRehost(t.upload, t.start.attachment, t.start.text)
	}
	out := appendWithTS(make([]byte, 0, len(f.raw)+24), f.raw, m.p.nowMs())
	r := m.room
	delivered, offline, ok := r.finishTransfer(t, out)
	m.transfer = nil
	if !ok {
		return
	}
	// The ack confirms the bot only once the bridge's delivery is stored.
	// It names the bot the sender addressed, also when the room is unbound
	// by now.
	if t.toBot && m.bridgeFile(t, att) {
		delivered = append(delivered, session.AppendJSONString(nil, r.botName))
	} else if t.toBot {
		offline = append(offline, session.AppendJSONString(nil, r.botName))
	}
	m.send(appendAck(nil, t.start.msgID, t.start.threadID, delivered, offline))
}

// bridgeFile hands t, the member's file to the bot, ended (finishTransfer),
// to the tenant bound at its file-start, with att its re-host (nil: a note
// describes the file), and reports whether the tenant took it. A room
// rebound since file-start (loseBot) delivers nothing to anyone.
func (m *member) bridgeFile(t *transfer, att *contract.Media) bool {
	switch {
	case t.rebound.Load(): // final: t ended, so bindLocked no longer sees it
		m.log.Info("nexscope file to the bot dropped: the room was rebound during the transfer")
		m.p.deps.Metrics.Dropped(platformName, dropRebound)
		return false
	case m.p.sink.Load() == nil: // Run may have ended since file-start
		m.p.deps.Metrics.Dropped(platformName, dropUnavailable)
		return false
	}
	note := ""
	if att == nil {
		note = fileNote(t.start.attachment, t.size)
	}
	return m.room.bridge(&t.start, t.tenant, t.created, note, att)
}

// loseBot is called, under the room's lock r, when the room is bound to
// another tenant (or unbound) while t, a member's file to the bot, is in
// progress: the file was addressed to the previous tenant's bot, which no
// longer serves the room, and its re-host lies in that tenant's store, so
// no tenant gets it. The re-host is discarded at once (no more bytes go to
// that store; later writes fail quietly: r.unlock aborts it) and the
// file-end's ack lists the bot offline.
func (t *transfer) loseBot(r *room) {
	t.rebound.Store(true)
	r.discardLocked(t.upload)
}

// finishTransfer ends t, if it still holds the room's lock, and releases
// the lock: end (its file-end) goes to the recipients still online, listed
// in delivered; offline is t.offline and the recipients gone since.
func (r *room) finishTransfer(t *transfer, end []byte) (delivered, offline [][]byte, ok bool) {
	r.mu.Lock()
	defer r.unlock()
	if r.transfer != t {
		return nil, nil, false
	}
	r.transfer = nil
	t.finish(r)
	offline = t.offline
	for _, rc := range t.recipients {
		if rc.left.Load() {
			offline = append(offline, rc.quoted)
			continue
		}
		r.pushLocked(rc, end)
		delivered = append(delivered, rc.quoted)
	}
	return delivered, offline, true
}

// abortTransfer ends the member's own transfer on a size mismatch: the
// recipients get transfer_incomplete, the sender size_mismatch. With
// dropRest, the sender's remaining chunks and file-end are dropped quietly.
func (m *member) abortTransfer(t *transfer, why string, dropRest bool) {
	m.room.abort(t)
	m.transfer = nil
	if dropRest {
		// The sender overran attachment.size, so how much more it sends is
		// unknown; no file may exceed MaxFile.
		m.dropping = dropStream{active: true, msgID: t.start.msgID, left: m.p.cfg.MaxFile}
	}
	m.send(errorFrame(CodeSizeMismatch, why, t.start.msgID))
}

// finish marks the transfer over, under the lock of its room r, stops its
// deadline and has r.unlock discard an upload not committed by then.
func (t *transfer) finish(r *room) {
	close(t.done)
	t.timer.Stop()
	r.discardLocked(t.upload)
}

// abort is abortLocked while t holds the room's lock; it reports whether
// it did.
func (r *room) abort(t *transfer) bool {
	r.mu.Lock()
	defer r.unlock()
	if r.transfer != t {
		return false
	}
	r.abortLocked(t)
	return true
}

// abortLocked releases the lock held by t and tells the recipients who got
// its file-start that it will not complete.
func (r *room) abortLocked(t *transfer) {
	r.transfer = nil
	t.finish(r)
	frame := errorFrame(CodeTransferIncomplete, "the sender's file transfer did not complete", t.start.msgID)
	for _, rc := range t.recipients {
		r.pushLocked(rc, frame)
	}
}

// stall ends t when its file-end did not arrive within TransferTimeout: the
// lock is released, recipients are told, the sender is closed with 4014.
func (r *room) stall(t *transfer) {
	if !r.abort(t) {
		return
	}
	if t.sender == nil {
		return // the bot's own transfer (sendMedia) sees the lock gone
	}
	t.sender.log.Info("nexscope file transfer stalled, closing sender", "transfer_timeout", r.p.cfg.TransferTimeout)
	t.sender.kick(CloseTransferStalled)
}

// sameValue compares two raw JSON values, strings by their decoded text.
func sameValue(a, b []byte) bool {
	if as, ok := stringValue(a); ok {
		bs, ok := stringValue(b)
		return ok && bytes.Equal(as, bs)
	}
	return bytes.Equal(a, b)
}
