package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/internal/clock"
	"connector/internal/clock/clocktest"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/store"
)

// roundTripFunc is an http.RoundTripper from a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The next getUpdates, whose offset confirms every update handed out so
// far, reaches Telegram only after each of those updates was handled.
func TestOffsetGateHoldsThePollUntilItsUpdatesAreHandled(t *testing.T) {
	var mu sync.Mutex
	var events []string
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, s)
	}
	polls := 0
	g := newOffsetGate(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		body := `{"ok":true,"result":[]}`
		if strings.HasSuffix(r.URL.Path, "/getUpdates") {
			mu.Lock()
			polls++
			if polls == 1 {
				body = `{"ok":true,"result":[{"update_id":7,"message":{}},{"update_id":8}]}`
			}
			events = append(events, fmt.Sprint("poll ", polls))
			mu.Unlock()
		} else {
			record("send")
		}
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(body))}, nil
	}), func() {}, time.Minute)
	call := func(ctx context.Context, method string) (string, error) {
		r, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://api.invalid/botT/"+method, nil)
		resp, err := g.RoundTrip(r)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	ctx := context.Background()
	if body, err := call(ctx, "getUpdates"); err != nil || !strings.Contains(body, `"update_id":8`) {
		t.Fatalf("first poll answered %q, %v: the library must still read the whole answer", body, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, "getUpdates")
		done <- err
	}()
	// Other methods never wait.
	if _, err := call(ctx, "sendMessage"); err != nil {
		t.Fatal(err)
	}
	// The worker takes both; 8 (another chat) is handled before 7.
	g.handing(7)
	g.handing(8)
	record("handled 8")
	g.done(8)
	select {
	case err := <-done:
		t.Fatalf("the second poll went out (%v) while update 7 was still being handled", err)
	default:
	}
	record("handled 7")
	g.done(7)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("timed out after 10s waiting for the second poll once every update was handled")
	}
	mu.Lock()
	i := slices.Index(events, "poll 2")
	if i < 0 || !slices.Contains(events[:i], "handled 7") || !slices.Contains(events[:i], "handled 8") {
		t.Fatalf("events %q: the second poll went out before updates 7 and 8 were handled", events)
	}
	mu.Unlock()

	// An answer the library cannot decode hands out nothing, so it holds no
	// poll.
	for _, body := range []string{`{"ok":true,"result":[{"update_id":"x"}]}`, `{"ok":false,"result":[{"update_id":99}]}`, `not json`} {
		if id := handedOut([]byte(body)); id != 0 {
			t.Errorf("handedOut(%s) = %d, want 0", body, id)
		}
	}

	// A poll held by the gate ends with its context.
	g.mu.Lock()
	g.handed = 9
	g.mu.Unlock()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := call(cctx, "getUpdates"); !errors.Is(err, context.Canceled) {
		t.Fatalf("held poll with a cancelled context returned %v", err)
	}
}

