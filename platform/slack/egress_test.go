package slack

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/descriptor"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/slack/slacktest"
	"connector/store"
	"connector/vault"
)

// TestSendPostsIntoTheThread: send reaches chat.postMessage in the chat
// and the thread metadata names, as mrkdwn, with the message's ts as the
// result; a long reply is split at 39,000 characters.
func TestSendPostsIntoTheThread(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"**done**, see [docs](https://x.example/d)","reply_to":null,
		"metadata":{"thread_id":"1768490100.000100","scope_id":"T0AAA00001"}}`)
	if !r.Success || r.MessageID == "" {
		t.Fatalf("%+v", r)
	}
	c := e.lastCall(t, "chat.postMessage")
	if c.Team != teamA.ID || c.Form.Get("channel") != chanGeneral || c.Form.Get("thread_ts") != "1768490100.000100" ||
		c.Form.Get("text") != "*done*, see <https://x.example/d|docs>" {
		t.Fatalf("call %+v", c)
	}
	long := strings.Repeat("word ", 9000) // 45,000 characters
	r = e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"`+long+`","metadata":{}}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	msgs := e.fake.Messages(chanGeneral)
	if len(msgs) != 3 || len([]rune(msgs[1].Text)) > maxMessageRunes || msgs[1].TS != r.MessageID {
		t.Fatalf("%d messages, the long one's first part %d characters, result %+v", len(msgs), len([]rune(msgs[1].Text)), r)
	}
	// reply_in_thread false: a top-level message's synthetic thread (its
	// own ts, echoed as reply_to) gets a flat reply.
	f := newEnv(t, func(c *Config) { c.Tenants["t1"] = TenantConfig{ReplyInThread: new(false)} }, nil)
	if r := f.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"flat","reply_to":"1768490100.000100","metadata":{"thread_id":"1768490100.000100"}}`); !r.Success {
		t.Fatalf("%+v", r)
	}
	if c := f.lastCall(t, "chat.postMessage"); c.Form.Has("thread_ts") {
		t.Fatalf("flat reply went into thread %s", c.Form.Get("thread_ts"))
	}
}

// TestSharedChannelActsWithTheTenantsOwnToken: in a Slack Connect
// channel shared by A (t1's) and B (t2's), each tenant acts with its own
// workspace's token, even when the gateway names the other workspace
// (an inbound's scope_id is its author's workspace, so a reply to one of
// t1's users echoes A): t2 never edits, deletes or posts through t1's
// installation (whose bot's messages there are t1's replies).
func TestSharedChannelActsWithTheTenantsOwnToken(t *testing.T) {
	const shared = "C0SHR00001"
	fake := newFake(t)
	for _, team := range []string{teamA.ID, teamB.ID} {
		fake.AddChannel(team, slacktest.Channel{ID: shared, Name: "partners", SharedTeams: []string{teamA.ID, teamB.ID}})
	}
	e := newEnvOn(t, fake, nil, nil)
	e.p.seenIn(shared, teamA.ID) // events of the channel came to both installations
	e.p.seenIn(shared, teamB.ID)
	for _, c := range []struct{ tenant, hint, want string }{
		{"t2", teamA.ID, teamB.ID}, {"t1", teamB.ID, teamA.ID}, {"t2", teamB.ID, teamB.ID}, {"t2", "", teamB.ID},
	} {
		r := e.execute(t, c.tenant, `{"op":"edit","chat_id":"`+shared+`","message_id":"1768490100.000100","content":"x","metadata":{"scope_id":"`+c.hint+`"}}`)
		if call := e.lastCall(t, "chat.update"); call.Team != c.want {
			t.Errorf("%s naming %q edited with %s's token (%+v)", c.tenant, c.hint, call.Team, r)
		}
	}
}

