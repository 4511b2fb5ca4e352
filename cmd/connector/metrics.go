package main

import (
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"connector/contract"
	"connector/internal/cluster"
	"connector/internal/connlimit"
	"connector/media"
	"connector/platform"
	"connector/platform/whatsapp"
	"connector/relay"
	"connector/relay/ledger"
	"connector/store"
	"connector/vault"
)

// metrics exports the connector's measurements in Prometheus format. It
// implements relay.Metrics and platform.Metrics. Label values come from
// configuration (tenants, platforms) or fixed vocabularies (ops, outcomes,
// reasons), never from what a gateway or platform user sends.
type metrics struct {
	reg *prometheus.Registry
	// registered lists every collector on reg, in registration order: the
	// source of docs/metrics.md.
	registered []prometheus.Collector

	connections   *prometheus.GaugeVec
	refused       *prometheus.CounterVec
	framesIgnored *prometheus.CounterVec
	inbound       *prometheus.CounterVec
	deliveryDelay *prometheus.HistogramVec
	outbound      *prometheus.CounterVec
	outboundTime  *prometheus.HistogramVec
	buffered      *prometheus.GaugeVec
	rateWait      *prometheus.HistogramVec
	rateLimited   *prometheus.CounterVec
	httpRefused   *prometheus.CounterVec
	outboxRefused *prometheus.CounterVec
	statuses      *prometheus.CounterVec

	// The children of the series every inbound event and every outbound
	// result reports to, by their label values (children).
	inboundOf      children[[3]string, prometheus.Counter]
	bufferedOf     children[string, prometheus.Gauge]
	delayOf        children[string, prometheus.Observer]
	outboundOf     children[[3]string, prometheus.Counter]
	outboundTimeOf children[[2]string, prometheus.Observer]
	rateWaitOf     children[string, prometheus.Observer]
	ignoredOf      children[[2]string, prometheus.Counter]

	// servedMu guards served, closing and counted, and orders the connection
	// gauge's changes with its deletion: SetTenants runs on an apply,
	// ConnOpened and ConnClosed on a socket's goroutine.
	servedMu sync.Mutex
	// served are the tenants the last registry apply gave (SetTenants).
	served map[string]time.Time
	// closing are the tenants no longer served whose connection gauge
	// has not read 0 yet (SetTenants).
	closing map[string]bool
	// counted are the tenants a series was made for since the last apply
	// (a child resolved, not every event): one counted after the apply
	// that deleted it (a revoked socket's last frame, a platform's binding
	// applied after the metrics, another instance's lagging route) is
	// deleted by the next.
	counted map[string]bool
}

// children caches a vector's children by their label values, each resolved
// once with WithLabelValues: what the relay reports for every inbound event
// (Inbound, Buffered twice, Delivered) and every outbound result (Outbound,
// and the platform's RateLimitWait before its call) then costs a map read
// instead of WithLabelValues' hashing and label checks, which were about
// half of the metrics' cost per event (BenchmarkEventMetrics,
// BenchmarkOutboundMetrics). A series deleted (a tenant's gone) leaves
// its cache too (forget); the keys are those of the vector's own series.
type children[K comparable, M any] struct {
	mu  sync.RWMutex
	m   map[K]M
	new func(K) M // the vector's WithLabelValues
}

// get returns k's child, resolving it on first use.
func (c *children[K, M]) get(k K) M {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	v = c.new(k)
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[K]M)
	}
	c.m[k] = v
	c.mu.Unlock()
	return v
}

// forget drops the cached children drop selects.
func (c *children[K, M]) forget(drop func(K) bool) {
	c.mu.Lock()
	maps.DeleteFunc(c.m, func(k K, _ M) bool { return drop(k) })
	c.mu.Unlock()
}

var (
	_ platform.TenantKeeper  = (*metrics)(nil)
	_ relay.Metrics          = (*metrics)(nil)
	_ platform.Metrics       = (*metrics)(nil)
	_ whatsapp.StatusMetrics = (*metrics)(nil)
	_ ledger.TenantMetrics   = (*metrics)(nil)
	_ relay.TenantMetrics    = (*metrics)(nil)
)

