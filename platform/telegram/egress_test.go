package telegram

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/refusedtest"
	"connector/platform"
	"connector/platform/telegram/telegramtest"
)

// act runs one action for tenant with the gateway's 30 s budget.
func (e *env) act(t *testing.T, tenant string, a contract.Action) contract.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.p.Execute(ctx, tenant, &a)
}

func sendAction(chat, content string) contract.Action {
	return contract.Action{Op: contract.OpSend, ChatID: contract.ID(chat), Content: content}
}

func TestDescriptorFromHandlerTable(t *testing.T) {
	e := newEnv(t, nil)
	d := e.p.Descriptor()
	want := []string{"delete", "draft", "edit", "get_chat_info", "prompt", "react", "send", "send_media", "thread_create", "thread_rename", "typing"}
	if d.Platform != "telegram" || !slices.Equal(d.SupportedOps, want) || !d.SupportsEdit || d.MaxMessageLength != 4096 {
		t.Errorf("descriptor = %+v", d)
	}
}

func TestSendMarkdown(t *testing.T) {
	e := newEnv(t, nil)
	r := e.act(t, "t1", sendAction("123456789", `**Done**: saved to C:\tmp\out.txt (1+1=2)!`))
	if !r.Success || r.MessageID == "" {
		t.Fatalf("result %+v", r)
	}
	c := e.fake.Calls("sendMessage")[0]
	if c.Form["chat_id"] != "123456789" || c.Form["message_thread_id"] != "" || c.Form["reply_parameters"] != "" {
		t.Errorf("form %v", c.Form)
	}
	if got := visible(t, c); got != `Done: saved to C:\tmp\out.txt (1+1=2)!` {
		t.Errorf("visible text %q", got)
	}
}

func TestSendReplyIntoTopic(t *testing.T) {
	e := newEnv(t, nil)
	a := sendAction("-1001112223334", "on it")
	a.ReplyTo = "3003"
	a.Metadata.ThreadID = "42"
	if r := e.act(t, "t1", a); !r.Success {
		t.Fatalf("result %+v", r)
	}
	f := e.fake.Calls("sendMessage")[0].Form
	if f["message_thread_id"] != "42" || f["reply_parameters"] != `{"message_id":3003,"allow_sending_without_reply":true}` {
		t.Errorf("form %v", f)
	}
}

func TestSendGeneralTopicHasNoThread(t *testing.T) {
	e := newEnv(t, nil)
	a := sendAction("-1001112223334", "hello General")
	a.Metadata.ThreadID = "1"
	a.ReplyTo = "callback:abc" // not a message id: no reply
	if r := e.act(t, "t1", a); !r.Success {
		t.Fatalf("result %+v", r)
	}
	f := e.fake.Calls("sendMessage")[0].Form
	if _, ok := f["message_thread_id"]; ok {
		t.Errorf("General topic sent with message_thread_id %q", f["message_thread_id"])
	}
	if _, ok := f["reply_parameters"]; ok {
		t.Error("reply_parameters for a non-message id")
	}
}

func TestSendSplitsLongContent(t *testing.T) {
	e := newEnv(t, nil)
	var b strings.Builder
	for i := range 90 {
		b.WriteString(strings.Repeat("word_", 19))
		b.WriteString("end. ")
		if i%10 == 9 {
			b.WriteString("\n\n")
		}
	}
	content := b.String() // ~9,000 code points of reserved characters
	a := sendAction("-4001234567", content)
	a.ReplyTo = "5"
	r := e.act(t, "t1", a)
	if !r.Success {
		t.Fatalf("result %+v", r)
	}
	calls := e.fake.Calls("sendMessage")
	if len(calls) != 3 {
		t.Fatalf("%d sendMessage calls, want 3", len(calls))
	}
	var got strings.Builder
	for i, c := range calls {
		v := visible(t, c)
		if n := utf8.RuneCountInString(v); n > maxMessageRunes {
			t.Errorf("part %d: %d code points", i, n)
		}
		if _, ok := c.Form["reply_parameters"]; ok != (i == 0) {
			t.Errorf("part %d: reply_parameters present %v", i, ok)
		}
		got.WriteString(v)
	}
	if squeeze(got.String()) != squeeze(content) {
		t.Error("the parts do not add up to the content")
	}
	if r.MessageID != "101" {
		t.Errorf("message_id %q, want the first part's (101)", r.MessageID)
	}
}

