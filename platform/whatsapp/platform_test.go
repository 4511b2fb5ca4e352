package whatsapp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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
	"connector/media"
	"connector/platform"
	"connector/platform/pace"
	"connector/platform/platformtest"
	"connector/platform/whatsapp/whatsapptest"
	"connector/store"
	"connector/vault"
)

const (
	testSecret = "app-secret-3f9a1c"
	testVerify = "verify-token-77d2"
	testToken  = "EAAG-access-token-5e1b"
)

var (
	biz1 = whatsapptest.Business{PhoneNumberID: "106540352242922", DisplayNumber: "15550109999"}
	biz2 = whatsapptest.Business{PhoneNumberID: "206540352242922", DisplayNumber: "15550108888"}
	biz3 = whatsapptest.Business{PhoneNumberID: "306540352242922", DisplayNumber: "15550107777"} // no tenant's
)

// recordingSink keeps every delivery; fail makes Deliver refuse.
type recordingSink struct {
	mu      sync.Mutex
	got     []platform.Delivery
	fail    bool
	changed chan struct{}
}

func newSink() *recordingSink { return &recordingSink{changed: make(chan struct{})} }

func (s *recordingSink) Deliver(_ context.Context, d platform.Delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return errors.New("ledger full")
	}
	s.got = append(s.got, d)
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

func (s *recordingSink) all() []platform.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]platform.Delivery(nil), s.got...)
}

// rig is a platform on a fake Graph API with a recording sink, its
// webhook served on loopback.
type rig struct {
	p     *Platform
	fake  *whatsapptest.Server
	sink  *recordingSink
	url   string // the webhook's URL
	media *media.Store
	stats *statusCounter
}

// statusCounter is a Metrics that also counts statuses per tenant.
type statusCounter struct {
	platform.NopMetrics
	mu      sync.Mutex
	counts  map[string]int // "<tenant>/<status>"
	dropped map[string]int
}

func (c *statusCounter) DeliveryStatus(_, tenant, status string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[tenant+"/"+status]++
}

func (c *statusCounter) Dropped(_, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropped[reason]++
}

func (c *statusCounter) get(m map[string]int, k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return m[k]
}

func testConfig(apiURL string) Config {
	allowAll := OptIn(true)
	return Config{
		AppSecret: testSecret, VerifyToken: testVerify, AccessToken: testToken, APIURL: apiURL,
		PhoneNumbers:  map[string]string{biz1.PhoneNumberID: "t1", biz2.PhoneNumberID: "t2"},
		AllowAllUsers: &allowAll, ChatPerSecond: -1,
	}
}

// newRig builds a platform; v is the vault (nil: a fresh memory one), so
// two rigs on one vault are two instances sharing a store.
func newRig(t testing.TB, v vault.Store, edit func(*Config, *platform.Deps)) *rig {
	t.Helper()
	fake := whatsapptest.New(t, testToken)
	r := &rig{fake: fake, sink: newSink(), stats: &statusCounter{counts: map[string]int{}, dropped: map[string]int{}}}
	if v == nil {
		v = vault.NewMemory(vault.Config{})
	}
	ms, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test", AllowPrivateURLs: true})
	if err != nil {
		t.Fatal(err)
	}
	r.media = ms
	cfg := testConfig(fake.URL)
	deps := platform.Deps{Vault: v, Metrics: r.stats, Media: ms}
	if edit != nil {
		edit(&cfg, &deps)
	}
	if r.p, err = New(cfg, deps); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.p.Run(ctx, r.sink); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	platformtest.WaitUntil(t, "whatsapp Run to start", func() bool { return r.p.sink.Load() != nil })
	mux := http.NewServeMux()
	for pattern, h := range r.p.Routes() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	r.url = srv.URL + WebhookPath
	return r
}

