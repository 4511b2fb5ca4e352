package main

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkEventMetrics is what the relay reports to the metrics for one
// inbound event: queued, buffered after its append, delivered, buffered
// after its ack; over 1,000 tenants on one platform. "cached" is the
// metrics' own path (children), "WithLabelValues" resolves every child per
// call, as the metrics did before.
func BenchmarkEventMetrics(b *testing.B) {
	m := newMetrics()
	tenants := make([]string, 1000)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			t := tenants[i%len(tenants)]
			m.Inbound("telegram", t, "queued")
			m.Buffered(t, 1)
			m.Delivered("telegram", time.Millisecond)
			m.Buffered(t, 0)
		}
	})
	b.Run("WithLabelValues", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			t := tenants[i%len(tenants)]
			m.inbound.WithLabelValues("telegram", t, "queued").Inc()
			m.buffered.WithLabelValues(t).Set(1)
			m.deliveryDelay.WithLabelValues("telegram").Observe(time.Millisecond.Seconds())
			m.buffered.WithLabelValues(t).Set(0)
		}
	})
}
