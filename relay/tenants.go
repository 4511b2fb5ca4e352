package relay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"connector/contract"
)

// This file owns the relay's tenant and gateway tables: which gateway ids
// may connect, with which secrets, for which tenant. New fills them from
// Config.Tenants and SetTenants replaces them while the relay runs.

// ReasonRevoked is the close reason of a connection whose gateway was
// removed (or moved to another tenant) while it was connected; the close
// code is contract.CloseUnauthorized, as for a refused upgrade.
const ReasonRevoked = contract.ReasonRevoked

// hub returns tenant id's hub, nil when the relay never served it.
func (s *Server) hub(id string) *hub {
	s.regMu.RLock()
	defer s.regMu.RUnlock()
	return s.tenants[id]
}

// hubs returns every tenant's hub.
func (s *Server) hubs() []*hub {
	s.regMu.RLock()
	defer s.regMu.RUnlock()
	return slices.Collect(maps.Values(s.tenants))
}

// gateway returns gateway id's record, nil when no tenant has it.
func (s *Server) gateway(id string) *gatewayRecord {
	s.regMu.RLock()
	defer s.regMu.RUnlock()
	return s.gateways[id]
}

// checkTenants validates tenants without changing anything: ids present
// and unique, each gateway with 1 to contract.MaxSecretsPerGateway
// secrets. It returns each gateway's token keys.
func checkTenants(tenants []Tenant) (map[string]contract.TokenKeys, error) {
	seen := make(map[string]bool, len(tenants))
	keys := make(map[string]contract.TokenKeys)
	for _, t := range tenants {
		if t.ID == "" {
			return nil, errors.New("relay: a tenant has an empty id")
		}
		if seen[t.ID] {
			return nil, fmt.Errorf("relay: tenant %q configured twice", t.ID)
		}
		seen[t.ID] = true
		for _, g := range t.Gateways {
			if g.ID == "" {
				return nil, fmt.Errorf("relay: tenant %q has a gateway with an empty id", t.ID)
			}
			if len(g.Secrets) == 0 {
				return nil, fmt.Errorf("relay: gateway %q has no secrets", g.ID)
			}
			if _, dup := keys[g.ID]; dup {
				return nil, fmt.Errorf("relay: gateway %q configured twice", g.ID)
			}
			k, err := contract.NewTokenKeys(g.Secrets)
			if err != nil {
				return nil, fmt.Errorf("relay: gateway %q: %w", g.ID, err)
			}
			keys[g.ID] = k
		}
	}
	return keys, nil
}

