package platform_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/descriptor"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/fairshare"
	"connector/store"
	"connector/vault"
)

// chatsPlatform owns the chats in owners, grants those in granted, and
// records what its one op and its checks saw.
type chatsPlatform struct {
	owners  map[string]string // chat -> tenant
	granted map[string]string // chat -> tenant
	lookups int
	// waits makes every ask under a ctx that may not wait ErrWouldWait.
	waits bool
	// grantCtx is the ctx ChatGranted last saw; opCtx the op's.
	grantCtx, opCtx context.Context
	clock           *clocktest.Fake // Egress.Clock; nil: clock.System
}

func (p *chatsPlatform) Name() string                                   { return "chats" }
func (p *chatsPlatform) Descriptor() descriptor.Descriptor              { return descriptor.Descriptor{} }
func (p *chatsPlatform) Run(ctx context.Context, _ platform.Sink) error { <-ctx.Done(); return nil }
func (p *chatsPlatform) Status() platform.Status                        { return platform.Status{Ready: true} }

func (p *chatsPlatform) ChatTenant(ctx context.Context, chat string) (string, error) {
	p.lookups++
	if p.waits && !platform.MayWait(ctx) {
		return "", platform.ErrWouldWait
	}
	if chat == "down" {
		return "", platform.UnavailableError("chats: down")
	}
	if t, ok := p.owners[chat]; ok {
		return t, nil
	}
	return "", platform.ErrUnknownChat
}

func (p *chatsPlatform) ChatGranted(ctx context.Context, chat, tenant string) (platform.Hold, error) {
	p.grantCtx = ctx
	if p.granted[chat] == tenant {
		return platform.HoldGrant, nil
	}
	return platform.HoldNone, nil
}

var _ platform.ChatGranter = (*chatsPlatform)(nil)

func (p *chatsPlatform) Execute(ctx context.Context, tenant string, a *contract.Action) contract.Result {
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{contract.OpSend: func(p *chatsPlatform, ctx context.Context, tenant, chat string, _ *contract.Action) contract.Result {
			p.opCtx = ctx
			return contract.OK(tenant + ":" + chat)
		}},
		Chat:    func(_ *chatsPlatform, chat string) (string, bool) { return chat, chat != "!" },
		Timeout: time.Hour,
	}
	if p.clock != nil {
		e.Clock = p.clock
	}
	return platform.Execute(ctx, &e, p, tenant, a)
}

// TestExecuteChecksInOrder: each check of platform.Execute answers its
// situation, the op runs only past all of them, charged to the tenant and
// under a deadline, and the grant is looked up under the caller's ctx.
func TestExecuteChecksInOrder(t *testing.T) {
	p := &chatsPlatform{owners: map[string]string{"own": "t1", "theirs": "t2"}, granted: map[string]string{"shared": "t1"}}
	send := func(chat string) *contract.Action {
		return &contract.Action{Op: contract.OpSend, ChatID: contract.ID(chat)}
	}
	for _, c := range []struct {
		name string
		a    *contract.Action
		want contract.Result
	}{
		{"no chat_id", send(""), contract.Failed(contract.CodeBadRequest, "send needs a chat_id")},
		{"follow_up without session", &contract.Action{Op: contract.OpFollowUp}, contract.Failed(contract.CodeBadRequest, "follow_up needs a session_key")},
		{"op outside the table", &contract.Action{Op: contract.OpEdit, ChatID: "own"}, platform.Unsupported("chats")},
		{"op outside the contract", &contract.Action{Op: "teleport"}, platform.Unsupported("chats")},
		{"no chat of the platform", send("!"), contract.Failed(contract.CodeBadRequest, "chat_id is not a chats chat id")},
		{"another tenant's chat", send("theirs"), contract.Declined("chats")},
		{"nobody's chat", send("nowhere"), contract.Declined("chats")},
		{"owner unknown", send("down"), contract.Failed(contract.CodeUnavailable, "chats: down")},
		{"own chat", send("own"), contract.OK("t1:own")},
		{"granted chat", send("shared"), contract.OK("t1:shared")},
	} {
		if r := p.Execute(t.Context(), "t1", c.a); r != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, r, c.want)
		}
	}
	if _, ok := p.opCtx.Deadline(); !ok || platform.TenantOf(p.opCtx) != "t1" {
		t.Errorf("the op ran without a deadline or not charged to t1")
	}
	type mark struct{}
	ctx := context.WithValue(t.Context(), mark{}, true)
	p.Execute(ctx, "t1", send("own"))
	if p.grantCtx.Value(mark{}) == nil {
		t.Error("the grant was not looked up under the caller's ctx")
	}
}

// TestLocateIsAskedOnce: the chat Locate found is not looked up again by
// the platform's Execute, and what it found authorizes that chat for that
// tenant on that platform only.
func TestLocateIsAskedOnce(t *testing.T) {
	a := &chatsPlatform{owners: map[string]string{"x": "t2"}}
	b := &chatsPlatform{owners: map[string]string{"own": "t1", "other": "t1", "theirs": "t2"}}
	ps := []platform.Platform{a, b}
	found, ctx, err := platform.Locate(t.Context(), ps, "t1", "own")
	if err != nil || found != b {
		t.Fatalf("Locate = %v, %v; want the second platform", found, err)
	}
	if r := b.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: "own"}); !r.Success || a.lookups != 1 || b.lookups != 1 {
		t.Fatalf("send %+v after %d and %d lookups, want one on each", r, a.lookups, b.lookups)
	}
	for _, c := range []struct{ tenant, chat string }{{"t2", "own"}, {"t1", "theirs"}} {
		if r := b.Execute(ctx, c.tenant, &contract.Action{Op: contract.OpSend, ChatID: contract.ID(c.chat)}); r != contract.Declined("chats") {
			t.Errorf("%s on %s with Locate's answer for t1 on own: %+v, want the decline", c.tenant, c.chat, r)
		}
	}
	if _, _, err := platform.Locate(t.Context(), ps, "t1", "nowhere"); !errors.Is(err, platform.ErrUnknownChat) {
		t.Errorf("Locate of nobody's chat: %v", err)
	}
	if _, _, err := platform.Locate(t.Context(), ps, "t1", "down"); !errors.Is(err, platform.ErrUnavailable) {
		t.Errorf("Locate of a chat whose owner is unknown: %v", err)
	}
}

