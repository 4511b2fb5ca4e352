// Package admin is the operator's admin API: JSON over HTTP under
// /admin/v1/, on its own listener (admin.listen), every request
// authenticated with a bearer token compared in constant time. It changes
// the runtime registry (package registry) and has the change applied to
// this instance before it answers, so a removed gateway's sockets are
// closed by the time DELETE returns; other instances apply it on the
// registry's change notification.
//
// The routes, their bodies, answers and error statuses are in
// docs/operations.md ("API reference"). A store failure answers 500
// {"error": "internal"}: the log has its error, which can name an internal
// address. Every change is logged (who, what, outcome; never a secret) and
// counted; a refused token is counted, and logged within
// loglimit.NewSources' allowance of its remote host.
package admin

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connector/internal/httpjson"
	"connector/internal/loglimit"
	"connector/internal/textsplit"
	"connector/registry"
	"connector/registry/change"
	"connector/store"
)

// Metrics counts admin requests.
type Metrics interface {
	// AdminChange counts one change request (change.Metrics).
	change.Metrics
	// AdminRefused counts a request refused for its token.
	AdminRefused()
}

// Config configures the Handler.
type Config struct {
	// Registry is where changes go; required. Its clock is the handler's.
	Registry *registry.Registry
	// Token is the bearer token every request must carry; required.
	Token string
	// Apply applies the registry to this instance; called after every
	// change, before the answer.
	Apply func(ctx context.Context) error
	// Log receives one line per change; nil discards.
	Log *slog.Logger
	// Metrics counts requests; nil discards.
	Metrics Metrics
	// Backup copies the store for GET /admin/v1/backup; nil (a store that
	// is not one file, Redis) answers 501.
	Backup store.Backuper
	// Platforms are the platforms this connector runs: a binding on
	// another is refused (it would route nothing). Nil accepts any.
	Platforms []string
}

// ActorHeader names who is calling, for the log (the CLI sends the local
// user name). It is informational: the token is what authorizes.
const ActorHeader = "X-Connector-Actor"

// maxBodyBytes bounds a request body.
const maxBodyBytes = 64 << 10

// Handler serves the admin API.
type Handler struct {
	cfg       Config
	rec       change.Recorder
	tokenHash [sha256.Size]byte
	mux       *http.ServeMux
	// refusals bounds the log lines of refused tokens per remote host.
	refusals *loglimit.Limiter
}

// New returns the handler; it refuses an empty token.
func New(cfg Config) (*Handler, error) {
	if cfg.Token == "" {
		return nil, errors.New("admin: a token is required")
	}
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	cfg.Metrics = cmp.Or[Metrics](cfg.Metrics, nopMetrics{})
	h := &Handler{cfg: cfg, tokenHash: sha256.Sum256([]byte(cfg.Token)), mux: http.NewServeMux(), refusals: loglimit.NewSources(cfg.Registry.Clock()),
		rec: change.Recorder{Apply: cfg.Apply, Log: cfg.Log, Line: "admin change", Metrics: cfg.Metrics}}
	h.mux.HandleFunc("GET /admin/v1/tenants", h.listTenants)
	h.change("POST /admin/v1/tenants", "create_tenant", h.createTenant)
	h.change("DELETE /admin/v1/tenants/{tenant}", "delete_tenant", h.deleteTenant)
	h.change("PUT /admin/v1/tenants/{tenant}/session", "set_session", h.setSession)
	h.change("PUT /admin/v1/tenants/{tenant}/max-gateways", "set_max_gateways", h.setMaxGateways)
	h.change("POST /admin/v1/tenants/{tenant}/gateways", "create_gateway", h.createGateway)
	h.change("POST /admin/v1/tenants/{tenant}/gateways/{gateway}/rotate", "rotate_gateway", h.rotate)
	h.change("DELETE /admin/v1/tenants/{tenant}/gateways/{gateway}", "delete_gateway", h.deleteGateway)
	h.change("PUT /admin/v1/tenants/{tenant}/bindings", "bind", binding(h.bind))
	h.change("DELETE /admin/v1/tenants/{tenant}/bindings", "unbind", binding(h.unbind))
	h.change("PUT /admin/v1/tenants/{tenant}/gateways/{gateway}/wake", "set_wake", h.setWake)
	h.change("POST /admin/v1/tenants/{tenant}/enroll-tokens", "mint_enroll_token", h.mintEnrollToken)
	h.mux.HandleFunc("GET /admin/v1/backup", h.backup)
	return h, nil
}

