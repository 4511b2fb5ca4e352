package telegram

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// heldAPI is a front for the fake Bot API (to) that holds the first call
// of one method until release; held is closed once that call came.
type heldAPI struct {
	URL      string
	held     chan struct{}
	released chan struct{}
	target   atomic.Pointer[url.URL]
	once     sync.Once
}

// holdFirst starts a heldAPI holding method; the test's end releases it.
func holdFirst(t *testing.T, method string) *heldAPI {
	h := &heldAPI{held: make(chan struct{}), released: make(chan struct{})}
	var first sync.Once
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(h.target.Load()) }}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/"+method) {
			first.Do(func() {
				close(h.held)
				<-h.released
			})
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	t.Cleanup(h.release) // before front.Close: a held call ends first
	h.URL = front.URL
	return h
}

// to points the front at the fake Bot API at fakeURL.
func (h *heldAPI) to(fakeURL string) {
	u, _ := url.Parse(fakeURL)
	h.target.Store(u)
}

// release lets the held call go on; later calls are not held.
func (h *heldAPI) release() { h.once.Do(func() { close(h.released) }) }

// TestPreviewSentWhileASendReplacesIt: a group draft's first frame is
// still sending its preview (sendMessage held) when the tenant's send
// into the chat looks for previews to replace: the send waits for the
// preview and deletes it. The frame used to rewrite the preview's topic
// once sent, which the send reads unlocked: a data race, reported under
// -race.
func TestPreviewSentWhileASendReplacesIt(t *testing.T) {
	h := holdFirst(t, "sendMessage")
	e := newEnv(t, func(c *Config) { c.APIServerURL = h.URL })
	h.to(e.fake.URL)

	chat := telegramtest.ChatT2
	frame := make(chan contract.Result, 1)
	go func() {
		frame <- e.act(t, "t2", contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 7, Content: "thinking"})
	}()
	select {
	case <-h.held:
	case <-time.After(waitFor):
		t.Fatal("the draft frame sent no preview")
	}
	sent := make(chan contract.Result, 1)
	go func() { sent <- e.act(t, "t2", sendAction(chat, "the answer")) }()
	h.release()
	if r := <-frame; !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	if r := <-sent; !r.Success {
		t.Fatalf("send: %+v", r)
	}
	e.calls(t, "deleteMessage", 1)
}

// TestDraftIDsOfTenantsSharingADM: a user linked to t1 and t2 has one DM
// both may stream drafts into, and both gateways name their stream
// draft_id 1. Telegram keys a native draft by chat and draft_id, so each
// tenant's frames must reach it under an id of their own: t1, the home,
// keeps 1, t2 gets another, each draft shows its own tenant's text after
// the other's frame, and each seal becomes its tenant's message. Both
// used to go out as draft_id 1, t2's frame replacing t1's preview.
func TestDraftIDsOfTenantsSharingADM(t *testing.T) {
	e := newEnv(t, nil)
	bindings := []platform.Binding{
		{Kind: platform.BindUser, ID: "501", Tenant: "t1"},
		{Kind: platform.BindUser, ID: "501", Tenant: "t2"},
	}
	for chat, tenant := range testChats {
		bindings = append(bindings, platform.Binding{Kind: platform.BindChat, ID: chat, Tenant: tenant})
	}
	if err := e.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	frame := func(tenant, content string, final bool) contract.Result {
		t.Helper()
		r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: "501", DraftID: 1, Content: content, Final: final})
		if !r.Success {
			t.Fatalf("%s draft %q: %+v", tenant, content, r)
		}
		return r
	}
	frame("t1", "t1 thinking", false)
	frame("t2", "t2 thinking", false)
	frame("t1", "t1 still thinking", false)
	frame("t2", "t2 still thinking", false)
	calls := e.calls(t, "sendMessageDraft", 4)
	ids := map[string]string{}
	for _, c := range calls {
		tenant := c.Form["text"][:2]
		if id, ok := ids[tenant]; ok && id != c.Form["draft_id"] {
			t.Fatalf("%s's frames went out as draft_id %s and %s", tenant, id, c.Form["draft_id"])
		}
		ids[tenant] = c.Form["draft_id"]
	}
	if ids["t1"] != "1" || ids["t2"] == ids["t1"] {
		t.Fatalf("draft ids on the wire %v: want t1's 1 and another for t2", ids)
	}
	t2id, _ := strconv.ParseInt(ids["t2"], 10, 64)
	for id, want := range map[int64]string{1: "t1 still thinking", t2id: "t2 still thinking"} {
		if text, ok := e.fake.Draft(501, 0, id); !ok || text != want {
			t.Errorf("draft %d shows %q (%v), want %q", id, text, ok, want)
		}
	}
	for _, tenant := range []string{"t1", "t2"} {
		r := frame(tenant, tenant+" answer", true)
		id, _ := strconv.Atoi(r.MessageID)
		if got := e.fake.Messages(501)[id]; got != tenant+" answer" {
			t.Errorf("%s's sealed message %d is %q", tenant, id, got)
		}
	}
}

// TestDraftIDsOfTenantsSharingADMAcrossInstances: the DM of a user linked
// to t1 and t2, whose gateways are served by two instances of the
// connector, each naming its stream draft_id 1. Each instance knows only
// its own streams, so t2's (on the first instance) and t1's (on the
// second) each went out as draft_id 1, the later frame replacing the
// other tenant's draft in the chat. The DM's home tenant (t1, the first
// linked) keeps its ids; another tenant's reach Telegram under ids of its
// own on every instance.
func TestDraftIDsOfTenantsSharingADMAcrossInstances(t *testing.T) {
	e := newEnv(t, nil)
	cfg := e.p.cfg
	other, err := New(cfg, platform.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.transport.CloseIdleConnections)
	bindings := []platform.Binding{
		{Kind: platform.BindUser, ID: "501", Tenant: "t1"},
		{Kind: platform.BindUser, ID: "501", Tenant: "t2"},
	}
	for _, p := range []*Platform{e.p, other} {
		if err := p.Bind(bindings); err != nil {
			t.Fatal(err)
		}
	}
	frame := func(p *Platform, tenant, content string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		a := contract.Action{Op: contract.OpDraft, ChatID: "501", DraftID: 1, Content: content}
		if r := p.Execute(ctx, tenant, &a); !r.Success {
			t.Fatalf("%s draft %q: %+v", tenant, content, r)
		}
	}
	frame(e.p, "t2", "t2 thinking")
	frame(other, "t1", "t1 thinking")
	ids := map[string]string{}
	for _, c := range e.calls(t, "sendMessageDraft", 2) {
		ids[c.Form["text"][:2]] = c.Form["draft_id"]
	}
	if ids["t1"] == ids["t2"] {
		t.Fatalf("both tenants' drafts went out as draft_id %s", ids["t1"])
	}
	for tenant, id := range ids {
		n, _ := strconv.ParseInt(id, 10, 64)
		if text, ok := e.fake.Draft(501, 0, n); !ok || text != tenant+" thinking" {
			t.Errorf("%s's draft %d shows %q (%v)", tenant, n, text, ok)
		}
	}
}

// TestDraftIDReusedAfterTheSealWindow: the gateway numbers its draft
// streams from 1 in each process, so after a restart it names a draft_id
// it sealed before in the same chat. A repeated seal (the gateway retries
// an ambiguous one) shortly after is answered from the first; a seal with
// other content, or one after sealRetryWindow, is a new stream and becomes
// a message of its own. Both used to answer the old message and send
// nothing, so the user never saw the reply. Private chat and group alike.
func TestDraftIDReusedAfterTheSealWindow(t *testing.T) {
	for _, chat := range []string{telegramtest.ChatAda, telegramtest.ChatT2} {
		t.Run(chat, func(t *testing.T) {
			clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
			e := newEnvOn(t, clk, nil)
			tenant := testChats[chat]
			id, _ := strconv.ParseInt(chat, 10, 64)
			seal := func(content string) string {
				t.Helper()
				if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: content + " thinking"}); !r.Success {
					t.Fatalf("draft frame %q: %+v", content, r)
				}
				r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: content, Final: true})
				n, _ := strconv.Atoi(r.MessageID)
				if !r.Success || e.fake.Messages(id)[n] != content {
					t.Fatalf("seal %q = %+v, the message says %q", content, r, e.fake.Messages(id)[n])
				}
				return r.MessageID
			}
			first := seal("first answer")
			clk.Advance(sealRetryWindow / 2)
			if retry := seal("first answer"); retry != first {
				t.Fatalf("a retried seal became message %s, want %s", retry, first)
			}
			second := seal("second answer")
			if second == first {
				t.Fatalf("a seal with other content was answered with the first message %s", first)
			}
			clk.Advance(sealRetryWindow + time.Second)
			if third := seal("second answer"); third == second {
				t.Fatalf("a seal after the window was answered with message %s", second)
			}
		})
	}
}

