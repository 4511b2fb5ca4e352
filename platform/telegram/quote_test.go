package telegram

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/vault"
)

// replyUpdate is user's message in chat replying to the bot's message
// quoted, posted at date (Unix seconds), whose text is "quoted".
func replyUpdate(id, chat, user, quoted int, date int64) []byte {
	return fmt.Appendf(nil, `{"update_id":%d,"message":{"message_id":%d,"date":%d,"chat":{"id":%d,"type":"supergroup","title":"G"},"from":{"id":%d,"is_bot":false,"first_name":"U"},"text":"about that","reply_to_message":{"message_id":%d,"date":%d,"chat":{"id":%d,"type":"supergroup","title":"G"},"from":{"id":7012345678,"is_bot":true,"first_name":"Hermes","username":"hermes_test_bot"},"text":"quoted"}}}`,
		884200000+id, id, time.Now().Unix(), chat, user, quoted, date, chat)
}

// TestQuoteOfAnotherTenantsAnswer: in group -100888, which t2 (505's)
// and t3 (506's) both hold by grant, a reply quoting the bot's answer for
// t2 reaches t3 with the quote's text but not as t3's own (before, is_own
// was true for any bot message, so t3's agent took t2's answer for its
// own turn); a reply quoting t3's answer, or either part of t2's answer
// split in two, is its tenant's own.
func TestQuoteOfAnotherTenantsAnswer(t *testing.T) {
	e := heldEnv(t, vault.NewMemory(vault.Config{}),
		platform.Binding{Kind: platform.BindUser, ID: "505", Tenant: "t2"},
		platform.Binding{Kind: platform.BindUser, ID: "506", Tenant: "t3"})
	const group = -100888
	for i, user := range []int{505, 506} {
		e.post(t, fmt.Appendf(nil, `{"update_id":%d,"message":{"message_id":%d,"date":%d,"chat":{"id":%d,"type":"supergroup","title":"G"},"from":{"id":%d,"is_bot":false,"first_name":"U"},"text":"hello"}}`, 884100000+i, 1+i, time.Now().Unix(), group, user))
		e.sink.Next(t)
	}
	long := strings.Repeat("a", 3000) + "\n\n" + strings.Repeat("b", 3000)
	if r := e.act(t, "t2", sendAction(fmt.Sprint(group), long)); !r.Success {
		t.Fatalf("t2's send = %+v", r)
	}
	if r := e.act(t, "t3", sendAction(fmt.Sprint(group), "t3's answer")); !r.Success {
		t.Fatalf("t3's send = %+v", r)
	}
	posted := slices.Sorted(func(yield func(int) bool) {
		for id := range e.fake.Messages(group) {
			if !yield(id) {
				return
			}
		}
	})
	if len(posted) != 3 {
		t.Fatalf("the group holds %d messages, want t2's two parts and t3's", len(posted))
	}
	for i, c := range []struct {
		user, quoted int
		tenant       string
		own          bool
	}{
		{506, posted[0], "t3", false},
		{506, posted[1], "t3", false},
		{506, posted[2], "t3", true},
		{505, posted[0], "t2", true},
		{505, posted[1], "t2", true},
		{505, posted[2], "t2", false},
	} {
		e.post(t, replyUpdate(100+i, group, c.user, c.quoted, time.Now().Unix()))
		d := e.sink.Next(t)
		if d.Tenant != c.tenant || d.Event == nil || d.Event.ReplyTo == nil || d.Event.ReplyTo.Text != "quoted" || d.Event.ReplyTo.IsOwn != c.own {
			t.Errorf("reply %d quoting %d reached %q with %+v, want %s with the text and is_own %v", i, c.quoted, d.Tenant, d.Event, c.tenant, c.own)
		}
	}
}

// TestQuoteOfAnEarlierTenantsAnswer: in supergroup -1001234567890, bound
// to t2, a reply quoting the bot's message is t2's own when it was posted
// since t2's creation, and not when it was posted before, for the
// earlier tenant of the id (before, it was t2's own too).
func TestQuoteOfAnEarlierTenantsAnswer(t *testing.T) {
	created := time.Now().Add(-time.Hour)
	c := &creations{}
	c.made("t2", created)
	e := heldEnv(t, vault.NewMemory(vault.Config{Since: c.since}), platform.Binding{Kind: platform.BindChat, ID: "-1001234567890", Tenant: "t2"})
	for i, q := range []struct {
		date int64
		own  bool
	}{
		{created.Unix() - 1, false},
		{created.Unix(), true}, // the second of the creation: maybe since
		{created.Unix() + 60, true},
	} {
		e.post(t, replyUpdate(200+i, -1001234567890, 505, 50+i, q.date))
		d := e.sink.Next(t)
		if d.Tenant != "t2" || d.Event == nil || d.Event.ReplyTo == nil || d.Event.ReplyTo.Text != "quoted" || d.Event.ReplyTo.IsOwn != q.own {
			t.Errorf("reply %d reached %q with %+v, want t2 with the text and is_own %v", i, d.Tenant, d.Event, q.own)
		}
	}
}