// FuzzHandedOut: any getUpdates answer is read without a panic, and an id is
// only taken from an answer that says ok.
func FuzzHandedOut(f *testing.F) {
	f.Add([]byte(`{"ok":true,"result":[{"update_id":7},{"update_id":8}]}`))
	f.Add([]byte(`{"ok":false,"error_code":409,"description":"Conflict"}`))
	f.Add([]byte(`{"ok":true,"result":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if id := handedOut(body); id != 0 && !strings.Contains(string(body), "true") {
			t.Fatalf("handedOut took id %d from an answer that is not ok: %s", id, body)
		}
	})
}

// After a week without updates Telegram numbers the next update from a
// random value, which may be lower than every id seen before: the poll goes
// on, ingesting it and the rest of its answer, instead of waiting forever
// for an id the old numbering would have reached.
func TestPollingGoesOnWhenUpdateIDsRestartLower(t *testing.T) {
	e := pollingEnv(t, nil)
	first := fixture(t, "telegram_shared_private_text")
	e.fake.Enqueue(first.Raw)
	if d := e.sink.Next(t); d.SessionKey != first.Key {
		t.Fatalf("delivered %s, want %s", d.SessionKey, first.Key)
	}
	// Restarted ids, lower than the first's; two chats in one answer.
	second := fixture(t, "telegram_shared_basic_group")
	third := fixture(t, "telegram_shared_private_command")
	e.fake.Enqueue(withUpdateID(t, second.Raw, 5))
	e.fake.Enqueue(withUpdateID(t, third.Raw, 6))
	got := []string{e.sink.Next(t).SessionKey, e.sink.Next(t).SessionKey}
	if !slices.Contains(got, second.Key) || !slices.Contains(got, third.Key) {
		t.Fatalf("deliveries %q, want %s and %s", got, second.Key, third.Key)
	}
	// And the poll after them goes out too.
	fourth := fixture(t, "telegram_shared_supergroup")
	e.fake.Enqueue(withUpdateID(t, fourth.Raw, 7))
	if d := e.sink.Next(t); d.SessionKey != fourth.Key {
		t.Fatalf("delivered %s, want %s", d.SessionKey, fourth.Key)
	}
}

// A poll whose lease ends while an update's delivery is still being refused
// gives that update up, unconfirmed; when the lease comes back the next poll
// goes out and Telegram hands the update out again, and it is delivered:
// neither held forever behind the gate nor confirmed by an offset the last
// poll left behind.
func TestPollAfterLostLeaseDeliversTheUpdateGivenUp(t *testing.T) {
	clk := clocktest.New(epoch)
	e := newEnvOn(t, clk, nil)
	firstTerm, firstEnded, secondTerm := make(chan struct{}), make(chan struct{}), make(chan struct{})
	e.p.deps.Exclusive = func(ctx context.Context, _ string, run func(context.Context) error) error {
		tctx, cancel := context.WithCancel(ctx)
		go func() {
			<-firstTerm
			cancel()
		}()
		_ = run(tctx) // the lease is lost
		cancel()
		close(firstEnded)
		select {
		case <-secondTerm:
		case <-ctx.Done():
			return nil
		}
		return run(ctx)
	}
	e.sink.RefuseAll(true)
	e.run(t)
	first := fixture(t, "telegram_shared_private_text")
	e.fake.Enqueue(first.Raw)
	none := func() int { return 0 }
	clk.Settle(t, 1, none, none) // refused: the delivery sleeps on the clock
	close(firstTerm)
	select {
	case <-firstEnded:
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for the first poll to end with its lease")
	}
	e.sink.RefuseAll(false)
	close(secondTerm)
	if d := e.sink.Next(t); d.SessionKey != first.Key {
		t.Fatalf("delivered %s, want %s", d.SessionKey, first.Key)
	}
}

// The gate's timeout bounds a call from when it goes out: a getUpdates held
// at the gate longer than that, while a slow answer is being handled, still
// goes out and is answered (it used to fail with the client's timeout,
// which counted the wait, making Status "getUpdates failing"); a call that
// goes out and hangs fails once the timeout passes.
func TestOffsetGateTimesCallsFromWhenTheyGoOut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	polls := 0
	hang := make(chan struct{})
	defer close(hang)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/hang") {
			select {
			case <-hang:
			case <-r.Context().Done():
			}
			return
		}
		polls++
		if polls == 1 {
			_, _ = io.WriteString(w, `{"ok":true,"result":[{"update_id":7}]}`)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true,"result":[]}`)
	}))
	defer srv.Close()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	g := newOffsetGate(transport, func() {}, timeout)
	client := &http.Client{Transport: g}
	call := func(method string) error {
		resp, err := client.Post(srv.URL+"/botT/"+method, "application/json", nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	if err := call("getUpdates"); err != nil {
		t.Fatal(err)
	}
	g.handing(7)
	done := make(chan error, 1)
	go func() { done <- call("getUpdates") }()
	// Update 7 takes three timeouts to handle; the poll waits meanwhile.
	held := time.NewTimer(3 * timeout)
	select {
	case err := <-done:
		t.Fatalf("the poll went out (%v) while update 7 was being handled", err)
	case <-held.C:
	}
	g.done(7)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the poll held at the gate failed: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatalf("timed out after %v waiting for the released poll", waitFor)
	}
	if err := call("hang"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a hanging call returned %v, want its deadline exceeded", err)
	}
}

// heldSink holds its first delivery until release is closed, telling held
// when it has it; then it delivers into Sink.
type heldSink struct {
	*platformtest.Sink
	once          sync.Once
	held, release chan struct{}
}

func (s *heldSink) Deliver(ctx context.Context, d platform.Delivery) error {
	s.once.Do(func() {
		close(s.held)
		<-s.release
	})
	return s.Sink.Deliver(ctx, d)
}

