package whatsapp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/whatsapp/whatsapptest"
	"connector/store"
	"connector/vault"
)

// TestTapGoesToThePromptsPoster: a tap on a prompt goes to the tenant
// that posted the prompt, not to the number's owner of the moment. After
// t1's number moves to t2 at runtime, a tap on t1's prompt (even one
// whose prompt_id t2 also used) reaches nobody; t2's own prompt is
// answered as usual. On a number no tenant owns, a prompt of t1's is
// answered to t1 while the user stays linked to it, even when the user's
// messages now reach another linked tenant (their DM default).
func TestTapGoesToThePromptsPoster(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	prompt := func(tenant string) string {
		t.Helper()
		res := r.exec(t, tenant, map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
			"options": []any{map[string]any{"id": "yes", "label": "Yes"}, map[string]any{"id": "no", "label": "No"}}})
		if !res.Success {
			t.Fatalf("%s's prompt: %+v", tenant, res)
		}
		return res.MessageID
	}
	tap := func(b whatsapptest.Business, wamid, promptMsg string) {
		t.Helper()
		if code := r.post(t, whatsapptest.Tap(b, ada, "Ada", wamid, promptMsg, "hp1:p1:yes", "Yes", false)); code != 200 {
			t.Fatalf("tap %s: %d", wamid, code)
		}
	}
	bind := func(bindings ...platform.Binding) {
		t.Helper()
		if err := r.p.Bind(bindings); err != nil {
			t.Fatal(err)
		}
	}
	r.converse(t, biz1, ada, "wamid.O1") // t1's number
	old := prompt("t1")
	// biz1 moves from t1 to t2; Ada writes to it again, now t2's.
	bind(platform.Binding{Kind: platform.BindPhoneNumber, ID: biz1.PhoneNumberID, Tenant: "t2"})
	r.converse(t, biz1, ada, "wamid.O2")
	fresh := prompt("t2") // the same prompt_id as t1's
	before := len(r.sink.all())
	tap(biz1, "wamid.O3", old)
	if got := r.sink.all()[before:]; len(got) != 0 {
		t.Fatalf("a tap on t1's prompt was delivered to %s as %+v (prompt_response %+v)", got[0].Tenant, got[0].Event, got[0].Event.PromptResponse)
	}
	if n := r.stats.get(r.stats.dropped, dropPromptNotOwned); n != 1 {
		t.Fatalf("%d taps dropped as %s, want 1", n, dropPromptNotOwned)
	}
	tap(biz1, "wamid.O4", fresh)
	if got := r.sink.all()[before:]; len(got) != 1 || got[0].Tenant != "t2" || got[0].Event.PromptResponse == nil ||
		got[0].Event.PromptResponse.PromptMessageID != fresh {
		t.Fatalf("a tap on t2's prompt: %+v", got)
	}
	// biz3 is no tenant's: Ada, linked to t1, reaches t1 there.
	bind(platform.Binding{Kind: platform.BindUser, ID: ada, Tenant: "t1"})
	r.converse(t, biz3, ada, "wamid.O5")
	if got := r.sink.all(); got[len(got)-1].Tenant != "t1" {
		t.Fatalf("Ada on biz3 reached %s", got[len(got)-1].Tenant)
	}
	linked := prompt("t1")
	if s := r.fake.Sent(); s[len(s)-1].PhoneNumberID != biz3.PhoneNumberID {
		t.Fatalf("t1's prompt went out from %s", s[len(s)-1].PhoneNumberID)
	}
	// Ada links to t2 as well and makes it her DM default: her messages
	// to biz3 now reach t2, but the tap on t1's prompt is t1's.
	bind(platform.Binding{Kind: platform.BindUser, ID: ada, Tenant: "t1"}, platform.Binding{Kind: platform.BindUser, ID: ada, Tenant: "t2"},
		platform.Binding{Kind: platform.BindDMDefault, ID: ada, Tenant: "t2"})
	before = len(r.sink.all())
	tap(biz3, "wamid.O6", linked)
	if got := r.sink.all()[before:]; len(got) != 1 || got[0].Tenant != "t1" || got[0].Event.PromptResponse == nil ||
		got[0].Event.PromptResponse.OptionID != "yes" || got[0].Event.MessageType != contract.MessageCommand {
		t.Fatalf("a tap on t1's prompt on biz3 with t2 the DM default: %+v", got)
	}
	// Once Ada is no longer linked to t1, a second tap on its (answered)
	// prompt reaches nobody either, not t2 as text.
	bind(platform.Binding{Kind: platform.BindUser, ID: ada, Tenant: "t2"})
	tap(biz3, "wamid.O7", linked)
	if got := r.sink.all()[before:]; len(got) != 1 {
		t.Fatalf("a tap on t1's answered prompt after t1 lost Ada went to %s as %+v", got[1].Tenant, got[1].Event)
	}
	if n := r.stats.get(r.stats.dropped, dropPromptNotOwned); n != 2 {
		t.Fatalf("%d taps dropped as %s, want 2", n, dropPromptNotOwned)
	}
}

