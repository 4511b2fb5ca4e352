package telegram

import (
	"context"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock/clocktest"
	"connector/internal/cluster"
	"connector/internal/redistest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/platform/telegram/telegramtest"
	"connector/store"
)

// TestSealClaimReleasedAcrossADeclaration: a stored tenant's seal is
// being sent (its send held) when the operator declares the tenant in the
// YAML (its creation becomes zero); the send fails. The declaration is
// taken back (the stored tenant's creation again), and the gateway's
// retry, on another instance sharing the store (a real redis-server), is
// sent at once. The failed seal released the claim under a key named by
// the creation at its release, not the one it took, so its claim stayed
// until it lapsed and the retry waited for it.
func TestSealClaimReleasedAcrossADeclaration(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	e, other, h := heldSealInstances(t, clk)
	created := e.created
	chat := telegramtest.ChatAda
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "Done.", Final: true}
	stored := clk.Now().Add(-time.Hour)
	created.made(tenant, stored)
	first := make(chan contract.Result, 1)
	go func() {
		a := seal
		first <- e.p.Execute(ctx, tenant, &a)
	}()
	select {
	case <-h.held:
	case <-time.After(waitFor):
		t.Fatal("the seal sent no message")
	}
	created.made(tenant, time.Time{}) // declared in the YAML
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 400, Description: "Bad Request: the send failed"})
	h.release()
	if r := <-first; r.Success {
		t.Fatalf("the seal whose send failed: %+v", r)
	}
	e.p.awaitReplacing()         // the failed seal releases its claim after its answer
	created.made(tenant, stored) // the declaration taken back
	retry := make(chan contract.Result, 1)
	go func() {
		a := seal
		retry <- other.Execute(ctx, tenant, &a)
	}()
	platformtest.WaitUntil(t, "the retried seal to answer, or wait for the failed seal's claim", func() bool { return clk.Sleepers() == 1 || len(retry) == 1 })
	if len(retry) == 0 {
		t.Fatal("the retried seal waits for the claim of a seal that failed")
	}
	if r := <-retry; !r.Success {
		t.Fatalf("the retried seal: %+v", r)
	}
	if msgs := e.fake.Messages(id); len(msgs) != 1 {
		t.Fatalf("the chat has %v, want the reply once", msgs)
	}
}