// TestManySpansConvertedInTime: a send's markdown is converted in work
// proportional to its length, however many spans it stashes (code, links,
// entities): each stashed span used to be put back with a pass over the
// whole text, so one gateway's 160 KB of inline code took 17 s of CPU
// (a 1 MiB frame, minutes) and ran past the op's deadline. The work is
// counted in bytes allocated, the same on any machine however loaded: 10,000
// spans allocate under a thousand times their text (about 80 times; a
// pass per span, 10,000 times). The send of those spans is posted, its
// spans as they were. (It sent 40,000, to show the deadline held; the
// allocation count shows that now, and under the race detector on a loaded
// machine converting 40,000 took over the op's 10 s.)
func TestManySpansConvertedInTime(t *testing.T) {
	content := strings.Repeat("`a` ", 10_000)
	if n := allocated(func() { mrkdwnParts(content) }); n > 1000*uint64(len(content)) {
		t.Fatalf("converting %d bytes allocated %d bytes: more than linear", len(content), n)
	}
	e := newEnv(t, nil, nil)
	r := e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"`+content+`","metadata":{}}`)
	if !r.Success {
		t.Fatalf("%+v", r)
	}
	var posted strings.Builder
	for _, c := range e.fake.Calls("chat.postMessage") {
		posted.WriteString(c.Form.Get("text"))
	}
	if got := strings.Count(posted.String(), "`a`"); got != 10_000 {
		t.Fatalf("%d code spans posted, want 10000", got)
	}
}

// TestEgressDeclinesOtherTenantsChats: a chat of another tenant's
// workspace and a channel bound to another tenant get the uniform decline
// and call nothing.
func TestEgressDeclinesOtherTenantsChats(t *testing.T) {
	e := newEnv(t, nil, nil)
	// The instance has seen the channels it is asked about.
	e.p.seenIn(chanGeneral, teamA.ID)
	e.p.seenIn(chanAcme, teamB.ID)
	before := len(e.fake.Calls("chat.postMessage"))
	for _, c := range []struct{ tenant, chat string }{
		{"t2", chanGeneral}, {"t1", chanAcme}, {"t1", chanOps}, {"t2", "C0NOWHERE1"},
	} {
		r := e.execute(t, c.tenant, `{"op":"send","chat_id":"`+c.chat+`","content":"x","metadata":{"scope_id":"T0AAA00001"}}`)
		if r.Code != contract.CodeEgressDeclined || r.Error != contract.Declined("slack").Error {
			t.Errorf("%s in %s: %+v", c.tenant, c.chat, r)
		}
	}
	// A chat_id that is no Slack conversation id is bad_request, as on
	// every platform (platform.Execute).
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"general","content":"x","metadata":{}}`); r.Code != contract.CodeBadRequest {
		t.Errorf("a channel name as chat_id: %+v", r)
	}
	if n := len(e.fake.Calls("chat.postMessage")); n != before {
		t.Fatalf("a declined send posted %d messages", n-before)
	}
	// The bound channel's own tenant may act there, with its workspace's token.
	if r := e.execute(t, "t3", `{"op":"send","chat_id":"C0OPS00002","content":"ok","metadata":{}}`); !r.Success {
		t.Fatalf("t3 in its bound channel: %+v", r)
	}
	if c := e.lastCall(t, "chat.postMessage"); c.Team != teamA.ID {
		t.Fatalf("posted with %s's token", c.Team)
	}
}