type nopMetrics struct{ change.Nop }

func (nopMetrics) AdminRefused() {}

// ServeHTTP authenticates the request and routes it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum := sha256.Sum256([]byte(got))
	if !ok || subtle.ConstantTimeCompare(sum[:], h.tokenHash[:]) != 1 {
		h.cfg.Metrics.AdminRefused()
		h.refusals.LogFrom(h.cfg.Log, slog.LevelWarn, r.RemoteAddr, "admin request refused: bad or missing token", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
		w.Header().Set("WWW-Authenticate", `Bearer realm="connector admin"`)
		httpjson.Error(w, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer <admin token>")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	h.mux.ServeHTTP(w, r)
}

// changeFunc is one mutating route: do returns what it changed (for the log,
// never a secret) and the answer's status and body.
type changeFunc func(r *http.Request) (what []any, status int, body any, err error)

// change registers a mutating route: it runs do, applies the registry on
// success, logs and counts the outcome.
func (h *Handler) change(pattern, op string, do changeFunc) {
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		what, status, body, err := do(r)
		outcome, errStatus := change.Outcome(err)
		h.rec.Record(r.Context(), op, outcome, err, append([]any{"actor", actor(r), "remote", r.RemoteAddr}, what...)...)
		if err != nil {
			httpjson.Error(w, errStatus, change.Message(err))
			return
		}
		if body == nil {
			w.WriteHeader(status)
			return
		}
		httpjson.Write(w, status, body)
	})
}

// actor is who the request says is calling, bounded and printable.
func actor(r *http.Request) string {
	a := r.Header.Get(ActorHeader)
	return strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return -1
		}
		return c
	}, textsplit.Truncate(a, 64))
}

// decode reads the JSON body strictly into v.
func decode(r *http.Request, v any) error { return change.Decode(r.Body, v, true) }

func (h *Handler) createTenant(r *http.Request) ([]any, int, any, error) {
	var t registry.Tenant
	if err := decode(r, &t); err != nil {
		return nil, 0, nil, err
	}
	err := h.cfg.Registry.CreateTenant(r.Context(), t)
	return []any{"tenant", t.ID}, http.StatusCreated, map[string]string{"id": t.ID}, err
}

func (h *Handler) deleteTenant(r *http.Request) ([]any, int, any, error) {
	tenant := r.PathValue("tenant")
	return []any{"tenant", tenant}, http.StatusNoContent, nil, h.cfg.Registry.DeleteTenant(r.Context(), tenant)
}

func (h *Handler) setSession(r *http.Request) ([]any, int, any, error) {
	tenant := r.PathValue("tenant")
	var s registry.Session
	if err := decode(r, &s); err != nil {
		return nil, 0, nil, err
	}
	return []any{"tenant", tenant}, http.StatusNoContent, nil, h.cfg.Registry.SetSession(r.Context(), tenant, &s)
}

func (h *Handler) setMaxGateways(r *http.Request) ([]any, int, any, error) {
	tenant := r.PathValue("tenant")
	var req struct {
		MaxGateways *int `json:"max_gateways"`
	}
	if err := decode(r, &req); err != nil {
		return nil, 0, nil, err
	}
	if req.MaxGateways == nil {
		return nil, 0, nil, change.Invalid("max_gateways is required (0: the default)")
	}
	return []any{"tenant", tenant, "max_gateways", *req.MaxGateways}, http.StatusNoContent, nil,
		h.cfg.Registry.SetMaxGateways(r.Context(), tenant, *req.MaxGateways)
}

func (h *Handler) createGateway(r *http.Request) ([]any, int, any, error) {
	tenant := r.PathValue("tenant")
	var req struct {
		ID string `json:"id"`
	}
	if err := decode(r, &req); err != nil {
		return nil, 0, nil, err
	}
	secret, err := h.cfg.Registry.CreateGateway(r.Context(), tenant, req.ID)
	return []any{"tenant", tenant, "gateway_id", req.ID}, http.StatusCreated,
		map[string]string{"id": req.ID, "secret": secret}, err
}