// latencyBuckets span 100 µs to 30 s in 1-2.5-5 steps: in-process hops to
// a platform call that waited out a rate limit.
var latencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
}

func newMetrics() *metrics {
	m := &metrics{
		reg:         prometheus.NewRegistry(),
		closing:     make(map[string]bool),
		connections: gaugeVec("connector_gateway_connections", "Authenticated gateway connections.", "tenant"),
		refused: counterVec("connector_gateway_refused_total",
			"Gateway upgrades refused, by reason: unauthorized or expired (close 4401), too_many_connections (close 4409), no_credentials (HTTP 401: no Authorization header).", "reason"),
		framesIgnored: counterVec("connector_gateway_frames_ignored_total",
			"Gateway frames the relay skipped, by tenant and reason: malformed, unknown_type, no_request_id, no_session_key, unknown_buffer_id, interrupt_rate.", "tenant", "reason"),
		inbound: counterVec("connector_inbound_events_total",
			"Platform events by outcome: queued for the tenant's gateways, or dropped (with the reason); tenant is empty when no tenant claimed the event.", "platform", "tenant", "outcome"),
		deliveryDelay: latencyVec("connector_inbound_delivery_seconds",
			"Time from platform receipt to the inbound frame handed to a gateway connection's writer.", "platform"),
		outbound: counterVec("connector_outbound_ops_total",
			"Outbound ops by platform (none: answered before one was chosen), op and result (ok; partial: answered success with an error, a message split in parts of which the first went out and a later one did not, or a media whose caption did not follow; or the failure code).", "platform", "op", "result"),
		outboundTime: latencyVec("connector_outbound_seconds", "Time from an outbound request to its result, by platform and op.", "platform", "op"),
		buffered: gaugeVec("connector_buffered_events",
			"Inbound events held for a tenant: in flight without ack, or waiting for a gateway.", "tenant"),
		rateWait: latencyVec("connector_ratelimit_wait_seconds", "Time egress calls waited for the platform's rate-limit budget.", "platform"),
		rateLimited: counterVec("connector_platform_rate_limited_total",
			"Answers in which the platform refused a call for its rate limit (HTTP 429, or Telegram's error 429); the call waited retry_after and was made again within its deadline.", "platform"),
		httpRefused: counterVec("connector_http_connections_refused_total",
			"Public listener connections refused or closed before authenticating: evicted_idle (an idle keep-alive closed for a new one at the limit), over_limit (a new one closed at the limit), source_limit (a new one closed at its source address's share, none of that source's idle), out_of_fds (accept failed for lack of file descriptors).", "reason"),
		outboxRefused: counterVec("connector_cluster_outbox_refused_total",
			"Messages to the other instances (store.backend redis) the outbox refused, each lost as pub/sub may lose one: tenant_share (its tenant's share of the outbox full: the relay's messages for the tenant), tenants_share (the part all tenants share full), no_tenant_share (the share of messages of no tenant full: nexscope's beats, its words that do not wait (an action taken, cancelled, claimed) and answers to calls). Messages that wait for room instead are never counted: a nexscope room's frames, joins and leaves, and calls.", "reason"),
		statuses: counterVec("connector_delivery_statuses_total",
			"Delivery statuses the platform reported for tenants' messages (WhatsApp Cloud: sent, delivered, read, failed, other), consumed, never delivered to gateways; tenant is unknown for a sender the platform echoed that is not a configured tenant (deleted since, or another app's mark). Statuses are not deduplicated: a webhook Meta resends after its answer was lost counts its statuses again.", "platform", "tenant", "status"),
	}
	m.inboundOf.new = func(k [3]string) prometheus.Counter {
		m.count(k[1])
		return m.inbound.WithLabelValues(k[0], k[1], k[2])
	}
	m.bufferedOf.new = func(t string) prometheus.Gauge { m.count(t); return m.buffered.WithLabelValues(t) }
	m.ignoredOf.new = func(k [2]string) prometheus.Counter {
		m.count(k[0])
		return m.framesIgnored.WithLabelValues(k[0], k[1])
	}
	m.delayOf.new = func(p string) prometheus.Observer { return m.deliveryDelay.WithLabelValues(p) }
	m.outboundOf.new = func(k [3]string) prometheus.Counter { return m.outbound.WithLabelValues(k[0], k[1], k[2]) }
	m.outboundTimeOf.new = func(k [2]string) prometheus.Observer { return m.outboundTime.WithLabelValues(k[0], k[1]) }
	m.rateWaitOf.new = func(p string) prometheus.Observer { return m.rateWait.WithLabelValues(p) }
	d := readBuildDetails()
	buildInfo := gaugeVec("connector_build_info", "Always 1; the labels say which build runs.", "version", "commit", "goversion")
	buildInfo.WithLabelValues(d.Version, d.Commit, d.GoVersion).Set(1)
	m.register(m.connections, m.refused, m.framesIgnored, m.inbound, m.deliveryDelay, m.outbound, m.outboundTime,
		m.buffered, m.rateWait, m.rateLimited, m.httpRefused, m.outboxRefused, m.statuses, buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{contract.ReasonUnauthorized, contract.ReasonExpired} {
		m.refused.WithLabelValues(r)
	}
	for _, r := range connlimit.Reasons {
		m.httpRefused.WithLabelValues(r)
	}
	for _, r := range cluster.RefusalReasons {
		m.outboxRefused.WithLabelValues(r)
	}
	return m
}

// counterVec, gaugeVec and latencyVec (a histogram in latencyBuckets) are
// vectors of name, help and labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func latencyVec(name, help string, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets}, labels)
}

