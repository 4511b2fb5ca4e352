package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"connector/internal/clock"
	"connector/platform"
	"connector/registry"
	"connector/relay"
	"connector/session"
)

// This file keeps the running connector in step with the registry: the
// YAML's tenants and routing (the declared layer) merged with what the
// admin API stored, applied to the relay's tenants and gateways, the
// platforms' routing tables and the tenants' session-key settings. It runs
// at start, after every admin change, on every registry change
// notification (another instance's change) and every registryPoll when the
// stored layer's revision moved, when a rotated-out secret's grace ends,
// and on SIGHUP with the re-read YAML.

// registryPoll is how often the registry is read again in case a change
// notification was lost.
const registryPoll = 5 * time.Second

// maxHeldBack bounds how long the periodic look waits before it applies
// again a revision a platform refused (a corrupt binding): from
// registryPoll, twice as long after each refusal.
const maxHeldBack = time.Minute

// live applies the registry to one running connector.
type live struct {
	reg     *registry.Registry
	relay   *relay.Server
	binders map[string]platform.Binder
	// relevance are the platforms that apply declared relevance policies.
	relevance map[string]platform.RelevanceTaker
	// keepers are the platforms, and the media store, that forget a
	// tenant's state with it.
	keepers []platform.TenantKeeper
	keys    *sessionKeys
	weights map[string]int // the tenants' relay weights (relayWeights)
	log     *slog.Logger
	metrics *adminMetrics
	clock   clock.Clock // times the expiry timer

	// turn is held (a value in it) by the apply under way: one at a
	// time; a channel, so catchUp can wait for it until its ctx ends.
	turn   chan struct{}
	expiry clock.Timer
	// applied is the stored layer's revision the last apply read, and
	// appliedOK whether that apply succeeded (applyChanged skips while
	// both hold).
	applied   registry.Revision
	appliedOK bool
	// heldUntil is when applyChanged may apply applied again after a
	// platform refused it (errTableRefused), held the wait before that
	// (maxHeldBack).
	heldUntil time.Time
	held      time.Duration
	// relayed is whether the relay took the registry at applied (catchUp
	// refuses while it did not).
	relayed bool
	// setAside are the scope claims the last apply found set aside by a
	// binding of another tenant (reportSetAside).
	setAside map[setAsideClaim]bool
	ctx      context.Context // ends the expiry timer's applies; nil before start and after stop

	// tenants is how many tenants the last apply served: the config's and
	// the admin API's.
	tenants atomic.Int64
}

// newLive keeps srv and the platforms that take bindings or relevance
// policies in step with reg, the relay's tenants with their weights.
func newLive(reg *registry.Registry, srv *relay.Server, platforms []platform.Platform, keys *sessionKeys, weights map[string]int, log *slog.Logger, am *adminMetrics) *live {
	l := &live{reg: reg, relay: srv, binders: map[string]platform.Binder{}, relevance: map[string]platform.RelevanceTaker{},
		keys: keys, weights: weights, log: log, metrics: am, clock: clock.System, turn: make(chan struct{}, 1)}
	for _, p := range platforms {
		if b, ok := p.(platform.Binder); ok {
			l.binders[p.Name()] = b
		}
		if rt, ok := p.(platform.RelevanceTaker); ok {
			l.relevance[p.Name()] = rt
		}
		if k, ok := p.(platform.TenantKeeper); ok {
			l.keepers = append(l.keepers, k)
		}
	}
	return l
}

// declared is the YAML's layer of the registry: its tenants, gateways and
// secrets, and the platform sections' routing.
func (c *Config) declared() registry.State {
	var s registry.State
	for _, t := range c.Tenants {
		session := t.Session
		s.Tenants = append(s.Tenants, registry.Tenant{ID: t.ID, Session: &session, MaxGateways: t.MaxGateways})
		for _, g := range t.Gateways {
			gw := registry.Gateway{ID: g.ID, Tenant: t.ID}
			for _, v := range g.Secrets {
				gw.Secrets = append(gw.Secrets, registry.Secret{Value: v})
			}
			s.Gateways = append(s.Gateways, gw)
		}
	}
	bind := func(platformName, kind string, ids map[string]string) { // id -> tenant
		for _, id := range slices.Sorted(maps.Keys(ids)) {
			s.Bindings = append(s.Bindings, registry.Binding{Platform: platformName, Kind: kind, ID: id, Tenant: ids[id]})
		}
	}
	if c.Discord != nil {
		bind("discord", platform.BindGuild, c.Discord.Guilds)
	}
	if c.Telegram != nil {
		bind("telegram", platform.BindChat, c.Telegram.Chats)
	}
	if c.Slack != nil {
		bind("slack", platform.BindTeam, c.Slack.Teams)
	}
	if c.WhatsApp != nil {
		bind("whatsapp_cloud", platform.BindPhoneNumber, c.WhatsApp.PhoneNumbers)
	}
	if c.Nexscope != nil {
		for _, r := range c.Nexscope.Rooms {
			if r.Tenant != "" {
				s.Bindings = append(s.Bindings, registry.Binding{Platform: "nexscope", Kind: platform.BindRoom, ID: r.Name, Tenant: r.Tenant})
			}
		}
	}
	return s
}

