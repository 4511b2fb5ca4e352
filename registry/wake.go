package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"connector/contract"
	"connector/wake"
)

// nsWake holds the gateways' wake URLs, keyed by gateway id.
const nsWake = "registry/wake"

// Wake is a gateway's registered wake URL (Hermes contract §3.3): the
// connector GETs it when inbound is buffered for the gateway's tenant while
// no connection can take it. Only the stored layer has wake URLs; a
// declared (YAML) gateway may have one too.
type Wake struct {
	Gateway string `json:"gateway"`
	Tenant  string `json:"tenant"`
	URL     string `json:"url"`
}

// SetWake registers rawURL (checked by wake.ValidateURL) as the wake URL of
// gateway of tenant, replacing its earlier one; an empty rawURL removes it.
func (r *Registry) SetWake(ctx context.Context, tenant, gateway, rawURL string) error {
	if rawURL != "" {
		if _, err := wake.ValidateURL(rawURL); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	done, err := r.tenantTurn(ctx, tenant)
	if err != nil {
		return err
	}
	defer done()
	t, err := r.tenant(ctx, tenant)
	if err != nil {
		return err
	}
	return r.writeWake(ctx, tenant, t.Gen, gateway, rawURL)
}

// writeWake makes rawURL ("": none) the wake URL of gateway of tenant, read
// of generation gen, with the store's CompareAndSwap from the entry it
// read (again while another writer changes it meanwhile). A URL is looked
// at again after the write: when the gateway is no longer the tenant's (a
// deletion and a re-creation by another tenant, on any instance) or the
// tenant's deletion began, the entry is put back as it was and it is
// ErrNotFound. So a wake URL never replaces or removes one another tenant
// registered for its gateway of the id, nor, written stamped, the same
// URL the tenant made again under the id registered since. A URL the replicas did not
// acknowledge (store.ErrNotReplicated) is put back too, and is that error.
func (r *Registry) writeWake(ctx context.Context, tenant, gen, gateway, rawURL string) error {
	return againIfRaced(func() error {
		if ok, err := r.GatewayOf(ctx, tenant, gateway); err != nil || !ok {
			return cmp.Or(err, ErrNotFound)
		}
		if rawURL == "" {
			err := r.dropWake(ctx, tenant, gateway)
			r.notify(ctx)
			return err
		}
		e, _, err := r.kv.Get(ctx, nsWake, gateway)
		if err != nil {
			return err
		}
		value, err := stamped(Wake{Gateway: gateway, Tenant: tenant, URL: rawURL})
		if err != nil {
			return err
		}
		if swapped, err := r.swap(ctx, nsWake, gateway, e.Value, value); err != nil || !swapped {
			return cmp.Or(err, errRaced)
		}
		undo := func(ctx context.Context) error {
			_, err := r.kv.CompareAndSwap(ctx, nsWake, gateway, value, e.Value)
			return err
		}
		kept := gen
		if ok, err := r.GatewayOf(ctx, tenant, gateway); err != nil || !ok {
			kept = tombstone // of no tenant: keptFor takes the URL back
		}
		if err := r.keptFor(ctx, tenant, kept, undo); err != nil {
			return err
		}
		r.notify(ctx)
		return nil
	})
}

// dropWake removes gateway's wake URL when tenant registered it, or it
// does not decode: another tenant's, for its gateway made again under the
// id, stays.
func (r *Registry) dropWake(ctx context.Context, tenant, gateway string) error {
	e, ok, err := r.kv.Get(ctx, nsWake, gateway)
	if err != nil || !ok {
		return err
	}
	var w Wake
	if json.Unmarshal(e.Value, &w) == nil && w.Tenant != tenant {
		return nil
	}
	_, err = r.kv.CompareAndSwap(ctx, nsWake, gateway, e.Value, nil)
	return err
}

// Wakes returns every registered wake URL by tenant, then gateway id: a
// URL belongs to the tenant that registered it, so a gateway of the same
// id declared for another tenant later (a SIGHUP) has none.
func (r *Registry) Wakes(ctx context.Context) (map[string]map[string]string, error) {
	var wakes []Wake
	if err := list(ctx, r, nsWake, &wakes, nil); err != nil {
		return nil, err
	}
	out := make(map[string]map[string]string)
	for _, w := range wakes {
		if out[w.Tenant] == nil {
			out[w.Tenant] = make(map[string]string)
		}
		out[w.Tenant][w.Gateway] = w.URL
	}
	return out, nil
}

// WakeTargets returns the wake URLs of tenant's gateways: those registered
// for a gateway that still belongs to the tenant.
func (r *Registry) WakeTargets(ctx context.Context, tenant string) ([]wake.Target, error) {
	wakes, err := r.wakesOf(ctx, tenant)
	if err != nil {
		return nil, err
	}
	var out []wake.Target
	for gateway, url := range wakes {
		if ok, err := r.GatewayOf(ctx, tenant, gateway); err != nil {
			return nil, err
		} else if ok {
			out = append(out, wake.Target{Tenant: tenant, Gateway: gateway, URL: url})
		}
	}
	return out, nil
}

// wakesOf returns tenant's wake URLs by gateway id. It lists every
// tenant's only when a wake URL changed (nsWake's revision), on any
// instance, since the last listing: a poke (one per tenant and cooldown)
// costs one small read, not 10,000 tenants' URLs.
func (r *Registry) wakesOf(ctx context.Context, tenant string) (map[string]string, error) {
	rev, err := r.kv.Revision(ctx, nsWake)
	if err != nil {
		return nil, err
	}
	r.wakesMu.Lock()
	defer r.wakesMu.Unlock()
	if r.wakes == nil || rev != r.wakesRev {
		wakes, err := r.Wakes(ctx) // read after rev: as of it or later
		if err != nil {
			return nil, err
		}
		r.wakes, r.wakesRev = wakes, rev
	}
	return r.wakes[tenant], nil
}

// GatewayOf reports whether gateway id belongs to tenant, in the declared
// layer or, unless the YAML declares the id, the stored one.
func (r *Registry) GatewayOf(ctx context.Context, tenant, id string) (bool, error) {
	g, ok, err := r.gatewayNamed(ctx, id)
	return ok && g.Tenant == tenant, err
}

// GatewayHolds is GatewayOf for a gateway that authenticated with key
// (contract.Token.Match's): the gateway must still have the secret too. A
// gateway made again under the id (its tenant deleted and created again,
// on any instance) has secrets of its own, so a token of the earlier one,
// which an instance that has not applied the change still takes, is not
// the new gateway's.
func (r *Registry) GatewayHolds(ctx context.Context, tenant, id string, key []byte) (bool, error) {
	g, ok, err := r.gatewayNamed(ctx, id)
	if err != nil || !ok || g.Tenant != tenant {
		return false, err
	}
	var secrets []string
	for _, s := range g.liveSecrets(r.clock.Now()) {
		secrets = append(secrets, s.Value)
	}
	keys, err := contract.NewTokenKeys(secrets)
	return err == nil && keys.Holds(key), nil
}

// gatewayNamed returns gateway id, declared or, unless the YAML declares
// the id, stored.
func (r *Registry) gatewayNamed(ctx context.Context, id string) (Gateway, bool, error) {
	for _, g := range r.declared.Load().Gateways {
		if g.ID == id {
			return g, true, nil
		}
	}
	var g Gateway
	_, ok, err := r.getRaw(ctx, nsGateways, id, &g)
	return g, ok, err
}
