package telegram

import (
	"fmt"
	"net/http"
	"testing"

	"connector/platform"
)

// TestAuthorFirst: a linked user's group message reaches their tenant,
// not the group's, without the mention the group's tenant requires (the
// owner floor), and their DM too; an unlinked user's message there is
// gated as before; in a chat claimed with an allow-list only the listed
// user reaches the claimant, others are dropped.
func TestAuthorFirst(t *testing.T) {
	e := webhookEnv(t, func(c *Config) {
		c.Tenants = map[string]TenantConfig{"t2": {RequireMention: new(true)}}
	})
	bindings := []platform.Binding{
		{Kind: platform.BindUser, ID: "501", Tenant: "t1"},
		{Kind: platform.BindScope, ID: "-100777", Tenant: "t3"},
		{Kind: platform.BindPrincipal, ID: platform.PrincipalAllowList, Tenant: "t3"},
		{Kind: platform.BindAllow, ID: "502", Tenant: "t3"},
	}
	for chat, tenant := range testChats {
		bindings = append(bindings, platform.Binding{Kind: platform.BindChat, ID: chat, Tenant: tenant})
	}
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	// Before any message: a linked user's DM and a claimed chat are
	// granted from the table alone (any instance, after a restart).
	if !e.p.ChatGranted(t.Context(), "501", "t1") || !e.p.ChatGranted(t.Context(), "-100777", "t3") || e.p.ChatGranted(t.Context(), "-100777", "t1") || e.p.ChatGranted(t.Context(), "503", "t1") {
		t.Fatal("grants from the author table are wrong")
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
	say(-1001234567890, "supergroup", 501, "linked, no mention")
	expect("t1", "linked, no mention")
	say(-1001234567890, "supergroup", 503, "unlinked, no mention")
	e.sink.Empty(t)
	say(501, "private", 501, "my DM")
	expect("t1", "my DM")
	say(-100777, "group", 502, "allowed")
	expect("t3", "allowed")
	say(-100777, "group", 504, "not allowed")
	e.sink.Empty(t)
	if !e.p.ChatGranted(t.Context(), "501", "t1") || e.p.ChatGranted(t.Context(), "501", "t2") {
		t.Fatal("t1 is not granted its user's DM, or t2 is")
	}
}