// TestTwoTapsOnTwoInstancesAnswerOnce: the user taps a prompt twice and
// Meta hands the taps to two instances at once; while the first is being
// stored as the prompt's answer the second is answered 503, and Meta's
// retry of it is an ordinary text turn: the prompt is answered once.
func TestTwoTapsOnTwoInstancesAnswerOnce(t *testing.T) {
	shared, st := vault.NewMemory(vault.Config{}), store.NewMemory(nil)
	t.Cleanup(func() { st.Close() })
	node := func(name string) *cluster.Node {
		n, err := cluster.New(cluster.Config{Instance: name, PubSub: st.PubSub()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	a := newRig(t, shared, func(_ *Config, d *platform.Deps) { d.Cluster, d.Store = node("i1"), st })
	b := newRig(t, shared, func(_ *Config, d *platform.Deps) { d.Cluster, d.Store = node("i2"), st })
	const ada = "447700900123"
	a.converse(t, biz1, ada, "wamid.A0")
	res := a.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "yes", "label": "Yes"}, map[string]any{"id": "no", "label": "No"}}})
	if !res.Success {
		t.Fatal(res)
	}
	slow := blockingSink{recordingSink: a.sink, entered: make(chan struct{}), release: make(chan struct{})}
	a.p.sink.Store(ptr[platform.Sink](slow))
	release := sync.OnceFunc(func() { close(slow.release) })
	defer release() // a failing check must not leave a's handler blocked
	first := make(chan int)
	go func() {
		first <- a.post(t, whatsapptest.Tap(biz1, ada, "Ada", "wamid.A1", res.MessageID, "hp1:p1:yes", "Yes", false))
	}()
	select {
	case <-slow.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first instance never delivered the first tap")
	}
	second := whatsapptest.Tap(biz1, ada, "Ada", "wamid.A2", res.MessageID, "hp1:p1:no", "No", false)
	if code := b.post(t, second); code != http.StatusServiceUnavailable {
		t.Fatalf("the second tap, while the first is being stored: %d, want 503", code)
	}
	release()
	if code := <-first; code != 200 {
		t.Fatalf("first tap: %d", code)
	}
	if code := b.post(t, second); code != 200 {
		t.Fatalf("Meta's retry of the second tap: %d", code)
	}
	var answers []string
	for _, d := range append(a.sink.all(), b.sink.all()...) {
		if pr := d.Event.PromptResponse; pr != nil {
			answers = append(answers, pr.OptionID)
		}
	}
	if len(answers) != 1 || answers[0] != "yes" {
		t.Fatalf("the prompt was answered with %v, want once with yes", answers)
	}
	if got := b.sink.all(); len(got) != 1 || got[0].Event.Text != "No" {
		t.Fatalf("the second tap on b: %+v, want a text turn", got)
	}
}

// ctxVault is a vault whose writes fail once their context is done, as
// the durable vault's store calls do.
type ctxVault struct{ vault.Store }

func (v ctxVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return v.Store.Put(ctx, k, e)
}

// cancelAfter is a transport that cancels the caller's context once Meta
// has answered (the answer read in full): the op's deadline passes right
// after the Graph call.
type cancelAfter struct{ cancel context.CancelFunc }

func (c cancelAfter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	c.cancel()
	return resp, err
}

// TestPromptRecordedWhenTheDeadlinePassesAfterItWasSent: a prompt Meta
// took is recorded even when the op's context ends right after, so its
// tap is the prompt's answer, not a text turn.
func TestPromptRecordedWhenTheDeadlinePassesAfterItWasSent(t *testing.T) {
	r := newRig(t, ctxVault{vault.NewMemory(vault.Config{})}, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.E0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.p.graph.hc = &http.Client{Transport: cancelAfter{cancel}}
	res := r.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpPrompt, ChatID: ada, Content: "Deploy?", PromptID: "p1",
		Options: []contract.PromptOption{{ID: "yes", Label: "Yes"}, {ID: "no", Label: "No"}}})
	if !res.Success {
		t.Fatalf("prompt: %+v", res)
	}
	if code := r.post(t, whatsapptest.Tap(biz1, ada, "Ada", "wamid.E1", res.MessageID, "hp1:p1:yes", "Yes", false)); code != 200 {
		t.Fatal(code)
	}
	if got := r.sink.all(); len(got) != 2 || got[1].Event.PromptResponse == nil {
		t.Fatalf("the tap: %+v, want the prompt's answer", got[len(got)-1].Event)
	}
}

// hangUpSink stores a delivery, then hangs up Meta's request (hangUp) and
// waits until the webhook's context has ended: Meta gave up waiting for
// the answer right after the message was stored.
type hangUpSink struct {
	*recordingSink
	hangUp context.CancelFunc
}

func (s hangUpSink) Deliver(ctx context.Context, d platform.Delivery) error {
	if err := s.recordingSink.Deliver(ctx, d); err != nil {
		return err
	}
	s.hangUp()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		return errors.New("the webhook's context did not end after Meta hung up")
	}
	return nil
}

