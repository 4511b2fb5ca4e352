package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"connector/platform"
)

// This file owns what the Hermes management plane (/manage/*, package
// manage) changes: account-link codes, scope claims, principal policies,
// DM defaults and dropping all of a tenant's. The routes they feed are
// bindings (platform.BindUser and the other author kinds), which
// platform.Ownership applies after the bindings of chats; a scope claim is
// judged and stored by Registry.Claim.

// nsLinkCodes holds the outstanding link codes, keyed by the SHA-256 of
// the code: the code itself is never stored.
const nsLinkCodes = "registry/linkcodes"

// dropKey is where nsBindings holds tenant's mark (dropMark), which its
// every DropManaged replaces before and after its drop: a take-back that
// read it before its write and finds it changed, or a drop under way,
// puts back none of the tenant's bindings it replaced (giveBack), which
// the drop may have missed. A drop that fails leaves it under way until
// it expires (dropMark). It is kept with the bindings (no binding's key starts
// so: CanonicalBinding), so no failover loses it without the drop's
// deletes after it (one hash tag on Redis); Stored leaves it out.
func dropKey(tenant string) string { return "dropped/" + tenant }

// dropMark is a tenant's mark (dropKey): Drops counts the DropManaged
// under way, until Until (dropExpiry after the last began), so one that
// ends before another, begun meanwhile, does not mark it done, and one
// killed does not leave it under way for good. It has no Platform, as no
// binding does.
type dropMark struct {
	Tenant string
	Drops  int       `json:",omitempty"`
	Until  time.Time `json:",omitzero"`
}

// dropExpiry bounds how long a DropManaged is taken for under way.
const dropExpiry = 10 * time.Minute

// dropping reports whether a DropManaged is under way at now.
func (m dropMark) dropping(now time.Time) bool { return m.Drops > 0 && now.Before(m.Until) }

// Link code bounds.
const (
	// DefaultLinkTTL is how long a link code stays redeemable when the
	// issuer does not ask for less.
	DefaultLinkTTL = 10 * time.Minute
	// MaxLinkTTL bounds the lifetime an issuer may ask for.
	MaxLinkTTL = time.Hour
	// MaxLinkCodes bounds a tenant's outstanding codes.
	MaxLinkCodes = 16
	// MaxHeldLinkCodes bounds a tenant's unspent codes in the store,
	// outstanding or expired less than ExpirySkew ago (a sweep keeps
	// those): every issue's sweep lists every tenant's codes, so codes
	// of a second, each expired at once, must not pile up for the skew.
	MaxHeldLinkCodes = 4 * MaxLinkCodes
	// LinkCodeLen is a code's length in characters of linkAlphabet (about
	// 49 bits).
	LinkCodeLen = 10
	// MaxAllowList bounds a tenant's allow-list on one platform.
	MaxAllowList = 1000
)

// linkAlphabet spells codes: upper-case letters and digits without the
// look-alikes 0, 1, I, L, O and U.
const linkAlphabet = "ABCDEFGHJKMNPQRSTVWXYZ23456789"

// ErrLimit is a request over a bound (too many outstanding link codes).
var ErrLimit = errors.New("registry: limit reached")

// linkCode is one outstanding code.
type linkCode struct {
	Hash     string    `json:"hash"`
	Tenant   string    `json:"tenant"`
	Gateway  string    `json:"gateway"`
	Platform string    `json:"platform,omitempty"`
	Expires  time.Time `json:"expires"`
	// Created is the issuing tenant's creation (Tenant.Created).
	Created time.Time `json:"created,omitzero"`
	// Redeemed, once the code is spent, is the key of the link it made:
	// the entry stays, redeemable no more, until it would have expired.
	Redeemed string `json:"redeemed,omitempty"`
}

// managedKinds are the binding kinds the management plane makes.
var managedKinds = map[string]bool{
	platform.BindUser: true, platform.BindScope: true, platform.BindDMDefault: true,
	platform.BindPrincipal: true, platform.BindAllow: true,
}

