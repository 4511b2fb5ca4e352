package registry_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/internal/redistest"
	"connector/platform"
	"connector/registry"
	"connector/store"
)

func bindingsOf(s registry.State, tenant, kind string) []string {
	var out []string
	for _, b := range s.Bindings {
		if b.Tenant == tenant && b.Kind == kind {
			out = append(out, b.Platform+":"+b.ID)
		}
	}
	slices.Sort(out)
	return out
}

// TestLinkCodes: a code links the account that redeems it once; a second
// redeem, an expired code, another platform's code and a malformed code
// link nothing; a tenant's outstanding codes are bounded.
func TestLinkCodes(t *testing.T) {
	ctx := context.Background()
	r, c := newRegistry(t)
	made := c.Now()
	for _, id := range []string{"a", "b"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	code, exp, err := r.IssueLinkCode(ctx, "a", "gw-a", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(code) != registry.LinkCodeLen || !exp.Equal(c.Now().Add(registry.DefaultLinkTTL)) {
		t.Fatalf("code %q expires %v", code, exp)
	}
	// A user may type it in lower case with a hyphen.
	typed := code[:5] + "-" + code[5:]
	tenant, created, err := r.RedeemLinkCode(ctx, "discord", "71", " "+typed)
	if err != nil || tenant != "a" || !created.Equal(made) {
		t.Fatalf("redeem: %q of %v, %v; want a of %v (its creation)", tenant, created, err, made)
	}
	if _, _, err := r.RedeemLinkCode(ctx, "discord", "72", code); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("second redeem: %v, want ErrNotFound", err)
	}
	// The user it linked sending it again (a resend, a retry after a lost
	// answer) is answered linked, as the first time.
	if tenant, _, err := r.RedeemLinkCode(ctx, "discord", "71", code); err != nil || tenant != "a" {
		t.Fatalf("the linked user's redeem again: %q, %v; want a", tenant, err)
	}
	s, _ := effective(t, r)
	if got := bindingsOf(s, "a", platform.BindUser); !slices.Equal(got, []string{"discord:71"}) {
		t.Fatalf("a's links %q", got)
	}

	// The same user may also link to b.
	code, _, _ = r.IssueLinkCode(ctx, "b", "gw-b", "telegram", time.Minute)
	if _, _, err := r.RedeemLinkCode(ctx, "discord", "71", code); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("a telegram code redeemed on discord: %v", err)
	}
	if tenant, _, err := r.RedeemLinkCode(ctx, "telegram", "71", code); err != nil || tenant != "b" {
		t.Fatalf("redeem on telegram: %q, %v", tenant, err)
	}

	code, _, _ = r.IssueLinkCode(ctx, "b", "gw-b", "", time.Minute)
	c.Advance(time.Minute)
	if _, _, err := r.RedeemLinkCode(ctx, "discord", "73", code); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("expired code: %v", err)
	}
	for _, bad := range []string{"", "short", "0000000000", "ABCDEFGHJK!", string(make([]byte, 1000))} {
		if _, _, err := r.RedeemLinkCode(ctx, "discord", "74", bad); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("code %q: %v", bad, err)
		}
	}
	if _, _, err := r.IssueLinkCode(ctx, "a", "gw-a", "", 2*registry.MaxLinkTTL); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("long ttl: %v", err)
	}
	if _, _, err := r.IssueLinkCode(ctx, "nobody", "gw", "", 0); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("unknown tenant: %v", err)
	}
	for range registry.MaxLinkCodes {
		if _, _, err := r.IssueLinkCode(ctx, "a", "gw-a", "", 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := r.IssueLinkCode(ctx, "a", "gw-a", "", 0); !errors.Is(err, registry.ErrLimit) {
		t.Fatalf("code over the bound: %v", err)
	}
	// Expired codes free their places.
	c.Advance(registry.DefaultLinkTTL)
	if _, _, err := r.IssueLinkCode(ctx, "a", "gw-a", "", 0); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
}

// TestManagedBindings: a scope has one tenant; a principal replaces the
// earlier one with its allow-list; a DM default needs a link; DropManaged
// removes what the management plane made and nothing else.
func TestManagedBindings(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	for _, id := range []string{"a", "b"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	scope := registry.Binding{Platform: "discord", Kind: platform.BindScope, ID: "501", Tenant: "a"}
	if err := r.Bind(ctx, scope); err != nil {
		t.Fatal(err)
	}
	other := scope
	other.Tenant = "b"
	if err := r.Bind(ctx, other); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("b claims a's scope: %v", err)
	}
	if err := r.SetPrincipal(ctx, "a", "discord", platform.PrincipalAllowList, []string{"80", "081"}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetPrincipal(ctx, "a", "discord", platform.PrincipalAny, []string{"80"}); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("an allow-list with any: %v", err)
	}
	if err := r.SetPrincipal(ctx, "a", "discord", "everyone", nil); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("unknown principal: %v", err)
	}
	s, _ := effective(t, r)
	if got := bindingsOf(s, "a", platform.BindAllow); !slices.Equal(got, []string{"discord:80", "discord:81"}) {
		t.Fatalf("allow-list %q", got)
	}
	if err := r.SetPrincipal(ctx, "a", "discord", platform.PrincipalAny, nil); err != nil {
		t.Fatal(err)
	}
	s, _ = effective(t, r)
	if got := bindingsOf(s, "a", platform.BindPrincipal); !slices.Equal(got, []string{"discord:any"}) || len(bindingsOf(s, "a", platform.BindAllow)) != 0 {
		t.Fatalf("principal %q, allow %q", got, bindingsOf(s, "a", platform.BindAllow))
	}
	if err := r.SetDMDefault(ctx, "a", "discord", "71"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("DM default without a link: %v", err)
	}
	for _, tenant := range []string{"a", "b"} {
		if err := r.Bind(ctx, registry.Binding{Platform: "discord", Kind: platform.BindUser, ID: "71", Tenant: tenant}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetDMDefault(ctx, "b", "discord", "71"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDMDefault(ctx, "a", "discord", "71"); err != nil {
		t.Fatal(err)
	}
	if err := r.Bind(ctx, registry.Binding{Platform: "telegram", Kind: platform.BindChat, ID: "42", Tenant: "a"}); err != nil {
		t.Fatal(err)
	}
	n, err := r.DropManaged(ctx, "a")
	if err != nil || n != 4 { // scope, principal, link, DM default
		t.Fatalf("DropManaged: %d, %v", n, err)
	}
	s, _ = effective(t, r)
	var left []string
	for _, b := range s.Bindings {
		left = append(left, b.Tenant+":"+b.Platform+"/"+b.Kind+"/"+b.ID)
	}
	slices.Sort(left)
	if want := []string{"a:telegram/chat/42", "b:discord/user/71"}; !slices.Equal(left, want) {
		t.Fatalf("left %q, want %q", left, want)
	}
}

// FuzzNormalizeLinkCode: any text a user sends normalizes to a code of
// LinkCodeLen characters, stable under normalizing again, or to nothing.
func FuzzNormalizeLinkCode(f *testing.F) {
	for _, s := range []string{"ABCDE-FGHJK", "abcde fghjk", "", "0O1IL", "ÄBCDEFGHJK", "-----ABCDEFGHJK-----"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, code string) {
		norm, ok := registry.NormalizeLinkCode(code)
		if !ok {
			if norm != "" {
				t.Fatalf("%q: refused but %q", code, norm)
			}
			return
		}
		if len(norm) != registry.LinkCodeLen {
			t.Fatalf("%q: normalized to %q", code, norm)
		}
		if again, ok := registry.NormalizeLinkCode(norm); !ok || again != norm {
			t.Fatalf("%q: %q normalizes again to %q %v", code, norm, again, ok)
		}
	})
}

// TestLinkCodeSingleUseAcrossInstances: two instances sharing a Redis
// store race to redeem one code for different users; exactly one wins.
func TestLinkCodeSingleUseAcrossInstances(t *testing.T) {
	ctx := context.Background()
	one, two := twoOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		code, _, err := one.IssueLinkCode(ctx, "a", "gw-a", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var wins atomic.Int32
		for i, r := range []*registry.Registry{one, two, one, two} {
			wg.Go(func() {
				user := strconv.Itoa(1000*round + i)
				if _, _, err := r.RedeemLinkCode(ctx, "discord", user, code); err == nil {
					wins.Add(1)
				} else if !errors.Is(err, registry.ErrNotFound) {
					t.Errorf("redeem: %v", err)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d redeemers won, want 1", round, n)
		}
	}
}

// TestSameUserRedeemingTwiceStaysLinkedOnRedis: two instances on one
// redis-server; the user sends one code twice. While instance one's
// redemption has written the link and is about to consume the code,
// instance two's redemption of the same code for the same user finds the
// link already there and consumes the code: it answers success, and the
// user stays linked (both answer so). Before, instance one, finding the
// code gone, took its link back: the user was told "linked" and was not,
// with the code spent.
func TestSameUserRedeemingTwiceStaysLinkedOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	code, _, err := one.IssueLinkCode(ctx, "a", "gw-a", "telegram", 0)
	if err != nil {
		t.Fatal(err)
	}
	var raced atomic.Bool
	var twoTenant string
	var twoErr error
	hooked.before = func(op, namespace, _ string) {
		if (op == "cas" || op == "delete") && namespace == "registry/linkcodes" && raced.CompareAndSwap(false, true) {
			twoTenant, _, twoErr = two.RedeemLinkCode(ctx, "telegram", "42", code)
		}
	}
	oneTenant, _, oneErr := one.RedeemLinkCode(ctx, "telegram", "42", code)
	hooked.before = nil
	if !raced.Load() {
		t.Fatal("the hook never ran: instance one consumed no code")
	}
	if oneErr != nil || oneTenant != "a" || twoErr != nil || twoTenant != "a" {
		t.Fatalf("the two redemptions of one code by one user: %q %v and %q %v, want a linked by both", oneTenant, oneErr, twoTenant, twoErr)
	}
	s, _ := effective(t, two)
	if got := bindingsOf(s, "a", platform.BindUser); !slices.Equal(got, []string{"telegram:42"}) {
		t.Fatalf("links of a after both succeeded: %q, want telegram:42", got)
	}
	if _, _, err := two.RedeemLinkCode(ctx, "telegram", "43", code); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("another user's redemption of the spent code: %v, want ErrNotFound", err)
	}
}

// TestSpentCodeOutlivesAnotherIssueOnRedis: as
// TestSameUserRedeemingTwiceStaysLinkedOnRedis, and another tenant's
// IssueLinkCode (its sweep) runs between instance two's consumption and
// instance one's. The spent code's record is kept until the code would
// have expired, so instance one still finds its link recorded and keeps
// it. Before, the sweep deleted every spent record, of any tenant:
// instance one found the code gone and took the link back that instance
// two had answered "linked" for.
func TestSpentCodeOutlivesAnotherIssueOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	for _, id := range []string{"a", "b"} {
		if err := one.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	code, _, err := one.IssueLinkCode(ctx, "a", "gw-a", "telegram", 0)
	if err != nil {
		t.Fatal(err)
	}
	var raced atomic.Bool
	var twoTenant string
	var twoErr, issueErr error
	hooked.before = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/linkcodes" && raced.CompareAndSwap(false, true) {
			twoTenant, _, twoErr = two.RedeemLinkCode(ctx, "telegram", "42", code)
			_, _, issueErr = two.IssueLinkCode(ctx, "b", "gw-b", "", 0)
		}
	}
	oneTenant, _, oneErr := one.RedeemLinkCode(ctx, "telegram", "42", code)
	hooked.before = nil
	if !raced.Load() {
		t.Fatal("the hook never ran: instance one consumed no code")
	}
	if issueErr != nil {
		t.Fatalf("IssueLinkCode of b: %v", issueErr)
	}
	if oneErr != nil || oneTenant != "a" || twoErr != nil || twoTenant != "a" {
		t.Fatalf("the two redemptions of one code by one user, b issuing a code between: %q %v and %q %v, want a linked by both", oneTenant, oneErr, twoTenant, twoErr)
	}
	s, _ := effective(t, two)
	if got := bindingsOf(s, "a", platform.BindUser); !slices.Equal(got, []string{"telegram:42"}) {
		t.Fatalf("links of a after both succeeded: %q, want telegram:42", got)
	}
}

// TestLinkCodeBoundExactAcrossInstancesOnRedis: tenant a has room for one
// more link code; while instance one's issuance, having counted a's codes,
// writes its code, instance two issues one. Of the two, one code stays
// and the other issuance is ErrLimit: a holds MaxLinkCodes outstanding.
// Before, each instance counted on its own and both were issued.
func TestLinkCodeBoundExactAcrossInstancesOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for range registry.MaxLinkCodes - 1 {
		if _, _, err := one.IssueLinkCode(ctx, "a", "gw-a", "", 0); err != nil {
			t.Fatal(err)
		}
	}
	var raced atomic.Bool
	var twoErr error
	hooked.before = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/linkcodes" && raced.CompareAndSwap(false, true) {
			_, _, twoErr = two.IssueLinkCode(ctx, "a", "gw-a", "", 0)
		}
	}
	_, _, oneErr := one.IssueLinkCode(ctx, "a", "gw-a", "", 0)
	hooked.before = nil
	if !raced.Load() {
		t.Fatal("the hook never ran: instance one wrote no code")
	}
	if (oneErr == nil) == (twoErr == nil) || !errors.Is(cmp.Or(oneErr, twoErr), registry.ErrLimit) {
		t.Fatalf("the last code issued on two instances at once: %v and %v, want one issued, the other ErrLimit", oneErr, twoErr)
	}
	if err := two.DeleteTenant(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if s, err := one.Stored(ctx); err != nil || len(s.Tenants) != 0 {
		t.Fatalf("stored after a's deletion: %+v, %v", s, err)
	}
	if entries, _, err := hooked.Registry().List(ctx, "registry/reserved"); err != nil || len(entries) != 0 {
		t.Fatalf("reservations after a's deletion: %v, %v; want its link code guard gone with it", entries, err)
	}
}