// TestMessageStoredAsMetaHangsUpIsDeliveredOnce: when Meta stops waiting
// for the answer just after a message was stored (its webhook timeout),
// the delivered mark is written all the same, so Meta's retry is dropped.
func TestMessageStoredAsMetaHangsUpIsDeliveredOnce(t *testing.T) {
	r := newRig(t, ctxVault{vault.NewMemory(vault.Config{})}, nil)
	body := whatsapptest.Text(biz1, "447700900123", "Ada", "wamid.H1", "slow answer")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.p.sink.Store(ptr[platform.Sink](hangUpSink{recordingSink: r.sink, hangUp: cancel}))
	req := whatsapptest.SignedRequest(r.url, testSecret, body).WithContext(ctx)
	if resp, err := http.DefaultClient.Do(req); err == nil { // Meta hung up: no answer
		resp.Body.Close()
		t.Fatalf("Meta's request was answered %d after it hung up", resp.StatusCode)
	}
	r.p.sink.Store(ptr[platform.Sink](r.sink))
	if code := r.post(t, body); code != 200 { // Meta's retry
		t.Fatalf("retry: %d", code)
	}
	if n := len(r.sink.all()); n != 1 {
		t.Fatalf("delivered %d times, want once", n)
	}
}

// TestTapOnAnEarlierTenantsPrompt: t1 posted a prompt, and is deleted and
// created again under its id (the vault's Since moves to its new start)
// with the same number: a tap on the earlier t1's prompt is no prompt
// answer of the new t1's (it reaches the number's tenant as any tap on a
// prompt the connector does not know); a tap on the new t1's own prompt
// is. So too when the instance that created the new t1 has a clock 5 s
// behind the one that posted the prompt (skewed): the prompt was told
// apart by when it was stored, which that skew got wrong.
func TestTapOnAnEarlierTenantsPrompt(t *testing.T) {
	for _, skewed := range []bool{false, true} {
		t.Run(fmt.Sprintf("skewed %v", skewed), func(t *testing.T) { tapOnAnEarlierTenantsPrompt(t, skewed) })
	}
}

// tapOnAnEarlierTenantsPrompt is TestTapOnAnEarlierTenantsPrompt, t1
// created again by a clock 5 s behind (skewed).
func tapOnAnEarlierTenantsPrompt(t *testing.T, skewed bool) {
	clk := clocktest.New(time.Now())
	var began atomic.Int64
	since := func(tenant string) time.Time {
		if us := began.Load(); tenant == "t1" && us != 0 {
			return time.UnixMicro(us)
		}
		return time.Time{}
	}
	r := newRig(t, vault.NewMemory(vault.Config{Clock: clk, Since: since}), func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada = "447700900123"
	prompt := func() string {
		t.Helper()
		res := r.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
			"options": []any{map[string]any{"id": "yes", "label": "Yes"}}})
		if !res.Success {
			t.Fatalf("t1's prompt: %+v", res)
		}
		return res.MessageID
	}
	tap := func(wamid, promptMsg string) *contract.PromptResponse {
		t.Helper()
		before := len(r.sink.all())
		if code := r.post(t, whatsapptest.Tap(biz1, ada, "Ada", wamid, promptMsg, "hp1:p1:yes", "Yes", false)); code != 200 {
			t.Fatalf("tap %s: %d", wamid, code)
		}
		got := r.sink.all()[before:]
		if len(got) != 1 || got[0].Tenant != "t1" {
			t.Fatalf("tap %s delivered %+v, want one delivery to t1", wamid, got)
		}
		return got[0].Event.PromptResponse
	}
	began.Store(clk.Now().Add(-time.Hour).UnixMicro()) // the earlier t1's creation
	r.converse(t, biz1, ada, "wamid.O1")
	old := prompt()
	clk.Advance(time.Second)
	began.Store(clk.Now().UnixMicro())
	if skewed {
		began.Store(clk.Now().Add(-5 * time.Second).UnixMicro())
	}
	clk.Advance(time.Second)
	r.converse(t, biz1, ada, "wamid.O2")
	if pr := tap("wamid.O3", old); pr != nil {
		t.Fatalf("a tap on the earlier t1's prompt answered the new t1's: %+v", pr)
	}
	if pr := tap("wamid.O4", prompt()); pr == nil || pr.OptionID != "yes" {
		t.Fatalf("a tap on the new t1's prompt: %+v", pr)
	}
}

// TestMessageSentBeforeItsTenantBegan: t1 is deleted and created again
// under its id (the vault's Since moves to its new start) between a
// user's message being sent and Meta delivering it. The message reaches
// the new t1, which can answer it. Its conversation was stamped with the
// send time, which the vault took for the earlier t1's, so the answer was
// declined as a chat t1 may not act in.
func TestMessageSentBeforeItsTenantBegan(t *testing.T) {
	sent := time.Unix(1768480800, 0) // whatsapptest's message timestamp
	clk := clocktest.New(sent.Add(time.Minute))
	began := sent.Add(30 * time.Second)
	since := func(tenant string) time.Time {
		if tenant == "t1" {
			return began
		}
		return time.Time{}
	}
	r := newRig(t, vault.NewMemory(vault.Config{Clock: clk, Since: since}), func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.B1")
	if got := r.sink.all(); len(got) != 1 || got[0].Tenant != "t1" {
		t.Fatalf("delivered %+v, want the message to t1", got)
	}
	if res := r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "hi"}); !res.Success {
		t.Fatalf("t1's answer: %+v", res)
	}
}