func TestSendFallsBackToPlainText(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 400, Description: "Bad Request: can't parse entities: Can't find end of Bold entity at byte offset 3"})
	content := "**odd** text"
	if r := e.act(t, "t1", sendAction("123456789", content)); !r.Success {
		t.Fatalf("result %+v", r)
	}
	calls := e.fake.Calls("sendMessage")
	if len(calls) != 2 || calls[1].Form["parse_mode"] != "" || calls[1].Form["text"] != content {
		t.Fatalf("calls %+v, want a MarkdownV2 try then the plain content", calls)
	}
}

func TestSendWithoutVanishedTopic(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 400, Description: "Bad Request: message thread not found"})
	a := sendAction("-1001112223334", "still here")
	a.Metadata.ThreadID = "42"
	if r := e.act(t, "t1", a); !r.Success {
		t.Fatalf("result %+v", r)
	}
	calls := e.fake.Calls("sendMessage")
	if len(calls) != 2 || calls[0].Form["message_thread_id"] != "42" || calls[1].Form["message_thread_id"] != "" {
		t.Fatalf("calls %+v", calls)
	}
}

func TestSendHonours429RetryAfter(t *testing.T) {
	m := &countingMetrics{}
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, nil)
	e.p.deps.Metrics = m
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 429, Description: "Too Many Requests: retry after 1", RetryAfter: 1})
	r := e.actDriven(t, clk, "t1", sendAction("123456789", "once"))
	if !r.Success {
		t.Fatalf("result %+v", r)
	}
	calls := e.fake.Calls("sendMessage")
	if len(calls) != 2 {
		t.Fatalf("%d sendMessage calls, want the refused one and one retry", len(calls))
	}
	if gap := calls[1].At.Sub(calls[0].At); gap != time.Second {
		t.Errorf("retried %v after the 429, want exactly its retry_after (1s)", gap)
	}
	if m.limited.Load() != 1 {
		t.Errorf("RateLimited counted %d", m.limited.Load())
	}
}

func TestSend429BeyondDeadline(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 429, Description: "Too Many Requests: retry after 60", RetryAfter: 60})
	// act's deadline (30 s) is short of the 60 s retry, and long enough
	// that a loaded machine never spends it before the send goes out.
	r := e.act(t, "t1", sendAction("123456789", "later"))
	if r.Success || r.Code != contract.CodeRateLimited || r.RetryAfterMS < 50_000 {
		t.Fatalf("result %+v, want rate_limited with retry_after_ms ≈ 60 s", r)
	}
	if n := len(e.fake.Calls("sendMessage")); n != 1 {
		t.Errorf("%d sendMessage calls, want 1 (nothing sent twice)", n)
	}
	// The chat stays blocked: typing is skipped, another send fails fast.
	if r := e.act(t, "t1", contract.Action{Op: contract.OpTyping, ChatID: "123456789"}); r.Code != contract.CodeRateLimited {
		t.Errorf("typing during the flood wait: %+v", r)
	}
	if n := len(e.fake.Calls("sendChatAction")); n != 0 {
		t.Errorf("%d sendChatAction calls during the flood wait", n)
	}
}