func (h *Handler) rotate(r *http.Request) ([]any, int, any, error) {
	tenant, gateway := r.PathValue("tenant"), r.PathValue("gateway")
	var req struct {
		Grace string `json:"grace"`
	}
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			return nil, 0, nil, err
		}
	}
	grace := registry.DefaultGrace
	if req.Grace != "" {
		d, err := time.ParseDuration(req.Grace)
		if err != nil || d < 0 {
			return nil, 0, nil, change.Invalid("grace %q: want a duration such as 10m or 0s", req.Grace)
		}
		grace = d
		if d == 0 {
			grace = -1 // the previous secrets end now
		}
	}
	// Read before the rotation, on the clock of the expiry it stores, and
	// cut to the second: never later than that expiry.
	until := h.cfg.Registry.Clock().Now().Add(max(grace, 0)).UTC().Format(time.RFC3339)
	secret, err := h.cfg.Registry.Rotate(r.Context(), tenant, gateway, grace)
	return []any{"tenant", tenant, "gateway_id", gateway, "grace", max(grace, 0)}, http.StatusOK,
		map[string]string{"id": gateway, "secret": secret, "previous_valid_until": until}, err
}

func (h *Handler) deleteGateway(r *http.Request) ([]any, int, any, error) {
	tenant, gateway := r.PathValue("tenant"), r.PathValue("gateway")
	return []any{"tenant", tenant, "gateway_id", gateway}, http.StatusNoContent, nil,
		h.cfg.Registry.DeleteGateway(r.Context(), tenant, gateway)
}

// bind stores b unless its platform does not run here.
func (h *Handler) bind(ctx context.Context, b registry.Binding) error {
	if h.cfg.Platforms != nil && !slices.Contains(h.cfg.Platforms, b.Platform) {
		return change.Invalid("platform %q is not enabled on this connector (no %s section or credentials in its config), so the binding would route nothing; enable it first", b.Platform, b.Platform)
	}
	return h.cfg.Registry.Bind(ctx, b)
}

// unbind removes b, or an entry under its key that does not decode,
// whichever tenant that was (registry.Registry.RemoveCorrupt).
func (h *Handler) unbind(ctx context.Context, b registry.Binding) error {
	if removed, err := h.cfg.Registry.RemoveCorrupt(ctx, b); err != nil || removed {
		return err
	}
	return h.cfg.Registry.Unbind(ctx, b)
}

// binding is a bindings route: it runs do (the registry's Bind or Unbind)
// with the body's binding for the path's tenant.
func binding(do func(context.Context, registry.Binding) error) changeFunc {
	return func(r *http.Request) ([]any, int, any, error) {
		var req struct {
			Platform string `json:"platform"`
			Kind     string `json:"kind"`
			ID       string `json:"id"`
		}
		if err := decode(r, &req); err != nil {
			return nil, 0, nil, err
		}
		b := registry.Binding{Platform: req.Platform, Kind: req.Kind, ID: req.ID, Tenant: r.PathValue("tenant")}
		return []any{"tenant", b.Tenant, "platform", b.Platform, "kind", b.Kind, "chat_id", b.ID}, http.StatusNoContent, nil, do(r.Context(), b)
	}
}

// TenantView is one tenant in the listing.
type TenantView struct {
	ID string `json:"id"`
	// Source is "yaml" (declared; change it in the file) or "api".
	Source  string            `json:"source"`
	Session *registry.Session `json:"session,omitempty"`
	// MaxGateways bounds its gateways (registry.Tenant.MaxGateways, the
	// default filled in).
	MaxGateways int           `json:"max_gateways"`
	Gateways    []GatewayView `json:"gateways"`
	Bindings    []BindingView `json:"bindings"`
}

// GatewayView is a gateway without its secrets.
type GatewayView struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	// Origin is what made a stored gateway: admin, enroll or provision.
	Origin string `json:"origin,omitempty"`
	// Secrets counts the accepted secrets; SecretsExpire lists the expiry
	// of those that have one (RFC 3339).
	Secrets       int      `json:"secrets"`
	SecretsExpire []string `json:"secrets_expire,omitempty"`
	// WakeURL is the gateway's wake URL, if it registered one.
	WakeURL string `json:"wake_url,omitempty"`
}