// TestRemadeTenantQuotesNothingOfTheEarlier: t1 is deleted and created
// again under its id (the vault's Since moves to its new start) with the
// same number: a reply to a message of the earlier t1's conversation, the
// user's or the bot's, reaches the new t1 without the quoted text (it was
// received or sent before the new t1's creation), and the bot's message
// is not the new t1's own (reply_to.is_own false; before, it was); a reply
// to the new t1's own message quotes it, as its own. So too when the instance that created the
// new t1 has a clock 5 s behind this one's (skewed): the quotes were told
// apart by the time they were kept, which that skew got wrong (they are by
// the creations now; only a text kept while t1 had none is judged by its
// time, as the vault judges its entries: vault.Outdated).
func TestRemadeTenantQuotesNothingOfTheEarlier(t *testing.T) {
	for _, skewed := range []bool{false, true} {
		t.Run(fmt.Sprintf("skewed %v", skewed), func(t *testing.T) { remadeTenantQuotesNothing(t, skewed) })
	}
}

// remadeTenantQuotesNothing is TestRemadeTenantQuotesNothingOfTheEarlier,
// t1 created again by a clock 5 s behind (skewed).
func remadeTenantQuotesNothing(t *testing.T, skewed bool) {
	clk := clocktest.New(time.Now())
	var began atomic.Int64
	since := func(tenant string) time.Time {
		if us := began.Load(); tenant == "t1" && us != 0 {
			return time.UnixMicro(us)
		}
		return time.Time{}
	}
	began.Store(clk.Now().Add(-time.Hour).UnixMicro()) // the earlier t1's creation
	r := newRig(t, vault.NewMemory(vault.Config{Clock: clk, Since: since}), func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada = "447700900123"
	send := func(text string) string {
		t.Helper()
		res := r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": text})
		if !res.Success {
			t.Fatalf("t1's send: %+v", res)
		}
		return res.MessageID
	}
	reply := func(wamid, quoted, from string) *contract.ReplyTo {
		t.Helper()
		before := len(r.sink.all())
		msg := whatsapptest.Message(biz1, ada, "Ada", map[string]any{"id": wamid, "type": "text", "text": map[string]any{"body": "why?"},
			"context": map[string]any{"from": from, "id": quoted}})
		if code := r.post(t, msg); code != 200 {
			t.Fatalf("reply %s: %d", wamid, code)
		}
		got := r.sink.all()[before:]
		if len(got) != 1 || got[0].Tenant != "t1" || got[0].Event == nil || got[0].Event.ReplyTo == nil {
			t.Fatalf("reply %s delivered %+v, want one reply delivered to t1", wamid, got)
		}
		return got[0].Event.ReplyTo
	}
	r.converse(t, biz1, ada, "wamid.E1")
	earlier := send("the earlier t1's answer")
	clk.Advance(time.Second)
	began.Store(clk.Now().UnixMicro())
	if skewed {
		began.Store(clk.Now().Add(-5 * time.Second).UnixMicro())
	}
	clk.Advance(time.Second)
	if q := reply("wamid.E2", earlier, biz1.DisplayNumber); q.Text != "" || q.IsOwn {
		t.Fatalf("a reply to the earlier t1's answer quotes %+v to the new t1", q)
	}
	if q := reply("wamid.E3", "wamid.E1", ada); q.Text != "" {
		t.Fatalf("a reply to a message the earlier t1 received quotes %q to the new t1", q.Text)
	}
	if q := reply("wamid.E4", send("the new t1's answer"), biz1.DisplayNumber); q.Text != "the new t1's answer" || !q.IsOwn {
		t.Fatalf("a reply to the new t1's answer quotes %+v", q)
	}
}

// TestTenantDeclaredOverItsStoredOne: t1, stored through the registry,
// posts a prompt and an answer; the operator then declares t1 in the YAML,
// which shadows the stored t1 (its creation reads zero now) and which the
// relay keeps as the same tenant. A tap on the prompt is still t1's prompt
// answer, and a reply to the answer still quotes it. Both were kept with
// the stored t1's creation and taken for an earlier tenant's, as that is
// not the zero one.
func TestTenantDeclaredOverItsStoredOne(t *testing.T) {
	clk := clocktest.New(time.Now())
	var began atomic.Int64
	began.Store(clk.Now().Add(-time.Hour).UnixMicro())
	since := func(tenant string) time.Time {
		if us := began.Load(); tenant == "t1" && us != 0 {
			return time.UnixMicro(us)
		}
		return time.Time{}
	}
	r := newRig(t, vault.NewMemory(vault.Config{Clock: clk, Since: since}), func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.D1")
	prompt := r.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "yes", "label": "Yes"}}})
	answer := r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "t1's answer"})
	if !prompt.Success || !answer.Success {
		t.Fatalf("t1's prompt %+v and send %+v", prompt, answer)
	}
	began.Store(0) // declared in the YAML now
	clk.Advance(time.Second)
	next := func(wamid string, msg []byte) *contract.Event {
		t.Helper()
		before := len(r.sink.all())
		if code := r.post(t, msg); code != 200 {
			t.Fatalf("%s: %d", wamid, code)
		}
		got := r.sink.all()[before:]
		if len(got) != 1 || got[0].Tenant != "t1" || got[0].Event == nil {
			t.Fatalf("%s delivered %+v, want one event delivered to t1", wamid, got)
		}
		return got[0].Event
	}
	if pr := next("wamid.D2", whatsapptest.Tap(biz1, ada, "Ada", "wamid.D2", prompt.MessageID, "hp1:p1:yes", "Yes", false)).PromptResponse; pr == nil || pr.OptionID != "yes" {
		t.Errorf("a tap on t1's prompt once t1 is declared: %+v, want its answer", pr)
	}
	reply := whatsapptest.Message(biz1, ada, "Ada", map[string]any{"id": "wamid.D3", "type": "text", "text": map[string]any{"body": "why?"},
		"context": map[string]any{"from": ada, "id": answer.MessageID}})
	if ev := next("wamid.D3", reply); ev.ReplyTo == nil || ev.ReplyTo.Text != "t1's answer" {
		t.Errorf("a reply to t1's answer once t1 is declared quotes %+v", ev.ReplyTo)
	}
}