// TestRetriedSealOnAnotherInstance: a seal's result is lost (the gateway's
// connection drops), the gateway reconnects to another instance sharing
// the store (a real redis-server) and retries the seal there. The retry
// is answered with the first seal's message id and sends nothing; the seal
// record was per instance, so the second instance sent the reply again.
// Private chat and group alike.
func TestRetriedSealOnAnotherInstance(t *testing.T) {
	for _, chat := range []string{telegramtest.ChatAda, telegramtest.ChatT2} {
		t.Run(chat, func(t *testing.T) {
			clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
			e, other := sharedStoreEnv(t, clk)
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			tenant := testChats[chat]
			id, _ := strconv.ParseInt(chat, 10, 64)
			seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answer", Final: true}
			if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the ans"}); !r.Success {
				t.Fatalf("draft frame: %+v", r)
			}
			first := e.act(t, tenant, seal)
			if !first.Success || first.MessageID == "" {
				t.Fatalf("seal on the first instance: %+v", first)
			}
			sent := len(e.fake.Messages(id))
			clk.Advance(sealRetryWindow / 2)
			retry := other.Execute(ctx, tenant, &seal)
			if !retry.Success || retry.MessageID != first.MessageID {
				t.Fatalf("the retried seal on the other instance = %+v, want message %s", retry, first.MessageID)
			}
			if n := len(e.fake.Messages(id)); n != sent {
				t.Fatalf("the retried seal sent %d more messages: %v", n-sent, e.fake.Messages(id))
			}
		})
	}
}

// TestLateGroupFrameAfterASealOnAnotherInstance: a group stream is sealed
// on one instance, then a late frame of it (sent before the seal, slowed
// on the way) reaches another instance sharing the store (a real
// redis-server), as after the gateway reconnected there. The frame shows
// nothing: the stream's seal is in the store. The check was this
// instance's memory only, so the other instance sent the frame as a new
// preview message that no seal or send ever replaced.
func TestLateGroupFrameAfterASealOnAnotherInstance(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other := sharedStoreEnv(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the ans"}); !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answer", Final: true}); !r.Success {
		t.Fatalf("seal: %+v", r)
	}
	before := e.fake.Messages(id)
	late := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answ"}
	if r := other.Execute(ctx, tenant, &late); !r.Success {
		t.Fatalf("late frame on the other instance: %+v", r)
	}
	if after := e.fake.Messages(id); len(after) != len(before) {
		t.Fatalf("the late frame on the other instance sent a message: %v, before %v", after, before)
	}
	if n := len(e.fake.Calls("editMessageText")); n != 1 {
		t.Fatalf("editMessageText called %d times, want the seal's 1", n)
	}
}

// hookedSeals is a seal store that calls onGet after each read.
type hookedSeals struct {
	store.Capabilities
	onGet func()
}

func (h hookedSeals) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, ok, err := h.Capabilities.Get(ctx, key)
	h.onGet()
	return v, ok, err
}

// TestGroupFrameRacingItsSeal: a group stream's seal is editing the
// preview into the reply (editMessageText held) when a late frame of the
// stream comes in on the same instance and finds no seal yet. Once the
// seal is done the frame shows nothing. It used to wait for the preview,
// find it closed by the seal, and send a new preview message after the
// reply, which nothing ever replaced.
func TestGroupFrameRacingItsSeal(t *testing.T) {
	h := holdFirst(t, "editMessageText")
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, func(c *Config) { c.APIServerURL = h.URL })
	h.to(e.fake.URL)
	var armed atomic.Bool
	checked := make(chan struct{})
	e.p.seals = hookedSeals{Capabilities: e.p.seals, onGet: func() {
		if armed.CompareAndSwap(true, false) {
			close(checked)
		}
	}}

	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the ans"}); !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	sealed := make(chan contract.Result, 1)
	go func() {
		sealed <- e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answer", Final: true})
	}()
	select {
	case <-h.held:
	case <-time.After(waitFor):
		t.Fatal("the seal edited no preview")
	}
	armed.Store(true)
	late := make(chan contract.Result, 1)
	go func() {
		late <- e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answ"})
	}()
	select {
	case <-checked:
	case <-time.After(waitFor):
		t.Fatal("the late frame did not look for the stream's seal")
	}
	h.release()
	if r := <-sealed; !r.Success {
		t.Fatalf("seal: %+v", r)
	}
	if r := <-late; !r.Success {
		t.Fatalf("late frame: %+v", r)
	}
	if msgs := e.fake.Messages(id); len(msgs) != 1 {
		t.Fatalf("the chat has %v, want the reply alone", msgs)
	}
}

// TestGroupFirstFrameRacingItsSeal: a group stream's seal comes with no
// preview shown yet on this instance and is sending the reply
// (sendMessage held) when the stream's frame, sent before it, comes in and
// finds no seal yet. Once the seal is done the frame shows nothing. It
// used to send a preview message of its own beside the reply, which
// nothing ever replaced.
func TestGroupFirstFrameRacingItsSeal(t *testing.T) {
	h := holdFirst(t, "sendMessage")
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, func(c *Config) { c.APIServerURL = h.URL })
	h.to(e.fake.URL)
	var armed atomic.Bool
	checked := make(chan struct{})
	e.p.seals = hookedSeals{Capabilities: e.p.seals, onGet: func() {
		if armed.CompareAndSwap(true, false) {
			close(checked)
		}
	}}

	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	sealed := make(chan contract.Result, 1)
	go func() {
		sealed <- e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answer", Final: true})
	}()
	select {
	case <-h.held:
	case <-time.After(waitFor):
		t.Fatal("the seal sent no message")
	}
	armed.Store(true)
	late := make(chan contract.Result, 1)
	go func() {
		late <- e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answ"})
	}()
	select {
	case <-checked:
	case <-time.After(waitFor):
		t.Fatal("the frame did not look for the stream's seal")
	}
	h.release()
	if r := <-sealed; !r.Success {
		t.Fatalf("seal: %+v", r)
	}
	if r := <-late; !r.Success {
		t.Fatalf("late frame: %+v", r)
	}
	if msgs := e.fake.Messages(id); len(msgs) != 1 {
		t.Fatalf("the chat has %v, want the reply alone", msgs)
	}
}

// sharedStoreEnv is an env whose platform and a second instance of it
// (other) share a store on a real redis-server and the fake clock clk;
// each has a vault on the store whose tenants were created as e.created
// says.
func sharedStoreEnv(t *testing.T, clk *clocktest.Fake) (e *env, other *Platform) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: redistest.Start(t, redistest.Options{}).URL(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	made := &creations{}
	deps := platform.Deps{Store: st, Clock: clk}
	made.vault(&deps)
	e = newEnvDeps(t, deps, nil)
	e.created = made
	deps = platform.Deps{Store: st, Clock: clk}
	made.vault(&deps)
	other, err = New(e.p.cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.transport.CloseIdleConnections)
	return e, other
}