// TestClaimedGroupKeepsAnotherTenantsAnswers: in group -100887, where t2
// (505's) answered by grant, t3 (501's) claims the group afterwards. t3's
// edit and delete of t2's answer are the uniform decline and reach no Bot
// API call, nor do they with its id spelt "0…" or "+…" (before, those
// named no posted record, and Telegram took them for the same message), and 501's reply quoting it reaches t3 as not its own; t3 edits its
// own answer there and is_own holds for it (before, a claim gave t3 every
// bot message of the group).
func TestClaimedGroupKeepsAnotherTenantsAnswers(t *testing.T) {
	bindings := []platform.Binding{{Kind: platform.BindUser, ID: "505", Tenant: "t2"}}
	e := heldEnv(t, vault.NewMemory(vault.Config{}), bindings...)
	const group = -100887
	e.post(t, fmt.Appendf(nil, `{"update_id":884100010,"message":{"message_id":1,"date":%d,"chat":{"id":%d,"type":"supergroup","title":"G"},"from":{"id":505,"is_bot":false,"first_name":"U"},"text":"hello"}}`, time.Now().Unix(), group))
	if d := e.sink.Next(t); d.Tenant != "t2" {
		t.Fatalf("505's message delivered to %q, want t2", d.Tenant)
	}
	theirs := e.act(t, "t2", sendAction(fmt.Sprint(group), "t2's answer"))
	if !theirs.Success {
		t.Fatalf("t2's send by grant = %+v", theirs)
	}
	bindings = append(bindings, platform.Binding{Kind: platform.BindUser, ID: "501", Tenant: "t3"},
		platform.Binding{Kind: platform.BindScope, ID: fmt.Sprint(group), Tenant: "t3"})
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{contract.OpEdit, contract.OpDelete} {
		a := contract.Action{Op: op, ChatID: contract.ID(fmt.Sprint(group)), MessageID: contract.ID(theirs.MessageID), Content: "hijacked"}
		if r := e.act(t, "t3", a); r != contract.Declined(platformName) {
			t.Errorf("t3's %s of t2's answer in its claimed group = %+v, want the decline", op, r)
		}
		// Spelt otherwise, the id is not a Telegram message id: it names no record.
		for _, id := range []string{"0" + theirs.MessageID, "+" + theirs.MessageID} {
			a.MessageID = contract.ID(id)
			if r := e.act(t, "t3", a); r.Success || r.Code != contract.CodeBadRequest {
				t.Errorf("t3's %s of t2's answer as %q in its claimed group = %+v, want bad_request", op, id, r)
			}
		}
	}
	if n := len(e.fake.Calls("editMessageText")) + len(e.fake.Calls("deleteMessage")); n != 0 {
		t.Errorf("%d edits and deletes of t2's answer reached the Bot API, want none", n)
	}
	mine := e.act(t, "t3", sendAction(fmt.Sprint(group), "t3's answer"))
	if !mine.Success {
		t.Fatalf("t3's send in its claimed group = %+v", mine)
	}
	edit := contract.Action{Op: contract.OpEdit, ChatID: contract.ID(fmt.Sprint(group)), MessageID: contract.ID(mine.MessageID), Content: "t3 edits"}
	if r := e.act(t, "t3", edit); !r.Success {
		t.Errorf("t3's edit of its own answer = %+v", r)
	}
	for i, c := range []struct {
		quoted string
		own    bool
	}{{theirs.MessageID, false}, {mine.MessageID, true}} {
		quoted, _ := strconv.Atoi(c.quoted)
		e.post(t, replyUpdate(120+i, group, 501, quoted, time.Now().Unix()))
		if d := e.sink.Next(t); d.Tenant != "t3" || d.Event == nil || d.Event.ReplyTo == nil || d.Event.ReplyTo.IsOwn != c.own {
			t.Errorf("reply quoting %s reached %q with %+v, want t3 with is_own %v", c.quoted, d.Tenant, d.Event, c.own)
		}
	}
}

