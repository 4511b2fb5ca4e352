// Package manage serves the Hermes management plane (contract §3 "The
// account-link (DM) path", §7.2): routes on the connector's public
// listener where a gateway, or the Portal or hermes CLI acting for one,
// manages who reaches its tenant. A caller authenticates with either of
// the contract's two bearers: the gateway's own upgrade token (the relay's
// one side-channel bearer check, Config.Auth), or, when Config.Identity is
// set, an identity token (package idtoken) whose tenant claim names the
// tenant and whose aud "agent:{gatewayId}" names a gateway of that tenant.
// The tenant and gateway always come from the token, never the body. The
// routes (Routes), their bodies, answers and error statuses are in
// docs/contract.md ("Management plane"). A change is stored in the
// registry and applied to this instance before the answer; other
// instances apply it on the registry's change notification. Every change
// is logged (gateway, tenant, what; never a code or secret) and counted.
// The Handler is also the platforms' platform.Linker: it redeems the
// "/link <code>" DMs they consume.
package manage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"connector/contract"
	"connector/idtoken"
	"connector/internal/clock"
	"connector/internal/httpjson"
	"connector/internal/loglimit"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/registry"
	"connector/registry/change"
)

// Authenticator checks a gateway's side-channel bearer, the whole
// Authorization header (relay.Server), and returns the key of the secret
// it was signed with (registry.Registry.GatewayHolds). Identity tokens are not its job:
// the Handler routes a bearer shaped as a JWT to Config.Identity.
type Authenticator interface {
	Authenticate(header string) (tenant, gatewayID string, key []byte, err error)
}

// Config configures the Handler.
type Config struct {
	// Registry is where changes go.
	Registry *registry.Registry
	// Auth verifies the gateway's bearer.
	Auth Authenticator
	// Identity, when set, also admits identity tokens (the Portal's or the
	// hermes CLI's) checked by Verifier.VerifyInstance: a bearer of three
	// dot-separated parts goes to it, any other to Auth. Nil: every bearer
	// goes to Auth, which refuses a JWT as any bad bearer.
	Identity *idtoken.Verifier
	// Apply applies the registry to this instance.
	Apply func(ctx context.Context) error
	// Platforms are the platforms that route by author (discord,
	// telegram, whatsapp_cloud); requests naming another are refused. A
	// platform without scope claims (whatsapp_cloud) refuses a scope or
	// principal request as the registry's invalid binding (400).
	Platforms []string
	// Locator returns the named platform's platform.ScopeLocator, nil
	// when it has none (or Locator is nil): a claim on such a platform is
	// checked against the platform's view of the chat first.
	Locator func(platformName string) platform.ScopeLocator
	// Log receives one line per change; nil discards.
	Log *slog.Logger
	// Metrics counts changes, op naming the route (manage_link, …,
	// link_redeem); nil discards.
	Metrics change.Metrics
	// Limiter limits each gateway's requests whose body parses, refused
	// or not, and an identity token's naming a gateway not its tenant's
	// (change.Limiter, shared with POST /relay/policy, which spends only
	// its changes); nil is one of the Handler's own.
	Limiter *change.Limiter
	// Refusals bounds the log lines of refused bearers per remote host
	// (loglimit.NewSources, shared with the other routes of the public
	// listener); nil is one of the Handler's own.
	Refusals *loglimit.Limiter
}

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 64 << 10

// Handler serves the management routes and redeems link codes.
type Handler struct {
	cfg Config
	rec change.Recorder
}

var _ platform.Linker = (*Handler)(nil)

// New returns the handler.
func New(cfg Config) *Handler {
	cfg.Log = cmp.Or(cfg.Log, slog.New(slog.DiscardHandler))
	cfg.Metrics = cmp.Or[change.Metrics](cfg.Metrics, change.Nop{})
	cfg.Limiter = cmp.Or(cfg.Limiter, change.NewLimiter(nil))
	cfg.Refusals = cmp.Or(cfg.Refusals, loglimit.NewSources(clock.System))
	return &Handler{cfg: cfg, rec: change.Recorder{Apply: cfg.Apply, Log: cfg.Log, Line: "manage change", Metrics: cfg.Metrics}}
}

// Routes maps each route's ServeMux pattern to its handler.
func (h *Handler) Routes() map[string]http.Handler {
	return map[string]http.Handler{
		"POST /manage/link":          h.change("manage_link", h.link),
		"POST /manage/scope":         h.change("manage_scope", h.scope),
		"POST /manage/scope/release": h.change("manage_scope_release", h.release),
		"POST /manage/principal":     h.change("manage_principal", h.principal),
		"POST /manage/dm-default":    h.change("manage_dm_default", h.dmDefault),
		"POST /manage/deprovision":   h.change("manage_deprovision", h.deprovision),
	}
}

