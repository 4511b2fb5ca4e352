package media

import (
	"cmp"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"time"

	"connector/internal/httpjson"
)

// DefaultUploadTimeout is Config.UploadTimeout's default.
const DefaultUploadTimeout = 2 * time.Minute

// minDownloadRate is the floor, in bytes a second, of a download's average
// rate past its first Config.UploadTimeout (docs/configuration.md): the
// progress deadline alone let a client taking a chunk a deadline hold a
// 25 MiB download, and its connection slot, for a day. It is each
// download's own, not its tenant's: what it frees is the download's
// connection slot, one of its source's share of the unauthenticated ones,
// so summed over a tenant's downloads it would let a client hold more
// slots for the same rate (docs/security.md).
const minDownloadRate = 16 << 10

// Authenticator verifies a request's Authorization header: the gateway's
// own HMAC bearer token, the one its /relay upgrade carries. It returns
// the gateway's tenant and id, and the key of the secret it signed with.
type Authenticator interface {
	Authenticate(authorization string) (tenant, gatewayID string, key []byte, err error)
}

// HandlerConfig configures Handler.
type HandlerConfig struct {
	// Auth authenticates gateways. Required.
	Auth Authenticator
	// Log receives refused requests at debug level; nil discards.
	Log *slog.Logger

	minRate int64 // bytes a second; 0 is minDownloadRate (tests lower it)
}

// Handler serves the media routes, POST /relay/media (upload) and GET
// /relay/media/{id}, as docs/contract.md "Media" states them: mount it at
// both patterns (Routes). Both need the gateway's bearer and act for its
// tenant only.
func (s *Store) Handler(cfg HandlerConfig) http.Handler {
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	cfg.minRate = cmp.Or(cfg.minRate, minDownloadRate)
	return &handler{s: s, cfg: cfg}
}

// Routes maps the ServeMux patterns of h (see Handler).
func Routes(h http.Handler) map[string]http.Handler {
	return map[string]http.Handler{"/relay/media": h, "/relay/media/{id}": h}
}

type handler struct {
	s   *Store
	cfg HandlerConfig
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	switch {
	case r.URL.Path == "/relay/media" && r.Method == http.MethodPost:
	case id != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
	default:
		if r.URL.Path == "/relay/media" {
			w.Header().Set("Allow", "POST")
		} else {
			w.Header().Set("Allow", "GET, HEAD")
		}
		httpjson.Error(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	// No registry.GatewayHolds here, unlike /manage/* and /relay/policy,
	// which write the shared store: the objects are this instance's, kept
	// per tenant creation (SetTenants), so a stale instance's token of a
	// gateway deleted or made again elsewhere reaches only what the same
	// applied view holds, gone when the change applies.
	tenant, _, _, err := h.cfg.Auth.Authenticate(r.Header.Get("Authorization"))
	if err != nil {
		h.cfg.Log.Debug("media request refused", "reason", "unauthorized", "err", err)
		httpjson.Error(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	if id == "" {
		h.upload(w, r, tenant)
		return
	}
	h.download(w, r, tenant, id)
}

func (h *handler) upload(w http.ResponseWriter, r *http.Request, tenant string) {
	if r.ContentLength > h.s.cfg.MaxBytes {
		httpjson.Error(w, http.StatusRequestEntityTooLarge, tooLargeText(h.s.cfg.MaxBytes))
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.s.cfg.UploadTimeout))
	mimeType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		mimeType = "application/octet-stream"
	}
	info, err := h.s.Put(tenant, r.Body, mimeType, r.Header.Get("X-Media-Filename"))
	switch {
	case errors.Is(err, ErrTooLarge):
		httpjson.Error(w, http.StatusRequestEntityTooLarge, tooLargeText(h.s.cfg.MaxBytes))
		return
	case errors.Is(err, ErrQuota):
		httpjson.Error(w, http.StatusInsufficientStorage, "media storage quota exhausted; retry later")
		return
	case errors.Is(err, errRead):
		h.cfg.Log.Debug("media upload failed", "err", err)
		httpjson.Error(w, http.StatusBadRequest, "upload body could not be read")
		return
	case err != nil:
		h.cfg.Log.Warn("media upload could not be stored", "err", err)
		httpjson.Error(w, http.StatusInternalServerError, "media could not be stored")
		return
	}
	if info.Size == 0 {
		h.s.remove(info.ID)
		httpjson.Error(w, http.StatusBadRequest, "upload body is empty")
		return
	}
	httpjson.Write(w, http.StatusOK, struct {
		ID   string `json:"id"`
		Size int64  `json:"size"`
		URL  string `json:"url,omitempty"`
	}{info.ID, info.Size, h.s.URL(info.ID)})
}

func (h *handler) download(w http.ResponseWriter, r *http.Request, tenant, id string) {
	obj, err := h.s.Open(tenant, id)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			h.cfg.Log.Warn("media object could not be opened", "err", err)
		}
		httpjson.Error(w, http.StatusNotFound, ErrNotFound.Error())
		return
	}
	defer obj.Close()
	hdr := w.Header()
	hdr.Set("Content-Type", cmp.Or(obj.MIME, "application/octet-stream"))
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Cache-Control", "private, no-store")
	// Always an attachment, so a stored text/html or SVG is never rendered
	// on this origin; the filename when there is one.
	cd := "attachment"
	if obj.Filename != "" {
		cd = cmp.Or(mime.FormatMediaType("attachment", map[string]string{"filename": obj.Filename}), cd)
	}
	hdr.Set("Content-Disposition", cd)
	http.ServeContent(w, r, "", time.Time{}, &progress{ReadSeeker: obj.Section(), rc: http.NewResponseController(w),
		d: h.s.cfg.UploadTimeout, floor: time.Now().Add(h.s.cfg.UploadTimeout), perByte: time.Second / time.Duration(h.cfg.minRate)})
}

// progress reads a download's object and gives the write of each chunk
// read d, and at most floor, which moves d past the start by the time its
// bytes so far take at the minimum rate: a client that stops reading, or
// trickles, would else hold the connection, its slot among the
// unauthenticated ones and the object's file for good, while a slow one
// above the rate gets the whole object.
type progress struct {
	io.ReadSeeker
	rc      *http.ResponseController
	d       time.Duration
	floor   time.Time
	perByte time.Duration // at the minimum rate
}

func (p *progress) Read(b []byte) (int, error) {
	n, err := p.ReadSeeker.Read(b)
	p.floor = p.floor.Add(time.Duration(n) * p.perByte)
	deadline := time.Now().Add(p.d)
	if p.floor.Before(deadline) {
		deadline = p.floor
	}
	_ = p.rc.SetWriteDeadline(deadline)
	return n, err
}

func tooLargeText(limit int64) string {
	return "media exceeds the " + strconv.FormatInt(limit, 10) + "-byte limit"
}