// TestGroupStreamMovingToAnotherInstance: a group stream's first frames
// reach one instance, which shows them in a preview message; the gateway
// then reconnects to another instance sharing the store (a real
// redis-server, as in a rolling deploy), which gets the next frames and
// the seal. The chat ends with the reply alone, in the preview's message;
// and the tenant's next send through the first instance, for the same
// turn, leaves the reply be, as does a later stream reusing the draft_id.
// The open preview was known to the first instance only, so the second
// sent a preview of its own and the reply (the seal with no frame there),
// and the first one's stayed in the chat.
func TestGroupStreamMovingToAnotherInstance(t *testing.T) {
	for _, frames := range []int{1, 0} { // frames that reach the second instance before the seal
		t.Run(strconv.Itoa(frames)+" frames moved", func(t *testing.T) {
			clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
			e, other := sharedStoreEnv(t, clk)
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			chat := telegramtest.ChatT2
			tenant := testChats[chat]
			id, _ := strconv.ParseInt(chat, 10, 64)
			act := func(p *Platform, a contract.Action) contract.Result {
				t.Helper()
				a.ChatID = contract.ID(chat)
				a.Metadata.MessageID = "77"
				r := p.Execute(ctx, tenant, &a)
				p.awaitReplacing() // a group send deletes the previews it replaces after its answer
				if !r.Success {
					t.Fatalf("%s %q: %+v", a.Op, a.Content, r)
				}
				return r
			}
			frame := contract.Action{Op: contract.OpDraft, DraftID: 1}
			frame.Content = "the"
			act(e.p, frame)
			frame.Content = "the ans"
			act(e.p, frame)
			preview := e.fake.Messages(id)
			if len(preview) != 1 {
				t.Fatalf("the first instance's frames left %v, want one preview", preview)
			}
			if frames > 0 {
				frame.Content = "the answ"
				act(other, frame)
			}
			sealed := act(other, contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the answer", Final: true})
			n, _ := strconv.Atoi(sealed.MessageID)
			if msgs := e.fake.Messages(id); len(msgs) != 1 || msgs[n] != "the answer" {
				t.Fatalf("after the seal (message %d) the chat has %v (the preview was %v), want the reply alone", n, msgs, preview)
			}
			if _, ok := preview[n]; !ok {
				t.Fatalf("the reply is message %d, not the preview %v", n, preview)
			}
			act(e.p, contract.Action{Op: contract.OpSend, Content: "and one more thing"})
			if msgs := e.fake.Messages(id); len(msgs) != 2 || msgs[n] != "the answer" {
				t.Fatalf("after a send through the first instance the chat has %v, want the reply %d and the send", msgs, n)
			}
			// A gateway restarted names draft_id 1 again, past the seal's
			// window: a new stream, which must not take the reply as its preview.
			clk.Advance(sealRetryWindow + time.Second)
			frame.Content = "another"
			act(other, frame)
			if msgs := e.fake.Messages(id); len(msgs) != 3 || msgs[n] != "the answer" {
				t.Fatalf("after a new stream of draft_id 1 the chat has %v, want the reply %d, the send and a new preview", msgs, n)
			}
		})
	}
}

// TestLateDMFrameAfterItsSeal: a private chat's stream is sealed, then a
// late frame of it (sent before the seal, slowed on the way) reaches the
// instance that sealed it and another sharing the store (a real
// redis-server). Neither shows it: the reply is out. Only group frames
// looked for the seal, so a DM's late frame called sendMessageDraft and
// Telegram showed a stale draft under the reply.
func TestLateDMFrameAfterItsSeal(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other := sharedStoreEnv(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	chat := telegramtest.ChatAda
	tenant := testChats[chat]
	if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the ans"}); !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answer", Final: true}); !r.Success {
		t.Fatalf("seal: %+v", r)
	}
	for _, p := range []*Platform{e.p, other} {
		late := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answ"}
		if r := p.Execute(ctx, tenant, &late); !r.Success {
			t.Fatalf("late frame: %+v", r)
		}
	}
	if n := len(e.fake.Calls("sendMessageDraft")); n != 1 {
		t.Fatalf("sendMessageDraft called %d times, want the first frame's 1", n)
	}
}

// TestGroupSendOnAnotherInstanceReplacesThePreview: a group stream's
// frames reach one instance, which shows them in a preview message; the
// gateway then reconnects to another instance sharing the store (a real
// redis-server) and posts the turn's reply there with send, not a seal.
// The send deletes the preview, as on the instance that showed it. A send
// carries no draft_id, so the other instance found no preview to replace
// and the chat kept the stale preview beside the reply.
func TestGroupSendOnAnotherInstanceReplacesThePreview(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other := sharedStoreEnv(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	turn := "77"
	act := func(p *Platform, a contract.Action) contract.Result {
		t.Helper()
		a.ChatID = contract.ID(chat)
		a.Metadata.MessageID = contract.ID(turn)
		r := p.Execute(ctx, tenant, &a)
		p.awaitReplacing() // a group send deletes the previews it replaces after its answer
		if !r.Success {
			t.Fatalf("%s %q: %+v", a.Op, a.Content, r)
		}
		return r
	}
	act(e.p, contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the ans"})
	sent := act(other, contract.Action{Op: contract.OpSend, Content: "the answer"})
	n, _ := strconv.Atoi(sent.MessageID)
	if msgs := e.fake.Messages(id); len(msgs) != 1 || msgs[n] != "the answer" {
		t.Fatalf("after the send (message %d) the chat has %v, want the reply alone", n, msgs)
	}
	// The next turn's preview is replaced where it was shown; later sends
	// of either turn, on either instance, have no preview left to delete.
	turn = "78"
	act(e.p, contract.Action{Op: contract.OpDraft, DraftID: 2, Content: "the next"})
	act(e.p, contract.Action{Op: contract.OpSend, Content: "the next answer"})
	for _, again := range []string{"77", "78"} {
		turn = again
		act(other, contract.Action{Op: contract.OpSend, Content: "and one more thing"})
	}
	if calls := e.fake.Calls("deleteMessage"); len(calls) != 2 {
		t.Fatalf("deleteMessage called %d times, want once per preview", len(calls))
	}
}

// TestGroupFrameWaitingOnASealOfTwoParts: a late frame of a group stream
// waits for the preview while the stream's two-part seal edits it into the
// first part (editMessageText held); the seal then sends the second part
// (sendMessage held). The frame is answered without waiting for that part:
// once the seal is recorded the preview is no longer the stream's. The
// seal held the preview across the rest of its parts, so the frame waited
// on their sending.
func TestGroupFrameWaitingOnASealOfTwoParts(t *testing.T) {
	edit := holdFirst(t, "editMessageText")
	rest := holdFirst(t, "sendMessage")
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, func(c *Config) { c.APIServerURL = edit.URL })
	edit.to(e.fake.URL)
	var armed atomic.Bool
	checked := make(chan struct{})
	e.p.seals = hookedSeals{Capabilities: e.p.seals, onGet: func() {
		if armed.CompareAndSwap(true, false) {
			close(checked)
		}
	}}

	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the ans"}); !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	edit.to(rest.URL) // the seal's calls go on through the second front
	rest.to(e.fake.URL)
	sealed := make(chan contract.Result, 1)
	go func() {
		content := "the answer " + strings.Repeat("and more ", 600)
		sealed <- e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: content, Final: true})
	}()
	select {
	case <-edit.held:
	case <-time.After(waitFor):
		t.Fatal("the seal edited no preview")
	}
	armed.Store(true)
	late := make(chan contract.Result, 1)
	go func() {
		late <- e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answ"})
	}()
	select {
	case <-checked:
	case <-time.After(waitFor):
		t.Fatal("the late frame did not look for the stream's seal")
	}
	edit.release()
	select {
	case <-rest.held:
	case <-time.After(waitFor):
		t.Fatal("the seal sent no second part")
	}
	select {
	case r := <-late:
		if !r.Success {
			t.Fatalf("late frame: %+v", r)
		}
	case <-time.After(waitFor):
		t.Fatal("the late frame waited for the seal's second part")
	}
	rest.release()
	if r := <-sealed; !r.Success {
		t.Fatalf("seal: %+v", r)
	}
}