// post sends a signed webhook and returns the status.
func (r *rig) post(t *testing.T, body []byte) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(whatsapptest.SignedRequest(r.url, testSecret, body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (r *rig) exec(t *testing.T, tenant string, a map[string]any) contract.Result {
	t.Helper()
	raw, _ := json.Marshal(a)
	var act contract.Action
	if err := json.Unmarshal(raw, &act); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.p.Execute(ctx, tenant, &act)
}

func TestVerifyHandshake(t *testing.T) {
	r := newRig(t, nil, nil)
	get := func(q string) (int, string) {
		resp, err := http.Get(r.url + "?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("hub.mode=subscribe&hub.verify_token=" + testVerify + "&hub.challenge=1158201444"); code != 200 || body != "1158201444" {
		t.Fatalf("handshake: %d %q", code, body)
	}
	for _, q := range []string{
		"hub.mode=subscribe&hub.verify_token=wrong&hub.challenge=1",
		"hub.mode=unsubscribe&hub.verify_token=" + testVerify + "&hub.challenge=1",
		"hub.mode=subscribe&hub.challenge=1",
	} {
		if code, body := get(q); code != http.StatusForbidden || strings.Contains(body, "1") {
			t.Errorf("%s: %d %q, want 403", q, code, body)
		}
	}
}

func TestForgedSignatureDeliversNothing(t *testing.T) {
	r := newRig(t, nil, nil)
	body := whatsapptest.Text(biz1, "447700900123", "Ada", "wamid.A1", "hello")
	for name, sig := range map[string]string{
		"missing": "", "other secret": whatsapptest.Sign("not-the-secret", body), "malformed": "sha256=zz",
		"truncated": whatsapptest.Sign(testSecret, body)[:40], "sha1": "sha1=" + strings.Repeat("0", 40),
	} {
		req, _ := http.NewRequest(http.MethodPost, r.url, bytes.NewReader(body))
		if sig != "" {
			req.Header.Set("X-Hub-Signature-256", sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s signature: %d, want 401", name, resp.StatusCode)
		}
	}
	// A body changed after signing is forged too.
	req := whatsapptest.SignedRequest(r.url, testSecret, body)
	req.Body = io.NopCloser(bytes.NewReader(bytes.Replace(body, []byte("hello"), []byte("HELLO"), 1)))
	resp, _ := http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("tampered body: %d", resp.StatusCode)
	}
	if got := r.sink.all(); len(got) != 0 {
		t.Fatalf("a forged webhook delivered %d events", len(got))
	}
}

// TestOversizedWebhookIs413: a signed body over max_webhook_bytes is
// answered 413 "payload too large" (docs/security.md), counted as
// oversized, and delivers nothing.
func TestOversizedWebhookIs413(t *testing.T) {
	r := newRig(t, nil, func(c *Config, _ *platform.Deps) { c.MaxWebhookBytes = 64 })
	body := whatsapptest.Text(biz1, "447700900123", "Ada", "wamid.O1", strings.Repeat("x", 100))
	resp, err := http.DefaultClient.Do(whatsapptest.SignedRequest(r.url, testSecret, body))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || strings.TrimSpace(string(text)) != "payload too large" {
		t.Fatalf("%d %q, want 413 payload too large", resp.StatusCode, text)
	}
	if n := r.stats.get(r.stats.dropped, "oversized"); n != 1 {
		t.Errorf("oversized counted %d times", n)
	}
	if got := r.sink.all(); len(got) != 0 {
		t.Fatalf("an oversized webhook delivered %d events", len(got))
	}
}

func TestTextReachesTheNumbersTenant(t *testing.T) {
	r := newRig(t, nil, nil)
	if code := r.post(t, whatsapptest.Text(biz2, "447700900123", "Ada Lovelace", "wamid.B1", "hi there")); code != 200 {
		t.Fatalf("webhook: %d", code)
	}
	got := r.sink.all()
	if len(got) != 1 {
		t.Fatalf("%d deliveries", len(got))
	}
	d := got[0]
	if d.Tenant != "t2" || d.SessionKey != "agent:main:whatsapp_cloud:dm:447700900123" || d.Event.Text != "hi there" ||
		d.Event.MessageID != "wamid.B1" || d.Event.Source.ChatName.Value != "Ada Lovelace" {
		t.Fatalf("delivery %+v event %+v", d, d.Event)
	}
	if code := r.post(t, whatsapptest.Text(biz3, "447700900123", "Ada", "wamid.B2", "to nobody's number")); code != 200 {
		t.Fatalf("unclaimed: %d", code)
	}
	if len(r.sink.all()) != 1 || r.stats.get(r.stats.dropped, dropUnclaimed) != 1 {
		t.Fatalf("an unclaimed number's message was delivered or not counted")
	}
}

// TestRedeliveryDeliveredOnceAcrossInstances: two platforms on one vault
// are two instances sharing the store; Meta's redelivery of a stored
// message to the other instance is dropped, and a payload refused while
// the ledger is full is delivered once on Meta's retry.
func TestRedeliveryDeliveredOnceAcrossInstances(t *testing.T) {
	shared := vault.NewMemory(vault.Config{})
	a, b := newRig(t, shared, nil), newRig(t, shared, nil)
	body := whatsapptest.Text(biz1, "447700900123", "Ada", "wamid.R1", "once")
	if a.post(t, body) != 200 || b.post(t, body) != 200 || a.post(t, body) != 200 {
		t.Fatal("a redelivery was not answered 200")
	}
	if n := len(a.sink.all()) + len(b.sink.all()); n != 1 {
		t.Fatalf("delivered %d times across the two instances", n)
	}
	b.sink.mu.Lock()
	b.sink.fail = true
	b.sink.mu.Unlock()
	body = whatsapptest.Text(biz1, "447700900123", "Ada", "wamid.R2", "retry me")
	if code := b.post(t, body); code != http.StatusServiceUnavailable {
		t.Fatalf("refused delivery answered %d, want 503", code)
	}
	for range 2 { // the retry, then its redelivery
		if a.post(t, body) != 200 {
			t.Fatal("retry not answered 200")
		}
	}
	if got := a.sink.all(); len(got) != 2 || got[1].Event.MessageID != "wamid.R2" {
		t.Fatalf("after the retry: %d deliveries on a", len(got))
	}
}

// TestRetryWithinMetasRetryPeriodIsDropped: Meta retries a webhook it
// did not see answered 200 for up to 7 days, so a message's delivered
// mark outlives that: a payload whose other message failed for days is
// retried 3 days, then 6 days 23 hours later, and the message stored
// from its first attempt is not delivered again, on either instance of
// one store.
func TestRetryWithinMetasRetryPeriodIsDropped(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	st := store.NewMemory(clk)
	t.Cleanup(func() { st.Close() })
	shared := vault.NewDurable(st.Capabilities(), vault.Config{Clock: clk})
	withClock := func(_ *Config, d *platform.Deps) { d.Clock = clk }
	a, b := newRig(t, shared, withClock), newRig(t, shared, withClock)
	body := whatsapptest.Text(biz1, "447700900123", "Ada", "wamid.D1", "only once")
	if a.post(t, body) != 200 {
		t.Fatal("first delivery not answered 200")
	}
	for _, after := range []time.Duration{72 * time.Hour, 95*time.Hour - time.Minute} { // 3 days, then 6 days 23 hours in all
		clk.Advance(after)
		if a.post(t, body) != 200 || b.post(t, body) != 200 {
			t.Fatal("a retry was not answered 200")
		}
		if n := len(a.sink.all()) + len(b.sink.all()); n != 1 {
			t.Fatalf("delivered %d times after %v", n, clk.Now().Sub(time.Unix(1_800_000_000, 0)))
		}
	}
}

func TestStatusesCountedPerTenantNeverDelivered(t *testing.T) {
	r := newRig(t, nil, nil)
	for _, body := range [][]byte{
		whatsapptest.Status(biz1, "447700900123", "wamid.S1", "delivered", 0),
		whatsapptest.Status(biz1, "447700900123", "wamid.S1", "read", 0),
		whatsapptest.Status(biz2, "447700900123", "wamid.S2", "failed", 131026),
	} {
		if code := r.post(t, body); code != 200 {
			t.Fatalf("status: %d", code)
		}
	}
	if len(r.sink.all()) != 0 {
		t.Fatal("a status was delivered")
	}
	for k, want := range map[string]int{"t1/delivered": 1, "t1/read": 1, "t2/failed": 1, "t2/read": 0} {
		if got := r.stats.get(r.stats.counts, k); got != want {
			t.Errorf("%s: %d, want %d", k, got, want)
		}
	}
}

// A status is counted under the tenant that sent its message, which Meta
// echoes (biz_opaque_callback_data), not under the number's owner of the
// moment: the number moved to another tenant since.
func TestStatusCountedUnderTheSenderAfterTheNumberMoved(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.I1")
	if res := r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "hi", "reply_to": nil}); !res.Success {
		t.Fatalf("send: %+v", res)
	}
	sent := r.fake.Sent()
	if err := r.p.Bind([]platform.Binding{{Kind: platform.BindPhoneNumber, ID: biz1.PhoneNumberID, Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	if code := r.post(t, whatsapptest.StatusOf(biz1, sent[len(sent)-1], "read", 0)); code != 200 {
		t.Fatalf("status: %d", code)
	}
	for k, want := range map[string]int{"t1/read": 1, "t2/read": 0} {
		if got := r.stats.get(r.stats.counts, k); got != want {
			t.Errorf("%s: %d, want %d", k, got, want)
		}
	}
}

// A status whose echoed sender is not a configured tenant (deleted since,
// or another app's mark on the account: text from outside) is counted
// under UnknownSender, a configured one's under it: the tenant label
// stays bounded. Any marked text became a series of its own before.
func TestStatusOfASenderNotConfiguredCountedAsUnknown(t *testing.T) {
	r := newRig(t, nil, nil)
	r.p.SetTenants(map[string]time.Time{"t1": {}, "t2": {}})
	for _, sender := range []string{"t1", "gone", "other-app-tenant"} {
		sent := whatsapptest.Sent{To: "447700900123", ID: "wamid." + sender, Body: map[string]any{"biz_opaque_callback_data": senderMark + sender}}
		if code := r.post(t, whatsapptest.StatusOf(biz1, sent, "read", 0)); code != 200 {
			t.Fatalf("status: %d", code)
		}
	}
	for k, want := range map[string]int{"t1/read": 1, "unknown/read": 2, "gone/read": 0, "other-app-tenant/read": 0} {
		if got := r.stats.get(r.stats.counts, k); got != want {
			t.Errorf("%s: %d, want %d", k, got, want)
		}
	}
}

// converse makes user write to b so that b's tenant has a conversation.
func (r *rig) converse(t *testing.T, b whatsapptest.Business, user, wamid string) {
	t.Helper()
	if code := r.post(t, whatsapptest.Text(b, user, "U", wamid, "hello")); code != 200 {
		t.Fatalf("webhook: %d", code)
	}
}

func TestTwoNumbersTwoTenantsIsolated(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada, bob = "447700900123", "14155550142"
	r.converse(t, biz1, ada, "wamid.I1")
	r.converse(t, biz2, bob, "wamid.I2")
	send := func(tenant, user string) contract.Result {
		return r.exec(t, tenant, map[string]any{"op": "send", "chat_id": user, "content": "hi", "reply_to": nil, "metadata": map[string]any{}})
	}
	for _, c := range []struct{ tenant, user string }{{"t1", bob}, {"t2", ada}, {"t3", ada}, {"t1", "14155550199"}} {
		if res := send(c.tenant, c.user); res.Code != contract.CodeEgressDeclined {
			t.Errorf("%s to %s: %+v, want the decline", c.tenant, c.user, res)
		}
	}
	// A chat_id that is no wa_id at all is bad_request, as on every
	// platform (platform.Execute).
	if res := send("t1", "+44 7700 900123"); res.Code != contract.CodeBadRequest {
		t.Errorf("send to a chat_id that is no wa_id: %+v, want bad_request", res)
	}
	for _, op := range []map[string]any{
		{"op": "typing", "chat_id": bob}, {"op": "react", "chat_id": bob, "message_id": "wamid.I2", "emoji": "👀"},
		{"op": "get_chat_info", "chat_id": bob}, {"op": "prompt", "chat_id": bob, "content": "q", "prompt_id": "p1", "options": []any{map[string]any{"id": "a", "label": "A"}}},
	} {
		if res := r.exec(t, "t1", op); res.Code != contract.CodeEgressDeclined {
			t.Errorf("t1 %s on t2's user: %+v", op["op"], res)
		}
	}
	if res := send("t1", ada); !res.Success {
		t.Fatalf("t1 to its own user: %+v", res)
	}
	if res := send("t2", bob); !res.Success {
		t.Fatalf("t2 to its own user: %+v", res)
	}
	sent := r.fake.Sent()
	if len(sent) != 2 || sent[0].PhoneNumberID != biz1.PhoneNumberID || sent[0].To != ada ||
		sent[1].PhoneNumberID != biz2.PhoneNumberID || sent[1].To != bob {
		t.Fatalf("sent %+v", sent)
	}
	// The same user writing to both numbers has two conversations, each
	// answered from its own tenant's number.
	r.converse(t, biz2, ada, "wamid.I3")
	if res := send("t2", ada); !res.Success {
		t.Fatalf("t2 to ada: %+v", res)
	}
	if s := r.fake.Sent(); s[2].PhoneNumberID != biz2.PhoneNumberID {
		t.Fatalf("t2's send went out from %s", s[2].PhoneNumberID)
	}
	for _, op := range []string{"edit", "delete", "thread_create", "thread_rename", "draft", "follow_up"} {
		if res := r.exec(t, "t1", map[string]any{"op": op, "chat_id": ada, "session_key": "s"}); res.Code != contract.CodeUnsupportedOp {
			t.Errorf("%s: %+v, want unsupported_op", op, res)
		}
	}
}

func TestSendSplitsQuotesAndFormats(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.Q1")
	long := strings.Repeat("word ", 1000) // 5,000 characters
	res := r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "**Hello** " + long, "reply_to": "wamid.Q1", "metadata": map[string]any{}})
	if !res.Success {
		t.Fatal(res)
	}
	sent := r.fake.Sent()
	if len(sent) != 2 || res.MessageID != sent[0].ID {
		t.Fatalf("%d messages, result %+v", len(sent), res)
	}
	if sent[0].Context() != "wamid.Q1" || sent[1].Context() != "" {
		t.Fatalf("quotes: %q %q", sent[0].Context(), sent[1].Context())
	}
	body0, _ := sent[0].Block()["body"].(string)
	if !strings.HasPrefix(body0, "*Hello* word") || len([]rune(body0)) > maxMessageRunes {
		t.Fatalf("first part %.40q (%d)", body0, len([]rune(body0)))
	}
	// A reply to the bot's message quotes its text.
	tap := whatsapptest.Message(biz1, ada, "Ada", map[string]any{"id": "wamid.Q2", "type": "text", "text": map[string]any{"body": "why?"},
		"context": map[string]any{"from": biz1.DisplayNumber, "id": sent[1].ID}})
	if code := r.post(t, tap); code != 200 {
		t.Fatal(code)
	}
	got := r.sink.all()
	if rt := got[len(got)-1].Event.ReplyTo; rt == nil || !rt.IsOwn || rt.Text != sent[1].Block()["body"] {
		t.Fatalf("reply_to %+v", rt)
	}
	if res := r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "  ", "reply_to": nil}); res.Code != contract.CodeBadRequest {
		t.Fatalf("empty content: %+v", res)
	}
}

func TestWindowClosedHasItsOwnCode(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.W1")
	r.fake.CloseWindow(ada)
	res := r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "too late", "reply_to": nil})
	if res.Success || res.Code != contract.CodeWindowClosed || !strings.Contains(res.Error, "24-hour") {
		t.Fatalf("%+v", res)
	}
	if strings.Contains(res.Error, testToken) {
		t.Fatal("the token leaked")
	}
}

func TestPromptRoundTrip(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.P0")
	options := func(n int) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = map[string]any{"id": "o" + string(rune('a'+i)), "label": "Option number " + string(rune('A'+i)) + " with a long label"}
		}
		return out
	}
	for _, c := range []struct {
		n        int
		kind     string
		list     bool
		tapIndex int
	}{{2, "button", false, 1}, {7, "list", true, 6}} {
		prompt := "pr" + c.kind
		res := r.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Pick one", "prompt_id": prompt,
			"options": options(c.n), "reply_to": nil, "metadata": map[string]any{}})
		if !res.Success {
			t.Fatal(res)
		}
		sent := r.fake.Sent()
		msg := sent[len(sent)-1]
		if msg.Type != "interactive" || msg.Block()["type"] != c.kind || msg.ID != res.MessageID {
			t.Fatalf("%s prompt sent %+v", c.kind, msg.Body)
		}
		token := "hp1:" + prompt + ":o" + string(rune('a'+c.tapIndex))
		before := len(r.sink.all())
		tap := whatsapptest.Tap(biz1, ada, "Ada", "wamid.T"+c.kind, msg.ID, token, "Option", c.list)
		if code := r.post(t, tap); code != 200 {
			t.Fatal(code)
		}
		got := r.sink.all()
		if len(got) != before+1 {
			t.Fatal("no delivery for the tap")
		}
		ev := got[len(got)-1].Event
		pr := ev.PromptResponse
		if pr == nil || pr.PromptID != prompt || pr.OptionID != token[len(token)-2:] || pr.PromptMessageID != msg.ID ||
			ev.Text != "/"+pr.OptionID || ev.MessageType != contract.MessageCommand || ev.Source.UserID.Value != ada {
			t.Fatalf("tap event %+v (prompt_response %+v)", ev, pr)
		}
		// A second tap on the answered prompt is stale: a text turn.
		if code := r.post(t, whatsapptest.Tap(biz1, ada, "Ada", "wamid.U"+c.kind, msg.ID, token, "Option", c.list)); code != 200 {
			t.Fatal(code)
		}
		if ev := r.sink.all()[before+1].Event; ev.PromptResponse != nil || ev.Text != "Option" {
			t.Fatalf("stale tap %+v", ev)
		}
	}
	res := r.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Pick", "prompt_id": "many", "options": options(12), "reply_to": nil})
	sent := r.fake.Sent()
	if !res.Success || sent[len(sent)-1].Type != "text" || !strings.Contains(sent[len(sent)-1].Block()["body"].(string), "12. Option number L") {
		t.Fatalf("numbered prompt: %+v %+v", res, sent[len(sent)-1].Body)
	}
}