// counterFunc and gaugeFunc are a counter and a gauge of name and help
// that read f at each scrape.
func counterFunc(name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
}

func gaugeFunc(name, help string, f func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
}

// register registers cs on the registry and lists them in registered.
func (m *metrics) register(cs ...prometheus.Collector) {
	m.reg.MustRegister(cs...)
	m.registered = append(m.registered, cs...)
}

// preinit creates the series of every configured tenant and platform, so
// they read 0 before their first event instead of being absent.
func (m *metrics) preinit(tenants []string, platforms []platform.Platform) {
	for _, t := range tenants {
		m.connections.WithLabelValues(t)
		m.buffered.WithLabelValues(t)
		for _, p := range platforms {
			m.inbound.WithLabelValues(p.Name(), t, "queued")
		}
	}
	for _, p := range platforms {
		m.deliveryDelay.WithLabelValues(p.Name())
		m.rateWait.WithLabelValues(p.Name())
		m.rateLimited.WithLabelValues(p.Name())
		for _, op := range p.Descriptor().SupportedOps {
			m.outboundTime.WithLabelValues(p.Name(), op)
			for _, result := range outboundResults {
				m.outbound.WithLabelValues(p.Name(), op, result)
			}
		}
	}
}

// outboundResults are the result labels of connector_outbound_ops_total.
var outboundResults = []string{
	"ok", contract.CodeEgressDeclined, contract.CodeUnsupportedOp, contract.CodeBadRequest,
	contract.CodeCapabilityMissing, contract.CodeRateLimited, contract.CodePlatformError, contract.CodeUnavailable,
	contract.CodeNameChanged, contract.CodeWindowClosed,
}

// watchListener exports the public listener's unauthenticated connections.
func (m *metrics) watchListener(l *connlimit.Listener) {
	m.register(gaugeFunc("connector_http_unauthenticated_connections",
		"Public listener connections held that have not become an authenticated WebSocket (requests in progress, idle keep-alives).",
		func() float64 { return float64(l.Unauthenticated()) }))
}

// OutboxRefused counts a message the cluster outbox refused
// (cluster.Config.Refused), by reason.
func (m *metrics) OutboxRefused(reason string) { m.outboxRefused.WithLabelValues(reason).Inc() }

// HTTPRefused counts a connection the public listener refused or closed
// before it authenticated, by connlimit reason.
func (m *metrics) HTTPRefused(reason string) { m.httpRefused.WithLabelValues(reason).Inc() }

