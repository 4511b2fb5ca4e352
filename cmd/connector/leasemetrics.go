package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"connector/store"
)

// leaseMetrics counts the leases this instance takes, keeps and loses
// among the instances sharing a redis store: a tenant's delivery, an
// ingest (the Discord Gateway session, the Telegram long poll, a nexscope
// room). Labels are the lease's kind (leaseKind), never a tenant or room.
type leaseMetrics struct {
	held     *prometheus.GaugeVec
	acquired *prometheus.CounterVec
	lost     *prometheus.CounterVec

	mu      sync.Mutex
	holding map[string]bool // the names of the leases held
}

func newLeaseMetrics(m *metrics) *leaseMetrics {
	l := &leaseMetrics{
		held: gaugeVec("connector_leases_held",
			"Leases this instance holds among the instances sharing the redis store, by kind: tenant (a tenant's delivery), discord_gateway, telegram_poll, nexscope_room, ...", "kind"),
		acquired: counterVec("connector_lease_acquired_total",
			"Leases this instance took over (a new tenure: at start, after a release or after the holder's lease ran out), by kind.", "kind"),
		lost: counterVec("connector_lease_lost_total",
			"Leases this instance held and lost while it lived, by kind: found taken by another instance (or expired) when it renewed them, or given up because no renewal succeeded in time (counted at the next bid: taken again, found another instance's, or failed with the store unreachable). A false takeover when no instance died.", "kind"),
		holding: map[string]bool{},
	}
	m.register(l.held, l.acquired, l.lost)
	return l
}

// leaseKind is the kind label of lease name: its path without the tenant's
// or room's id.
func leaseKind(name string) string {
	switch {
	case strings.HasPrefix(name, "relay/tenant/"):
		return "tenant"
	case strings.HasPrefix(name, "ingest/nexscope/room/"):
		return "nexscope_room"
	case strings.HasPrefix(name, "ingest/"):
		return strings.ReplaceAll(strings.TrimPrefix(name, "ingest/"), "/", "_")
	}
	return "other"
}

// count wraps st so the leases taken through it are counted.
func (l *leaseMetrics) count(st store.Store) store.Store {
	return countedStore{Store: st, leases: countedLeases{Leases: st.Leases(), m: l}}
}

// countedStore is a store whose Leases are counted.
type countedStore struct {
	store.Store
	leases countedLeases
}

// Leases implements store.Store.
func (s countedStore) Leases() store.Leases { return s.leases }

// countedLeases counts a store's leases in leaseMetrics.
type countedLeases struct {
	store.Leases
	m *leaseMetrics
}

// Acquire implements store.Leases.
func (c countedLeases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, bool, error) {
	l, acquired, err := c.Leases.Acquire(ctx, name, holder, ttl)
	switch {
	case err == nil && acquired:
		c.m.took(name)
	case c.m.gone(name): // given up unrenewed, and another instance's now or the store unreachable
		c.m.lost.WithLabelValues(leaseKind(name)).Inc()
	}
	return l, acquired, err
}

// Renew implements store.Leases.
func (c countedLeases) Renew(ctx context.Context, name string, l store.Lease, ttl time.Duration) (store.Lease, error) {
	nl, err := c.Leases.Renew(ctx, name, l, ttl)
	if errors.Is(err, store.ErrNotHeld) && c.m.gone(name) {
		c.m.lost.WithLabelValues(leaseKind(name)).Inc()
	}
	return nl, err
}

// Release implements store.Leases.
func (c countedLeases) Release(ctx context.Context, name string, l store.Lease) error {
	c.m.gone(name)
	return c.Leases.Release(ctx, name, l)
}

// took records lease name held: a new tenure. The instance acquires a
// lease only when it does not hold it (store.Tenure renews a held one), so
// a lease it still counts as held was given up unrenewed (store.Tenure's
// view expired): lost, and now a new tenure, whatever its token.
func (l *leaseMetrics) took(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	kind := leaseKind(name)
	if l.holding[name] {
		l.lost.WithLabelValues(kind).Inc()
	} else {
		l.held.WithLabelValues(kind).Inc()
	}
	l.holding[name] = true
	l.acquired.WithLabelValues(kind).Inc()
}

// gone forgets lease name, reporting whether it was held.
func (l *leaseMetrics) gone(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.holding[name] {
		return false
	}
	delete(l.holding, name)
	l.held.WithLabelValues(leaseKind(name)).Dec()
	return true
}
