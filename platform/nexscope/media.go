package nexscope

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime"
	"strings"

	"connector/contract"
	"connector/media"
)

// mediaChunk is the size of the bot's file chunks (the protocol's
// recommendation).
const mediaChunk = 64 << 10

// sendMedia streams the object source_url names to the addressed members
// as the bot's file transfer (the package doc's send_media), whatever the
// media_kind; chunks wait for room in the recipients' send queues. No
// recipient online, at file-start or still at file-end, is unavailable; a transfer that stalls past
// TransferTimeout or ends with the context is aborted (recipients get
// transfer_incomplete).
func (p *Platform) sendMedia(ctx context.Context, tenant string, r *room, a *contract.Action) contract.Result {
	obj, res, ok := p.deps.OpenMedia(ctx, platformName, tenant, a)
	if !ok {
		return res
	}
	defer obj.Close()
	if obj.Size > p.cfg.MaxFile {
		return contract.Failed(contract.CodeBadRequest, "nexscope send_media: the file exceeds the relay's max file size")
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, obj.Section()); err != nil {
		return contract.Failed(contract.CodeUnavailable, "nexscope send_media: the media could not be read")
	}
	att := attachmentJSON{Name: cmp.Or(a.Filename, obj.Filename, "file"), Size: obj.Size,
		MIME: cmp.Or(obj.MIME, "application/octet-stream"), SHA256: hex.EncodeToString(sum.Sum(nil)), ChunkSize: mediaChunk}

	t, msgID, res, ok := r.beginBotTransfer(ctx, tenant, a, &att)
	if !ok {
		return res
	}
	// A chunk waiting for room in a recipient's window waits for t only:
	// the context's end aborts t, so it ends that wait too.
	defer context.AfterFunc(ctx, func() { r.abort(t) })()
	src := obj.Section()
	buf := make([]byte, mediaChunk)
	for {
		n, err := io.ReadFull(src, buf)
		if n > 0 && !r.pushChunk(t, buf[:n], nil) {
			return r.abortBotTransfer(t)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil || ctx.Err() != nil {
			return r.abortBotTransfer(t)
		}
	}
	end := appendWithTS(nil, mustJSON(map[string]string{"type": "file-end", "msgId": msgID, "from": r.bot()}), p.nowMs())
	delivered, _, ok := r.finishTransfer(t, end)
	if !ok {
		return contract.Failed(contract.CodeUnavailable, "nexscope send_media: the transfer stalled and was aborted")
	}
	if len(delivered) == 0 {
		return contract.Failed(contract.CodeUnavailable, "nexscope send_media: every recipient left before the file ended; it was not delivered")
	}
	return contract.OK(msgID)
}

// attachmentJSON is the attachment of the bot's file-start.
type attachmentJSON struct {
	Name      string `json:"name"`
	Size      int64  `json:"size"`
	MIME      string `json:"mime"`
	SHA256    string `json:"sha256"`
	ChunkSize int    `json:"chunkSize"`
}

// beginBotTransfer waits for the room's lock within ctx, takes it for the
// bot and sends file-start to the addressed members online; a room bound
// to another tenant than tenant by then is declined.
func (r *room) beginBotTransfer(ctx context.Context, tenant string, a *contract.Action, att *attachmentJSON) (*transfer, string, contract.Result, bool) {
	p := r.p
	for {
		r.mu.Lock()
		if r.transfer == nil {
			break // holding mu
		}
		busy := r.transfer.done
		r.unlock()
		p.deps.Log.Debug("nexscope send_media waiting for the room's file-transfer lock", "room", r.name)
		select {
		case <-busy:
		case <-ctx.Done():
			res := contract.Failed(contract.CodeRateLimited, "nexscope send_media: another file transfer holds the room")
			res.RetryAfterMS = 2000
			return nil, "", res, false
		}
	}
	defer r.unlock()
	if res, ok := r.actsForLocked(ctx, tenant); !ok {
		return nil, "", res, false // rebound, or its tenant made again, while it waited
	}
	m, online := r.addressLocked(a)
	if len(online) == 0 {
		return nil, "", contract.Failed(contract.CodeUnavailable, "nexscope: the recipient is not online (messages are not queued)"), false
	}
	m.msgID, m.text = p.newMsgID(), a.Content
	start := appendBotMsg(nil, "file-start", &m, `,"attachment":`+string(mustJSON(att)), p.nowMs())
	parsed, _ := parseFrame(start) // valid JSON by construction
	t := &transfer{start: parsed, size: att.Size, recipients: online, done: make(chan struct{})}
	t.timer = p.deps.Clock.AfterFunc(p.cfg.TransferTimeout, func() { r.stall(t) })
	r.transfer = t
	for _, rc := range online {
		r.pushLocked(rc, start)
	}
	return t, m.msgID, contract.Result{}, true
}

// abortBotTransfer releases the lock t holds (telling the recipients) and
// returns the failure.
func (r *room) abortBotTransfer(t *transfer) contract.Result {
	r.abort(t)
	return contract.Failed(contract.CodeUnavailable, "nexscope send_media: the transfer was aborted before file-end")
}

// beginRehost starts re-hosting, in tenant's store, a file addressed to
// the bot of r, bound to tenant, or returns nil when there is no media
// store with a public URL or the store refuses (the file is then bridged as
// a note).
func (p *Platform) beginRehost(r *room, tenant string, attachment []byte) *media.Upload {
	store := p.deps.Media
	if store == nil || store.URL("x") == "" {
		return nil
	}
	name, mimeType := attachmentText(attachment, "name"), attachmentText(attachment, "mime")
	u, err := store.Begin(tenant, cmp.Or(mimeType, "application/octet-stream"), name)
	if err != nil {
		p.deps.Log.Warn("nexscope file to the bot cannot be re-hosted", "room", r.name, "err", err)
		return nil
	}
	return u
}

// commitRehost completes a re-host at file-end and returns the attachment
// the inbound carries, or nil when it failed (then the file is bridged as
// a note).
func (p *Platform) commitRehost(u *media.Upload, attachment, text []byte) *contract.Media {
	info, err := u.Commit()
	if err != nil {
		p.deps.Log.Warn("nexscope file to the bot could not be re-hosted", "err", err)
		return nil
	}
	caption, _ := optionalString(text)
	url := p.deps.Media.URL(info.ID)
	return &contract.Media{URL: url, MIME: info.MIME, Kind: kindOf(info.MIME), Size: info.Size,
		Filename: cmp.Or(info.Filename, attachmentText(attachment, "name")), Caption: caption}
}

// mediaTypes is the gateway message_type of each media kind but
// "document".
var mediaTypes = map[string]string{"image": contract.MessagePhoto, "audio": contract.MessageAudio, "video": contract.MessageVideo}

// kindOf is the media kind of a MIME type.
func kindOf(mimeType string) string {
	mt, _, _ := mime.ParseMediaType(mimeType)
	if k, _, ok := strings.Cut(mt, "/"); ok && mediaTypes[k] != "" {
		return k
	}
	return "document"
}

// mustJSON encodes v, which marshals by construction.
func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