// TestNewStreamReusingASealedDraftID: the gateway restarts and numbers its
// streams from 1 again, so the next turn's stream names the draft_id of a
// stream sealed a moment before in the same chat. Its frames are shown: a
// late frame is one of the sealed stream's turn. They were taken for late
// frames of the sealed stream and showed nothing for 5 minutes. Private
// chat and group alike.
func TestNewStreamReusingASealedDraftID(t *testing.T) {
	for chat, method := range map[string]string{telegramtest.ChatAda: "sendMessageDraft", telegramtest.ChatT2: "editMessageText"} {
		t.Run(chat, func(t *testing.T) {
			e := newEnv(t, nil)
			tenant := testChats[chat]
			act := func(turn string, a contract.Action) {
				t.Helper()
				a.ChatID, a.Metadata.MessageID = contract.ID(chat), contract.ID(turn)
				if r := e.act(t, tenant, a); !r.Success {
					t.Fatalf("%q: %+v", a.Content, r)
				}
			}
			act("77", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the ans"})
			act("77", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the answer", Final: true})
			before := len(e.fake.Calls(method)) + len(e.fake.Calls("sendMessage"))
			act("77", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the answ"}) // late: shows nothing
			act("78", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the next"})
			act("78", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the next one"})
			if n := len(e.fake.Calls(method)) + len(e.fake.Calls("sendMessage")) - before; n != 2 {
				t.Fatalf("the frames after the seal made %d calls, want the new stream's 2", n)
			}
		})
	}
}

// TestDMSealRacedByItsFrameAndItsRetry: a private chat's seal is sending
// the reply (sendMessage held) when a frame of the stream sent before it
// and the seal's retry (the gateway reconnected; the relay runs each op on
// its own goroutine, and finishes the first) come in. Once the seal is
// done the frame shows nothing and the retry answers the seal's message.
// A private chat's stream had no order: the frame re-showed a stale draft
// under the reply and the retry sent the reply twice.
func TestDMSealRacedByItsFrameAndItsRetry(t *testing.T) {
	h := holdFirst(t, "sendMessage")
	e := newEnv(t, func(c *Config) { c.APIServerURL = h.URL })
	h.to(e.fake.URL)
	chat := telegramtest.ChatAda
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the ans"}); !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answer", Final: true}
	sealed := make(chan contract.Result, 2)
	go func() { sealed <- e.act(t, tenant, seal) }()
	select {
	case <-h.held:
	case <-time.After(waitFor):
		t.Fatal("the seal sent no message")
	}
	late := make(chan contract.Result, 1)
	go func() {
		late <- e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answ"})
	}()
	go func() { sealed <- e.act(t, tenant, seal) }()
	h.release()
	first, retry := <-sealed, <-sealed
	if !first.Success || retry.MessageID != first.MessageID {
		t.Fatalf("the seal and its retry answered %+v and %+v, want one message", first, retry)
	}
	if r := <-late; !r.Success {
		t.Fatalf("late frame: %+v", r)
	}
	if msgs := e.fake.Messages(id); len(msgs) != 1 {
		t.Fatalf("the chat has %v, want the reply alone", msgs)
	}
	if n := len(e.fake.Calls("sendMessageDraft")); n != 1 {
		t.Fatalf("sendMessageDraft called %d times, want the first frame's 1", n)
	}
}

// TestGroupSendBesideAStalePreviewOfItsTurn: a group stream's frames reach
// one instance, the gateway reconnects to another sharing the store (a
// real redis-server), which seals the stream there and shows the turn's
// next stream; then the gateway reconnects back and posts the turn's reply
// with send. The send deletes the next stream's preview, which none of
// its frames showed here. The first instance still remembered the sealed
// stream as its open preview of the turn, took the turn's preview for its
// own, and so never asked the store which stream shows it: the next
// stream's preview stayed beside the reply.
func TestGroupSendBesideAStalePreviewOfItsTurn(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other := sharedStoreEnv(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	act := func(p *Platform, a contract.Action) contract.Result {
		t.Helper()
		a.ChatID = contract.ID(chat)
		a.Metadata.MessageID = "77"
		r := p.Execute(ctx, tenant, &a)
		p.awaitReplacing() // a group send deletes the previews it replaces after its answer
		if !r.Success {
			t.Fatalf("%s %q: %+v", a.Op, a.Content, r)
		}
		return r
	}
	act(e.p, contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the ans"})
	sealed := act(other, contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the answer", Final: true})
	act(other, contract.Action{Op: contract.OpDraft, DraftID: 2, Content: "and the res"})
	sent := act(e.p, contract.Action{Op: contract.OpSend, Content: "and the rest"})
	s, _ := strconv.Atoi(sealed.MessageID)
	n, _ := strconv.Atoi(sent.MessageID)
	if msgs := e.fake.Messages(id); len(msgs) != 2 || msgs[s] != "the answer" || msgs[n] != "and the rest" {
		t.Fatalf("after the send the chat has %v, want the sealed reply %d and the send %d alone", msgs, s, n)
	}
}

// TestSameReplyOfANewStreamReusingASealedDraftID: the gateway restarts and
// numbers its streams from 1 again, so the next turn's stream names the
// draft_id of one sealed a moment before in the chat, and its reply says
// the same as that one's ("Done."). It is a new stream, of another turn:
// its reply is a message of its own, and in a group it replaces the
// stream's preview. The seal was taken for a retry of the first (same
// draft_id and content) and answered its message: the user never saw the
// reply, and a group kept the new stream's preview. Private chat and group
// alike.
func TestSameReplyOfANewStreamReusingASealedDraftID(t *testing.T) {
	for _, chat := range []string{telegramtest.ChatAda, telegramtest.ChatT2} {
		t.Run(chat, func(t *testing.T) {
			e := newEnv(t, nil)
			tenant := testChats[chat]
			id, _ := strconv.ParseInt(chat, 10, 64)
			act := func(turn string, a contract.Action) contract.Result {
				t.Helper()
				a.ChatID, a.Metadata.MessageID = contract.ID(chat), contract.ID(turn)
				r := e.act(t, tenant, a)
				if !r.Success {
					t.Fatalf("%q: %+v", a.Content, r)
				}
				return r
			}
			act("77", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "Do"})
			first := act("77", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "Done.", Final: true})
			act("78", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "Do"})
			second := act("78", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "Done.", Final: true})
			if second.MessageID == first.MessageID {
				t.Fatalf("the new stream's seal was answered with the first's message %s", first.MessageID)
			}
			if msgs := e.fake.Messages(id); len(msgs) != 2 {
				t.Fatalf("the chat has %v, want the two replies alone", msgs)
			}
		})
	}
}

// TestGroupStreamReusingTheDraftIDOfAnOpenPreview: a group stream left
// open (its gateway restarted mid-stream, or its tenant was deleted and
// made again under its id) and a stream of another turn under the same
// draft_id: the new stream shows a preview of its own and its reply is a
// message of its own, not the earlier turn's preview edited, which stays.
func TestGroupStreamReusingTheDraftIDOfAnOpenPreview(t *testing.T) {
	e := newEnv(t, nil)
	chat := telegramtest.ChatT2
	act := func(turn string, a contract.Action) contract.Result {
		t.Helper()
		a.ChatID, a.Metadata.MessageID = contract.ID(chat), contract.ID(turn)
		r := e.act(t, testChats[chat], a)
		if !r.Success {
			t.Fatalf("%q: %+v", a.Content, r)
		}
		return r
	}
	act("77", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the earlier preview"})
	left := e.fake.Calls("sendMessage")
	act("90", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the new preview"})
	if sent := e.fake.Calls("sendMessage"); len(sent) != len(left)+1 || len(e.fake.Calls("editMessageText")) != 0 {
		t.Fatalf("the new turn's first frame made %d sendMessage and %d editMessageText calls, want a preview of its own",
			len(sent)-len(left), len(e.fake.Calls("editMessageText")))
	}
	reply := act("90", contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the new reply", Final: true})
	edits := e.fake.Calls("editMessageText")
	if len(edits) != 1 || edits[0].Form["text"] != "the new reply" || edits[0].Form["message_id"] != reply.MessageID {
		t.Fatalf("the seal answered %s with edits %+v, want the new preview made the reply", reply.MessageID, edits)
	}
}

// TestGroupSendNamingNoTurnOnAnotherInstance: two group streams of a
// topic, of two turns, show previews on one instance; the gateway then
// reconnects to another instance sharing the store (a real redis-server)
// and sends a reply naming no turn, which ends every open stream of the
// topic as on the first instance. Both previews are deleted, and the
// reply stays. The store named each turn's preview, but a send naming no
// turn never asked it, so both previews stayed in the chat.
func TestGroupSendNamingNoTurnOnAnotherInstance(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other := sharedStoreEnv(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	act := func(p *Platform, a contract.Action) contract.Result {
		t.Helper()
		a.ChatID = contract.ID(chat)
		r := p.Execute(ctx, tenant, &a)
		p.awaitReplacing() // a group send deletes the previews it replaces after its answer
		if !r.Success {
			t.Fatalf("%s %q: %+v", a.Op, a.Content, r)
		}
		return r
	}
	for draft, turn := range []string{"77", "78"} {
		act(e.p, contract.Action{Op: contract.OpDraft, DraftID: int64(draft + 1), Content: "the ans " + turn, Metadata: contract.Metadata{MessageID: contract.ID(turn)}})
	}
	sent := act(other, contract.Action{Op: contract.OpSend, Content: "the answer"})
	n, _ := strconv.Atoi(sent.MessageID)
	if msgs := e.fake.Messages(id); len(msgs) != 1 || msgs[n] != "the answer" {
		t.Fatalf("after the send (message %d) the chat has %v, want the reply alone", n, msgs)
	}
}

// TestDraftFramesWhileTheStoreIsDown: the store (on a real redis-server)
// fails every call (closed) while a DM stream sends its frames: each is
// shown (a frame's seal check fails open), and the log says so a few
// times, then holds back, on a clock that does not move. Each frame logged
// a warning, so an outage flooded the log at the streams' frame rate.
func TestDraftFramesWhileTheStoreIsDown(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: redistest.Start(t, redistest.Options{}).URL(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvDeps(t, platform.Deps{Store: st, Clock: clk}, nil)
	_ = st.Close() // every call now fails, as when the server is gone
	chat := telegramtest.ChatAda
	frames := storeLogRate.Burst + 1
	for i := range frames {
		if r := e.act(t, testChats[chat], contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "frame " + strconv.Itoa(i)}); !r.Success {
			t.Fatalf("frame %d: %+v", i, r)
		}
	}
	if n := len(e.fake.Calls("sendMessageDraft")); n != frames {
		t.Fatalf("sendMessageDraft called %d times, want %d", n, frames)
	}
	if n := strings.Count(e.logs.String(), "telegram draft seal not read from the store"); n != storeLogRate.Burst {
		t.Fatalf("%d warnings logged for %d frames, want %d", n, frames, storeLogRate.Burst)
	}
}

// TestRetriedSealWhileTheFirstInstanceSendsIt: a DM seal is still being
// sent on one instance (sendMessage held) when the gateway, reconnected to
// another instance sharing the store (a real redis-server, the instances
// a cluster), retries it there. The retry waits for the first instance's
// seal and answers its message: the reply is sent once. The retry found no
// seal stored yet and sent the reply a second time. The platform's clock
// is a day behind the wall clock, or a day ahead: the seal's claim lasted
// until the request's deadline, which is wall-clock time, as if it were
// the store's clock's, so on a clock ahead of it the claim had lapsed
// when it was taken, and the retry sent the reply again.
func TestRetriedSealWhileTheFirstInstanceSendsIt(t *testing.T) {
	for name, skew := range map[string]time.Duration{"behind": -24 * time.Hour, "ahead": 24 * time.Hour} {
		t.Run("clock "+name+" of the wall clock", func(t *testing.T) {
			retriedSealWhileSent(t, clocktest.New(time.Now().Add(skew)))
		})
	}
}

// retriedSealWhileSent is TestRetriedSealWhileTheFirstInstanceSendsIt on
// clk.
func retriedSealWhileSent(t *testing.T, clk *clocktest.Fake) {
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
	h := holdFirst(t, "sendMessage")
	created := &creations{}
	deps := platform.Deps{Store: st, Clock: clk, Cluster: node("i0")}
	created.vault(&deps)
	e := newEnvDeps(t, deps, func(c *Config) { c.APIServerURL = h.URL })
	e.created = created
	h.to(e.fake.URL)
	cfg := e.p.cfg
	cfg.APIServerURL = e.fake.URL
	deps = platform.Deps{Store: st, Clock: clk, Cluster: node("i1")}
	created.vault(&deps)
	other, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.transport.CloseIdleConnections)
	chat := telegramtest.ChatAda
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the answer", Final: true}
	first := make(chan contract.Result, 1)
	go func() { first <- e.act(t, tenant, seal) }()
	select {
	case <-h.held:
	case <-time.After(waitFor):
		t.Fatal("the seal sent no message")
	}
	retried := make(chan contract.Result, 1)
	go func() {
		retry := seal
		retried <- other.Execute(ctx, tenant, &retry)
	}()
	platformtest.WaitUntil(t, "the retry to wait for the seal being sent, or answer", func() bool { return clk.Sleepers() == 1 || len(retried) == 1 })
	if len(retried) == 1 {
		t.Fatalf("the retry answered %+v while the seal was being sent; the chat has %v", <-retried, e.fake.Messages(id))
	}
	h.release()
	r := <-first
	if !r.Success || r.MessageID == "" {
		t.Fatalf("seal on the first instance: %+v", r)
	}
	clk.Advance(sealPoll)
	if retry := <-retried; !retry.Success || retry.MessageID != r.MessageID {
		t.Fatalf("the retried seal on the other instance = %+v, want message %s", retry, r.MessageID)
	}
	if msgs := e.fake.Messages(id); len(msgs) != 1 {
		t.Fatalf("the chat has %v, want the reply once", msgs)
	}
}

// TestGroupSendNamingNoTurnOfATenantMadeAgain: a tenant's two group
// streams of a topic show previews on one instance; the tenant is deleted
// and created again under its id, and its send naming no turn reaches
// the instance that showed them, or another sharing the store (a real
// redis-server). The earlier tenant's previews stay as they are, as they
// do for the new tenant's streams (docs/contract.md), and the reply is
// sent. The previews the instance remembered, and the topic's list of
// open previews in the store, were the tenant id's, so the new tenant's
// send deleted the earlier one's messages.
func TestGroupSendNamingNoTurnOfATenantMadeAgain(t *testing.T) {
	for _, there := range []bool{true, false} {
		t.Run(fmt.Sprintf("sent where shown %v", there), func(t *testing.T) { sendOfATenantMadeAgain(t, there) })
	}
}

// sendOfATenantMadeAgain is TestGroupSendNamingNoTurnOfATenantMadeAgain
// with the send on the instance that showed the previews (there), or on
// the other.
func sendOfATenantMadeAgain(t *testing.T, there bool) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other := sharedStoreEnv(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	made := func(at time.Time) { e.created.made(tenant, at) }
	act := func(p *Platform, a contract.Action) contract.Result {
		t.Helper()
		a.ChatID = contract.ID(chat)
		r := p.Execute(ctx, tenant, &a)
		p.awaitReplacing() // a group send deletes the previews it replaces after its answer
		if !r.Success {
			t.Fatalf("%s %q: %+v", a.Op, a.Content, r)
		}
		return r
	}
	made(clk.Now().Add(-time.Hour))
	for draft, turn := range []string{"77", "78"} {
		act(e.p, contract.Action{Op: contract.OpDraft, DraftID: int64(draft + 1), Content: "the ans " + turn, Metadata: contract.Metadata{MessageID: contract.ID(turn)}})
	}
	made(clk.Now())
	sender := other
	if there {
		sender = e.p
	}
	act(sender, contract.Action{Op: contract.OpSend, Content: "the answer"})
	if msgs := e.fake.Messages(id); len(msgs) != 3 {
		t.Fatalf("after the new tenant's send the chat has %v, want the earlier tenant's two previews and the reply", msgs)
	}
}

// TestSealOfATenantMadeAgain: a tenant seals a stream naming no turn; it
// is deleted and created again under its id, and the new tenant's stream
// under the same draft_id is sealed with the same content within
// sealRetryWindow, on the same instance or on another sharing the store
// (a real redis-server), in a private chat and in a group; also when the
// instance that created the tenant has a clock 5 s behind the sealing
// one's (skewed). The seal is a message of its own. The seal records were
// the tenant id's, so the new tenant's seal was answered with the earlier
// tenant's message and nothing was posted; later they were told apart by
// comparing the seal's time with the creation, which clocks 5 s apart
// got wrong.
func TestSealOfATenantMadeAgain(t *testing.T) {
	for _, chat := range []string{telegramtest.ChatAda, telegramtest.ChatT2} {
		for _, there := range []bool{true, false} {
			for _, skewed := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s sealed where sealed before %v skewed %v", chat, there, skewed), func(t *testing.T) { sealOfATenantMadeAgain(t, chat, there, skewed) })
			}
		}
	}
}

// sealOfATenantMadeAgain is TestSealOfATenantMadeAgain in chat, with the
// new tenant's seal on the instance of the earlier one's (there), or on
// the other, the tenant created by a clock 5 s behind (skewed).
func sealOfATenantMadeAgain(t *testing.T, chat string, there, skewed bool) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other := sharedStoreEnv(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	made := func(at time.Time) { e.created.made(tenant, at) }
	seal := func(p *Platform) contract.Result {
		t.Helper()
		a := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "Done.", Final: true}
		r := p.Execute(ctx, tenant, &a)
		if !r.Success {
			t.Fatalf("seal: %+v", r)
		}
		return r
	}
	made(clk.Now().Add(-time.Hour))
	first := seal(e.p)
	clk.Advance(time.Second)
	made(clk.Now().Add(-skew(skewed)))
	sealer := other
	if there {
		sealer = e.p
	}
	second := seal(sealer)
	if second.MessageID == first.MessageID {
		t.Fatalf("the new tenant's seal was answered with the earlier tenant's message %s", first.MessageID)
	}
	if msgs := e.fake.Messages(id); len(msgs) != 2 {
		t.Fatalf("the chat has %v, want both tenants' replies", msgs)
	}
}

// TestGroupStreamOfATenantMadeAgain: a tenant's group stream naming no
// turn shows a preview and is left open; the tenant is deleted and created
// again under its id, and the new tenant's stream under the same draft_id,
// naming no turn, reaches the same instance (without a store, and with
// one on a real redis-server) or another sharing the store. It shows a
// preview of its own and seals it into its reply; the earlier tenant's
// preview stays as it is, also when the instance that created the tenant
// has a clock 5 s behind the one that showed the preview (skewed). The
// open preview (this instance's, and its record in the store) was the
// tenant id's, so the new tenant's frames and seal edited the earlier
// tenant's message; later the record was told apart by comparing its
// time with the creation, which clocks 5 s apart got wrong.
func TestGroupStreamOfATenantMadeAgain(t *testing.T) {
	for _, where := range []string{"here without a store", "here", "there"} {
		for _, skewed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s skewed %v", where, skewed), func(t *testing.T) { groupStreamOfATenantMadeAgain(t, where, skewed) })
		}
	}
}

// skew is how far behind the clock of the instance creating a tenant
// again runs in a skewed case.
func skew(skewed bool) time.Duration {
	if skewed {
		return 5 * time.Second
	}
	return 0
}

// groupStreamOfATenantMadeAgain is TestGroupStreamOfATenantMadeAgain with
// the new tenant's stream where it says, created by a clock 5 s behind
// (skewed).
func groupStreamOfATenantMadeAgain(t *testing.T, where string, skewed bool) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	var (
		e      *env
		second *Platform
	)
	switch where {
	case "here without a store":
		deps := platform.Deps{Clock: clk}
		made := &creations{}
		made.vault(&deps)
		e = newEnvDeps(t, deps, nil)
		e.created, second = made, e.p
	case "here":
		e, _ = sharedStoreEnv(t, clk)
		second = e.p
	default:
		e, second = sharedStoreEnv(t, clk)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	made := func(at time.Time) { e.created.made(tenant, at) }
	act := func(p *Platform, a contract.Action) contract.Result {
		t.Helper()
		a.ChatID, a.DraftID = contract.ID(chat), 1
		r := p.Execute(ctx, tenant, &a)
		if !r.Success {
			t.Fatalf("%q: %+v", a.Content, r)
		}
		return r
	}
	made(clk.Now().Add(-time.Hour))
	act(e.p, contract.Action{Op: contract.OpDraft, Content: "the earlier preview"})
	clk.Advance(time.Second)
	made(clk.Now().Add(-skew(skewed)))
	act(second, contract.Action{Op: contract.OpDraft, Content: "the new preview"})
	reply := act(second, contract.Action{Op: contract.OpDraft, Content: "the new reply", Final: true})
	msgs := e.fake.Messages(id)
	replyID, _ := strconv.Atoi(reply.MessageID)
	if len(msgs) != 2 || msgs[replyID] != "the new reply" || !slices.Contains(slices.Collect(maps.Values(msgs)), "the earlier preview") {
		t.Fatalf("the chat has %v (the reply %s), want the earlier tenant's preview as it was and the new tenant's reply", msgs, reply.MessageID)
	}
}

// TestSealOfATenantMadeAgainWhileTheEarlierOnesIsSent: a tenant's seal is
// being sent on one instance (its send held); the tenant is deleted and
// created again under its id, and the new tenant's stream under the same
// draft_id is sealed with the same content on another instance sharing
// the store (a real redis-server). It is sent at once, a message of its
// own. The seal's claim named the tenant id only, so the new tenant's
// seal waited for the earlier tenant's claim to lapse.
func TestSealOfATenantMadeAgainWhileTheEarlierOnesIsSent(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	e, other, h := heldSealInstances(t, clk)
	chat := telegramtest.ChatAda
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	made := func(at time.Time) { e.created.made(tenant, at) }
	seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "Done.", Final: true}
	made(clk.Now().Add(-time.Hour))
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
	made(clk.Now())
	second := make(chan contract.Result, 1)
	go func() {
		a := seal
		second <- other.Execute(ctx, tenant, &a)
	}()
	platformtest.WaitUntil(t, "the new tenant's seal to answer, or wait for a seal being sent", func() bool { return clk.Sleepers() == 1 || len(second) == 1 })
	if len(second) == 0 {
		h.release()
		<-first
		t.Fatal("the new tenant's seal waits for the earlier tenant's seal being sent")
	}
	h.release()
	r1, r2 := <-first, <-second
	if !r1.Success || !r2.Success || r1.MessageID == r2.MessageID {
		t.Fatalf("the earlier tenant's seal %+v, the new tenant's %+v: want two messages", r1, r2)
	}
	if msgs := e.fake.Messages(id); len(msgs) != 2 {
		t.Fatalf("the chat has %v, want both tenants' replies", msgs)
	}
}

// failingReads is a seal store whose reads of the keys under prefix fail.
type failingReads struct {
	store.Capabilities
	prefix string
}

func (f failingReads) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if strings.HasPrefix(key, f.prefix) {
		return nil, false, errors.New("store down")
	}
	return f.Capabilities.Get(ctx, key)
}

// TestTopicPreviewListNotReadIsLoggedAsSuch: a group stream's preview is
// stored but the topic's list of previews cannot be read: the warning
// says the list was not stored, not the preview. It said "preview not
// stored", sending an operator after a record that was there.
func TestTopicPreviewListNotReadIsLoggedAsSuch(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, _ := sharedStoreEnv(t, clk)
	e.p.seals = failingReads{e.p.seals, "telegram/preview-topic/"}
	chat := telegramtest.ChatT2
	if r := e.act(t, testChats[chat], contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the ans",
		Metadata: contract.Metadata{MessageID: "77"}}); !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	logs := e.logs.String()
	if strings.Contains(logs, "preview not stored") || !strings.Contains(logs, "topic's preview list not stored") {
		t.Fatalf("logs:\n%s", logs)
	}
}

