package platform_test

import (
	"slices"
	"testing"
	"time"

	"connector/platform"
)

// ownershipFixture: tenant b owns guild 700 and chat 900 by binding; a
// claimed channel 701 in b's guild (a claim stored before the fix),
// channel 601 in the unbound guild 600, and chat 900; c claimed 602 and
// 900's neighbour 901. a's principal is any, c's an allow-list of 90.
// Users: 71 is linked to a, 72 to b, 74 to a and b, 75 to b and c with
// c as DM default.
func ownershipFixture() *platform.Ownership {
	return platform.NewOwnership([]platform.Binding{
		{Kind: platform.BindGuild, ID: "700", Tenant: "b"},
		{Kind: platform.BindChat, ID: "900", Tenant: "b"},
		{Kind: platform.BindScope, ID: "701", Tenant: "a", Space: "700"},
		{Kind: platform.BindScope, ID: "601", Tenant: "a", Space: "600"},
		{Kind: platform.BindScope, ID: "900", Tenant: "a"},
		{Kind: platform.BindScope, ID: "602", Tenant: "c", Space: "600"},
		{Kind: platform.BindScope, ID: "901", Tenant: "c"},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "a"},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAllowList, Tenant: "c"},
		{Kind: platform.BindAllow, ID: "90", Tenant: "c"},
		{Kind: platform.BindUser, ID: "71", Tenant: "a"},
		{Kind: platform.BindUser, ID: "72", Tenant: "b"},
		{Kind: platform.BindUser, ID: "74", Tenant: "b"},
		{Kind: platform.BindUser, ID: "74", Tenant: "a"},
		{Kind: platform.BindUser, ID: "75", Tenant: "b"},
		{Kind: platform.BindUser, ID: "75", Tenant: "c"},
		{Kind: platform.BindDMDefault, ID: "75", Tenant: "c"},
	})
}

