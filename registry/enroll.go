package registry

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"connector/store"
	"connector/wake"
)

// nsEnroll holds the unredeemed enrollment tokens, keyed by the SHA-256 of
// the token: the store never holds a token that could be redeemed.
const nsEnroll = "registry/enroll"

// MaxEnrollTTL bounds an enrollment token's lifetime: longer is refused
// when it is minted and, for a token an older connector stored with a
// later expiry, when it is redeemed.
const MaxEnrollTTL = 24 * time.Hour

// ErrEnrollToken is an enrollment token that is unknown, expired, already
// redeemed or another tenant's; the four are not told apart.
var ErrEnrollToken = errors.New("registry: enrollment token invalid, expired, already used, or for another tenant")

// expiring is a stored, unredeemed enrollment token, and a link code as
// sweep reads it: whose it is, and until when it is redeemable.
type expiring struct {
	Tenant  string    `json:"tenant"`
	Expires time.Time `json:"expires"`
	// Redeemed is a spent link code's (linkCode.Redeemed).
	Redeemed string `json:"redeemed,omitempty"`
}

// ExpirySkew is how far the instances' clocks may disagree (NTP) before
// one instance's sweep deletes an enrollment token or link code another
// issued and still honours: an entry is deleted only once it expired (or
// lies beyond its bound) by ExpirySkew on the sweeping clock. Redemption
// judges the expiry itself.
const ExpirySkew = 5 * time.Minute

// stale reports whether an entry that expires at expires, whose lifetime
// is at most bound, may be deleted at now: its expiry passed, or lies
// beyond the bound, by ExpirySkew.
func stale(now, expires time.Time, bound time.Duration) bool {
	return !now.Before(expires.Add(ExpirySkew)) || expires.After(now.Add(bound+ExpirySkew))
}

// sweep deletes the entries of namespace (enrollment tokens, link codes)
// that do not decode or that drop selects, and returns how many of
// tenant's it kept, spent link codes not counted: held, and live, those
// of them unexpired.
func (r *Registry) sweep(ctx context.Context, namespace, tenant string, drop func(expiring) bool) (live, held int, err error) {
	entries, _, err := r.kv.List(ctx, namespace)
	if err != nil {
		return 0, 0, fmt.Errorf("registry: read %s: %w", namespace, err)
	}
	now := r.clock.Now()
	for _, e := range entries {
		var v expiring
		if err := json.Unmarshal(e.Value, &v); err != nil || drop(v) {
			if _, err := r.kv.Delete(ctx, namespace, e.Key); err != nil {
				return live, held, err
			}
		} else if v.Tenant == tenant && v.Redeemed == "" {
			held++
			if now.Before(v.Expires) {
				live++
			}
		}
	}
	return live, held, nil
}

// MintEnrollToken returns a new single-use enrollment token for tenant,
// redeemable until the returned expiry (ttl from now; MaxEnrollTTL when
// zero, and at most). It also forgets the tokens expired (or expiring
// beyond the bound, which no redemption takes) by ExpirySkew.
func (r *Registry) MintEnrollToken(ctx context.Context, tenant string, ttl time.Duration) (string, time.Time, error) {
	if ttl < 0 || ttl > MaxEnrollTTL {
		return "", time.Time{}, fmt.Errorf("%w: enrollment token lifetime %v: want up to %v", ErrInvalid, ttl, MaxEnrollTTL)
	}
	ttl = cmp.Or(ttl, MaxEnrollTTL)
	done, err := r.tenantTurn(ctx, tenant) // not mu: its sweep lists every tenant's tokens
	if err != nil {
		return "", time.Time{}, err
	}
	defer done()
	t, err := r.tenant(ctx, tenant)
	if err != nil {
		return "", time.Time{}, err
	}
	now := r.clock.Now()
	if _, _, err := r.sweep(ctx, nsEnroll, tenant, func(tok expiring) bool { return stale(now, tok.Expires, MaxEnrollTTL) }); err != nil {
		return "", time.Time{}, err
	}
	token := "enr_" + newSecret()
	expires := now.Add(ttl)
	if err := r.put(ctx, tenant, t.Gen, nsEnroll, tokenKey(token), expiring{Tenant: tenant, Expires: expires}, true); err != nil {
		return "", time.Time{}, err
	}
	return token, expires, nil
}