// TestEditDeleteReact: chat.update, chat.delete (a message already gone
// is deleted), reactions by name.
func TestEditDeleteReact(t *testing.T) {
	e := newEnv(t, nil, nil)
	sent := e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"first","metadata":{}}`)
	if r := e.execute(t, "t1", `{"op":"edit","chat_id":"C0GEN00001","message_id":"`+sent.MessageID+`","content":"_second_"}`); !r.Success || r.MessageID != sent.MessageID {
		t.Fatalf("edit %+v", r)
	}
	if m := e.fake.Messages(chanGeneral); m[0].Text != "_second_" {
		t.Fatalf("edited text %q", m[0].Text)
	}
	for _, emoji := range []string{"👀", "✅", ":tada:", "thumbsup"} {
		if r := e.execute(t, "t1", `{"op":"react","chat_id":"C0GEN00001","message_id":"`+sent.MessageID+`","emoji":"`+emoji+`"}`); !r.Success {
			t.Fatalf("react %s: %+v", emoji, r)
		}
	}
	names := []string{}
	for _, c := range e.fake.Calls("reactions.add") {
		names = append(names, c.Form.Get("name"))
	}
	if strings.Join(names, ",") != "eyes,white_check_mark,tada,thumbsup" {
		t.Fatalf("reaction names %v", names)
	}
	if r := e.execute(t, "t1", `{"op":"react","chat_id":"C0GEN00001","message_id":"`+sent.MessageID+`","emoji":"👀","remove":true}`); !r.Success {
		t.Fatalf("unreact %+v", r)
	}
	if r := e.execute(t, "t1", `{"op":"react","chat_id":"C0GEN00001","message_id":"`+sent.MessageID+`","emoji":"🫠"}`); r.Code != contract.CodeBadRequest {
		t.Fatalf("an emoji Slack cannot name: %+v", r)
	}
	for range 2 {
		if r := e.execute(t, "t1", `{"op":"delete","chat_id":"C0GEN00001","message_id":"`+sent.MessageID+`"}`); !r.Success {
			t.Fatalf("delete %+v", r)
		}
	}
	for _, op := range []string{"edit", "delete", "react"} {
		if r := e.execute(t, "t1", `{"op":"`+op+`","chat_id":"C0GEN00001","message_id":"callback:9","content":"x","emoji":"👀"}`); r.Code != contract.CodeBadRequest {
			t.Fatalf("%s of a message_id that is no ts: %+v", op, r)
		}
	}
}

// TestThreadsTypingChatInfo: thread_create is a reply thread (a seed
// message's ts, or message_id's own), thread_rename is unsupported,
// typing is the assistant status of the thread, get_chat_info reads
// conversations.info.
func TestThreadsTypingChatInfo(t *testing.T) {
	e := newEnv(t, nil, nil)
	r := e.execute(t, "t1", `{"op":"thread_create","chat_id":"C0GEN00001","thread_name":"Deploy plan"}`)
	if !r.Success || r.ThreadID == "" || r.ThreadID != r.MessageID {
		t.Fatalf("thread_create %+v", r)
	}
	if m := e.fake.Messages(chanGeneral); len(m) != 1 || m[0].Text != ":thread: Hermes handoff — *Deploy plan*" {
		t.Fatalf("seed %+v", m)
	}
	if r := e.execute(t, "t1", `{"op":"thread_create","chat_id":"C0GEN00001","thread_name":"x","message_id":"1768490100.000100"}`); r.ThreadID != "1768490100.000100" {
		t.Fatalf("thread of a message %+v", r)
	}
	if r := e.execute(t, "t1", `{"op":"thread_rename","chat_id":"C0GEN00001","message_id":"1768490100.000100","thread_name":"y","only_if_connector_created":true}`); r.Code != contract.CodeUnsupportedOp {
		t.Fatalf("thread_rename %+v", r)
	}
	for _, c := range []struct{ action, status string }{
		{`{"op":"typing","chat_id":"C0GEN00001","metadata":{"thread_id":"1768490100.000100"}}`, "is thinking..."},
		{`{"op":"typing","chat_id":"C0GEN00001","content":"Running: web_search…","metadata":{"thread_id":"1768490100.000100"}}`, "Running: web_search…"},
		{`{"op":"typing","chat_id":"C0GEN00001","content":"","metadata":{"thread_id":"1768490100.000100"}}`, ""},
	} {
		if r := e.execute(t, "t1", c.action); !r.Success {
			t.Fatalf("typing %+v", r)
		}
		call := e.lastCall(t, "assistant.threads.setStatus")
		if call.Form.Get("status") != c.status || call.Form.Get("thread_ts") != "1768490100.000100" || call.Form.Get("channel_id") != chanGeneral {
			t.Fatalf("setStatus %v, want status %q", call.Form, c.status)
		}
	}
	n := len(e.fake.Calls("assistant.threads.setStatus"))
	if r := e.execute(t, "t1", `{"op":"typing","chat_id":"C0GEN00001","metadata":{}}`); !r.Success || len(e.fake.Calls("assistant.threads.setStatus")) != n {
		t.Fatalf("typing without a thread %+v", r)
	}
	if r := e.execute(t, "t1", `{"op":"get_chat_info","chat_id":"C0GEN00001"}`); r.ChatInfo == nil || *r.ChatInfo != (contract.ChatInfo{Name: "general", Type: "group"}) {
		t.Fatalf("get_chat_info %+v", r)
	}
	if r := e.execute(t, "t1", `{"op":"get_chat_info","chat_id":"D0ADA00001"}`); r.ChatInfo == nil || *r.ChatInfo != (contract.ChatInfo{Name: "Ada", Type: "dm"}) {
		t.Fatalf("get_chat_info of a DM %+v", r)
	}
}

// TestDescriptorSaysWhatWorks: the ops advertised are the table's; without
// the assistant feature, typing and draft are not advertised.
func TestDescriptorSaysWhatWorks(t *testing.T) {
	e := newEnv(t, nil, nil)
	d := e.p.Descriptor()
	want := "delete,draft,edit,follow_up,get_chat_info,prompt,react,send,send_media,thread_create,typing"
	if strings.Join(d.SupportedOps, ",") != want || !d.SupportsEdit || !d.SupportsThreads || !d.SupportsDraftStreaming ||
		d.MaxMessageLength != 39000 || d.MarkdownDialect != "markdown" || d.Platform != "slack" {
		t.Fatalf("%+v", d)
	}
	f := newEnv(t, func(c *Config) { c.Assistant = new(false) }, nil)
	if d := f.p.Descriptor(); d.HasOp("typing") || d.HasOp("draft") || d.SupportsDraftStreaming {
		t.Fatalf("without the assistant feature: %+v", d)
	}
	if r := f.execute(t, "t1", `{"op":"typing","chat_id":"C0GEN00001","metadata":{}}`); r.Code != contract.CodeUnsupportedOp {
		t.Fatalf("typing %+v", r)
	}
}

// TestRateLimitedCallWaitsRetryAfter: a 429 pauses the method in the
// workspace for Retry-After (on the platform's clock) and the call is
// made again: the message goes out once.
func TestRateLimitedCallWaitsRetryAfter(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	e.fake.Fail429("chat.postMessage", 1, 2*time.Second)
	done := make(chan contract.Result, 1)
	go func() {
		done <- e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"patient","metadata":{}}`)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := e.fake.WaitCalls(ctx, "chat.postMessage", 1); err != nil {
		t.Fatal(err)
	}
	// The sender is parked once the 429 is handled: asleep on the
	// channel's pace (held for the Retry-After) or queued on the paused
	// budget. Not the number of timers: the request's own deadline is one
	// before the 429 is even read.
	budget := e.p.limits.budget(teamA.ID, "chat.postMessage")
	parked := func() bool { return clk.Sleepers()+budget.Waiting("t1") == 1 }
	platformtest.WaitUntil(t, "the send parked on the clock for Retry-After", parked)
	select {
	case r := <-done:
		t.Fatalf("answered %+v before Retry-After passed", r)
	default:
	}
	clk.Advance(2 * time.Second)
	// The paused budget refills its first token 100 ms (at 600 a minute)
	// after the pause.
	platformtest.WaitUntil(t, "the send parked on the refilling budget", parked)
	clk.Advance(100 * time.Millisecond)
	select {
	case r := <-done:
		if !r.Success {
			t.Fatalf("%+v", r)
		}
	case <-time.After(waitFor):
		t.Fatal("the send did not go out after Retry-After")
	}
	if n := len(e.fake.Messages(chanGeneral)); n != 1 {
		t.Fatalf("%d messages", n)
	}
	// A Retry-After past the deadline answers rate_limited at once.
	clk.Advance(5 * time.Second) // the budget refills
	e.fake.Fail429("chat.postMessage", 1, time.Minute)
	a, _ := contract.DecodeAction([]byte(`{"op":"send","chat_id":"C0GEN00001","content":"late","metadata":{}}`))
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	if r := e.p.Execute(dctx, "t1", &a); r.Code != contract.CodeRateLimited || r.RetryAfterMS < 59_000 {
		t.Fatalf("%+v", r)
	}
}

