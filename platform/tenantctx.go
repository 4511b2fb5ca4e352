package platform

import (
	"context"
	"time"

	"connector/vault"
)

type tenantKey struct{}

// creationKey carries the tenant's creation as its action was dispatched
// (WithCreation), else as Execute authorized its op.
type creationKey struct{}

// WithCreation marks ctx as carrying an action its dispatcher (the relay)
// took from a connection of a tenant created at created (zero: declared,
// or created before creations were kept): Execute declines it once the
// vault knows another creation of its tenant (deleted and made again under
// its id since), and what its op records keeps created
// (AuthorizedCreation).
func WithCreation(ctx context.Context, created time.Time) context.Context {
	return context.WithValue(ctx, creationKey{}, created)
}

// WithTenant marks ctx as carrying a call made on tenant's behalf: every
// caller of ChatTenant sets it (Authorize, the relay's routing), and a
// platform's REST calls under it are charged to that tenant (Discord's fair
// share of the global budget, and the decline memory of an instance without
// the Discord Gateway).
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantOf returns the tenant WithTenant put in ctx, "" when none.
func TenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// AuthorizedCreation is tenant's creation as its action was dispatched
// (WithCreation) or its op authorized (Execute puts it in ctx), else as v
// knows it now (vault.Creation). A
// record an op writes after its platform call keeps it, so one that
// returns once its tenant was deleted and made again under its id is an
// earlier tenant's record, not the new one's.
func AuthorizedCreation(ctx context.Context, v vault.Store, tenant string) time.Time {
	if c, ok := ctx.Value(creationKey{}).(time.Time); ok && TenantOf(ctx) == tenant {
		return c
	}
	return vault.Creation(v, tenant)
}