// watchVault exports the vault's counters.
func (m *metrics) watchVault(v vault.Store) {
	stat := func(f func(vault.Stats) float64) func() float64 { return func() float64 { return f(v.Stats()) } }
	m.register(
		gaugeFunc("connector_vault_entries", "Capabilities held in the vault.", stat(func(s vault.Stats) float64 { return float64(s.Size) })),
		counterFunc("connector_vault_hits_total", "Vault lookups that found a live capability.", stat(func(s vault.Stats) float64 { return float64(s.Hits) })),
		counterFunc("connector_vault_misses_total", "Vault lookups that found nothing usable.", stat(func(s vault.Stats) float64 { return float64(s.Misses) })),
		counterFunc("connector_vault_expiries_total", "Vault lookups that found only an expired capability.",
			stat(func(s vault.Stats) float64 { return float64(s.Expiries) })),
		counterFunc("connector_vault_store_errors_total", "Failed calls to the vault's durable store.",
			stat(func(s vault.Stats) float64 { return float64(s.StoreErrors) })),
	)
}

// watchMedia exports the media store's usage and refusals.
func (m *metrics) watchMedia(ms *media.Store) {
	stat := func(f func(media.Stats) float64) func() float64 { return func() float64 { return f(ms.Stats()) } }
	m.register(
		gaugeFunc("connector_media_bytes", "Bytes of the media store's objects, stored and being uploaded (media.quota_bytes bounds them).",
			stat(func(s media.Stats) float64 { return float64(s.Bytes) })),
		gaugeFunc("connector_media_quota_bytes", "media.quota_bytes: the bytes the media store may hold.",
			stat(func(s media.Stats) float64 { return float64(s.QuotaBytes) })),
		gaugeFunc("connector_media_objects", "Objects of the media store, stored and being uploaded.",
			stat(func(s media.Stats) float64 { return float64(s.Objects) })),
		counterFunc("connector_media_quota_refusals_total",
			"Media writes refused for lack of room (a quota or an object count, expired objects removed first): uploads answered 507, attachments not re-hosted, source_urls not downloaded.",
			stat(func(s media.Stats) float64 { return float64(s.QuotaRefusals) })),
	)
}

// watchStore exports the store's batched commits, when it batches them.
func (m *metrics) watchStore(st store.Store) {
	c, ok := st.(store.Committer)
	if !ok {
		return
	}
	m.register(
		counterFunc("connector_store_commits_total", "Batched commits to the store (embedded: a bbolt transaction with its fsyncs; redis: a pipeline).",
			func() float64 { return float64(c.CommitStats().Commits) }),
		counterFunc("connector_store_commit_writes_total", "Writes (appends, acks, owners, capabilities, ...) the store's batched commits carried.",
			func() float64 { return float64(c.CommitStats().Writes) }),
		counterFunc("connector_store_commit_seconds_total",
			"Time the store's batched commits took, in total: its rate over connector_store_commits_total's is the mean commit latency.",
			func() float64 { return c.CommitStats().Time.Seconds() }),
	)
}

// watchLedger exports the counters of the relay's ledgers.
func (m *metrics) watchLedger(srv *relay.Server) {
	entries, bytes, total := srv.BufferBounds()
	bound := func(v float64) func() float64 { return func() float64 { return v } }
	m.register(bufferedBytes{srv},
		gaugeFunc("connector_buffer_limit_entries", "relay.buffer_entries: the buffered inbound entries a tenant may hold before its oldest are dropped.", bound(float64(entries))),
		gaugeFunc("connector_buffer_limit_bytes", "relay.buffer_bytes: the payload bytes of buffered inbound a tenant may hold before its oldest are dropped.", bound(float64(bytes))),
		gaugeFunc("connector_buffer_limit_total_bytes", "relay.buffer_bytes_total: the payload bytes of buffered inbound all tenants together may hold.", bound(float64(total))),
		counterFunc("connector_ledger_removed_total", "Buffered inbound entries (acknowledged or dropped) removed from the durable store.",
			func() float64 { return float64(srv.LedgerStats().Removed) }),
		counterFunc("connector_ledger_remove_errors_total", "Buffered inbound entries whose removal from the store failed (they are redelivered after a restart).",
			func() float64 { return float64(srv.LedgerStats().RemoveErrors) }),
		gaugeFunc("connector_ledger_bytes", "Payload bytes of the inbound buffered for every tenant (relay.buffer_bytes_total bounds it).",
			func() float64 { return float64(srv.LedgerStats().Bytes) }),
	)
}

