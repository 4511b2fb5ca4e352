package telegram

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"connector/contract"
	"connector/internal/netcause"
	"connector/internal/textsplit"
	"connector/media"
)

// maxCaptionRunes is Telegram's caption limit; a longer caption goes out
// as a text message after the media.
const maxCaptionRunes = 1024

// maxDownloadBytes is the largest file the Bot API lets a bot download
// (getFile): 20 MB.
const maxDownloadBytes = 20 << 20

// mediaDownloadTimeout bounds re-hosting one inbound file.
const mediaDownloadTimeout = 2 * time.Minute

// sendMedia posts the object source_url names with the method of its
// media_kind (sendPhoto, sendVoice, sendAudio, sendVideo, sendDocument),
// streamed as multipart/form-data, with content as the MarkdownV2 caption
// (plain if Telegram rejects the entities; a caption over 1,024 characters
// follows as text messages), into the topic of metadata.thread_id,
// replying to reply_to. Unlike a send it ends no draft stream: previews
// stay (replacePreviews). The result carries the media message's id.
func (p *Platform) sendMedia(ctx context.Context, tenant string, chat int64, a *contract.Action) contract.Result {
	obj, r, ok := p.deps.OpenMedia(ctx, platformName, tenant, a)
	if !ok {
		return r
	}
	defer obj.Close()
	filename := cmp.Or(a.Filename, obj.Filename, "file")
	up := mediaUpload{chat: chat, thread: topicThread(a.Metadata.ThreadID), reply: messageRef(a.ReplyTo), filename: filename, obj: obj}
	longCaption := utf8.RuneCountInString(a.Content) > maxCaptionRunes
	if !longCaption && a.Content != "" {
		up.caption, up.parseMode = renderMarkdownV2(a.Content), models.ParseModeMarkdown
	}
	var msg *models.Message
	err := p.paced(ctx, tenant, chat, true, func(ctx context.Context) (err error) {
		msg, err = p.postMedia(ctx, a.MediaKind, &up)
		if err != nil && up.parseMode != "" && isBadRequest(err, "can't parse entities") {
			up.caption, up.parseMode = a.Content, ""
			msg, err = p.postMedia(ctx, a.MediaKind, &up)
		}
		return err
	})
	if err != nil {
		return p.failure(contract.OpSendMedia, err)
	}
	id := strconv.Itoa(msg.ID)
	if longCaption {
		_, _, rest := p.sendParts(ctx, tenant, chat, &contract.Action{Op: a.Op, Metadata: a.Metadata}, textsplit.Split(a.Content, splitRules), nil, "")
		if !rest.Success || rest.Error != "" {
			return contract.Result{Success: true, MessageID: id, Error: rest.Error + " (the media was sent; its caption was not, or not whole)"}
		}
	}
	return contract.OK(id)
}

// mediaUpload is one media message to post.
type mediaUpload struct {
	chat          int64
	thread, reply int
	filename      string
	caption       string
	parseMode     models.ParseMode
	obj           *media.Object
}

// postMedia calls the method of kind once; each call reads the object from
// its start, so a retried call sends it whole.
func (p *Platform) postMedia(ctx context.Context, kind string, u *mediaUpload) (*models.Message, error) {
	file := &models.InputFileUpload{Filename: u.filename, Data: u.obj.Section()}
	var reply *models.ReplyParameters
	if u.reply != 0 {
		reply = &models.ReplyParameters{MessageID: u.reply, AllowSendingWithoutReply: true}
	}
	switch kind {
	case "image":
		return p.bot.SendPhoto(ctx, &bot.SendPhotoParams{ChatID: u.chat, MessageThreadID: u.thread, Photo: file,
			Caption: u.caption, ParseMode: u.parseMode, ReplyParameters: reply})
	case "voice":
		return p.bot.SendVoice(ctx, &bot.SendVoiceParams{ChatID: u.chat, MessageThreadID: u.thread, Voice: file,
			Caption: u.caption, ParseMode: u.parseMode, ReplyParameters: reply})
	case "audio":
		return p.bot.SendAudio(ctx, &bot.SendAudioParams{ChatID: u.chat, MessageThreadID: u.thread, Audio: file,
			Caption: u.caption, ParseMode: u.parseMode, ReplyParameters: reply})
	case "video":
		return p.bot.SendVideo(ctx, &bot.SendVideoParams{ChatID: u.chat, MessageThreadID: u.thread, Video: file,
			Caption: u.caption, ParseMode: u.parseMode, ReplyParameters: reply})
	}
	return p.bot.SendDocument(ctx, &bot.SendDocumentParams{ChatID: u.chat, MessageThreadID: u.thread, Document: file,
		Caption: u.caption, ParseMode: u.parseMode, ReplyParameters: reply})
}

// inboundFile is the attachment of a message.
type inboundFile struct {
	id       string
	size     int64
	kind     string // a platform.MediaKinds value
	mime     string
	filename string
}

