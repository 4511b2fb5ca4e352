package change

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"connector/internal/clock"
	"connector/internal/keyrate"
)

// The rate limit of the changes one gateway credential stores on one
// instance (the /manage/* routes, POST /relay/policy and the provisions of
// its gateway id together): every
// change tells every instance, which applies the registry again, so one
// token must not be able to keep the fleet applying. The burst covers a
// gateway's boot (a policy per fronted platform) and a user's session in
// the Portal (a tenant's 16 link codes, claims of many channels); the
// figures are the provisioning limit's (package enroll).
const (
	GatewayBurst = 100
	GatewayEvery = time.Second
)

// The rate limit of the changes all of one tenant's gateways store on one
// instance, on top of each gateway's: a tenant's many gateways must not
// multiply its allowance. The burst lets a fleet of DefaultMaxGateways
// boot at once (a provision and a policy per fronted platform each, at
// most 500 changes) with room for its users' Portal sessions; the rate is
// ten gateways' own.
const (
	TenantBurst = 1_000
	TenantEvery = GatewayEvery / 10
)

// maxLimitedGateways bounds the credentials, and the tenants, whose rate
// is remembered (a gateway is made by the operator, an enrollment or a
// provision; this only bounds memory).
const maxLimitedGateways = 10_000

// Limiter limits the changes each gateway credential stores: GatewayBurst
// at once, then one per GatewayEvery; and those of all of a tenant's
// gateways together: TenantBurst, then one per TenantEvery. A request is checked before it runs
// (Check) and spends when it stored a change (Spend): a refused one tells
// no instance anything. A /manage/* request spends refused too: its
// refusal read the registry, or asked the platform. It is safe for
// concurrent use.
type Limiter struct{ gateways, tenants *keyrate.Limiter }

// NewLimiter returns a Limiter on clock c (nil: clock.System).
func NewLimiter(c clock.Clock) *Limiter {
	return &Limiter{keyrate.New(keyrate.Config{Burst: GatewayBurst, Every: GatewayEvery, MaxKeys: maxLimitedGateways, Clock: c}),
		keyrate.New(keyrate.Config{Burst: TenantBurst, Every: TenantEvery, MaxKeys: maxLimitedGateways, Clock: c})}
}

// key names gateway of tenant.
func key(tenant, gateway string) string { return tenant + "\x00" + gateway }

// Check returns, when gateway of tenant, or tenant, has spent its
// allowance, a Refusal: 429, outcome rate_limited, with RetryAfter.
func (l *Limiter) Check(tenant, gateway string) error {
	if ok, retry := l.gateways.Check(key(tenant, gateway)); !ok {
		return TooFast("this gateway is changing the registry", GatewayBurst, GatewayEvery, retry)
	}
	if ok, retry := l.tenants.Check(tenant); !ok {
		return TooFast("this tenant's gateways are changing the registry", TenantBurst, TenantEvery, retry)
	}
	return nil
}

// TooFast is the Refusal of a rate limit of burst at once, then one per
// every: 429, outcome rate_limited, with RetryAfter (retry, in whole
// seconds, at least one); who names what went too fast.
func TooFast(who string, burst int, every, retry time.Duration) *Refusal {
	retry = max(time.Second, retry.Round(time.Second))
	r := Refuse(http.StatusTooManyRequests, "rate_limited", "%s too fast (%d at once, then one per %v); retry after %v", who, burst, every, retry)
	r.RetryAfter = retry
	return r
}

// Spend spends one change of gateway of tenant's allowance, into debt
// when its requests were checked at once, and of tenant's while it lasts:
// one gateway's requests in flight lock out that gateway, not the
// tenant's others.
func (l *Limiter) Spend(tenant, gateway string) {
	l.gateways.Spend(key(tenant, gateway))
	l.tenants.Allow(tenant)
}

// SetRetryAfter sets h's Retry-After when err is a Refusal with a
// RetryAfter (TooFast's: whole seconds, at least one).
func SetRetryAfter(h http.Header, err error) {
	var r *Refusal
	if errors.As(err, &r) && r.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(r.RetryAfter/time.Second)))
	}
}
