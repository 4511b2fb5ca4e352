package main

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"connector/enroll"
	"connector/idtoken"
	"connector/registry"
	"connector/store"
	"connector/wake"
)

// This file wires the identity tokens of the Hermes gateway's credential
// routes (POST /relay/enroll, POST /relay/provision; package enroll, which
// build mounts) and the wake poke (package wake) into the connector.

// identityVerifier returns the verifier of the enroll section's identity
// tokens, nil when enroll.public_key_file is unset. build makes one and
// hands it to both its users: the credential routes and the management
// plane. Without enroll.audience it warns on log: a /manage/* token then
// provisions any gateway of its tenant (enroll.Config.Audience).
func identityVerifier(ec enroll.Config, log *slog.Logger) (*idtoken.Verifier, error) {
	if ec.PublicKeyFile == "" {
		return nil, nil
	}
	if ec.Audience == "" {
		log.Warn("enroll.audience is unset: an identity token of any aud is taken by /relay/enroll and /relay/provision, so a /manage/* token minted for one gateway provisions any gateway of its tenant and is answered its secret; set enroll.audience to the aud your authority puts in provisioning tokens")
	}
	keys, err := idtoken.LoadPublicKeys(ec.PublicKeyFile)
	if err != nil {
		return nil, fmt.Errorf("config: enroll.public_key_file: %w", err)
	}
	v, err := idtoken.New(idtoken.Config{Keys: keys, Issuer: ec.Issuer, Audience: ec.Audience, TenantClaim: ec.TenantClaim, MaxLifetime: ec.MaxTokenLifetime})
	if err != nil {
		return nil, fmt.Errorf("config: enroll.public_key_file: %w", err)
	}
	return v, nil
}

// newPoker returns the wake poker of a connector on st: its cooldown is
// relay.wake_cooldown and its budget per host relay.wake_per_host, held
// across the instances sharing st.
func newPoker(cfg *Config, reg *registry.Registry, st store.Store, log *slog.Logger, m *metrics) (*wake.Poker, error) {
	pokes := counterVec("connector_wake_pokes_total",
		"Wake pokes sent to gateways' wake URLs, by result: ok, http_error (4xx/5xx), unreachable, store_error (the registry or the cooldown claim could not be read), host_limit (not sent: the tenant's wake URLs on that host had relay.wake_per_host pokes this cooldown).", "result")
	m.register(pokes)
	for _, r := range []string{wake.ResultOK, wake.ResultHTTPError, wake.ResultUnreachable, wake.ResultStoreError, wake.ResultHostLimit} {
		pokes.WithLabelValues(r)
	}
	return wake.New(wake.Config{
		Targets: reg.WakeTargets, Claims: st.Claims(), Cooldown: cfg.Relay.WakeCooldown, PerHost: cfg.Relay.WakePerHost,
		Log: log, Metrics: wakeMetrics{pokes},
	})
}

// wakeMetrics implements wake.Metrics.
type wakeMetrics struct{ pokes *prometheus.CounterVec }

// WakePoke implements wake.Metrics.
func (m wakeMetrics) WakePoke(result string) { m.pokes.WithLabelValues(result).Inc() }