func TestReactTypingChatInfo(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.X1")
	if res := r.exec(t, "t1", map[string]any{"op": "react", "chat_id": ada, "message_id": "wamid.X1", "emoji": "👀"}); !res.Success {
		t.Fatal(res)
	}
	if res := r.exec(t, "t1", map[string]any{"op": "react", "chat_id": ada, "message_id": "wamid.X1", "emoji": "👀", "remove": true}); !res.Success {
		t.Fatal(res)
	}
	sent := r.fake.Sent()
	if sent[0].Type != "reaction" || sent[0].Block()["emoji"] != "👀" || sent[1].Block()["emoji"] != "" {
		t.Fatalf("reactions %+v %+v", sent[0].Body, sent[1].Body)
	}
	if res := r.exec(t, "t1", map[string]any{"op": "typing", "chat_id": ada}); !res.Success {
		t.Fatal(res)
	}
	if reads := r.fake.Reads(); len(reads) != 1 || reads[0].MessageID != "wamid.X1" || !reads[0].Typing || reads[0].PhoneNumberID != biz1.PhoneNumberID {
		t.Fatalf("reads %+v", reads)
	}
	res := r.exec(t, "t1", map[string]any{"op": "get_chat_info", "chat_id": ada})
	if !res.Success || res.ChatInfo == nil || res.ChatInfo.Name != ada || res.ChatInfo.Type != "dm" {
		t.Fatalf("chat info %+v", res)
	}
}

func TestSendMediaUploadsThenSendsByID(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.M1")
	data := make([]byte, 300_000)
	_, _ = rand.Read(data)
	info, err := r.media.Put("t1", bytes.NewReader(data), "application/pdf", "report.pdf")
	if err != nil {
		t.Fatal(err)
	}
	res := r.exec(t, "t1", map[string]any{"op": "send_media", "chat_id": ada, "media_kind": "document", "source_url": r.media.URL(info.ID),
		"content": "the report", "reply_to": "wamid.M1", "metadata": map[string]any{}})
	if !res.Success {
		t.Fatal(res)
	}
	sent := r.fake.Sent()
	msg := sent[len(sent)-1]
	id, _ := msg.Block()["id"].(string)
	up, ok := r.fake.Media(id)
	if msg.Type != "document" || !ok || !bytes.Equal(up.Data, data) || up.MIME != "application/pdf" || up.PhoneNumberID != biz1.PhoneNumberID ||
		msg.Block()["caption"] != "the report" || msg.Block()["filename"] != "report.pdf" || msg.Context() != "wamid.M1" {
		t.Fatalf("media message %+v, upload ok=%v mime=%s equal=%v", msg.Body, ok, up.MIME, bytes.Equal(up.Data, data))
	}
	// Another tenant's media id is not found.
	if res := r.exec(t, "t2", map[string]any{"op": "send_media", "chat_id": ada, "media_kind": "image", "source_url": r.media.URL(info.ID)}); res.Success {
		t.Fatal("t2 sent t1's media")
	}
}

// TestSendMediaCaptionNotSent: a voice note (which takes no caption) whose
// caption, sent after it, is refused answers the media's success with its
// id and an error saying the caption did not follow: before, it answered
// the failure, which the gateway resends, posting the media again.
func TestSendMediaCaptionNotSent(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.M1")
	info, err := r.media.Put("t1", bytes.NewReader([]byte("ogg bytes")), "audio/ogg", "note.ogg")
	if err != nil {
		t.Fatal(err)
	}
	before := len(r.fake.Sent())
	r.fake.Fail(whatsapptest.GraphError{}, whatsapptest.GraphError{Status: 400, Code: 100, Message: "(#100) Invalid parameter"})
	res := r.exec(t, "t1", map[string]any{"op": "send_media", "chat_id": ada, "media_kind": "voice", "source_url": r.media.URL(info.ID),
		"content": "listen to this", "reply_to": nil, "metadata": map[string]any{}})
	sent := r.fake.Sent()[before:]
	if !res.Success || res.Code != "" || len(sent) != 1 || sent[0].Type != "audio" || res.MessageID == "" ||
		!strings.HasSuffix(res.Error, "(the media was sent; its caption was not, or not whole)") {
		t.Fatalf("send_media = %+v with %d messages sent, want the voice note's success and the caption's failure", res, len(sent))
	}
}

func TestInboundMediaRehostedByteExact(t *testing.T) {
	r := newRig(t, nil, nil)
	data := make([]byte, 200_000)
	_, _ = rand.Read(data)
	r.fake.AddMedia("1290374517283301", "image/jpeg", data)
	body := whatsapptest.Message(biz1, "447700900123", "Ada", map[string]any{"id": "wamid.IMG", "type": "image",
		"image": map[string]any{"id": "1290374517283301", "mime_type": "image/jpeg", "caption": "Which plant is this?"}})
	if code := r.post(t, body); code != 200 {
		t.Fatal(code)
	}
	ev := r.sink.all()[0].Event
	if ev.Text != "Which plant is this?" || ev.MessageType != contract.MessagePhoto || len(ev.MediaURLs) != 1 || len(ev.Media) != 1 {
		t.Fatalf("event %+v", ev)
	}
	id, ok := r.media.ParseRef(ev.MediaURLs[0])
	if !ok {
		t.Fatalf("media url %q is no re-host", ev.MediaURLs[0])
	}
	obj, err := r.media.Open("t1", id)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	got, _ := io.ReadAll(obj.Section())
	if !bytes.Equal(got, data) || obj.MIME != "image/jpeg" || ev.Media[0].Kind != "image" {
		t.Fatalf("re-hosted %d bytes (%s), equal=%v", len(got), obj.MIME, bytes.Equal(got, data))
	}
	if strings.Contains(ev.MediaURLs[0], r.fake.URL) {
		t.Fatal("the Graph URL reached the gateway")
	}
}

// An attachment is fetched only up to max_inbound_media_bytes, also when
// the media lookup does not say its size: one whose bytes run past it is
// delivered without it, and nothing of it stays in the media store.
func TestInboundMediaOverTheLimitIsSkippedUnsized(t *testing.T) {
	r := newRig(t, nil, func(c *Config, _ *platform.Deps) { c.MaxInboundMediaBytes = 1000 })
	r.fake.PutMedia("1290374517283302", whatsapptest.Media{Data: make([]byte, 1001), MIME: "image/jpeg", Unsized: true})
	body := whatsapptest.Message(biz1, "447700900123", "Ada", map[string]any{"id": "wamid.BIG", "type": "image",
		"image": map[string]any{"id": "1290374517283302", "mime_type": "image/jpeg", "caption": "big"}})
	if code := r.post(t, body); code != 200 {
		t.Fatal(code)
	}
	if ev := r.sink.all()[0].Event; ev.Text != "big" || len(ev.Media) != 0 {
		t.Fatalf("delivered %q with %d media, want the caption alone", ev.Text, len(ev.Media))
	}
	if used := r.media.Stats().Bytes; used != 0 {
		t.Fatalf("the media store keeps %d bytes of the skipped attachment", used)
	}
}

// linker links every code "GOOD" to t2.
type linker struct{}

func (linker) Link(_ context.Context, _, _, code string) (string, time.Time, error) {
	if code == "GOOD" {
		return "t2", time.Time{}, nil
	}
	return "", time.Time{}, platform.ErrLinkRefused
}