// TestStreamOfATenantDeclaredOverItsStoredOne: a stored tenant's stream
// shows a frame and is sealed; the operator then declares the tenant in
// the YAML over its stored one (its creation becomes zero: the relay takes
// it for the same tenant), and the gateway's retry of the seal reaches the
// same instance or another sharing the store (a real redis-server). The
// retry answers the seal's message and posts nothing. The seal records
// were keyed by the tenant's creation, which the declaration moved to 0,
// so the retry was sent again.
func TestStreamOfATenantDeclaredOverItsStoredOne(t *testing.T) {
	for _, chat := range []string{telegramtest.ChatAda, telegramtest.ChatT2} {
		for _, there := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s retried where sealed %v", chat, there), func(t *testing.T) {
				clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
				e, other := sharedStoreEnv(t, clk)
				ctx, cancel := context.WithTimeout(context.Background(), waitFor)
				defer cancel()
				tenant := testChats[chat]
				id, _ := strconv.ParseInt(chat, 10, 64)
				act := func(p *Platform, final bool) contract.Result {
					t.Helper()
					a := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "Done.", Final: final}
					a.Metadata.MessageID = "77"
					r := p.Execute(ctx, tenant, &a)
					if !r.Success {
						t.Fatalf("draft (final %v): %+v", final, r)
					}
					return r
				}
				e.created.made(tenant, clk.Now().Add(-time.Hour))
				act(e.p, false)
				first := act(e.p, true)
				clk.Advance(time.Second)
				e.created.made(tenant, time.Time{}) // declared in the YAML
				retrier := other
				if there {
					retrier = e.p
				}
				if again := act(retrier, true); again.MessageID != first.MessageID {
					t.Fatalf("the retried seal answered %s, want the seal's %s", again.MessageID, first.MessageID)
				}
				if msgs := e.fake.Messages(id); len(msgs) != 1 {
					t.Fatalf("the chat has %v, want the reply alone", msgs)
				}
			})
		}
	}
}