// TestLocateWaitsLast: a platform whose answer would wait is asked, under
// a ctx that may wait, only when no other platform places the chat.
func TestLocateWaitsLast(t *testing.T) {
	slow := &chatsPlatform{owners: map[string]string{"slow's": "t1"}, waits: true}
	quick := &chatsPlatform{owners: map[string]string{"quick's": "t1"}}
	ps := []platform.Platform{slow, quick}
	if found, _, err := platform.Locate(t.Context(), ps, "t1", "quick's"); err != nil || found != quick || slow.lookups != 1 {
		t.Fatalf("Locate of the other platform's chat = %v, %v after %d asks of the waiting one; want the other, one ask", found, err, slow.lookups)
	}
	if found, _, err := platform.Locate(t.Context(), ps, "t1", "slow's"); err != nil || found != slow || slow.lookups != 3 {
		t.Fatalf("Locate of the waiting platform's chat = %v, %v after %d asks; want it, asked again", found, err, slow.lookups)
	}
	if _, _, err := platform.Locate(t.Context(), ps, "t1", "nowhere"); !errors.Is(err, platform.ErrUnknownChat) {
		t.Fatalf("Locate of nobody's chat: %v, want ErrUnknownChat", err)
	}
}

// TestStillMayActAsksAfresh: a call made under an action's ctx more than
// 100 ms after its Authorize asks again whether its tenant may act in the
// action's chat, not reusing Locate's answer nor Execute's: once the chat
// is bound to another tenant the call is answered with the decline. A
// call made at once, or under a ctx of no action's chat, asks nothing.
func TestStillMayActAsksAfresh(t *testing.T) {
	p := &chatsPlatform{owners: map[string]string{"own": "t1"}, clock: clocktest.New(time.Now())}
	_, ctx, err := platform.Locate(t.Context(), []platform.Platform{p}, "t1", "own")
	if err != nil {
		t.Fatal(err)
	}
	if r := p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: "own"}); !r.Success {
		t.Fatalf("send: %+v", r)
	}
	p.clock.Advance(100 * time.Millisecond)
	if err := platform.StillMayAct(p.opCtx); err != nil || p.lookups != 1 {
		t.Fatalf("asked again 100 ms after Authorize: %v after %d lookups, want nil after one", err, p.lookups)
	}
	p.clock.Advance(time.Millisecond)
	if err := platform.StillMayAct(p.opCtx); err != nil || p.lookups != 2 {
		t.Fatalf("asked again before the rebind: %v after %d lookups, want nil after two", err, p.lookups)
	}
	p.owners["own"] = "t2"
	if r, ok := platform.CommonFailure("chats send: ", "Chats", platform.StillMayAct(p.opCtx)); !ok || r != contract.Declined("chats") {
		t.Errorf("asked again after the rebind: %+v, want the decline", r)
	}
	if err := platform.StillMayAct(ctx); err != nil {
		t.Errorf("a ctx of no action's chat: %v", err)
	}
}

// TestSendParts: the parts go out in order; a failure past the first part
// is the success of the parts that went out (a gateway retrying a failure
// would post them twice), carrying the first message's id, its error
// saying how many went out; one of the first part is the failure. Whole
// makes a partial send a failure that is not retryable, for a prompt.
func TestSendParts(t *testing.T) {
	failAt := -1
	var sent []string
	send := func(i int, part string) (string, error) {
		if i == failAt {
			return "", errors.New("boom")
		}
		sent = append(sent, part)
		return "m" + part, nil
	}
	failure := func(err error) contract.Result { return contract.Failed(contract.CodePlatformError, "x: "+err.Error()) }

	first, last, r := platform.SendParts(context.Background(), []string{"1", "2", "3"}, send, failure)
	if !r.Success || r.MessageID != "m1" || first != "m1" || last != "m3" || len(sent) != 3 {
		t.Fatalf("all sent: first %q last %q result %+v sent %v", first, last, r, sent)
	}
	failAt, sent = 2, nil
	first, last, r = platform.SendParts(context.Background(), []string{"1", "2", "3"}, send, failure)
	if !r.Success || r.Code != "" || r.Error != "x: boom (sent 2 of 3 parts; the rest was not sent)" || r.MessageID != "m1" || first != "m1" || last != "m2" {
		t.Fatalf("third failed: first %q last %q result %+v", first, last, r)
	}
	if w := platform.Whole(r); w.Success || w.Code != contract.CodePlatformError || w.Error != r.Error || w.MessageID != "m1" {
		t.Fatalf("Whole of a partial send = %+v, want platform_error", w)
	}
	if w := platform.Whole(contract.OK("m1")); !w.Success {
		t.Fatalf("Whole of a whole send = %+v", w)
	}
	failAt, sent = 0, nil
	_, _, r = platform.SendParts(context.Background(), []string{"1", "2"}, send, failure)
	if r.Success || r.Error != "x: boom" || r.MessageID != "" || len(sent) != 0 {
		t.Fatalf("first failed: result %+v sent %v", r, sent)
	}
}

// TestSendPartsMarked: under MarkParts every part that went out is
// remembered as the tenant's, the first too (the parts that follow a
// sealed Telegram draft or a caption send through SendParts after the
// op's answer), and no other tenant's.
func TestSendPartsMarked(t *testing.T) {
	g := platform.NewGrants("chats", nil, nil, nil)
	ctx := platform.MarkParts(context.Background(), g, "c1", "t2", time.Time{})
	send := func(i int, part string) (string, error) {
		if i == 2 {
			return "", errors.New("boom")
		}
		return "m" + part, nil
	}
	platform.SendParts(ctx, []string{"1", "2", "3"}, send, func(error) contract.Result { return contract.Result{} })
	for id, want := range map[string]bool{"m1": true, "m2": true, "m3": false} {
		if g.PostedBy(ctx, "c1", id, "t2") != want || g.PostedBy(ctx, "c1", id, "t3") {
			t.Errorf("%s marked t2's %v, t3's %v; want t2's %v", id, g.PostedBy(ctx, "c1", id, "t2"), g.PostedBy(ctx, "c1", id, "t3"), want)
		}
	}
}

// TestCommonFailure: the answers every platform gives alike, and none for
// any other error.
func TestCommonFailure(t *testing.T) {
	dial := &url.Error{Op: "Post", URL: "https://api.example/x?token=secret", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}}
	for _, c := range []struct {
		err        error
		ok         bool
		code, text string
		retryAfter int64
	}{
		{&platform.RateLimitedError{Wait: 1500 * time.Millisecond}, true, contract.CodeRateLimited, "x send: rate limited; retry later", 1500},
		{&platform.RateLimitedError{}, true, contract.CodeRateLimited, "x send: rate limited; retry later", 1},
		{context.DeadlineExceeded, true, contract.CodeUnavailable, "x send: no answer from X before the deadline", 0},
		{dial, true, contract.CodeUnavailable, "x send: X unreachable: ", 0},
		{errors.New("other"), false, "", "", 0},
	} {
		r, ok := platform.CommonFailure("x send: ", "X", c.err)
		if ok != c.ok || r.Code != c.code || !strings.HasPrefix(r.Error, c.text) || r.RetryAfterMS != c.retryAfter {
			t.Errorf("%v: %+v %v, want %s %q… retry %d", c.err, r, ok, c.code, c.text, c.retryAfter)
		}
		if strings.Contains(r.Error, "api.example") || strings.Contains(r.Error, "secret") {
			t.Errorf("%v: the result names the URL: %q", c.err, r.Error)
		}
	}
}

