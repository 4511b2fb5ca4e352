package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connector/registry"
	"connector/relay/relaytest"
)

// TestPolicyOfAGatewayDeletedOnAnotherInstanceIsRefused: after a gateway's
// deletion (or deprovision) on another instance, an instance that has not
// applied it yet (here: no apply after the deletion, so its relay still
// takes the gateway's token) refuses the gateway's POST /relay/policy 401,
// as /manage/* does, and stores nothing. Before, the revoked credential
// still set its tenant's relevance policy.
func TestPolicyOfAGatewayDeletedOnAnotherInstanceIsRefused(t *testing.T) {
	cfg, _, err := loadOrDefault(sources{dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := build(cfg, slog.New(slog.DiscardHandler), memStore(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.relay.Shutdown(context.Background())
		c.media.Close()
	})
	ctx := context.Background()
	if err := c.live.reg.CreateTenant(ctx, registry.Tenant{ID: "acme"}); err != nil {
		t.Fatal(err)
	}
	secret, err := c.live.reg.CreateGateway(ctx, "acme", "gw")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.live.apply(ctx); err != nil {
		t.Fatal(err)
	}
	declare := func(requireAddress bool) int {
		body := fmt.Sprintf(`{"platform":"relay","requireAddress":%t}`, requireAddress)
		req := httptest.NewRequest(http.MethodPost, "/relay/policy", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+relaytest.Token("gw", secret, time.Now()))
		w := httptest.NewRecorder()
		c.handler.ServeHTTP(w, req)
		return w.Code
	}
	if code := declare(false); code != http.StatusOK {
		t.Fatalf("the gateway's policy answered %d", code)
	}
	if err := c.live.reg.DeleteGateway(ctx, "acme", "gw"); err != nil {
		t.Fatal(err)
	}
	if code := declare(true); code != http.StatusUnauthorized {
		t.Fatalf("the deleted gateway's policy on a stale instance answered %d, want 401", code)
	}
	s, err := c.live.reg.Stored(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.Policies {
		if p.RequireAddress {
			t.Fatalf("the deleted gateway stored %+v", p)
		}
	}
}