// relayWeights is each tenant's relay weight (relay.Tenant.Weight): the
// largest weight it has on a platform (<platform>.tenants.<t>.weight).
func (c *Config) relayWeights() map[string]int {
	w := make(map[string]int)
	take := func(tenant string, weight int) { w[tenant] = max(w[tenant], weight) }
	if c.Discord != nil {
		for t, tc := range c.Discord.Tenants {
			take(t, tc.Weight)
		}
	}
	if c.Telegram != nil {
		for t, tc := range c.Telegram.Tenants {
			take(t, tc.Weight)
		}
	}
	if c.Slack != nil {
		for t, tc := range c.Slack.Tenants {
			take(t, tc.Weight)
		}
	}
	if c.WhatsApp != nil {
		for t, tc := range c.WhatsApp.Tenants {
			take(t, tc.Weight)
		}
	}
	return w
}

// relayTenants converts a merged registry state for the relay, each
// tenant with its weight of weights.
func relayTenants(s registry.State, weights map[string]int) []relay.Tenant {
	out := make([]relay.Tenant, 0, len(s.Tenants))
	index := make(map[string]int, len(s.Tenants))
	for _, t := range s.Tenants {
		opts := t.Session.Options()
		index[t.ID] = len(out)
		out = append(out, relay.Tenant{ID: t.ID, Session: &opts, Created: t.Created, Weight: weights[t.ID]})
	}
	for _, g := range s.Gateways {
		i, ok := index[g.Tenant]
		if !ok {
			continue
		}
		secrets := make([]string, len(g.Secrets))
		for j, sec := range g.Secrets {
			secrets[j] = sec.Value
		}
		out[i].Gateways = append(out[i].Gateways, relay.Gateway{ID: g.ID, Secrets: secrets})
	}
	return out
}

// apply reads the merged registry and applies it. Each part is applied on
// its own: a platform refusing its table does not hold back the relay,
// nor the other platforms.
func (l *live) apply(ctx context.Context) error {
	l.lock()
	defer l.unlock()
	return l.applyLocked(ctx)
}

// applyChanged applies the registry unless its stored layer is at the
// revision the last apply read: with 100,000 gateways a look then costs
// four small reads instead of reading and applying every one of them. A
// revision a platform refused is applied again after heldUntil: a corrupt
// binding refuses it alike at every look, each logged.
// Everything else that changes the merge applies at once (admin changes,
// SIGHUP, a secret's grace ending).
func (l *live) applyChanged(ctx context.Context) {
	l.lock()
	defer l.unlock()
	rev, err := l.reg.Revision(ctx)
	if err == nil && rev == l.applied && (l.appliedOK || l.clock.Now().Before(l.heldUntil)) {
		return
	}
	_ = l.applyLocked(ctx)
}

// lock takes the turn, waiting for the apply under way.
func (l *live) lock() { l.turn <- struct{}{} }

// unlock gives the turn back.
func (l *live) unlock() { <-l.turn }