// TestWaitShare: a unit within the budget is granted; one that would come
// after latest is rate limited, and so is one at hand when latest is
// already past (no call can start in time: the unit is kept); a ctx that
// ended answers its own error.
func TestWaitShare(t *testing.T) {
	clk := clocktest.New(time.Now())
	budget := fairshare.New(fairshare.Config{Rate: 0.001, Burst: 1, Clock: clk}) // the next unit in 1,000 s
	var limited *platform.RateLimitedError
	if err := platform.WaitShare(context.Background(), budget, "t1", clk.Now().Add(-time.Millisecond), clk); !errors.As(err, &limited) {
		t.Fatalf("a unit at hand with latest past: %v, want a RateLimitedError", err)
	}
	if err := platform.WaitShare(context.Background(), budget, "t1", clk.Now().Add(time.Second), clk); err != nil {
		t.Fatalf("first unit: %v", err)
	}
	// latest is on clk: the wait ends when clk passes it, not in real time.
	done := make(chan error, 1)
	go func() {
		done <- platform.WaitShare(context.Background(), budget, "t1", clk.Now().Add(100*time.Second), clk)
	}()
	clk.Settle(t, 1, func() int { return len(done) }, func() int { return budget.Waiting("t1") })
	if len(done) != 0 {
		t.Fatalf("a unit past latest came back before clk reached latest: %v", <-done)
	}
	clk.Advance(100 * time.Second)
	select {
	case err := <-done:
		if !errors.As(err, &limited) {
			t.Fatalf("a unit past latest: %v, want a RateLimitedError", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitShare still waits 10 s after clk passed latest")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := platform.WaitShare(ctx, budget, "t1", clk.Now().Add(time.Second), clk); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended ctx: %v", err)
	}
}

// countingVault counts a vault's writes, and its reads of posted marks.
type countingVault struct {
	vault.Store
	puts, markReads int
}

// Since is the counted vault's (vault.Creation).
func (v *countingVault) Since(tenant string) time.Time { return vault.Creation(v.Store, tenant) }

func (v *countingVault) Get(ctx context.Context, k vault.Key) (vault.Entry, bool) {
	if k.Kind == vault.KindPostedMessage {
		v.markReads++
	}
	return v.Store.Get(ctx, k)
}

func (v *countingVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	v.puts++
	return v.Store.Put(ctx, k, e)
}

// TestEditsInAGrantedChat: in a chat the tenant holds by grant, which
// other tenants may hold too, a message its op answers is remembered as
// its own (one vault write), and its edit or delete of any other message
// is declined, Locate's answer included; in its own chat a message its op
// answers is remembered too (one vault write), and every message no other
// tenant posted may be edited.
func TestEditsInAGrantedChat(t *testing.T) {
	v := &countingVault{Store: vault.NewMemory(vault.Config{})}
	p := &chatsPlatform{owners: map[string]string{"own": "t1"}, granted: map[string]string{"shared": "t1"}}
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpSend: func(_ *chatsPlatform, _ context.Context, _, chat string, _ *contract.Action) contract.Result {
				return contract.OK("m-" + chat)
			},
			contract.OpEdit: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
				return contract.OK(string(a.MessageID))
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", v, nil, nil),
	}
	do := func(ctx context.Context, op, chat, message string) contract.Result {
		return platform.Execute(ctx, &e, p, "t1", &contract.Action{Op: op, ChatID: contract.ID(chat), MessageID: contract.ID(message)})
	}
	do(t.Context(), contract.OpSend, "own", "")
	if v.puts != 1 {
		t.Fatalf("a send in the tenant's own chat wrote %d marks, want 1", v.puts)
	}
	if r := do(t.Context(), contract.OpEdit, "own", "anyone's"); !r.Success {
		t.Fatalf("edit in the tenant's own chat: %+v", r)
	}
	do(t.Context(), contract.OpSend, "shared", "")
	if v.puts != 2 {
		t.Fatalf("a send in a granted chat wrote %d marks, want 1", v.puts-1)
	}
	located, ctx, err := platform.Locate(t.Context(), []platform.Platform{p}, "t1", "shared")
	if err != nil || located != p {
		t.Fatal(located, err)
	}
	for _, c := range []struct {
		ctx     context.Context
		message string
		want    contract.Result
	}{
		{t.Context(), "m-shared", contract.OK("m-shared")},
		{t.Context(), "m-other", contract.Declined("chats")},
		{ctx, "m-other", contract.Declined("chats")},
		{ctx, "m-shared", contract.OK("m-shared")},
	} {
		if r := do(c.ctx, contract.OpEdit, "shared", c.message); r != c.want {
			t.Errorf("edit of %s in the granted chat: %+v, want %+v", c.message, r, c.want)
		}
	}
	if v.puts != 2 {
		t.Errorf("edits wrote %d marks, want the sends' 2", v.puts)
	}
}

// TestGrantedChatMarksOnlyNewMessages: in a chat the tenant holds by grant,
// an op that names a message acts on one that exists, whatever id it
// answers: Discord answers a thread_create from message 42 with the
// thread's id, which is 42, also when the action spelled it "042" (a
// snowflake with a leading zero). That answer is not remembered as the
// tenant's, so its edit and delete of message 42, another tenant's, stay
// declined.
func TestGrantedChatMarksOnlyNewMessages(t *testing.T) {
	v := &countingVault{Store: vault.NewMemory(vault.Config{})}
	p := &chatsPlatform{granted: map[string]string{"shared": "t1"}}
	canonical := func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
		return contract.OK(strings.TrimLeft(string(a.MessageID), "0"))
	}
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpThreadCreate: canonical,
			contract.OpEdit:         canonical,
			contract.OpDelete:       canonical,
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", v, nil, nil),
	}
	do := func(op, message string) contract.Result {
		return platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: op, ChatID: "shared", MessageID: contract.ID(message), ThreadName: "x"})
	}
	if r := do(contract.OpThreadCreate, "042"); !r.Success || r.MessageID != "42" {
		t.Fatalf("thread_create from message 042: %+v", r)
	}
	for _, op := range []string{contract.OpEdit, contract.OpDelete} {
		if r := do(op, "42"); r != contract.Declined("chats") {
			t.Errorf("%s of another tenant's message 42 after a thread_create from it: %+v, want the decline", op, r)
		}
	}
	if v.puts != 0 {
		t.Errorf("an op naming a message wrote %d marks, want none", v.puts)
	}
}

