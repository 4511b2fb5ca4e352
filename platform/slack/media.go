package slack

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"connector/contract"
	"connector/media"
)

// sendMedia uploads the object source_url names with Slack's external
// upload flow: files.getUploadURLExternal, the bytes streamed to the URL
// it gives, then files.completeUploadExternal shares the file into the
// chat and thread with content as its mrkdwn comment. The result's
// message_id is the file's message (its share's ts, from files.info; ""
// when Slack has not shared it yet).
func (p *Platform) sendMedia(ctx context.Context, tenant string, t target, a *contract.Action) contract.Result {
	obj, r, ok := p.deps.OpenMedia(ctx, platformName, tenant, a)
	if !ok {
		return r
	}
	defer obj.Close()
	if obj.Size == 0 {
		return contract.Failed(contract.CodeBadRequest, "slack send_media: the media is empty")
	}
	filename := cmp.Or(a.Filename, obj.Filename, "file")
	c, _, err := p.works.client(ctx, t.team)
	if err != nil {
		return p.failure(contract.OpSendMedia, err)
	}
	var up *slack.GetUploadURLExternalResponse
	err = p.call(ctx, t.team, "files.getUploadURLExternal", func(ctx context.Context, c *slack.Client) (err error) {
		up, err = c.GetUploadURLExternalContext(ctx, slack.GetUploadURLExternalParameters{FileName: filename, FileSize: int(obj.Size)})
		return err
	})
	if err != nil {
		return p.failure(contract.OpSendMedia, err)
	}
	if err := c.UploadToURL(ctx, slack.UploadToURLParameters{UploadURL: up.UploadURL, Filename: filename, Reader: obj.Section()}); err != nil {
		return p.failure(contract.OpSendMedia, err)
	}
	thread := p.threadOf(tenant, a)
	params := slack.CompleteUploadExternalParameters{
		Files: []slack.FileSummary{{ID: up.FileID, Title: filename}}, Channel: t.channel, ThreadTimestamp: thread,
	}
	if strings.TrimSpace(a.Content) != "" {
		params.InitialComment = toMrkdwn(a.Content)
	}
	err = p.callIn(ctx, t.team, t.channel, "files.completeUploadExternal", func(ctx context.Context, c *slack.Client) error {
		_, err := c.CompleteUploadExternalContext(ctx, params)
		return err
	})
	if err != nil {
		return p.failure(contract.OpSendMedia, err)
	}
	ts := p.shareTS(ctx, t, up.FileID)
	p.markerNotKept(p.memory.sent(context.WithoutCancel(ctx), tenant, t.team, t.channel, ts, thread))
	return contract.OK(ts)
}

// shareTS is the ts of file's message in t's channel (files.info), "" when
// it is not known.
func (p *Platform) shareTS(ctx context.Context, t target, file string) string {
	var f *slack.File
	err := p.call(ctx, t.team, "files.info", func(ctx context.Context, c *slack.Client) (err error) {
		f, _, _, err = c.GetFileInfoContext(ctx, file, 0, 0)
		return err
	})
	if err != nil {
		p.log.Debug("slack files.info failed; send_media answers no message_id", "err", p.errorText(err))
		return ""
	}
	for _, shares := range []map[string][]slack.ShareFileInfo{f.Shares.Public, f.Shares.Private} {
		if s := shares[t.channel]; len(s) > 0 {
			return s[0].Ts
		}
	}
	return ""
}

// Limits of inbound files. mediaDownloadTimeout bounds the fetches of
// all of a turn's files together (files.info lookups included): they
// hold the message's chat (and its 200) until done, and one bound per file
// would hold it for up to half an hour, past Slack's last retry of the
// messages waiting behind it.
const (
	mediaDownloadTimeout = 2 * time.Minute
	maxInjectedText      = 100 << 10 // a text file up to this is also put in the text, as natively
	maxInboundFiles      = 10
)

// textExtensions are the documents whose text the native adapter puts in
// the message (_TEXT_INJECT_EXTENSIONS), besides any text/* type.
var textExtensions = map[string]bool{
	".txt": true, ".md": true, ".csv": true, ".json": true, ".log": true, ".yaml": true, ".yml": true,
	".xml": true, ".py": true, ".js": true, ".ts": true, ".go": true, ".sh": true, ".sql": true, ".toml": true, ".ini": true,
}

