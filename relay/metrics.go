package relay

import "time"

// Metrics receives the relay's measurements. Implementations must be safe
// for concurrent use and cheap: they are called on the hot path.
type Metrics interface {
	// ConnOpened and ConnClosed track authenticated gateway connections.
	ConnOpened(tenant string)
	ConnClosed(tenant string)
	// Refused counts refused upgrades by reason: "unauthorized" and
	// "expired" (4401, at authentication), "too_many_connections" (4409, a
	// newer connection of the same gateway id took the place),
	// "no_credentials" (HTTP 401: no Authorization header).
	Refused(reason string)
	// FrameIgnored counts a frame from a tenant's gateway that the relay
	// skipped, by reason: "malformed" (not a JSON frame), "unknown_type",
	// "no_request_id" (an outbound without one), "no_session_key" (an
	// interrupt without one), "unknown_buffer_id" (an inbound_ack of no
	// buffered entry, as after a redelivery), "interrupt_rate" (an interrupt
	// past the connection's rate).
	FrameIgnored(tenant, reason string)
	// Inbound counts a delivery from a platform by outcome: "queued" (stored
	// in the tenant's ledger), "store_failed" (refused: the store failed),
	// "dropped_unknown_tenant", "dropped_oversized" (over the gateway's
	// frame limit, as received or as read back from the store),
	// "truncated", and for buffered entries dropped later "dropped_overflow" (over the tenant's
	// bounds), "dropped_total" (over the bound across tenants),
	// "dropped_expired" (older than the age bound), "dropped_malformed" (a
	// stored record that does not decode; platform empty).
	Inbound(platform, tenant, outcome string)
	// Delivered records the time from platform receipt to the frame being
	// handed to a gateway connection's writer, or sent to its instance
	// (first delivery only).
	Delivered(platform string, d time.Duration)
	// Outbound records one outbound op, the platform that ran it ("none"
	// when it was answered before one was chosen) and its result code ("ok"
	// on success).
	Outbound(platform, op, result string, d time.Duration)
	// Buffered reports the number of inbound entries a tenant's ledger holds
	// (sent but unacknowledged, or waiting for a gateway).
	Buffered(tenant string, n int)
}

// TenantMetrics is a Metrics that resolves a tenant's series once, when
// the tenant's hub is made (the tenant applied): the hub counts each
// delivery it stores from a configured platform (Inbound "queued") through
// what QueuedOf(platform, tenant) returned, with no lookup by label values
// per event. A Metrics that does not implement it gets Inbound calls.
type TenantMetrics interface {
	QueuedOf(platform, tenant string) func()
}

type nopMetrics struct{}

func (nopMetrics) ConnOpened(string)                              {}
func (nopMetrics) ConnClosed(string)                              {}
func (nopMetrics) Refused(string)                                 {}
func (nopMetrics) FrameIgnored(string, string)                    {}
func (nopMetrics) Inbound(string, string, string)                 {}
func (nopMetrics) Delivered(string, time.Duration)                {}
func (nopMetrics) Outbound(string, string, string, time.Duration) {}
func (nopMetrics) Buffered(string, int)                           {}