// TestGrantedChatMarksAMessageOnce: a Slack draft answers every frame of
// its stream with the stream's message; in a chat the tenant holds by
// grant that message is marked once (one vault write), not once per frame,
// and stays the tenant's to edit.
func TestGrantedChatMarksAMessageOnce(t *testing.T) {
	v := &countingVault{Store: vault.NewMemory(vault.Config{})}
	p := &chatsPlatform{granted: map[string]string{"shared": "t1"}}
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpDraft: func(_ *chatsPlatform, _ context.Context, _, _ string, _ *contract.Action) contract.Result {
				return contract.OK("1768490100.000100")
			},
			contract.OpEdit: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
				return contract.OK(string(a.MessageID))
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", v, nil, nil),
	}
	for i := range 3 {
		a := &contract.Action{Op: contract.OpDraft, ChatID: "shared", DraftID: 7, Content: strings.Repeat("x", i+1)}
		if r := platform.Execute(t.Context(), &e, p, "t1", a); !r.Success {
			t.Fatalf("frame %d: %+v", i, r)
		}
	}
	if v.puts != 1 {
		t.Errorf("three frames of one stream wrote %d marks, want 1", v.puts)
	}
	if r := platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpEdit, ChatID: "shared", MessageID: "1768490100.000100", Content: "y"}); !r.Success {
		t.Errorf("edit of the stream's message: %+v", r)
	}
}

// TestGrantedChatEditsOwnMessageWithoutARead: edit-based streaming in a
// chat the tenant holds by grant (a linked user's Discord DM) edits the
// message it sent again and again; the instance that stored the mark
// answers from what it stored, without a store read per edit, while a
// message it did not mark is still looked up (and declined).
func TestGrantedChatEditsOwnMessageWithoutARead(t *testing.T) {
	v := &countingVault{Store: vault.NewMemory(vault.Config{})}
	p := &chatsPlatform{granted: map[string]string{"dm": "t1"}}
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpSend: func(_ *chatsPlatform, _ context.Context, _, _ string, _ *contract.Action) contract.Result {
				return contract.OK("m1")
			},
			contract.OpEdit: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
				return contract.OK(string(a.MessageID))
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", v, nil, nil),
	}
	do := func(op, message string) contract.Result {
		return platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: op, ChatID: "dm", MessageID: contract.ID(message), Content: "x"})
	}
	do(contract.OpSend, "")
	for range 3 {
		if r := do(contract.OpEdit, "m1"); !r.Success {
			t.Fatalf("edit of the tenant's own message: %+v", r)
		}
	}
	if v.markReads != 0 {
		t.Errorf("three edits of a message this instance marked read the store %d times, want 0", v.markReads)
	}
	// Not marked: its record is read, then the mark a release before this
	// one would have kept (Grants.PostedBy).
	if r := do(contract.OpEdit, "m2"); r != contract.Declined("chats") || v.markReads != 2 {
		t.Errorf("edit of a message not marked: %+v after %d reads, want the decline after 2", r, v.markReads)
	}
}

// TestThreadCreateOnAGrantGrantsTheThread: a thread_create in a chat the
// tenant holds by grant grants the answered thread to the tenant when the
// platform's threads are chats (Egress.ThreadChats, Discord), and not
// otherwise (a Telegram topic's id "5" is no chat: granting it would give
// the tenant the private chat of user 5); in a chat the tenant owns, or
// for a thread_create that failed, nothing is granted.
func TestThreadCreateOnAGrantGrantsTheThread(t *testing.T) {
	for _, threadChats := range []bool{true, false} {
		grants := platform.NewGrants("chats", nil, nil, nil)
		grants.Add(t.Context(), "shared", "", "t1", time.Time{})
		p := &chatsPlatform{granted: map[string]string{"shared": "t1"}, owners: map[string]string{"own": "t1"}}
		next := 5
		e := platform.Egress[*chatsPlatform, string]{
			Ops: platform.Ops[*chatsPlatform, string]{
				contract.OpThreadCreate: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
					if a.ThreadName == "fails" {
						r := contract.Failed(contract.CodePlatformError, "no")
						r.ThreadID = "9"
						return r
					}
					id := strconv.Itoa(next)
					next++
					r := contract.OK(id)
					r.ThreadID = id
					return r
				},
			},
			Chat:        func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
			Grants:      grants,
			ThreadChats: threadChats,
		}
		create := func(chat, name string) contract.Result {
			return platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpThreadCreate, ChatID: contract.ID(chat), ThreadName: name})
		}
		if r := create("shared", "x"); !r.Success || r.ThreadID != "5" {
			t.Fatalf("thread_create in the granted chat: %+v", r)
		}
		if got := grants.Has(t.Context(), "5", "t1"); got != threadChats {
			t.Errorf("ThreadChats %v: the thread granted %v", threadChats, got)
		}
		if r := create("own", "x"); !r.Success || grants.Has(t.Context(), r.ThreadID, "t1") {
			t.Errorf("ThreadChats %v: a thread of an owned chat granted (%+v)", threadChats, r)
		}
		if create("shared", "fails"); grants.Has(t.Context(), "9", "t1") {
			t.Errorf("ThreadChats %v: a failed thread_create granted its answer", threadChats)
		}
	}
}

// TestPromptPosterRecorded: a prompt posted by grant is remembered as its
// tenant's (Posted) and by the message alone (Prompted), in a DM and in a
// group. Ada's link moved from t1 to t2: a press of t1's prompt in her DM,
// which t1 still holds by grant, reaches t1, also 25 hours later, once
// t1's marks are gone; one in the group is nobody's (she is not linked to
// t1), nor, once t1 is deleted and created again, is the DM's. The poster
// was found by the marks, which last a day, and in a group the press went
// to t2.
func TestPromptPosterRecorded(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	var created time.Time
	v := &countingVault{Store: vault.NewMemory(vault.Config{Clock: clk, Since: func(string) time.Time { return created }})}
	p := &chatsPlatform{granted: map[string]string{"dm": "t1", "group": "t1"}}
	grants := platform.NewGrants("chats", v, clk, nil)
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpPrompt: func(_ *chatsPlatform, _ context.Context, _, chat string, _ *contract.Action) contract.Result {
				return contract.OK("m-" + chat)
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: grants,
	}
	for _, chat := range []string{"group", "dm"} {
		v.puts = 0
		if r := platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpPrompt, ChatID: contract.ID(chat)}); !r.Success {
			t.Fatalf("prompt in %s: %+v", chat, r)
		}
		if v.puts != 2 {
			t.Errorf("a prompt in the granted %s wrote %d records, want 2", chat, v.puts)
		}
	}
	clk.Advance(25 * time.Hour)
	grants.Add(t.Context(), "dm", "", "t1", time.Time{})
	own := platform.NewOwnership([]platform.Binding{{Kind: platform.BindUser, ID: "ada", Tenant: "t2"}})
	if got, _, ok, _ := grants.PromptPoster(t.Context(), own, "ada", platform.Chat{ID: "dm", DM: true}, "m-dm", "t2"); got != "t1" || !ok {
		t.Errorf("a press of t1's prompt in Ada's DM reached %q (%v), want t1", got, ok)
	}
	if got, _, ok, _ := grants.PromptPoster(t.Context(), own, "ada", platform.Chat{ID: "group"}, "m-group", "t2"); ok {
		t.Errorf("a press of t1's prompt in a granted group reached %q, want nobody", got)
	}
	created = clk.Now()
	grants.Add(t.Context(), "dm", "", "t1", time.Time{})
	if got, _, ok, _ := grants.PromptPoster(t.Context(), own, "ada", platform.Chat{ID: "dm", DM: true}, "m-dm", "t2"); ok {
		t.Errorf("a press of the earlier t1's prompt in Ada's DM reached %q, want nobody", got)
	}
}

