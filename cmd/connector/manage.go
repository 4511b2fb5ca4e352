package main

import (
	"context"
	"log/slog"

	"connector/idtoken"
	"connector/manage"
	"connector/platform"
	"connector/registry"
)

// This file wires the Hermes management plane (package manage): the
// /manage/* routes on the public listener, authenticated by the relay's
// side-channel bearer check or an identity token (the enroll section's
// verifier), and the linker that redeems the "/link <code>" DMs Discord
// and Telegram consume.

// newManagePlane builds the management plane of c. It reaches c's relay
// and registry applier, which build sets after the platforms are built
// with the plane as their linker, and before anything is served. identity
// (nil without enroll.public_key_file) also admits the Portal's and the
// hermes CLI's identity tokens.
func newManagePlane(cfg *Config, reg *registry.Registry, c *connector, identity *idtoken.Verifier, am *adminMetrics, log *slog.Logger) *manage.Handler {
	var names []string
	if cfg.Discord != nil {
		names = append(names, "discord")
	}
	if cfg.Telegram != nil {
		names = append(names, "telegram")
	}
	if cfg.Slack != nil {
		names = append(names, "slack")
	}
	if cfg.WhatsApp != nil {
		names = append(names, "whatsapp_cloud") // links and DM defaults; it takes no scope claims
	}
	return manage.New(manage.Config{
		Registry:  reg,
		Auth:      relayAuth{c},
		Identity:  identity,
		Apply:     func(ctx context.Context) error { return c.live.apply(ctx) },
		Platforms: names,
		Locator: func(name string) platform.ScopeLocator {
			for _, p := range c.platforms {
				if l, ok := p.(platform.ScopeLocator); ok && p.Name() == name {
					return l
				}
			}
			return nil
		},
		Log:      log,
		Metrics:  gatewayChanges{am},
		Limiter:  c.changes,
		Refusals: c.refusals,
	})
}

// relayAuth is c's relay as a manage.Authenticator.
type relayAuth struct{ c *connector }

func (a relayAuth) Authenticate(header string) (string, string, []byte, error) {
	return a.c.relay.Authenticate(header)
}