// TestPacedWithoutDeadline: a send whose ctx has no deadline is bounded by
// request_timeout, as on WhatsApp and Slack: into a chat a 429 holds for
// 60 s it answers rate_limited at once (30 s do not reach the end of the
// hold) instead of sleeping out the hold, which it did when paced read the
// missing deadline as the zero time (and latest overflowed 292 years
// ahead).
func TestPacedWithoutDeadline(t *testing.T) {
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, nil)
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 429, Description: "Too Many Requests: retry after 60", RetryAfter: 60})
	// The first send goes out under act's 30 s deadline (a 3 s one less
	// the 1 s kept for the call left a loaded machine 2 s to reach it).
	a := sendAction("123456789", "held")
	if r := e.act(t, "t1", a); r.Code != contract.CodeRateLimited {
		t.Fatalf("send into the chat = %+v, want rate_limited by the 429", r)
	}

	noDeadline, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan contract.Result, 1)
	var finished atomic.Int64
	go func() {
		defer finished.Add(1)
		_, _, r := e.p.sendParts(noDeadline, "t1", 123456789, &a, []string{"no deadline"}, nil, "")
		done <- r
	}()
	clk.Settle(t, 1, func() int { return int(finished.Load()) }, func() int { return 0 })
	if finished.Load() == 0 {
		stop()
		t.Fatalf("the send without a deadline sleeps on the clock until the 60 s hold ends, unbounded by request_timeout (%v)", e.p.cfg.RequestTimeout)
	}
	if r := <-done; r.Code != contract.CodeRateLimited || r.RetryAfterMS < 50_000 {
		t.Fatalf("send without a deadline = %+v, want rate_limited with retry_after_ms ≈ 60 s", r)
	}
	if n := len(e.fake.Calls("sendMessage")); n != 1 {
		t.Errorf("%d sendMessage calls, want only the one the 429 refused", n)
	}
}

// Another tenant's chat and a chat nobody claims are declined; a chat_id
// that is no Telegram chat id at all (or none) is bad_request, as on every
// platform (platform.Execute).
func TestEgressDeclinesOtherTenants(t *testing.T) {
	e := newEnv(t, nil)
	for chat, code := range map[string]string{
		"-1001234567890": contract.CodeEgressDeclined, "-1007778889990": contract.CodeEgressDeclined,
		"abc": contract.CodeBadRequest, "": contract.CodeBadRequest, "0123456789": contract.CodeBadRequest,
	} {
		for _, op := range []string{contract.OpSend, contract.OpEdit, contract.OpTyping, contract.OpGetChatInfo} {
			r := e.act(t, "t1", contract.Action{Op: op, ChatID: contract.ID(chat), Content: "x", MessageID: "5"})
			if r.Success || r.Code != code || (code == contract.CodeEgressDeclined && r != contract.Declined("telegram")) {
				t.Errorf("%s to %q: %+v, want %s", op, chat, r, code)
			}
		}
	}
	if n := len(e.fake.Calls("")); n != 0 {
		t.Errorf("%d calls reached Telegram", n)
	}
}

func TestEgressBadRequests(t *testing.T) {
	e := newEnv(t, nil)
	cases := []struct {
		a    contract.Action
		code string
	}{
		{contract.Action{Op: "task_card", ChatID: "123456789"}, contract.CodeUnsupportedOp},
		{sendAction("123456789", "  \n "), contract.CodeBadRequest},
		{contract.Action{Op: contract.OpEdit, ChatID: "123456789", MessageID: "callback:x", Content: "x"}, contract.CodeBadRequest},
		{contract.Action{Op: contract.OpEdit, ChatID: "123456789", MessageID: "7", Content: ""}, contract.CodeBadRequest},
		{contract.Action{Op: contract.OpEdit, ChatID: "123456789", MessageID: "7", Content: strings.Repeat("x", 4097)}, contract.CodeBadRequest},
	}
	for _, c := range cases {
		if r := e.act(t, "t1", c.a); r.Success || r.Code != c.code {
			t.Errorf("%+v: %+v, want %s", c.a, r, c.code)
		}
	}
}