// heldSealInstances is two instances on clk sharing a store (a real
// redis-server) and a creations vault (e.created): e, whose first
// sendMessage is held (h), and other.
func heldSealInstances(t *testing.T, clk *clocktest.Fake) (e *env, other *Platform, h *heldAPI) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: redistest.Start(t, redistest.Options{}).URL(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	node := func(name string) *cluster.Node {
		n, err := cluster.New(cluster.Config{Instance: name, PubSub: st.PubSub()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		return n
	}
	h = holdFirst(t, "sendMessage")
	created := &creations{}
	deps := platform.Deps{Store: st, Clock: clk, Cluster: node("i0")}
	created.vault(&deps)
	e = newEnvDeps(t, deps, func(c *Config) { c.APIServerURL = h.URL })
	e.created = created
	h.to(e.fake.URL)
	cfg := e.p.cfg
	cfg.APIServerURL = e.fake.URL
	deps = platform.Deps{Store: st, Clock: clk, Cluster: node("i1")}
	created.vault(&deps)
	other, err = New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.transport.CloseIdleConnections)
	return e, other, h
}

// TestSealWaitingOutAClaimIsToldToRetry: a seal is being sent on one
// instance (its send held) when the gateway's retry of it reaches
// another, which waits for the first until its deadline: it fails
// unavailable saying another copy is in progress, retry. It said Telegram
// gave no answer before the deadline, though Telegram was never asked.
func TestSealWaitingOutAClaimIsToldToRetry(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other, h := heldSealInstances(t, clk)
	chat := telegramtest.ChatAda
	tenant := testChats[chat]
	seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "Done.", Final: true}
	go func() {
		a := seal
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		e.p.Execute(ctx, tenant, &a)
	}()
	select {
	case <-h.held:
	case <-time.After(waitFor):
		t.Fatal("the seal sent no message")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a := seal
	if r := other.Execute(ctx, tenant, &a); r.Success || r.Code != contract.CodeUnavailable || !strings.Contains(r.Error, "in progress; retry") {
		t.Fatalf("the retry that waited out the seal's claim: %+v", r)
	}
}

// TestDraftOfAnOpThatOutlivedItsTenant: a tenant's seal is being sent
// (its send held) when the tenant is deleted and made again under its id;
// the send then goes out. The new tenant's seal of the same draft_id and
// content, on the same instance or another sharing the store (a real
// redis-server), sends a reply of its own: the earlier seal's record
// keeps the creation it was authorized under. Before, the record took
// the new creation, read as the send returned, and the new tenant's seal
// was answered with the earlier tenant's message as its repeat.
func TestDraftOfAnOpThatOutlivedItsTenant(t *testing.T) {
	for _, there := range []bool{true, false} {
		t.Run("sealed where sealed before "+strconv.FormatBool(there), func(t *testing.T) {
			clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			e, other, h := heldSealInstances(t, clk)
			chat := telegramtest.ChatAda
			tenant := testChats[chat]
			id, _ := strconv.ParseInt(chat, 10, 64)
			seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "Done.", Final: true}
			e.created.made(tenant, clk.Now().Add(-time.Hour))
			first := make(chan contract.Result, 1)
			go func() {
				a := seal
				first <- e.p.Execute(ctx, tenant, &a)
			}()
			select {
			case <-h.held:
			case <-time.After(waitFor):
				t.Fatal("the earlier tenant's seal sent no message")
			}
			clk.Advance(time.Second)
			e.created.made(tenant, clk.Now())
			h.release()
			r1 := <-first
			sealer := other
			if there {
				sealer = e.p
			}
			a := seal
			r2 := sealer.Execute(ctx, tenant, &a)
			if !r1.Success || !r2.Success || r1.MessageID == r2.MessageID {
				t.Fatalf("the earlier tenant's seal %+v, the new tenant's %+v: want two messages", r1, r2)
			}
			if msgs := e.fake.Messages(id); len(msgs) != 2 {
				t.Fatalf("the chat has %v, want both tenants' replies", msgs)
			}
		})
	}
}

// TestPreviewOfAFrameThatOutlivedItsTenant: a tenant's first group frame
// is looking for its stream's seal in the store when the tenant is
// deleted and made again under its id; the frame then shows its preview.
// The new tenant's stream under the same draft_id sends a preview and a
// reply of its own and leaves the earlier tenant's preview as it was. The
// preview took the tenant's creation as it was opened, after the store
// read, so the new tenant's frames edited the earlier tenant's message.
func TestPreviewOfAFrameThatOutlivedItsTenant(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, _ := sharedStoreEnv(t, clk)
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	e.created.made(tenant, clk.Now().Add(-time.Hour))
	remade := false
	e.p.seals = hookedSeals{Capabilities: e.p.seals, onGet: func() {
		if !remade {
			remade = true
			clk.Advance(time.Second)
			e.created.made(tenant, clk.Now())
		}
	}}
	frame := func(content string, final bool) contract.Result {
		t.Helper()
		r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: content, Final: final})
		if !r.Success {
			t.Fatalf("%q: %+v", content, r)
		}
		return r
	}
	frame("the earlier preview", false)
	frame("the new preview", false)
	reply := frame("the new reply", true)
	msgs := e.fake.Messages(id)
	replyID, _ := strconv.Atoi(reply.MessageID)
	if len(msgs) != 2 || msgs[replyID] != "the new reply" || !slices.Contains(slices.Collect(maps.Values(msgs)), "the earlier preview") {
		t.Fatalf("the chat has %v (the reply %s), want the earlier tenant's preview as it was and the new tenant's reply", msgs, reply.MessageID)
	}
}