// A poll that stops cleanly (SIGTERM, or a lease handed over) while the
// last answer's update is still being stored confirms it once it is stored:
// the next poller (another instance, or this one restarted) is not handed
// it again. Only the next poll's getUpdates used to confirm it, so every
// clean handover delivered the last answer twice.
func TestCleanStopConfirmsTheLastAnswer(t *testing.T) {
	e := newEnv(t, nil)
	sink := &heldSink{Sink: newSink(), held: make(chan struct{}), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, sink) }()
	t.Cleanup(cancel)
	first := fixture(t, "telegram_shared_private_text")
	e.fake.Enqueue(first.Raw)
	select {
	case <-sink.held:
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for the update's delivery")
	}
	cancel() // the stop, while the update is being stored
	close(sink.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Run did not return after the stop")
	}
	if d := sink.Next(t); d.SessionKey != first.Key {
		t.Fatalf("delivered %s, want %s", d.SessionKey, first.Key)
	}
	// The next poller, with a fresh client whose first offset confirms
	// nothing, asks Telegram for what is pending.
	nctx, ncancel := context.WithTimeout(context.Background(), waitFor)
	defer ncancel()
	if pending := pendingUpdates(nctx, t, e.fake.URL); pending != 0 {
		t.Fatalf("the next poller is handed %d updates again", pending)
	}
}

// pendingUpdates asks the fake Bot API at url, as a fresh poller does (no
// offset, no wait), how many updates it hands out.
func pendingUpdates(ctx context.Context, t *testing.T, url string) int {
	t.Helper()
	var body bytes.Buffer
	form := multipart.NewWriter(&body)
	_ = form.WriteField("timeout", "0")
	_ = form.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/bot"+testToken+"/getUpdates", &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", form.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		OK     bool              `json:"ok"`
		Result []json.RawMessage `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || !answer.OK {
		t.Fatalf("getUpdates answered %v (%v)", answer, err)
	}
	return len(answer.Result)
}

// stolenLeases is a store's leases that another holder can take at once:
// once stolen, a renewal or a release fails with ErrNotHeld and a bid
// finds the lease held by "other".
type stolenLeases struct {
	store.Leases
	stolen atomic.Bool
}

func (l *stolenLeases) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, bool, error) {
	if l.stolen.Load() {
		return store.Lease{Holder: "other", Token: 99, Expires: time.Now().Add(time.Hour)}, false, nil
	}
	return l.Leases.Acquire(ctx, name, holder, ttl)
}

func (l *stolenLeases) Renew(ctx context.Context, name string, le store.Lease, ttl time.Duration) (store.Lease, error) {
	if l.stolen.Load() {
		return store.Lease{}, store.ErrNotHeld
	}
	return l.Leases.Renew(ctx, name, le, ttl)
}

func (l *stolenLeases) Release(ctx context.Context, name string, le store.Lease) error {
	if l.stolen.Load() {
		return store.ErrNotHeld
	}
	return l.Leases.Release(ctx, name, le)
}

// A poll that stops because another instance took its lease does not send
// the confirming getUpdates of a clean stop: the new holder is polling,
// and Telegram would end its long poll with 409 (reported as a conflict
// with another poller); the new holder confirms the update with its own
// offset. It used to confirm regardless.
func TestLostLeaseStopSendsNoConfirmingPoll(t *testing.T) {
	e := newEnv(t, nil)
	leases := &stolenLeases{Leases: store.NewMemory(clock.System).Leases()}
	lost, ended := make(chan struct{}), make(chan struct{})
	var endOnce sync.Once
	e.p.deps.Exclusive = func(ctx context.Context, name string, run func(context.Context) error) error {
		return store.RunExclusive(ctx, clock.System, leases, name, "this", 400*time.Millisecond, func(rctx context.Context) error {
			// lost is closed once the poll's contexts all ended (a cancel
			// returns after its children's), not as soon as rctx's did.
			pctx, pcancel := context.WithCancel(rctx)
			defer pcancel()
			go func() {
				<-rctx.Done()
				pcancel()
				close(lost)
			}()
			err := run(pctx)
			endOnce.Do(func() { close(ended) })
			return err
		})
	}
	sink := &heldSink{Sink: newSink(), held: make(chan struct{}), release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, sink) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Error("Run did not return after the stop")
		}
	})
	first := fixture(t, "telegram_shared_private_text")
	e.fake.Enqueue(first.Raw)
	select {
	case <-sink.held:
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for the update's delivery")
	}
	leases.stolen.Store(true)
	select {
	case <-lost:
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for the poll to see its lease lost")
	}
	close(sink.release)
	select {
	case <-ended:
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for the poll to end with its lease")
	}
	if d := sink.Next(t); d.SessionKey != first.Key {
		t.Fatalf("delivered %s, want %s", d.SessionKey, first.Key)
	}
	nctx, ncancel := context.WithTimeout(context.Background(), waitFor)
	defer ncancel()
	if pending := pendingUpdates(nctx, t, e.fake.URL); pending != 1 {
		t.Fatalf("%d updates pending at Telegram, want 1: the poll that lost its lease confirmed it (getUpdates: %+v)", pending, e.fake.Calls("getUpdates"))
	}
}