func TestEdit(t *testing.T) {
	e := newEnv(t, nil)
	sent := e.act(t, "t1", sendAction("123456789", "draft"))
	edit := contract.Action{Op: contract.OpEdit, ChatID: "123456789", MessageID: contract.ID(sent.MessageID), Content: "final *answer*"}
	if r := e.act(t, "t1", edit); !r.Success || r.MessageID != sent.MessageID {
		t.Fatalf("edit result %+v", r)
	}
	c := e.fake.Calls("editMessageText")[0]
	if c.Form["message_id"] != sent.MessageID || visible(t, c) != "final answer" {
		t.Errorf("editMessageText %v", c.Form)
	}
	// The same content again: Telegram says "not modified", which is fine.
	if r := e.act(t, "t1", edit); !r.Success {
		t.Errorf("unchanged edit: %+v", r)
	}
	missing := edit
	missing.MessageID = "999999"
	if r := e.act(t, "t1", missing); r.Success || r.Code != contract.CodePlatformError || !strings.Contains(r.Error, "message to edit not found") {
		t.Errorf("edit of a missing message: %+v", r)
	}
}

func TestTyping(t *testing.T) {
	e := newEnv(t, nil)
	a := contract.Action{Op: contract.OpTyping, ChatID: "-1001112223334"}
	a.Metadata.ThreadID = "42"
	if r := e.act(t, "t1", a); !r.Success {
		t.Fatalf("typing %+v", r)
	}
	a.Metadata.ThreadID = "1"
	if r := e.act(t, "t1", a); !r.Success {
		t.Fatalf("typing in General %+v", r)
	}
	calls := e.fake.Calls("sendChatAction")
	if calls[0].Form["action"] != "typing" || calls[0].Form["message_thread_id"] != "42" || calls[1].Form["message_thread_id"] != "" {
		t.Errorf("sendChatAction %v / %v", calls[0].Form, calls[1].Form)
	}
}

func TestGetChatInfo(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.AddChat(-1001112223334, map[string]any{"id": -1001112223334, "type": "supergroup", "title": "Dev Forum", "is_forum": true})
	e.fake.AddChat(123456789, map[string]any{"id": 123456789, "type": "private", "first_name": "Ada", "last_name": "Lovelace"})
	for chat, want := range map[string]contract.ChatInfo{
		"-1001112223334": {Name: "Dev Forum", Type: "group"},
		"123456789":      {Name: "Ada Lovelace", Type: "dm"},
	} {
		r := e.act(t, "t1", contract.Action{Op: contract.OpGetChatInfo, ChatID: contract.ID(chat)})
		if !r.Success || r.ChatInfo == nil || *r.ChatInfo != want {
			t.Errorf("%s: %+v, want %+v", chat, r, want)
		}
	}
	r := e.act(t, "t1", contract.Action{Op: contract.OpGetChatInfo, ChatID: "987654321"})
	if r.Success || r.Code != contract.CodePlatformError || !strings.Contains(r.Error, "chat not found") {
		t.Errorf("unknown chat: %+v", r)
	}
}

func TestSendForbiddenAndMigrated(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 403, Description: "Forbidden: bot was blocked by the user"})
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 400, Description: "Bad Request: group chat was upgraded to a supergroup chat", MigrateToChatID: -1009999})
	if r := e.act(t, "t1", sendAction("123456789", "hi")); r.Code != contract.CodePlatformError || !strings.Contains(r.Error, "blocked by the user") {
		t.Errorf("forbidden: %+v", r)
	}
	if r := e.act(t, "t1", sendAction("-4001234567", "hi")); r.Code != contract.CodePlatformError || !strings.Contains(r.Error, "supergroup -1009999") {
		t.Errorf("migrated: %+v", r)
	}
}

