package main

import (
	"log/slog"
	"net/http"
	"slices"

	"connector/contract"
	"connector/internal/httpjson"
	"connector/internal/textsplit"
	"connector/platform"
	"connector/registry"
	"connector/registry/change"
)

// This file serves POST /relay/policy, where the stock gateway declares its
// relevance policy at boot (Hermes contract §7.3): its require_mention,
// free_response_channels and allow_bots, projected platform-agnostically.
// The bearer is the gateway's upgrade token; the policy is stored in the
// registry for the gateway's tenant and platform (a full replace) and
// applied at once (platform.RelevanceTaker). Only 200 counts as accepted;
// the gateway boots on regardless. A gateway's declarations share the
// management plane's rate limit (change.Limiter): 429 with Retry-After
// beyond it.

// maxPolicyBodyBytes bounds a policy request body.
const maxPolicyBodyBytes = 256 << 10

// policyRequest is the gateway's relevance policy.
type policyRequest struct {
	Platform           string   `json:"platform"`
	RequireAddress     bool     `json:"requireAddress"`
	FreeResponseScopes []string `json:"freeResponseScopes"`
	AllowOtherBots     bool     `json:"allowOtherBots"`
}

// relayPolicyHandler serves POST /relay/policy.
func (c *connector) relayPolicyHandler() http.Handler {
	rec := change.Recorder{Apply: c.live.apply, Log: c.log, Line: "relevance policy declared", Metrics: gatewayChanges{c.live.metrics}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, gatewayID, key, err := c.relay.Authenticate(r.Header.Get("Authorization"))
		held := false
		if err == nil { // as on /manage/*: a gateway deleted, or made again under its id, on another instance is refused
			held, err = c.live.reg.GatewayHolds(r.Context(), tenant, gatewayID, key)
		}
		if err == nil && !held || err != nil && tenant == "" { // a store that failed is answered 500 below
			reason := contract.Refusal(err).Reason
			c.live.metrics.gateways.WithLabelValues("relay_policy", "unauthorized").Inc()
			c.refusals.LogFrom(c.log, slog.LevelInfo, r.RemoteAddr, "relevance policy refused", "remote", r.RemoteAddr, "reason", reason)
			w.Header().Set("WWW-Authenticate", `Bearer realm="connector relay"`)
			httpjson.Error(w, http.StatusUnauthorized, reason)
			return
		}
		var req policyRequest
		if err == nil {
			err = c.changes.Check(tenant, gatewayID)
		}
		if err == nil { // unknown fields ignored, as the other gateway routes do: the body grows additively
			err = change.Decode(http.MaxBytesReader(w, r.Body, maxPolicyBodyBytes), &req, false)
		}
		if err == nil && req.Platform != contract.PlatformRelay && !slices.ContainsFunc(c.platforms, func(p platform.Platform) bool { return p.Name() == req.Platform }) {
			err = change.Invalid("platform is not one this connector fronts")
		}
		if err == nil {
			err = c.live.reg.SetPolicy(r.Context(), registry.Policy{
				Tenant: tenant, Platform: req.Platform, Gateway: gatewayID,
				RequireAddress: req.RequireAddress, FreeResponseScopes: req.FreeResponseScopes, AllowOtherBots: req.AllowOtherBots,
			})
		}
		outcome, status := change.Outcome(err)
		if err == nil {
			c.changes.Spend(tenant, gatewayID)
		}
		rec.Record(r.Context(), "relay_policy", outcome, err, "tenant", tenant, "gateway_id", gatewayID, "remote", r.RemoteAddr,
			"platform", textsplit.Truncate(req.Platform, 64), "require_address", req.RequireAddress, "free_response_scopes", len(req.FreeResponseScopes),
			"allow_other_bots", req.AllowOtherBots)
		if err != nil {
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="connector relay"`)
			}
			change.SetRetryAfter(w.Header(), err)
			httpjson.Error(w, status, change.Message(err))
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]bool{"ok": true})
	})
}