// TestClaimHandedOverKeepsTheEarlierClaimantsAnswers: t2 claims group
// -100886 and answers there; then the claim goes to t3. t3's edit and
// delete of t2's answer are the uniform decline and reach no Bot API call.
// Then the claim goes, and 505 (t2's) speaks there, so t2 holds the
// group by grant: a reply of 505's quoting t2's answer is t2's own, and
// t2 may edit it. Before, what t2 posted under its claim had no record:
// t3 could rewrite or delete it, and t2 could neither edit it nor see it
// quoted as its own once it acted by grant.
func TestClaimHandedOverKeepsTheEarlierClaimantsAnswers(t *testing.T) {
	const group = -100886
	user := platform.Binding{Kind: platform.BindUser, ID: "505", Tenant: "t2"}
	claim := func(tenant string) platform.Binding {
		return platform.Binding{Kind: platform.BindScope, ID: fmt.Sprint(group), Tenant: tenant}
	}
	e := heldEnv(t, vault.NewMemory(vault.Config{}), user, claim("t2"))
	theirs := e.act(t, "t2", sendAction(fmt.Sprint(group), "t2's answer"))
	if !theirs.Success {
		t.Fatalf("t2's send in its claimed group = %+v", theirs)
	}
	if err := e.p.Bind([]platform.Binding{user, claim("t3")}); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{contract.OpEdit, contract.OpDelete} {
		a := contract.Action{Op: op, ChatID: contract.ID(fmt.Sprint(group)), MessageID: contract.ID(theirs.MessageID), Content: "hijacked"}
		if r := e.act(t, "t3", a); r != contract.Declined(platformName) {
			t.Errorf("t3's %s of t2's answer once the claim went to it = %+v, want the decline", op, r)
		}
	}
	if n := len(e.fake.Calls("editMessageText")) + len(e.fake.Calls("deleteMessage")); n != 0 {
		t.Errorf("%d edits and deletes of t2's answer reached the Bot API, want none", n)
	}
	if err := e.p.Bind([]platform.Binding{user}); err != nil {
		t.Fatal(err)
	}
	e.post(t, fmt.Appendf(nil, `{"update_id":884100020,"message":{"message_id":900,"date":%d,"chat":{"id":%d,"type":"supergroup","title":"G"},"from":{"id":505,"is_bot":false,"first_name":"U"},"text":"hello"}}`, time.Now().Unix(), group))
	if d := e.sink.Next(t); d.Tenant != "t2" {
		t.Fatalf("505's message delivered to %q, want t2", d.Tenant)
	}
	quoted, _ := strconv.Atoi(theirs.MessageID)
	e.post(t, replyUpdate(130, group, 505, quoted, time.Now().Unix()))
	if d := e.sink.Next(t); d.Tenant != "t2" || d.Event == nil || d.Event.ReplyTo == nil || !d.Event.ReplyTo.IsOwn {
		t.Errorf("505's reply quoting t2's answer reached %q with %+v, want t2 with is_own", d.Tenant, d.Event)
	}
	edit := contract.Action{Op: contract.OpEdit, ChatID: contract.ID(fmt.Sprint(group)), MessageID: contract.ID(theirs.MessageID), Content: "t2 edits"}
	if r := e.act(t, "t2", edit); !r.Success {
		t.Errorf("t2's edit by grant of what it posted under its claim = %+v", r)
	}
}