// unsafeName are the characters a file's name loses in a text header.
var unsafeName = regexp.MustCompile(`[^\w.\- ]`)

// attachFiles re-hosts t's files in the media store for tenant (each
// fetched from its url_private_download, else url_private, with the
// workspace's token: only https URLs on slack.com hosts, or the Web API's
// own host, ever get it) and lists them in media_urls and media, as
// Telegram's files are. A small text document's content is also put in
// front of the text ("[Content of name]:"); a file that cannot be fetched
// is named in an attachment notice there instead, as natively, as is
// one not fetched within mediaDownloadTimeout of the first. Without a
// media store with a public URL the event goes on without its files (its
// message_type still says what they were).
func (p *Platform) attachFiles(ctx context.Context, tenant, team string, t *turn) {
	store := p.deps.Media
	if (len(t.files) == 0 && len(t.rootFiles) == 0) || store == nil || store.URL("x") == "" {
		return
	}
	ctx, cancel := within(ctx, p.clock, mediaDownloadTimeout)
	defer cancel()
	p.attachRootImages(ctx, tenant, team, t)
	var injected, notices []string
	for i, f := range t.files {
		if i == maxInboundFiles {
			break
		}
		if f.FileAccess == "check_file_info" {
			if !p.fileInfo(ctx, team, &f) {
				notices = append(notices, "- Slack attachment "+attachmentLabel(&f)+" could not be fetched.")
				continue
			}
			if k := fileKind(&f); k == "document" && (f.Size <= 0 || f.Size > maxDocumentBytes) {
				continue // _cache_slack_document skips it
			} else if mt := kindMessageType[k]; t.ev.MessageType != "command" &&
				(t.ev.MessageType == "text" || messageTypeRank[mt] < messageTypeRank[t.ev.MessageType]) {
				t.ev.MessageType = mt
			}
		}
		kind := fileKind(&f)
		mime := f.Mimetype
		if kind == "voice" {
			mime = "audio/mp4" // an audio-only clip Slack labels video/mp4
		}
		info, err := p.rehostOnce(ctx, tenant, team, &f, mime)
		if err != nil {
			p.log.Warn("slack attachment could not be re-hosted; delivered without it", "file", f.ID, "err", p.errorText(err))
			p.metrics.Dropped(platformName, "media_skipped")
			notices = append(notices, "- Slack attachment "+attachmentLabel(&f)+" could not be fetched.")
			continue
		}
		url := store.URL(info.ID)
		t.ev.MediaURLs = append(t.ev.MediaURLs, url)
		t.ev.Media = append(t.ev.Media, contract.Media{URL: url, MIME: info.MIME, Kind: kind, Size: info.Size, Filename: info.Filename})
		if text, ok := p.textOf(tenant, &f, info); ok {
			injected = append(injected, text)
		}
	}
	if t.ev.MessageType == "command" {
		return // a command keeps its text
	}
	for _, text := range injected {
		t.ev.Text = joinText(text, t.ev.Text)
	}
	if len(notices) > 0 {
		t.ev.Text = joinText("[Slack attachment notice]\n"+strings.Join(notices, "\n"), t.ev.Text)
	}
}

// attachRootImages re-hosts the first images of the thread's root (up to
// threadRootImages; a Slack Connect stub completed with files.info) as the
// turn's first media, and makes the turn a photo unless it is a command,
// as natively. A root image that cannot be fetched is left out without a
// notice: the context names it already.
func (p *Platform) attachRootImages(ctx context.Context, tenant, team string, t *turn) {
	added := 0
	for _, f := range t.rootFiles {
		if added == threadRootImages {
			break
		}
		if f.FileAccess == "check_file_info" && !p.fileInfo(ctx, team, &f) {
			continue
		}
		if !strings.HasPrefix(f.Mimetype, "image/") || (f.URLPrivateDownload == "" && f.URLPrivate == "") {
			continue
		}
		info, err := p.rehostOnce(ctx, tenant, team, &f, f.Mimetype)
		if err != nil {
			p.log.Warn("slack thread root image could not be re-hosted", "file", f.ID, "err", p.errorText(err))
			continue
		}
		url := p.deps.Media.URL(info.ID)
		t.ev.MediaURLs = append(t.ev.MediaURLs, url)
		t.ev.Media = append(t.ev.Media, contract.Media{URL: url, MIME: info.MIME, Kind: "image", Size: info.Size, Filename: info.Filename})
		added++
	}
	if added > 0 && t.ev.MessageType != "command" {
		t.ev.MessageType = "photo"
	}
}

