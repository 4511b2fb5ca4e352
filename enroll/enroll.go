// Package enroll serves the Hermes gateway's credential routes (contract
// §3.3, §6.1): POST /relay/enroll, where `hermes gateway enroll` trades a
// single-use enrollment token for a per-gateway secret, and POST
// /relay/provision, where a managed gateway mints its own secret at boot,
// once per fronted platform under one gateway id.
//
// Both authenticate the caller with an identity token (package idtoken: a
// JWT signed RS256 by the authority whose public key Config.PublicKeyFile
// holds); its tenant claim is the tenant, never the body. Without a key
// both routes answer 404. Enroll also needs the enrollment token, which
// must be the same tenant's (minted by the admin API). Provision needs the
// tenant to exist already (the operator onboards it), is idempotent (the
// same gateway id and identity token answer the same secret; another
// token gets a fresh one: registry.Provision), binds the body's routeKeys
// to the tenant on the body's platform and registers (or, when absent,
// clears) the wake URL. A tenant makes at most its max_gateways gateways,
// provisions that create or rotate a gateway are rate-limited per tenant
// (ProvisionBurst, then one per ProvisionEvery), and every enrollment and
// provision of a gateway id spends from its allowance of registry changes
// (change.Limiter, which its /manage/* and /relay/policy requests share).
//
// The bodies, answers and error statuses are in docs/contract.md
// ("Credentials, policy and wake"). Every request is counted and logged
// (who: tenant and token subject; what: gateway, platform, route-key
// count, wake host; never a secret or token); those refused before they
// authenticate within HandlerConfig.Refusals' allowance of their remote
// host.
package enroll

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"connector/idtoken"
	"connector/internal/clock"
	"connector/internal/httpjson"
	"connector/internal/keyrate"
	"connector/internal/loglimit"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/registry"
	"connector/registry/change"
	"connector/wake"
)

// Config is the enroll section of the connector's config file: how the
// identity tokens of /relay/enroll, /relay/provision and the management
// plane (/manage/*) are verified.
type Config struct {
	// PublicKeyFile is the PEM RSA public key (PUBLIC KEY, RSA PUBLIC KEY
	// or CERTIFICATE) of the authority that signs the gateways' identity
	// tokens (RS256 JWTs: the managed platform's, or your own OIDC
	// provider's). To rotate it, up to 4 keys, one PEM block each, each
	// named by a "kid: <id>" PEM header: a token whose kid names a key is
	// checked with that key, one without kid with each (docs/operations.md).
	// Unset, /relay/enroll and /relay/provision answer 404 and /manage/*
	// takes only the gateway's own token.
	PublicKeyFile string `yaml:"public_key_file"`
	// Issuer is the iss claim identity tokens must carry; unset, any.
	Issuer string `yaml:"issuer"`
	// Audience is the aud claim (or one of them) the identity tokens of
	// /relay/enroll and /relay/provision must carry; unset, any. A
	// /manage/* token's aud is agent:{gatewayId} instead; with Audience
	// unset such a token, minted for one gateway, is taken by
	// /relay/provision too, for any gateway id of its tenant: it can
	// create one, or rotate a provisioned one and be answered its new
	// secret, and so act as that gateway. Never another tenant's: the
	// tenant is the token's, and another tenant's gateway id is 409. Set
	// it to keep /manage/* tokens off these two routes.
	Audience string `yaml:"audience"`
	// TenantClaim names the identity token's claim that carries the tenant
	// id. Default tid.
	TenantClaim string `yaml:"tenant_claim"`
	// MaxTokenLifetime is how far ahead of the connector's clock an
	// identity token's exp may lie (60s of clock skew on top); a token
	// minted to last longer is refused (401). Default 24h.
	MaxTokenLifetime time.Duration `yaml:"max_token_lifetime"`
}

