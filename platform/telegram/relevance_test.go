package telegram

import (
	"fmt"
	"net/http"
	"testing"

	"connector/platform"
)

// TestDeclaredRelevance: a declared policy replaces the tenant's
// require_mention, free-response chats and topics, and
// bots_require_mention (allowOtherBots false) on the group gate, keeps its
// other knobs, skips scopes that are no chat id, and a later declaration
// (or none) replaces it: t1's Book Club group is ungated by its YAML.
func TestDeclaredRelevance(t *testing.T) {
	e := webhookEnv(t, func(c *Config) {
		c.Tenants = map[string]TenantConfig{"t1": {MentionPatterns: []string{`\bhermes\b`}}}
	})
	const group = -4001234567
	n := 0
	say := func(from int64, bot bool, text string, extra string) {
		t.Helper()
		n++
		raw := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1767225300,"chat":{"id":%d,"type":"group","title":"Book Club"},"from":{"id":%d,"is_bot":%t,"first_name":"U"},"text":%q%s}}`,
			n, n, group, from, bot, text, extra)
		if code := e.post(t, []byte(raw)); code != http.StatusOK {
			t.Fatalf("webhook answered %d", code)
		}
	}
	delivered := func(text string) {
		t.Helper()
		if d := e.sink.Next(t); d.Tenant != "t1" || d.Event == nil || d.Event.Text != text {
			t.Fatalf("delivery %s %+v, want %q to t1", d.Tenant, d.Event, text)
		}
		e.sink.Empty(t)
	}
	replyToBot := `,"reply_to_message":{"message_id":1,"date":1767225200,"chat":{"id":-4001234567,"type":"group"},"from":{"id":7012345678,"is_bot":true,"first_name":"Hermes"},"text":"earlier"}`

	say(501, false, "configured: ungated", "")
	delivered("configured: ungated")

	e.p.SetRelevance(map[string]platform.Relevance{"t1": {RequireAddress: true, FreeResponseScopes: []string{"#general", "-100:x"}}})
	say(501, false, "declared: unaddressed", "")
	e.sink.Empty(t)
	say(501, false, "declared: a reply to the bot", replyToBot)
	delivered("declared: a reply to the bot")
	say(601, true, "another bot, replying", replyToBot)
	e.sink.Empty(t) // allowOtherBots false: a bot needs an explicit mention
	say(501, false, "kept knob: hermes, a mention pattern", "")
	delivered("kept knob: hermes, a mention pattern")

	e.p.SetRelevance(map[string]platform.Relevance{"t1": {RequireAddress: true, FreeResponseScopes: []string{fmt.Sprint(group)}, AllowOtherBots: true}})
	say(501, false, "free-response chat", "")
	delivered("free-response chat")
	say(601, true, "another bot, allowed", "")
	delivered("another bot, allowed")

	e.p.SetRelevance(map[string]platform.Relevance{"t1": {RequireAddress: true, FreeResponseScopes: []string{fmt.Sprint(group) + ":1"}}})
	say(501, false, "free-response topic 1", "")
	delivered("free-response topic 1")

	e.p.SetRelevance(nil)
	say(501, false, "configured again", "")
	delivered("configured again")
}