// allocated is how many bytes f allocates (with whatever else runs
// meanwhile: nothing, in these tests outside an env).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// standingTimers are the timers a running platform always keeps on its
// clock: the intake's renew and sweep tickers.
const standingTimers = 2

// TestUnreachableSlack: egress while Slack is down answers unavailable
// naming no address.
func TestUnreachableSlack(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.fake.Close()
	r := e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"x","metadata":{"scope_id":"T0AAA00001"}}`)
	if r.Code != contract.CodeUnavailable || strings.Contains(r.Error, "127.0.0.1") {
		t.Fatalf("%+v", r)
	}
}

// otherChats is another platform whose chats owners places.
type otherChats struct{ owners map[string]string }

func (o *otherChats) Name() string                                   { return "other" }
func (o *otherChats) Descriptor() descriptor.Descriptor              { return descriptor.Descriptor{} }
func (o *otherChats) Run(ctx context.Context, _ platform.Sink) error { <-ctx.Done(); return nil }
func (o *otherChats) Status() platform.Status                        { return platform.Status{Ready: true} }
func (o *otherChats) Execute(context.Context, string, *contract.Action) contract.Result {
	return contract.OK("")
}
func (o *otherChats) ChatTenant(_ context.Context, chat string) (string, error) {
	if t, ok := o.owners[chat]; ok {
		return t, nil
	}
	return "", platform.ErrUnknownChat
}

// TestLocateDoesNotProbeForAnotherPlatformsChat: an action that names no
// platform, for a chat another platform places whose id looks like a
// Slack channel's, costs no conversations.info (Slack answers
// platform.ErrWouldWait when it may not wait); a chat no other platform
// places is still looked up in the asker's workspace, once, whosever it is.
func TestLocateDoesNotProbeForAnotherPlatformsChat(t *testing.T) {
	e := newEnv(t, nil, nil)
	lookups := func() int { return len(e.fake.Calls("conversations.info")) }
	other := &otherChats{owners: map[string]string{"C0FFEE": "t2"}}
	ps := []platform.Platform{e.p, other}
	if found, _, err := platform.Locate(t.Context(), ps, "t2", "C0FFEE"); err != nil || found != other {
		t.Fatalf("Locate of the other platform's chat = %v, %v; want the other platform", found, err)
	}
	if n := lookups(); n != 0 {
		t.Fatalf("Locate of the other platform's chat made %d conversations.info calls, want 0", n)
	}
	for _, chat := range []string{chanGeneral, "C0NOWHERE1"} {
		before := lookups()
		if _, _, err := platform.Locate(t.Context(), ps, "t2", chat); !errors.Is(err, platform.ErrUnknownChat) {
			t.Fatalf("Locate of %s for t2 = %v; want ErrUnknownChat", chat, err)
		}
		if n := lookups() - before; n != 1 {
			t.Errorf("Locate of %s for t2: %d lookups, want 1", chat, n)
		}
	}
}

// TestDeclineDoesNotRevealExistence: what a tenant is declined costs the
// same whatever the chat is: another tenant's channel this instance has
// seen, a channel bound to another tenant, or one that does not exist
// each cost one conversations.info in the asker's workspace on the first
// ask, none on a repeat within 30 s, one again after; and a Slack
// Connect channel seen in another tenant's workspace that is also in the
// asker's is the asker's.
func TestDeclineDoesNotRevealExistence(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, nil, &platform.Deps{Clock: clk})
	e.p.seenIn(chanGeneral, teamA.ID)
	lookups := func() int { return len(e.fake.Calls("conversations.info")) }
	ask := func(chat string) {
		t.Helper()
		r := e.execute(t, "t2", `{"op":"send","chat_id":"`+chat+`","content":"x","metadata":{}}`)
		if r.Code != contract.CodeEgressDeclined || r.Error != contract.Declined("slack").Error {
			t.Fatalf("t2 in %s: %+v", chat, r)
		}
	}
	for _, chat := range []string{chanGeneral, chanOps, "C0NOWHERE1"} {
		before := lookups()
		ask(chat)
		if n := lookups() - before; n != 1 {
			t.Errorf("first ask of %s: %d lookups, want 1", chat, n)
		}
		ask(chat)
		if n := lookups() - before; n != 1 {
			t.Errorf("repeated ask of %s: %d lookups in all, want 1", chat, n)
		}
	}
	clk.Advance(declineMemory)
	for _, chat := range []string{chanGeneral, chanOps, "C0NOWHERE1"} {
		before := lookups()
		ask(chat)
		if n := lookups() - before; n != 1 {
			t.Errorf("ask of %s after %v: %d lookups, want 1", chat, declineMemory, n)
		}
	}
	// A shared channel: seen in workspace A, also in B.
	e.fake.AddChannel(teamB.ID, slacktest.Channel{ID: "C0SHARED01", Name: "shared"})
	e.fake.AddChannel(teamA.ID, slacktest.Channel{ID: "C0SHARED01", Name: "shared"})
	e.p.seenIn("C0SHARED01", teamA.ID)
	if r := e.execute(t, "t2", `{"op":"send","chat_id":"C0SHARED01","content":"x","metadata":{}}`); !r.Success {
		t.Fatalf("t2 in a channel shared with its workspace: %+v", r)
	}
	if c := e.lastCall(t, "chat.postMessage"); c.Team != teamB.ID {
		t.Fatalf("posted with %s's token", c.Team)
	}
}

// TestSendWaitingWhileItsChatIsRebound: t1's second send into its channel
// waits for the channel's pace (one message a second), and meanwhile the
// channel is bound to t2. The send is declined and nothing is posted into
// the channel, now t2's. It was authorized once, before the wait, and was
// posted as t1's into t2's channel.
func TestSendWaitingWhileItsChatIsRebound(t *testing.T) {
	clk := clocktest.New(time.Now())
	e := newEnv(t, func(c *Config) { c.ChannelPerSecond = 1 }, &platform.Deps{Clock: clk})
	e.p.seenIn(chanGeneral, teamA.ID)
	const send = `{"op":"send","chat_id":"C0GEN00001","content":"hello","metadata":{"scope_id":"T0AAA00001"}}`
	if r := e.execute(t, "t1", send); !r.Success {
		t.Fatalf("the first send: %+v", r)
	}
	var (
		second   contract.Result
		finished atomic.Int64
	)
	go func() {
		defer finished.Add(1)
		second = e.execute(t, "t1", send)
	}()
	done := func() int { return int(finished.Load()) }
	none := func() int { return 0 }
	clk.Settle(t, 1, done, none)
	if done() != 0 {
		t.Fatalf("the second send did not wait for the channel's pace: %+v", second)
	}
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t1"}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
		{Kind: platform.BindChannel, ID: chanGeneral, Tenant: "t2"},
	}); err != nil {
		t.Fatal(err)
	}
	clk.Drive(t, 1, done, none)
	if second.Code != contract.CodeEgressDeclined {
		t.Errorf("the send after the rebind: %+v, want declined", second)
	}
	if n := len(e.fake.Calls("chat.postMessage")); n != 1 {
		t.Fatalf("%d messages posted, want the first alone", n)
	}
}

// TestSendThatDidNotWaitIsNotAskedAgain: a send whose call did not wait
// reads the store as often as its Authorize alone (the channel's grants,
// held by none: a read each). Before, its call asked again as its turn
// came, one more store round trip on every call.
func TestSendThatDidNotWaitIsNotAskedAgain(t *testing.T) {
	clk := clocktest.New(time.Now())
	st := store.NewMemory(clk)
	t.Cleanup(func() { _ = st.Close() })
	caps := &countingCaps{Capabilities: st.Capabilities()}
	e := newEnv(t, nil, &platform.Deps{Clock: clk, Store: st, Vault: vault.NewDurable(caps, vault.Config{Clock: clk})})
	e.p.seenIn(chanGeneral, teamA.ID)
	if _, ok := platform.Authorize(platform.WithTenant(context.Background(), "t1"), e.p, "t1", chanGeneral); !ok {
		t.Fatal("t1 may not act in its channel")
	}
	authorize := caps.gets.Swap(0)
	if authorize == 0 {
		t.Fatal("Authorize read nothing from the store")
	}
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"C0GEN00001","content":"hello","metadata":{"scope_id":"T0AAA00001"}}`); !r.Success {
		t.Fatalf("the send: %+v", r)
	}
	if n := caps.gets.Load(); n != authorize {
		t.Errorf("the send read the store %d times, want %d (its Authorize's)", n, authorize)
	}
}

