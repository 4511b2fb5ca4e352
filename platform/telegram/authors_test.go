package telegram

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"connector/platform"
)

// TestOwnershipOrder: in a chat bound to a tenant (t2's group) every
// message is that tenant's: its own linked user's without the mention it
// requires (the owner floor), a user linked to t1 gated as anyone (never
// t1's), and t3's claim of the group is set aside; elsewhere a linked
// user's group message and DM reach their tenant (t1), which may then act
// there; in a chat claimed with an allow-list only the listed user reaches
// the claimant, others (a user linked to t1 included) are dropped.
func TestOwnershipOrder(t *testing.T) {
	e := webhookEnv(t, func(c *Config) {
		c.Tenants = map[string]TenantConfig{"t2": {RequireMention: new(true)}}
	})
	bindings := []platform.Binding{
		{Kind: platform.BindUser, ID: "501", Tenant: "t1"},
		{Kind: platform.BindUser, ID: "505", Tenant: "t2"},
		{Kind: platform.BindScope, ID: "-100777", Tenant: "t3"},
		{Kind: platform.BindScope, ID: "-1001234567890", Tenant: "t3"}, // t2's group
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAllowList, Tenant: "t3"},
		{Kind: platform.BindAllow, ID: "502", Tenant: "t3"},
		{Kind: platform.BindAllow, ID: "506", Tenant: "t3"},
	}
	for chat, tenant := range testChats {
		bindings = append(bindings, platform.Binding{Kind: platform.BindChat, ID: chat, Tenant: tenant})
	}
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	granted := func(chat, tenant string) bool {
		t.Helper()
		ok, err := e.p.ChatGranted(ctx, chat, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// Before any message: a linked user's DM and a claimed chat are
	// granted from the table alone (any instance, after a restart); a
	// claim of t2's group is not.
	if !granted("501", "t1") || !granted("-100777", "t3") || granted("-100777", "t1") || granted("503", "t1") || granted("-1001234567890", "t3") {
		t.Fatal("grants from the ownership table are wrong")
	}
	n := 0
	say := func(chat int64, typ string, from int64, text string) {
		t.Helper()
		n++
		raw := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1767225300,"chat":{"id":%d,"type":%q,"title":"G","first_name":"U"},"from":{"id":%d,"is_bot":false,"first_name":"U"},"text":%q}}`,
			n, n, chat, typ, from, text)
		if code := e.post(t, []byte(raw)); code != http.StatusOK {
			t.Fatalf("webhook answered %d", code)
		}
	}
	expect := func(tenant, text string) {
		t.Helper()
		d := e.sink.Next(t)
		if d.Tenant != tenant || d.Event == nil || d.Event.Text != text {
			t.Fatalf("delivery %s %+v, want %q to %s", d.Tenant, d.Event, text, tenant)
		}
		e.sink.Empty(t)
	}
	say(-1001234567890, "supergroup", 505, "t2's user, no mention")
	expect("t2", "t2's user, no mention")
	say(-1001234567890, "supergroup", 501, "t1's user in t2's group, no mention")
	say(-1001234567890, "supergroup", 506, "t3's allowed user in t2's group, no mention")
	say(-1001234567890, "supergroup", 503, "unlinked, no mention")
	e.sink.Empty(t)
	say(-100888, "supergroup", 501, "t1's user in an unbound group")
	expect("t1", "t1's user in an unbound group")
	say(501, "private", 501, "my DM")
	expect("t1", "my DM")
	say(-100777, "group", 502, "allowed")
	expect("t3", "allowed")
	say(-100777, "group", 504, "not allowed")
	say(-100777, "group", 501, "t1's user in t3's claim")
	e.sink.Empty(t)
	if !granted("501", "t1") || granted("501", "t2") || !granted("-100888", "t1") || granted("-100888", "t2") {
		t.Fatal("t1 is not granted its user's DM and group, or t2 is")
	}
	if granted("-100777", "t1") || granted("-1001234567890", "t1") {
		t.Fatal("t1 is granted a chat claimed by t3 or bound to t2")
	}
}