func TestLinkRoutesAnUnownedNumber(t *testing.T) {
	v := vault.NewMemory(vault.Config{})
	r := newRig(t, v, func(c *Config, d *platform.Deps) { d.Linker = linker{} })
	const ada = "447700900123"
	if code := r.post(t, whatsapptest.Text(biz3, ada, "Ada", "wamid.L1", "/link GOOD")); code != 200 {
		t.Fatal(code)
	}
	if len(r.sink.all()) != 0 {
		t.Fatal("the /link message was delivered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent, err := r.fake.WaitSent(ctx, 1) // the link desk answers on its own workers
	if err != nil || len(sent) != 1 || sent[0].Block()["body"] != platform.LinkedReply || sent[0].PhoneNumberID != biz3.PhoneNumberID {
		t.Fatalf("link reply %+v", sent)
	}
	// The link grants t2 the number (a route key of it yields:
	// platform.GrantedIn); before, WhatsApp recorded no grant.
	if ok, err := platform.GrantedIn(ctx, v, platformName, biz3.PhoneNumberID, "t2"); !ok || err != nil {
		t.Fatalf("t2's grant of the number after the link: %v, %v", ok, err)
	}
	// The linked user's messages to the unowned number reach t2 (Bind as
	// the registry would after the link).
	if err := r.p.Bind([]platform.Binding{
		{Kind: platform.BindPhoneNumber, ID: biz1.PhoneNumberID, Tenant: "t1"},
		{Kind: platform.BindUser, ID: ada, Tenant: "t2"},
	}); err != nil {
		t.Fatal(err)
	}
	if code := r.post(t, whatsapptest.Text(biz3, ada, "Ada", "wamid.L2", "hi agent")); code != 200 {
		t.Fatal(code)
	}
	if got := r.sink.all(); len(got) != 1 || got[0].Tenant != "t2" {
		t.Fatalf("deliveries %+v", got)
	}
	if res := r.exec(t, "t2", map[string]any{"op": "send", "chat_id": ada, "content": "hello", "reply_to": nil}); !res.Success {
		t.Fatal(res)
	}
	if s := r.fake.Sent(); s[len(s)-1].PhoneNumberID != biz3.PhoneNumberID {
		t.Fatalf("sent from %s", s[len(s)-1].PhoneNumberID)
	}
	if err := r.p.Bind([]platform.Binding{{Kind: "guild", ID: "1", Tenant: "t1"}}); err == nil {
		t.Fatal("a guild binding was accepted")
	}
}

func TestGateDropsAsNatively(t *testing.T) {
	r := newRig(t, nil, func(c *Config, _ *platform.Deps) {
		c.AllowAllUsers = nil
		c.Tenants = map[string]TenantConfig{"t2": {DMPolicy: "allowlist", AllowFrom: List{"+44 7700 900123"}}}
	})
	// t1: open without allow_all_users fails closed; t2: allowlist.
	r.converse(t, biz1, "447700900123", "wamid.G1")
	r.converse(t, biz2, "14155550142", "wamid.G2")
	r.converse(t, biz2, "447700900123", "wamid.G3")
	got := r.sink.all()
	if len(got) != 1 || got[0].Tenant != "t2" || got[0].Event.MessageID != "wamid.G3" {
		t.Fatalf("deliveries %+v", got)
	}
	if r.stats.get(r.stats.dropped, dropOpenNotOptedIn) != 1 || r.stats.get(r.stats.dropped, dropNotAllowlisted) != 1 {
		t.Fatalf("drops %v", r.stats.dropped)
	}
}

// TestRateLimitBacksOffAndRetries: a rate-limit answer holds the user for
// the backoff on the injected clock, and the message is sent again after
// it; limits that outlast the request's deadline end in rate_limited with
// nothing more sent.
func TestRateLimitBacksOffAndRetries(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	r := newRig(t, nil, func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.RL")
	// send runs one send in its own goroutine while the test drives the
	// clock, and returns its result and how long it took on the clock.
	send := func(content string) (contract.Result, time.Duration) {
		t.Helper()
		var (
			res  contract.Result
			done atomic.Int32
		)
		start := clk.Now()
		go func() {
			defer done.Add(1)
			res = r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": content, "reply_to": nil})
		}()
		number := r.p.numberBudget(biz1.PhoneNumberID)
		clk.Drive(t, 1, func() int { return int(done.Load()) }, func() int { return r.p.budget.Waiting("t1") + number.Waiting("t1") })
		return res, clk.Now().Sub(start)
	}
	r.fake.Fail(whatsapptest.GraphError{Status: 400, Code: 131056, Message: "(#131056) (Business Account, Consumer Account) pair rate limit hit"})
	res, took := send("after a pause")
	if !res.Success || len(r.fake.Sent()) != 1 {
		t.Fatalf("%+v, %d sent", res, len(r.fake.Sent()))
	}
	if took != pace.BackoffMin {
		t.Errorf("the send after a pair limit took %v on the clock, want the backoff of %v", took, pace.BackoffMin)
	}
	// Limits that outlast the deadline (10 s, less the margin kept for
	// the call) are rate_limited: backoffs of 1, 2 and 4 s, and the next
	// 8 s are past it.
	for range 8 {
		r.fake.Fail(whatsapptest.GraphError{Status: 400, Code: 80007, Message: "(#80007) Rate limit issues"})
	}
	if res, _ := send("x"); res.Code != contract.CodeRateLimited || res.RetryAfterMS <= 0 {
		t.Fatalf("%+v", res)
	}
	if n := len(r.fake.Sent()); n != 1 {
		t.Errorf("%d messages sent, want only the first: Meta refused the rest", n)
	}
}

// blockingSink holds every delivery until release is closed.
type blockingSink struct {
	*recordingSink
	entered chan struct{}
	release chan struct{}
}

func (s blockingSink) Deliver(ctx context.Context, d platform.Delivery) error {
	s.entered <- struct{}{}
	<-s.release
	return s.recordingSink.Deliver(ctx, d)
}

// TestCopyWhileStoringIsRetriedNotDoubled: Meta sends a copy of a message
// to a second instance while the first is still storing it (its answer
// was late); the second answers 503, so Meta retries, and the retry is
// dropped as delivered.
func TestCopyWhileStoringIsRetriedNotDoubled(t *testing.T) {
	shared, st := vault.NewMemory(vault.Config{}), store.NewMemory(nil)
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
	slow := blockingSink{recordingSink: a.sink, entered: make(chan struct{}), release: make(chan struct{})}
	a.p.sink.Store(ptr[platform.Sink](slow))
	body := whatsapptest.Text(biz1, "447700900123", "Ada", "wamid.C1", "slow")
	first := make(chan int)
	go func() { first <- a.post(t, body) }()
	select {
	case <-slow.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first instance never delivered")
	}
	if code := b.post(t, body); code != http.StatusServiceUnavailable {
		t.Fatalf("the copy on the second instance: %d, want 503", code)
	}
	close(slow.release)
	if code := <-first; code != 200 {
		t.Fatalf("first: %d", code)
	}
	if code := b.post(t, body); code != 200 {
		t.Fatalf("Meta's retry: %d", code)
	}
	if n := len(a.sink.all()) + len(b.sink.all()); n != 1 {
		t.Fatalf("delivered %d times", n)
	}
}

func ptr[T any](v T) *T { return &v }

// TestFairShareBetweenTenants: with the app's budget at one call a
// second, a tenant flooding sends does not make another tenant's one send
// wait behind its queue (platform/fairshare, on the injected clock).
func TestFairShareBetweenTenants(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	r := newRig(t, nil, func(c *Config, d *platform.Deps) { c.GlobalPerSecond = 1; d.Clock = clk })
	const ada, bob = "447700900123", "14155550142"
	r.converse(t, biz1, ada, "wamid.F1")
	r.converse(t, biz2, bob, "wamid.F2")
	var done atomic.Int32
	run := func(tenant, user string) {
		go func() {
			defer done.Add(1)
			if res := r.exec(t, tenant, map[string]any{"op": "send", "chat_id": user, "content": tenant, "reply_to": nil}); !res.Success {
				t.Errorf("%s: %+v", tenant, res)
			}
		}()
	}
	finished := func() int { return int(done.Load()) }
	waiting := func() int { return r.p.budget.Waiting("t1") + r.p.budget.Waiting("t2") }
	for range 6 {
		run("t1", ada)
	}
	clk.Settle(t, 6, finished, waiting)
	run("t2", bob)
	clk.Drive(t, 7, finished, waiting)
	sent := r.fake.Sent()
	for i, s := range sent {
		if s.To == bob {
			if i > 2 {
				t.Fatalf("t2's one send went out %dth, behind t1's flood", i+1)
			}
			return
		}
	}
	t.Fatal("t2's send never went out")
}

// TestNumberBudgetIsPerNumber: each business number has its own send
// budget (number_per_second), so a number that spent it holds its next
// send while another number's goes out; a throughput answer (130429)
// holds the tenant's sends from that number, not the app's.
func TestNumberBudgetIsPerNumber(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	r := newRig(t, nil, func(c *Config, d *platform.Deps) { c.NumberPerSecond, c.ChatPerSecond, d.Clock = 2, -1, clk })
	const ada, bob, cyd = "447700900123", "14155550142", "447700900456"
	r.converse(t, biz1, ada, "wamid.N1")
	r.converse(t, biz2, bob, "wamid.N2")
	r.converse(t, biz1, cyd, "wamid.N3")
	var done atomic.Int32
	run := func(tenant, user string) {
		go func() {
			defer done.Add(1)
			if res := r.exec(t, tenant, map[string]any{"op": "send", "chat_id": user, "content": tenant, "reply_to": nil}); !res.Success {
				t.Errorf("%s to %s: %+v", tenant, user, res)
			}
		}()
	}
	finished := func() int { return int(done.Load()) }
	number1, number2 := r.p.numberBudget(biz1.PhoneNumberID), r.p.numberBudget(biz2.PhoneNumberID)
	waiting := func() int { return number1.Waiting("t1") + number2.Waiting("t2") }

	for range 3 {
		run("t1", ada)
	}
	clk.Settle(t, 3, finished, waiting)
	if n := finished(); n != 2 || number1.Waiting("t1") != 1 {
		t.Fatalf("3 sends from a number with a budget of 2: %d went out, %d wait; want 2 and 1", n, number1.Waiting("t1"))
	}
	run("t2", bob)
	clk.Settle(t, 4, finished, waiting)
	if n := finished(); n != 3 {
		t.Fatalf("the other number's send waited: %d of 4 sends done, want 3", n)
	}
	clk.Drive(t, 4, finished, waiting)

	clk.Advance(time.Second) // number 1's budget refills
	r.fake.Fail(whatsapptest.GraphError{Status: 400, Code: 130429, Message: "(#130429) Rate limit hit"})
	run("t1", ada) // throttled: backs off on the clock, holding t1 on number 1
	clk.Settle(t, 5, finished, waiting)
	run("t1", cyd)
	run("t2", bob)
	clk.Settle(t, 7, finished, waiting)
	if n, s := finished(), len(r.fake.Sent()); n != 5 || s != 5 {
		t.Fatalf("after a 130429 on number 1: %d of 7 sends done and %d sent; want 5 (number 2's went out, t1's two on number 1 held)", n, s)
	}
	clk.Drive(t, 7, finished, waiting)
	if n := len(r.fake.Sent()); n != 7 {
		t.Fatalf("%d messages sent, want 7", n)
	}
}

// TestAccountThrottleHoldsOnlyTheTenantThatGotIt: an application or
// account rate-limit answer (80007) to one tenant's send holds that
// tenant's sends for the backoff, not the app's budget: another tenant's
// send goes out at once meanwhile. Before, the answer paused the whole app
// for the throttled user's backoff (doubling up to 64 s with each answer in
// a row), so one tenant flooding held every other tenant's sends. A pair
// limit holds the one user.
func TestAccountThrottleHoldsOnlyTheTenantThatGotIt(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	r := newRig(t, nil, func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada, bob, cyd = "447700900123", "14155550142", "447700900456"
	r.converse(t, biz1, ada, "wamid.A1")
	r.converse(t, biz2, bob, "wamid.A2")
	r.converse(t, biz1, cyd, "wamid.A3")
	var done atomic.Int32
	run := func(tenant, user string) {
		go func() {
			defer done.Add(1)
			if res := r.exec(t, tenant, map[string]any{"op": "send", "chat_id": user, "content": tenant, "reply_to": nil}); !res.Success {
				t.Errorf("%s to %s: %+v", tenant, user, res)
			}
		}()
	}
	finished := func() int { return int(done.Load()) }
	waiting := func() int {
		return r.p.budget.Waiting("t1") + r.p.budget.Waiting("t2") + r.p.numberBudget(biz1.PhoneNumberID).Waiting("t1") + r.p.numberBudget(biz2.PhoneNumberID).Waiting("t2")
	}
	start := clk.Now()
	r.fake.Fail(whatsapptest.GraphError{Status: 400, Code: 80007, Message: "(#80007) Rate limit issues"})
	run("t1", ada) // throttled: t1 is held for the backoff
	clk.Settle(t, 1, finished, waiting)
	run("t1", cyd)
	run("t2", bob)
	clk.Settle(t, 3, finished, waiting)
	if sent := r.fake.Sent(); finished() != 1 || len(sent) != 1 || sent[0].To != bob {
		t.Fatalf("while t1 is held after an 80007: %d of 3 sends done, %d sent; want t2's alone, at once", finished(), len(sent))
	}
	clk.Drive(t, 3, finished, waiting)
	if n, took := len(r.fake.Sent()), clk.Now().Sub(start); n != 3 || took != pace.BackoffMin {
		t.Fatalf("%d sent, the last after %v; want 3, t1's after its backoff of %v", n, took, pace.BackoffMin)
	}
	// The pair limit (131056) holds the one user: t1's send to another
	// user goes out at once.
	r.fake.Fail(whatsapptest.GraphError{Status: 400, Code: 131056, Message: "(#131056) (Business Account, Consumer Account) pair rate limit hit"})
	run("t1", ada)
	clk.Settle(t, 4, finished, waiting)
	run("t1", cyd)
	clk.Settle(t, 5, finished, waiting)
	if sent := r.fake.Sent(); finished() != 4 || sent[len(sent)-1].To != cyd {
		t.Fatalf("while ada is held after a 131056: %d of 5 sends done; want t1's to cyd out at once", finished())
	}
	clk.Drive(t, 5, finished, waiting)
}

// TestAppThrottleHoldsTheTenantsReadMarks: after an application rate-limit
// answer (4) to t1's send, t1's typing (a read mark, an app call as a
// media upload is) waits out t1's hold too, then goes out. Before, the
// hold covered t1's messages only: its read marks and uploads kept calling
// the app Meta throttled (the answer paused the app's budget, which those
// wait for, until the hold moved to the tenant).
func TestAppThrottleHoldsTheTenantsReadMarks(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	r := newRig(t, nil, func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.R1")
	var done atomic.Int32
	run := func(action map[string]any) {
		go func() {
			defer done.Add(1)
			if res := r.exec(t, "t1", action); !res.Success {
				t.Errorf("%v: %+v", action["op"], res)
			}
		}()
	}
	finished := func() int { return int(done.Load()) }
	waiting := func() int { return r.p.budget.Waiting("t1") + r.p.numberBudget(biz1.PhoneNumberID).Waiting("t1") }
	start := clk.Now()
	r.fake.Fail(whatsapptest.GraphError{Status: 400, Code: 4, Message: "(#4) Application request limit reached"})
	run(map[string]any{"op": "send", "chat_id": ada, "content": "throttled", "reply_to": nil})
	clk.Settle(t, 1, finished, waiting)
	run(map[string]any{"op": "typing", "chat_id": ada})
	clk.Settle(t, 2, finished, waiting)
	if n := len(r.fake.Reads()); n != 0 {
		t.Fatalf("%d read marks went out while t1 was held after an app throttle, want none", n)
	}
	clk.Drive(t, 2, finished, waiting)
	if n, took := len(r.fake.Reads()), clk.Now().Sub(start); n != 1 || took != pace.BackoffMin {
		t.Fatalf("%d read marks, the last after %v; want 1, after t1's backoff of %v", n, took, pace.BackoffMin)
	}
}

// A status is counted once although Meta sends its payload again because
// a message of it could not be stored.
func TestStatusCountedOnceWhenItsPayloadIsRetried(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	var body, msg map[string]any
	if err := json.Unmarshal(whatsapptest.Status(biz1, ada, "wamid.S9", "delivered", 0), &body); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(whatsapptest.Text(biz1, ada, "Ada", "wamid.M9", "hi"), &msg); err != nil {
		t.Fatal(err)
	}
	body["entry"] = append(body["entry"].([]any), msg["entry"].([]any)...)
	raw, _ := json.Marshal(body)
	r.sink.mu.Lock()
	r.sink.fail = true
	r.sink.mu.Unlock()
	if code := r.post(t, raw); code != http.StatusServiceUnavailable {
		t.Fatalf("with the message refused: %d", code)
	}
	r.sink.mu.Lock()
	r.sink.fail = false
	r.sink.mu.Unlock()
	if code := r.post(t, raw); code != http.StatusOK {
		t.Fatalf("retry: %d", code)
	}
	if got := r.stats.get(r.stats.counts, "t1/delivered"); got != 1 {
		t.Fatalf("the status was counted %d times, want once", got)
	}
	if n := len(r.sink.all()); n != 1 {
		t.Fatalf("%d deliveries, want the message once", n)
	}
}

// A conversation through a number no tenant owns lets its tenant act only
// while the user is linked to it: once the link is revoked, or once the
// tenant's number is unbound at runtime, the conversation record (kept 30
// days) no longer lets the tenant send from that number.
func TestConversationOnAnUnownedNumberEndsWithTheGrant(t *testing.T) {
	r := newRig(t, nil, func(c *Config, d *platform.Deps) { d.Linker = linker{} })
	const ada = "447700900123"
	send := func(tenant string) contract.Result {
		return r.exec(t, tenant, map[string]any{"op": "send", "chat_id": ada, "content": "hi", "reply_to": nil})
	}
	linked := []platform.Binding{
		{Kind: platform.BindPhoneNumber, ID: biz1.PhoneNumberID, Tenant: "t1"},
		{Kind: platform.BindUser, ID: ada, Tenant: "t2"},
	}
	if err := r.p.Bind(linked); err != nil {
		t.Fatal(err)
	}
	r.converse(t, biz3, ada, "wamid.G1") // reaches t2 by author link
	r.converse(t, biz1, ada, "wamid.G2") // reaches t1, the number's owner
	if got := r.sink.all(); len(got) != 2 || got[0].Tenant != "t2" || got[1].Tenant != "t1" {
		t.Fatalf("deliveries %+v", got)
	}
	if res := send("t2"); !res.Success {
		t.Fatalf("t2 to its linked user: %+v", res)
	}
	// The link is revoked and t1's number unbound (SIGHUP or the admin API).
	if err := r.p.Bind(nil); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"t2", "t1"} {
		if res := send(tenant); res.Code != contract.CodeEgressDeclined {
			t.Errorf("%s after losing the user: %+v, want the decline", tenant, res)
		}
		ctx := platform.WithTenant(context.Background(), tenant)
		if got, err := r.p.ChatTenant(ctx, ada); err == nil {
			t.Errorf("ChatTenant for %s after losing the user: %q", tenant, got)
		}
	}
	if n := len(r.fake.Sent()); n != 1 {
		t.Fatalf("%d messages went out, want only the one before the unbinding", n)
	}
}

// refusingSink refuses one tenant's deliveries while refuse is set.
type refusingSink struct {
	*recordingSink
	tenant string
	refuse *atomic.Bool
}

func (s refusingSink) Deliver(ctx context.Context, d platform.Delivery) error {
	if s.refuse.Load() && d.Tenant == s.tenant {
		return errors.New("t1's ledger refused")
	}
	return s.recordingSink.Deliver(ctx, d)
}

// joinEntries is one payload carrying the entries of several.
func joinEntries(t *testing.T, bodies ...[]byte) []byte {
	t.Helper()
	var entries []any
	for _, b := range bodies {
		var pl map[string]any
		if err := json.Unmarshal(b, &pl); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, pl["entry"].([]any)...)
	}
	out, _ := json.Marshal(map[string]any{"object": "whatsapp_business_account", "entry": entries})
	return out
}

// A payload mixing two tenants' numbers: a message of t1 that cannot be
// stored does not hold back t2's message behind it (it is delivered on
// the first try, and once only when Meta retries), and t1's later message
// of the same user waits for the retry, so t1's chat keeps its order.
func TestOneTenantsFailureDoesNotHoldBackTheOthers(t *testing.T) {
	r := newRig(t, nil, nil)
	refuse := new(atomic.Bool)
	refuse.Store(true)
	r.p.sink.Store(ptr[platform.Sink](refusingSink{recordingSink: r.sink, tenant: "t1", refuse: refuse}))
	const ada, bob = "447700900123", "14155550142"
	body := joinEntries(t,
		whatsapptest.Text(biz1, ada, "Ada", "wamid.H1", "first"),
		whatsapptest.Text(biz2, bob, "Bob", "wamid.H2", "for t2"),
		whatsapptest.Text(biz1, ada, "Ada", "wamid.H3", "second"))
	if code := r.post(t, body); code != http.StatusServiceUnavailable {
		t.Fatalf("webhook with t1's message not stored: %d, want 503", code)
	}
	if got := r.sink.all(); len(got) != 1 || got[0].Tenant != "t2" || got[0].Event.Text != "for t2" {
		t.Fatalf("deliveries while t1's is refused: %+v, want t2's alone", got)
	}
	refuse.Store(false)
	if code := r.post(t, body); code != http.StatusOK {
		t.Fatalf("Meta's retry: %d", code)
	}
	var texts []string
	for _, d := range r.sink.all() {
		texts = append(texts, d.Tenant+":"+d.Event.Text)
	}
	if want := []string{"t2:for t2", "t1:first", "t1:second"}; !slices.Equal(texts, want) {
		t.Fatalf("deliveries %q, want %q", texts, want)
	}
}

// Past 24 hours since the user last wrote, Meta accepts a free-form
// message and fails it later in a status (131047), so the connector
// answers window_closed itself, sending nothing; the user's next message
// opens the window again.
func TestWindowClosedAfter24HoursWithoutSending(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	r := newRig(t, nil, func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.X1")
	send := func() contract.Result {
		return r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "hello", "reply_to": nil})
	}
	clk.Advance(23 * time.Hour)
	if res := send(); !res.Success {
		t.Fatalf("send within the window: %+v", res)
	}
	clk.Advance(time.Hour)
	for _, a := range []map[string]any{
		{"op": "send", "chat_id": ada, "content": "too late", "reply_to": nil},
		{"op": "prompt", "chat_id": ada, "content": "q", "prompt_id": "p1", "options": []any{map[string]any{"id": "a", "label": "A"}}},
		{"op": "react", "chat_id": ada, "message_id": "wamid.X1", "emoji": "👀"},
	} {
		if res := r.exec(t, "t1", a); res.Code != contract.CodeWindowClosed || !strings.Contains(res.Error, "24-hour") {
			t.Errorf("%s 24 h after the user wrote: %+v, want window_closed", a["op"], res)
		}
	}
	if n := len(r.fake.Sent()); n != 1 {
		t.Fatalf("%d messages went out, want only the one within the window", n)
	}
	r.converse(t, biz1, ada, "wamid.X2")
	if res := send(); !res.Success {
		t.Fatalf("send after the user wrote again: %+v", res)
	}
}

// The window runs from when the user sent their message (its timestamp),
// not from when Meta's webhook got through: a message stored on a retry
// a day after it was sent leaves the window closed, and a late message
// does not move back the window a later one opened.
func TestWindowRunsFromTheMessagesTimestamp(t *testing.T) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	r := newRig(t, nil, func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada, bob = "447700900123", "14155550142"
	sentAgo := func(user, wamid string, ago time.Duration) {
		t.Helper()
		ts := strconv.FormatInt(clk.Now().Add(-ago).Unix(), 10)
		body := whatsapptest.Message(biz1, user, "U", map[string]any{"id": wamid, "type": "text", "timestamp": ts, "text": map[string]any{"body": "hi"}})
		if code := r.post(t, body); code != 200 {
			t.Fatalf("webhook: %d", code)
		}
	}
	send := func(user string) contract.Result {
		return r.exec(t, "t1", map[string]any{"op": "send", "chat_id": user, "content": "hello", "reply_to": nil})
	}
	sentAgo(ada, "wamid.Y1", 25*time.Hour) // Meta's retry, a day late
	if res := send(ada); res.Code != contract.CodeWindowClosed {
		t.Fatalf("send to a user who wrote 25 h ago: %+v, want window_closed", res)
	}
	sentAgo(bob, "wamid.Y2", 0)
	sentAgo(bob, "wamid.Y3", 20*time.Hour) // an older message, stored late
	clk.Advance(23 * time.Hour)
	if res := send(bob); !res.Success {
		t.Fatalf("send 23 h after the user's latest message: %+v", res)
	}
	if n := len(r.sink.all()); n != 3 {
		t.Fatalf("%d deliveries, want the three messages", n)
	}
}

// A "/link" sent to another tenant's number does not replace the linked
// tenant's conversation with the user: t2 still answers, and shows typing
// on, the message the user wrote to t2's own number.
func TestLinkOnAnotherTenantsNumberKeepsTheConversation(t *testing.T) {
	r := newRig(t, nil, func(c *Config, d *platform.Deps) { d.Linker = linker{} })
	const ada = "447700900123"
	r.converse(t, biz2, ada, "wamid.K1")
	if code := r.post(t, whatsapptest.Text(biz1, ada, "Ada", "wamid.K2", "/link GOOD")); code != 200 {
		t.Fatal(code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if sent, err := r.fake.WaitSent(ctx, 1); err != nil || sent[0].Block()["body"] != platform.LinkedReply {
		t.Fatalf("link reply %+v: %v", sent, err)
	}
	if err := r.p.Bind([]platform.Binding{
		{Kind: platform.BindPhoneNumber, ID: biz1.PhoneNumberID, Tenant: "t1"},
		{Kind: platform.BindPhoneNumber, ID: biz2.PhoneNumberID, Tenant: "t2"},
		{Kind: platform.BindUser, ID: ada, Tenant: "t2"},
	}); err != nil {
		t.Fatal(err)
	}
	if res := r.exec(t, "t2", map[string]any{"op": "typing", "chat_id": ada}); !res.Success {
		t.Fatal(res)
	}
	if reads := r.fake.Reads(); len(reads) != 1 || reads[0].MessageID != "wamid.K1" || reads[0].PhoneNumberID != biz2.PhoneNumberID {
		t.Fatalf("typing marked %+v, want wamid.K1 read on t2's number", reads)
	}
}

// TestLinkConversationIsTheIssuingCreations: Ada's "/link" on t2's number
// redeems a code the t2 created at first issued; t2 is deleted and made
// again as the redemption reads her conversation, after RedeemLink judged
// the creation. The conversation it writes is the earlier t2's, so the new
// t2 has none with her. Before, it was stored as the new t2's.
func TestLinkConversationIsTheIssuingCreations(t *testing.T) {
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var remade atomic.Bool
	since := func(string) time.Time {
		if remade.Load() {
			return again
		}
		return first
	}
	v := &convRemakingVault{Memory: vault.NewMemory(vault.Config{Since: since}), remade: &remade}
	r := newRig(t, v, func(_ *Config, d *platform.Deps) { d.Linker = creationLinker{created: first} })
	const ada = "447700900123"
	if code := r.post(t, whatsapptest.Text(biz2, ada, "Ada", "wamid.L1", "/link GOOD")); code != 200 {
		t.Fatal(code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if sent, err := r.fake.WaitSent(ctx, 1); err != nil || sent[0].Block()["body"] != platform.LinkedReply {
		t.Fatalf("link reply %+v: %v", sent, err)
	}
	if !remade.Load() {
		t.Fatal("the redemption did not read Ada's conversation")
	}
	if _, ok, _ := r.p.conversation(ctx, "t2", ada); ok {
		t.Fatal("the t2 made again has a conversation with Ada, written by the earlier t2's link")
	}
}

// TestMessageConversationIsTheRoutedCreations: Ada's message to t2's
// number, sent five minutes ago (late: her conversation is read first),
// is routed to t2 as created at first; t2 is deleted and made again as
// that read runs. The conversation the message writes is the earlier
// t2's, so the new t2 has none with her. Before, it was stored as the new
// t2's, which could then write to her though her message was never its.
func TestMessageConversationIsTheRoutedCreations(t *testing.T) {
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var remade atomic.Bool
	since := func(string) time.Time {
		if remade.Load() {
			return again
		}
		return first
	}
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	v := &convRemakingVault{Memory: vault.NewMemory(vault.Config{Since: since, Clock: clk}), remade: &remade}
	r := newRig(t, v, func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada = "447700900123"
	ts := strconv.FormatInt(clk.Now().Add(-5*time.Minute).Unix(), 10)
	body := whatsapptest.Message(biz2, ada, "Ada", map[string]any{"id": "wamid.M1", "type": "text", "timestamp": ts, "text": map[string]any{"body": "hi"}})
	if code := r.post(t, body); code != 200 {
		t.Fatal(code)
	}
	if !remade.Load() {
		t.Fatal("the message did not read Ada's conversation")
	}
	if _, ok, _ := r.p.conversation(context.Background(), "t2", ada); ok {
		t.Fatal("the t2 made again has a conversation with Ada, written by a message routed to the earlier t2")
	}
}

// creationLinker links code GOOD to t2 as created at created.
type creationLinker struct{ created time.Time }

func (l creationLinker) Link(_ context.Context, _, _, code string) (string, time.Time, error) {
	if code == "GOOD" {
		return "t2", l.created, nil
	}
	return "", time.Time{}, platform.ErrLinkRefused
}

// convRemakingVault is a vault.Memory that marks its tenant made again
// (remade) when a conversation is read.
type convRemakingVault struct {
	*vault.Memory
	remade *atomic.Bool
}

func (v *convRemakingVault) Get(ctx context.Context, k vault.Key) (vault.Entry, bool) {
	e, ok := v.Memory.Get(ctx, k)
	if k.Kind == vault.KindWhatsAppConversation {
		v.remade.Store(true)
	}
	return e, ok
}

// typing and send_media's upload wait for the app's budget like a message
// does: when it does not free up before the request's deadline, the
// answer is rate_limited with a retry_after, not unavailable after the
// whole deadline went by.
func TestTypingWhenTheBudgetIsSpentIsRateLimited(t *testing.T) {
	r := newRig(t, nil, func(c *Config, _ *platform.Deps) { c.GlobalPerSecond = 1 })
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.T1")
	if res := r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "spends the budget", "reply_to": nil}); !res.Success {
		t.Fatal(res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond) // less than the budget's next unit
	defer cancel()
	res := r.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpTyping, ChatID: ada})
	if res.Code != contract.CodeRateLimited || res.RetryAfterMS <= 0 {
		t.Fatalf("typing with the app's budget spent: %+v, want rate_limited with retry_after_ms", res)
	}
	if n := len(r.fake.Reads()); n != 0 {
		t.Fatalf("%d read marks went out", n)
	}
}

// TestCallWaitingWhileItsNumberIsRebound: t1's typing, and send_media's
// upload, wait for the app's budget, and meanwhile the number is bound to
// t2. The call is declined and nothing goes out from the number, now
// t2's. Only the message was checked after its wait: typing marked the
// user's message read and showed "typing..." from t2's number, and the
// upload put t1's file on it.
func TestCallWaitingWhileItsNumberIsRebound(t *testing.T) {
	for _, op := range []string{"typing", "send_media"} {
		t.Run(op, func(t *testing.T) {
			clk := clocktest.New(time.Unix(1_800_000_000, 0))
			r := newRig(t, nil, func(c *Config, d *platform.Deps) { c.GlobalPerSecond, d.Clock = 1, clk })
			const ada = "447700900123"
			r.converse(t, biz1, ada, "wamid.C1")
			info, err := r.media.Put("t1", strings.NewReader("a report"), "application/pdf", "report.pdf")
			if err != nil {
				t.Fatal(err)
			}
			if res := r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "spends the budget", "reply_to": nil}); !res.Success {
				t.Fatal(res)
			}
			var done atomic.Int32
			var res contract.Result
			go func() {
				defer done.Add(1)
				res = r.exec(t, "t1", map[string]any{"op": op, "chat_id": ada, "media_kind": "document", "source_url": r.media.URL(info.ID)})
			}()
			finished := func() int { return int(done.Load()) }
			waiting := func() int { return r.p.budget.Waiting("t1") }
			clk.Settle(t, 1, finished, waiting)
			if waiting() != 1 {
				t.Fatal("the call does not wait for the app's budget")
			}
			if err := r.p.Bind([]platform.Binding{{Kind: platform.BindPhoneNumber, ID: biz1.PhoneNumberID, Tenant: "t2"}}); err != nil {
				t.Fatal(err)
			}
			clk.Drive(t, 1, finished, waiting)
			if res.Code != contract.CodeEgressDeclined {
				t.Errorf("%s after the rebind: %+v, want declined", op, res)
			}
			if reads, ups := len(r.fake.Reads()), r.fake.Uploads(); reads != 0 || ups != 0 {
				t.Fatalf("%d read marks and %d uploads went out from t2's number", reads, ups)
			}
		})
	}
}

// A "/link" sent to a number the linked tenant already owns keeps the
// message id of the user's conversation on it: typing still marks the
// user's message read, not nothing until the user writes again.
func TestLinkOnTheTenantsOwnNumberKeepsTheLastMessage(t *testing.T) {
	r := newRig(t, nil, func(c *Config, d *platform.Deps) { d.Linker = linker{} })
	const ada = "447700900123"
	r.converse(t, biz2, ada, "wamid.O1")
	if code := r.post(t, whatsapptest.Text(biz2, ada, "Ada", "wamid.O2", "/link GOOD")); code != 200 {
		t.Fatal(code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if sent, err := r.fake.WaitSent(ctx, 1); err != nil || sent[0].Block()["body"] != platform.LinkedReply {
		t.Fatalf("link reply %+v: %v", sent, err)
	}
	if res := r.exec(t, "t2", map[string]any{"op": "typing", "chat_id": ada}); !res.Success {
		t.Fatal(res)
	}
	if reads := r.fake.Reads(); len(reads) != 1 || reads[0].MessageID != "wamid.O1" || reads[0].PhoneNumberID != biz2.PhoneNumberID {
		t.Fatalf("typing marked %+v, want wamid.O1 read on t2's number", reads)
	}
}

// TestRetriedMessageReusesItsRehost: the sink refuses a message with an
// image twice (the store behind it is down) and Meta retries the webhook
// each time; the third copy is delivered with the image re-hosted once.
// Each retry used to download and store the image again, and the copies,
// never delivered, filled the tenant's media quota until they expired, so
// its later attachments went without their files.
func TestRetriedMessageReusesItsRehost(t *testing.T) {
	r := newRig(t, nil, nil)
	r.fake.AddMedia("1290374517283301", "image/jpeg", []byte("a plant"))
	body := whatsapptest.Message(biz1, "447700900123", "Ada", map[string]any{"id": "wamid.IMG", "type": "image",
		"image": map[string]any{"id": "1290374517283301", "mime_type": "image/jpeg"}})
	refuse := func(on bool) {
		r.sink.mu.Lock()
		r.sink.fail = on
		r.sink.mu.Unlock()
	}
	refuse(true)
	for range 2 {
		if code := r.post(t, body); code != http.StatusServiceUnavailable {
			t.Fatalf("with the message refused: %d", code)
		}
	}
	refuse(false)
	if code := r.post(t, body); code != http.StatusOK {
		t.Fatalf("retry: %d", code)
	}
	if got := r.sink.all(); len(got) != 1 || len(got[0].Event.Media) != 1 {
		t.Fatalf("delivered %d events, want one with the image", len(got))
	}
	if n := r.media.Stats().Objects; n != 1 {
		t.Fatalf("the media store holds %d objects, want the image once", n)
	}
}

// TestSendWaitingWhileItsNumberIsRebound: t1's send to a user waits for
// its number's budget, and meanwhile the number is bound to t2. The send
// is declined and nothing goes out from the number, now t2's. It was
// authorized once, before the wait, and went out as t1's from t2's
// number. A send that waits while the user writes to another of t1's
// numbers goes out all the same.
func TestSendWaitingWhileItsNumberIsRebound(t *testing.T) {
	t.Run("rebound", func(t *testing.T) { sendWaiting(t, true) })
	t.Run("the user wrote to another of its numbers", func(t *testing.T) { sendWaiting(t, false) })
}

// sendWaiting is TestSendWaitingWhileItsNumberIsRebound: t1 owns both
// numbers until, with rebound, the first is bound to t2 while the send
// waits; else the user writes to the second meanwhile.
func sendWaiting(t *testing.T, rebound bool) {
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	r := newRig(t, nil, func(c *Config, d *platform.Deps) { c.NumberPerSecond, c.ChatPerSecond, d.Clock = 1, -1, clk })
	bind := func(first string) {
		t.Helper()
		if err := r.p.Bind([]platform.Binding{{Kind: platform.BindPhoneNumber, ID: biz1.PhoneNumberID, Tenant: first},
			{Kind: platform.BindPhoneNumber, ID: biz2.PhoneNumberID, Tenant: "t1"}}); err != nil {
			t.Fatal(err)
		}
	}
	bind("t1")
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.W1")
	send := func() contract.Result {
		return r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": "hi", "reply_to": nil})
	}
	if res := send(); !res.Success {
		t.Fatalf("the first send: %+v", res)
	}
	var done atomic.Int32
	var second contract.Result
	go func() {
		defer done.Add(1)
		second = send()
	}()
	finished := func() int { return int(done.Load()) }
	waiting := func() int { return r.p.numberBudget(biz1.PhoneNumberID).Waiting("t1") }
	clk.Settle(t, 1, finished, waiting)
	if waiting() != 1 {
		t.Fatal("the second send does not wait for the number's budget")
	}
	if !rebound {
		r.converse(t, biz2, ada, "wamid.W2")
		clk.Drive(t, 1, finished, waiting)
		if sent := r.fake.Sent(); !second.Success || len(sent) != 2 || sent[1].PhoneNumberID != biz1.PhoneNumberID {
			t.Fatalf("the send after the user wrote to t1's other number: %+v, sent %+v; want it sent from the first", second, sent)
		}
		return
	}
	bind("t2")
	clk.Drive(t, 1, finished, waiting)
	if second.Code != contract.CodeEgressDeclined {
		t.Errorf("the send after the rebind: %+v, want declined", second)
	}
	if n := len(r.fake.Sent()); n != 1 {
		t.Fatalf("%d messages sent, want the first alone", n)
	}
}

// TestReplyWhileTheStoreIsDown: Ada wrote to t1's number, and t1's
// conversation with her is kept in Redis. With Redis down, t1's reply on
// another instance, which does not hold the conversation in memory, is
// answered unavailable, which the gateway retries, and goes out once Redis
// is back; a send to a user t1 has no conversation with stays declined
// once it answers. Before, the reply was declined for good
// (egress_declined): a missed lookup counted as no conversation.
func TestReplyWhileTheStoreIsDown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendFsync: "always"})
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	a := newRig(t, vault.NewDurable(st.Capabilities(), vault.Config{}), nil)
	b := newRig(t, vault.NewDurable(st.Capabilities(), vault.Config{}), nil)
	const ada = "447700900123"
	a.converse(t, biz1, ada, "wamid.O1")
	send := func(user string) contract.Result { // on b, which never held the conversation
		return b.exec(t, "t1", map[string]any{"op": "send", "chat_id": user, "content": "hi"})
	}
	srv.Kill(t)
	if res := send(ada); res.Code != contract.CodeUnavailable {
		t.Fatalf("t1's reply with the store down = %+v, want unavailable", res)
	}
	srv.Restart(t)
	if res := send(ada); !res.Success {
		t.Fatalf("t1's reply with the store back = %+v", res)
	}
	if res := send("14155550199"); res.Code != contract.CodeEgressDeclined {
		t.Fatalf("t1's send to a user it has no conversation with = %+v, want egress_declined", res)
	}
}

// TestReplyToALinkedUserWhileTheStoreIsDown: Ada, linked to t2, wrote to
// a number no tenant owns, so t2's conversation with her goes out from
// it. With Redis down, t2's reply on another instance is answered
// unavailable, and goes out from that number once Redis is back. Before,
// it went out at once from t2's own number, which Ada never wrote to.
func TestReplyToALinkedUserWhileTheStoreIsDown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendFsync: "always"})
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	const ada = "447700900123"
	var rigs []*rig
	for range 2 {
		r := newRig(t, vault.NewDurable(st.Capabilities(), vault.Config{}), nil)
		if err := r.p.Bind([]platform.Binding{{Kind: platform.BindPhoneNumber, ID: biz2.PhoneNumberID, Tenant: "t2"}, {Kind: platform.BindUser, ID: ada, Tenant: "t2"}}); err != nil {
			t.Fatal(err)
		}
		rigs = append(rigs, r)
	}
	rigs[0].converse(t, biz3, ada, "wamid.LD1")
	b := rigs[1]
	send := func() contract.Result {
		return b.exec(t, "t2", map[string]any{"op": "send", "chat_id": ada, "content": "hi"})
	}
	srv.Kill(t)
	if res := send(); res.Code != contract.CodeUnavailable {
		t.Fatalf("t2's reply with the store down = %+v, want unavailable", res)
	}
	srv.Restart(t)
	if res := send(); !res.Success {
		t.Fatalf("t2's reply with the store back = %+v", res)
	}
	if s := b.fake.Sent(); len(s) != 1 || s[0].PhoneNumberID != biz3.PhoneNumberID {
		t.Fatalf("sent %+v, want once from the number Ada wrote to", s)
	}
}

