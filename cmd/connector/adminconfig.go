package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"os"
	"time"
)

// AdminConfig is the admin API's listener (package admin).
type AdminConfig struct {
	// Listen is the admin listener's address; the admin API is off unless
	// it is set. Keep it on loopback or a private network. Default off.
	Listen string `yaml:"listen"`
	// Token is the bearer token every admin request must carry; required
	// when listen is set. At least 16 characters and 64 bits by the
	// estimate of docs/security.md (a random one: openssl rand -hex 32).
	// Prefer the environment variable CONNECTOR_ADMIN_TOKEN to writing it
	// in the file.
	Token string `yaml:"token"`
}

// minSecretBytes and minSecretBits are the least length and strength
// (tokenBits) of a secret the operator chooses and anyone who reaches a
// listener may try: the admin token, the Telegram webhook secret and the
// nexscope token. Nothing counts the tries (a wrong one costs one request),
// so a short one is found by trying them all: a webhook secret of one
// character in 64 requests, which then forges any user's updates in any
// tenant's chat.
const (
	minSecretBytes = 16
	minSecretBits  = 64
)

// tokenBits estimates a token's strength in bits from the token alone: its
// length times the Shannon entropy of its characters' frequencies, so
// repeating few characters scores low whatever the length (16 identical
// characters: 0; a repeated pair: 1 bit a character). It cannot see that a
// token is a word or a sequence; it only refuses what is plainly weak.
func tokenBits(token string) float64 {
	counts := make(map[rune]int)
	n := 0
	for _, r := range token {
		counts[r]++
		n++
	}
	var perChar float64
	for _, c := range counts {
		p := float64(c) / float64(n)
		perChar -= p * math.Log2(p)
	}
	return perChar * float64(n)
}

// validate checks the admin section.
func (a *AdminConfig) validate() error {
	if a.Listen == "" {
		return nil
	}
	if err := validListen("admin.listen", a.Listen); err != nil {
		return err
	}
	if a.Token == "" {
		return errors.New("config: admin.token: required when admin.listen is set (or set CONNECTOR_ADMIN_TOKEN)")
	}
	return strongSecret("admin.token", a.Token)
}

// strongSecret refuses secret, the value of key, when it is shorter than
// minSecretBytes or weaker than minSecretBits; the error does not show it.
func strongSecret(key, secret string) error {
	if len(secret) < minSecretBytes {
		return fmt.Errorf("config: %s: shorter than %d characters", key, minSecretBytes)
	}
	if bits := tokenBits(secret); bits < minSecretBits {
		return fmt.Errorf("config: %s: too weak: about %.0f bits by its length and how often each character repeats, at least %d needed; use a random token (openssl rand -hex 32)", key, bits, minSecretBits)
	}
	return nil
}

// serveAdmin starts the admin listener when admin.listen is set and
// returns its address ("" when off) and how to stop it.
func (c *connector) serveAdmin() (addr string, stop func(), err error) {
	if c.admin == nil {
		return "", func() {}, nil
	}
	ln, err := bind("admin.listen", c.cfg.Admin.Listen)
	if err != nil {
		return "", nil, err
	}
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err != nil || !ap.Addr().IsLoopback() { // reachable from other hosts
		c.log.Warn("admin API listening on a non-loopback address: anyone who can reach it may try the admin token, and a token that works changes every tenant; keep admin.listen on loopback (127.0.0.1) or a private network behind a firewall",
			"addr", ln.Addr().String())
	}
	srv := &http.Server{Handler: c.admin, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// reloader re-reads the config on SIGHUP.
type reloader struct {
	// read reads the config again.
	read func() (*Config, error)
	// hangups receives SIGHUP from the start of serve on: one sent while
	// the connector starts neither ends the process (the signal's default
	// action) nor is lost (it reloads once the connector runs).
	hangups <-chan os.Signal
}

// reloadOnHangup re-reads the config on every SIGHUP until ctx is done or
// stop is called, and applies its tenants, gateways and routing; the
// connections of gateways that stay are not touched. Other keys keep the
// values the connector started with (a restart applies them).
func (c *connector) reloadOnHangup(ctx context.Context) (stop func()) {
	if c.reload == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-c.reload.hangups:
			}
			cfg, err := c.reload.read()
			if err != nil {
				c.live.metrics.reloads.WithLabelValues(reloadUnreadable).Inc()
				c.log.Error("SIGHUP: config not reloaded; the running one stays", "err", err)
				continue
			}
			prev := c.live.reg.Declared()
			var refused error
			err = c.live.reg.SetDeclared(cfg.declared())
			if err == nil {
				// A platform refusing its table (logged by the apply) is
				// no reason to roll back what the relay took: its removed
				// gateways' sockets are closed already.
				if err = c.live.apply(ctx); errors.Is(err, errTableRefused) {
					refused, err = err, nil
				} else if err != nil {
					// Not applied: the running layer stays, so later
					// applies are not refused for the file's.
					_ = c.live.reg.SetDeclared(prev)
					_ = c.live.apply(ctx)
				}
			}
			if err != nil {
				c.live.metrics.reloads.WithLabelValues(reloadNotApplied).Inc()
				c.log.Error("SIGHUP: config read but not applied", "err", err)
				continue
			}
			if refused != nil { // it names the platforms whose routing stays as it was
				c.log.Warn("SIGHUP: tenants and gateways reloaded from the config, not a refused platform's routing (other keys need a restart)", "tenants", len(cfg.Tenants), "err", refused)
			} else {
				c.log.Info("SIGHUP: tenants, gateways and routing reloaded from the config (other keys need a restart)", "tenants", len(cfg.Tenants))
			}
			c.live.metrics.reloads.WithLabelValues(reloadOK).Inc()
		}
	}()
	return func() { close(done) }
}