// TestWindowsPaceSends shows the per-chat and per-group windows at work on
// the fake clock: a message waits for its slot, and one whose slot falls
// after the request's deadline is refused at once as rate_limited, with
// nothing sent.
func TestWindowsPaceSends(t *testing.T) {
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, func(c *Config) { c.ChatPerSecond = 1; c.GroupPerMinute = 2 })
	short := func(chat string) contract.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer cancel()
		a := sendAction(chat, "hi")
		return e.p.Execute(ctx, "t1", &a)
	}
	// The first send has the usual deadline: under the short one, a
	// machine slow enough to spend half a second before its slot is
	// checked (as a loaded one under -race may) would find its slot, now,
	// after that request's last one.
	if r := e.act(t, "t1", sendAction("123456789", "hi")); !r.Success {
		t.Fatalf("first send %+v", r)
	}
	// The DM's next slot is a second away, after this request's last slot
	// (its 1.5 s deadline less the 1 s kept for the call, less the time
	// gone since: the slower the machine, the further).
	if r := short("123456789"); r.Code != contract.CodeRateLimited || r.RetryAfterMS != 1000 {
		t.Errorf("second send within the second: %+v, want rate_limited for 1000 ms", r)
	}
	// Two messages into the group, the second a second after the first
	// (the chat's window), then the group's minute is full.
	start := clk.Now()
	for range 2 {
		if r := e.actDriven(t, clk, "t1", sendAction("-4001234567", "hi")); !r.Success {
			t.Fatalf("group send %+v", r)
		}
	}
	if waited := clk.Now().Sub(start); waited != time.Second {
		t.Errorf("two group sends took %v on the clock, want 1s (one message a second)", waited)
	}
	r := e.act(t, "t1", sendAction("-4001234567", "hi"))
	if r.Code != contract.CodeRateLimited || r.RetryAfterMS != 59_000 {
		t.Errorf("third group send within the minute: %+v, want rate_limited until the first one is a minute old (59000 ms)", r)
	}
	if n := len(e.fake.Calls("sendMessage")); n != 3 {
		t.Errorf("%d sendMessage calls, want 3", n)
	}
}

// TestFairShareBetweenTenants floods the global budget from t2 and checks,
// on the fake clock, that t1's messages are served alongside, not after,
// t2's backlog.
func TestFairShareBetweenTenants(t *testing.T) {
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, func(c *Config) { c.GlobalPerSecond = 20 })
	var finished atomic.Int64
	act := func(tenant, chat string) {
		go func() {
			defer finished.Add(1)
			if r := e.act(t, tenant, sendAction(chat, tenant)); !r.Success {
				t.Errorf("%s's send: %+v", tenant, r)
			}
		}()
	}
	waiting := func() int { return e.p.budget.Waiting("t1") + e.p.budget.Waiting("t2") }
	for range 40 {
		act("t2", "-1001234567890")
	}
	// t2's burst of 20 goes out; its backlog of 20 waits for budget.
	clk.Settle(t, 40, func() int { return int(finished.Load()) }, waiting)
	if n := e.p.budget.Waiting("t2"); n != 20 {
		t.Fatalf("%d of t2's sends wait for budget, want 20 (40 less the burst)", n)
	}
	for range 2 {
		act("t1", "123456789")
	}
	clk.Drive(t, 42, func() int { return int(finished.Load()) }, waiting)
	calls := e.fake.Calls("sendMessage")
	if len(calls) != 42 {
		t.Fatalf("%d sends, want 42", len(calls))
	}
	var quietAt []int
	for i, c := range calls {
		if c.Form["chat_id"] == "123456789" {
			quietAt = append(quietAt, i)
		}
	}
	// After t2's burst (0-19) the budget alternates: t2, t1, t2, t1, ...
	if !slices.Equal(quietAt, []int{21, 23}) {
		t.Errorf("t1's sends were at positions %v of 42, want [21 23]; a FIFO would put them last", quietAt)
	}
}

