package relay

import (
	"log/slog"
	"time"

	"connector/internal/loglimit"
)

// Log allowances. Every log line a gateway's frames, a remote source's
// upgrades or a tenant's interrupts cause goes through one of them, so none
// of these can flood the log; the lines held back are reported on the next
// line let through (and a connection's on its "gateway disconnected" line),
// and the events themselves are counted exactly in Metrics.
var (
	// connLogRate is each connection's allowance for the lines its frames
	// cause: malformed or ignored frames, hellos, going_idle, failed
	// lookups for its outbound.
	connLogRate = loglimit.Rate{Burst: 10, Every: 10 * time.Second}
	// tenantLogRate is each tenant's allowance for interrupts dropped for
	// want of a live owner; allTenantsLogRate is all tenants' together.
	tenantLogRate     = loglimit.Rate{Burst: 10, Every: 10 * time.Second}
	allTenantsLogRate = loglimit.Rate{Burst: 100, Every: 100 * time.Millisecond}
)

// tenantLogKeys is how many tenants' allowances are remembered: a fixed
// bound, since tenants are also made while the relay runs (the admin API).
const tenantLogKeys = 4096

// serverLogs are the Server's log allowances shared by connections.
type serverLogs struct {
	sources *loglimit.Limiter // refused upgrades, by source (loglimit.NewSources)
	tenants *loglimit.Limiter // dropped interrupts, deliveries not caught up, by tenant
}

// logSource logs a line about an upgrade from remote (host:port) within
// its source's allowance.
func (s *Server) logSource(level slog.Level, remote, msg string, args ...any) {
	s.logs.sources.LogFrom(s.log, level, remote, msg, append(args, "remote", remote)...)
}