// caller is the authenticated gateway: via says which bearer ("gateway"
// or "identity"); subject is an identity token's sub (for the log).
type caller struct {
	tenant, gateway, via, subject string
	key                           []byte // the gateway token's (Authenticator), nil for an identity token
}

// authError is a refused bearer; reason is the 401 answer's error.
type authError struct {
	reason string
	err    error
}

func (e *authError) Error() string { return e.reason + ": " + e.err.Error() }

// authenticate checks header's bearer: an identity token when
// Config.Identity is set and the bearer is shaped as a JWT (the gateway's
// upgrade token has no dot), else the gateway's token. A refused bearer,
// or a gateway token whose gateway the registry no longer gives its
// tenant, is an *authError; an identity token's gateway that is not its
// tenant's is registry.ErrNotFound.
func (h *Handler) authenticate(ctx context.Context, header string) (caller, error) {
	token, ok := strings.CutPrefix(header, "Bearer ")
	if token = strings.TrimSpace(token); ok && h.cfg.Identity != nil && strings.Count(token, ".") == 2 {
		claims, gateway, err := h.cfg.Identity.VerifyInstance(token)
		if err != nil {
			return caller{via: "identity"}, &authError{contract.ReasonUnauthorized, err}
		}
		c := caller{tenant: claims.Tenant, gateway: gateway, via: "identity", subject: claims.Subject}
		if ok, err := h.cfg.Registry.GatewayOf(ctx, c.tenant, c.gateway); err != nil || !ok {
			return c, cmp.Or(err, fmt.Errorf("%w: tenant %q has no gateway %q", registry.ErrNotFound, c.tenant, c.gateway))
		}
		return c, nil
	}
	tenant, gateway, key, err := h.cfg.Auth.Authenticate(header)
	if err != nil {
		return caller{via: "gateway"}, &authError{contract.Refusal(err).Reason, err}
	}
	// Auth knows the gateways this instance last applied; one deleted on
	// another instance since (a deprovision), or made again under its id
	// for its tenant made again, is refused as its next upgrade will be,
	// so nothing it writes outlives it or reaches the new tenant.
	c := caller{tenant: tenant, gateway: gateway, via: "gateway", key: key}
	if ok, err := h.cfg.Registry.GatewayHolds(ctx, tenant, gateway, key); err != nil || !ok {
		return c, cmp.Or(err, error(&authError{contract.ReasonUnauthorized, fmt.Errorf("gateway %q is no longer tenant %q's", gateway, tenant)}))
	}
	return c, nil
}

// changeFunc runs one route for the caller with its parsed body: it
// returns what it changed (for the log) and the answer's extra fields.
type changeFunc func(ctx context.Context, c caller, req *Request) (what []any, answer map[string]any, err error)

// change wraps a route: bearer, body, run, apply, log, count, answer.
func (h *Handler) change(op string, do changeFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := h.authenticate(r.Context(), r.Header.Get("Authorization"))
		var refused *authError
		if errors.As(err, &refused) {
			h.cfg.Metrics.AdminChange(op, "unauthorized")
			args := []any{"op", op, "remote", r.RemoteAddr, "auth", c.via, "reason", refused.reason}
			if c.via == "identity" { // idtoken's errors never echo the token
				args = append(args, "err", refused.err)
			}
			h.cfg.Refusals.LogFrom(h.cfg.Log, slog.LevelInfo, r.RemoteAddr, "manage request refused", args...)
			w.Header().Set("WWW-Authenticate", `Bearer realm="connector relay"`)
			httpjson.Error(w, http.StatusUnauthorized, refused.reason)
			return
		}
		var what []any
		var answer map[string]any
		if err == nil || c.tenant != "" && errors.Is(err, registry.ErrNotFound) {
			// An identity token naming a gateway not its tenant's read the
			// registry too: it spends, refused, within the same allowance.
			if lerr := h.cfg.Limiter.Check(c.tenant, c.gateway); lerr != nil {
				err = lerr
			} else if err != nil {
				h.cfg.Limiter.Spend(c.tenant, c.gateway)
			}
		}
		if err == nil {
			var body []byte
			if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes)); err != nil {
				err = change.Invalid("body over %d bytes or unreadable", MaxBodyBytes)
			} else {
				var req *Request
				if req, err = ParseRequest(body); err == nil {
					what, answer, err = do(registry.ForGateway(r.Context(), c.gateway, c.key), c, req)
					// Refused too: a refusal read the registry (a claim reads
					// every binding) or asked the platform (a claim's chat).
					h.cfg.Limiter.Spend(c.tenant, c.gateway)
				}
			}
		}
		outcome, status := change.Outcome(err)
		args := []any{"tenant", c.tenant, "gateway_id", c.gateway, "auth", c.via}
		if c.subject != "" {
			args = append(args, "subject", textsplit.Truncate(c.subject, maxField)) // a signed claim, but up to 8 KiB
		}
		h.rec.Record(r.Context(), op, outcome, err, append(append(args, "remote", r.RemoteAddr), what...)...)
		if err != nil {
			change.SetRetryAfter(w.Header(), err)
			httpjson.Error(w, status, change.Message(err))
			return
		}
		if answer == nil {
			answer = map[string]any{}
		}
		answer["ok"] = true
		httpjson.Write(w, http.StatusOK, answer)
	})
}

