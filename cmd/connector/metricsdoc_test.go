package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"connector/internal/connlimit"
	"connector/store"
)

// metricInfo is one metric as docs/metrics.md lists it.
type metricInfo struct {
	Name, Type, Help string
	Labels           []string
}

// descPattern reads a *prometheus.Desc's String(): the name, the help, the
// constant labels (name="value",...) and the variable labels.
var descPattern = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", help: ("(?:[^"\\]|\\.)*"), unit: "[^"]*", constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// registeredMetrics builds a connector with every platform, the admin API
// and its public listener, and returns every connector_* metric its
// registry holds, by name: name, type, help and labels from the
// collectors' descriptions (a vector with no series yet is listed too).
func registeredMetrics(t *testing.T) map[string]metricInfo {
	t.Helper()
	doc := everyPlatformConfig(t) + "admin: {listen: 127.0.0.1:0, token: admin-token-0123456789}\n"
	cfg, _, err := loadOrDefault(sources{configPath: writeConfig(t, doc), dataDir: t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), store.Config{Path: t.TempDir()}) // an embedded store: it has commit stats
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	c, err := build(cfg, slog.New(slog.DiscardHandler), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.relay.Shutdown(context.Background()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, _, err := c.publicServer(ln); err != nil { // registers the listener's gauge
		t.Fatal(err)
	}
	families, err := c.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gathered := map[string]dto.MetricType{}
	for _, f := range families {
		gathered[f.GetName()] = f.GetType()
	}
	out := map[string]metricInfo{}
	for _, col := range c.metrics.registered {
		ch := make(chan *prometheus.Desc, 256)
		col.Describe(ch)
		close(ch)
		for d := range ch {
			m := descPattern.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the description %s", d)
			}
			if !strings.HasPrefix(m[1], "connector_") {
				continue // the Go runtime's and the process's collectors
			}
			var help string
			if _, err := fmt.Sscanf(m[2], "%q", &help); err != nil {
				t.Fatalf("help of %s: %v", m[1], err)
			}
			info := metricInfo{Name: m[1], Help: help, Type: metricType(col, gathered[m[1]])}
			for _, kv := range strings.Split(m[3], ",") {
				if name, _, ok := strings.Cut(kv, "="); ok {
					info.Labels = append(info.Labels, name)
				}
			}
			if m[4] != "" {
				info.Labels = append(info.Labels, strings.Split(m[4], ",")...)
			}
			slices.Sort(info.Labels)
			if prev, ok := out[info.Name]; ok && (prev.Help != info.Help || !slices.Equal(prev.Labels, info.Labels)) {
				t.Fatalf("%s is registered twice with different descriptions", info.Name)
			}
			out[info.Name] = info
		}
	}
	return out
}

// metricType names a collector's type: from the gathered family when it
// has series, else from the vector's Go type.
func metricType(c prometheus.Collector, gathered dto.MetricType) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case bufferedBytes:
		return "gauge"
	}
	return strings.ToLower(gathered.String())
}