// TestTapWhileTheStoreIsDown: t1 prompted Ada on one instance; her tap
// reaches another, which does not hold the prompt's record in memory,
// while Redis is down: it is answered 503 (Meta retries) and delivered
// nowhere; with Redis back it is t1's prompt_response. Before, it was
// taken for a tap on no prompt of the connector's: a text turn ("Yes") to
// the number's owner, and the prompt was never answered.
func TestTapWhileTheStoreIsDown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendFsync: "always"})
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	a := newRig(t, vault.NewDurable(st.Capabilities(), vault.Config{}), nil)
	b := newRig(t, vault.NewDurable(st.Capabilities(), vault.Config{}), nil)
	const ada = "447700900123"
	a.converse(t, biz1, ada, "wamid.T1")
	res := a.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "yes", "label": "Yes"}, map[string]any{"id": "no", "label": "No"}}})
	if !res.Success {
		t.Fatalf("t1's prompt: %+v", res)
	}
	tap := whatsapptest.Tap(biz1, ada, "Ada", "wamid.T2", res.MessageID, "hp1:p1:yes", "Yes", false)
	srv.Kill(t)
	if code := b.post(t, tap); code != http.StatusServiceUnavailable {
		t.Fatalf("the tap with the store down was answered %d, want 503", code)
	}
	if got := b.sink.all(); len(got) != 0 {
		t.Fatalf("the tap with the store down was delivered: %+v", got[0].Event)
	}
	srv.Restart(t)
	if code := b.post(t, tap); code != http.StatusOK {
		t.Fatalf("the tap with the store back was answered %d", code)
	}
	if got := b.sink.all(); len(got) != 1 || got[0].Tenant != "t1" || got[0].Event.PromptResponse == nil {
		t.Fatalf("the tap with the store back: %+v", got)
	}
}