// HandlerConfig configures the Handler.
type HandlerConfig struct {
	// Verifier checks identity tokens; nil answers 404 (not configured).
	Verifier *idtoken.Verifier
	// Registry is where gateways, bindings and wake URLs go.
	Registry *registry.Registry
	// Platforms are the names of the platforms this connector fronts; a
	// provision for another (but "relay") is refused.
	Platforms []string
	// Apply applies the registry to this instance before the answer.
	Apply func(ctx context.Context) error
	// Log receives one line per request; nil discards.
	Log *slog.Logger
	// Metrics counts requests: op is relay_enroll or relay_provision,
	// outcome ok or the error class (unauthorized, forbidden, invalid,
	// not_configured, conflict, rate_limited, error); nil discards.
	Metrics change.Metrics
	// Clock is the clock of the provisioning rate limit (and of the
	// Handler's own Limiter); nil is clock.System.
	Clock clock.Clock
	// Limiter limits the enrollments and provisions of each gateway id
	// (change.Limiter, shared with /manage/* and POST /relay/policy); nil
	// is one of the Handler's own.
	Limiter *change.Limiter
	// Refusals bounds the log lines of requests refused before they
	// authenticate (401, 404) per remote host (loglimit.NewSources, shared
	// with the other routes of the public listener); nil is one of the
	// Handler's own.
	Refusals *loglimit.Limiter
}

// Handler serves the two routes.
type Handler struct {
	cfg HandlerConfig
	rec change.Recorder
	// changes limits, per tenant, the provisions that create or rotate a
	// gateway.
	changes *keyrate.Limiter
}

// The provisioning rate limit of one tenant on one instance: provisions
// that create or rotate a gateway (a repeat of the same boot's answer is
// free). The burst lets a whole fleet at the default max_gateways boot at
// once.
const (
	ProvisionBurst = registry.DefaultMaxGateways
	ProvisionEvery = time.Second
)

// maxLimitedTenants bounds the tenants whose provisioning rate is
// remembered (tenants are onboarded by the operator; this only bounds
// memory).
const maxLimitedTenants = 10_000

// New returns the Handler.
func New(cfg HandlerConfig) *Handler {
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	cfg.Metrics = cmp.Or[change.Metrics](cfg.Metrics, change.Nop{})
	if cfg.Apply == nil {
		cfg.Apply = func(context.Context) error { return nil }
	}
	cfg.Limiter = cmp.Or(cfg.Limiter, change.NewLimiter(cfg.Clock))
	cfg.Refusals = cmp.Or(cfg.Refusals, loglimit.NewSources(cmp.Or(cfg.Clock, clock.System)))
	return &Handler{cfg: cfg, rec: change.Recorder{Apply: cfg.Apply, Log: cfg.Log, Line: "relay credential request", Metrics: cfg.Metrics},
		changes: keyrate.New(keyrate.Config{Burst: ProvisionBurst, Every: ProvisionEvery, MaxKeys: maxLimitedTenants, Clock: cfg.Clock})}
}

// Routes maps the routes' patterns to their handlers, for the public mux.
func (h *Handler) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"POST /relay/enroll":    h.route("relay_enroll", h.enroll),
		"POST /relay/provision": h.route("relay_provision", h.provision),
	}
}

// MaxRouteKeys bounds the routeKeys of one provision.
const MaxRouteKeys = 1000

// Bounds of a request body, and of the caller-given ids logged (the
// identity token's sub too).
const (
	maxBodyBytes  = 64 << 10
	maxLogIDBytes = 128
)

// request is one authenticated request: its verified caller and the log
// attributes the route adds.
type request struct {
	r      *http.Request
	caller idtoken.Claims
	// minter is the digest of the caller's identity token
	// (registry.MinterOf).
	minter string
	what   []any
}