// platformOf checks that name is an author-routing platform.
func (h *Handler) platformOf(name string, required bool) error {
	if name == "" && !required {
		return nil
	}
	if !slices.Contains(h.cfg.Platforms, name) {
		return change.Invalid("platform %q: want one of %v", name, h.cfg.Platforms)
	}
	return nil
}

func (h *Handler) link(ctx context.Context, c caller, req *Request) ([]any, map[string]any, error) {
	if err := h.platformOf(req.Platform, false); err != nil {
		return nil, nil, err
	}
	ttl := cmp.Or(time.Duration(req.TTLSeconds)*time.Second, registry.DefaultLinkTTL)
	code, expires, err := h.cfg.Registry.IssueLinkCode(ctx, c.tenant, c.gateway, req.Platform, ttl)
	what := []any{"platform", req.Platform}
	if err != nil {
		return what, nil, err
	}
	return append(what, "expires", expires.UTC().Format(time.RFC3339)), map[string]any{
		"code": code, "command": "/link " + code,
		"expiresAt": expires.UTC().Format(time.RFC3339), "ttlSeconds": int(ttl.Seconds()),
	}, nil
}

func (h *Handler) scopeBinding(c caller, req *Request) (registry.Binding, []any, error) {
	if err := h.platformOf(req.Platform, true); err != nil {
		return registry.Binding{}, nil, err
	}
	if req.ChannelID == "" {
		return registry.Binding{}, nil, change.Invalid("channelId is required")
	}
	b := registry.Binding{Platform: req.Platform, Kind: platform.BindScope, ID: req.ChannelID, Tenant: c.tenant}
	return b, []any{"platform", req.Platform, "chat_id", req.ChannelID, "guild_id", req.GuildID}, nil
}

// scope claims the chat for the caller's tenant: placed by the platform
// (locate), then judged by the ownership order and stored atomically
// (registry.Claim). Another tenant's chat, by configuration, admin binding
// or claim, gets one answer: 409.
func (h *Handler) scope(ctx context.Context, c caller, req *Request) ([]any, map[string]any, error) {
	_, what, err := h.scopeBinding(c, req)
	if err != nil {
		return what, nil, err
	}
	chat, err := h.locate(ctx, c, req)
	if err != nil {
		return what, nil, err
	}
	if err := h.cfg.Registry.Claim(ctx, c.tenant, req.Platform, chat); err != nil {
		if errors.Is(err, registry.ErrConflict) {
			err = fmt.Errorf("%w: the chat belongs to another tenant (bound to it, or claimed by it)", err)
		}
		return what, nil, err
	}
	return what, map[string]any{"platform": req.Platform, "channelId": req.ChannelID}, nil
}

// locate places the claimed chat (platform.ScopeLocator) and applies the
// visibility floor (Hermes contract §7.1): the bot must see the chat, in
// the space the claim names (guildId: a Discord guild; none where chats
// have no space, as on Telegram), and it must not be a DM. A chat the bot
// cannot see, a DM and a chat of another space get the same answer, so a
// claim tells nothing about chats outside the named guild. A platform
// without a locator takes the chat id as it is.
func (h *Handler) locate(ctx context.Context, c caller, req *Request) (platform.Chat, error) {
	var loc platform.ScopeLocator
	if h.cfg.Locator != nil {
		loc = h.cfg.Locator(req.Platform)
	}
	if loc == nil {
		return platform.Chat{ID: req.ChannelID}, nil
	}
	chat, err := loc.LocateChat(platform.WithTenant(ctx, c.tenant), req.ChannelID)
	switch {
	case errors.Is(err, platform.ErrUnknownChat), err == nil && (chat.DM || chat.Space != req.GuildID):
		return platform.Chat{}, change.Refuse(http.StatusForbidden, "forbidden", "forbidden: the bot sees no channel %s in guild %q", req.ChannelID, req.GuildID)
	case err != nil:
		return platform.Chat{}, err
	}
	return chat, nil
}