// countingCaps counts the reads of its capabilities.
type countingCaps struct {
	store.Capabilities
	gets atomic.Int64
}

func (c *countingCaps) Get(ctx context.Context, key string) ([]byte, bool, error) {
	c.gets.Add(1)
	return c.Capabilities.Get(ctx, key)
}

// TestOneTokenPlacesNoChannelInAnotherWorkspace: without slack.client_id
// bot_token (A's) answers for B too, which has no install of its own, so
// its conversations.info "in B" finds A's channels. t2, bound to B, sends
// into t1's #general: egress_declined, nothing posted, and the channel
// stays A's alone. Before, the answer placed #general in B, so t2 owned it
// and posted there.
func TestOneTokenPlacesNoChannelInAnotherWorkspace(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, nil)
	before := len(e.fake.Calls("chat.postMessage"))
	if r := e.execute(t, "t2", `{"op":"send","chat_id":"`+chanGeneral+`","content":"x","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 in t1's channel: %+v, want egress_declined", r)
	}
	if n := len(e.fake.Calls("chat.postMessage")); n != before {
		t.Fatalf("%d messages posted, want none", n-before)
	}
	if teams := e.p.channelTeams(chanGeneral); !slices.Equal(teams, []string{teamA.ID}) {
		t.Fatalf("#general placed in %v, want A alone", teams)
	}
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"`+chanGeneral+`","content":"x","metadata":{}}`); !r.Success {
		t.Fatalf("t1 in its channel: %+v", r)
	}
}