// TestActionOfAnEarlierTenant: the relay took t1's action from its
// connection (platform.WithCreation), then t1 was deleted and made again
// under its id, the vault first. In a chat t1 holds by grant the action is
// declined, Locate's earlier answer reused or not, and nothing is marked;
// so too on a platform without grants. Before, the creation was read after the
// chat was authorized: the earlier tenant's post was marked as the new
// t1's, which could then edit it.
func TestActionOfAnEarlierTenant(t *testing.T) {
	first := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	created := first
	v := &countingVault{Store: vault.NewMemory(vault.Config{Since: func(string) time.Time { return created }})}
	p := &chatsPlatform{granted: map[string]string{"shared": "t1"}}
	var stamped time.Time
	ops := platform.Ops[*chatsPlatform, string]{contract.OpSend: func(_ *chatsPlatform, ctx context.Context, tenant, chat string, _ *contract.Action) contract.Result {
		stamped = platform.AuthorizedCreation(ctx, v, tenant)
		return contract.OK("m-" + chat)
	}}
	e := platform.Egress[*chatsPlatform, string]{Ops: ops, Chat: func(_ *chatsPlatform, chat string) (string, bool) { return chat, true }, Grants: platform.NewGrants("chats", v, nil, nil), Vault: v}
	send := &contract.Action{Op: contract.OpSend, ChatID: "shared"}
	dispatched := platform.WithCreation(t.Context(), first)
	if r := platform.Execute(dispatched, &e, p, "t1", send); !r.Success || !stamped.Equal(first) || v.puts != 1 {
		t.Fatalf("t1's send as dispatched: %+v, stamped %v, %d marks", r, stamped, v.puts)
	}
	_, located, err := platform.Locate(dispatched, []platform.Platform{p}, "t1", "shared")
	if err != nil {
		t.Fatal(err)
	}
	created, stamped = first.Add(time.Minute), time.Time{}
	for _, ctx := range []context.Context{dispatched, located} {
		if r := platform.Execute(ctx, &e, p, "t1", send); r != contract.Declined("chats") || !stamped.IsZero() || v.puts != 1 {
			t.Errorf("the earlier t1's send once t1 was made again: %+v, op ran: %v, %d marks, want declined, no op, 1 mark", r, !stamped.IsZero(), v.puts)
		}
	}
	e.Grants = nil
	p.owners = map[string]string{"shared": "t1"}
	if r := platform.Execute(dispatched, &e, p, "t1", send); r != contract.Declined("chats") || !stamped.IsZero() {
		t.Errorf("the earlier t1's send without grants: %+v, op ran: %v, want declined, no op", r, !stamped.IsZero())
	}
}

// TestActionOfATenantDeclaredMeanwhile: the relay took t1's action from
// its connection (platform.WithCreation), then the YAML declared t1 over
// its stored tenant (the vault first, creation zero): the same tenant, whose
// connections stay (relay.Server.SetTenants), so its action runs and what
// it records is the declared tenant's. Before, any other creation than
// the one dispatched was declined, the live tenant's action too.
func TestActionOfATenantDeclaredMeanwhile(t *testing.T) {
	first := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var created time.Time // declared
	v := vault.NewMemory(vault.Config{Since: func(string) time.Time { return created }})
	p := &chatsPlatform{owners: map[string]string{"c1": "t1"}}
	stamped := first
	ops := platform.Ops[*chatsPlatform, string]{contract.OpSend: func(_ *chatsPlatform, ctx context.Context, tenant, chat string, _ *contract.Action) contract.Result {
		stamped = platform.AuthorizedCreation(ctx, v, tenant)
		return contract.OK("m-" + chat)
	}}
	e := platform.Egress[*chatsPlatform, string]{Ops: ops, Chat: func(_ *chatsPlatform, chat string) (string, bool) { return chat, true }, Vault: v}
	send := &contract.Action{Op: contract.OpSend, ChatID: "c1"}
	if r := platform.Execute(platform.WithCreation(t.Context(), first), &e, p, "t1", send); !r.Success || !stamped.IsZero() {
		t.Fatalf("t1's send once the YAML declared t1: %+v, stamped %v; want sent, stamped as declared", r, stamped)
	}
}

// TestActionOfADeletedTenant: the relay took t1's action from its
// connection (platform.WithCreation), then t1 was deleted through the
// registry, the vault first: the vault no longer knows t1 (its creation is
// zero, as a declared tenant's), while the platform's ownership, applied
// after it, still places t1's former chat. The action is declined and no
// op runs, dispatched or not. Before, a zero creation read as a declared
// tenant: the deleted tenant's send went out into its former chat.
func TestActionOfADeletedTenant(t *testing.T) {
	first := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tenants := map[string]time.Time{"t1": first}
	v := vault.NewMemory(vault.Config{
		Since: func(tenant string) time.Time { return tenants[tenant] },
		Known: func(tenant string) bool { _, ok := tenants[tenant]; return ok },
	})
	p := &chatsPlatform{owners: map[string]string{"c1": "t1"}}
	ran := false
	ops := platform.Ops[*chatsPlatform, string]{contract.OpSend: func(*chatsPlatform, context.Context, string, string, *contract.Action) contract.Result {
		ran = true
		return contract.OK("m1")
	}}
	e := platform.Egress[*chatsPlatform, string]{Ops: ops, Chat: func(_ *chatsPlatform, chat string) (string, bool) { return chat, true }, Vault: v}
	send := &contract.Action{Op: contract.OpSend, ChatID: "c1"}
	if r := platform.Execute(platform.WithCreation(t.Context(), first), &e, p, "t1", send); !r.Success || !ran {
		t.Fatalf("t1's send while t1 is known: %+v, op ran: %v", r, ran)
	}
	delete(tenants, "t1")
	ran = false
	for name, ctx := range map[string]context.Context{"dispatched": platform.WithCreation(t.Context(), first), "called directly": t.Context()} {
		if r := platform.Execute(ctx, &e, p, "t1", send); r != contract.Declined("chats") || ran {
			t.Errorf("the deleted t1's send (%s): %+v, op ran: %v; want declined, no op", name, r, ran)
		}
	}
}