// route authenticates the caller, runs do, applies the registry on
// success, logs, counts and answers.
func (h *Handler) route(op string, do func(*request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := &request{r: r}
		var body any
		err := h.authenticate(req)
		if err == nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
			body, err = do(req)
		}
		answer := classify(err)
		outcome, status := change.Outcome(answer)
		if req.caller.Tenant == "" { // refused before it authenticated: anyone can send these
			h.cfg.Metrics.AdminChange(op, outcome)
			h.cfg.Refusals.LogFrom(h.cfg.Log, slog.LevelInfo, r.RemoteAddr, "relay credential request", "op", op, "outcome", outcome, "remote", r.RemoteAddr, "err", err)
		} else {
			h.rec.Record(r.Context(), op, outcome, err,
				append([]any{"tenant", req.caller.Tenant, "subject", textsplit.Truncate(req.caller.Subject, maxLogIDBytes), "remote", r.RemoteAddr}, req.what...)...)
		}
		if err != nil {
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="connector relay"`)
			}
			change.SetRetryAfter(w.Header(), answer)
			httpjson.Error(w, status, change.Message(answer))
			return
		}
		httpjson.Write(w, http.StatusOK, body)
	})
}

// authenticate verifies the bearer identity token into req.caller.
func (h *Handler) authenticate(req *request) error {
	if h.cfg.Verifier == nil {
		return change.Refuse(http.StatusNotFound, "not_configured", "enrollment is not configured on this connector (enroll.public_key_file)")
	}
	token, ok := strings.CutPrefix(req.r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return change.Refuse(http.StatusUnauthorized, "unauthorized", "caller identity: send Authorization: Bearer <identity token>")
	}
	token = strings.TrimSpace(token)
	claims, err := h.cfg.Verifier.Verify(token)
	if err != nil {
		return change.Refuse(http.StatusUnauthorized, "unauthorized", "caller identity: %v", err)
	}
	req.caller, req.minter = claims, registry.MinterOf(token)
	return nil
}

// classify is the answer to err where this API's contract differs from
// change.Outcome's: a bad enrollment token and a tenant not onboarded are
// forbidden, a conflict of any kind is one outcome.
func classify(err error) error {
	switch {
	case errors.Is(err, registry.ErrEnrollToken):
		return change.Refuse(http.StatusForbidden, "forbidden", "%v", err)
	case errors.Is(err, registry.ErrNotFound):
		return change.Refuse(http.StatusForbidden, "forbidden", "tenant is not onboarded on this connector (ask its operator)")
	case errors.Is(err, registry.ErrConflict), errors.Is(err, registry.ErrDeclared), errors.Is(err, registry.ErrExists):
		return change.Refuse(http.StatusConflict, "conflict", "%v", err)
	}
	return err
}

// enrollRequest is what `hermes gateway enroll` posts.
type enrollRequest struct {
	EnrollmentToken string `json:"enrollmentToken"`
	GatewayID       string `json:"gatewayId"`
	// WakeURL is optional; the stock CLI forwards it at provision instead.
	WakeURL string `json:"wakeUrl"`
}

// credentials is the success answer.
type credentials struct {
	Secret string `json:"secret"`
	// DeliveryKey is empty: inbound rides the authenticated socket, unsigned.
	DeliveryKey string   `json:"deliveryKey"`
	Tenant      string   `json:"tenant"`
	GatewayID   string   `json:"gatewayId"`
	RouteKeys   []string `json:"routeKeys,omitempty"`
}

func (h *Handler) enroll(req *request) (any, error) {
	var body enrollRequest
	if err := change.Decode(req.r.Body, &body, false); err != nil { // unknown fields ignored: the body grows additively
		return nil, err
	}
	req.what = []any{"gateway_id", textsplit.Truncate(body.GatewayID, maxLogIDBytes), "wake_host", wake.Host(body.WakeURL)}
	if body.EnrollmentToken == "" {
		return nil, change.Invalid("enrollmentToken is required")
	}
	ctx, tenant := req.r.Context(), req.caller.Tenant
	if err := h.cfg.Limiter.Check(tenant, body.GatewayID); err != nil {
		return nil, err
	}
	defer h.cfg.Limiter.Spend(tenant, body.GatewayID) // refused too: it read the registry
	secret, err := h.cfg.Registry.Enroll(ctx, tenant, body.EnrollmentToken, body.GatewayID, body.WakeURL)
	if err != nil {
		return nil, err
	}
	return credentials{Secret: secret, Tenant: tenant, GatewayID: body.GatewayID}, nil
}

// provisionRequest is what the stock gateway's self-provision posts, once
// per fronted platform.
type provisionRequest struct {
	GatewayID string   `json:"gatewayId"`
	Platform  string   `json:"platform"`
	BotID     string   `json:"botId"`
	RouteKeys []string `json:"routeKeys"`
	// InstanceID is logged: here each gateway id is one instance.
	InstanceID string `json:"instanceId"`
	WakeURL    string `json:"wakeUrl"`
	// GatewayEndpoint, the retired inbound URL, is ignored.
}

// bindingKinds is the binding kind a route key names on each platform.
var bindingKinds = map[string]string{
	"discord":        platform.BindGuild,
	"telegram":       platform.BindChat,
	"slack":          platform.BindTeam,
	"whatsapp_cloud": platform.BindPhoneNumber,
	"nexscope":       platform.BindRoom,
}

func (h *Handler) provision(req *request) (any, error) {
	var body provisionRequest
	if err := change.Decode(req.r.Body, &body, false); err != nil { // unknown fields ignored: the body grows additively
		return nil, err
	}
	req.what = []any{"gateway_id", textsplit.Truncate(body.GatewayID, maxLogIDBytes), "platform", textsplit.Truncate(body.Platform, maxLogIDBytes),
		"bot_id", textsplit.Truncate(body.BotID, maxLogIDBytes),
		"instance_id", textsplit.Truncate(body.InstanceID, maxLogIDBytes), "route_keys", len(body.RouteKeys), "wake_host", wake.Host(body.WakeURL)}
	if body.Platform != "relay" && !slices.Contains(h.cfg.Platforms, body.Platform) {
		return nil, change.Invalid("platform %q is not one this connector fronts", textsplit.Truncate(body.Platform, 64))
	}
	if body.WakeURL != "" {
		if _, err := wake.ValidateURL(body.WakeURL); err != nil {
			return nil, change.Invalid("wakeUrl: %v", err)
		}
	}
	tenant := req.caller.Tenant
	bindings, err := routeBindings(tenant, body.Platform, body.RouteKeys)
	if err != nil {
		return nil, err
	}
	// Even a repeat stores the wake URL and route keys again, which every
	// instance applies: a gateway credential's changes are limited.
	if err := h.cfg.Limiter.Check(tenant, body.GatewayID); err != nil {
		return nil, err
	}
	ctx := req.r.Context()
	secret, outcome, err := h.cfg.Registry.Provision(ctx, tenant, body.GatewayID, req.minter, func() error {
		if ok, retry := h.changes.Allow(tenant); !ok { // spends one of the tenant's credential changes
			return change.TooFast("this tenant is creating or rotating gateways", ProvisionBurst, ProvisionEvery, retry)
		}
		return nil
	})
	if errors.Is(err, registry.ErrConflict) { // another tenant's id: it read the registry in the tenant's turn
		h.cfg.Limiter.Spend(tenant, body.GatewayID)
	}
	if err != nil {
		return nil, err
	}
	// From here it stores route keys and the wake URL, which every
	// instance applies, though a later one fail.
	defer h.cfg.Limiter.Spend(tenant, body.GatewayID)
	req.what = append(req.what, "provision", outcome)
	if err := h.cfg.Registry.BindOwn(ctx, bindings...); err != nil {
		return nil, fmt.Errorf("routeKeys: %w", err)
	}
	keys := make([]string, 0, len(bindings))
	for _, b := range bindings {
		keys = append(keys, b.ID)
	}
	if err := h.cfg.Registry.SetWake(ctx, tenant, body.GatewayID, body.WakeURL); errors.Is(err, registry.ErrNotFound) {
		// Provision wrote the gateway: another instance deleted it, or
		// the tenant, meanwhile.
		return nil, change.Refuse(http.StatusConflict, "conflict", "the gateway was deleted or taken by another tenant while it was provisioned; provision again")
	} else if err != nil {
		return nil, err
	}
	return credentials{Secret: secret, Tenant: tenant, GatewayID: body.GatewayID, RouteKeys: keys}, nil
}

// routeBindings checks the route keys of a provision and returns the
// bindings they make, as the platform spells their ids.
func routeBindings(tenant, platformName string, keys []string) ([]registry.Binding, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if len(keys) > MaxRouteKeys {
		return nil, change.Invalid("more than %d routeKeys", MaxRouteKeys)
	}
	kind, ok := bindingKinds[platformName]
	if !ok {
		return nil, change.Invalid("routeKeys need the platform they route (discord, telegram, slack, whatsapp_cloud or nexscope), not %q", platformName)
	}
	out := make([]registry.Binding, 0, len(keys))
	for _, k := range keys {
		b, err := registry.CanonicalBinding(registry.Binding{Platform: platformName, Kind: kind, ID: k, Tenant: tenant})
		if err != nil {
			return nil, change.Invalid("routeKeys: %v", err)
		}
		if !slices.ContainsFunc(out, func(x registry.Binding) bool { return x.ID == b.ID }) {
			out = append(out, b)
		}
	}
	return out, nil
}