// SetTenants replaces the tenants and gateways the relay serves, without
// touching the connections of gateways that stay under the same tenant:
//
//   - a new tenant gets its ledger (recovering what the store holds for
//     it, as New does; among several instances, one of them takes it in)
//     and a new gateway id may connect at once;
//   - a gateway whose secrets changed accepts upgrades signed with the new
//     set from now on; its open connections on a secret the set no longer
//     has are closed with 4401 "revoked";
//   - a gateway that is gone, or moved to another tenant, has its open
//     connections, and those whose upgrade is under way, closed with 4401
//     "revoked", and its later upgrades are refused with 4401
//     "unauthorized";
//   - a tenant that is gone has its gateways go and its hub freed
//     (hub.release): among several instances its lease is given up. A
//     declared tenant (Created zero) keeps its buffered inbound in the
//     store until buffer_max_age, for its next hub; a stored one (Created
//     set) was deleted: its buffered inbound is dropped (Ledger.Begin) and
//     its session owners and chat profiles are forgotten;
//   - a tenant declared in the YAML now, or no longer, over its stored
//     tenant (Created zero, or back to the time it had before, or set where
//     the hub knew only the declared tenant) is the same tenant: it keeps
//     its state and its connections;
//   - a tenant whose Created changed to another time was deleted and
//     created again under its id: the earlier tenant's connections are
//     closed with 4401 "revoked" (their outbound ops still running
//     cancelled) and its state dropped as a deleted tenant's, before the
//     new tenant's gateways may connect; among several instances the new
//     tenant has its own lease (leaseName) and generation
//     (ledger.Ledger.SetSince), so an instance that has not applied the
//     change yet mixes neither tenant's inbound with the other's
//     (docs/operations.md).
//
// An invalid set changes nothing.
func (s *Server) SetTenants(tenants []Tenant) error {
	keys, err := checkTenants(tenants)
	if err != nil {
		return err
	}
	// revoked maps each gateway whose connections close to whether only
	// those on a secret it no longer has do.
	revoked := make(map[*gatewayRecord]bool)
	var added, renewed, declared, gone []*hub
	s.regMu.Lock()
	owner := make(map[string]string, len(keys))
	// later are the tenants made again, whose gateways are added once the
	// earlier tenant's state is gone.
	later := make(map[string]*hub)
	kept := make(map[string]bool, len(tenants))
	for i := range tenants {
		t := &tenants[i]
		kept[t.ID] = true
		switch h := s.tenants[t.ID]; {
		case h == nil:
			s.tenants[t.ID] = s.newHub(t)
			added = append(added, s.tenants[t.ID])
		case !h.created.Equal(t.Created) && !t.Created.IsZero() && !h.storedAt.IsZero() && !h.storedAt.Equal(t.Created):
			h.created, h.storedAt = t.Created, t.Created
			renewed = append(renewed, h)
			later[t.ID] = h
		case !h.created.Equal(t.Created):
			// Declared in the YAML now, which shadows the stored tenant,
			// or no longer (the declaration dropped, or a SIGHUP reload
			// that failed rolled back), the stored tenant the hub knew
			// (or knew none of) back: the same tenant, which keeps its
			// state and connections.
			h.created = t.Created
			if !t.Created.IsZero() {
				h.storedAt = t.Created
			}
			declared = append(declared, h)
		}
		for _, g := range t.Gateways {
			owner[g.ID] = t.ID
		}
	}
	if s.fleet != nil {
		s.fleet.shareOwners(tenants)
	}
	for id, h := range s.tenants {
		if !kept[id] {
			delete(s.tenants, id)
			gone = append(gone, h)
		}
	}
	for id, gw := range s.gateways {
		if owner[id] != gw.tenant.id || later[gw.tenant.id] != nil {
			delete(s.gateways, id)
			revoked[gw] = false
		}
	}
	s.addGatewaysLocked(keys, owner, func(tenant string) bool { return later[tenant] == nil }, revoked)
	s.regMu.Unlock()
	if len(revoked) > 0 {
		s.closeGateways(revoked)
	}
	for _, h := range declared {
		h.redeclare()
	}
	for _, h := range gone {
		if !h.created.IsZero() {
			n := h.drop(s.cfg.Clock.Now())
			s.log.Info("tenant deleted: its buffered inbound dropped", "tenant", h.id, "entries", n)
		}
		h.release()
	}
	if len(renewed) > 0 {
		for _, h := range renewed {
			h.renew()
			if s.fleet == nil && s.recovered.Load() {
				// What a platform routed under the new creation before the
				// relay applied it was left in the store (ledger.Ledger.Append):
				// read once its gateways may connect, so a slow store does
				// not refuse them, and offered before what comes meanwhile.
				h.ledger.Hold()
				added = append(added, h)
			}
		}
		s.regMu.Lock()
		s.addGatewaysLocked(keys, owner, func(tenant string) bool { return later[tenant] != nil }, revoked)
		s.regMu.Unlock()
	}
	// The tenants added are read from the store tenantWorkers at a time,
	// under one deadline: a store that hangs holds the apply that long,
	// not that long for each of them.
	if s.recovered.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), recoverTimeout)
		forEach(added, func(h *hub) { s.recoverAdded(ctx, h) })
		cancel()
	}
	if s.fleet != nil && s.fleet.started.Load() {
		ctx, cancel := context.WithTimeout(s.fleet.ctx, s.fleet.node.LeaseTTL())
		forEach(added, func(h *hub) { s.fleet.markStored(ctx, h) })
		cancel()
	}
	return nil
}

// addGatewaysLocked adds or updates, under regMu, the gateways in keys
// of the tenants that pick, and marks in revoked those that keep only the
// connections on a secret they still have.
func (s *Server) addGatewaysLocked(keys map[string]contract.TokenKeys, owner map[string]string, pick func(tenant string) bool, revoked map[*gatewayRecord]bool) {
	for id, k := range keys {
		if !pick(owner[id]) {
			continue
		}
		gw := s.gateways[id]
		if gw == nil {
			gw = &gatewayRecord{id: id, tenant: s.tenants[owner[id]], admission: newAdmission(s.cfg.MaxConnsPerGateway)}
			s.gateways[id] = gw
		} else if !gw.keys.Load().HeldBy(&k) {
			revoked[gw] = true
		}
		gw.keys.Store(&k)
	}
}