// TestResentCodeDoesNotUndoAnUnlinkOnRedis: a user linked by a code, then
// unlinked (an admin unbind) on another instance within the
// code's lifetime, resends the code: it is refused and the user stays
// unlinked. Before, the resend of the spent code found the link missing
// and made it again, undoing the removal.
func TestResentCodeDoesNotUndoAnUnlinkOnRedis(t *testing.T) {
	ctx := context.Background()
	one, two := twoOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	code, _, err := one.IssueLinkCode(ctx, "a", "gw-a", "telegram", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := one.RedeemLinkCode(ctx, "telegram", "42", code); err != nil {
		t.Fatal(err)
	}
	if err := two.Unbind(ctx, registry.Binding{Platform: "telegram", Kind: platform.BindUser, ID: "42", Tenant: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := one.RedeemLinkCode(ctx, "telegram", "42", code); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("the unlinked user's resend of the spent code: %v, want ErrNotFound", err)
	}
	s, _ := effective(t, one)
	if got := bindingsOf(s, "a", platform.BindUser); len(got) != 0 {
		t.Fatalf("links of a after the unlink and the resend: %q, want none", got)
	}
}

// TestRedeemRacesAnUnbindOnRedis: an admin unbind of the user's link on
// instance two, after instance one consumed the code (before its link,
// and after it), leaves the user unlinked, and instance one says so.
func TestRedeemRacesAnUnbindOnRedis(t *testing.T) {
	for _, namespace := range []string{"registry/linkcodes", "registry/ownership"} {
		t.Run("after the cas of "+namespace, func(t *testing.T) {
			ctx := context.Background()
			hooked, one, two := hookedOnRedis(t)
			if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
				t.Fatal(err)
			}
			code, _, err := one.IssueLinkCode(ctx, "a", "gw-a", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			raced := false
			hooked.after = func(op, ns, _ string) {
				if !raced && op == "cas" && ns == namespace {
					raced = true
					err := two.Unbind(ctx, registry.Binding{Platform: "telegram", Kind: platform.BindUser, ID: "4001", Tenant: "a"})
					if err != nil && !errors.Is(err, registry.ErrNotFound) {
						t.Errorf("unbind while the code is redeemed: %v", err)
					}
				}
			}
			_, _, err = one.RedeemLinkCode(ctx, "telegram", "4001", code)
			hooked.after = nil
			if !raced {
				t.Fatal("the hook never ran")
			}
			if !errors.Is(err, registry.ErrNotFound) {
				t.Fatalf("redeeming while the link is unbound: %v, want ErrNotFound", err)
			}
			s, _ := effective(t, two)
			if got := bindingsOf(s, "a", platform.BindUser); len(got) != 0 {
				t.Fatalf("links of a after the unbind: %q", got)
			}
		})
	}
}

// TestSpentCodesAreNotOutstanding: a tenant's redeemed codes, kept until
// they would have expired, do not count against its MaxLinkCodes.
func TestSpentCodesAreNotOutstanding(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory(clock.System)
	t.Cleanup(func() { _ = st.Close() })
	r := registry.New(st, clock.System)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for i := range registry.MaxLinkCodes + 1 {
		code, _, err := r.IssueLinkCode(ctx, "a", "gw-a", "", 0)
		if err != nil {
			t.Fatalf("code %d, the earlier ones redeemed: %v", i, err)
		}
		if _, _, err := r.RedeemLinkCode(ctx, "telegram", strconv.Itoa(i+1), code); err != nil {
			t.Fatalf("redeem code %d: %v", i, err)
		}
	}
}

// TestBindPrincipal: binding a principal (the admin CLI's way) replaces
// the tenant's earlier one.
func TestBindPrincipal(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{platform.PrincipalAny, platform.PrincipalOwnerOnly} {
		if err := r.Bind(ctx, registry.Binding{Platform: "telegram", Kind: platform.BindPrincipal, ID: mode, Tenant: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := effective(t, r)
	if got := bindingsOf(s, "a", platform.BindPrincipal); !slices.Equal(got, []string{"telegram:owner-only"}) {
		t.Fatalf("principal %q", got)
	}
}

// twoOnRedis returns two registries on one fresh redis-server, as two
// instances sharing it have.
func twoOnRedis(t *testing.T) (*registry.Registry, *registry.Registry) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	open := func() *registry.Registry {
		st, err := store.Open(context.Background(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return registry.New(st, clock.System)
	}
	return open(), open()
}

// TestUndecodableLinkCodeIsSwept: a link code entry that does not decode
// (a torn or foreign write) is dropped when codes are issued, as an
// undecodable enrollment token is when tokens are minted. Before, it made
// every tenant's IssueLinkCode fail for good.
func TestUndecodableLinkCodeIsSwept(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	r := registry.New(st, clk)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Registry().Put(ctx, "registry/linkcodes", "torn", []byte(`{"tenant": "a", "expi`)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := r.IssueLinkCode(ctx, "a", "gw-a", "", 0); err != nil {
			t.Fatalf("IssueLinkCode with an undecodable entry stored: %v", err)
		}
	}
	if _, ok, _ := st.Registry().Get(ctx, "registry/linkcodes", "torn"); ok {
		t.Error("the undecodable entry is still stored")
	}
}

// TestRedeemRacesADeprovisionOnRedis: two instances on one redis-server;
// while instance one redeems tenant a's link code, instance two drops
// what the management plane made for a (a deprovision): before the
// redemption consumes the code, after it did, and after the link is
// written. No link to a survives any, and the redemption, whose code the
// deprovision took, is ErrNotFound. Before, a redemption that had
// consumed its code linked the user after the deprovision had cleared the
// tenant's links.
func TestRedeemRacesADeprovisionOnRedis(t *testing.T) {
	for _, when := range []struct {
		name, namespace string
		before          bool
	}{
		{"before the consumption", "registry/linkcodes", true},
		{"after the consumption", "registry/linkcodes", false},
		{"after the link", "registry/ownership", false},
	} {
		t.Run(when.name, func(t *testing.T) {
			ctx := context.Background()
			hooked, one, two := hookedOnRedis(t)
			if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
				t.Fatal(err)
			}
			code, _, err := one.IssueLinkCode(ctx, "a", "gw-a", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			raced := false
			hook := func(op, namespace, _ string) {
				if raced || op != "cas" || namespace != when.namespace {
					return
				}
				raced = true
				if _, err := two.DropManaged(ctx, "a"); err != nil {
					t.Errorf("deprovision while the code is redeemed: %v", err)
				}
			}
			if when.before {
				hooked.before = hook
			} else {
				hooked.after = hook
			}
			_, _, err = one.RedeemLinkCode(ctx, "telegram", "4001", code)
			if !raced {
				t.Fatal("the hook never ran")
			}
			if !errors.Is(err, registry.ErrNotFound) {
				t.Fatalf("redeeming a code the deprovision took: %v, want ErrNotFound", err)
			}
			s, _ := effective(t, two)
			if got := bindingsOf(s, "a", platform.BindUser); len(got) != 0 {
				t.Fatalf("links of a after its deprovision: %q", got)
			}
		})
	}
}

// TestRedeemGivenUpAfterTheLinkOnRedis: a redemption whose request is
// given up right after the link is written still consumes the code, or
// takes its link back: one code makes one link, whoever redeems it next.
// Before, the code's delete and the link's undo both ran on the request's
// context and failed: the link stood and the code stayed redeemable.
func TestRedeemGivenUpAfterTheLinkOnRedis(t *testing.T) {
	bg := context.Background()
	hooked, one, _ := hookedOnRedis(t)
	if err := one.CreateTenant(bg, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	code, _, err := one.IssueLinkCode(bg, "a", "gw-a", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	hooked.after = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/ownership" { // the link written
			cancel()
		}
	}
	_, _, first := one.RedeemLinkCode(ctx, "telegram", "4101", code)
	hooked.after = nil
	_, _, second := one.RedeemLinkCode(bg, "telegram", "4102", code)
	s, err := one.Stored(bg)
	if err != nil {
		t.Fatal(err)
	}
	if links := len(s.Bindings); (first == nil) == (second == nil) || links != 1 {
		t.Fatalf("one code, a redemption given up after its link (%v), then another (%v): %d links, want one redemption and its link", first, second, links)
	}
}

// TestSetPrincipalRaceOnRedis: two instances on one redis-server; while
// instance one's SetPrincipal of tenant a's allow-list [4601 4602] has
// stored the principal and is about to write the list, instance two sets a's allow-list to [4603]. The stored
// allow-list is two's, the last to store the principal, whole, not the
// union of the two: before, each
// dropped the old list and then wrote its own, so the lists added up.
func TestSetPrincipalRaceOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	raced := false
	hooked.before = func(op, namespace, key string) {
		if raced || op != "cas" || namespace != "registry/bindings" || !strings.Contains(key, "/allow/") {
			return
		}
		raced = true
		if err := two.SetPrincipal(ctx, "a", "telegram", platform.PrincipalAllowList, []string{"4603"}); err != nil {
			t.Errorf("instance two's SetPrincipal: %v", err)
		}
	}
	err := one.SetPrincipal(ctx, "a", "telegram", platform.PrincipalAllowList, []string{"4601", "4602"})
	hooked.before = nil
	if !raced || err != nil {
		t.Fatalf("instance one's SetPrincipal: %v (raced %v)", err, raced)
	}
	s, _, err := two.Effective(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := bindingsOf(s, "a", platform.BindAllow)
	slices.Sort(got)
	if !slices.Equal(got, []string{"telegram:4603"}) {
		t.Errorf("a's allow-list after two racing SetPrincipal: %v, want [telegram:4603], that of the last to store the principal", got)
	}
}

// TestSetPrincipalNotifiesOnRedis: two instances on one redis-server;
// instance one's SetPrincipal of a principal without an allow-list
// (owner-only, any) tells instance two, watching, at once: before, only
// the allow-list's writes told the other instances, so such a principal
// reached them only at their next periodic look (registryPoll).
func TestSetPrincipalNotifiesOnRedis(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 16)
	if err := two.Watch(ctx, time.Hour, func() { changed <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{platform.PrincipalOwnerOnly, platform.PrincipalAny} {
		if err := one.SetPrincipal(ctx, "a", "telegram", mode, nil); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("instance two not told of a's principal %s within 10 s", mode)
		}
	}
}

// TestSetPrincipalRacingABindOnRedis: while instance one's SetPrincipal
// of tenant a's allow-list [4701 4702] has stored the principal and is
// about to write the list, an operator's Bind on instance two makes a's
// principal "any" (a plain binding, as an instance of an earlier version
// stores a principal too). The allow-list stays one's, as after a Bind
// that comes later: before, one took the principal without an allow-list
// for an empty one and dropped a's whole list.
func TestSetPrincipalRacingABindOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	raced := false
	hooked.before = func(op, namespace, key string) {
		if raced || op != "cas" || namespace != "registry/bindings" || !strings.Contains(key, "/allow/") {
			return
		}
		raced = true
		if err := two.Bind(ctx, registry.Binding{Platform: "telegram", Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "a"}); err != nil {
			t.Errorf("instance two's Bind of the principal: %v", err)
		}
	}
	err := one.SetPrincipal(ctx, "a", "telegram", platform.PrincipalAllowList, []string{"4701", "4702"})
	hooked.before = nil
	if !raced || err != nil {
		t.Fatalf("instance one's SetPrincipal: %v (raced %v)", err, raced)
	}
	s, _, err := two.Effective(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := bindingsOf(s, "a", platform.BindAllow)
	slices.Sort(got)
	if !slices.Equal(got, []string{"telegram:4701", "telegram:4702"}) {
		t.Errorf("a's allow-list after a SetPrincipal raced by a Bind of the principal: %v, want [telegram:4701 telegram:4702]", got)
	}
	if got := bindingsOf(s, "a", platform.BindPrincipal); !slices.Equal(got, []string{"telegram:" + platform.PrincipalAny}) {
		t.Errorf("a's principal %v, want the Bind's, the last stored", got)
	}
}

// TestSetPrincipalLetsOtherTenantsWriteOnRedis: while tenant a's
// SetPrincipal of a full allow-list (MaxAllowList users) is held at the
// write of its first user, tenant b's gateway is created and b's
// principal set, on the same instance: both finish, and a's list is
// whole after. Before, SetPrincipal held the registry-wide lock across
// the list's thousands of store calls, and every other tenant's change on
// the instance waited for it.
func TestSetPrincipalLetsOtherTenantsWriteOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, _ := hookedOnRedis(t)
	for _, id := range []string{"a", "b"} {
		if err := one.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	allow := make([]string, registry.MaxAllowList)
	for i := range allow {
		allow[i] = strconv.Itoa(490000 + i)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hooked.before = func(op, _, key string) {
		if op == "cas" && strings.Contains(key, "/allow/") && strings.HasSuffix(key, "/a") {
			once.Do(func() { close(held); <-release })
		}
	}
	setA := make(chan error, 1)
	go func() { setA <- one.SetPrincipal(ctx, "a", "telegram", platform.PrincipalAllowList, allow) }()
	select {
	case <-held:
	case err := <-setA:
		t.Fatalf("a's SetPrincipal ended (%v) without writing its allow-list", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a's SetPrincipal wrote no user of its allow-list within 10 s")
	}
	others := make(chan error, 1)
	go func() {
		_, err := one.CreateGateway(ctx, "b", "gw-b")
		if err == nil {
			err = one.SetPrincipal(ctx, "b", "telegram", platform.PrincipalAllowList, []string{"4901"})
		}
		others <- err
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Errorf("tenant b's changes: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("tenant b's gateway and principal not written within 10 s while a's SetPrincipal was held mid-way")
	}
	close(release)
	select {
	case err := <-setA:
		if err != nil {
			t.Fatalf("a's SetPrincipal: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a's SetPrincipal not done within a minute of its release")
	}
	hooked.before = nil
	s, _ := effective(t, one)
	if got := bindingsOf(s, "a", platform.BindAllow); len(got) != registry.MaxAllowList {
		t.Errorf("a's allow-list has %d users, want %d", len(got), registry.MaxAllowList)
	}
}

// TestSetPrincipalOfAGatewayDeprovisionedMeanwhileOnRedis: right after
// instance one's SetPrincipal for gw writes the first user of tenant a's
// allow-list, instance two deprovisions gw (removes it, then drops what
// the management plane made for a). The SetPrincipal is ErrNotFound and
// leaves no principal nor allow-list: the list's writes, judged together
// after the last, are all taken back.
func TestSetPrincipalOfAGatewayDeprovisionedMeanwhileOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := one.CreateGateway(ctx, "a", "gw"); err != nil {
		t.Fatal(err)
	}
	raced := false
	hooked.after = func(op, _, key string) {
		if raced || op != "cas" || !strings.Contains(key, "/allow/") {
			return
		}
		raced = true
		err := two.DeleteGateway(ctx, "a", "gw")
		if err == nil {
			_, err = two.DropManaged(ctx, "a")
		}
		if err != nil {
			t.Errorf("instance two's deprovision of gw: %v", err)
		}
	}
	err := one.SetPrincipal(registry.ForGateway(ctx, "gw", nil), "a", "telegram", platform.PrincipalAllowList, []string{"4911", "4912", "4913"})
	hooked.after = nil
	if !raced || !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("a SetPrincipal of gw, deprovisioned meanwhile: %v (raced %v), want ErrNotFound", err, raced)
	}
	s, _ := effective(t, two)
	if allow, p := bindingsOf(s, "a", platform.BindAllow), bindingsOf(s, "a", platform.BindPrincipal); len(allow)+len(p) != 0 {
		t.Errorf("left after the deprovision: allow-list %v, principal %v, want none", allow, p)
	}
}

// TestRedeemCodeInFlightIsNotAnotherUsersOnRedis: two instances on one
// redis-server; a user sends two codes of one tenant. While instance
// one's redemption of the first is about to write the link, instance two
// redeems the second for the same user (the same link, answered
// "linked"), and another user sends the first: refused, the code spent
// for the first user. Instance one's write loses to the link, which its
// next round finds there: nothing to write, and it answers linked. Before,
// the link was written before the code was consumed: the other user was
// linked by a code whose first redemption was still under way.
func TestRedeemCodeInFlightIsNotAnotherUsersOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	var codes [2]string
	for i := range codes {
		code, _, err := one.IssueLinkCode(ctx, "a", "gw-a", "telegram", 0)
		if err != nil {
			t.Fatal(err)
		}
		codes[i] = code
	}
	var raced atomic.Bool
	var twoErr, otherErr error
	hooked.before = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/bindings" && raced.CompareAndSwap(false, true) {
			_, _, twoErr = two.RedeemLinkCode(ctx, "telegram", "4601", codes[1])
			_, _, otherErr = two.RedeemLinkCode(ctx, "telegram", "4602", codes[0])
		}
	}
	_, _, oneErr := one.RedeemLinkCode(ctx, "telegram", "4601", codes[0])
	hooked.before = nil
	if !raced.Load() {
		t.Fatal("the hook never ran: instance one wrote no link")
	}
	if twoErr != nil || oneErr != nil {
		t.Fatalf("the user's two redemptions: %v on instance two, %v on instance one; want both linked", twoErr, oneErr)
	}
	if !errors.Is(otherErr, registry.ErrNotFound) {
		t.Fatalf("another user's redemption of a code whose redemption is under way: %v, want ErrNotFound", otherErr)
	}
	s, _ := effective(t, two)
	if got := bindingsOf(s, "a", platform.BindUser); !slices.Equal(got, []string{"telegram:4601"}) {
		t.Fatalf("links of a: %q, want telegram:4601 alone", got)
	}
}

// TestRedeemTakesBackItsOwnLinkOnlyOnRedis: two instances on one
// redis-server; while instance one redeems tenant a's code, after its link
// is written, instance two deprovisions a (the code and the link go),
// and the same user redeems a new code of a there. Instance one finds its
// code gone and takes its link back, leaving the link the new code made:
// that user was answered linked. Before, the take-back compared the bytes
// of a link, which every link of the user to the tenant has, and removed
// the second link.
func TestRedeemTakesBackItsOwnLinkOnlyOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	code, _, err := one.IssueLinkCode(ctx, "a", "gw-a", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	raced := false
	hooked.after = func(op, namespace, _ string) {
		if raced || op != "cas" || namespace != "registry/ownership" { // the link written
			return
		}
		raced = true
		if _, err := two.DropManaged(ctx, "a"); err != nil {
			t.Errorf("deprovision while the code is redeemed: %v", err)
		}
		again, _, err := two.IssueLinkCode(ctx, "a", "gw-b", "", 0)
		if err == nil {
			_, _, err = two.RedeemLinkCode(ctx, "telegram", "4901", again)
		}
		if err != nil {
			t.Errorf("the user's redemption of a new code meanwhile: %v", err)
		}
	}
	if _, _, err := one.RedeemLinkCode(ctx, "telegram", "4901", code); !raced || !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("redeeming a code a deprovision took: %v (hook ran: %v), want ErrNotFound", err, raced)
	}
	s, _ := effective(t, two)
	if got := bindingsOf(s, "a", platform.BindUser); !slices.Equal(got, []string{"telegram:4901"}) {
		t.Fatalf("links of a: %q, want the one the new code made", got)
	}
}

// TestRedeemKeepsTheCodeSpentWhenItsLinkCannotBeJudgedOnRedis: a
// redemption whose link is written, then whose look at the tenant after
// it (keptFor) fails for the store, and whose take-back of the link fails
// too, leaves the link standing: the code is spent all the same, so
// another user sending it is not linked as well. Before, the failed
// take-back was answered as the read's error: the code stayed
// redeemable, two links of one code.
func TestRedeemKeepsTheCodeSpentWhenItsLinkCannotBeJudgedOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := two.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	code, _, err := two.IssueLinkCode(ctx, "a", "gw-a", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	unreachable := errors.New("store unreachable (injected)")
	var linked, looked bool
	hooked.after = func(op, namespace, _ string) {
		if op == "cas" && namespace == "registry/ownership" { // the link written, its guard swapped
			linked = true
		}
	}
	hooked.get = func(namespace, _ string) error {
		if linked && !looked && namespace == "registry/tenants" { // keptFor's look
			looked = true
			return unreachable
		}
		return nil
	}
	hooked.put = func(namespace, _ string) error {
		if looked && namespace == "registry/bindings" { // the link's take-back
			return unreachable
		}
		return nil
	}
	if _, _, err := one.RedeemLinkCode(ctx, "telegram", "4811", code); err == nil || !looked {
		t.Fatalf("a redemption whose link can be neither judged nor taken back: %v (hook ran: %v), want an error", err, looked)
	}
	_, _, second := two.RedeemLinkCode(ctx, "telegram", "4812", code)
	s, _ := effective(t, two)
	if got := bindingsOf(s, "a", platform.BindUser); len(got) != 1 || !errors.Is(second, registry.ErrNotFound) {
		t.Fatalf("one code, a failed redemption whose link stayed, then another user's (%v): links %q, want the first link only and the code spent", second, got)
	}
}

// TestRedeemStoppingMidwayMakesOneLinkOnRedis: two instances on one
// redis-server; instance one stops (here: every store call of it fails
// from then on) right after a redemption's first write of the code or the
// link, or right after its link is written. One code still makes one
// link: another user sending it on instance two is refused, and the user
// it was spent for, sending it again there, is linked. Before, the link
// was written before the code was consumed: an instance stopping in
// between left the link standing and the code redeemable, and the next
// user was linked as well.
func TestRedeemStoppingMidwayMakesOneLinkOnRedis(t *testing.T) {
	for _, after := range []string{"its first write", "its link"} {
		t.Run(after, func(t *testing.T) {
			ctx := context.Background()
			hooked, one, two := hookedOnRedis(t)
			if err := two.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
				t.Fatal(err)
			}
			code, _, err := two.IssueLinkCode(ctx, "a", "gw-a", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			stopped := false
			hooked.after = func(op, namespace, _ string) {
				first := namespace == "registry/linkcodes" || namespace == "registry/bindings"
				if op == "cas" && (after == "its first write" && first || after == "its link" && namespace == "registry/ownership") {
					stopped = true
				}
			}
			dead := errors.New("instance stopped (injected)")
			hooked.put = func(string, string) error {
				if stopped {
					return dead
				}
				return nil
			}
			hooked.get = hooked.put
			if _, _, err := one.RedeemLinkCode(ctx, "telegram", "5001", code); !stopped || err == nil {
				t.Fatalf("a redemption whose instance stopped after %s: %v (stopped: %v), want an error", after, err, stopped)
			}
			_, _, other := two.RedeemLinkCode(ctx, "telegram", "5002", code)
			tenant, _, again := two.RedeemLinkCode(ctx, "telegram", "5001", code)
			s, _ := effective(t, two)
			got := bindingsOf(s, "a", platform.BindUser)
			if !errors.Is(other, registry.ErrNotFound) || again != nil || tenant != "a" || !slices.Equal(got, []string{"telegram:5001"}) {
				t.Fatalf("one code, its redemption's instance stopped after %s; then another user's (%v), then the user's again (%q, %v): links %q, want the user's alone",
					after, other, tenant, again, got)
			}
		})
	}
}

// TestLinkCodeOfAGatewayDeprovisionedMeanwhileOnRedis: right after
// instance one stores a link code gw asked for, instance two deprovisions
// gw (removes it, then drops what the management plane made for its
// tenant, the codes first). The code is taken back and the issue is
// ErrNotFound: no code of a gateway gone stays redeemable.
func TestLinkCodeOfAGatewayDeprovisionedMeanwhileOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := one.CreateGateway(ctx, "a", "gw"); err != nil {
		t.Fatal(err)
	}
	raced := false
	hooked.after = func(op, namespace, _ string) {
		if raced || op != "cas" || namespace != "registry/linkcodes" {
			return
		}
		raced = true
		err := two.DeleteGateway(ctx, "a", "gw")
		if err == nil {
			_, err = two.DropManaged(ctx, "a")
		}
		if err != nil {
			t.Fatalf("instance two's deprovision of gw: %v", err)
		}
	}
	_, _, err := one.IssueLinkCode(registry.ForGateway(ctx, "gw", nil), "a", "gw", "", 0)
	hooked.after = nil
	if !raced || !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("a link code of gw, deprovisioned meanwhile: %v (raced %v), want ErrNotFound", err, raced)
	}
	if left, _, err := hooked.Store.Registry().List(ctx, "registry/linkcodes"); err != nil || len(left) != 0 {
		t.Errorf("%d link codes left (%v), want none", len(left), err)
	}
}

// TestSetPrincipalAgainRacingADropOnRedis: tenant a's allow-list [4931]
// is stored; instance one's DropManaged of a has read it and is about to
// delete it when instance two sets a's principal again, with the same
// list. The principal stored last (two's) keeps its allow-list whole:
// before, two skipped 4931 as stored already, and the drop, which had
// read it before, deleted it after two's request had succeeded.
func TestSetPrincipalAgainRacingADropOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := two.SetPrincipal(ctx, "a", "telegram", platform.PrincipalAllowList, []string{"4931"}); err != nil {
		t.Fatal(err)
	}
	raced := false
	hooked.before = func(op, _, key string) {
		if raced || op != "cas" || key != "telegram/allow/4931/a" {
			return
		}
		raced = true
		if err := two.SetPrincipal(ctx, "a", "telegram", platform.PrincipalAllowList, []string{"4931"}); err != nil {
			t.Errorf("two's SetPrincipal during one's drop: %v", err)
		}
	}
	_, err := one.DropManaged(ctx, "a")
	hooked.before = nil
	if err != nil || !raced {
		t.Fatalf("DropManaged: %v (raced %v)", err, raced)
	}
	s, _ := effective(t, two)
	p, allow := bindingsOf(s, "a", platform.BindPrincipal), bindingsOf(s, "a", platform.BindAllow)
	if len(p) == 1 && !slices.Equal(allow, []string{"telegram:4931"}) {
		t.Errorf("principal %v kept with allow-list %v, want [telegram:4931]", p, allow)
	}
	if len(p) == 0 {
		t.Fatalf("the principal set after the drop's read was dropped; allow-list %v", allow)
	}
}

// TestDMDefaultTakeBackRestoresAnotherTenants: user 71 is linked to a and
// b, and its DMs default to a. b's SetDMDefault for 71, asked for by a
// gateway that is no longer b's (deprovisioned meanwhile), is taken
// back: a's default is back in place. Before, the take-back removed the
// key, and 71's DMs reached no tenant by default.
func TestDMDefaultTakeBackRestoresAnotherTenants(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	for _, id := range []string{"a", "b"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
		if err := r.Bind(ctx, registry.Binding{Platform: "discord", Kind: platform.BindUser, ID: "71", Tenant: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetDMDefault(ctx, "a", "discord", "71"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDMDefault(registry.ForGateway(ctx, "gone", nil), "b", "discord", "71"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("b's DM default, asked for by a gateway b does not have: %v, want ErrNotFound", err)
	}
	s, _ := effective(t, r)
	if a, b := bindingsOf(s, "a", platform.BindDMDefault), bindingsOf(s, "b", platform.BindDMDefault); !slices.Equal(a, []string{"discord:71"}) || len(b) != 0 {
		t.Fatalf("DM defaults after b's take-back: a %v, b %v; want a's only", a, b)
	}
}

// TestDMDefaultTakeBackKeepsAnotherTenantsOnAStoreError: as
// TestDMDefaultTakeBackRestoresAnotherTenants, the take-back's read of a
// failing (the store, injected, once): a's default is back in place all
// the same. Before, any error of that read, not only a's being gone,
// dropped a's default, and 71's DMs reached no tenant by default.
func TestDMDefaultTakeBackKeepsAnotherTenantsOnAStoreError(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory(clock.System)
	t.Cleanup(func() { _ = st.Close() })
	hooked := &hookedStore{Store: st}
	r := registry.New(hooked, clock.System)
	for _, id := range []string{"a", "b"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
		if err := r.Bind(ctx, registry.Binding{Platform: "discord", Kind: platform.BindUser, ID: "71", Tenant: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SetDMDefault(ctx, "a", "discord", "71"); err != nil {
		t.Fatal(err)
	}
	wrote, failed := false, false
	hooked.after = func(op, _, key string) {
		wrote = wrote || op == "cas" && strings.Contains(key, platform.BindDMDefault)
	}
	hooked.get = func(namespace, key string) error {
		if wrote && !failed && namespace == "registry/tenants" && key == "a" {
			failed = true
			return errors.New("store unreachable (injected)")
		}
		return nil
	}
	err := r.SetDMDefault(registry.ForGateway(ctx, "gone", nil), "b", "discord", "71")
	hooked.after, hooked.get = nil, nil
	if !failed || !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("b's DM default, asked for by a gateway b does not have, a's read failing: %v (failed %v), want ErrNotFound", err, failed)
	}
	s, _ := effective(t, r)
	if a, b := bindingsOf(s, "a", platform.BindDMDefault), bindingsOf(s, "b", platform.BindDMDefault); !slices.Equal(a, []string{"discord:71"}) || len(b) != 0 {
		t.Fatalf("DM defaults after b's take-back: a %v, b %v; want a's only", a, b)
	}
}

// TestSetPrincipalTakesBackTheWholeListOnRedis: while tenant a's
// SetPrincipal writes its allow-list for gateway gw, instance two deletes
// gw; the list is taken back, and the take-back of one user failing
// (the store, injected) does not keep the others. Before, the take-back
// stopped at its first error and the rest of the list stayed.
func TestSetPrincipalTakesBackTheWholeListOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := one.CreateGateway(ctx, "a", "gw"); err != nil {
		t.Fatal(err)
	}
	raced := false
	hooked.after = func(op, _, key string) {
		if raced || op != "cas" || !strings.Contains(key, "/allow/") {
			return
		}
		raced = true
		if err := two.DeleteGateway(ctx, "a", "gw"); err != nil {
			t.Errorf("instance two's delete of gw: %v", err)
		}
	}
	unreachable := errors.New("store unreachable (injected)")
	allowWrites := 0
	hooked.put = func(_, key string) error {
		if strings.Contains(key, "/allow/") {
			if allowWrites++; allowWrites == 4 { // the first take-back
				return unreachable
			}
		}
		return nil
	}
	err := one.SetPrincipal(registry.ForGateway(ctx, "gw", nil), "a", "telegram", platform.PrincipalAllowList, []string{"4911", "4912", "4913"})
	hooked.after, hooked.put = nil, nil
	if !raced || !errors.Is(err, unreachable) {
		t.Errorf("a SetPrincipal of gw, deleted meanwhile, one take-back failing: %v (raced %v), want the store's error", err, raced)
	}
	s, _ := effective(t, two)
	if allow := bindingsOf(s, "a", platform.BindAllow); len(allow) != 1 {
		t.Errorf("allow-list left after the take-back: %v, want only the one whose take-back failed", allow)
	}
}

// TestClaimTakeBackRestoresTheClaimItReplaced: a claimed chat 701 of
// guild 700, which is then bound to b, setting a's claim aside. b's claim
// of 701 replaces a's, and, asked for by a gateway that is no longer b's
// (deprovisioned meanwhile), is taken back: a's claim is back in place.
// Before, the take-back removed the key and a's claim was lost.
func TestClaimTakeBackRestoresTheClaimItReplaced(t *testing.T) {
	ctx := context.Background()
	r, _ := newRegistry(t)
	for _, id := range []string{"a", "b"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	chat := platform.Chat{ID: "701", Space: "700"}
	if err := r.Claim(ctx, "a", "discord", chat); err != nil {
		t.Fatal(err)
	}
	if err := r.Bind(ctx, registry.Binding{Platform: "discord", Kind: platform.BindGuild, ID: "700", Tenant: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Claim(registry.ForGateway(ctx, "gone", nil), "b", "discord", chat); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("b's claim, asked for by a gateway b does not have: %v, want ErrNotFound", err)
	}
	s, _ := effective(t, r)
	if a, b := bindingsOf(s, "a", platform.BindScope), bindingsOf(s, "b", platform.BindScope); !slices.Equal(a, []string{"discord:701"}) || len(b) != 0 {
		t.Fatalf("claims after b's take-back: a %v, b %v; want a's only", a, b)
	}
}

// TestDMDefaultTakeBackKeepsNoDeletedTenantsOnRedis: user 71's DMs
// default to a; b's SetDMDefault for 71 (asked for by a gateway b does
// not have) replaces it, and instance two deletes a before it is taken
// back. The take-back puts back nothing: a made again under the id has
// no default for 71. Before, it put back the deleted a's default, which
// a's sweep had passed while b's held the key, and the new a got 71's DMs.
func TestDMDefaultTakeBackKeepsNoDeletedTenantsOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	for _, id := range []string{"a", "b"} {
		if err := one.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
		if err := one.Bind(ctx, registry.Binding{Platform: "discord", Kind: platform.BindUser, ID: "71", Tenant: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := one.SetDMDefault(ctx, "a", "discord", "71"); err != nil {
		t.Fatal(err)
	}
	raced := false
	hooked.after = func(op, _, key string) {
		if raced || op != "cas" || !strings.Contains(key, platform.BindDMDefault) {
			return
		}
		raced = true
		if err := two.DeleteTenant(ctx, "a"); err != nil {
			t.Errorf("instance two's delete of a: %v", err)
		}
	}
	err := one.SetDMDefault(registry.ForGateway(ctx, "gone", nil), "b", "discord", "71")
	hooked.after = nil
	if !raced || !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("b's DM default, asked for by a gateway b does not have: %v (raced %v), want ErrNotFound", err, raced)
	}
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	s, _ := effective(t, two)
	if a, b := bindingsOf(s, "a", platform.BindDMDefault), bindingsOf(s, "b", platform.BindDMDefault); len(a) != 0 || len(b) != 0 {
		t.Fatalf("DM defaults after a made again: a %v, b %v; want none", a, b)
	}
}

// TestSetPrincipalTakeBackHasOneDeadlineOnRedis: as
// TestSetPrincipalTakesBackTheWholeListOnRedis, the store hanging on
// every take-back (each fails at its context's deadline, injected): all
// of them share one deadline, so a hung store holds the tenant's turn
// for one releaseTimeout, not one per user of the list (1,000 users:
// hours). Before, each take-back had a deadline of its own.
func TestSetPrincipalTakeBackHasOneDeadlineOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := one.CreateGateway(ctx, "a", "gw"); err != nil {
		t.Fatal(err)
	}
	raced := false
	hooked.after = func(op, _, key string) {
		if raced || op != "cas" || !strings.Contains(key, "/allow/") {
			return
		}
		raced = true
		if err := two.DeleteGateway(ctx, "a", "gw"); err != nil {
			t.Errorf("instance two's delete of gw: %v", err)
		}
	}
	allowWrites := 0
	var deadlines []time.Time
	hooked.cas = func(ctx context.Context, _, key string) error {
		if !strings.Contains(key, "/allow/") {
			return nil
		}
		if allowWrites++; allowWrites <= 3 { // the list's writes
			return nil
		}
		d, ok := ctx.Deadline()
		if !ok {
			t.Error("a take-back without a deadline")
		}
		deadlines = append(deadlines, d)
		return context.DeadlineExceeded // hung until its deadline
	}
	err := one.SetPrincipal(registry.ForGateway(ctx, "gw", nil), "a", "telegram", platform.PrincipalAllowList, []string{"4911", "4912", "4913"})
	hooked.after, hooked.cas = nil, nil
	if !raced || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a SetPrincipal of gw, deleted meanwhile, the store hanging: %v (raced %v), want its deadline", err, raced)
	}
	if len(deadlines) != 3 {
		t.Fatalf("%d take-backs tried, want 3", len(deadlines))
	}
	for _, d := range deadlines[1:] {
		if !d.Equal(deadlines[0]) {
			t.Fatalf("take-back deadlines %v: want one for them all", deadlines)
		}
	}
}

// TestClaimTakeBackKeepsNoClaimOfADeprovisionOnRedis: as
// TestClaimTakeBackRestoresTheClaimItReplaced, a's gateway deprovisioned
// (DropManaged, on instance two) right after b's claim replaced a's, so
// the drop does not see a's claim: the take-back puts it back no more.
// Before, a deprovision did not change what the take-back looked at (a's
// generation), and a's claim outlived it.
func TestClaimTakeBackKeepsNoClaimOfADeprovisionOnRedis(t *testing.T) {
	ctx := context.Background()
	hooked, one, two := hookedOnRedis(t)
	for _, id := range []string{"a", "b"} {
		if err := one.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	chat := platform.Chat{ID: "701", Space: "700"}
	if err := one.Claim(ctx, "a", "discord", chat); err != nil {
		t.Fatal(err)
	}
	if err := one.Bind(ctx, registry.Binding{Platform: "discord", Kind: platform.BindGuild, ID: "700", Tenant: "b"}); err != nil {
		t.Fatal(err)
	}
	raced := false
	hooked.after = func(op, namespace, key string) {
		if raced || op != "cas" || namespace != "registry/bindings" || !strings.Contains(key, "701") {
			return
		}
		raced = true
		if _, err := two.DropManaged(ctx, "a"); err != nil {
			t.Errorf("instance two's drop of a's managed bindings: %v", err)
		}
	}
	err := one.Claim(registry.ForGateway(ctx, "gone", nil), "b", "discord", chat)
	hooked.after = nil
	if !raced || !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("b's claim, asked for by a gateway b does not have: %v (raced %v), want ErrNotFound", err, raced)
	}
	s, _ := effective(t, two)
	if a, b := bindingsOf(s, "a", platform.BindScope), bindingsOf(s, "b", platform.BindScope); len(a) != 0 || len(b) != 0 {
		t.Fatalf("claims after a's deprovision: a %v, b %v; want none", a, b)
	}
}

// TestClaimTakeBackKeepsNoClaimOfADropUnderWayOnRedis: as
// TestClaimTakeBackKeepsNoClaimOfADeprovisionOnRedis, b's claim of a's
// chat (set aside) is read and written once instance two's DropManaged
// of a has marked its drop and before it lists the bindings, so the drop
// does not see a's claim; the take-back puts it back after the drop
// listed them. a's claim goes all the same. Before, the take-back read
// the drop's mark before its write and found it unchanged after, and
// a's claim outlived the drop.
func TestClaimTakeBackKeepsNoClaimOfADropUnderWayOnRedis(t *testing.T) {
	ctx := context.Background()
	hookedOne, hookedTwo, one, two := hookedPairOnRedis(t)
	for _, id := range []string{"a", "b"} {
		if err := one.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	chat := platform.Chat{ID: "701", Space: "700"}
	if err := one.Claim(ctx, "a", "discord", chat); err != nil {
		t.Fatal(err)
	}
	if err := one.Bind(ctx, registry.Binding{Platform: "discord", Kind: platform.BindGuild, ID: "700", Tenant: "b"}); err != nil {
		t.Fatal(err)
	}
	wait := func(ch <-chan struct{}, what string) {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Errorf("waited 10s for %s", what)
		}
	}
	written, dropped := make(chan struct{}), make(chan struct{})
	claimed := make(chan error, 1)
	var marked, wrote sync.Once
	hookedTwo.after = func(op, namespace, key string) {
		if op != "cas" || key != "dropped/a" {
			return
		}
		marked.Do(func() { // the drop is marked, its bindings not listed yet
			go func() { claimed <- one.Claim(registry.ForGateway(ctx, "gone", nil), "b", "discord", chat) }()
			wait(written, "b's claim written")
		})
	}
	hookedOne.after = func(op, namespace, key string) {
		if op != "cas" || namespace != "registry/bindings" || !strings.Contains(key, "701") {
			return
		}
		wrote.Do(func() { // b's claim replaced a's; its take-back waits for the drop
			close(written)
			wait(dropped, "a's drop")
		})
	}
	if _, err := two.DropManaged(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	close(dropped)
	select {
	case err := <-claimed:
		if !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("b's claim, asked for by a gateway b does not have: %v, want ErrNotFound", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for b's claim to return")
	}
	hookedOne.after, hookedTwo.after = nil, nil
	s, _ := effective(t, two)
	if a, b := bindingsOf(s, "a", platform.BindScope), bindingsOf(s, "b", platform.BindScope); len(a) != 0 || len(b) != 0 {
		t.Fatalf("claims after a's drop: a %v, b %v; want none", a, b)
	}
}

// TestDropManagedLeavesNoMarkOfADeletedTenantOnRedis: instance two's
// DropManaged of a (a deprovision) is about to mark its drop when
// instance one deletes a, whose sweep lists the marks before the mark
// is written. The mark goes all the same. Before, it stayed for good: one
// entry for every tenant so deleted.
func TestDropManagedLeavesNoMarkOfADeletedTenantOnRedis(t *testing.T) {
	ctx := context.Background()
	_, hookedTwo, one, two := hookedPairOnRedis(t)
	if err := one.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	var deleted sync.Once
	hookedTwo.before = func(op, _, key string) {
		if op == "cas" && key == "dropped/a" {
			deleted.Do(func() {
				if err := one.DeleteTenant(ctx, "a"); err != nil {
					t.Errorf("instance one's delete of a: %v", err)
				}
			})
		}
	}
	if _, err := two.DropManaged(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	hookedTwo.before = nil
	if _, left, err := hookedTwo.Store.Registry().Get(ctx, "registry/bindings", "dropped/a"); err != nil || left {
		t.Fatalf("a's drop mark left after a's deletion (%v), want none", err)
	}
}

// TestDropMarkIsKeptWithTheBindings: DropManaged's marks go to the
// bindings' namespace (one hash tag on Redis, so on one Cluster shard):
// no failover loses a mark and keeps the deletes the drop made after
// it, which a take-back reading the lost mark would undo. The mark is
// no binding: Effective and the tenant's count leave it out. Before, the
// marks had a namespace of their own.
func TestDropMarkIsKeptWithTheBindings(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	hooked := &hookedStore{Store: store.NewMemory(c)}
	t.Cleanup(func() { _ = hooked.Close() })
	r := registry.New(hooked, c)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Claim(ctx, "a", "discord", platform.Chat{ID: "701", Space: "700"}); err != nil {
		t.Fatal(err)
	}
	var elsewhere []string
	hooked.before = func(op, namespace, key string) {
		if op != "list" && namespace != "registry/bindings" && namespace != "registry/linkcodes" {
			elsewhere = append(elsewhere, op+" "+namespace+" "+key)
		}
	}
	if n, err := r.DropManaged(ctx, "a"); err != nil || n != 1 {
		t.Fatalf("DropManaged: %d, %v; want 1", n, err)
	}
	hooked.before = nil
	if len(elsewhere) > 0 {
		t.Fatalf("the drop wrote outside the bindings' namespace: %q", elsewhere)
	}
	if s, _ := effective(t, r); len(s.Bindings) != 0 {
		t.Fatalf("bindings after the drop: %+v, want none (the mark is none)", s.Bindings)
	}
}

// TestOverlappingDropsKeepTheMarkUnderWay: of two DropManaged of one
// tenant at once, the first to end leaves the drop mark under way while
// the other still drops (a take-back reading it then puts back none of
// the tenant's bindings the other may have passed), and the last marks
// it done; a drop that failed before its end leaves it under way only
// until it expires. Before, the first to end marked it done (a Put), and
// one that failed left it under way until the next one ended.
func TestOverlappingDropsKeepTheMarkUnderWay(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	hooked := &hookedStore{Store: store.NewMemory(c)}
	t.Cleanup(func() { _ = hooked.Close() })
	r := registry.New(hooked, c)
	if err := r.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	mark := func() string {
		e, _, err := hooked.Store.Registry().Get(ctx, "registry/bindings", "dropped/a")
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value)
	}
	inner := false
	var during string
	hooked.before = func(op, namespace, _ string) {
		if op == "list" && namespace == "registry/bindings" && !inner {
			inner = true // the outer drop is under way: another runs to its end
			if _, err := r.DropManaged(ctx, "a"); err != nil {
				t.Errorf("inner DropManaged: %v", err)
			}
			during = mark()
		}
	}
	if _, err := r.DropManaged(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	hooked.before = nil
	if !strings.Contains(during, `"Drops":1`) || strings.Contains(mark(), `"Drops"`) {
		t.Fatalf("mark while the outer drop ran %s, after %s: want one drop under way, then none", during, mark())
	}
	marks := 0
	hooked.put = func(_, key string) error {
		if key == "dropped/a" {
			if marks++; marks == 2 {
				return errors.New("killed (injected)")
			}
		}
		return nil
	}
	if _, err := r.DropManaged(ctx, "a"); err == nil {
		t.Fatal("a drop that could not mark its end succeeded")
	}
	hooked.put = nil
	c.Advance(11 * time.Minute)
	if _, err := r.DropManaged(ctx, "a"); err != nil || strings.Contains(mark(), `"Drops"`) {
		t.Fatalf("drop after a failed one expired: %v, mark %s: want done", err, mark())
	}
}

// TestTenantsManagementHoldsUpNoOtherTenant: while a tenant's link code,
// link removal (Unbind), DM default, policy or wake URL waits on the
// store (the listing of every tenant's link codes, the read of the link,
// the write), another tenant's
// registry change on the instance goes through; so it does while a
// tenant's gateway is created, rotated, removed, enrolled or provisioned.
// Before, each ran under mu, and the other tenant's gateway waited out
// its store calls.
func TestTenantsManagementHoldsUpNoOtherTenant(t *testing.T) {
	link := registry.Binding{Platform: "discord", Kind: platform.BindUser, ID: "71", Tenant: "a"}
	for _, tc := range []struct {
		name, op, namespace string
		do                  func(context.Context, *registry.Registry) error
	}{
		{"IssueLinkCode", "list", "registry/linkcodes", func(ctx context.Context, r *registry.Registry) error {
			_, _, err := r.IssueLinkCode(ctx, "a", "gw-a", "", 0)
			return err
		}},
		{"Unbind", "list", "registry/linkcodes", func(ctx context.Context, r *registry.Registry) error { return r.Unbind(ctx, link) }},
		{"SetDMDefault", "get", "registry/bindings", func(ctx context.Context, r *registry.Registry) error {
			return r.SetDMDefault(ctx, "a", "discord", "71")
		}},
		{"SetPolicy", "cas", "registry/policies", func(ctx context.Context, r *registry.Registry) error {
			return r.SetPolicy(ctx, registry.Policy{Tenant: "a", Platform: "discord"})
		}},
		{"SetWake", "cas", "registry/wake", func(ctx context.Context, r *registry.Registry) error {
			return r.SetWake(ctx, "a", "gw-a", "https://a.example/wake")
		}},
		{"CreateGateway", "list", "registry/gateways", func(ctx context.Context, r *registry.Registry) error {
			_, err := r.CreateGateway(ctx, "a", "gw-a2")
			return err
		}},
		{"Rotate", "cas", "registry/gateways", func(ctx context.Context, r *registry.Registry) error {
			_, err := r.Rotate(ctx, "a", "gw-a", 0)
			return err
		}},
		{"DeleteGateway", "cas", "registry/gateways", func(ctx context.Context, r *registry.Registry) error { return r.DeleteGateway(ctx, "a", "gw-a") }},
		{"Enroll", "delete", "registry/enroll", func(ctx context.Context, r *registry.Registry) error {
			token, _, err := r.MintEnrollToken(ctx, "a", time.Minute) // no delete: the hook waits for the spend
			if err == nil {
				_, err = r.Enroll(ctx, "a", token, "gw-a", "")
			}
			return err
		}},
		{"Provision", "list", "registry/gateways", func(ctx context.Context, r *registry.Registry) error {
			_, _, err := r.Provision(ctx, "a", "gw-p", registry.MinterOf("identity"), func() error { return nil })
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := clocktest.New(time.Unix(1_700_000_000, 0))
			hooked := &hookedStore{Store: store.NewMemory(c)}
			t.Cleanup(func() { _ = hooked.Close() })
			r := registry.New(hooked, c)
			for _, id := range []string{"a", "b"} {
				if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.Bind(ctx, link); err != nil {
				t.Fatal(err)
			}
			if _, err := r.CreateGateway(ctx, "a", "gw-a"); err != nil {
				t.Fatal(err)
			}
			held := fmt.Errorf("tenant a's %s made no %s in %s", tc.name, tc.op, tc.namespace)
			during := func() {
				made := make(chan error, 1)
				go func() { _, err := r.CreateGateway(ctx, "b", "gw-b"); made <- err }()
				select {
				case held = <-made:
				case <-time.After(5 * time.Second):
					held = errors.New("tenant b's CreateGateway did not return within 5s of tenant a's store call starting")
				}
			}
			if tc.op == "get" {
				hooked.get = func(namespace, _ string) error {
					if namespace == tc.namespace {
						hooked.get = nil
						during()
					}
					return nil
				}
			} else {
				hooked.before = func(op, namespace, _ string) {
					if op == tc.op && namespace == tc.namespace {
						hooked.before = nil
						during()
					}
				}
			}
			if err := tc.do(ctx, r); err != nil {
				t.Fatal(err)
			}
			if held != nil {
				t.Fatal(held)
			}
		})
	}
}

// TestSkewedSweepKeepsAnotherInstancesCodes: two instances share a store,
// the second's clock two minutes ahead of the first's. A link code and an
// enrollment token the first issues for tenant a are redeemable through
// the first after the second's sweeps (its issues for tenant b) ran:
// an entry is judged by the expiry its issuer wrote plus
// registry.ExpirySkew, never by a sweeping clock alone. Before, the
// second's sweep deleted a's one-minute code as expired, and the first's
// deleted b's 24-hour token as expiring beyond the bound.
func TestSkewedSweepKeepsAnotherInstancesCodes(t *testing.T) {
	ctx := context.Background()
	slow := clocktest.New(time.Unix(1_700_000_000, 0))
	fast := clocktest.New(slow.Now().Add(2 * time.Minute))
	st := store.NewMemory(slow)
	t.Cleanup(func() { _ = st.Close() })
	one, two := registry.New(st, slow), registry.New(st, fast)
	for _, id := range []string{"a", "b"} {
		if err := one.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	code, _, err := one.IssueLinkCode(ctx, "a", "gw-a", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	aToken, _, err := one.MintEnrollToken(ctx, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := two.IssueLinkCode(ctx, "b", "gw-b", "", 0); err != nil {
		t.Fatal(err)
	}
	bToken, _, err := two.MintEnrollToken(ctx, "b", 0) // 24 h on the fast clock
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := one.MintEnrollToken(ctx, "a", 0); err != nil { // sweeps on the slow clock
		t.Fatal(err)
	}
	if tenant, _, err := one.RedeemLinkCode(ctx, "discord", "71", code); err != nil || tenant != "a" {
		t.Fatalf("a's code after the fast instance's sweep: %q %v, want a", tenant, err)
	}
	if _, err := one.Enroll(ctx, "a", aToken, "gw-a", ""); err != nil {
		t.Fatalf("a's enrollment token after the fast instance's sweep: %v", err)
	}
	if _, err := two.Enroll(ctx, "b", bToken, "gw-b", ""); err != nil {
		t.Fatalf("b's enrollment token after the slow instance's sweep: %v", err)
	}
}

// TestShortLivedLinkCodesStayBounded: a tenant issuing one-second link
// codes (ttlSeconds 1 on /manage/link), each expired before its next, is
// refused once it holds registry.MaxHeldLinkCodes in the store, expired
// ones within registry.ExpirySkew included, and may issue again once the
// sweep takes them. Every issue of every tenant lists the whole namespace
// (the sweep), so before, the tenant held as many as its rate allowed in
// five minutes (thousands per instance), each of another tenant's issues
// reading them all; the other tenant still issues its own.
func TestShortLivedLinkCodesStayBounded(t *testing.T) {
	ctx := context.Background()
	c := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(c)
	t.Cleanup(func() { _ = st.Close() })
	r := registry.New(st, c)
	for _, id := range []string{"a", "b"} {
		if err := r.CreateTenant(ctx, registry.Tenant{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	issued := 0
	for ; issued < 10*registry.MaxHeldLinkCodes; issued++ {
		_, _, err := r.IssueLinkCode(ctx, "b", "gw-b", "", time.Second)
		if errors.Is(err, registry.ErrLimit) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		c.Advance(2 * time.Second)
	}
	entries, _, err := st.Registry().List(ctx, "registry/linkcodes")
	if err != nil {
		t.Fatal(err)
	}
	if issued != registry.MaxHeldLinkCodes || len(entries) != registry.MaxHeldLinkCodes {
		t.Fatalf("b issued %d one-second codes, the store holds %d; want %d each", issued, len(entries), registry.MaxHeldLinkCodes)
	}
	if _, _, err := r.IssueLinkCode(ctx, "a", "gw-a", "", 0); err != nil {
		t.Fatalf("a's code beside b's: %v", err)
	}
	c.Advance(registry.ExpirySkew)
	if _, _, err := r.IssueLinkCode(ctx, "b", "gw-b", "", time.Second); err != nil {
		t.Fatalf("b's code once its expired ones were swept: %v", err)
	}
}

// TestCodeOfAClockFarAheadIsRefused: a link code issued by an instance
// whose clock runs three hours ahead expires, on the others' clocks,
// further ahead than MaxLinkTTL and ExpirySkew: no instance redeems it (it
// would live hours), while one issued by a clock within ExpirySkew ahead
// is redeemed. Before, a code was refused only once expired, and the
// first one was taken for three hours and ten minutes.
func TestCodeOfAClockFarAheadIsRefused(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	reg := registry.New(st, clk)
	if err := reg.CreateTenant(ctx, registry.Tenant{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ahead time.Duration
		ok    bool
	}{{3 * time.Hour, false}, {registry.ExpirySkew - time.Second, true}} {
		issuer := registry.New(st, clocktest.New(clk.Now().Add(c.ahead)))
		code, _, err := issuer.IssueLinkCode(ctx, "a", "gw-a", "", registry.MaxLinkTTL)
		if err != nil {
			t.Fatal(err)
		}
		tenant, _, err := reg.RedeemLinkCode(ctx, "discord", "71", code)
		if got := err == nil && tenant == "a"; got != c.ok {
			t.Fatalf("a code issued %v ahead: %q %v, want redeemed %v", c.ahead, tenant, err, c.ok)
		}
	}
}