// BindingView is one binding.
type BindingView struct {
	Platform string `json:"platform"`
	Kind     string `json:"kind"`
	ID       string `json:"id"`
	Source   string `json:"source"`
}

// listTenants answers {"tenants": [TenantView...], "corrupt": [...]}, the
// tenants sorted by id, and corrupt naming the stored entries that do not
// decode (registry.State.Corrupt, "namespace key"): no tenant's, each to
// fix or remove (a binding's by admin unbind of its key).
func (h *Handler) listTenants(w http.ResponseWriter, r *http.Request) {
	stored, err := h.cfg.Registry.Stored(r.Context())
	var wakes map[string]map[string]string
	if err == nil {
		wakes, err = h.cfg.Registry.Wakes(r.Context())
	}
	if err != nil {
		h.cfg.Log.Warn("admin list failed", "actor", actor(r), "remote", r.RemoteAddr, "err", err)
		httpjson.Error(w, http.StatusInternalServerError, change.Internal)
		return
	}
	views := map[string]*TenantView{}
	layer := func(s registry.State, source string) {
		for _, t := range s.Tenants {
			if views[t.ID] == nil {
				views[t.ID] = &TenantView{ID: t.ID, Source: source, Session: t.Session, MaxGateways: cmp.Or(t.MaxGateways, registry.DefaultMaxGateways),
					Gateways: []GatewayView{}, Bindings: []BindingView{}}
			}
		}
		for _, g := range s.Gateways {
			if v := views[g.Tenant]; v != nil && !slices.ContainsFunc(v.Gateways, func(x GatewayView) bool { return x.ID == g.ID }) {
				gv := GatewayView{ID: g.ID, Source: source, Origin: g.Origin, Secrets: len(g.Secrets), WakeURL: wakes[g.Tenant][g.ID]}
				for _, s := range g.Secrets {
					if !s.Expires.IsZero() {
						gv.SecretsExpire = append(gv.SecretsExpire, s.Expires.UTC().Format(time.RFC3339))
					}
				}
				v.Gateways = append(v.Gateways, gv)
			}
		}
		for _, b := range s.Bindings {
			if v := views[b.Tenant]; v != nil {
				v.Bindings = append(v.Bindings, BindingView{Platform: b.Platform, Kind: b.Kind, ID: b.ID, Source: source})
			}
		}
	}
	layer(h.cfg.Registry.Declared(), "yaml")
	layer(stored, "api")
	out := make([]TenantView, 0, len(views))
	for _, v := range views {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b TenantView) int { return strings.Compare(a.ID, b.ID) })
	httpjson.Write(w, http.StatusOK, map[string]any{"tenants": out, "corrupt": append([]string{}, stored.Corrupt...)})
}

// backupTimeout bounds one backup download.
const backupTimeout = 10 * time.Minute

// backup streams a consistent copy of the data file (application/octet-stream,
// with its Content-Length). A copy that fails once begun is cut short of
// that length, so the client cannot take it for whole. It is logged and
// counted like a change (op backup).
func (h *Handler) backup(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Backup == nil {
		h.cfg.Metrics.AdminChange("backup", "invalid")
		httpjson.Error(w, http.StatusNotImplemented, "backup: this store backend has no online backup (with redis, use Redis's own persistence)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), backupTimeout)
	defer cancel()
	// The listener's write timeout is for small answers; a copy may take longer.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(backupTimeout))
	begun := false
	n, err := h.cfg.Backup.Backup(ctx, func(size int64) (io.Writer, error) {
		w.Header().Set("Content-Type", "application/octet-stream")
		httpjson.NoStore(w.Header()) // the copy holds the tenants' secrets
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.WriteHeader(http.StatusOK)
		begun = true
		return w, nil
	})
	outcome := "ok"
	args := []any{"op", "backup", "actor", actor(r), "remote", r.RemoteAddr, "bytes", n}
	if err != nil {
		outcome = "error"
		args = append(args, "err", err)
	}
	h.cfg.Metrics.AdminChange("backup", outcome)
	h.cfg.Log.Info("admin backup", append(args, "outcome", outcome)...)
	switch {
	case err != nil && begun:
		panic(http.ErrAbortHandler) // the client sees the copy cut short
	case err != nil:
		httpjson.Error(w, http.StatusInternalServerError, change.Internal) // the log has the error
	}
}