// TestOneTokenPlacesAnOrgSharedChannelInItsWorkspaces: an Enterprise Grid
// channel shared to workspaces A and B of its org names both in
// conversations.info's internal_team_ids, so bot_token's answer places it
// in B too: t2, bound to B, sends there (on a grant: A is t1's). Before,
// only the token's workspace and the Slack Connect fields counted, and t2
// was declined its own workspace's channel.
func TestOneTokenPlacesAnOrgSharedChannelInItsWorkspaces(t *testing.T) {
	const orgChan = "C0ORG00001"
	fake := newFake(t)
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: orgChan, Name: "all-hands", OrgTeams: []string{teamA.ID, teamB.ID}})
	e := newEnvOn(t, fake, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, nil)
	if r := e.execute(t, "t2", `{"op":"send","chat_id":"`+orgChan+`","content":"x","metadata":{}}`); !r.Success {
		t.Fatalf("t2 in the org channel shared to B: %+v, want it sent", r)
	}
	if teams := e.p.channelTeams(orgChan); !slices.Contains(teams, teamB.ID) {
		t.Fatalf("the org channel placed in %v, want B among them", teams)
	}
}

// TestOneTokenPlacesAChannelWhereTheAnswerSaysItIs: an Enterprise Grid
// org-wide bot_token whose auth.test names workspace A reaches the
// channels of every workspace of its org; conversations.info of one in
// B names B (context_team_id). The channel is B's alone: t2 sends there,
// t1 (bound to A) is declined. Before, the token's own workspace was
// counted too, so every channel of the org was also t1's.
func TestOneTokenPlacesAChannelWhereTheAnswerSaysItIs(t *testing.T) {
	const orgChan = "C0ORG00002"
	fake := newFake(t)
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: orgChan, Name: "b-team", Context: teamB.ID})
	e := newEnvOn(t, fake, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, nil)
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"`+orgChan+`","content":"x","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1 in B's channel: %+v, want egress_declined", r)
	}
	if teams := e.p.channelTeams(orgChan); !slices.Equal(teams, []string{teamB.ID}) {
		t.Fatalf("B's channel placed in %v, want B alone", teams)
	}
	if r := e.execute(t, "t2", `{"op":"send","chat_id":"`+orgChan+`","content":"x","metadata":{}}`); !r.Success {
		t.Fatalf("t2 in its channel: %+v", r)
	}
}