// TestQuoteAcrossADeclarationTakenOut: t1 is declared in the YAML (no
// creation) when it answers; the operator then takes the declaration out,
// so the stored t1, created an hour ago, stands again. A reply to the
// answer quotes it (it was kept after that creation). It quoted nothing:
// a text kept without a creation was taken for an earlier tenant's.
func TestQuoteAcrossADeclarationTakenOut(t *testing.T) {
	clk := clocktest.New(time.Now())
	var began atomic.Int64
	since := func(tenant string) time.Time {
		if us := began.Load(); tenant == "t1" && us != 0 {
			return time.UnixMicro(us)
		}
		return time.Time{}
	}
	r := newRig(t, vault.NewMemory(vault.Config{Clock: clk, Since: since}), func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.Q1")
	answer := r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "t1's answer"})
	if !answer.Success {
		t.Fatalf("t1's send: %+v", answer)
	}
	clk.Advance(time.Second)
	began.Store(clk.Now().Add(-time.Hour).UnixMicro()) // the declaration taken out
	reply := whatsapptest.Message(biz1, ada, "Ada", map[string]any{"id": "wamid.Q2", "type": "text", "text": map[string]any{"body": "why?"},
		"context": map[string]any{"from": ada, "id": answer.MessageID}})
	if code := r.post(t, reply); code != 200 {
		t.Fatalf("reply: %d", code)
	}
	if got := r.sink.all(); len(got) != 2 || got[1].Event == nil || got[1].Event.ReplyTo == nil || got[1].Event.ReplyTo.Text != "t1's answer" {
		t.Fatalf("the reply delivered %+v, want it to quote t1's answer", got)
	}
}

// TestPromptOfAnOpThatOutlivedItsTenant: t1's prompt reaches Meta, and t1
// is deleted and made again under its id (the vault's Since moves) before
// the op returns. Its record keeps the creation the op was authorized
// under, so a tap on it is no answer of the new t1's. Before, the record
// took the new creation, read as the op returned, and the tap went to the
// new t1 as its prompt's answer.
func TestPromptOfAnOpThatOutlivedItsTenant(t *testing.T) {
	clk := clocktest.New(time.Now())
	first, again := clk.Now().Add(-time.Hour), clk.Now().Add(time.Second)
	var fake atomic.Pointer[whatsapptest.Server]
	var armed atomic.Int64 // the messages Meta had before the prompt; -1: not yet
	armed.Store(-1)
	since := func(tenant string) time.Time {
		if f := fake.Load(); tenant == "t1" && f != nil && armed.Load() >= 0 && int64(len(f.Sent())) > armed.Load() {
			return again // made again once the prompt reached Meta
		}
		return first
	}
	r := newRig(t, vault.NewMemory(vault.Config{Clock: clk, Since: since}), func(_ *Config, d *platform.Deps) { d.Clock = clk })
	fake.Store(r.fake)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.O1")
	armed.Store(int64(len(r.fake.Sent())))
	res := r.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "yes", "label": "Yes"}}})
	if !res.Success {
		t.Fatalf("the earlier t1's prompt: %+v", res)
	}
	clk.Advance(2 * time.Second)
	r.converse(t, biz1, ada, "wamid.O2")
	before := len(r.sink.all())
	if code := r.post(t, whatsapptest.Tap(biz1, ada, "Ada", "wamid.O3", res.MessageID, "hp1:p1:yes", "Yes", false)); code != 200 {
		t.Fatalf("tap: %d", code)
	}
	for _, d := range r.sink.all()[before:] {
		if d.Event != nil && d.Event.PromptResponse != nil {
			t.Fatalf("a tap on the earlier t1's prompt answered the new t1's: %+v", d.Event.PromptResponse)
		}
	}
}