// TestSealRetriedDuringADeclarationsRollout: a tenant stored since an hour
// is declared in the YAML, and the instances apply it one after the
// other. A seal on an instance that applied it (the tenant's creation is
// zero there) is retried on one that has not (it still knows the stored
// creation): the retry answers the seal's message and posts nothing. The
// seal record, kept without a creation, was taken for an earlier tenant's
// there, so the retry was sent again.
func TestSealRetriedDuringADeclarationsRollout(t *testing.T) {
	for _, chat := range []string{telegramtest.ChatAda, telegramtest.ChatT2} {
		t.Run(chat, func(t *testing.T) {
			clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
			e, other := sharedStoreEnv(t, clk)
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			tenant := testChats[chat]
			id, _ := strconv.ParseInt(chat, 10, 64)
			seal := contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "Done.", Final: true}
			e.created.made(tenant, time.Time{}) // declared, as the sealing instance has applied
			first := e.p.Execute(ctx, tenant, &seal)
			if !first.Success {
				t.Fatalf("seal: %+v", first)
			}
			clk.Advance(time.Second)
			e.created.made(tenant, clk.Now().Add(-time.Hour)) // the stored creation, as the other instance still has it
			if again := other.Execute(ctx, tenant, &seal); again.MessageID != first.MessageID {
				t.Fatalf("the retried seal answered %+v, want the seal's %s", again, first.MessageID)
			}
			if msgs := e.fake.Messages(id); len(msgs) != 1 {
				t.Fatalf("the chat has %v, want the reply alone", msgs)
			}
		})
	}
}