// TestRedeliveryWhileTheStoreIsDown: a message delivered on one instance
// is sent again by Meta to another, which does not hold its delivered
// mark in memory, while Redis is down: it is answered 503 and delivered
// nowhere, and once Redis is back it is dropped as a duplicate. Before, a
// mark that could not be looked up counted as none: the message was
// delivered twice.
func TestRedeliveryWhileTheStoreIsDown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendFsync: "always"})
	st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	a := newRig(t, vault.NewDurable(st.Capabilities(), vault.Config{}), nil)
	b := newRig(t, vault.NewDurable(st.Capabilities(), vault.Config{}), nil)
	body := whatsapptest.Text(biz1, "447700900123", "Ada", "wamid.RD1", "once")
	if code := a.post(t, body); code != http.StatusOK {
		t.Fatalf("first delivery: %d", code)
	}
	srv.Kill(t)
	if code := b.post(t, body); code != http.StatusServiceUnavailable {
		t.Fatalf("the redelivery with the store down was answered %d, want 503", code)
	}
	srv.Restart(t)
	if code := b.post(t, body); code != http.StatusOK {
		t.Fatalf("the redelivery with the store back was answered %d", code)
	}
	if got := b.sink.all(); len(got) != 0 {
		t.Fatalf("the redelivery was delivered again: %+v", got[0].Event)
	}
}