// bufferedBytesDesc is connector_buffered_bytes, which bufferedBytes reads
// from the ledgers at each scrape.
var bufferedBytesDesc = prometheus.NewDesc("connector_buffered_bytes",
	"Payload bytes of the inbound events held for a tenant (relay.buffer_bytes bounds it): in flight without ack, or waiting for a gateway.",
	[]string{"tenant"}, nil)

// bufferedBytes exports each tenant's buffered payload bytes.
type bufferedBytes struct{ srv *relay.Server }

// Describe implements prometheus.Collector.
func (bufferedBytes) Describe(ch chan<- *prometheus.Desc) { ch <- bufferedBytesDesc }

// Collect implements prometheus.Collector.
func (b bufferedBytes) Collect(ch chan<- prometheus.Metric) {
	for tenant, n := range b.srv.TenantBufferBytes() {
		ch <- prometheus.MustNewConstMetric(bufferedBytesDesc, prometheus.GaugeValue, float64(n), tenant)
	}
}

// watchPlatforms exports each platform's readiness (1 ready, 0 not), and
// Slack's durable intake (0 without Slack).
func (m *metrics) watchPlatforms(ps []platform.Platform) {
	intake := func() (pending int, resumed uint64) { return 0, 0 }
	for _, p := range ps {
		if in, ok := p.(interface{ IntakeStats() (int, uint64) }); ok { // Slack's durable intake
			intake = in.IntakeStats
		}
	}
	m.register(
		gaugeFunc("connector_slack_intake_pending",
			"Slack requests the durable intake holds on this instance: answered 200, not yet delivered (a message's files being fetched, and the requests of its chat behind it).",
			func() float64 { n, _ := intake(); return float64(n) }),
		counterFunc("connector_slack_intake_resumed_total",
			"Slack durable intake entries this instance resumed: left by a restart, or taken over from a stopped or killed instance.",
			func() float64 { _, n := intake(); return float64(n) }))
	for _, p := range ps {
		m.register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "connector_platform_ready", Help: "1 when the platform is connected and ready.",
			ConstLabels: prometheus.Labels{"platform": p.Name()}},
			func() float64 {
				if p.Status().Ready {
					return 1
				}
				return 0
			}))
	}
}

// count notes that a series of tenant was made (counted).
func (m *metrics) count(tenant string) {
	if tenant == "" {
		return
	}
	m.servedMu.Lock()
	defer m.servedMu.Unlock()
	if m.counted == nil {
		m.counted = make(map[string]bool)
	}
	m.counted[tenant] = true
}

// SetTenants implements platform.TenantKeeper: the series of a tenant no
// longer served (deleted, or dropped from the YAML), or counted since the
// last apply (an event or frame of it after its deletion), are deleted, so
// tenants coming and going do not grow the metrics without end; its
// connection gauge by the first apply that reads it 0 (its sockets may
// still be closing, each lowering it).
func (m *metrics) SetTenants(created map[string]time.Time) {
	m.servedMu.Lock()
	defer m.servedMu.Unlock()
	gone := m.counted
	if gone == nil {
		gone = make(map[string]bool, len(m.served))
	}
	for tenant := range m.served {
		gone[tenant] = true
	}
	for tenant := range gone {
		if _, ok := created[tenant]; ok {
			delete(gone, tenant)
			continue
		}
		l := prometheus.Labels{"tenant": tenant}
		m.framesIgnored.DeletePartialMatch(l)
		m.inbound.DeletePartialMatch(l)
		m.buffered.DeletePartialMatch(l)
		m.statuses.DeletePartialMatch(l)
		m.closing[tenant] = true
	}
	m.inboundOf.forget(func(k [3]string) bool { return gone[k[1]] })
	m.bufferedOf.forget(func(k string) bool { return gone[k] })
	m.ignoredOf.forget(func(k [2]string) bool { return gone[k[0]] })
	for tenant := range m.closing {
		if _, ok := created[tenant]; ok {
			delete(m.closing, tenant)
		} else if idle(m.connections.WithLabelValues(tenant)) {
			m.connections.DeleteLabelValues(tenant)
			delete(m.closing, tenant)
		}
	}
	m.served, m.counted = created, nil
}