// IssueLinkCode mints a single-use code that links the platform account
// that redeems it (RedeemLinkCode) to tenant; gateway is who asked (for the
// record). An empty platformName lets any platform redeem it. ttl zero is
// DefaultLinkTTL; it may not exceed MaxLinkTTL.
func (r *Registry) IssueLinkCode(ctx context.Context, tenant, gateway, platformName string, ttl time.Duration) (string, time.Time, error) {
	ttl = cmp.Or(ttl, DefaultLinkTTL)
	if ttl < 0 || ttl > MaxLinkTTL {
		return "", time.Time{}, fmt.Errorf("%w: link code lifetime %v: want up to %v", ErrInvalid, ttl, MaxLinkTTL)
	}
	done, err := r.tenantTurn(ctx, tenant) // not mu: its sweep lists every tenant's codes
	if err != nil {
		return "", time.Time{}, err
	}
	defer done()
	t, err := r.tenant(ctx, tenant)
	if err != nil {
		return "", time.Time{}, err
	}
	for range maxSwaps {
		guard, err := r.guard(ctx, tenant, codesGuard)
		if err != nil {
			return "", time.Time{}, err
		}
		now := r.clock.Now()
		// A spent code's record stays until the code would have expired: a
		// second redemption of it by the same user may yet look for it. It is
		// not outstanding (sweep does not count it).
		live, held, err := r.sweep(ctx, nsLinkCodes, tenant, func(c expiring) bool { return stale(now, c.Expires, MaxLinkTTL) })
		if err != nil {
			return "", time.Time{}, err
		}
		if live >= MaxLinkCodes {
			return "", time.Time{}, fmt.Errorf("%w: %d link codes of this tenant are outstanding; redeem or let them expire", ErrLimit, live)
		}
		if held >= MaxHeldLinkCodes {
			return "", time.Time{}, fmt.Errorf("%w: %d link codes of this tenant expired in the last %v; try again later", ErrLimit, held-live, ExpirySkew)
		}
		code := newLinkCode()
		c := linkCode{Hash: tokenKey(code), Tenant: tenant, Gateway: gateway, Platform: platformName, Expires: now.Add(ttl), Created: t.Created}
		if err := r.put(ctx, tenant, t.Gen, nsLinkCodes, c.Hash, c, true); err != nil {
			return "", time.Time{}, err
		}
		kept, err := r.swapGuard(ctx, tenant, codesGuard, guard)
		if err == nil && kept {
			return code, c.Expires, nil
		}
		// Another instance issued meanwhile, or the guard was not
		// written: the code, never handed out, goes.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_, derr := r.kv.Delete(dctx, nsLinkCodes, c.Hash)
		cancel()
		if err := cmp.Or(err, derr); err != nil {
			return "", time.Time{}, err
		}
	}
	return "", time.Time{}, fmt.Errorf("%w: this tenant's link codes kept changing meanwhile; try again", ErrConflict)
}

// A tenant's guards, in nsReserved under its id and the guard's name: a
// value no other write makes, swapped by each write counted against a
// bound that holds across instances (a link code against MaxLinkCodes, a
// gateway against MaxGateways). Such a write is counted after the guard
// is read and kept only while its swap finds the guard as read: of
// writes racing on several instances, each counted before the others',
// one is kept and the others take theirs back and count again.
const (
	codesGuard    = "/codes"
	gatewaysGuard = "/gateways"
)

// guard reads tenant's guard name (nil: none yet).
func (r *Registry) guard(ctx context.Context, tenant, name string) ([]byte, error) {
	e, _, err := r.kv.Get(ctx, nsReserved, tenant+name)
	return e.Value, err
}

// swapGuard swaps tenant's guard name, read as read, for a fresh value;
// false when another write swapped it since.
func (r *Registry) swapGuard(ctx context.Context, tenant, name string, read []byte) (bool, error) {
	return r.kv.CompareAndSwap(ctx, nsReserved, tenant+name, read, []byte(newSecret()))
}