// catchUp is the relay's Config.CatchUp: for a delivery to a tenant the
// relay does not know (another instance may have applied it first), it
// applies the registry when its stored revision moved since the relay took
// it. While another apply runs (the watch's, an admin change's, another
// catch-up: most likely the one adding the tenant) it waits for it, until
// ctx ends, and goes on as it went. The delivery is refused when that
// apply, or the last one, failed (the watch tries again every
// registryPoll): not confirmed, which Telegram, Slack and WhatsApp deliver
// again, and a Discord or nexscope message loses (docs/durability.md),
// and refused when ctx ends first. So a flood of deliveries to a tenant
// gone or unknown costs one registry look at a time. The run holds the
// turn on a goroutine of its own, waited for until ctx ends, so a
// platform delivering under a lock its Bind takes holds the apply only
// that long.
func (l *live) catchUp(ctx context.Context) error {
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !l.relayed {
		l.unlock()
		return errCatchUpFailed
	}
	done := make(chan error, 1)
	go l.runCatchUp(done) // unlocks
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errCatchUpFailed is catchUp's refusal after an apply that failed.
var errCatchUpFailed = errors.New("registry: the last apply failed")

// catchUpTimeout bounds one run of catchUp.
const catchUpTimeout = 5 * time.Minute

// runCatchUp is catchUp's run, with the turn held, which it gives back;
// it sends its outcome on done. A look that fails counts as a failed
// apply, so the next catch-ups are refused until the watch's next apply.
func (l *live) runCatchUp(done chan<- error) {
	ctx, cancel := context.WithTimeout(context.Background(), catchUpTimeout)
	defer cancel()
	rev, err := l.reg.Revision(ctx)
	switch {
	case err != nil:
		l.relayed, l.appliedOK = false, false
	case rev != l.applied:
		if err = l.applyLocked(ctx); l.relayed {
			err = nil // the relay took it; a platform's refusal is logged
		}
	}
	l.unlock() // before done: the next catch-up finds the turn free
	done <- err
}

// errTableRefused is an apply's error once the relay took the registry
// and a platform refused its bindings: the rest is applied all the same.
// It names the platforms, and wraps the first one's refusal.
var errTableRefused = errors.New("registry: a platform refused its bindings")

// applyLocked is apply, called with the turn held.
func (l *live) applyLocked(ctx context.Context) error {
	failed := func(level slog.Level, msg string, err error, args ...any) error {
		l.metrics.applies.WithLabelValues("error").Inc()
		l.log.Log(ctx, level, msg, append(args, "err", err)...)
		return err
	}
	// Read before the layer itself, so a write in between is seen again
	// by the next look.
	rev, err := l.reg.Revision(ctx)
	if err != nil {
		return failed(slog.LevelWarn, "registry not applied: cannot read it", err)
	}
	l.applied, l.appliedOK, l.relayed, l.heldUntil = rev, false, false, time.Time{}
	s, next, err := l.reg.Effective(ctx)
	if err != nil {
		return failed(slog.LevelWarn, "registry not applied: cannot read it", err)
	}
	l.metrics.corrupt.Set(float64(len(s.Corrupt)))
	if len(s.Corrupt) > 0 {
		l.log.Error("registry entries passed over: they do not decode; fix or remove them", "entries", s.Corrupt)
	}
	if err := s.TenantsWhole(); err != nil {
		return failed(slog.LevelError, "registry not applied: a tenant record does not decode (fix it, or end the tenant: connector admin tenant rm)", err)
	}
	tenants := relayTenants(s, l.weights)
	// The creation times move before the relay applies, on purpose: the
	// vault (keys.since) then judges a tenant made again under its id by
	// its new creation before the relay lets the new tenant's gateways
	// connect, so none of them finds a capability the earlier tenant's
	// inbound stored (vault.Config.Since). The other order would give
	// them the earlier tenant's until keys.set. No gateway credential is
	// in keys: which gateways and secrets authenticate (the upgrade, and
	// the bearer of /relay/media, /relay/policy and /manage) is the
	// relay's alone, so this order accepts no key early and keeps no
	// removed one. The keepers follow the relay (the media store keeps
	// an upload begun once the relay knew its tenant).
	created := l.keys.set(tenants)
	if err := l.relay.SetTenants(tenants); err != nil {
		return failed(slog.LevelError, "registry not applied to the relay", err)
	}
	l.relayed = true
	for _, k := range l.keepers {
		k.SetTenants(created)
	}
	// A platform refusing its table (a binding stored by an older
	// version) holds back no other platform, nor the policies and the
	// secrets' expiry. One whose table lacks a corrupt entry keeps the
	// last (registry.State.Judgeable), as one refusing it.
	bindings := s.PlatformBindings()
	var names []string
	var refused error
	for name, b := range l.binders {
		err := s.Judgeable(name)
		if err == nil {
			err = b.Bind(bindings[name])
		}
		if err != nil {
			l.log.Error("registry bindings not applied", "platform", name, "err", err)
			names, refused = append(names, name), cmp.Or(refused, err)
		}
	}
	l.reportSetAside(bindings)
	policies := s.Relevance(slices.Collect(maps.Keys(l.relevance)))
	for name, rt := range l.relevance {
		rt.SetRelevance(policies[name])
	}
	l.schedule(next)
	l.tenants.Store(int64(len(s.Tenants)))
	if refused != nil {
		l.metrics.applies.WithLabelValues("error").Inc()
		slices.Sort(names)
		l.held = min(max(2*l.held, registryPoll), maxHeldBack)
		l.heldUntil = l.clock.Now().Add(l.held)
		return fmt.Errorf("%w (%s): %w", errTableRefused, strings.Join(names, ", "), refused)
	}
	l.appliedOK, l.held = true, 0
	l.metrics.applies.WithLabelValues("ok").Inc()
	l.log.Debug("registry applied", "tenants", len(s.Tenants), "gateways", len(s.Gateways), "bindings", len(s.Bindings))
	return nil
}

// setAsideClaim is a set-aside scope claim of a platform.
type setAsideClaim struct {
	platformName string
	platform.SetAsideClaim
}

// reportSetAside logs each scope claim a binding of another tenant sets
// aside (platform.Ownership.SetAside: the claim stays stored, routing and
// egress ignore it) when it first finds it, and one line when it is no
// longer set aside (released, replaced, or the binding gone), and sets
// the gauge of set-aside claims per platform. Called with the turn held.
func (l *live) reportSetAside(bindings map[string][]platform.Binding) {
	now := make(map[setAsideClaim]bool)
	for name := range l.binders {
		claims := platform.NewOwnership(bindings[name]).SetAside()
		l.metrics.setAside.WithLabelValues(name).Set(float64(len(claims)))
		for _, c := range claims {
			k := setAsideClaim{name, c}
			now[k] = true
			if !l.setAside[k] {
				l.log.Warn("scope claim set aside", "platform", name, "chat_id", c.Claim.ID, "claimant", c.Claim.Tenant, "owner", c.Owner,
					"why", "the chat is bound to another tenant; the claim is ignored until the claimant releases it or the owner claims the chat")
			}
		}
	}
	for k := range l.setAside {
		if !now[k] {
			l.log.Info("scope claim no longer set aside", "platform", k.platformName, "chat_id", k.Claim.ID, "claimant", k.Claim.Tenant, "owner", k.Owner)
		}
	}
	l.setAside = now
}

// schedule arranges an apply at next, when a secret's grace ends; zero
// cancels it. Called with the turn held.
func (l *live) schedule(next time.Time) {
	if l.expiry != nil {
		l.expiry.Stop()
		l.expiry = nil
	}
	if next.IsZero() || l.ctx == nil {
		return
	}
	l.expiry = l.clock.AfterFunc(next.Sub(l.clock.Now()), func() {
		l.lock()
		defer l.unlock()
		if l.ctx != nil && l.ctx.Err() == nil { // not stopped meanwhile
			_ = l.applyLocked(l.ctx)
		}
	})
}

// start begins following the registry until ctx is done: change
// notifications, the periodic look and secret expiries.
func (l *live) start(ctx context.Context) error {
	l.lock()
	l.ctx = ctx
	l.unlock()
	if err := l.reg.Watch(ctx, registryPoll, func() { l.applyChanged(ctx) }); err != nil {
		return err
	}
	return l.apply(ctx)
}

// stop ends the expiry timer; an apply after it (an admin change, a
// notification before start's ctx ends) arms none.
func (l *live) stop() {
	l.lock()
	defer l.unlock()
	l.ctx = nil
	l.schedule(time.Time{})
}

// sessionKeys is the platforms' session-key function, following each
// tenant's session settings as the registry changes them.
type sessionKeys struct {
	fn atomic.Pointer[platform.KeyFunc]
	// created is when each tenant was created (relay.Tenant.Created,
	// zero for a declared one), as the registry last applied says.
	created atomic.Pointer[map[string]time.Time]
}

// set follows tenants' session settings and creation times, and returns
// the creation times (platform.TenantKeeper's map).
func (k *sessionKeys) set(tenants []relay.Tenant) map[string]time.Time {
	fn := relay.KeyFunc(tenants)
	created := make(map[string]time.Time, len(tenants))
	for _, t := range tenants {
		created[t.ID] = t.Created
	}
	k.fn.Store(&fn)
	k.created.Store(&created)
	return created
}

// since is the vault's Config.Since: when tenant was created, zero when
// it was declared, or stored before creation times were kept, or is not
// known.
func (k *sessionKeys) since(tenant string) time.Time { return (*k.created.Load())[tenant] }

// known is the vault's Config.Known: whether the registry last applied
// holds tenant (a deleted one's since is zero, as a declared one's).
func (k *sessionKeys) known(tenant string) bool {
	_, ok := (*k.created.Load())[tenant]
	return ok
}

// key is the platform.KeyFunc the platforms are built with.
func (k *sessionKeys) key(tenant string, src *session.Source) string {
	return (*k.fn.Load())(tenant, src)
}

// adminMetrics counts the changes of the admin API and of the routes
// gateways and identities change the registry through, registry applies
// and SIGHUP reloads.
type adminMetrics struct {
	changes *prometheus.CounterVec // the admin API's
	// gateways are the changes made without the admin token (gatewayChanges).
	gateways *prometheus.CounterVec
	refused  prometheus.Counter
	applies  *prometheus.CounterVec
	reloads  *prometheus.CounterVec
	// setAside is the number of stored scope claims a binding of another
	// tenant sets aside, per platform (live.reportSetAside).
	setAside *prometheus.GaugeVec
	// corrupt is the number of stored registry entries the last apply
	// passed over (registry.State.Corrupt).
	corrupt prometheus.Gauge
}

// Results of connector_config_reloads_total.
const (
	reloadOK         = "ok"
	reloadUnreadable = "unreadable"
	reloadNotApplied = "not_applied"
)

func newAdminMetrics(pm *metrics) *adminMetrics {
	const outcomes = "ok, invalid, not_found, exists, declared, conflict, limit, rate_limited, refused, unauthorized, forbidden, unavailable, not_configured, error"
	m := &adminMetrics{
		changes: counterVec("connector_admin_changes_total",
			"Admin API requests (/admin/v1/) that change or copy the registry, by op and outcome ("+outcomes+").", "op", "outcome"),
		gateways: counterVec("connector_gateway_changes_total",
			"Registry changes made without the admin token, by gateways (/relay/policy), the Hermes identity authority's tokens (/relay/enroll, /relay/provision, /manage/*) and users redeeming a /link code, by op and outcome ("+outcomes+").", "op", "outcome"),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "connector_admin_refused_total", Help: "Admin API requests refused for a missing or wrong token."}),
		applies: counterVec("connector_registry_applies_total",
			"Registry applies (start, admin change, change notification, poll, secret expiry, SIGHUP) by result: ok or error.", "result"),
		reloads: counterVec("connector_config_reloads_total",
			"SIGHUP config reloads by result: ok, unreadable (the file did not parse or validate; the running config stays) or not_applied.", "result"),
		setAside: gaugeVec("connector_scope_claims_set_aside",
			"Stored scope claims that a binding of another tenant (configuration or admin API) sets aside, per platform: kept in the store, ignored by routing and egress.", "platform"),
		corrupt: prometheus.NewGauge(prometheus.GaugeOpts{Name: "connector_registry_corrupt_entries",
			Help: "Stored registry entries the last apply passed over as they do not decode (logged): their gateway, binding or policy is left out, and a platform whose binding is corrupt judges no claim and keeps its last routing table; a corrupt tenant record stops the apply (the tenant would be taken for deleted) and every claim."}),
	}
	pm.register(m.changes, m.gateways, m.refused, m.applies, m.reloads, m.setAside, m.corrupt)
	m.applies.WithLabelValues("ok")
	m.applies.WithLabelValues("error")
	for _, r := range []string{reloadOK, reloadUnreadable, reloadNotApplied} {
		m.reloads.WithLabelValues(r)
	}
	return m
}

// AdminChange implements admin.Metrics.
func (m *adminMetrics) AdminChange(op, outcome string) { m.changes.WithLabelValues(op, outcome).Inc() }

// gatewayChanges counts the changes of the routes that take no admin token
// (the management plane, enrollment, /relay/policy) in
// connector_gateway_changes_total.
type gatewayChanges struct{ m *adminMetrics }

// AdminChange implements change.Metrics.
func (g gatewayChanges) AdminChange(op, outcome string) {
	g.m.gateways.WithLabelValues(op, outcome).Inc()
}

// AdminRefused implements admin.Metrics.
func (m *adminMetrics) AdminRefused() { m.refused.Inc() }
