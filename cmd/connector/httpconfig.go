package main

import (
	"cmp"
	"fmt"
	"syscall"
	"time"
)

// HTTPConfig bounds what a client of the public listener can hold before it
// has authenticated (docs/security.md).
type HTTPConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers; a client that
	// has not sent them by then is disconnected. Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// BodyTimeout bounds reading the body of a request that is not a
	// WebSocket upgrade (the Discord and Telegram webhooks), counted from
	// when its handler starts; a body still arriving then is cut off
	// (answered 400, connection closed). Default 10s.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// IdleTimeout closes a keep-alive connection that sends no new request
	// for this long. Default 60s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds a request's headers; larger ones are answered
	// 431. Default 65536 (64 KiB), at most 1048576 (1 MiB).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxUnauthenticatedConns bounds the connections held that have not
	// become an authenticated WebSocket (requests in progress, idle
	// keep-alive connections). At the limit a new connection closes the
	// longest-idle one, or is closed at once when none is idle. Default
	// 1024, or a quarter of the process's open-file limit when that is
	// lower, so gateways and platform calls keep descriptors.
	MaxUnauthenticatedConns int `yaml:"max_unauthenticated_conns"`
	// MaxUnauthenticatedConnsPerSource bounds those of one source address
	// (an IPv4 address, an IPv6 /64), so one address cannot take every
	// slot: past it, a new connection of that source closes the source's
	// own longest-idle one, or is closed at once when none is idle. Behind
	// a reverse proxy every client shares the proxy's address: set it to
	// max_unauthenticated_conns there. Default 64, or half of
	// max_unauthenticated_conns when that is lower; a larger value acts as
	// max_unauthenticated_conns.
	MaxUnauthenticatedConnsPerSource int `yaml:"max_unauthenticated_conns_per_source"`
}

// OpsConfig is the operations listener: /metrics, /readyz, /platforms and
// /healthz, apart from the public one (which serves only /healthz of
// these).
type OpsConfig struct {
	// Listen is the operations listener's address. It exposes tenant ids
	// and per-tenant counts without authentication: keep it on loopback or
	// a private network. Default 127.0.0.1:9090.
	Listen string `yaml:"listen"`
}

// Defaults of the http and ops sections.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	defaultBodyTimeout       = 10 * time.Second
	defaultIdleTimeout       = 60 * time.Second
	defaultMaxHeaderBytes    = 64 << 10
	maxMaxHeaderBytes        = 1 << 20 // net/http adds to it: near MaxInt it overflows
	defaultMaxUnauthConns    = 1024
	defaultMaxUnauthPerSrc   = 64
	defaultOpsListen         = "127.0.0.1:9090"
)

// normalizeHTTP fills the http and ops defaults.
func (c *Config) normalizeHTTP() {
	h := &c.HTTP
	h.ReadHeaderTimeout = cmp.Or(h.ReadHeaderTimeout, defaultReadHeaderTimeout)
	h.BodyTimeout = cmp.Or(h.BodyTimeout, defaultBodyTimeout)
	h.IdleTimeout = cmp.Or(h.IdleTimeout, defaultIdleTimeout)
	h.MaxHeaderBytes = cmp.Or(h.MaxHeaderBytes, defaultMaxHeaderBytes)
	h.MaxUnauthenticatedConns = cmp.Or(h.MaxUnauthenticatedConns, maxUnauthConnsFor(openFileLimit()))
	h.MaxUnauthenticatedConnsPerSource = cmp.Or(h.MaxUnauthenticatedConnsPerSource, min(defaultMaxUnauthPerSrc, max(h.MaxUnauthenticatedConns/2, 1)))
	h.MaxUnauthenticatedConnsPerSource = min(h.MaxUnauthenticatedConnsPerSource, h.MaxUnauthenticatedConns)
	c.Ops.Listen = cmp.Or(c.Ops.Listen, defaultOpsListen)
}

// validateHTTP checks the http and ops values.
func (c *Config) validateHTTP() error {
	if c.HTTP.MaxHeaderBytes > maxMaxHeaderBytes {
		return fmt.Errorf("config: http.max_header_bytes: %d is over %d (1 MiB)", c.HTTP.MaxHeaderBytes, maxMaxHeaderBytes)
	}
	return cmp.Or(nonNegative("http", &c.HTTP), validListen("ops.listen", c.Ops.Listen))
}

// maxUnauthConnsFor is the default bound of unauthenticated connections
// under an open-file limit of nofile (0: unknown).
func maxUnauthConnsFor(nofile uint64) int {
	if nofile > 0 && nofile/4 < defaultMaxUnauthConns {
		return max(int(nofile/4), 1)
	}
	return defaultMaxUnauthConns
}

// openFileLimit returns the process's open-file limit (which the Go runtime
// raises to the hard limit at start), or 0 when it cannot be read.
func openFileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return lim.Cur
}