// metricsReference is docs/metrics.md for the registered metrics.
func metricsReference(ms map[string]metricInfo) string {
	var b strings.Builder
	b.WriteString(`# Metrics

The operations listener (` + "`ops.listen`" + `, default ` + "`127.0.0.1:9090`" + `) serves these at ` + "`/metrics`" + `
in the Prometheus text format, beside the Go runtime's ` + "`go_*`" + ` and the process's ` + "`process_*`" + `
metrics. Label values come from the configuration (tenants, platforms) or fixed vocabularies
(ops, outcomes, reasons), never from what a gateway or a platform user sends. A histogram
(` + "`_seconds`" + `) is exported as its ` + "`_bucket`" + `, ` + "`_sum`" + ` and ` + "`_count`" + ` series. A tenant's series
are deleted by the registry apply that finds it no longer served (deleted, or dropped from the
YAML), or the next one for an event or a gateway frame counted after (routed to it late, a revoked socket's last), its ` + "`connector_gateway_connections`" + ` by the first apply that reads it 0, or its last socket's close after that apply.

This file is generated from the collectors the connector registers, and a test keeps it so:
` + "`go test ./cmd/connector -run TestMetricsDoc -update`" + ` rewrites it. A Grafana dashboard and
Prometheus alerting rules built on these metrics are in
[deploy/monitoring/](../deploy/monitoring/) (` + "`TestMonitoringUsesRegisteredMetrics`" + ` checks that every
metric and label they use is below, and CI runs ` + "`promtool check rules`" + ` on the rules).

| metric | type | labels | meaning |
|---|---|---|---|
`)
	for _, name := range slices.Sorted(maps.Keys(ms)) {
		m := ms[name]
		labels := "—"
		if len(m.Labels) > 0 {
			labels = "`" + strings.Join(m.Labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, labels, strings.ReplaceAll(m.Help, "|", `\|`))
	}
	b.WriteString(`
## Changes

* v0.2.0: ` + "`connector_platform_429_total`" + ` is now ` + "`connector_platform_rate_limited_total`" + ` (same label,
  same counts: a status code does not belong in a metric name). Queries and alerts on the old name
  find nothing after the upgrade; change them, or bridge a dashboard until then with a recording
  rule:

  ` + "```yaml" + `
  - record: connector_platform_429_total
    expr: connector_platform_rate_limited_total
  ` + "```" + `

* v0.2.0: ` + "`connector_admin_changes_total`" + ` counts the admin API's requests alone. The changes made
  without the admin token (` + "`relay_policy`, `relay_enroll`, `relay_provision`, `manage_*`, `link_redeem`" + `)
  moved to ` + "`connector_gateway_changes_total`" + `, with the same ` + "`op`" + ` and ` + "`outcome`" + ` values.
* v0.2.0: ` + "`connector_buffered_bytes`" + ` (the payload bytes buffered per tenant) is new.
`)
	return b.String()
}

// TestMetricsDoc fails when docs/metrics.md and the registered collectors
// disagree, so the reference cannot drift from the code.
func TestMetricsDoc(t *testing.T) {
	ms := registeredMetrics(t)
	for _, name := range []string{"connector_inbound_delivery_seconds", "connector_ledger_bytes", "connector_ledger_remove_errors_total",
		"connector_platform_rate_limited_total", "connector_ratelimit_wait_seconds", "connector_vault_entries", "connector_vault_hits_total",
		"connector_vault_misses_total", "connector_vault_expiries_total", "connector_vault_store_errors_total", "connector_buffered_bytes",
		"connector_gateway_changes_total", "connector_wake_pokes_total", "connector_http_unauthenticated_connections", "connector_platform_ready",
		"connector_store_commit_seconds_total", "connector_leases_held", "connector_lease_acquired_total", "connector_lease_lost_total"} {
		if _, ok := ms[name]; !ok {
			t.Errorf("%s is not registered", name)
		}
	}
	for name, m := range ms {
		if m.Help == "" || m.Type == "" || strings.Contains(name, "429") {
			t.Errorf("%s: type %q, help %q", name, m.Type, m.Help)
		}
	}
	keepInStep(t, "docs/metrics.md", metricsReference(ms), "the registered metrics", "TestMetricsDoc")
}

// TestRefusedHelpNamesEveryReason: the help of
// connector_http_connections_refused_total (and so docs/metrics.md) names
// every reason the public listener counts refusals under.
func TestRefusedHelpNamesEveryReason(t *testing.T) {
	mfs, err := newMetrics().reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "connector_http_connections_refused_total" {
			continue
		}
		for _, r := range connlimit.Reasons {
			if !strings.Contains(mf.GetHelp(), r+" (") {
				t.Errorf("the help does not say what reason %q means: %s", r, mf.GetHelp())
			}
		}
		return
	}
	t.Fatal("connector_http_connections_refused_total not registered")
}