// RedeemLinkCode consumes code and links (platformName, user) to the
// tenant that issued it, which it returns with that tenant's creation
// (zero for a declared tenant, or a code issued before codes kept it). A code is redeemed once: of
// concurrent redeemers (on any instance) one wins; the user it was spent
// for sending it again is answered so, and linked when its link is
// missing (the redemption that spent it failed, or its instance stopped,
// before linking; an Unbind of the link ends the code). An unknown, expired or other-platform code, one
// expiring beyond MaxLinkTTL and ExpirySkew (its issuer's clock far
// ahead), or one another user spent, is ErrNotFound; a link that would take the tenant
// past MaxTenantBindings is ErrLimit, the code unspent.
//
// The code is consumed (marked spent for the user) before the link is
// written, so no instance stopping in between leaves a link with its code
// redeemable. The code is looked at again after the link: when it is gone
// by then, a deprovision of the tenant (DropManaged, which removes the
// codes before the links), on any instance, ran meanwhile, and the link
// written is taken back: no link outlives it.
func (r *Registry) RedeemLinkCode(ctx context.Context, platformName, user, code string) (string, time.Time, error) {
	norm, ok := NormalizeLinkCode(code)
	if !ok {
		return "", time.Time{}, ErrNotFound
	}
	want := tokenKey(norm)
	var c linkCode
	raw, ok, err := r.getRaw(ctx, nsLinkCodes, want, &c)
	if err != nil {
		return "", time.Time{}, err
	} else if !ok || subtle.ConstantTimeCompare([]byte(c.Hash), []byte(want)) != 1 {
		return "", time.Time{}, ErrNotFound
	}
	if c.Platform != "" && c.Platform != platformName {
		return "", time.Time{}, ErrNotFound
	}
	if now := r.clock.Now(); !now.Before(c.Expires) || c.Expires.After(now.Add(MaxLinkTTL+ExpirySkew)) {
		return "", time.Time{}, ErrNotFound // a sweep deletes it
	}
	b, err := CanonicalBinding(Binding{Platform: platformName, Kind: platform.BindUser, ID: user, Tenant: c.Tenant})
	if err != nil || c.Redeemed != "" && c.Redeemed != b.key() {
		return "", time.Time{}, cmp.Or(err, ErrNotFound)
	}
	release, err := r.reserve(ctx, c.Tenant, b)
	if err != nil {
		return "", time.Time{}, err
	}
	defer release()
	// Consume, link and look again on a context the request does not
	// cancel: the store may apply a write whose caller stopped waiting. A
	// consumption or link refused (the replicas did not acknowledge it, the
	// store failed) leaves the code spent for the user, whose resend links.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if c.Redeemed == "" {
		c.Redeemed = b.key()
		value, err := json.Marshal(c)
		if err != nil {
			return "", time.Time{}, err
		}
		if consumed, err := r.kv.CompareAndSwap(ctx, nsLinkCodes, want, raw, value); err != nil {
			return "", time.Time{}, err
		} else if !consumed { // another redemption's: the same user's resend goes on
			if ok, err := r.spentFor(ctx, want, b); err != nil || !ok {
				return "", time.Time{}, cmp.Or(err, ErrNotFound)
			}
		}
	}
	link, err := r.bind(ctx, b, nil)
	if err != nil {
		return "", time.Time{}, err
	}
	if ok, err := r.spentFor(ctx, want, b); err != nil || !ok {
		if link != nil { // the code went meanwhile (a deprovision): so does the link this wrote
			_, uerr := r.kv.CompareAndSwap(ctx, nsBindings, b.key(), link, nil)
			r.notify(ctx)
			err = cmp.Or(err, uerr)
		}
		return "", time.Time{}, cmp.Or(err, ErrNotFound)
	}
	return c.Tenant, c.Created, nil
}

// spentFor reports whether link code want is stored spent for b.
func (r *Registry) spentFor(ctx context.Context, want string, b Binding) (bool, error) {
	var c linkCode
	_, ok, err := r.getRaw(ctx, nsLinkCodes, want, &c)
	return ok && c.Redeemed == b.key(), err
}