// actDriven is act for an action that waits on clk: it runs in its own
// goroutine while the test drives the clock.
func (e *env) actDriven(t *testing.T, clk *clocktest.Fake, tenant string, a contract.Action) contract.Result {
	t.Helper()
	var (
		r        contract.Result
		finished atomic.Int64
	)
	go func() {
		defer finished.Add(1)
		r = e.act(t, tenant, a)
	}()
	clk.Drive(t, 1, func() int { return int(finished.Load()) }, func() int { return e.p.budget.Waiting(tenant) })
	return r
}

// epoch starts the fake clocks.
var epoch = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

// countingMetrics counts what the tests look at.
type countingMetrics struct {
	limited atomic.Int64
	mu      sync.Mutex
	dropped map[string]int
}

func (m *countingMetrics) RateLimitWait(string, time.Duration) {}
func (m *countingMetrics) RateLimited(string)                  { m.limited.Add(1) }
func (m *countingMetrics) Dropped(_, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dropped == nil {
		m.dropped = map[string]int{}
	}
	m.dropped[reason]++
}

// TestEgressWhileTelegramIsDown: with the Bot API unreachable, every op
// answers the retryable "unavailable" (not platform_error), and the text
// names neither the Bot API server's address nor the request URL.
func TestEgressWhileTelegramIsDown(t *testing.T) {
	down := refusedtest.URL(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(down, "http://"))
	e := newEnv(t, func(c *Config) { c.APIServerURL = down })
	for _, a := range []contract.Action{
		sendAction("123456789", "hi"),
		{Op: contract.OpEdit, ChatID: "123456789", MessageID: "7", Content: "x"},
		{Op: contract.OpTyping, ChatID: "123456789"},
		{Op: contract.OpGetChatInfo, ChatID: "123456789"},
	} {
		r := e.act(t, "t1", a)
		if r.Success || r.Code != contract.CodeUnavailable {
			t.Fatalf("%s while Telegram is down = %+v, want code unavailable", a.Op, r)
		}
		for _, leak := range []string{"127.0.0.1", port, "http", "/bot", "sendMessage", "dial"} {
			if strings.Contains(r.Error, leak) {
				t.Fatalf("%s: error %q leaks %q", a.Op, r.Error, leak)
			}
		}
	}
}

// squeeze drops whitespace and backticks, what splitting may drop or add.
func squeeze(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || r == '`' {
			return -1
		}
		return r
	}, s)
}

// TestSendWaitingWhileItsChatIsRebound: t2's send into its group waits
// for its share of the bot's budget, and meanwhile the group is bound to
// t1. The send is declined and nothing is posted into the group, now
// t1's. It was authorized once, before the wait, and was posted as t2's
// into t1's group.
func TestSendWaitingWhileItsChatIsRebound(t *testing.T) {
	clk := clocktest.New(epoch)
	e := newEnvDeps(t, platform.Deps{Clock: clk}, func(c *Config) { c.GlobalPerSecond = 1 })
	const group = telegramtest.ChatT2
	send := contract.Action{Op: contract.OpSend, ChatID: group, Content: "hello"}
	if r := e.act(t, "t2", send); !r.Success {
		t.Fatalf("the first send: %+v", r)
	}
	var (
		second   contract.Result
		finished atomic.Int64
	)
	go func() {
		defer finished.Add(1)
		second = e.act(t, "t2", send)
	}()
	done := func() int { return int(finished.Load()) }
	waiting := func() int { return e.p.budget.Waiting("t2") }
	clk.Settle(t, 1, done, waiting)
	if waiting() != 1 {
		t.Fatal("the second send does not wait for the budget")
	}
	if err := e.p.Bind([]platform.Binding{{Kind: platform.BindChat, ID: group, Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	clk.Drive(t, 1, done, waiting)
	if second.Code != contract.CodeEgressDeclined {
		t.Errorf("the send after the rebind: %+v, want declined", second)
	}
	if n := len(e.fake.Calls("sendMessage")); n != 1 {
		t.Fatalf("%d messages sent, want the first alone", n)
	}
}