// TestQuoteOfAnAnswerThatOutlivedItsTenant: t1's answer, dispatched as
// t1 was first created, reaches Meta, and t1 is deleted and made again
// under its id before the op returns. A reply quoting it reaches the new
// t1 without its text and not as its own. Before, the quote memory kept
// the answer under the creation read as the op returned, the new one's,
// and the new t1 was handed the earlier t1's answer as its own.
func TestQuoteOfAnAnswerThatOutlivedItsTenant(t *testing.T) {
	clk := clocktest.New(time.Now())
	first, again := clk.Now().Add(-time.Hour), clk.Now().Add(time.Second)
	var fake atomic.Pointer[whatsapptest.Server]
	var armed atomic.Int64 // the messages Meta had before the answer; -1: not yet
	armed.Store(-1)
	since := func(tenant string) time.Time {
		if f := fake.Load(); tenant == "t1" && f != nil && armed.Load() >= 0 && int64(len(f.Sent())) > armed.Load() {
			return again // made again once the answer reached Meta
		}
		return first
	}
	r := newRig(t, vault.NewMemory(vault.Config{Clock: clk, Since: since}), func(_ *Config, d *platform.Deps) { d.Clock = clk })
	fake.Store(r.fake)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.U1")
	armed.Store(int64(len(r.fake.Sent())))
	ctx, cancel := context.WithTimeout(platform.WithCreation(context.Background(), first), 10*time.Second) // as the relay dispatched it
	defer cancel()
	res := r.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: ada, Content: "the earlier t1's answer"})
	if !res.Success {
		t.Fatalf("the earlier t1's send: %+v", res)
	}
	clk.Advance(2 * time.Second)
	before := len(r.sink.all())
	msg := whatsapptest.Message(biz1, ada, "Ada", map[string]any{"id": "wamid.U2", "type": "text", "text": map[string]any{"body": "why?"},
		"context": map[string]any{"from": biz1.DisplayNumber, "id": res.MessageID}})
	if code := r.post(t, msg); code != 200 {
		t.Fatalf("reply: %d", code)
	}
	got := r.sink.all()[before:]
	if len(got) != 1 || got[0].Tenant != "t1" || got[0].Event == nil || got[0].Event.ReplyTo == nil {
		t.Fatalf("the reply delivered %+v, want one reply delivered to t1", got)
	}
	if q := got[0].Event.ReplyTo; q.Text != "" || q.IsOwn {
		t.Fatalf("a reply to the earlier t1's answer reached the new t1 as %+v", q)
	}
}

// TestTapRoutedUnderTheCreationItsRecordWasJudgedFor: Ada taps t1's
// prompt; its record is read and judged t1's, then read again after the
// prompt's claim (store calls), and t1 is deleted and made again under its
// id meanwhile. The tap is delivered as routed for the earlier t1 (the
// relay then drops it), not for the new one, whose prompt it never
// answered (before, the creation was read after those store calls).
func TestTapRoutedUnderTheCreationItsRecordWasJudgedFor(t *testing.T) {
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var remade atomic.Bool
	since := func(tenant string) time.Time {
		if remade.Load() {
			return again
		}
		return first
	}
	v := &remakingVault{Memory: vault.NewMemory(vault.Config{Since: since}), remade: &remade}
	r := newRig(t, v, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.O1")
	res := r.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "yes", "label": "Yes"}}})
	if !res.Success {
		t.Fatalf("t1's prompt: %+v", res)
	}
	v.armed.Store(true)
	before := len(r.sink.all())
	if code := r.post(t, whatsapptest.Tap(biz1, ada, "Ada", "wamid.O2", res.MessageID, "hp1:p1:yes", "Yes", false)); code != 200 {
		t.Fatalf("tap: %d", code)
	}
	if !remade.Load() {
		t.Fatal("the tapped prompt's record was not read twice")
	}
	got := r.sink.all()[before:]
	if len(got) != 1 || got[0].Tenant != "t1" || !got[0].Created.Equal(first) {
		t.Fatalf("the tap delivered %+v, want one delivery to t1 as created %v (the earlier t1's)", got, first)
	}
}

// remakingVault is a vault.Memory that, once armed, marks its tenant made
// again (remade) on the second read of a prompt's record.
type remakingVault struct {
	*vault.Memory
	armed  atomic.Bool
	remade *atomic.Bool
	reads  atomic.Int32
}

func (v *remakingVault) Get(ctx context.Context, k vault.Key) (vault.Entry, bool) {
	e, ok := v.Memory.Get(ctx, k)
	if k.Kind == vault.KindWhatsAppPrompt && v.armed.Load() && v.reads.Add(1) == 2 {
		v.remade.Store(true)
	}
	return e, ok
}