// TestOneTokenPlacesAChannelItsAnswerDoesNotPlaceInItsOwnWorkspace: a
// conversations.info answer that names no workspace (no context_team_id)
// places the channel in the workspace of the token that answered: t1
// sends into its channel, t2 (asking in B with A's token) is declined.
func TestOneTokenPlacesAChannelItsAnswerDoesNotPlaceInItsOwnWorkspace(t *testing.T) {
	const quiet = "C0QUIET001"
	fake := newFake(t)
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: quiet, Name: "quiet", NoContext: true})
	e := newEnvOn(t, fake, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, nil)
	if r := e.execute(t, "t2", `{"op":"send","chat_id":"`+quiet+`","content":"x","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t2 in A's channel: %+v, want egress_declined", r)
	}
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"`+quiet+`","content":"x","metadata":{}}`); !r.Success {
		t.Fatalf("t1 in its channel: %+v", r)
	}
}

// TestOneTokenPlacesNoChannelByItsOrgAlone: an Enterprise Grid org-wide
// bot_token (auth.test names A) answers conversations.info of a channel
// with its org's id alone (context_team_id E..., no internal_team_ids):
// the answer says which org, not which workspace, so the channel is placed
// nowhere and t1 (bound to A) is declined. Before, an answer naming no
// workspace placed it in the token's own, A, and t1 posted into a channel
// of another workspace of the org.
func TestOneTokenPlacesNoChannelByItsOrgAlone(t *testing.T) {
	const orgChan = "C0ORG00003"
	fake := newFake(t)
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: orgChan, Name: "org-wide", Context: "E0ORG00001"})
	e := newEnvOn(t, fake, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, nil)
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"`+orgChan+`","content":"x","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1 in a channel only its org is named for: %+v, want egress_declined", r)
	}
	if teams := e.p.channelTeams(orgChan); len(teams) != 0 {
		t.Fatalf("the channel placed in %v, want nowhere", teams)
	}
}

