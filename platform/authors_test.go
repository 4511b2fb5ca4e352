package platform_test

import (
	"testing"

	"connector/platform"
)

// TestAuthorsRoute walks the rules of author-first routing.
func TestAuthorsRoute(t *testing.T) {
	a := platform.NewAuthors([]platform.Binding{
		{Kind: platform.BindUser, ID: "71", Tenant: "a"},
		{Kind: platform.BindUser, ID: "72", Tenant: "b"},
		{Kind: platform.BindUser, ID: "74", Tenant: "b"},
		{Kind: platform.BindUser, ID: "74", Tenant: "a"},
		{Kind: platform.BindUser, ID: "75", Tenant: "b"},
		{Kind: platform.BindUser, ID: "75", Tenant: "c"},
		{Kind: platform.BindDMDefault, ID: "75", Tenant: "c"},
		{Kind: platform.BindScope, ID: "601", Tenant: "b"},
		{Kind: platform.BindScope, ID: "602", Tenant: "c"},
		{Kind: platform.BindScope, ID: "603", Tenant: "d"},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAny, Tenant: "b"},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAllowList, Tenant: "c"},
		{Kind: platform.BindAllow, ID: "90", Tenant: "c"},
		{Kind: platform.BindGuild, ID: "500", Tenant: "z"}, // not an author kind
	})
	for _, c := range []struct {
		name   string
		user   string
		dm     bool
		scopes []string
		want   platform.Route
		ok     bool
	}{
		{"linked DM", "71", true, nil, platform.Route{Tenant: "a", Owner: true}, true},
		{"unlinked DM", "99", true, nil, platform.Route{}, false},
		{"several links: lowest id", "74", true, nil, platform.Route{Tenant: "a", Owner: true}, true},
		{"several links: DM default", "75", true, nil, platform.Route{Tenant: "c", Owner: true}, true},
		{"linked anywhere", "71", false, []string{"501"}, platform.Route{Tenant: "a", Owner: true}, true},
		{"owner floor in another's scope", "71", false, []string{"601"}, platform.Route{Tenant: "a", Owner: true}, true},
		{"linked to the claimant", "74", false, []string{"601"}, platform.Route{Tenant: "b", Owner: true}, true},
		{"claimed parent", "74", false, []string{"7001", "601"}, platform.Route{Tenant: "b", Owner: true}, true},
		{"any admits", "99", false, []string{"601"}, platform.Route{Tenant: "b"}, true},
		{"allow-list admits", "90", false, []string{"602"}, platform.Route{Tenant: "c"}, true},
		{"allow-list refuses", "91", false, []string{"602"}, platform.Route{Drop: platform.DropPrincipal}, true},
		{"owner-only by default", "99", false, []string{"603"}, platform.Route{Drop: platform.DropPrincipal}, true},
		{"unclaimed, unlinked", "99", false, []string{"501"}, platform.Route{}, false},
	} {
		got, ok := a.Route(c.user, c.dm, c.scopes...)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestParseLinkCommand(t *testing.T) {
	for _, c := range []struct {
		text, code string
		ok         bool
	}{
		{"/link ABCDE-FGHJK", "ABCDE-FGHJK", true},
		{"  /LINK   abc  ", "abc", true},
		{"/link@hermes_bot XYZ", "XYZ", true},
		{"/link", "", true},
		{"/link\u00a0X", "X", true},
		{"/linked X", "", false},
		{"/lin", "", false},
		{"hello /link X", "", false},
		{"", "", false},
	} {
		code, ok := platform.ParseLinkCommand(c.text)
		if code != c.code || ok != c.ok {
			t.Errorf("%q: %q %v, want %q %v", c.text, code, ok, c.code, c.ok)
		}
	}
}

// FuzzParseLinkCommand: any text parses without panicking, a command's
// code is a suffix of the text and never longer than it.
func FuzzParseLinkCommand(f *testing.F) {
	for _, s := range []string{"/link ABC", "/link@bot x", "/LINK", "/linkx", "\u00a0/link\u2003c", "/link@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		code, ok := platform.ParseLinkCommand(text)
		if !ok && code != "" {
			t.Fatalf("%q: not a command but code %q", text, code)
		}
		if len(code) > len(text) {
			t.Fatalf("%q: code %q longer than the text", text, code)
		}
	})
}

func TestAuthorsLinkedClaimed(t *testing.T) {
	a := platform.NewAuthors([]platform.Binding{
		{Kind: platform.BindUser, ID: "71", Tenant: "a"},
		{Kind: platform.BindScope, ID: "601", Tenant: "b"},
	})
	if !a.Linked("71", "a") || a.Linked("71", "b") || a.Linked("72", "a") {
		t.Fatal("Linked")
	}
	if !a.Claimed("601", "b") || a.Claimed("601", "a") || a.Claimed("602", "b") {
		t.Fatal("Claimed")
	}
}
