package admin

import (
	"net/http"
	"time"

	"connector/registry/change"
	"connector/wake"
)

// setWake serves PUT .../gateways/{gateway}/wake {"url"}: the gateway's
// wake URL; an empty url removes it.
func (h *Handler) setWake(r *http.Request) ([]any, int, any, error) {
	tenant, gateway := r.PathValue("tenant"), r.PathValue("gateway")
	var req struct {
		URL string `json:"url"`
	}
	if err := decode(r, &req); err != nil {
		return nil, 0, nil, err
	}
	return []any{"tenant", tenant, "gateway_id", gateway, "wake_host", wake.Host(req.URL)}, http.StatusNoContent, nil,
		h.cfg.Registry.SetWake(r.Context(), tenant, gateway, req.URL)
}

// mintEnrollToken serves POST .../{tenant}/enroll-tokens {"ttl"?} ->
// {"token", "expires"}: a single-use token for `hermes gateway enroll`,
// shown once.
func (h *Handler) mintEnrollToken(r *http.Request) ([]any, int, any, error) {
	tenant := r.PathValue("tenant")
	var req struct {
		TTL string `json:"ttl"`
	}
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			return nil, 0, nil, err
		}
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			return nil, 0, nil, change.Invalid("ttl %q: want a positive duration such as 1h", req.TTL)
		}
		ttl = d
	}
	token, expires, err := h.cfg.Registry.MintEnrollToken(r.Context(), tenant, ttl)
	return []any{"tenant", tenant, "expires", expires.UTC().Format(time.RFC3339)}, http.StatusCreated,
		map[string]string{"token": token, "expires": expires.UTC().Format(time.RFC3339)}, err
}