// TestPreviewOfAFrameThatOutlivedItsTenantAfterTheNewOnes: as
// TestPreviewOfAFrameThatOutlivedItsTenant, but the new tenant's first
// frame under the same draft_id shows its preview while the earlier
// tenant's frame waits. The earlier frame then leaves the new preview as
// it is and shows its content in a message of its own: it does not edit
// the new tenant's message (openPreview replaces an open preview of a
// later creation than the frame's).
func TestPreviewOfAFrameThatOutlivedItsTenantAfterTheNewOnes(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, _ := sharedStoreEnv(t, clk)
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	e.created.made(tenant, clk.Now().Add(-time.Hour))
	frame := func(content string) contract.Result {
		t.Helper()
		r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: content})
		if !r.Success {
			t.Fatalf("%q: %+v", content, r)
		}
		return r
	}
	remade := false
	e.p.seals = hookedSeals{Capabilities: e.p.seals, onGet: func() {
		if !remade {
			remade = true
			clk.Advance(time.Second)
			e.created.made(tenant, clk.Now())
			frame("the new preview")
		}
	}}
	frame("the earlier preview")
	msgs := e.fake.Messages(id)
	if len(msgs) != 2 || !slices.Contains(slices.Collect(maps.Values(msgs)), "the new preview") {
		t.Fatalf("the chat has %v, want the new tenant's preview as it was and the earlier tenant's apart", msgs)
	}
	// The earlier frame's record does not replace the new tenant's: its
	// next frame edits its own preview, not a message of its own.
	frame("the new preview, longer")
	msgs = e.fake.Messages(id)
	if len(msgs) != 2 || !slices.Contains(slices.Collect(maps.Values(msgs)), "the new preview, longer") {
		t.Fatalf("the chat has %v, want the new tenant's preview edited and the earlier tenant's apart", msgs)
	}
}

// heldReleases are seal claims whose releases wait for gate (or their
// deadline), a slow store.
type heldReleases struct {
	store.Claims
	gate chan struct{}
}

func (h heldReleases) Release(ctx context.Context, key string, expires time.Time) error {
	select {
	case <-h.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.Claims.Release(ctx, key, expires)
}

// TestFailedSealAnsweredBeforeItsClaimIsReleased: a seal's send fails
// while the store is slow to release the seal's claim (its release held):
// the failure is answered at once, and the claim is released after. The
// release ran before the answer, so a slow store held the gateway's
// answer for up to a request_timeout.
func TestFailedSealAnsweredBeforeItsClaimIsReleased(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.RequestTimeout = time.Minute })
	gate := make(chan struct{})
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
		e.p.awaitReplacing()
	}()
	e.p.claims = heldReleases{platform.NewLocalState(16, e.p.deps.Clock), gate}
	chat := telegramtest.ChatAda
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "Done.", Final: true}
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 400, Description: "Bad Request: the send failed"})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	answered := make(chan contract.Result, 1)
	go func() {
		a := seal
		answered <- e.p.Execute(ctx, tenant, &a)
	}()
	select {
	case r := <-answered:
		if r.Success {
			t.Fatalf("the seal whose send failed: %+v", r)
		}
	case <-ctx.Done():
		close(gate)
		t.Fatalf("the failed seal was not answered within %v while its claim's release was held", waitFor)
	}
	close(gate)
	e.p.awaitReplacing()
	key := e.p.sealingKey(draftKey{tenant, id, 1}, &seal)
	if ok, err := e.p.claims.Claim(ctx, key, e.p.deps.Clock.Now().Add(time.Minute)); err != nil || !ok {
		t.Fatalf("the failed seal's claim after its release: taken %v, %v; want it released", ok, err)
	}
}

// TestSealRetriedBeforeItsReleaseWaitsForIt: a seal's send fails and the
// gateway retries it at once, on another instance sharing the store (a
// real redis-server), while the failed seal's claim is still being
// released after its answer (the store slow to release it). The retry
// waits for the release (it looks again every sealPoll), then sends the
// seal, once: it is neither refused nor sent twice.
func TestSealRetriedBeforeItsReleaseWaitsForIt(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	e, other, h := heldSealInstances(t, clk)
	gate := make(chan struct{})
	e.p.claims = heldReleases{e.p.claims, gate}
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
		e.p.awaitReplacing()
	}()
	chat := telegramtest.ChatAda
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "Done.", Final: true}
	first := make(chan contract.Result, 1)
	go func() {
		a := seal
		first <- e.p.Execute(ctx, tenant, &a)
	}()
	select {
	case <-h.held:
	case <-time.After(waitFor):
		t.Fatal("the seal sent no message")
	}
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 400, Description: "Bad Request: the send failed"})
	h.release()
	if r := <-first; r.Success {
		t.Fatalf("the seal whose send failed: %+v", r)
	}
	retry := make(chan contract.Result, 1)
	go func() {
		a := seal
		retry <- other.Execute(ctx, tenant, &a)
	}()
	platformtest.WaitUntil(t, "the retried seal to wait for the failed seal's claim", func() bool { return clk.Sleepers() == 1 || len(retry) == 1 })
	if len(retry) == 1 {
		t.Fatalf("the retry before the failed seal's release: %+v, want it to wait for the release", <-retry)
	}
	close(gate)
	e.p.awaitReplacing() // the release done
	clk.Advance(sealPoll)
	if r := <-retry; !r.Success {
		t.Fatalf("the retried seal after the release: %+v", r)
	}
	if msgs := e.fake.Messages(id); len(msgs) != 1 {
		t.Fatalf("the chat has %v, want the reply once", msgs)
	}
}