// NormalizeLinkCode spells code as issued: upper case, without the
// hyphens and spaces a user may add. It reports whether the result can be
// a code at all.
func NormalizeLinkCode(code string) (string, bool) {
	if len(code) > 4*LinkCodeLen {
		return "", false
	}
	var b strings.Builder
	for _, c := range strings.ToUpper(code) {
		switch {
		case c == '-' || c == ' ':
		case strings.ContainsRune(linkAlphabet, c):
			b.WriteRune(c)
		default:
			return "", false
		}
	}
	if b.Len() != LinkCodeLen {
		return "", false
	}
	return b.String(), true
}

// newLinkCode returns LinkCodeLen random characters of linkAlphabet.
func newLinkCode() string {
	out := make([]byte, 0, LinkCodeLen)
	var buf [32]byte
	for len(out) < LinkCodeLen {
		_, _ = rand.Read(buf[:]) // crypto/rand.Read never fails
		for _, v := range buf {
			// 240 is the largest multiple of 30 under 256: no bias.
			if v < 240 && len(out) < LinkCodeLen {
				out = append(out, linkAlphabet[int(v)%len(linkAlphabet)])
			}
		}
	}
	return string(out)
}

// SetPrincipal replaces tenant's principal policy on platformName, with
// its allow-list (only for platform.PrincipalAllowList). Of requests
// racing on several instances the last to store the principal wins, its
// allow-list whole (principalEntry); a principal stored otherwise
// meanwhile (Bind, an earlier version) keeps the allow-list. It takes
// the tenant's turn (tenantTurn), not mu: its keys are the tenant's
// alone, and another tenant's changes go on while it writes the list.
func (r *Registry) SetPrincipal(ctx context.Context, tenant, platformName, mode string, allow []string) error {
	p, err := CanonicalBinding(Binding{Platform: platformName, Kind: platform.BindPrincipal, ID: mode, Tenant: tenant})
	if err != nil {
		return err
	}
	if mode != platform.PrincipalAllowList && len(allow) > 0 {
		return fmt.Errorf("%w: an allow-list goes with the principal %s", ErrInvalid, platform.PrincipalAllowList)
	}
	if len(allow) > MaxAllowList {
		return fmt.Errorf("%w: more than %d users on the allow-list", ErrInvalid, MaxAllowList)
	}
	entry := principalEntry{Binding: p, Rev: newSecret()}
	for _, u := range allow {
		b, err := CanonicalBinding(Binding{Platform: platformName, Kind: platform.BindAllow, ID: u, Tenant: tenant})
		if err != nil {
			return err
		}
		entry.Allow = append(entry.Allow, b.ID)
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
	if err := r.put(ctx, tenant, t.Gen, nsBindings, p.key(), entry, false); err != nil {
		return err
	}
	// The allow-list's writes are judged together, after the last: one
	// that lands once the tenant's deletion or the gateway's deprovision
	// began takes them all back (keptFor), as the drop that follows may
	// have missed any of them; each take-back is tried, all of them
	// within keptFor's one releaseTimeout (a store that hangs holds the
	// tenant's turn that long, not that long per user).
	written := map[string][]byte{}
	err = r.syncAllow(ctx, entry, written)
	if len(written) > 0 {
		if kerr := r.keptFor(ctx, tenant, t.Gen, func(ctx context.Context) error {
			var errs []error
			for key, data := range written {
				_, err := r.kv.CompareAndSwap(ctx, nsBindings, key, data, nil)
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		}); kerr != nil {
			return kerr
		}
	}
	r.uncount(ctx, tenant)
	r.notify(ctx) // the principal, and a list dropped or written
	return err
}

// syncAllow makes the allow-list the stored principal's (entry stored
// by SetPrincipal), until it stays the one made: a request that stored
// the principal after this one may have dropped the allow-list before
// this one wrote it. A principal SetPrincipal did not store (none:
// unbound; no Rev: an operator's Bind, an instance of an earlier version)
// keeps the allow-list as it is, as it would coming after this request.
// Each user is written again, stored already or not: a drop that read
// the entry before (DropManaged) then deletes only the old one, not the
// principal's. written gets each one it wrote, as written.
func (r *Registry) syncAllow(ctx context.Context, entry principalEntry, written map[string][]byte) error {
	p := entry.Binding
	cur := entry
	for range maxSwaps {
		if cur.Rev != "" {
			stored := make(map[string]bool, len(cur.Allow)) // wanted, and whether written
			for _, u := range cur.Allow {
				stored[u] = false
			}
			if err := r.dropBindings(ctx, func(b Binding) bool {
				_, want := stored[b.ID]
				return b.Tenant == p.Tenant && b.Platform == p.Platform && b.Kind == platform.BindAllow && !want
			}); err != nil {
				return err
			}
			for _, u := range cur.Allow {
				if stored[u] {
					continue
				}
				b := Binding{Platform: p.Platform, Kind: platform.BindAllow, ID: u, Tenant: p.Tenant}
				data, _, err := r.write(ctx, p.Tenant, nsBindings, b.key(), b, false)
				if err != nil {
					return err
				}
				written[b.key()] = data
				stored[u] = true // a user listed twice is written once
			}
		}
		e, _, err := r.kv.Get(ctx, nsBindings, p.key())
		if err != nil {
			return err
		}
		var now principalEntry
		_ = json.Unmarshal(e.Value, &now) // none, or a corrupt one: no Rev
		if now.Rev == cur.Rev {
			return nil
		}
		cur = now // another request's principal, or none
	}
	return fmt.Errorf("%w: tenant %q's principal on %s kept changing meanwhile; try again", ErrConflict, p.Tenant, p.Platform)
}

// tenantTurn waits for tenant's turn on the instance (until ctx is
// done), and returns the end of it. A principal is set in it (a tenant's
// requests racing on one instance would each send the others round
// syncAllow's loop again, the list's writes with it), and a link code or
// enrollment token minted (a tenant's codes are counted against
// MaxLinkCodes before one more is stored), a DM default set on the link
// it reads, a binding removed (Unbind), a policy or a wake URL stored, and
// a gateway created, rotated, removed, enrolled or provisioned (a
// tenant's gateways are counted against its MaxGateways before one more
// is stored), so one tenant's store round trips hold up none of another's
// changes.
func (r *Registry) tenantTurn(ctx context.Context, tenant string) (func(), error) {
	for {
		r.turnMu.Lock()
		busy, held := r.turns[tenant]
		if !held {
			mine := make(chan struct{})
			r.turns[tenant] = mine
			r.turnMu.Unlock()
			return func() {
				r.turnMu.Lock()
				delete(r.turns, tenant)
				r.turnMu.Unlock()
				close(mine)
			}, nil
		}
		r.turnMu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// principalEntry is a principal binding as SetPrincipal stores it: with
// its allow-list, and a value no other request's is (Rev, never empty),
// so the allow-list on the platform is the last request's whole.
type principalEntry struct {
	Binding
	Allow []string `json:"allow,omitempty"`
	Rev   string   `json:"rev"`
}

// SetDMDefault makes tenant the one user's DMs on platformName reach; the
// user must be linked to tenant (ErrNotFound otherwise). It replaces the
// user's earlier default, whichever tenant set it.
func (r *Registry) SetDMDefault(ctx context.Context, tenant, platformName, user string) error {
	b, err := CanonicalBinding(Binding{Platform: platformName, Kind: platform.BindDMDefault, ID: user, Tenant: tenant})
	if err != nil {
		return err
	}
	link := Binding{Platform: b.Platform, Kind: platform.BindUser, ID: b.ID, Tenant: tenant}
	defer r.uncount(ctx, tenant) // once the turn ends; a refused write may stand too
	// Not mu: its reads and write are the tenant's.
	done, err := r.tenantTurn(ctx, tenant)
	if err != nil {
		return err
	}
	defer done()
	t, err := r.tenant(ctx, tenant)
	if err != nil {
		return err
	}
	if _, ok, err := r.kv.Get(ctx, nsBindings, link.key()); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: the user is not linked to this tenant (have them send /link <code> first)", ErrNotFound)
	}
	return r.put(ctx, tenant, t.Gen, nsBindings, b.key(), b, false)
}

// DropManaged removes every binding the management plane made for tenant
// (links, scope claims, DM defaults, principal, allow-list) and its
// outstanding link codes, and returns how many bindings went. It marks
// the drop under way before and done after (dropKey), so a take-back
// that lands meanwhile or read the mark before either puts back none of
// the tenant's bindings (giveBack). The codes
// go first: a redemption that consumed one before has written its link,
// which goes with the others (see RedeemLinkCode). It takes no lock:
// another tenant's changes go on while it sweeps.
func (r *Registry) DropManaged(ctx context.Context, tenant string) (int, error) {
	if err := r.markDrop(ctx, tenant, true); err != nil {
		return 0, err
	}
	if _, _, err := r.sweep(ctx, nsLinkCodes, tenant, func(c expiring) bool { return c.Tenant == tenant }); err != nil {
		return 0, err
	}
	n := 0
	err := r.dropBindings(ctx, func(b Binding) bool {
		drop := b.Tenant == tenant && managedKinds[b.Kind]
		if drop {
			n++
		}
		return drop
	})
	if err == nil {
		err = r.markDrop(ctx, tenant, false)
	}
	r.notify(ctx)
	return n, err
}

// isDropMark reports whether b, listed in nsBindings, is a dropMark.
func isDropMark(b Binding) bool { return b.Platform == "" }

// markDrop stores a fresh mark (dropKey) of tenant, dropping or not, and
// removes it again when it finds the tenant gone after: a deletion whose
// sweep listed the marks before it would leave it for good.
func (r *Registry) markDrop(ctx context.Context, tenant string, dropping bool) error {
	var mark []byte
	for round := 0; mark == nil; round++ {
		if err := backoff(ctx, round); err != nil || round == maxSwaps {
			return cmp.Or(err, fmt.Errorf("%w: tenant %q's drop mark kept changing; try again", ErrConflict, tenant))
		}
		e, _, err := r.kv.Get(ctx, nsBindings, dropKey(tenant))
		if err != nil {
			return err
		}
		var cur dropMark
		now := r.clock.Now()
		if json.Unmarshal(e.Value, &cur) != nil || !cur.dropping(now) { // none, corrupt or expired
			cur = dropMark{}
		}
		next := dropMark{tenant, cur.Drops - 1, cur.Until}
		if dropping {
			next.Drops, next.Until = cur.Drops+1, now.Add(dropExpiry)
		}
		next.Drops = max(next.Drops, 0)
		data, err := stamped(next)
		if err != nil {
			return err
		}
		if swapped, err := r.kv.CompareAndSwap(ctx, nsBindings, dropKey(tenant), e.Value, data); err != nil { // e.Value nil: none stored
			return err
		} else if swapped {
			mark = data
		}
	}
	if _, err := r.tenant(ctx, tenant); !errors.Is(err, ErrNotFound) {
		return err
	}
	_, err := r.kv.CompareAndSwap(ctx, nsBindings, dropKey(tenant), mark, nil)
	return err
}

// dropBindings deletes the stored bindings drop selects, each only while
// it is still the binding drop saw (the store's CompareAndSwap): one
// another tenant wrote under the same key meanwhile, on any instance (an
// owner's claim replacing a set-aside one), stays. It needs no lock (its swaps order it with other writers).
func (r *Registry) dropBindings(ctx context.Context, drop func(Binding) bool) error {
	entries, _, err := r.kv.List(ctx, nsBindings)
	if err != nil {
		return fmt.Errorf("registry: read %s: %w", nsBindings, err)
	}
	for _, e := range entries {
		var b Binding
		if json.Unmarshal(e.Value, &b) == nil && drop(b) { // a corrupt one is no tenant's (State.Corrupt)
			if _, err := r.kv.CompareAndSwap(ctx, nsBindings, e.Key, e.Value, nil); err != nil {
				return err
			}
		}
	}
	return nil
}
