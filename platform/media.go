package platform

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"slices"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/netcause"
	"connector/media"
)

// MediaKinds are the send_media media_kind values and the kind of an
// inbound attachment (contract.Media.Kind).
var MediaKinds = []string{"image", "voice", "audio", "video", "document"}

// OpenMedia checks a send_media action and opens the bytes its source_url
// names for tenant (a re-host of tenant's, or a public URL downloaded to a
// temporary object). On failure it returns ok=false and the result to
// answer; on success the caller closes the object. One owner for the
// failures every platform answers alike:
//
//	media_kind not one of MediaKinds         bad_request
//	no media store                           unavailable
//	unknown, expired or another tenant's id  bad_request (one text for the three)
//	over media.MaxBytes                      bad_request
//	source_url not http(s), or non-public    bad_request
//	source answered non-200                  bad_request
//	source unreachable; quota exhausted      unavailable
func (d *Deps) OpenMedia(ctx context.Context, platformName, tenant string, a *contract.Action) (obj *media.Object, r contract.Result, ok bool) {
	prefix := platformName + " send_media: "
	if !slices.Contains(MediaKinds, a.MediaKind) {
		return nil, contract.Failed(contract.CodeBadRequest,
			fmt.Sprintf("%smedia_kind %.40q is not one of image, voice, audio, video, document", prefix, a.MediaKind)), false
	}
	if d.Media == nil {
		return nil, contract.Failed(contract.CodeUnavailable, prefix+"the connector has no media store"), false
	}
	if a.SourceURL == "" {
		return nil, contract.Failed(contract.CodeBadRequest, prefix+"source_url is empty"), false
	}
	obj, err := d.Media.Resolve(ctx, tenant, a.SourceURL)
	if err == nil {
		return obj, contract.Result{}, true
	}
	var fe *media.FetchError
	switch {
	case errors.Is(err, media.ErrNotFound):
		r = contract.Failed(contract.CodeBadRequest, prefix+"source_url names no media of this connection's tenant (unknown or expired id)")
	case errors.Is(err, media.ErrTooLarge):
		r = contract.Failed(contract.CodeBadRequest, fmt.Sprintf("%smedia exceeds the %d-byte limit", prefix, d.Media.MaxBytes()))
	case errors.Is(err, media.ErrQuota):
		r = contract.Failed(contract.CodeUnavailable, prefix+"media storage quota exhausted; retry later")
	case errors.Is(err, media.ErrBadURL), errors.Is(err, media.ErrForbiddenAddress):
		r = contract.Failed(contract.CodeBadRequest, prefix+err.Error())
	case errors.As(err, &fe) && fe.Status != 0:
		r = contract.Failed(contract.CodeBadRequest, prefix+fe.Error())
	case errors.As(err, &fe) && fe.Err != nil && netcause.IsNetwork(fe.Err):
		r = contract.Failed(contract.CodeUnavailable, prefix+"source_url unreachable: "+netcause.Describe(fe.Err))
	default:
		r = contract.Failed(contract.CodeUnavailable, prefix+"source_url could not be read")
	}
	return nil, r, false
}

// NewFileUpload returns a POST to url of a multipart/form-data body: the
// parts fields writes, then file as the part named field (filename, of type
// mime). The file is read as the transport sends the body, so it is never
// held in memory, and GetBody starts it over, so a retried or redirected
// attempt carries the whole file.
func NewFileUpload(ctx context.Context, url string, fields func(*multipart.Writer), field, filename, mime string, file *io.SectionReader) (*http.Request, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fields(mw) // a bytes.Buffer never fails a write
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", multipart.FileContentDisposition(field, filename))
	h.Set("Content-Type", mime)
	_, _ = mw.CreatePart(h)
	head := bytes.Clone(buf.Bytes())
	buf.Reset()
	_ = mw.Close()
	tail := buf.Bytes()
	body := func() (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(bytes.NewReader(head), io.NewSectionReader(file, 0, file.Size()), bytes.NewReader(tail))), nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return nil, err
	}
	req.Body, _ = body()
	req.GetBody = body
	req.ContentLength = int64(len(head)+len(tail)) + file.Size()
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return req, nil
}

// Rehosts remembers the attachments re-hosted for inbound messages not
// delivered yet (the sink refused them: its store is down), the latest
// 256, so the message's retry (the platform's webhook retry, a poll's
// backoff) carries the same re-host while the media store holds it for at
// least half its life, rather than storing the file again each time:
// those copies, never delivered, would fill the tenant's media quota until
// they expired, and its later attachments go without their files. Safe
// for concurrent use.
type Rehosts struct {
	clock clock.Clock
	kept  *lru.Cache[rehostKey, rehosted]
}

// rehostKey names a platform's file id re-hosted for a tenant.
type rehostKey struct{ tenant, file string }

// rehosted is a re-host Rehosts keeps, and when it was made.
type rehosted struct {
	info media.Info
	at   time.Time
}

// NewRehosts returns an empty Rehosts on clock c (the media store's).
func NewRehosts(c clock.Clock) *Rehosts {
	kept, _ := lru.New[rehostKey, rehosted](256) // size > 0: cannot fail
	return &Rehosts{clock: c, kept: kept}
}

// Rehost returns the re-host of file (the platform's id of the
// attachment) for tenant that an undelivered message made, while store
// holds it and the first half of its life has not passed (a retry's
// gateway gets as long to fetch it as a first delivery's, at least half);
// otherwise it re-hosts the file with do and keeps the result until
// Delivered.
func (r *Rehosts) Rehost(store *media.Store, tenant, file string, do func() (media.Info, error)) (media.Info, error) {
	k := rehostKey{tenant: tenant, file: file}
	if h, ok := r.kept.Get(k); ok && r.clock.Now().Before(h.at.Add(h.info.Expires.Sub(h.at)/2)) {
		if obj, err := store.Open(tenant, h.info.ID); err == nil {
			obj.Close()
			return h.info, nil
		}
	}
	at := r.clock.Now()
	info, err := do()
	if err == nil {
		r.kept.Add(k, rehosted{info: info, at: at})
	}
	return info, err
}

// Delivered forgets file's re-host for tenant once its message was
// delivered: a later message naming the file gets a fresh one, which
// lives the media TTL from then.
func (r *Rehosts) Delivered(tenant, file string) {
	r.kept.Remove(rehostKey{tenant: tenant, file: file})
}