// TestOwnershipRoute walks the ownership order for inbound: bindings
// first, claims inside another tenant's binding set aside, then claims,
// then author links.
func TestOwnershipRoute(t *testing.T) {
	o := ownershipFixture()
	guild := func(channel, space string) platform.Chat { return platform.Chat{ID: channel, Space: space} }
	thread := func(id, parent, space string) platform.Chat {
		return platform.Chat{ID: id, Parent: parent, Space: space}
	}
	for _, c := range []struct {
		name string
		user string
		chat platform.Chat
		want platform.Route
		ok   bool
	}{
		// Rule 1: b's guild and chat are b's, whoever speaks, whatever a claimed.
		{"bound guild, unlinked author", "99", guild("702", "700"), platform.Route{Tenant: "b"}, true},
		{"bound guild, a's claim set aside", "99", guild("701", "700"), platform.Route{Tenant: "b"}, true},
		{"bound guild, a's linked author", "71", guild("701", "700"), platform.Route{Tenant: "b"}, true},
		{"bound guild, b's linked author", "72", guild("701", "700"), platform.Route{Tenant: "b", Owner: true}, true},
		{"bound guild, thread", "71", thread("7011", "701", "700"), platform.Route{Tenant: "b"}, true},
		{"bound chat, a's claim set aside", "99", platform.Chat{ID: "900"}, platform.Route{Tenant: "b"}, true},
		{"bound chat, a's linked author", "71", platform.Chat{ID: "900"}, platform.Route{Tenant: "b"}, true},
		{"bound private chat before the link", "71", platform.Chat{ID: "900", DM: true}, platform.Route{Tenant: "b"}, true},
		// Rule 2: claims, before links.
		{"any admits", "99", guild("601", "600"), platform.Route{Tenant: "a", Grant: true}, true},
		{"claimant's linked author", "71", guild("601", "600"), platform.Route{Tenant: "a", Owner: true, Grant: true}, true},
		{"another tenant's linked author", "72", guild("601", "600"), platform.Route{Tenant: "a", Grant: true}, true},
		{"linked to the claimant among others", "74", guild("601", "600"), platform.Route{Tenant: "a", Owner: true, Grant: true}, true},
		{"claimed parent", "99", thread("6011", "601", "600"), platform.Route{Tenant: "a", Grant: true}, true},
		{"allow-list admits", "90", guild("602", "600"), platform.Route{Tenant: "c", Grant: true}, true},
		{"allow-list refuses", "91", guild("602", "600"), platform.Route{Drop: platform.DropPrincipal}, true},
		{"allow-list refuses another tenant's author", "72", guild("602", "600"), platform.Route{Drop: platform.DropPrincipal}, true},
		{"owner-only by default", "72", platform.Chat{ID: "901"}, platform.Route{Drop: platform.DropPrincipal}, true},
		// Rule 3: links.
		{"linked, unclaimed channel", "71", guild("603", "600"), platform.Route{Tenant: "a", Owner: true, Grant: true}, true},
		{"linked DM", "71", platform.Chat{ID: "301", DM: true}, platform.Route{Tenant: "a", Owner: true, Grant: true}, true},
		{"several links: lowest id", "74", platform.Chat{ID: "301", DM: true}, platform.Route{Tenant: "a", Owner: true, Grant: true}, true},
		{"several links: DM default", "75", platform.Chat{ID: "301", DM: true}, platform.Route{Tenant: "c", Owner: true, Grant: true}, true},
		{"a DM is never claimed", "99", platform.Chat{ID: "601", DM: true}, platform.Route{}, false},
		// Rule 4: the platform's.
		{"unlinked DM", "99", platform.Chat{ID: "301", DM: true}, platform.Route{}, false},
		{"unclaimed, unlinked", "99", guild("603", "600"), platform.Route{}, false},
	} {
		got, ok := o.Route(c.user, c.chat)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// TestOwnershipMayAct: a bound chat is its owner's alone, a claimed one
// its claimant's alone (grants of others included), elsewhere a grant
// decides; the grant is not even asked where a binding or claim decides.
func TestOwnershipMayAct(t *testing.T) {
	o := ownershipFixture()
	for _, c := range []struct {
		name    string
		tenant  string
		chat    platform.Chat
		granted bool
		want    bool
		asked   bool
	}{
		{"owner in its guild", "b", platform.Chat{ID: "701", Space: "700"}, false, true, false},
		{"claimant set aside in b's guild", "a", platform.Chat{ID: "701", Space: "700"}, true, false, false},
		{"granted in b's guild", "c", platform.Chat{ID: "702", Space: "700"}, true, false, false},
		{"claimant set aside in b's chat", "a", platform.Chat{ID: "900"}, true, false, false},
		{"claimant", "a", platform.Chat{ID: "601", Space: "600"}, false, true, false},
		{"claimant of the parent", "a", platform.Chat{ID: "6011", Parent: "601", Space: "600"}, false, true, false},
		{"granted in a's claim", "b", platform.Chat{ID: "601", Space: "600"}, true, false, false},
		{"granted elsewhere", "b", platform.Chat{ID: "603", Space: "600"}, true, true, true},
		{"not granted elsewhere", "b", platform.Chat{ID: "603", Space: "600"}, false, false, true},
		{"a DM's grant", "a", platform.Chat{ID: "601", DM: true}, true, true, true},
	} {
		asked := false
		got := o.MayAct(c.tenant, c.chat, func() bool { asked = true; return c.granted })
		if got != c.want || asked != c.asked {
			t.Errorf("%s: MayAct %v (grant asked %v), want %v (asked %v)", c.name, got, asked, c.want, c.asked)
		}
	}
}

// TestOwnershipClaim: a claim of a chat bound to another tenant, of a DM,
// of a thread in a channel another tenant claimed, or held by another
// tenant is refused; the bound owner replaces a claim its binding sets
// aside.
func TestOwnershipClaim(t *testing.T) {
	o := ownershipFixture()
	for _, c := range []struct {
		name           string
		tenant, holder string
		chat           platform.Chat
		want           platform.ClaimOutcome
	}{
		{"in another tenant's guild", "a", "", platform.Chat{ID: "702", Space: "700"}, platform.ClaimRefused},
		{"another tenant's chat", "c", "", platform.Chat{ID: "900"}, platform.ClaimRefused},
		{"a DM", "a", "", platform.Chat{ID: "301", DM: true}, platform.ClaimRefused},
		{"a thread of another's claim", "b", "", platform.Chat{ID: "6011", Parent: "601", Space: "600"}, platform.ClaimRefused},
		{"held by another", "b", "a", platform.Chat{ID: "601", Space: "600"}, platform.ClaimRefused},
		{"free", "b", "", platform.Chat{ID: "603", Space: "600"}, platform.ClaimStore},
		{"a thread of its own claim", "a", "", platform.Chat{ID: "6011", Parent: "601", Space: "600"}, platform.ClaimStore},
		{"its own bound chat", "b", "", platform.Chat{ID: "702", Space: "700"}, platform.ClaimStore},
		{"held already", "a", "a", platform.Chat{ID: "601", Space: "600"}, platform.ClaimHeld},
		{"set aside by the claimer's binding", "b", "a", platform.Chat{ID: "701", Space: "700"}, platform.ClaimReplace},
		{"set aside by the claimer's chat binding", "b", "a", platform.Chat{ID: "900"}, platform.ClaimReplace},
	} {
		if got := o.Claim(c.tenant, c.holder, c.chat); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestOwnershipSetAside lists the claims bindings of other tenants set
// aside: a's in b's guild (by the claim's recorded space) and in b's
// chat; not a's or c's claims in the unbound guild.
func TestOwnershipSetAside(t *testing.T) {
	got := ownershipFixture().SetAside()
	want := []platform.SetAsideClaim{
		{Claim: platform.Binding{Kind: platform.BindScope, ID: "701", Tenant: "a", Space: "700"}, Owner: "b"},
		{Claim: platform.Binding{Kind: platform.BindScope, ID: "900", Tenant: "a"}, Owner: "b"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("SetAside %+v, want %+v", got, want)
	}
	if o := platform.NewOwnership([]platform.Binding{{Kind: platform.BindScope, ID: "5", Tenant: "b", Space: "7"}, {Kind: platform.BindGuild, ID: "7", Tenant: "b"}}); len(o.SetAside()) != 0 {
		t.Fatal("a claim inside the claimant's own binding is set aside")
	}
}

// TestOwnershipLinked: Linked reports links, per tenant.
func TestOwnershipLinked(t *testing.T) {
	o := ownershipFixture()
	if !o.Linked("71", "a") || o.Linked("71", "b") || o.Linked("73", "a") || !o.Linked("74", "b") {
		t.Fatal("Linked")
	}
}

// BenchmarkOwnershipRoute measures the per-message decision.
func BenchmarkOwnershipRoute(b *testing.B) {
	o := ownershipFixture()
	chats := []platform.Chat{{ID: "701", Space: "700"}, {ID: "6011", Parent: "601", Space: "600"}, {ID: "603", Space: "600"}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		o.Route("71", chats[i%len(chats)])
	}
}

// FuzzOwnershipOrder builds ownership from arbitrary bindings over a few
// ids and tenants and checks the order's promises for every chat shape:
// a bound chat's messages reach its owner alone and only the owner may
// act there; a claimed chat's messages reach its claimant or nobody and
// only the claimant may act there; a claim inside another tenant's
// binding is never stored.
func FuzzOwnershipOrder(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte{0x11, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x07, 0x18})
	kinds := []string{platform.BindGuild, platform.BindChat, platform.BindScope, platform.BindUser,
		platform.BindPrincipal, platform.BindAllow, platform.BindDMDefault, platform.BindChannel}
	ids := []string{"1", "2", "3", "4"}
	tenants := []string{"a", "b", "c"}
	principals := []string{platform.PrincipalAny, platform.PrincipalAllowList, platform.PrincipalOwnerOnly}
	f.Fuzz(func(t *testing.T, data []byte) {
		var bindings []platform.Binding
		for i := 0; i+1 < len(data) && len(bindings) < 16; i += 2 {
			b := platform.Binding{Kind: kinds[int(data[i])%len(kinds)], ID: ids[int(data[i+1])%len(ids)], Tenant: tenants[int(data[i]>>4)%len(tenants)]}
			if b.Kind == platform.BindPrincipal {
				b.ID = principals[int(data[i+1])%len(principals)]
			}
			bindings = append(bindings, b)
		}
		o := platform.NewOwnership(bindings)
		for _, c := range []platform.Chat{{ID: "1"}, {ID: "2", Space: "3"}, {ID: "4", Parent: "1", Space: "2"}, {ID: "3", DM: true}} {
			owner, bound := o.Owner(c)
			for _, user := range ids {
				r, ok := o.Route(user, c)
				if bound && (!ok || r.Tenant != owner || r.Drop != "" || r.Grant) {
					t.Fatalf("%+v bound to %s: user %s routed %+v %v", c, owner, user, r, ok)
				}
				if ok && r.Drop == "" && r.Tenant == "" {
					t.Fatalf("%+v: user %s routed to nobody without a drop", c, user)
				}
			}
			var may []string
			for _, tenant := range tenants {
				if o.MayAct(tenant, c, func() bool { return true }) {
					may = append(may, tenant)
				}
				if bound && owner != tenant {
					for _, holder := range append([]string{""}, tenants...) {
						if got := o.Claim(tenant, holder, c); got != platform.ClaimRefused {
							t.Fatalf("%+v bound to %s: %s's claim (held by %q) judged %v", c, owner, tenant, holder, got)
						}
					}
				}
			}
			if bound && !slices.Equal(may, []string{owner}) {
				t.Fatalf("%+v bound to %s: %v may act", c, owner, may)
			}
			if !bound && len(may) != 1 && len(may) != len(tenants) {
				t.Fatalf("%+v: %v may act, want the claimant alone or every granted tenant", c, may)
			}
		}
	})
}

// TestOwnershipYieldsTo: a tenant's own binding yields to another
// tenant's claim of the chat or inside the guild, and to a user linked to
// other tenants only; never to the tenant's own claims and links.
func TestOwnershipYieldsTo(t *testing.T) {
	o := platform.NewOwnership([]platform.Binding{
		{Kind: platform.BindScope, ID: "901", Space: "900", Tenant: "b"},
		{Kind: platform.BindScope, ID: "-1301", Tenant: "b"},
		{Kind: platform.BindUser, ID: "4002", Tenant: "b"},
		{Kind: platform.BindUser, ID: "4003", Tenant: "a"},
		{Kind: platform.BindUser, ID: "4003", Tenant: "b"},
	})
	for _, c := range []struct {
		tenant, id, to string
	}{
		{"a", "901", "b"}, {"a", "900", "b"}, {"a", "-1301", "b"}, {"a", "4002", "b"},
		{"a", "4003", ""}, {"b", "901", ""}, {"b", "4002", ""}, {"a", "-1302", ""},
	} {
		if got := o.YieldsTo(c.tenant, c.id); got != (c.to != "") {
			t.Errorf("YieldsTo(%s, %s) = %v; want a yield to %q", c.tenant, c.id, got, c.to)
		}
	}
}

// TestOwnershipHeldSince: the time a chat's holder came is the Since of
// the binding or claim that gives it, by the order Holder follows (the
// chat's binding, its channel's, its space's, then its claim's); zero for
// a binding without one and a chat nobody holds.
func TestOwnershipHeldSince(t *testing.T) {
	at := func(h int) time.Time { return time.Unix(1_700_000_000, 0).Add(time.Duration(h) * time.Hour) }
	o := platform.NewOwnership([]platform.Binding{
		{Kind: platform.BindGuild, ID: "g1", Tenant: "a", Since: at(1)},
		{Kind: platform.BindChannel, ID: "c2", Tenant: "b", Since: at(2)},
		{Kind: platform.BindGuild, ID: "g3", Tenant: "a"},
		{Kind: platform.BindScope, ID: "c4", Tenant: "c", Since: at(4)},
	})
	for _, tc := range []struct {
		c    platform.Chat
		want time.Time
	}{
		{platform.Chat{ID: "c1", Space: "g1"}, at(1)},
		{platform.Chat{ID: "c2", Space: "g1"}, at(2)},
		{platform.Chat{ID: "t2", Parent: "c2", Space: "g1"}, at(2)},
		{platform.Chat{ID: "c3", Space: "g3"}, time.Time{}},
		{platform.Chat{ID: "t4", Parent: "c4", Space: "g5"}, at(4)},
		{platform.Chat{ID: "c5", Space: "g5"}, time.Time{}},
	} {
		if got := o.HeldSince(tc.c); !got.Equal(tc.want) {
			t.Errorf("HeldSince(%+v) = %v, want %v", tc.c, got, tc.want)
		}
	}
}
