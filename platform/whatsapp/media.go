package whatsapp

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"connector/contract"
	"connector/internal/netcause"
	"connector/media"
	"connector/platform"
)

// mediaLimits are the Cloud API's per-type upload caps, checked before the
// upload as the native adapter does (sticker 100 kB is not a send_media
// kind).
var mediaLimits = map[string]int64{
	"image": 5 << 20, "video": 16 << 20, "audio": 16 << 20, "voice": 16 << 20, "document": 100 << 20,
}

// maxCaptionRunes is a media caption's limit; a longer content follows the
// media as text.
const maxCaptionRunes = 1024

// mediaDownloadTimeout bounds re-hosting one inbound attachment.
const mediaDownloadTimeout = 2 * time.Minute

// sendMedia uploads the object source_url names to the number's media
// (multipart, streamed from the media store), then sends it by id as the
// message type of media_kind (voice goes as audio: an Ogg/Opus file renders
// as a voice note), quoting reply_to. content is the caption of an image,
// video or document (a document also carries its filename); for audio, or
// past 1,024 code points, it follows as a text message.
func (p *Platform) sendMedia(ctx context.Context, tenant string, c chat, a *contract.Action) contract.Result {
	obj, r, ok := p.deps.OpenMedia(ctx, platformName, tenant, a)
	if !ok {
		return r
	}
	defer obj.Close()
	if limit := mediaLimits[a.MediaKind]; obj.Size > limit {
		return contract.Failed(contract.CodeBadRequest, fmt.Sprintf("whatsapp_cloud send_media: %d bytes is over the Cloud API's %s limit of %d", obj.Size, a.MediaKind, limit))
	}
	kind := a.MediaKind
	if kind == "voice" {
		kind = "audio"
	}
	filename := cmp.Or(a.Filename, obj.Filename, "file")
	mime := cmp.Or(obj.MIME, "application/octet-stream")
	var mediaID string
	err := p.appCall(ctx, tenant, c, func(ctx context.Context) (err error) {
		mediaID, err = p.graph.uploadMedia(ctx, c.number, filename, mime, obj.Section())
		return err
	})
	if err != nil {
		return p.failure(a.Op, err)
	}
	block := map[string]string{"id": mediaID}
	caption := formatMessage(a.Content)
	captioned := kind != "audio" && caption != "" && utf8.RuneCountInString(caption) <= maxCaptionRunes
	if captioned {
		block["caption"] = caption
	}
	if kind == "document" {
		block["filename"] = filename
	}
	id, err := p.post(ctx, tenant, c, envelope(c.user, kind, block, replyRef(a.ReplyTo)))
	if err != nil {
		return p.failure(a.Op, err)
	}
	p.quotes.sent(ctx, tenant, c.user, id, "", platform.AuthorizedCreation(ctx, p.vault, tenant))
	if !captioned && strings.TrimSpace(caption) != "" {
		if _, _, r := p.sendText(ctx, tenant, c, a.Op, caption, ""); !r.Success || r.Error != "" {
			return contract.Result{Success: true, MessageID: id, Error: r.Error + " (the media was sent; its caption was not, or not whole)"}
		}
	}
	return contract.OK(id)
}

// attachMedia re-hosts m's attachment for tenant and lists it in ev
// (media_urls and media): the media id is looked up (GET /{media-id}),
// its bytes downloaded with the access token and streamed into the media
// store (once while the message is not delivered: platform.Rehosts), and
// gateways get only the re-host URL. Without a media store with
// a public URL, over the size limit, or when a step fails (counted as
// dropped media_skipped), the event goes on without it.
func (p *Platform) attachMedia(ctx context.Context, tenant string, m *message, ev *contract.Event) {
	md := m.media()
	store := p.deps.Media
	if md == nil || strings.TrimSpace(md.ID) == "" || store == nil || store.URL("x") == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, mediaDownloadTimeout)
	defer cancel()
	info, err := p.rehosts.Rehost(store, tenant, strings.TrimSpace(md.ID), func() (media.Info, error) { return p.rehost(ctx, tenant, m.kind(), md) })
	if err != nil {
		p.log.Warn("whatsapp attachment could not be re-hosted; delivered without it", "tenant", tenant, "media_id", md.ID, "err", err)
		p.deps.Metrics.Dropped(platformName, dropMediaSkipped)
		return
	}
	kind := m.kind() // the media kind gateways see: a sticker is an image
	if kind == "sticker" {
		kind = "image"
	}
	url := store.URL(info.ID)
	ev.MediaURLs = append(ev.MediaURLs, url)
	ev.Media = append(ev.Media, contract.Media{URL: url, MIME: info.MIME, Kind: kind, Size: info.Size,
		Filename: info.Filename, Caption: md.Caption})
}

// rehost downloads one attachment into the media store. Errors carry no
// credential.
func (p *Platform) rehost(ctx context.Context, tenant, kind string, md *mediaRef) (media.Info, error) {
	limit := min(p.cfg.MaxInboundMediaBytes, p.deps.Media.MaxBytes())
	mi, err := p.graph.lookupMedia(ctx, strings.TrimSpace(md.ID))
	p.noteToken(err)
	if err != nil {
		return media.Info{}, fmt.Errorf("lookup: %s", p.describe(err))
	}
	if mi.FileSize > limit {
		return media.Info{}, fmt.Errorf("%d bytes is over the %d-byte limit", mi.FileSize, limit)
	}
	resp, err := p.graph.download(ctx, mi.URL)
	if err != nil {
		return media.Info{}, fmt.Errorf("download: %s", p.describe(err))
	}
	defer resp.Body.Close()
	mime := cmp.Or(mi.MimeType, md.MimeType, "application/octet-stream")
	filename := cmp.Or(strings.TrimSpace(md.Filename), kind)
	// file_size bounds the download only when Meta states it.
	info, err := p.deps.Media.Put(tenant, http.MaxBytesReader(nil, resp.Body, limit), mime, filename)
	if err != nil {
		return media.Info{}, fmt.Errorf("store: %s", p.errorText(err))
	}
	return info, nil
}

// describe names a Graph or network failure without URL or credential.
func (p *Platform) describe(err error) string {
	if netcause.IsNetwork(err) {
		return netcause.Describe(err)
	}
	return p.errorText(err)
}
