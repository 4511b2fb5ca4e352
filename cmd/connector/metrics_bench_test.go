package main

import (
	"strconv"
	"testing"
	"time"

	"connector/contract"
)

// BenchmarkEventMetrics is what the relay reports to the metrics for one
// inbound event: queued, buffered after its append, delivered, buffered
// after its ack; over 1,000 tenants on one platform. "cached" is the
// metrics' own path (children), "per tenant" the relay's, whose queued
// series is resolved once per tenant and platform (QueuedOf, kept in the
// hub's map by platform) and Buffered series once per tenant (BufferedOf),
// "WithLabelValues" resolves every child per call, as the metrics did
// before.
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
	buffered := make([]func(int), len(tenants))
	queued := make([]map[string]func(), len(tenants))
	for i, t := range tenants {
		buffered[i] = m.BufferedOf(t)
		queued[i] = map[string]func(){"telegram": m.QueuedOf("telegram", t)}
	}
	b.Run("per tenant", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			queued[i%len(tenants)]["telegram"]()
			buffered[i%len(tenants)](1)
			m.Delivered("telegram", time.Millisecond)
			buffered[i%len(tenants)](0)
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

// BenchmarkOutboundMetrics is what one outbound op reports to the metrics:
// the platform's rate-limit wait before its call (reported on every call
// that waited at all, which with a real clock is nearly every call) and the
// relay's Outbound with its result; over the ops and two results of one
// platform. "cached" is the metrics' own path (children),
// "WithLabelValues" resolves every child per call, as the metrics did
// before.
func BenchmarkOutboundMetrics(b *testing.B) {
	m := newMetrics()
	ops := contract.Ops
	results := []string{"ok", contract.CodePlatformError}
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			op, result := ops[i%len(ops)], results[i%len(results)]
			m.RateLimitWait("telegram", time.Microsecond)
			m.Outbound("telegram", op, result, time.Millisecond)
		}
	})
	b.Run("WithLabelValues", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			op, result := ops[i%len(ops)], results[i%len(results)]
			m.rateWait.WithLabelValues("telegram").Observe(time.Microsecond.Seconds())
			m.outbound.WithLabelValues("telegram", op, result).Inc()
			m.outboundTime.WithLabelValues("telegram", op).Observe(time.Millisecond.Seconds())
		}
	})
}
