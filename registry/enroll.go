package registry

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// nsEnroll holds the unredeemed enrollment tokens, keyed by the SHA-256 of
// the token: the store never holds a token that could be redeemed.
const nsEnroll = "registry/enroll"

// MaxEnrollTTL bounds an enrollment token's lifetime: longer is refused
// when it is minted and, for a token an older connector stored with a
// later expiry, when it is redeemed.
const MaxEnrollTTL = 24 * time.Hour

// DefaultEnrollTTL is how long an enrollment token stays redeemable when
// MintEnrollToken is not given a lifetime.
const DefaultEnrollTTL = MaxEnrollTTL

// ErrEnrollToken is an enrollment token that is unknown, expired, already
// redeemed or another tenant's; the four are not told apart.
var ErrEnrollToken = errors.New("registry: enrollment token invalid, expired, already used, or for another tenant")

// enrollToken is a stored, unredeemed enrollment token.
type enrollToken struct {
	Tenant  string    `json:"tenant"`
	Expires time.Time `json:"expires"`
}

// MintEnrollToken returns a new single-use enrollment token for tenant,
// redeemable until the returned expiry (ttl from now; DefaultEnrollTTL when
// zero, at most MaxEnrollTTL). It also forgets the expired tokens (and
// those expiring beyond the bound, which no redemption takes).
func (r *Registry) MintEnrollToken(ctx context.Context, tenant string, ttl time.Duration) (string, time.Time, error) {
	if ttl < 0 || ttl > MaxEnrollTTL {
		return "", time.Time{}, fmt.Errorf("%w: enrollment token lifetime %v: want up to %v", ErrInvalid, ttl, MaxEnrollTTL)
	}
	ttl = cmp.Or(ttl, DefaultEnrollTTL)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.requireTenant(ctx, tenant); err != nil {
		return "", time.Time{}, err
	}
	now := r.now()
	entries, _, err := r.kv.List(ctx, nsEnroll)
	if err != nil {
		return "", time.Time{}, err
	}
	for _, e := range entries {
		var tok enrollToken
		if err := json.Unmarshal(e.Value, &tok); err != nil || !now.Before(tok.Expires) || tok.Expires.After(now.Add(MaxEnrollTTL)) {
			if _, err := r.kv.Delete(ctx, nsEnroll, e.Key); err != nil {
				return "", time.Time{}, err
			}
		}
	}
	token := "enr_" + newSecret()
	expires := now.Add(ttl)
	if err := r.put(ctx, nsEnroll, tokenKey(token), enrollToken{Tenant: tenant, Expires: expires}); err != nil {
		return "", time.Time{}, err
	}
	return token, expires, nil
}

// Enroll redeems token, which must be tenant's, unexpired and expiring
// within MaxEnrollTTL, for gateway id of tenant, and returns the gateway's
// new secret: a new gateway, or a
// rotation of the tenant's gateway of that id (its earlier secrets keep
// DefaultGrace). The token is spent once the gateway is checked, whatever
// happens next: of two redemptions racing, across instances too, at most
// one gets past the store's delete.
func (r *Registry) Enroll(ctx context.Context, tenant, token, id string) (string, error) {
	if err := checkID("gateway", id); err != nil {
		return "", err
	}
	key := tokenKey(token)
	var tok enrollToken
	if ok, err := r.get(ctx, nsEnroll, key, &tok); err != nil {
		return "", err
	} else if now := r.now(); !ok || tok.Tenant != tenant || !now.Before(tok.Expires) || tok.Expires.After(now.Add(MaxEnrollTTL)) {
		return "", ErrEnrollToken
	}
	if r.declaredGateway(id) {
		return "", ErrDeclared
	}
	var g Gateway
	exists, err := r.get(ctx, nsGateways, id, &g)
	if err != nil {
		return "", err
	}
	if exists && g.Tenant != tenant {
		return "", fmt.Errorf("%w: gateway id %q belongs to another tenant", ErrConflict, id)
	}
	if deleted, err := r.kv.Delete(ctx, nsEnroll, key); err != nil {
		return "", err
	} else if !deleted {
		return "", ErrEnrollToken // redeemed meanwhile
	}
	if exists {
		return r.Rotate(ctx, tenant, id, DefaultGrace)
	}
	secret, err := r.CreateGateway(ctx, tenant, id)
	if errors.Is(err, ErrExists) { // created meanwhile by another enrollment
		return r.Rotate(ctx, tenant, id, DefaultGrace)
	}
	return secret, err
}

// Provision returns the secret gateway id of tenant authenticates with,
// creating the gateway when it does not exist. It is idempotent: the stock
// gateway provisions once per fronted platform under one gateway id and one
// secret, so an existing gateway of tenant answers its newest live secret.
func (r *Registry) Provision(ctx context.Context, tenant, id string) (secret string, created bool, err error) {
	if err := checkID("gateway", id); err != nil {
		return "", false, err
	}
	if r.declaredGateway(id) {
		return "", false, ErrDeclared
	}
	if err := r.requireTenant(ctx, tenant); err != nil {
		return "", false, err
	}
	r.mu.Lock()
	var g Gateway
	exists, err := r.get(ctx, nsGateways, id, &g)
	r.mu.Unlock()
	if err != nil {
		return "", false, err
	}
	if !exists {
		secret, err := r.CreateGateway(ctx, tenant, id)
		if !errors.Is(err, ErrExists) {
			return secret, err == nil, err
		}
		if _, err := r.get(ctx, nsGateways, id, &g); err != nil { // created meanwhile
			return "", false, err
		}
	}
	if g.Tenant != tenant {
		return "", false, fmt.Errorf("%w: gateway id %q belongs to another tenant", ErrConflict, id)
	}
	live := g.liveSecrets(r.now())
	if len(live) == 0 { // every secret lapsed: a fresh one
		secret, err := r.Rotate(ctx, tenant, id, -1)
		return secret, false, err
	}
	return live[0].Value, false, nil
}

// tokenKey is the store key of an enrollment token or a link code: its
// SHA-256, so the store never holds one that could be redeemed.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