// TestClaimedChatKeepsAnotherTenantsMessages: t1 answers in a chat it
// holds by grant, then t2 claims the chat. t2's edit, delete and
// thread_rename of t1's answer are declined and reach no op, while t2
// edits a message nobody marked (its own, unmarked under its claim), with
// a store read per edit (that none is marked is not kept); a store that
// cannot tell answers unavailable. A mark a release before this one kept
// of t1's answer (per tenant) still lets t1 edit it by grant.
func TestClaimedChatKeepsAnotherTenantsMessages(t *testing.T) {
	v := &countingVault{Store: vault.NewMemory(vault.Config{})}
	p := &chatsPlatform{owners: map[string]string{}, granted: map[string]string{"shared": "t1"}}
	ran := 0
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpSend: func(*chatsPlatform, context.Context, string, string, *contract.Action) contract.Result {
				return contract.OK("m1")
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", v, nil, nil),
	}
	for _, op := range []string{contract.OpEdit, contract.OpDelete, contract.OpThreadRename} {
		e.Ops[op] = func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
			ran++
			return contract.OK(string(a.MessageID))
		}
	}
	act := func(tenant, op, message string) contract.Result {
		return platform.Execute(t.Context(), &e, p, tenant, &contract.Action{Op: op, ChatID: "shared", MessageID: contract.ID(message), Content: "x", ThreadName: "x"})
	}
	if r := act("t1", contract.OpSend, ""); !r.Success {
		t.Fatalf("t1's send by grant: %+v", r)
	}
	p.granted, p.owners["shared"] = nil, "t2"
	for _, op := range []string{contract.OpEdit, contract.OpDelete, contract.OpThreadRename} {
		if r := act("t2", op, "m1"); r != contract.Declined("chats") {
			t.Errorf("t2's %s of t1's answer in its claimed chat: %+v, want the decline", op, r)
		}
	}
	if ran != 0 {
		t.Errorf("%d of t2's ops on t1's answer ran", ran)
	}
	reads := v.markReads
	for range 3 {
		if r := act("t2", contract.OpEdit, "m2"); !r.Success {
			t.Errorf("t2's edit of its own message in its claimed chat: %+v", r)
		}
	}
	if v.markReads-reads != 3 {
		t.Errorf("three edits of one message read the store %d times, want 3", v.markReads-reads)
	}
	down := platform.Egress[*chatsPlatform, string]{Ops: e.Ops, Chat: e.Chat, Grants: platform.NewGrants("chats", vault.NewDurable(downCaps{}, vault.Config{}), nil, nil)}
	if r := platform.Execute(t.Context(), &down, p, "t2", &contract.Action{Op: contract.OpEdit, ChatID: "shared", MessageID: "m1", Content: "x"}); r.Code != contract.CodeUnavailable ||
		r.Error != "chats: the message's poster could not be looked up; retry later" {
		t.Errorf("t2's edit with the store down: %+v, want unavailable saying the poster is unknown, naming no tenant", r)
	}
	// A mark of before this release: the tenant's own key of the message.
	old := vault.Key{Tenant: "t1", SessionKey: "5:chats/shared/m0", Kind: vault.KindPostedMessage}
	if err := v.Put(t.Context(), old, vault.Entry{}); err != nil {
		t.Fatal(err)
	}
	p.granted, p.owners = map[string]string{"shared": "t1"}, map[string]string{}
	if r := act("t1", contract.OpEdit, "m0"); !r.Success {
		t.Errorf("t1's edit of its answer marked before this release: %+v", r)
	}
}

// downCaps is a store whose reads and writes fail.
type downCaps struct{ store.Capabilities }

func (downCaps) Get(context.Context, string) ([]byte, bool, error) {
	return nil, false, errors.New("store down")
}

func (downCaps) PutUnlessLater(context.Context, string, []byte, int64, time.Time) (bool, error) {
	return false, errors.New("store down")
}

// TestHolderStreamsWithoutAStoreRead: in a chat bound to t1, t1's edits
// of the message it just sent there (a Slack stream's, one per frame)
// read no posted record from the store, so they go on when the store
// cannot answer; a message this instance did not send there is still
// looked up (unavailable).
func TestHolderStreamsWithoutAStoreRead(t *testing.T) {
	p := &chatsPlatform{owners: map[string]string{"own": "t1"}}
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpSend: func(*chatsPlatform, context.Context, string, string, *contract.Action) contract.Result {
				return contract.OK("m1")
			},
			contract.OpEdit: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
				return contract.OK(string(a.MessageID))
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", vault.NewDurable(downCaps{}, vault.Config{}), nil, nil),
	}
	act := func(op, message string) contract.Result {
		return platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: op, ChatID: "own", MessageID: contract.ID(message), Content: "x"})
	}
	if r := act(contract.OpSend, ""); !r.Success {
		t.Fatalf("t1's send in its own chat: %+v", r)
	}
	for range 3 {
		if r := act(contract.OpEdit, "m1"); !r.Success {
			t.Errorf("t1's edit of the message it just sent in its own chat, the store down: %+v", r)
		}
	}
	if r := act(contract.OpEdit, "m0"); r.Code != contract.CodeUnavailable {
		t.Errorf("edit of a message not sent here, the store down: %+v, want unavailable", r)
	}
}

// TestClaimantsProbeDoesNotOutliveItsClaim: t2, claiming a chat, edits a
// message id nobody posted yet on instance A, then lets the chat go; t1
// posts that message there by grant through instance B, and t2 claims the
// chat again. t2's edit of t1's message on A is declined: A does not keep
// the store's answer that there was no record (before, it did for 12
// hours and let t2 rewrite t1's answer).
func TestClaimantsProbeDoesNotOutliveItsClaim(t *testing.T) {
	shared := vault.NewMemory(vault.Config{})
	p := &chatsPlatform{owners: map[string]string{"shared": "t2"}, granted: map[string]string{}}
	instance := func() *platform.Egress[*chatsPlatform, string] {
		return &platform.Egress[*chatsPlatform, string]{
			Ops: platform.Ops[*chatsPlatform, string]{
				contract.OpSend: func(*chatsPlatform, context.Context, string, string, *contract.Action) contract.Result {
					return contract.OK("m1")
				},
				contract.OpEdit: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
					return contract.OK(string(a.MessageID))
				},
			},
			Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
			Grants: platform.NewGrants("chats", shared, nil, nil),
		}
	}
	a, b := instance(), instance()
	act := func(e *platform.Egress[*chatsPlatform, string], tenant, op, message string) contract.Result {
		return platform.Execute(t.Context(), e, p, tenant, &contract.Action{Op: op, ChatID: "shared", MessageID: contract.ID(message), Content: "x"})
	}
	if r := act(a, "t2", contract.OpEdit, "m1"); !r.Success {
		t.Fatalf("t2's edit of an unposted id in its claimed chat: %+v", r)
	}
	p.owners, p.granted = map[string]string{}, map[string]string{"shared": "t1"}
	if r := act(b, "t1", contract.OpSend, ""); !r.Success {
		t.Fatalf("t1's send by grant on B: %+v", r)
	}
	p.owners, p.granted = map[string]string{"shared": "t2"}, map[string]string{}
	if r := act(a, "t2", contract.OpEdit, "m1"); r != contract.Declined("chats") {
		t.Errorf("t2's edit on A of t1's answer posted on B after t2 probed its id: %+v, want the decline", r)
	}
}

