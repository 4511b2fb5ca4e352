package platform

import "context"

type tenantKey struct{}

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