// TestSealRetriedHereBeforeItsReleaseWaitsForIt: a seal's send fails and
// the gateway retries it at once on the same instance, while the failed
// seal's claim is still being released after its answer (the store slow
// to release it). The retry waits for the release and, once it is done,
// sends the seal at once, the clock not moved. Before, it looked again
// only at its next poll (sealPoll later).
func TestSealRetriedHereBeforeItsReleaseWaitsForIt(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	e, _, h := heldSealInstances(t, clk)
	gate := make(chan struct{})
	e.p.claims = heldReleases{e.p.claims, gate}
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
		clk.Advance(sealPoll) // a retry still polling ends
		e.p.awaitReplacing()
	}()
	chat := telegramtest.ChatAda
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "Done.", Final: true}
	first := make(chan contract.Result, 1)
	go func() {
		a := seal
		first <- e.p.Execute(ctx, tenant, &a)
	}()
	select {
	case <-h.held:
	case <-time.After(waitFor):
		t.Fatal("the seal sent no message")
	}
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 400, Description: "Bad Request: the send failed"})
	h.release()
	select {
	case r := <-first:
		if r.Success {
			t.Fatalf("the seal whose send failed: %+v", r)
		}
	case <-time.After(waitFor):
		t.Fatalf("the seal whose send failed was not answered within %v", waitFor)
	}
	read := make(chan struct{}, 1)
	e.p.seals = markedReads{e.p.seals, "telegram/seal/", read}
	retry := make(chan contract.Result, 1)
	go func() {
		a := seal
		retry <- e.p.Execute(ctx, tenant, &a)
	}()
	select {
	case <-read: // the retry looked for the seal's record, then waits for the claim
	case r := <-retry:
		t.Fatalf("the retry before the failed seal's release: %+v, want it to wait for the release", r)
	case <-ctx.Done():
		t.Fatal("the retry did not look for the seal's record")
	}
	// The release goes on only once the retry waits: for the release
	// (awaitRelease), or, before, on the clock after the claim was
	// refused; a release done before the retry's claim passed either way.
	platformtest.WaitUntil(t, "the retry to wait for the failed seal's claim", func() bool {
		return clk.Sleepers() == 1 || len(retry) == 1 || stacksHold("telegram.(*Platform).awaitRelease")
	})
	close(gate)
	select {
	case r := <-retry:
		if !r.Success {
			t.Fatalf("the retried seal after the release: %+v", r)
		}
	case <-ctx.Done():
		t.Fatalf("the retried seal not answered within %v of the release, the clock not moved", waitFor)
	}
	if msgs := e.fake.Messages(id); len(msgs) != 1 {
		t.Fatalf("the chat has %v, want the reply once", msgs)
	}
}

// stacksHold reports whether a goroutine's stack holds fn.
func stacksHold(fn string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), fn)
}

// markedReads is a seal store that reports each read of a key under
// prefix on read (when it has room).
type markedReads struct {
	store.Capabilities
	prefix string
	read   chan struct{}
}

func (m markedReads) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, ok, err := m.Capabilities.Get(ctx, key)
	if strings.HasPrefix(key, m.prefix) {
		select {
		case m.read <- struct{}{}:
		default:
		}
	}
	return v, ok, err
}