// TestActionDispatchedForAnEarlierTenant: the relay took t1's send from
// its connection (platform.WithCreation), then t1 was deleted and made
// again under its id, the vault first: the send is declined, as on every
// platform (docs/contract.md check 8), and Ada gets nothing. Before, a
// platform without grants ran it, and the earlier t1 wrote to the new
// t1's user.
func TestActionDispatchedForAnEarlierTenant(t *testing.T) {
	clk := clocktest.New(time.Now())
	began := clk.Now().Add(-time.Hour)
	r := newRig(t, vault.NewMemory(vault.Config{Clock: clk, Since: func(string) time.Time { return began }}), func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.D1")
	send := &contract.Action{Op: contract.OpSend, ChatID: ada, Content: "hi"}
	ctx, cancel := context.WithTimeout(platform.WithCreation(t.Context(), began.Add(-time.Hour)), 10*time.Second)
	defer cancel()
	if res := r.p.Execute(ctx, "t1", send); res != contract.Declined(platformName) {
		t.Fatalf("the earlier t1's send once t1 was made again: %+v, want declined", res)
	}
	ctx, cancel = context.WithTimeout(platform.WithCreation(t.Context(), began), 10*time.Second)
	defer cancel()
	if res := r.p.Execute(ctx, "t1", send); !res.Success {
		t.Fatalf("t1's send as dispatched: %+v", res)
	}
}

// TestTapRoutedUnderItsRecordsCreation: Ada taps t1's prompt, whose record
// is judged t1's, and t1 is deleted and made again under its id right
// after (the vault's Since moves on its next read of t1). The tap is
// delivered as routed for the creation the record keeps (the relay then
// drops it), not for the new one. Before, the creation was read again
// after the record was judged.
func TestTapRoutedUnderItsRecordsCreation(t *testing.T) {
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var judged atomic.Bool // the tapped prompt's record was read
	var reads atomic.Int32 // t1's creation read since
	since := func(tenant string) time.Time {
		if tenant == "t1" && judged.Load() && reads.Add(1) > 1 {
			return again
		}
		return first
	}
	v := &judgingVault{Memory: vault.NewMemory(vault.Config{Since: since}), judged: &judged}
	r := newRig(t, v, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.R1")
	res := r.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "yes", "label": "Yes"}}})
	if !res.Success {
		t.Fatalf("t1's prompt: %+v", res)
	}
	v.armed.Store(true)
	before := len(r.sink.all())
	if code := r.post(t, whatsapptest.Tap(biz1, ada, "Ada", "wamid.R2", res.MessageID, "hp1:p1:yes", "Yes", false)); code != 200 {
		t.Fatalf("tap: %d", code)
	}
	got := r.sink.all()[before:]
	if len(got) != 1 || got[0].Tenant != "t1" || got[0].Event.PromptResponse == nil || !got[0].Created.Equal(first) {
		t.Fatalf("the tap delivered %+v, want t1's prompt_response as created %v (the record's)", got, first)
	}
}

// judgingVault is a vault.Memory that, once armed, sets judged as it
// reads a prompt's record.
type judgingVault struct {
	*vault.Memory
	armed  atomic.Bool
	judged *atomic.Bool
}

func (v *judgingVault) Get(ctx context.Context, k vault.Key) (vault.Entry, bool) {
	e, ok := v.Memory.Get(ctx, k)
	if k.Kind == vault.KindWhatsAppPrompt && v.armed.Load() {
		v.judged.Store(true)
	}
	return e, ok
}

// TestQuoteOfAnotherTenantsAnswer: t1's number moves to t2; a reply to
// t1's answer reaches t2 without its text and not as t2's own (before,
// is_own was true for any message of the number's), and a reply to t2's
// answer quotes it as t2's own.
func TestQuoteOfAnotherTenantsAnswer(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	send := func(tenant, text string) string {
		t.Helper()
		res := r.exec(t, tenant, map[string]any{"op": "send", "chat_id": ada, "content": text})
		if !res.Success {
			t.Fatalf("%s's send: %+v", tenant, res)
		}
		return res.MessageID
	}
	reply := func(wamid, quoted string) *contract.ReplyTo {
		t.Helper()
		before := len(r.sink.all())
		msg := whatsapptest.Message(biz1, ada, "Ada", map[string]any{"id": wamid, "type": "text", "text": map[string]any{"body": "why?"},
			"context": map[string]any{"from": biz1.DisplayNumber, "id": quoted}})
		if code := r.post(t, msg); code != 200 {
			t.Fatalf("reply %s: %d", wamid, code)
		}
		got := r.sink.all()[before:]
		if len(got) != 1 || got[0].Tenant != "t2" || got[0].Event == nil || got[0].Event.ReplyTo == nil {
			t.Fatalf("reply %s delivered %+v, want one reply delivered to t2", wamid, got)
		}
		return got[0].Event.ReplyTo
	}
	r.converse(t, biz1, ada, "wamid.Q1") // t1's number
	theirs := send("t1", "t1's answer")
	if err := r.p.Bind([]platform.Binding{{Kind: platform.BindPhoneNumber, ID: biz1.PhoneNumberID, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	r.converse(t, biz1, ada, "wamid.Q2")
	if q := reply("wamid.Q3", theirs); q.Text != "" || q.IsOwn {
		t.Fatalf("a reply to t1's answer reached t2 as %+v", q)
	}
	if q := reply("wamid.Q4", send("t2", "t2's answer")); q.Text != "t2's answer" || !q.IsOwn {
		t.Fatalf("a reply to t2's answer reached t2 as %+v", q)
	}
}

// TestQuoteOfAnAnswerSentFromAnotherInstance: t1's answer and prompt to
// Ada (linked to t1, on a number no tenant owns) go out from instance A;
// her replies quoting them reach instance B, which did not send them, on
// one store (a shared memory vault; Redis). Quoted for t1 they are its own;
// once Ada is linked to t2 instead, the answer quoted for t2 is not t2's
// own, nor, once Ada is linked to t1 again and t1 was deleted and made
// again, the new t1's. Before, B, whose quote memory missed, took any
// message of the bot's number for the tenant's own (is_own true).
func TestQuoteOfAnAnswerSentFromAnotherInstance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		quoteFromAnotherInstance(t, func(c vault.Config) (vault.Store, vault.Store) {
			v := vault.NewMemory(c)
			return v, v
		})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t, redistest.Options{})
		st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		quoteFromAnotherInstance(t, func(c vault.Config) (vault.Store, vault.Store) {
			return vault.NewDurable(st.Capabilities(), c), vault.NewDurable(st.Capabilities(), c)
		})
	})
}