// TestMessagesWhoseRecordsAreDamaged: Ada's message was delivered and her
// tap answers t1's prompt, each on one instance; their delivered mark and
// prompt record then hold values the store cannot decode (a foreign
// string; a Redis hash). Meta's copy of the message, and the tap, reach
// another instance: each is answered 200, delivered once (the record taken
// as absent: the message again, the tap as a text turn to the number's
// owner), and the mark written over the damaged value drops the next copy.
// Before, each was answered 503 for as long as the value stayed, so Meta
// retried it for 7 days and it was never delivered.
func TestMessagesWhoseRecordsAreDamaged(t *testing.T) {
	for _, foreign := range []string{"string", "hash"} {
		t.Run(foreign, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			st, err := store.Open(t.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			a := newRig(t, vault.NewDurable(st.Capabilities(), vault.Config{}), nil)
			b := newRig(t, vault.NewDurable(st.Capabilities(), vault.Config{}), nil)
			const ada = "447700900123"
			body := whatsapptest.Text(biz1, ada, "Ada", "wamid.DM1", "once")
			if code := a.post(t, body); code != http.StatusOK {
				t.Fatalf("first delivery: %d", code)
			}
			res := a.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
				"options": []any{map[string]any{"id": "yes", "label": "Yes"}, map[string]any{"id": "no", "label": "No"}}})
			if !res.Success {
				t.Fatalf("t1's prompt: %+v", res)
			}
			rc := srv.Client(t)
			keys, err := rc.Keys(t.Context(), "*whatsapp_cloud.*").Result()
			if err != nil {
				t.Fatal(err)
			}
			damaged := 0
			for _, k := range keys {
				if !strings.Contains(k, "prompt") && !strings.Contains(k, "message") {
					continue
				}
				damaged++
				rc.Del(t.Context(), k)
				if foreign == "hash" {
					err = rc.HSet(t.Context(), k, "f", "v").Err()
				} else {
					err = rc.Set(t.Context(), k, "foreign", 0).Err()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if damaged != 2 {
				t.Fatalf("damaged %d of %v, want the mark and the prompt record", damaged, keys)
			}
			a.sink.all()
			if code := b.post(t, body); code != http.StatusOK {
				t.Fatalf("the copy whose mark is damaged was answered %d", code)
			}
			tap := whatsapptest.Tap(biz1, ada, "Ada", "wamid.DM2", res.MessageID, "hp1:p1:yes", "Yes", false)
			if code := b.post(t, tap); code != http.StatusOK {
				t.Fatalf("the tap whose prompt record is damaged was answered %d", code)
			}
			if code := b.post(t, body); code != http.StatusOK {
				t.Fatalf("the next copy was answered %d", code)
			}
			if got := b.sink.all(); len(got) != 2 || got[1].Event.PromptResponse != nil {
				t.Fatalf("delivered %+v, want the message once more and the tap as text", got)
			}
		})
	}
}