func joinText(head, text string) string {
	if text == "" {
		return head
	}
	return head + "\n\n" + text
}

func attachmentLabel(f *wireFile) string {
	return cmp.Or(f.Name, f.ID, "this attachment")
}

// fileInfo completes a Slack Connect stub (file_access check_file_info,
// no URLs) with files.info, as natively; false when Slack would not say.
func (p *Platform) fileInfo(ctx context.Context, team string, f *wireFile) bool {
	if f.ID == "" {
		return false
	}
	var info *slack.File
	err := p.call(ctx, team, "files.info", func(ctx context.Context, c *slack.Client) (err error) {
		info, _, _, err = c.GetFileInfoContext(ctx, f.ID, 0, 0)
		return err
	})
	if err != nil {
		p.log.Warn("slack files.info failed for a shared file", "file", f.ID, "err", p.errorText(err))
		return false
	}
	f.Name = cmp.Or(info.Name, f.Name)
	f.Mimetype, f.Size = cmp.Or(info.Mimetype, f.Mimetype), cmp.Or(int64(info.Size), f.Size)
	f.URLPrivate, f.URLPrivateDownload = info.URLPrivate, info.URLPrivateDownload
	return f.URLPrivate != "" || f.URLPrivateDownload != ""
}

// rehostOnce re-hosts f (rehost) once while its message is not delivered
// (platform.Rehosts): the intake's retries of a message the relay refused
// carry the same re-host rather than store the file again each time. A
// file without an id is re-hosted each time.
func (p *Platform) rehostOnce(ctx context.Context, tenant, team string, f *wireFile, mime string) (media.Info, error) {
	if f.ID == "" {
		return p.rehost(ctx, tenant, team, f, mime)
	}
	return p.rehosts.Rehost(p.deps.Media, tenant, f.ID, func() (media.Info, error) { return p.rehost(ctx, tenant, team, f, mime) })
}

// rehostsDelivered forgets the re-hosts of t's files for tenant once its
// message was delivered (platform.Rehosts).
func (p *Platform) rehostsDelivered(tenant string, t *turn) {
	for _, files := range [][]wireFile{t.files, t.rootFiles} {
		for _, f := range files {
			if f.ID != "" {
				p.rehosts.Delivered(tenant, f.ID)
			}
		}
	}
}

// rehost downloads f into the media store, within ctx (attachFiles bounds
// it). Errors carry no token.
func (p *Platform) rehost(ctx context.Context, tenant, team string, f *wireFile, mime string) (media.Info, error) {
	c, _, err := p.works.client(ctx, team)
	if err != nil {
		return media.Info{}, err
	}
	up, err := p.deps.Media.Begin(tenant, cmp.Or(mime, "application/octet-stream"), f.Name)
	if err != nil {
		return media.Info{}, err
	}
	// slack-go sends the token only to Slack's https hosts or the Web
	// API's, and refuses a redirect to the sign-in page (a file the token
	// cannot read).
	if err := c.GetFileContext(ctx, cmp.Or(f.URLPrivateDownload, f.URLPrivate), up); err != nil {
		up.Abort()
		return media.Info{}, err
	}
	return up.Commit()
}

// textOf is the "[Content of name]:" text of a small text document.
func (p *Platform) textOf(tenant string, f *wireFile, info media.Info) (string, bool) {
	ext := strings.ToLower(path.Ext(f.Name))
	if fileKind(f) != "document" || info.Size > maxInjectedText || !(textExtensions[ext] || strings.HasPrefix(f.Mimetype, "text/")) {
		return "", false
	}
	obj, err := p.deps.Media.Open(tenant, info.ID)
	if err != nil {
		return "", false
	}
	defer obj.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(obj.Section(), maxInjectedText+1)); err != nil || !utf8.Valid(b.Bytes()) {
		return "", false
	}
	name := unsafeName.ReplaceAllString(cmp.Or(f.Name, "document"+ext), "_")
	return "[Content of " + name + "]:\n" + b.String(), true
}