// TestOldMarkReadOncePerMessage: t1, holding a chat by grant, edits a
// message nobody marked three times: each edit reads the message's
// record, and the mark a release before this one kept per tenant only
// the first time (before, every edit read both). The old mark of another
// message still lets t1 edit it.
func TestOldMarkReadOncePerMessage(t *testing.T) {
	v := &countingVault{Store: vault.NewMemory(vault.Config{})}
	p := &chatsPlatform{granted: map[string]string{"shared": "t1"}}
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpEdit: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
				return contract.OK(string(a.MessageID))
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", v, nil, nil),
	}
	edit := func(message string) contract.Result {
		return platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpEdit, ChatID: "shared", MessageID: contract.ID(message), Content: "x"})
	}
	for range 3 {
		if r := edit("m1"); r != contract.Declined("chats") {
			t.Errorf("t1's edit of an unmarked message by grant: %+v, want the decline", r)
		}
	}
	if v.markReads != 4 {
		t.Errorf("three edits of an unmarked message read %d marks, want 4 (the record thrice, the old mark once)", v.markReads)
	}
	old := vault.Key{Tenant: "t1", SessionKey: "5:chats/shared/m0", Kind: vault.KindPostedMessage}
	if err := v.Put(t.Context(), old, vault.Entry{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := edit("m0"); !r.Success {
			t.Errorf("t1's edit of its answer marked before this release: %+v", r)
		}
	}
}

// refusingVault fails the first refuse puts.
type refusingVault struct {
	vault.Store
	refuse, puts int
}

func (v *refusingVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	v.puts++
	if v.puts <= v.refuse {
		return errors.New("store down")
	}
	return v.Store.Put(ctx, k, e)
}

// TestRecordTheStoreRefusedIsStoredAgain: the record of t1's message in
// its own chat, which the store did not take, is stored again as the
// message is answered again (a stream's next frame), then not again, and
// another instance finds it.
func TestRecordTheStoreRefusedIsStoredAgain(t *testing.T) {
	clk := clocktest.New(time.Unix(1_000_000, 0))
	v := &refusingVault{Store: vault.NewMemory(vault.Config{Clock: clk}), refuse: 1}
	g := platform.NewGrants("chats", v, clk, nil)
	for range 3 {
		g.Posted(t.Context(), "own", "m1", "t1", time.Time{})
		clk.Advance(time.Second) // past the pause after a failed write
	}
	if v.puts != 2 {
		t.Errorf("three answers of one message, the first write refused, wrote %d times, want 2", v.puts)
	}
	if !platform.NewGrants("chats", v, nil, nil).PostedBy(t.Context(), "own", "m1", "t1") {
		t.Error("another instance does not find the record stored again")
	}
}

// TestDeclinedEditsKeepAnotherTenantsRecords: t2's edits by grant of ids
// it never posted, declined without a platform call, do not push t1's
// posted records out of what the instance keeps, so t1's stream, its
// message answered once per frame, still writes its record once, not
// once per frame again. Before, each declined edit kept its missing old
// mark in the same 4,096 records, so t2 could make t1's every frame cost
// a store write (and its edits a read) at no cost of its own.
func TestDeclinedEditsKeepAnotherTenantsRecords(t *testing.T) {
	v := &countingVault{Store: vault.NewMemory(vault.Config{})}
	p := &chatsPlatform{granted: map[string]string{"theirs": "t1", "mine": "t2"}}
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpSend: func(_ *chatsPlatform, _ context.Context, _, _ string, _ *contract.Action) contract.Result {
				return contract.OK("m1")
			},
			contract.OpEdit: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
				return contract.OK(string(a.MessageID))
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", v, nil, nil),
	}
	frame := func() {
		t.Helper()
		if r := platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpSend, ChatID: "theirs", Content: "x"}); !r.Success {
			t.Fatalf("t1's frame: %+v", r)
		}
	}
	frame()
	for i := range 5000 {
		a := &contract.Action{Op: contract.OpEdit, ChatID: "mine", MessageID: contract.ID("x" + strconv.Itoa(i)), Content: "x"}
		if r := platform.Execute(t.Context(), &e, p, "t2", a); r != contract.Declined("chats") {
			t.Fatalf("t2's edit of an id it never posted: %+v, want the decline", r)
		}
	}
	puts := v.puts
	frame()
	if v.puts != puts {
		t.Errorf("t1's next frame after t2's 5,000 declined edits wrote its record again (%d writes)", v.puts-puts)
	}
}

// TestPostsKeepAnotherTenantsRecords: t2 posting fast does not push the
// records of t1's messages out of what the instance keeps (each tenant
// keeps its share of them), so t1's edits of its earlier answer read
// nothing from the store and its frames write nothing. Before, one cache
// of 4,096 records was shared by every tenant of the platform: t2's
// 5,000 posts made each of t1's edits cost a store read (and, the store
// down, answer unavailable).
func TestPostsKeepAnotherTenantsRecords(t *testing.T) {
	v := &countingVault{Store: vault.NewMemory(vault.Config{})}
	p := &chatsPlatform{owners: map[string]string{"theirs": "t1", "mine": "t2"}}
	n := 0
	e := platform.Egress[*chatsPlatform, string]{
		Ops: platform.Ops[*chatsPlatform, string]{
			contract.OpSend: func(_ *chatsPlatform, _ context.Context, _, _ string, _ *contract.Action) contract.Result {
				n++
				return contract.OK(strconv.Itoa(n))
			},
			contract.OpEdit: func(_ *chatsPlatform, _ context.Context, _, _ string, a *contract.Action) contract.Result {
				return contract.OK(string(a.MessageID))
			},
		},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", v, nil, nil),
	}
	if r := platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpSend, ChatID: "theirs", Content: "x"}); !r.Success {
		t.Fatalf("t1's send: %+v", r)
	}
	for range 5000 {
		if r := platform.Execute(t.Context(), &e, p, "t2", &contract.Action{Op: contract.OpSend, ChatID: "mine", Content: "x"}); !r.Success {
			t.Fatalf("t2's send: %+v", r)
		}
	}
	reads, puts := v.markReads, v.puts
	if r := platform.Execute(t.Context(), &e, p, "t1", &contract.Action{Op: contract.OpEdit, ChatID: "theirs", MessageID: "1", Content: "y"}); !r.Success {
		t.Fatalf("t1's edit of its answer: %+v", r)
	}
	if v.markReads != reads || v.puts != puts {
		t.Errorf("t1's edit after t2's 5,000 posts read its record %d times and wrote it %d times, want neither", v.markReads-reads, v.puts-puts)
	}
}