// marklessVault is a vault whose delivered-message marks cannot be stored.
type marklessVault struct{ vault.Store }

func (v marklessVault) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if k.Kind == vault.KindWhatsAppMessage {
		return errors.New("store down")
	}
	return v.Store.Put(ctx, k, e)
}

// TestTapSentAgainWithoutItsDeliveredMark: Ada's tap answered t1's prompt,
// but its delivered mark could not be stored; Meta sends the tap again:
// it is dropped as a duplicate, while a second tap of hers is a text turn.
// Before, the copy was delivered again as a text turn ("Yes").
func TestTapSentAgainWithoutItsDeliveredMark(t *testing.T) {
	r := newRig(t, marklessVault{vault.NewMemory(vault.Config{})}, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.M0")
	res := r.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": "Deploy?", "prompt_id": "p1",
		"options": []any{map[string]any{"id": "yes", "label": "Yes"}, map[string]any{"id": "no", "label": "No"}}})
	if !res.Success {
		t.Fatalf("t1's prompt: %+v", res)
	}
	tap := whatsapptest.Tap(biz1, ada, "Ada", "wamid.M1", res.MessageID, "hp1:p1:yes", "Yes", false)
	for range 2 {
		if code := r.post(t, tap); code != http.StatusOK {
			t.Fatalf("the tap: %d", code)
		}
	}
	if code := r.post(t, whatsapptest.Tap(biz1, ada, "Ada", "wamid.M2", res.MessageID, "hp1:p1:no", "No", false)); code != http.StatusOK {
		t.Fatalf("the second tap: %d", code)
	}
	got := r.sink.all()
	if len(got) != 3 || got[1].Event.PromptResponse == nil || got[2].Event.Text != "No" {
		t.Fatalf("deliveries %+v, want the conversation's message, the prompt's answer, then the second tap as text", got)
	}
	if n := r.stats.get(r.stats.dropped, dropDuplicate); n != 1 {
		t.Errorf("%d duplicates dropped, want the tap's copy", n)
	}
}

// storeRTT delays each posted-message mark's write by rtt, as a store
// across a network answers (a Redis round trip of about a millisecond).
type storeRTT struct {
	vault.Store
	rtt time.Duration
}

func (s storeRTT) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if k.Kind == vault.KindPostedMessage {
		time.Sleep(s.rtt) // the round trip's latency, not a synchronization
	}
	return s.Store.Put(ctx, k, e)
}

// graphRTT delays each Graph call by rtt, as Meta's answers come (on the
// order of 100 ms; the fake on loopback answers in well under one).
type graphRTT struct {
	http.RoundTripper
	rtt time.Duration
}

func (g graphRTT) RoundTrip(req *http.Request) (*http.Response, error) {
	time.Sleep(g.rtt) // the round trip's latency, not a synchronization
	return g.RoundTripper.RoundTrip(req)
}

// BenchmarkSendLongAnswer is one send of an answer split in 8 parts, each
// part's is_own mark written to Redis (platform.Grants.Posted) behind a
// round trip of 10 ms, each Graph call taking 10 ms more than the fake's
// (round trips long enough to measure on a loaded machine); no budget or
// pace spaces the parts. Each part's mark waited for alone adds 10 ms.
func BenchmarkSendLongAnswer(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	st, err := store.Open(b.Context(), store.Config{Backend: store.BackendRedis, RedisURL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	const ada = "447700900123"
	raw, _ := json.Marshal(map[string]any{"op": "send", "chat_id": ada, "content": strings.Repeat(strings.Repeat("word ", 800)+"\n\n", 8)})
	const rtt = 10 * time.Millisecond
	r := newRig(b, storeRTT{vault.NewDurable(st.Capabilities(), vault.Config{}), rtt}, func(c *Config, _ *platform.Deps) { c.NumberPerSecond, c.GlobalPerSecond = -1, -1 })
	resp, err := http.DefaultClient.Do(whatsapptest.SignedRequest(r.url, testSecret, whatsapptest.Text(biz1, ada, "Ada", "wamid.B1", "hello")))
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("webhook: %v %v", resp, err)
	}
	resp.Body.Close()
	r.p.graph.hc.Transport = graphRTT{r.p.graph.hc.Transport, rtt}
	for b.Loop() {
		var a contract.Action
		_ = json.Unmarshal(raw, &a)
		if res := r.p.Execute(context.Background(), "t1", &a); !res.Success {
			b.Fatal(res)
		}
	}
	b.ReportMetric(float64(len(r.fake.Sent()))/float64(b.N), "parts/op")
}

// gatedMarks holds each posted-message mark's write until release closes.
type gatedMarks struct {
	vault.Store
	release chan struct{}
}

func (g gatedMarks) Put(ctx context.Context, k vault.Key, e vault.Entry) error {
	if k.Kind == vault.KindPostedMessage {
		<-g.release
	}
	return g.Store.Put(ctx, k, e)
}

// TestLongAnswerDoesNotWaitForEachPartsMark: the parts of a long answer go
// out while their is_own marks are being written, and every mark is
// written before the result, so another instance finds them all. Before,
// each part waited for the previous part's mark (a store round trip per
// part before the result).
func TestLongAnswerDoesNotWaitForEachPartsMark(t *testing.T) {
	shared := vault.NewMemory(vault.Config{})
	gate := gatedMarks{Store: shared, release: make(chan struct{})}
	r := newRig(t, gate, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.L1")
	result := make(chan contract.Result, 1)
	go func() {
		result <- r.exec(t, "t1", map[string]any{"op": "send", "chat_id": ada, "content": strings.Repeat(strings.Repeat("word ", 800)+"\n\n", 3)})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent, err := r.fake.WaitSent(ctx, 3)
	if err != nil {
		t.Fatalf("the parts while the first part's mark is being written: %v", err)
	}
	select {
	case res := <-result:
		t.Fatalf("the result came before the marks were written: %+v", res)
	default:
	}
	close(gate.release)
	select {
	case res := <-result:
		if !res.Success || res.MessageID != sent[0].ID {
			t.Fatalf("%+v", res)
		}
	case <-ctx.Done():
		t.Fatal("timed out after 10 s waiting for the result once the marks were let through")
	}
	marks := platform.NewGrants(platformName, shared, nil, r.p.log)
	for i, s := range sent {
		if !marks.PostedBy(t.Context(), ada, s.ID, "t1") {
			t.Errorf("part %d's mark is not in the store once the result came", i+1)
		}
	}
}

// TestThrottleHoldEndsWithItsTenant: Meta's account throttle (80007) holds
// t1's sends for the backoff; t1 deleted and made again under its id
// meanwhile starts unheld: the new t1's send, to a user who wrote to it,
// goes out at once. Before, the hold was keyed by the tenant's id alone
// and carried over to the new tenant (up to 64 s).
func TestThrottleHoldEndsWithItsTenant(t *testing.T) {
	first, again := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_100, 0)
	var remade atomic.Bool
	since := func(string) time.Time {
		if remade.Load() {
			return again
		}
		return first
	}
	clk := clocktest.New(time.Unix(1_800_000_000, 0))
	r := newRig(t, vault.NewMemory(vault.Config{Since: since, Clock: clk}), func(_ *Config, d *platform.Deps) { d.Clock = clk })
	const ada, cyd = "447700900123", "447700900456"
	r.converse(t, biz1, ada, "wamid.H1")
	var done atomic.Int32
	results := make(chan contract.Result, 2)
	run := func(user string) {
		go func() {
			defer done.Add(1)
			results <- r.exec(t, "t1", map[string]any{"op": "send", "chat_id": user, "content": "hi", "reply_to": nil})
		}()
	}
	finished := func() int { return int(done.Load()) }
	waiting := func() int {
		return r.p.budget.Waiting("t1") + r.p.numberBudget(biz1.PhoneNumberID).Waiting("t1")
	}
	r.fake.Fail(whatsapptest.GraphError{Status: 400, Code: 80007, Message: "(#80007) Rate limit issues"})
	run(ada) // throttled: the first t1 is held for the backoff
	clk.Settle(t, 1, finished, waiting)
	remade.Store(true)
	r.converse(t, biz1, cyd, "wamid.H2") // Cyd writes to the new t1
	run(cyd)
	clk.Settle(t, 2, finished, waiting)
	if sent := r.fake.Sent(); finished() != 1 || len(sent) != 1 || sent[0].To != cyd {
		t.Fatalf("the new t1's send while the earlier t1 was held: %d of 2 sends done, %d sent; want it out at once", finished(), len(sent))
	}
	if res := <-results; !res.Success {
		t.Fatalf("the new t1's send: %+v", res)
	}
	clk.Drive(t, 2, finished, waiting) // the earlier t1's send ends, whatever its answer
}

// TestPromptWhoseLeadIsCut: a prompt's question too long for its buttons'
// body goes first as text (the lead), itself three messages; the second is
// refused. The prompt is platform_error (platform.Whole) and no buttons
// are posted: the lead's partial success went on to post them under a
// question missing its middle, answered a plain success.
func TestPromptWhoseLeadIsCut(t *testing.T) {
	r := newRig(t, nil, nil)
	const ada = "447700900123"
	r.converse(t, biz1, ada, "wamid.P0")
	before := len(r.fake.Sent())
	r.fake.Fail(whatsapptest.GraphError{}, whatsapptest.GraphError{Status: 400, Code: 100, Message: "(#100) Invalid parameter"})
	question := strings.Repeat("a long question. ", 600) // a lead of three messages and a body
	res := r.exec(t, "t1", map[string]any{"op": "prompt", "chat_id": ada, "content": question, "prompt_id": "p1",
		"options":  []any{map[string]any{"id": "y", "label": "Yes"}, map[string]any{"id": "n", "label": "No"}},
		"reply_to": nil, "metadata": map[string]any{}})
	sent := r.fake.Sent()[before:]
	if res.Success || res.Code != contract.CodePlatformError || !strings.HasSuffix(res.Error, "(sent 1 of 3 parts; the rest was not sent)") {
		t.Fatalf("prompt = %+v, want platform_error for its cut question", res)
	}
	for _, m := range sent {
		if m.Type == "interactive" {
			t.Fatalf("buttons posted under a cut question: %+v", sent)
		}
	}
}