// TestGroupStreamMovingDuringADeclarationsRollout: a group stream's frames
// reach an instance that applied the YAML declaration of its stored
// tenant (its creation zero there), and its seal one that has not yet:
// the chat ends with the reply alone, in the preview's message. The
// preview record, kept without a creation, was taken for an earlier
// tenant's there, so the seal posted the reply beside the preview.
func TestGroupStreamMovingDuringADeclarationsRollout(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other := sharedStoreEnv(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	act := func(p *Platform, a contract.Action) contract.Result {
		t.Helper()
		a.ChatID = contract.ID(chat)
		a.Metadata.MessageID = "77"
		r := p.Execute(ctx, tenant, &a)
		if !r.Success {
			t.Fatalf("%s %q: %+v", a.Op, a.Content, r)
		}
		return r
	}
	e.created.made(tenant, time.Time{}) // declared, as the first instance has applied
	act(e.p, contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the ans"})
	preview := e.fake.Messages(id)
	clk.Advance(time.Second)
	e.created.made(tenant, clk.Now().Add(-time.Hour)) // the stored creation, as the other instance still has it
	sealed := act(other, contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the answer", Final: true})
	n, _ := strconv.Atoi(sealed.MessageID)
	if msgs := e.fake.Messages(id); len(msgs) != 1 || msgs[n] != "the answer" {
		t.Fatalf("after the seal (message %d) the chat has %v (the preview was %v), want the reply alone", n, msgs, preview)
	}
}

// TestGroupStreamAcrossADeclarationTakenOut: a group stream starts while
// its tenant is declared in the YAML (no creation), and the operator
// takes the declaration out, so the stored tenant, created an hour ago,
// stands again (on an instance with no store: the previews are in memory
// alone). Its next frame edits the preview, and its reply (a send of the
// turn) replaces it: the chat ends with the reply alone. The preview,
// opened without a creation, was taken for an earlier tenant's, so the
// frame showed a second preview and the send left both.
func TestGroupStreamAcrossADeclarationTakenOut(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	made := &creations{}
	deps := platform.Deps{Clock: clk}
	made.vault(&deps)
	e := newEnvDeps(t, deps, nil)
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	act := func(a contract.Action) {
		t.Helper()
		a.ChatID, a.Metadata.MessageID = contract.ID(chat), "77"
		if r := e.act(t, tenant, a); !r.Success {
			t.Fatalf("%s %q: %+v", a.Op, a.Content, r)
		}
		e.p.awaitReplacing() // a group send deletes the previews it replaces after its answer
	}
	act(contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the ans"})
	clk.Advance(time.Second)
	made.made(tenant, clk.Now().Add(-time.Hour))
	act(contract.Action{Op: contract.OpDraft, DraftID: 1, Content: "the answ"})
	if msgs := e.fake.Messages(id); len(msgs) != 1 {
		t.Fatalf("after the second frame the chat has %v, want one preview", msgs)
	}
	act(contract.Action{Op: contract.OpSend, Content: "the answer"})
	if msgs := e.fake.Messages(id); len(msgs) != 1 {
		t.Fatalf("after the reply the chat has %v, want the reply alone", msgs)
	}
}

// TestGroupSendReplacesAStoredPreviewPastItsDeadline: as in
// TestGroupSendBesideAStalePreviewOfItsTurn, the turn's reply is sent on
// one instance while another shows the turn's open preview; the send's
// context ends (its deadline, or the gateway gone) once the reply went
// out, as the preview is being looked up. The preview is deleted all the
// same, and its name in the store forgotten: the cleanup has a deadline of
// its own (request_timeout). It ran under the action's context, so the
// preview stayed beside the reply.
func TestGroupSendReplacesAStoredPreviewPastItsDeadline(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other := sharedStoreEnv(t, clk)
	var armed atomic.Pointer[context.CancelFunc]
	e.p.seals = hookedSeals{Capabilities: e.p.seals, onGet: func() {
		if cancel := armed.Swap(nil); cancel != nil {
			(*cancel)() // the first read after the reply went out
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	act := func(ctx context.Context, p *Platform, a contract.Action) contract.Result {
		t.Helper()
		a.ChatID = contract.ID(chat)
		a.Metadata.MessageID = "77"
		r := p.Execute(ctx, tenant, &a)
		p.awaitReplacing() // a group send deletes the previews it replaces after its answer
		return r
	}
	if r := act(ctx, other, contract.Action{Op: contract.OpDraft, DraftID: 2, Content: "and the res"}); !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	armed.Store(&scancel)
	if r := act(sctx, e.p, contract.Action{Op: contract.OpSend, Content: "and the rest"}); !r.Success {
		t.Fatalf("send: %+v", r)
	}
	if msgs := e.fake.Messages(id); len(msgs) != 1 {
		t.Fatalf("after the send the chat has %v, want the send alone", msgs)
	}
	if _, ok, err := e.p.seals.Get(ctx, turnPreviewKey(tenant, id, 0, "77")); err != nil || ok {
		t.Fatalf("the turn's stored preview name: found %v, %v; want it forgotten", ok, err)
	}
}

// TestStoredTurnPreviewNotReadNamesTheTurn: a group send of a turn cannot
// read which stream shows the turn's preview (turnPreviewKey): the warning
// names the turn, which is all that names the record (it named a draft_id
// 0 instead).
func TestStoredTurnPreviewNotReadNamesTheTurn(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, nil)
	e.p.seals = failingReads{e.p.seals, "telegram/preview-turn/"}
	chat := telegramtest.ChatT2
	if r := e.act(t, testChats[chat], contract.Action{Op: contract.OpSend, ChatID: contract.ID(chat), Content: "the answer",
		Metadata: contract.Metadata{MessageID: "77"}}); !r.Success {
		t.Fatalf("send: %+v", r)
	}
	e.p.awaitReplacing() // the send looks its turn's preview up after its answer
	logs := e.logs.String()
	if !strings.Contains(logs, `"msg":"telegram draft preview not read from the store"`) || !strings.Contains(logs, `"turn":"77"`) || strings.Contains(logs, `"draft_id":0`) {
		t.Fatalf("logs:\n%s", logs)
	}
}

// TestGroupSendAnsweredBeforeItsPreviewIsDeleted: a group send that ends
// a stream is answered while Telegram is slow to delete the stream's
// preview (deleteMessage held), well within the send's deadline; the
// preview is deleted after. The deletion ran before the answer, within a
// request_timeout of its own, so a slow Telegram held the answer past the
// gateway's deadline, and the gateway sent the reply again.
func TestGroupSendAnsweredBeforeItsPreviewIsDeleted(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.RequestTimeout = time.Minute })
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	meta := contract.Metadata{MessageID: "77"}
	if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the ans", Metadata: meta}); !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	release := e.fake.Hold("deleteMessage")
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	answered := make(chan contract.Result, 1)
	go func() {
		answered <- e.p.Execute(ctx, tenant, &contract.Action{Op: contract.OpSend, ChatID: contract.ID(chat), Content: "the answer", Metadata: meta})
	}()
	select {
	case r := <-answered:
		if !r.Success {
			t.Fatalf("send: %+v", r)
		}
	case <-ctx.Done():
		release()
		t.Fatalf("the send was not answered within its deadline (%v) while deleteMessage was held", waitFor)
	}
	if _, err := e.fake.WaitCalls(ctx, "deleteMessage", 1); err != nil {
		t.Fatal(err)
	}
	release()
	e.p.awaitReplacing()
	if msgs := e.fake.Messages(id); len(msgs) != 1 || msgs[102] != "the answer" {
		t.Fatalf("after the send the chat has %v, want the reply alone", msgs)
	}
}

// heldSeals is a store whose reads first call before.
type heldSeals struct {
	store.Capabilities
	before func()
}

func (h heldSeals) Get(ctx context.Context, key string) ([]byte, bool, error) {
	h.before()
	return h.Capabilities.Get(ctx, key)
}

// TestGroupSendLeavesAStreamOfItsTurnBegunAfterItsAnswer: a send of a turn
// that showed no preview here is answered, and looks the turn's preview up
// in the store after (its read held); meanwhile the gateway begins a new
// stream of the turn, on another instance sharing the store. Its preview,
// shown after the send, stays: the send ends only the streams open as it
// went out.
func TestGroupSendLeavesAStreamOfItsTurnBegunAfterItsAnswer(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	e, other := sharedStoreEnv(t, clk)
	held, reading := make(chan struct{}), make(chan struct{}, 1)
	var armed atomic.Bool
	e.p.seals = heldSeals{Capabilities: e.p.seals, before: func() {
		if armed.CompareAndSwap(true, false) {
			reading <- struct{}{}
			<-held
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	id, _ := strconv.ParseInt(chat, 10, 64)
	act := func(p *Platform, a contract.Action) contract.Result {
		t.Helper()
		a.ChatID, a.Metadata.MessageID = contract.ID(chat), "77"
		r := p.Execute(ctx, tenant, &a)
		if !r.Success {
			t.Fatalf("%s %q: %+v", a.Op, a.Content, r)
		}
		return r
	}
	armed.Store(true)
	act(e.p, contract.Action{Op: contract.OpSend, Content: "the first part"})
	select {
	case <-reading:
	case <-ctx.Done():
		t.Fatal("the send's look for its turn's preview never came")
	}
	clk.Advance(time.Second)
	act(other, contract.Action{Op: contract.OpDraft, DraftID: 2, Content: "the rest so f"})
	close(held)
	e.p.awaitReplacing()
	if msgs := e.fake.Messages(id); len(msgs) != 2 {
		t.Fatalf("the chat has %v, want the send and the new stream's preview", msgs)
	}
}

// TestGroupSendAfterRunReturnedStillReplacesItsPreview: a group send that
// ends a stream comes after Run returned, as the relay answers the actions
// in flight while the connector drains (the platforms stop first): it is
// answered, and its preview is still deleted. Work after an answer was
// once refused after Run returned, and every drain left the previews of
// the streams it ended in their chats.
func TestGroupSendAfterRunReturnedStillReplacesItsPreview(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, e.sink) }()
	cancel()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("Run did not return after cancel")
	}
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	meta := contract.Metadata{MessageID: "77"}
	if r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the ans", Metadata: meta}); !r.Success {
		t.Fatalf("draft frame: %+v", r)
	}
	if r := e.act(t, tenant, contract.Action{Op: contract.OpSend, ChatID: contract.ID(chat), Content: "the answer", Metadata: meta}); !r.Success {
		t.Fatalf("send: %+v", r)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), waitFor)
	defer wcancel()
	if _, err := e.fake.WaitCalls(wctx, "deleteMessage", 1); err != nil {
		t.Fatalf("waiting for the preview's deletion after Run returned: %v\nlogs:\n%s", err, e.logs.String())
	}
	e.p.awaitReplacing()
}

// heldReads is a seal store whose reads of the keys under prefix wait
// for gate (or their deadline), a slow store.
type heldReads struct {
	store.Capabilities
	prefix string
	gate   chan struct{}
}

func (h heldReads) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if strings.HasPrefix(key, h.prefix) {
		select {
		case <-h.gate:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	return h.Capabilities.Get(ctx, key)
}

// TestGroupSendsPastTheReplacementBoundKeepTheirPreviews: while the store
// is slow to answer (its reads of the turns' previews held), t2's 65
// group sends of distinct turns are answered; the first 32 (half the
// bound: a tenant runs at most half of what the others leave) look their
// turns' previews up after their answers, and the others start none,
// logged. t1's send into its group then still starts its own (it took
// none when t2's took the whole bound), and t1's part of what t2 leaves
// is bounded too.
func TestGroupSendsPastTheReplacementBoundKeepTheirPreviews(t *testing.T) {
	st := store.NewMemory(nil)
	t.Cleanup(func() { _ = st.Close() })
	e := newEnvDeps(t, platform.Deps{Store: st}, func(c *Config) { c.RequestTimeout = time.Minute })
	gate := make(chan struct{})
	e.p.seals = heldReads{e.p.seals, "telegram/preview-turn/", gate}
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
		e.p.awaitReplacing()
	}()
	send := func(chat string, i int) {
		t.Helper()
		if r := e.act(t, testChats[chat], contract.Action{Op: contract.OpSend, ChatID: contract.ID(chat), Content: "the answer",
			Metadata: contract.Metadata{MessageID: contract.ID(strconv.Itoa(100 + i))}}); !r.Success {
			t.Fatalf("send %d into %s: %+v", i, chat, r)
		}
	}
	for i := range maxReplacing + 1 {
		send(telegramtest.ChatT2, i)
	}
	notReplaced := func(tenant string) (n int) {
		for line := range strings.Lines(e.logs.String()) {
			if strings.Contains(line, "telegram draft previews not replaced") && strings.Contains(line, `"tenant":"`+tenant+`"`) {
				n++
			}
		}
		return n
	}
	if n, running := notReplaced("t2"), len(e.p.replacing.slots); n != maxReplacing/2+1 || running != maxReplacing/2 {
		t.Fatalf("t2's sends: %d logged their previews not replaced, %d replacements running; want %d and %d; logs:\n%s",
			n, running, maxReplacing/2+1, maxReplacing/2, e.logs.String())
	}
	const book = "-4001234567" // t1's group
	for i := range maxReplacing {
		send(book, i)
	}
	if n, running := notReplaced("t1"), len(e.p.replacing.slots); n != maxReplacing*3/4 || running != maxReplacing*3/4 {
		t.Fatalf("t1's sends: %d logged their previews not replaced, %d replacements running in all; want %d and %d",
			n, running, maxReplacing*3/4, maxReplacing*3/4)
	}
	close(gate)
	e.p.awaitReplacing()
	if n := len(e.p.replacing.slots); n != 0 {
		t.Fatalf("%d preview replacements running after the store answered, want none", n)
	}
}

// TestGroupSealWhoseSecondPartFails: a group stream's seal edits its
// preview to the first part, and Telegram refuses the second. The answer
// is the seal's success, the preview's id, with an error saying 1 of 2
// parts went out, as for a send (platform.SendParts): it was a failure
// the gateway resends, and a seal of three parts whose third failed
// answered a plain success.
func TestGroupSealWhoseSecondPartFails(t *testing.T) {
	e := newEnv(t, nil)
	chat := telegramtest.ChatT2
	tenant := testChats[chat]
	pre := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: "the ans"})
	if !pre.Success {
		t.Fatalf("draft frame: %+v", pre)
	}
	e.fake.Fail("sendMessage", telegramtest.Failure{Code: 403, Description: "Forbidden: bot was kicked from the group chat"})
	content := "the answer " + strings.Repeat("and more ", 600)
	r := e.act(t, tenant, contract.Action{Op: contract.OpDraft, ChatID: contract.ID(chat), DraftID: 1, Content: content, Final: true})
	edits := e.fake.Calls("editMessageText")
	if len(edits) != 1 {
		t.Fatalf("%d editMessageText calls, want the preview's 1", len(edits))
	}
	if preview := edits[0].Form["message_id"]; !r.Success || r.Code != "" || r.MessageID != preview || !strings.HasSuffix(r.Error, "(sent 1 of 2 parts; the rest was not sent)") {
		t.Fatalf("seal %+v, want success with the preview's id %s and 1 of 2 parts sent", r, preview)
	}
}