// idle reports whether a connection gauge reads no socket.
func idle(g prometheus.Gauge) bool {
	var d dto.Metric
	return g.Write(&d) == nil && d.GetGauge().GetValue() == 0
}

// ConnOpened implements relay.Metrics.
func (m *metrics) ConnOpened(tenant string) {
	m.servedMu.Lock()
	defer m.servedMu.Unlock()
	m.connections.WithLabelValues(tenant).Inc()
}

// ConnClosed implements relay.Metrics. The last socket of a tenant not
// served deletes its connection gauge, as SetTenants does: one opened
// after SetTenants deleted it (authenticated just before the tenant's
// deletion) would else leave the series for good.
func (m *metrics) ConnClosed(tenant string) {
	m.servedMu.Lock()
	defer m.servedMu.Unlock()
	g := m.connections.WithLabelValues(tenant)
	g.Dec()
	if _, ok := m.served[tenant]; !ok && idle(g) {
		m.connections.DeleteLabelValues(tenant)
		delete(m.closing, tenant)
	}
}

// Refused implements relay.Metrics.
func (m *metrics) Refused(reason string) { m.refused.WithLabelValues(reason).Inc() }

// FrameIgnored implements relay.Metrics.
func (m *metrics) FrameIgnored(tenant, reason string) {
	m.ignoredOf.get([2]string{tenant, reason}).Inc()
}

// Inbound implements relay.Metrics.
func (m *metrics) Inbound(platform, tenant, outcome string) {
	m.inboundOf.get([3]string{platform, tenant, outcome}).Inc()
}

// Delivered implements relay.Metrics.
func (m *metrics) Delivered(platform string, d time.Duration) {
	m.delayOf.get(platform).Observe(d.Seconds())
}

// Outbound implements relay.Metrics.
func (m *metrics) Outbound(platform, op, result string, d time.Duration) {
	m.outboundOf.get([3]string{platform, op, result}).Inc()
	m.outboundTimeOf.get([2]string{platform, op}).Observe(d.Seconds())
}

// Buffered implements relay.Metrics.
func (m *metrics) Buffered(tenant string, n int) { m.bufferedOf.get(tenant).Set(float64(n)) }

// QueuedOf implements relay.TenantMetrics: tenant's hub counts the
// deliveries of platform it stores with no lookup.
func (m *metrics) QueuedOf(platform, tenant string) func() {
	return m.inboundOf.get([3]string{platform, tenant, "queued"}).Inc
}

// BufferedOf implements ledger.TenantMetrics: tenant's ledger reports to
// its series with no lookup.
func (m *metrics) BufferedOf(tenant string) func(n int) {
	g := m.bufferedOf.get(tenant)
	return func(n int) { g.Set(float64(n)) }
}

// RateLimitWait implements platform.Metrics.
func (m *metrics) RateLimitWait(platform string, d time.Duration) {
	m.rateWaitOf.get(platform).Observe(d.Seconds())
}

// RateLimited implements platform.Metrics.
func (m *metrics) RateLimited(platform string) { m.rateLimited.WithLabelValues(platform).Inc() }

// DeliveryStatus implements whatsapp.StatusMetrics. A tenant's series made
// after the apply that deleted it (the platform's tenants are applied after
// the metrics) is counted, so the next apply deletes it; the
// UnknownSender series stays.
func (m *metrics) DeliveryStatus(platform, tenant, status string) {
	m.statuses.WithLabelValues(platform, tenant, status).Inc()
	if tenant != whatsapp.UnknownSender {
		m.count(tenant)
	}
}

// Dropped implements platform.Metrics: an event the platform did not deliver.
func (m *metrics) Dropped(platform, reason string) {
	m.inbound.WithLabelValues(platform, "", "dropped_"+reason).Inc()
}