// createdAt is h.created, read under regMu.
func (h *hub) createdAt() time.Time {
	h.srv.regMu.RLock()
	defer h.srv.regMu.RUnlock()
	return h.created
}

// renew drops the state of the earlier tenant of h's id, deleted and
// created again (SetTenants), whose connections were closed: among
// several instances its role (the earlier tenant's lease), then its
// buffered inbound, session owners, chats and profiles (drop).
func (h *hub) renew() {
	created := h.createdAt()
	if h.fleet != nil {
		h.fleet.renew(created)
	}
	n := h.drop(created)
	h.srv.log.Info("tenant created again under its id: the earlier tenant's connections closed and its state dropped", "tenant", h.id, "entries", n)
}

// drop drops the tenant's buffered inbound received before since, from
// memory and the store (Ledger.Begin), its session owners, and its chats'
// platforms and profiles, and reports how many entries it dropped: what a
// tenant deleted (stored through the registry, so gone for good), or
// deleted and created again, leaves.
func (h *hub) drop(since time.Time) int {
	// The profiles go first: a delivery judged the ledger's generation
	// once Begin took since (stampProfile) finds none of them.
	h.chatsMu.Lock()
	h.drops.Add(1)
	h.chats.Purge()
	h.profiles.Purge()
	h.chatsMu.Unlock()
	return h.ledger.Begin(since)
}

// release frees the hub of a tenant gone from the tenants (SetTenants),
// whose connections were closed: among several instances its lease is
// given up and its loop ends (tenantFleet.leave), and its ledger leaves
// memory and the pool (the store keeps what it holds: a declared tenant's
// buffered inbound waits there until buffer_max_age, for the tenant's
// next hub if it comes back).
func (h *hub) release() {
	if h.fleet != nil {
		h.fleet.leave()
	}
	h.srv.ledgers.Forget(h.ledger)
}

// redeclare follows a change of h's generation that is no new tenant (a
// stored tenant now declared in the YAML, which shadows it, or declared
// no longer): the tenant keeps its state; among several instances it has
// the lease of its generation.
func (h *hub) redeclare() {
	created := h.createdAt()
	h.ledger.SetSince(created)
	if h.fleet != nil {
		h.fleet.renew(created)
	}
}

// recoverAdded reads what the store holds for h, a tenant added, or
// created again, after New recovered the others' (among several instances
// its driver reads it when it takes the tenant's lease). A failure is
// logged: the entries stay in the store for the next start.
func (s *Server) recoverAdded(ctx context.Context, h *hub) {
	n, err := h.ledger.Tail(ctx)
	if err != nil {
		s.log.Warn("buffered inbound of a tenant added or created again not read from the store: it is delivered after the next start", "tenant", h.id, "err", err)
	} else if n > 0 {
		s.log.Info("buffered inbound recovered from the store", "tenant", h.id, "entries", n)
	}
}

// closeGateways closes with 4401 "revoked" every open connection of each
// gateway in revoked, or only those on a secret it no longer has where
// revoked says so, and revokes those that ended already but still run
// outbound ops (conn.unrevoked).
func (s *Server) closeGateways(revoked map[*gatewayRecord]bool) {
	hit := func(c *conn) bool {
		stale, ok := revoked[c.gw]
		return ok && (!stale || !c.gw.keys.Load().Holds(c.secret))
	}
	s.mu.Lock()
	var conns []*conn
	for _, c := range s.conns {
		if hit(c) {
			conns = append(conns, c)
		}
	}
	for op := range s.ops {
		if s.conns[op.c.key] != op.c && hit(op.c) {
			op.c.revoke()
		}
	}
	s.mu.Unlock()
	closed := make(map[*gatewayRecord]int)
	for _, c := range conns {
		c.closeWith(contract.EndRevoked)
		closed[c.gw]++
	}
	for gw, n := range closed {
		s.log.Info("gateway revoked: its connections closed", "tenant", gw.tenant.id, "gateway_id", gw.id, "conns", n)
	}
}