// fileOf returns msg's attachment (the largest size of a photo), if any.
func fileOf(msg *models.Message) (inboundFile, bool) {
	switch {
	case len(msg.Photo) > 0:
		ph := msg.Photo[len(msg.Photo)-1] // sizes come smallest first
		return inboundFile{id: ph.FileID, size: int64(ph.FileSize), kind: "image", mime: "image/jpeg", filename: "photo.jpg"}, true
	case msg.Voice != nil:
		return inboundFile{id: msg.Voice.FileID, size: msg.Voice.FileSize, kind: "voice", mime: cmp.Or(msg.Voice.MimeType, "audio/ogg"), filename: "voice.ogg"}, true
	case msg.Audio != nil:
		return inboundFile{id: msg.Audio.FileID, size: msg.Audio.FileSize, kind: "audio", mime: msg.Audio.MimeType, filename: cmp.Or(msg.Audio.FileName, "audio")}, true
	case msg.Video != nil:
		return inboundFile{id: msg.Video.FileID, size: msg.Video.FileSize, kind: "video", mime: msg.Video.MimeType, filename: cmp.Or(msg.Video.FileName, "video.mp4")}, true
	case msg.Animation != nil:
		return inboundFile{id: msg.Animation.FileID, size: msg.Animation.FileSize, kind: "video", mime: msg.Animation.MimeType, filename: cmp.Or(msg.Animation.FileName, "animation.mp4")}, true
	case msg.VideoNote != nil:
		return inboundFile{id: msg.VideoNote.FileID, size: int64(msg.VideoNote.FileSize), kind: "video", mime: "video/mp4", filename: "video_note.mp4"}, true
	case msg.Document != nil:
		return inboundFile{id: msg.Document.FileID, size: msg.Document.FileSize, kind: "document", mime: msg.Document.MimeType, filename: msg.Document.FileName}, true
	}
	return inboundFile{}, false
}

// attachMedia re-hosts msg's attachment for tenant and lists it in ev
// (media_urls and media). The file is downloaded with the bot's credential
// (getFile, then the file path), streamed into the media store (once while
// the update is not delivered: platform.Rehosts), and reaches gateways
// only as its re-host URL. Without a media store with a
// public URL, a file over the Bot API's or the store's limit, or when the
// download fails, the event goes on without it (logged, counted as
// "media_skipped").
func (p *Platform) attachMedia(ctx context.Context, tenant string, msg *models.Message, ev *contract.Event) {
	f, ok := fileOf(msg)
	store := p.deps.Media
	if !ok || store == nil || store.URL("x") == "" {
		return
	}
	limit := min(maxDownloadBytes, store.MaxBytes())
	if f.size > limit {
		p.log.Info("telegram attachment too large to re-host; delivered without it", "chat_id", msg.Chat.ID, "size", f.size)
		p.deps.Metrics.Dropped(platformName, "media_skipped")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, mediaDownloadTimeout)
	defer cancel()
	info, err := p.rehosts.Rehost(store, tenant, f.id, func() (media.Info, error) { return p.rehost(ctx, tenant, f, limit) })
	if err != nil {
		p.log.Warn("telegram attachment could not be re-hosted; delivered without it", "chat_id", msg.Chat.ID, "err", err)
		p.deps.Metrics.Dropped(platformName, "media_skipped")
		return
	}
	url := store.URL(info.ID)
	ev.MediaURLs = append(ev.MediaURLs, url)
	ev.Media = append(ev.Media, contract.Media{URL: url, MIME: info.MIME, Kind: f.kind, Size: info.Size,
		Filename: info.Filename, Caption: msg.Caption})
}

// rehostDelivered forgets the re-host of msg's attachment for tenant once
// its update was delivered (platform.Rehosts).
func (p *Platform) rehostDelivered(tenant string, msg *models.Message) {
	if f, ok := fileOf(msg); ok {
		p.rehosts.Delivered(tenant, f.id)
	}
}

// rehost downloads file f, at most limit bytes (file_size is optional, in
// the update and in getFile's answer), into the media store. Errors carry
// no token.
func (p *Platform) rehost(ctx context.Context, tenant string, f inboundFile, limit int64) (media.Info, error) {
	file, err := p.bot.GetFile(ctx, &bot.GetFileParams{FileID: f.id})
	if err != nil {
		return media.Info{}, fmt.Errorf("getFile: %s", p.errorText(err))
	}
	if file.FileSize > limit {
		return media.Info{}, fmt.Errorf("%d bytes is over the %d-byte limit", file.FileSize, limit)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.bot.FileDownloadLink(file), nil)
	if err != nil {
		return media.Info{}, fmt.Errorf("file path is not a URL path")
	}
	resp, err := p.download.Do(req)
	if err != nil {
		return media.Info{}, fmt.Errorf("download: %s", netcause.Describe(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return media.Info{}, fmt.Errorf("download: HTTP %d", resp.StatusCode)
	}
	info, err := p.deps.Media.Put(tenant, http.MaxBytesReader(nil, resp.Body, limit), cmp.Or(f.mime, "application/octet-stream"), f.filename)
	if err != nil {
		return media.Info{}, fmt.Errorf("store: %s", p.errorText(err))
	}
	return info, nil
}