// Enroll redeems token, which must be tenant's, unexpired and expiring
// within MaxEnrollTTL (and ExpirySkew: another instance's clock may be
// ahead), for gateway id of tenant, and returns the gateway's
// new secret: a new gateway (OriginEnroll; a tenant at its MaxGateways is
// ErrLimit, the token unspent), or a rotation of the tenant's gateway of
// that id (its earlier secrets keep DefaultGrace; from then on it is an
// enrolled gateway, which Provision leaves alone). A wakeURL (checked as
// SetWake does) becomes the gateway's wake URL. The token is spent once
// the gateway is checked: of two redemptions racing, across instances
// too, at most one gets past the store's delete. Its writes are all or
// nothing: when the gateway is then not written (another instance's
// writes meanwhile left no room, or took the id), or the wake URL is not,
// or the request is given up (ctx done) before the wake URL is written,
// the gateway is put back as it was and the token given back, unless the
// tenant's deletion began. An id the YAML declares or another tenant
// holds is ErrConflict (errTaken), as is a gateway deleted or taken by
// another tenant on another instance before its wake URL is written.
func (r *Registry) Enroll(ctx context.Context, tenant, token, id, wakeURL string) (string, error) {
	if err := CheckID("gateway", id); err != nil {
		return "", err
	}
	if wakeURL != "" {
		if _, err := wake.ValidateURL(wakeURL); err != nil {
			return "", fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	key := tokenKey(token)
	var tok expiring
	tokRaw, ok, err := r.getRaw(ctx, nsEnroll, key, &tok)
	if err != nil {
		return "", err
	} else if now := r.clock.Now(); !ok || tok.Tenant != tenant || !now.Before(tok.Expires) || tok.Expires.After(now.Add(MaxEnrollTTL+ExpirySkew)) {
		return "", ErrEnrollToken
	}
	done, err := r.tenantTurn(ctx, tenant)
	if err != nil {
		return "", err
	}
	defer done()
	t, err := r.tenant(ctx, tenant)
	if err != nil {
		return "", err
	}
	// The spend, the writes and their undoing run on a context a request
	// given up (its client gone) does not cancel: the store may apply a
	// write whose caller stopped waiting, so a spend must be answered.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	spent := false
	spend := sync.OnceValue(func() error { // once, though a race decides again
		if deleted, err := r.kv.Delete(wctx, nsEnroll, key); err != nil {
			// A delete the replicas did not acknowledge applied on the
			// primary (store.ErrNotReplicated): the token is spent there,
			// so it is given back with the rest.
			spent = errors.Is(err, store.ErrNotReplicated)
			return err
		} else if !deleted {
			return ErrEnrollToken // redeemed meanwhile
		}
		spent = true
		return nil
	})
	var secret string
	var undo func(ctx context.Context) error // puts the gateway back as it was
	err = againIfRaced(func() error {
		var g Gateway
		raw, exists, err := r.getRaw(ctx, nsGateways, id, &g)
		if err != nil {
			return err
		}
		if r.declaredGateway(id) || exists && g.Tenant != tenant {
			return errTaken(id)
		}
		var gen string
		var guard []byte
		if !exists {
			if gen, guard, err = r.roomForGateway(ctx, tenant, id); err != nil {
				return err
			}
		}
		if err := spend(); err != nil {
			return err
		}
		var data []byte
		if exists {
			g.Origin = OriginEnroll
			secret, data, err = r.rotateSecret(wctx, g, raw, DefaultGrace, "")
		} else {
			secret, data, err = r.storeGateway(wctx, Gateway{ID: id, Tenant: tenant, Origin: OriginEnroll}, "", gen, guard)
			raw = nil
		}
		if err == nil {
			undo = func(ctx context.Context) error { return r.takeBack(ctx, nsGateways, id, data, raw) }
		}
		return err
	})
	if err == nil {
		err = ctx.Err() // given up: the caller would never see the secret
		if err == nil && wakeURL != "" {
			if err = r.writeWake(wctx, tenant, t.Gen, id, wakeURL); errors.Is(err, ErrNotFound) {
				err = fmt.Errorf("%w: gateway %q was deleted or taken by another tenant while it enrolled", ErrConflict, id)
			}
		}
		if err != nil && undo(wctx) != nil {
			return "", err // the gateway stays as written: so does the spend
		}
	}
	if err != nil && spent {
		// Give the token back, as it was. Failing that, it stays spent,
		// as before the refund.
		if back, rerr := r.kv.CompareAndSwap(wctx, nsEnroll, key, nil, tokRaw); rerr == nil && back {
			_ = r.keptFor(wctx, tenant, t.Gen, func(ctx context.Context) error {
				_, err := r.kv.CompareAndSwap(ctx, nsEnroll, key, tokRaw, nil)
				return err
			})
		}
		return "", err
	}
	return secret, err
}

// What Provision did.
const (
	// ProvisionCreated is a new gateway.
	ProvisionCreated = "created"
	// ProvisionRotated is a fresh secret for a gateway provisioned
	// before with another identity token (its next boot).
	ProvisionRotated = "rotated"
	// ProvisionRepeated is the secret the same identity token was given
	// before (the same boot's next platform, or a retry).
	ProvisionRepeated = "repeated"
)

// Provision returns the secret gateway id of tenant authenticates with, for
// the caller whose identity token has the SHA-256 minter (hex; see
// MinterOf), and what it did:
//
//   - no gateway of that id: it is created (OriginProvision), within the
//     tenant's MaxGateways (else ErrLimit);
//   - the gateway's newest live secret was minted for this same token:
//     that secret again. The stock gateway provisions once per fronted
//     platform at boot, with one identity token, and keeps the secret of
//     the first answer;
//   - otherwise (another token: the gateway's next boot, or another holder
//     of an identity token of the tenant) a fresh secret, the earlier ones
//     staying valid for DefaultGrace, which covers a prior instance still
//     connected. An existing gateway's secret is never handed to a token
//     it was not minted for.
//
// An id the YAML declares or another tenant holds is ErrConflict
// (errTaken). An admin-made or enrolled gateway is ErrConflict: its secret is pinned
// where it runs, and an identity token may neither learn nor rotate it.
// admit is called before a gateway is created or rotated (a rate limit);
// its error is returned as it is and nothing changes.
func (r *Registry) Provision(ctx context.Context, tenant, id, minter string, admit func() error) (secret, outcome string, err error) {
	if err := CheckID("gateway", id); err != nil {
		return "", "", err
	}
	if minter == "" {
		return "", "", fmt.Errorf("%w: provision needs the caller's token digest", ErrInvalid)
	}
	done, err := r.tenantTurn(ctx, tenant)
	if err != nil {
		return "", "", err
	}
	defer done()
	if _, err := r.tenant(ctx, tenant); err != nil {
		return "", "", err // before the id: an unknown tenant learns no declared one
	}
	admit = sync.OnceValue(admit) // once, though a race decides again
	err = againIfRaced(func() error {
		secret, outcome, err = r.provisionTurn(ctx, tenant, id, minter, admit)
		return err
	})
	return secret, outcome, err
}

// provisionTurn is Provision's decision on what the store holds now, in
// the tenant's turn (tenantTurn). Its writes run on ctx without its
// cancellation (bounded by releaseTimeout): a caller that hangs up leaves
// the gateway whole, its secret answered again to the same token.
func (r *Registry) provisionTurn(ctx context.Context, tenant, id, minter string, admit func() error) (secret, outcome string, err error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	var g Gateway
	raw, exists, err := r.getRaw(ctx, nsGateways, id, &g)
	if err != nil {
		return "", "", err
	}
	switch {
	case r.declaredGateway(id), exists && g.Tenant != tenant:
		return "", "", errTaken(id)
	case !exists:
		gen, guard, err := r.roomForGateway(ctx, tenant, id)
		if err != nil {
			return "", "", err
		}
		if err := admit(); err != nil {
			return "", "", err
		}
		secret, _, err := r.storeGateway(wctx, Gateway{ID: id, Tenant: tenant, Origin: OriginProvision}, minter, gen, guard)
		return secret, ProvisionCreated, err
	case g.Origin != "" && g.Origin != OriginProvision:
		return "", "", fmt.Errorf("%w: gateway id %q was made by the %s, not by provision; its secret is not handed out again (rotate it with the admin API)", ErrConflict, id,
			cmp.Or(map[string]string{OriginEnroll: "enrollment"}[g.Origin], "admin API"))
	}
	live := g.liveSecrets(r.clock.Now())
	if len(live) > 0 && live[0].Minter != "" && subtle.ConstantTimeCompare([]byte(live[0].Minter), []byte(minter)) == 1 {
		return live[0].Value, ProvisionRepeated, nil
	}
	if err := admit(); err != nil {
		return "", "", err
	}
	g.Origin = OriginProvision
	secret, _, err = r.rotateSecret(wctx, g, raw, DefaultGrace, minter)
	return secret, ProvisionRotated, err
}

// errTaken is a tenant's enrollment or provision of gateway id the YAML
// declares or another tenant holds. Gateway ids are one namespace (the
// upgrade token names the id, not its tenant), so the id is refused, but
// with one answer for both that names neither the layer nor the tenant.
func errTaken(id string) error {
	return fmt.Errorf("%w: gateway id %q is taken (declared in the connector's config, or another tenant's); choose another", ErrConflict, id)
}

// MinterOf is the digest Provision keeps of the identity token a secret
// was minted for: its SHA-256, so the store never holds the token.
func MinterOf(identityToken string) string { return tokenKey(identityToken) }

// tokenKey is the store key of an enrollment token or a link code: its
// SHA-256, so the store never holds one that could be redeemed.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}