func (h *Handler) release(ctx context.Context, c caller, req *Request) ([]any, map[string]any, error) {
	b, what, err := h.scopeBinding(c, req)
	if err != nil {
		return what, nil, err
	}
	if err := h.cfg.Registry.Unbind(ctx, b); err != nil {
		if errors.Is(err, registry.ErrNotFound) {
			err = fmt.Errorf("%w: this tenant holds no such scope", err)
		}
		return what, nil, err
	}
	return what, map[string]any{"platform": req.Platform, "channelId": req.ChannelID}, nil
}

func (h *Handler) principal(ctx context.Context, c caller, req *Request) ([]any, map[string]any, error) {
	if err := h.platformOf(req.Platform, true); err != nil {
		return nil, nil, err
	}
	what := []any{"platform", req.Platform, "principal", req.Principal, "allow", len(req.Allow)}
	err := h.cfg.Registry.SetPrincipal(ctx, c.tenant, req.Platform, req.Principal, req.Allow)
	return what, map[string]any{"platform": req.Platform, "principal": req.Principal}, err
}

func (h *Handler) dmDefault(ctx context.Context, c caller, req *Request) ([]any, map[string]any, error) {
	if err := h.platformOf(req.Platform, true); err != nil {
		return nil, nil, err
	}
	if req.UserID == "" {
		return nil, nil, change.Invalid("userId is required")
	}
	what := []any{"platform", req.Platform, "user_id", req.UserID}
	return what, map[string]any{"platform": req.Platform, "userId": req.UserID},
		h.cfg.Registry.SetDMDefault(ctx, c.tenant, req.Platform, req.UserID)
}

// deprovision revokes the caller's gateway (the upgrade token's, or the
// one an identity token's aud names) the way the admin API's DELETE
// does (its sockets close 4401 when the change is applied, its next
// upgrade is refused 4401) and drops what the management plane made for
// its tenant: links, scope claims, DM defaults, principal, link codes.
// It drops them first, once the gateway is found its tenant's and not
// declared: a deprovision that fails keeps the gateway, whose credentials
// a retry needs. Once the gateway is gone it drops them again: what the
// gateway's own calls wrote between the two steps goes too, and a call
// of the gateway's that writes after that takes its write back (its
// changes run on registry.ForGateway): 404.
func (h *Handler) deprovision(ctx context.Context, c caller, _ *Request) ([]any, map[string]any, error) {
	if slices.ContainsFunc(h.cfg.Registry.Declared().Gateways, func(g registry.Gateway) bool { return g.ID == c.gateway }) {
		return nil, nil, fmt.Errorf("%w (this gateway)", registry.ErrDeclared)
	}
	if ok, err := h.cfg.Registry.GatewayOf(ctx, c.tenant, c.gateway); err != nil || !ok {
		return nil, nil, cmp.Or(err, registry.ErrNotFound)
	}
	n, err := h.cfg.Registry.DropManaged(ctx, c.tenant)
	if err == nil {
		err = h.cfg.Registry.DeleteGateway(ctx, c.tenant, c.gateway)
	}
	if err == nil {
		var more int
		more, err = h.cfg.Registry.DropManaged(ctx, c.tenant)
		n += more
	}
	return []any{"dropped", n}, map[string]any{"dropped": n}, err
}

// Link implements platform.Linker: it redeems code for (platformName,
// userID), logging and counting the outcome (never the code).
func (h *Handler) Link(ctx context.Context, platformName, userID, code string) (string, time.Time, error) {
	tenant, created, err := h.cfg.Registry.RedeemLinkCode(ctx, platformName, userID, code)
	if errors.Is(err, registry.ErrNotFound) {
		err = platform.ErrLinkRefused
	}
	outcome, logged := "ok", err
	switch {
	case errors.Is(err, platform.ErrLinkRefused):
		outcome, logged = "refused", nil // an outcome, not an error to log
	case err != nil:
		outcome = "error"
	}
	h.rec.Record(ctx, "link_redeem", outcome, logged, "platform", platformName, "user_id", userID, "tenant", tenant)
	return tenant, created, err
}