// stallingVault is a vault whose Put, while down, says so on entered and
// answers what the test sends on answer (nil: it stores), or fails once
// the test has ended.
type stallingVault struct {
	vault.Store
	down    atomic.Bool
	puts    atomic.Int32
	entered chan vault.Key
	answer  chan error
	gone    chan struct{}
}

func (v *stallingVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	v.puts.Add(1)
	if v.down.Load() {
		v.entered <- k
		select {
		case err := <-v.answer:
			if err != nil {
				return err
			}
		case <-v.gone:
			return errors.New("test over")
		}
	}
	return v.Store.Put(ctx, k, e)
}

// TestSendsDoNotWaitForAStoreThatFailed: once the store failed a posted
// record's write (the first send in t1's own chat waits for it), the sends
// of the next second do not call the store (a prompt's poster record is
// still tried: it is written once); after that second one write tries
// it, and sends meanwhile do not wait for it either; once it succeeds
// every record is stored again, those the store was not asked to store as
// their messages are answered again, so another instance finds them.
func TestSendsDoNotWaitForAStoreThatFailed(t *testing.T) {
	clk := clocktest.New(time.Unix(1_000_000, 0))
	v := &stallingVault{
		Store:   vault.NewMemory(vault.Config{Clock: clk}),
		entered: make(chan vault.Key, 16), answer: make(chan error), gone: make(chan struct{}),
	}
	t.Cleanup(func() { close(v.gone) })
	var n atomic.Int32
	answer := func(_ *chatsPlatform, _ context.Context, _, _ string, _ *contract.Action) contract.Result {
		return contract.OK("m" + strconv.Itoa(int(n.Add(1))))
	}
	p := &chatsPlatform{owners: map[string]string{"own": "t1"}, granted: map[string]string{"shared": "t1"}}
	e := platform.Egress[*chatsPlatform, string]{
		Ops:    platform.Ops[*chatsPlatform, string]{contract.OpSend: answer, contract.OpPrompt: answer},
		Chat:   func(_ *chatsPlatform, chat string) (string, bool) { return chat, true },
		Grants: platform.NewGrants("chats", v, clk, nil),
	}
	send := func(op, chat string) <-chan contract.Result {
		done := make(chan contract.Result, 1)
		go func() {
			done <- platform.Execute(context.Background(), &e, p, "t1", &contract.Action{Op: op, ChatID: contract.ID(chat)})
		}()
		return done
	}
	tries := func(what string) {
		t.Helper()
		select {
		case <-v.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no store write tried within 10 s", what)
		}
	}
	returns := func(what string, r <-chan contract.Result) {
		t.Helper()
		select {
		case res := <-r:
			if !res.Success {
				t.Fatalf("%s: %+v", what, res)
			}
		case k := <-v.entered:
			t.Fatalf("%s waits for the store (a write of %v)", what, k)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer within 10 s", what)
		}
	}

	v.down.Store(true)
	first := send(contract.OpSend, "own")
	tries("the first send")
	v.answer <- errors.New("store down")
	returns("the first send", first)
	returns("a send 0 s after the failed write", send(contract.OpSend, "own"))
	clk.Advance(999 * time.Millisecond)
	returns("a send 0.999 s after it", send(contract.OpSend, "own"))
	prompt := send(contract.OpPrompt, "shared")
	tries("a prompt by grant 0.999 s after it (its record is the only way its presses find it)")
	v.answer <- nil
	returns("a prompt by grant 0.999 s after it", prompt)
	if got := v.puts.Load(); got != 2 {
		t.Fatalf("the store was asked %d times, want 2 (the first send's, the prompt's poster)", got)
	}

	clk.Advance(time.Millisecond)
	probe := send(contract.OpSend, "own")
	tries("the send 1 s after the failed write")
	returns("a send while another write tries the store", send(contract.OpSend, "own"))
	v.down.Store(false)
	v.answer <- nil
	returns("the send whose write the store took", probe)
	returns("a send once the store is back", send(contract.OpSend, "own"))
	for _, m := range []string{"m2", "m3", "m6"} { // the messages of the skipped writes (m4 was the prompt's), answered again
		e.Grants.Posted(t.Context(), "own", m, "t1", time.Time{})
	}
	other := platform.NewGrants("chats", v, clk, nil)
	for _, m := range []string{"m2", "m3", "m5", "m6", "m7"} {
		if !other.PostedBy(t.Context(), "own", m, "t1") {
			t.Errorf("another instance finds no record of %s", m)
		}
	}
	if other.PostedBy(t.Context(), "own", "m1", "t1") {
		t.Error("another instance finds a record of m1, whose write failed and which was not answered again")
	}
}

// panickingVault is a vault whose Put panics while panics is set.
type panickingVault struct {
	refusingVault
	panics bool
}

func (v *panickingVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if v.panics {
		panic("vault bug")
	}
	return v.refusingVault.Put(ctx, k, e)
}

// TestAPanickingProbeEndsTheProbe: the write that tries the store again
// after a failed one panics (a bug the relay recovers from, failing its
// op); a second later the next write still tries the store, so records are
// not left unsaved for the instance's life.
func TestAPanickingProbeEndsTheProbe(t *testing.T) {
	clk := clocktest.New(time.Unix(1_000_000, 0))
	v := &panickingVault{refusingVault: refusingVault{Store: vault.NewMemory(vault.Config{Clock: clk}), refuse: 1}}
	g := platform.NewGrants("chats", v, clk, nil)
	g.Posted(t.Context(), "own", "m1", "t1", time.Time{}) // refused
	clk.Advance(time.Second)
	v.panics = true
	func() {
		defer func() { _ = recover() }()
		g.Posted(t.Context(), "own", "m2", "t1", time.Time{})
		t.Fatal("the probe's write did not panic")
	}()
	v.panics = false
	clk.Advance(time.Second)
	g.Posted(t.Context(), "own", "m3", "t1", time.Time{})
	if !platform.NewGrants("chats", v, clk, nil).PostedBy(t.Context(), "own", "m3", "t1") {
		t.Error("a write a second after the panicking probe was not tried: the store is spared for good")
	}
}