// TestSharedChannelRecordsItsUnboundWorkspacesBounded: a Slack Connect
// channel shared with 300 workspaces bound to no tenant, and with A and B
// (bound to t1 and t2): conversations.info names them all, and the channel
// keeps A, B and maxUnboundTeams of the others. Before, every workspace
// named was kept, for each of up to chanTeamsSize channels.
func TestSharedChannelRecordsItsUnboundWorkspacesBounded(t *testing.T) {
	const wide = "C0WIDE0001"
	shared := []string{teamA.ID}
	for i := range 300 {
		shared = append(shared, fmt.Sprintf("T0X%07d", i))
	}
	shared = append(shared, teamB.ID)
	fake := newFake(t)
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: wide, Name: "wide", SharedTeams: shared})
	e := newEnvOn(t, fake, nil, nil)
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"`+wide+`","content":"x","metadata":{}}`); !r.Success {
		t.Fatalf("t1 in its shared channel: %+v", r)
	}
	teams := e.p.channelTeams(wide)
	if len(teams) > maxUnboundTeams+2 || !slices.Contains(teams, teamA.ID) || !slices.Contains(teams, teamB.ID) {
		t.Fatalf("the channel placed in %d workspaces (%v), want A, B and at most %d others", len(teams), teams, maxUnboundTeams)
	}
}

// TestOneTokenForgetsAWorkspaceAChannelLeft: with one bot_token an event
// once showed a channel in A (shared then), and t1 (bound to A) sends
// there; the channel is now B's alone (conversations.info names B). A day
// after it was last seen in A, t1 is declined. Before, a channel stayed in
// every workspace it was once seen in until evicted, and t1 kept posting
// into B's channel.
func TestOneTokenForgetsAWorkspaceAChannelLeft(t *testing.T) {
	const left = "C0LEFT0001"
	clk := clocktest.New(time.Now())
	fake := newFake(t)
	fake.AddChannel(teamA.ID, slacktest.Channel{ID: left, Name: "left", Context: teamB.ID})
	e := newEnvOn(t, fake, func(c *Config) { c.ClientID, c.ClientSecret = "", "" }, &platform.Deps{Clock: clk})
	e.p.seenIn(left, teamA.ID) // an event of A's there, while it was shared
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"`+left+`","content":"x","metadata":{}}`); !r.Success {
		t.Fatalf("t1 in a channel seen in A: %+v", r)
	}
	clk.Advance(seenFor)
	if r := e.execute(t, "t1", `{"op":"send","chat_id":"`+left+`","content":"x","metadata":{}}`); r.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1 in the channel a day after it was last seen in A: %+v, want egress_declined", r)
	}
	if teams := e.p.channelTeams(left); !slices.Equal(teams, []string{teamB.ID}) {
		t.Fatalf("the channel placed in %v, want B alone", teams)
	}
}

// TestRebindKeepsTheEarlierHoldersOldAnswers: workspace A's binding goes
// from t1 to t3 a day and more after t1 answered in its channel, when the
// record of t1's answer has expired (vault.ChatGrantTTL). t1's answer, its
// ts older than the binding (Binding.Since), is not t3's to edit or
// delete; t3 edits its own answer. Before, a message with no record
// counted as the holder's, whenever it was posted.
func TestRebindKeepsTheEarlierHoldersOldAnswers(t *testing.T) {
	clk := clocktest.New(time.Unix(1768490000, 0).Add(time.Hour))
	e := newEnv(t, nil, &platform.Deps{Clock: clk, Vault: vault.NewMemory(vault.Config{Clock: clk})})
	e.p.seenIn(chanGeneral, teamA.ID)
	act := func(tenant, a string) contract.Result {
		t.Helper()
		return e.execute(t, tenant, `{"chat_id":"C0GEN00001","metadata":{"scope_id":"T0AAA00001"},`+a+`}`)
	}
	theirs := act("t1", `"op":"send","content":"t1's answer"`)
	if !theirs.Success {
		t.Fatalf("t1's send: %+v", theirs)
	}
	clk.Advance(vault.ChatGrantTTL + time.Hour) // the record of t1's answer has expired
	e.p.seenIn(chanGeneral, teamA.ID)
	if err := e.p.Bind([]platform.Binding{
		{Kind: platform.BindTeam, ID: teamA.ID, Tenant: "t3", Since: clk.Now()}, {Kind: platform.BindTeam, ID: teamB.ID, Tenant: "t2"},
	}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{
		`"op":"edit","message_id":"` + theirs.MessageID + `","content":"hijacked"`,
		`"op":"delete","message_id":"` + theirs.MessageID + `"`,
	} {
		if r := act("t3", a); r.Code != contract.CodeEgressDeclined {
			t.Errorf("t3's %s after the workspace was bound to it = %+v, want the decline", a, r)
		}
	}
	if n := len(e.fake.Calls("chat.update")) + len(e.fake.Calls("chat.delete")); n != 0 {
		t.Errorf("%d of t3's calls reached Slack", n)
	}
	mine := act("t3", `"op":"send","content":"t3's answer"`)
	if !mine.Success {
		t.Fatalf("t3's send = %+v", mine)
	}
	if r := act("t3", `"op":"edit","message_id":"`+mine.MessageID+`","content":"t3 edits"`); !r.Success {
		t.Errorf("t3's edit of its own answer = %+v", r)
	}
}
