package main

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"connector/platform"
	"connector/platform/slack"
	"connector/platform/whatsapp"
)

// TestResolvedSeriesAreTheLabelledOnes: what the relay reports through
// the series it resolved once (QueuedOf, BufferedOf) is exported under the
// same labels as what it reports by label values (Inbound, Buffered), and
// the two add to one series, not two.
func TestResolvedSeriesAreTheLabelledOnes(t *testing.T) {
	m := newMetrics()
	queued := m.QueuedOf("telegram", "t1")
	queued()
	queued()
	m.Inbound("telegram", "t1", "queued")
	m.QueuedOf("discord", "t2")()
	m.Buffered("t1", 7)
	m.BufferedOf("t1")(3)
	m.BufferedOf("t2")(5)

	got := map[string]float64{}
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "connector_inbound_events_total" && f.GetName() != "connector_buffered_events" {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = s.GetGauge().GetValue() + s.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"connector_inbound_events_total{outcome=queued,platform=telegram,tenant=t1}": 3,
		"connector_inbound_events_total{outcome=queued,platform=discord,tenant=t2}":  1,
		"connector_buffered_events{tenant=t1}":                                       3,
		"connector_buffered_events{tenant=t2}":                                       5,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("exported %v, want exactly %v", got, want)
	}
}

// TestConnectionGaugeCountsSocketsOfATenantNotServedYet: a socket of a
// tenant the metrics do not serve yet (the relay is told of a new tenant
// first) closes while another one opens; the one left open is counted.
// Before, the close read the gauge 0 and deleted the series between the
// open's resolving it and raising it: the open raised a series no longer
// exported (the gauge read 0), and its close, the tenant served by then,
// left it at -1.
func TestConnectionGaugeCountsSocketsOfATenantNotServedYet(t *testing.T) {
	m := newMetrics()
	for i := range 20000 {
		tenant := "t" + strconv.Itoa(i)
		m.ConnOpened(tenant)
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); <-start; m.ConnClosed(tenant) }()
		go func() { defer wg.Done(); <-start; m.ConnOpened(tenant) }()
		close(start)
		wg.Wait()
		var d dto.Metric
		if err := m.connections.WithLabelValues(tenant).Write(&d); err != nil {
			t.Fatal(err)
		}
		if n := d.GetGauge().GetValue(); n != 1 {
			t.Fatalf("round %d: the gauge of a tenant not served yet reads %v with one socket open, want 1", i, n)
		}
	}
}

// TestSeriesOfADeletedTenantCountedAfterItsDeletionGo: an event routed to a
// tenant after its deletion was applied (a platform's binding is applied
// after the metrics, another instance's route lags) is counted as
// dropped_unknown_tenant under the deleted tenant's id, as is a revoked
// socket's last ignored frame, and a WhatsApp delivery status; the next
// apply deletes those series too. Before, only the tenants of the previous apply
// were looked at, so each deleted tenant could leave series (and their
// cache entries) for good, growing with tenant churn.
func TestSeriesOfADeletedTenantCountedAfterItsDeletionGo(t *testing.T) {
	m := newMetrics()
	m.SetTenants(map[string]time.Time{"t1": {}, "t2": {}, "t3": {}, "t4": {}})
	m.SetTenants(map[string]time.Time{"t1": {}}) // t2, t3 and t4 deleted
	m.Inbound("discord", "t2", "dropped_unknown_tenant")
	m.FrameIgnored("t3", "malformed")                     // a revoked socket's last frame
	m.DeliveryStatus("whatsapp_cloud", "t4", "delivered") // before WhatsApp's tenants are applied
	m.DeliveryStatus("whatsapp_cloud", whatsapp.UnknownSender, "read")
	m.Inbound("discord", "t1", "queued")
	m.SetTenants(map[string]time.Time{"t1": {}})
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	unknown := false
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "tenant" && (l.GetValue() == "t2" || l.GetValue() == "t3" || l.GetValue() == "t4") {
					t.Errorf("%s still exports a series of a deleted tenant: %v", f.GetName(), s.GetLabel())
				}
				unknown = unknown || l.GetName() == "tenant" && l.GetValue() == whatsapp.UnknownSender
			}
		}
	}
	if !unknown {
		t.Error("the unknown sender's delivery status series went")
	}
	m.inboundOf.mu.RLock()
	defer m.inboundOf.mu.RUnlock()
	if _, ok := m.inboundOf.m[[3]string{"discord", "t2", "dropped_unknown_tenant"}]; ok {
		t.Error("the cache keeps the deleted tenant's series")
	}
}

// Slack's durable intake as watchPlatforms looks for it: a change of its
// signature would leave the intake series at 0 without a word.
var _ interface{ IntakeStats() (int, uint64) } = (*slack.Platform)(nil)

// intakePlatform is a platform with a durable intake.
type intakePlatform struct{ platform.Platform }

func (intakePlatform) Name() string                         { return "slack" }
func (intakePlatform) Status() platform.Status              { return platform.Status{Ready: true} }
func (intakePlatform) IntakeStats() (pending int, n uint64) { return 3, 7 }

// TestIntakeSeriesFollowThePlatformsIntake: connector_slack_intake_pending
// and connector_slack_intake_resumed_total read the platform's IntakeStats.
func TestIntakeSeriesFollowThePlatformsIntake(t *testing.T) {
	m := newMetrics()
	m.watchPlatforms([]platform.Platform{intakePlatform{}})
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			got[f.GetName()] = s.GetGauge().GetValue() + s.GetCounter().GetValue()
		}
	}
	if got["connector_slack_intake_pending"] != 3 || got["connector_slack_intake_resumed_total"] != 7 {
		t.Errorf("intake series %v and %v, want 3 and 7", got["connector_slack_intake_pending"], got["connector_slack_intake_resumed_total"])
	}
}
