package relay

import (
	"log/slog"
	"net"
	"time"

	"connector/internal/loglimit"
)

// Log allowances. Every log line a gateway's frames, a remote address's
// upgrades or a tenant's interrupts cause goes through one of them, so none
// of these can flood the log; the lines held back are reported on the next
// line let through (and a connection's on its "gateway disconnected" line),
// and the events themselves are counted exactly in Metrics.
var (
	// connLogRate is each connection's allowance for the lines its frames
	// cause: malformed or ignored frames, hellos, going_idle, failed
	// lookups for its outbound.
	connLogRate = loglimit.Rate{Burst: 10, Every: 10 * time.Second}
	// sourceLogRate is each remote address's allowance for refused
	// upgrades; allSourcesLogRate is all addresses' together.
	sourceLogRate     = loglimit.Rate{Burst: 10, Every: 10 * time.Second}
	allSourcesLogRate = loglimit.Rate{Burst: 100, Every: 100 * time.Millisecond}
	// tenantLogRate is each tenant's allowance for interrupts dropped for
	// want of a live owner; allTenantsLogRate is all tenants' together.
	tenantLogRate     = loglimit.Rate{Burst: 10, Every: 10 * time.Second}
	allTenantsLogRate = loglimit.Rate{Burst: 100, Every: 100 * time.Millisecond}
)

// sourceLogKeys bounds the remote addresses whose allowance is remembered.
const sourceLogKeys = 4096

// serverLogs are the Server's log allowances shared by connections.
type serverLogs struct {
	sources *loglimit.Limiter // refused upgrades, by remote host
	tenants *loglimit.Limiter // dropped interrupts, by tenant
}

// logSource logs a line about an upgrade from remote (host:port) within
// its host's allowance.
func (s *Server) logSource(level slog.Level, remote, msg string, args ...any) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	s.logs.sources.Log(s.log, level, host, msg, append(args, "remote", remote)...)
}
