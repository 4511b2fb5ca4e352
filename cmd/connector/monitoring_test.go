package main

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// monitoringExpr is one PromQL expression of deploy/monitoring, with the
// texts that name its labels (a legend, an alert's annotations).
type monitoringExpr struct {
	where, expr, labelsText string
}

// monitoringExprs reads every expression of the Grafana dashboard and the
// alerting rules.
func monitoringExprs(t *testing.T) []monitoringExpr {
	t.Helper()
	var out []monitoringExpr
	raw, err := os.ReadFile("../../deploy/monitoring/connector-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr, LegendFormat string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("connector-dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, monitoringExpr{"dashboard panel " + p.Title, tg.Expr, tg.LegendFormat})
		}
	}
	raw, err = os.ReadFile("../../deploy/monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, monitoringExpr{"alert " + r.Alert, r.Expr, r.Annotations["summary"] + " " + r.Annotations["description"]})
		}
	}
	return out
}

var (
	promMetric   = regexp.MustCompile(`\bconnector_[a-z0-9_]+\b`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promMatchers = regexp.MustCompile(`\{([^{}]*)\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	// legendLabel is {{label}} in a legend, $labels.label in an annotation.
	legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}|\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
)

// targetLabels are the labels Prometheus gives every series of a scrape.
var targetLabels = []string{"instance", "job"}

// TestMonitoringUsesRegisteredMetrics: every metric the Grafana dashboard
// and the alerting rules of deploy/monitoring query is one the connector
// registers (a histogram's _bucket, _sum and _count included), and every
// label they group, match or print by is a label of a metric of the same
// expression (or a scrape target's, or a histogram's le). A renamed metric
// or label fails here, not on an operator's empty panel.
func TestMonitoringUsesRegisteredMetrics(t *testing.T) {
	ms := registeredMetrics(t)
	exprs := monitoringExprs(t)
	if len(exprs) < 20 {
		t.Fatalf("only %d expressions read from deploy/monitoring", len(exprs))
	}
	used := map[string]bool{}
	for _, e := range exprs {
		labels := slices.Clone(targetLabels)
		names := promMetric.FindAllString(e.expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: %q queries no connector metric", e.where, e.expr)
		}
		for _, name := range names {
			m, ok := ms[name]
			if !ok {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if h, found := ms[strings.TrimSuffix(name, suffix)]; found && h.Type == "histogram" && strings.HasSuffix(name, suffix) {
						m, ok = h, true
						if suffix == "_bucket" {
							labels = append(labels, "le")
						}
					}
				}
			}
			if !ok {
				t.Errorf("%s: %s is not a metric the connector registers", e.where, name)
				continue
			}
			used[m.Name] = true
			labels = append(labels, m.Labels...)
		}
		var named []string
		for _, g := range promGrouping.FindAllStringSubmatch(e.expr, -1) {
			for l := range strings.SplitSeq(g[1], ",") {
				if l = strings.TrimSpace(l); l != "" {
					named = append(named, l)
				}
			}
		}
		for _, sel := range promMatchers.FindAllStringSubmatch(e.expr, -1) {
			for _, m := range promMatcher.FindAllStringSubmatch(sel[1], -1) {
				named = append(named, m[1])
			}
		}
		for _, m := range legendLabel.FindAllStringSubmatch(e.labelsText, -1) {
			named = append(named, m[1]+m[2])
		}
		for _, l := range named {
			if !slices.Contains(labels, l) {
				t.Errorf("%s: label %q is not a label of %v", e.where, l, names)
			}
		}
	}
	for _, name := range []string{"connector_gateway_connections", "connector_inbound_events_total", "connector_inbound_delivery_seconds",
		"connector_outbound_ops_total", "connector_outbound_seconds", "connector_buffered_events", "connector_buffered_bytes",
		"connector_ratelimit_wait_seconds", "connector_platform_ready", "connector_store_commit_seconds_total", "connector_leases_held",
		"connector_lease_lost_total", "connector_vault_store_errors_total", "connector_build_info"} {
		if !used[name] {
			t.Errorf("deploy/monitoring never queries %s", name)
		}
	}
}