// TestRebindKeepsTheEarlierHoldersOldAnswers: group -100887 is bound
// to t2, which answers and prompts there; a day and more later, when the
// records of both have expired (vault.ChatGrantTTL), the binding goes to
// t3 (Binding.Since). t3's edit and delete of t2's answer are the uniform
// decline and reach no Bot API call, a reply quoting it is not t3's own
// (is_own), and a press of t2's prompt, dated before the binding, is
// dropped (prompt_not_owned); t3's own prompt there is answered. Before, a message with no record counted as the holder's
// (to change, and quoted), and a press of it reached t3 with t2's
// prompt_id and the choice.
func TestRebindKeepsTheEarlierHoldersOldAnswers(t *testing.T) {
	const group = -100887
	clk := clocktest.New(time.Now())
	m := &countingMetrics{}
	e := newEnvDeps(t, platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk}), Metrics: m}, func(c *Config) {
		c.WebhookURL, c.WebhookSecret = "https://connector.example"+WebhookPath, testSecret
	})
	e.startWebhook(t)
	bind := func(tenant string, since time.Time) {
		t.Helper()
		if err := e.p.Bind([]platform.Binding{{Kind: platform.BindChat, ID: fmt.Sprint(group), Tenant: tenant, Since: since}}); err != nil {
			t.Fatal(err)
		}
	}
	prompt := func(tenant, id string) int {
		t.Helper()
		a := promptAction(fmt.Sprint(group), contract.PromptOption{ID: "once", Label: "Approve once"})
		a.PromptID = id
		r := e.act(t, tenant, a)
		if !r.Success {
			t.Fatalf("%s's prompt: %+v", tenant, r)
		}
		msgID, _ := strconv.Atoi(r.MessageID)
		return msgID
	}
	press := func(update int64, msgID int, id string) {
		t.Helper()
		chat := map[string]any{"id": int64(group), "type": "supergroup", "title": "G"}
		body, err := e.fake.PressButton(update, chat, msgID, "hp1:"+id+":once", map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"})
		if err != nil {
			t.Fatal(err)
		}
		if code := e.post(t, body); code != http.StatusOK {
			t.Fatalf("press: status %d", code)
		}
	}
	bind("t2", time.Time{})
	theirs := e.act(t, "t2", sendAction(fmt.Sprint(group), "t2's answer"))
	if !theirs.Success {
		t.Fatalf("t2's send in its bound group = %+v", theirs)
	}
	earlier := prompt("t2", "f00dba.00000011")
	clk.Advance(vault.ChatGrantTTL + time.Hour) // the records have expired
	bind("t3", clk.Now())                       // after the presses' dates (the fake Bot API dates by the real clock)
	for _, op := range []string{contract.OpEdit, contract.OpDelete} {
		a := contract.Action{Op: op, ChatID: contract.ID(fmt.Sprint(group)), MessageID: contract.ID(theirs.MessageID), Content: "hijacked"}
		if r := e.act(t, "t3", a); r != contract.Declined(platformName) {
			t.Errorf("t3's %s of t2's day-old answer once the group was bound to it = %+v, want the decline", op, r)
		}
	}
	if n := len(e.fake.Calls("editMessageText")) + len(e.fake.Calls("deleteMessage")); n != 0 {
		t.Errorf("%d edits and deletes of t2's answer reached the Bot API, want none", n)
	}
	quoted, _ := strconv.Atoi(theirs.MessageID)
	e.post(t, replyUpdate(131, group, 505, quoted, time.Now().Unix()))
	if d := e.sink.Next(t); d.Tenant != "t3" || d.Event == nil || d.Event.ReplyTo == nil || d.Event.ReplyTo.IsOwn {
		t.Errorf("505's reply quoting t2's day-old answer reached %q with %+v, want t3 without is_own", d.Tenant, d.Event)
	}
	press(884100961, earlier, "f00dba.00000011")
	platformtest.WaitUntil(t, "the press of t2's day-old prompt dropped as prompt_not_owned", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.dropped[dropPromptNotOwned] == 1
	})
	e.sink.Empty(t)
	own := prompt("t3", "f00dba.00000012")
	press(884100962, own, "f00dba.00000012")
	if d := e.sink.Next(t); d.Tenant != "t3" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "f00dba.00000012" {
		t.Fatalf("t3's press delivered to %q as %+v, want t3's answer", d.Tenant, d.Event)
	}
}

// TestUndatedPressOfTheHoldersOwnPromptAfterARebind: group -100888 is
// bound to t3 (made long ago), which prompts there; a day and more later,
// its posted record expired, a press of the prompt comes undated (a
// message Telegram no longer shows the bot) within 30 days of the
// binding, and reaches t3. Before, the prompt had no record but the
// day-long one, and every such press of the holder's own prompt was
// dropped (prompt_not_owned) for the 30 days after its binding.
func TestUndatedPressOfTheHoldersOwnPromptAfterARebind(t *testing.T) {
	const group = -100888
	clk := clocktest.New(time.Now())
	e := newEnvDeps(t, platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk}), Metrics: &countingMetrics{}}, func(c *Config) {
		c.WebhookURL, c.WebhookSecret = "https://connector.example"+WebhookPath, testSecret
	})
	e.startWebhook(t)
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindChat, ID: fmt.Sprint(group), Tenant: "t3", Since: clk.Now()}}); err != nil {
		t.Fatal(err)
	}
	a := promptAction(fmt.Sprint(group), contract.PromptOption{ID: "once", Label: "Approve once"})
	a.PromptID = "f00dba.00000013"
	r := e.act(t, "t3", a)
	if !r.Success {
		t.Fatalf("t3's prompt: %+v", r)
	}
	msgID, _ := strconv.Atoi(r.MessageID)
	clk.Advance(vault.ChatGrantTTL + time.Hour) // its posted record has expired
	chat := map[string]any{"id": int64(group), "type": "supergroup", "title": "G"}
	body, err := e.fake.PressButton(884100963, chat, msgID, "hp1:f00dba.00000013:once", map[string]any{"id": int64(501), "is_bot": false, "first_name": "Ada"})
	if err != nil {
		t.Fatal(err)
	}
	var u map[string]any
	if err := json.Unmarshal(body, &u); err != nil {
		t.Fatal(err)
	}
	u["callback_query"].(map[string]any)["message"].(map[string]any)["date"] = 0 // inaccessible: undated
	if body, err = json.Marshal(u); err != nil {
		t.Fatal(err)
	}
	if code := e.post(t, body); code != http.StatusOK {
		t.Fatalf("press: status %d", code)
	}
	if d := e.sink.Next(t); d.Tenant != "t3" || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "f00dba.00000013" {
		t.Fatalf("the undated press of t3's own prompt delivered to %q as %+v, want t3's answer", d.Tenant, d.Event)
	}
}