// quoteFromAnotherInstance is TestQuoteOfAnAnswerSentFromAnotherInstance
// on the vaults of instances A and B that stores makes.
func quoteFromAnotherInstance(t *testing.T, stores func(vault.Config) (vault.Store, vault.Store)) {
	clk := clocktest.New(time.Now())
	var began atomic.Int64
	began.Store(clk.Now().Add(-time.Hour).UnixMicro())
	since := func(tenant string) time.Time {
		if tenant == "t1" {
			return time.UnixMicro(began.Load())
		}
		return time.Time{}
	}
	va, vb := stores(vault.Config{Clock: clk, Since: since})
	withClock := func(_ *Config, d *platform.Deps) { d.Clock = clk }
	a, b := newRig(t, va, withClock), newRig(t, vb, withClock)
	const ada = "447700900123"
	link := func(tenant string) {
		t.Helper()
		for _, r := range []*rig{a, b} {
			if err := r.p.Bind([]platform.Binding{{Kind: platform.BindUser, ID: ada, Tenant: tenant}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	reply := func(wamid, quoted, to string) *contract.ReplyTo {
		t.Helper()
		before := len(b.sink.all())
		msg := whatsapptest.Message(biz3, ada, "Ada", map[string]any{"id": wamid, "type": "text", "text": map[string]any{"body": "why?"},
			"context": map[string]any{"from": biz3.DisplayNumber, "id": quoted}})
		if code := b.post(t, msg); code != 200 {
			t.Fatalf("reply %s on B: %d", wamid, code)
		}
		got := b.sink.all()[before:]
		if len(got) != 1 || got[0].Tenant != to || got[0].Event == nil || got[0].Event.ReplyTo == nil {
			t.Fatalf("reply %s on B delivered %+v, want one reply delivered to %s", wamid, got, to)
		}
		return got[0].Event.ReplyTo
	}
	link("t1")
	a.converse(t, biz3, ada, "wamid.X1")
	res := a.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "t1's answer"})
	if !res.Success {
		t.Fatalf("t1's send on A: %+v", res)
	}
	answer := string(res.MessageID)
	res = a.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "yes", "label": "Yes"}, map[string]any{"id": "no", "label": "No"}}})
	if !res.Success {
		t.Fatalf("t1's prompt on A: %+v", res)
	}
	prompt := string(res.MessageID)
	if q := reply("wamid.X2", answer, "t1"); !q.IsOwn {
		t.Fatalf("a reply on B to t1's answer reached t1 as %+v, want its own", q)
	}
	if q := reply("wamid.X3", prompt, "t1"); !q.IsOwn {
		t.Fatalf("a reply on B to t1's prompt reached t1 as %+v, want its own", q)
	}
	link("t2")
	if q := reply("wamid.X4", answer, "t2"); q.IsOwn || q.Text != "" {
		t.Fatalf("a reply on B to t1's answer reached t2 as %+v", q)
	}
	link("t1")
	clk.Advance(time.Second)
	began.Store(clk.Now().UnixMicro()) // t1 deleted and made again
	clk.Advance(time.Second)
	if q := reply("wamid.X5", answer, "t1"); q.IsOwn || q.Text != "" {
		t.Fatalf("a reply on B to the earlier t1's answer reached the new t1 as %+v", q)
	}
}

// TestQuoteOfAnAnswerOverADayOld pins a limit docs/contract.md states: a
// reply to the bot's answer sent more than 24 hours ago is is_own, with its
// text, on the instance that sent it, whose quote memory keeps it however
// old, and neither on another instance: the vault's mark lasts 24 hours
// and carries no text.
func TestQuoteOfAnAnswerOverADayOld(t *testing.T) {
	clk := clocktest.New(time.Now())
	shared := vault.NewMemory(vault.Config{Clock: clk})
	withClock := func(_ *Config, d *platform.Deps) { d.Clock = clk }
	a, b := newRig(t, shared, withClock), newRig(t, shared, withClock)
	const ada = "447700900123"
	a.converse(t, biz1, ada, "wamid.D1")
	res := a.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "t1's answer"})
	if !res.Success {
		t.Fatalf("t1's send on A: %+v", res)
	}
	clk.Advance(vault.ChatGrantTTL + time.Hour)
	reply := func(r *rig, wamid string) *contract.ReplyTo {
		t.Helper()
		msg := whatsapptest.Message(biz1, ada, "Ada", map[string]any{"id": wamid, "type": "text", "text": map[string]any{"body": "why?"},
			"context": map[string]any{"from": biz1.DisplayNumber, "id": string(res.MessageID)}})
		if code := r.post(t, msg); code != 200 {
			t.Fatalf("reply %s: %d", wamid, code)
		}
		got := r.sink.all()
		if len(got) == 0 || got[len(got)-1].Event.ReplyTo == nil {
			t.Fatalf("reply %s delivered %+v", wamid, got)
		}
		return got[len(got)-1].Event.ReplyTo
	}
	if q := reply(a, "wamid.D2"); !q.IsOwn || q.Text != "t1's answer" {
		t.Errorf("a reply on the sending instance to a day-old answer: %+v, want its own with its text", q)
	}
	if q := reply(b, "wamid.D3"); q.IsOwn || q.Text != "" {
		t.Errorf("a reply on another instance to a day-old answer: %+v, want neither own nor text", q)
	}
}
