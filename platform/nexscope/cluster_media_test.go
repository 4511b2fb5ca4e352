package nexscope

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/cluster"
	"connector/internal/cluster/clustertest"
	"connector/internal/redistest"
	"connector/media"
	"connector/media/mediatest"
	"connector/platform"
	"connector/store"
)

// TestClusterSendMediaAtHome: a gateway's send_media through an instance
// that is not the room's home is executed by the home, which opens the
// source itself: a re-host uploaded to the home and a public URL reach a
// member on the first instance byte-exact; a re-host stored only on the
// first instance fails there with unavailable and sends nothing.
func TestClusterSendMediaAtHome(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	stores := map[string]*media.Store{}
	withMedia := func(name string) func(*platform.Deps) {
		return func(d *platform.Deps) {
			s, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test", AllowPrivateURLs: true})
			if err != nil {
				t.Fatal(err)
			}
			stores[name], d.Media = s, s
		}
	}
	ins := []*instance{
		startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, withMedia("i0")),
		startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, withMedia("i1")),
	}
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice", "hermes")

	const size = 300_000
	put := func(in *instance, seed uint64) string {
		t.Helper()
		info, err := stores[in.name].Put("t1", mediatest.Content(seed, size), "application/pdf", "spec.pdf")
		if err != nil {
			t.Fatal(err)
		}
		return "http://connector.test/relay/media/" + info.ID
	}
	public := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = io.Copy(w, mediatest.Content(33, size))
	}))
	t.Cleanup(public.Close)
	sendMedia := func(url string) contract.Result {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		return edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: DefaultRoom,
			MediaKind: "document", SourceURL: url, Content: "the file"})
	}

	for name, c := range map[string]struct {
		url  string
		seed uint64
	}{
		"a re-host on the home": {put(home, 31), 31},
		"a public URL":          {public.URL + "/pic.png", 33},
	} {
		want, _ := mediatest.SHA256(mediatest.Content(c.seed, size))
		got := receiveFileStreaming(alice)
		res := sendMedia(c.url)
		if !res.Success || res.MessageID == "" {
			t.Fatalf("%s: send_media through the edge = %+v", name, res)
		}
		r := <-got
		if r.Err != nil || r.Bytes != size || r.SHA256 != want || r.Start["msgId"] != res.MessageID {
			t.Fatalf("%s: alice received %d bytes sha256 %s (%v), file-start %v; want %d bytes %s",
				name, r.Bytes, r.SHA256, r.Err, r.Start, size, want)
		}
	}

	res := sendMedia(put(edge, 32))
	if res.Success || res.Code != contract.CodeUnavailable || !strings.Contains(res.Error, "stored on this instance") {
		t.Fatalf("send_media of the edge's re-host = %+v, want unavailable", res)
	}
	alice.SendJSON(map[string]any{"type": "ping"})
	if f := alice.Next(); f["type"] != "pong" {
		t.Fatalf("alice got %v after a refused send_media", f)
	}
}

// TestClusterForwardedSendMediaEndsWithItsCaller: a send_media the edge
// forwards to the home is bounded there by what is left of the edge's
// deadline, not by the home's own 30 s: once the gateway was told it
// failed, the home does not send the file after all (a gateway that
// retries would send it twice).
func TestClusterForwardedSendMediaEndsWithItsCaller(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	stores := map[string]*media.Store{}
	withMedia := func(name string) func(*platform.Deps) {
		return func(d *platform.Deps) {
			s, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test"})
			if err != nil {
				t.Fatal(err)
			}
			stores[name], d.Media = s, s
		}
	}
	ins := []*instance{
		startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, withMedia("i0")),
		startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, withMedia("i1")),
	}
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	store := stores[home.name] // the home's store holds the re-host
	alice := edge.joinWith(t, "alice", "alice", "hermes")
	bob := home.joinWith(t, "bob", "alice", "bob", "hermes")
	alice.ExpectPresence("alice", "bob", "hermes")
	info, err := store.Put("t1", mediatest.Content(5, 1000), "application/pdf", "spec.pdf")
	if err != nil {
		t.Fatal(err)
	}
	// bob's file to alice holds the room's lock.
	bob.SendJSON(fileStart("f1", "bob", []string{"alice"}, 3))
	if f := alice.Expect("file-start"); f["msgId"] != "f1" {
		t.Fatalf("alice got %v, want bob's file-start", f)
	}
	// The home answers its failure to the edge (which no longer waits):
	// its send_media has given up then. The home's goroutine missing from
	// the stacks would not tell it: the forwarded call may not have reached
	// the lock yet.
	gaveUp := make(chan struct{})
	var once sync.Once
	answer := func(_ string, msg []byte) bool {
		if bytes.Contains(msg, []byte("another file transfer holds the room")) {
			once.Do(func() { close(gaveUp) })
		}
		return false
	}
	home.lose.Store(&answer)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res := edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: DefaultRoom,
		MediaKind: "document", SourceURL: store.URL(info.ID), Metadata: contract.Metadata{UserID: "alice"}})
	if res.Success {
		t.Fatalf("send_media = %+v, want a failure: the room's lock was held past its deadline", res)
	}
	select {
	case <-gaveUp:
	case <-time.After(testTimeout):
		t.Fatalf("the home did not answer within %v that its send_media gave up on the room's lock", testTimeout)
	}
	bob.SendBinary([]byte("abc"))
	bob.SendJSON(fileEnd("f1", "bob"))
	bob.Expect("ack")
	alice.Read() // bob's chunk
	if f := alice.Expect("file-end"); f["msgId"] != "f1" {
		t.Fatalf("alice got %v, want bob's file-end", f)
	}
	alice.SendJSON(map[string]any{"type": "ping"})
	if f := alice.Next(); f["type"] != "pong" {
		t.Fatalf("alice got %v after the gateway was told send_media failed, want nothing more", f)
	}
}

// TestClusterForwardedExecBudget: the budget a forwarder puts in the
// action's JSON (budgetKey), at a real home (redis-server, two instances).
// A budget already spent when the action was forwarded (0, negative, or a
// value that is no number) is answered unavailable and the action is not
// executed: send and prompt do not wait on their context, so the home
// would otherwise send a msg the gateway was told failed (Call may still
// publish with its context done). An action without one is executed
// within 30 s.
func TestClusterForwardedExecBudget(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	ins := startInstances(t, srv, cfg, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := home.joinWith(t, "alice", "alice", "hermes")
	exec := func(content string, budget ...string) (contract.Result, bool) {
		t.Helper()
		action := `{"op":"send","chat_id":"default","content":` + strconv.Quote(content) + `}`
		for _, b := range budget {
			action = `{"` + budgetKey + `":` + b + `,` + action[1:]
		}
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		raw, ok := edge.p.cluster.node.Call(ctx, roomPrefix+DefaultRoom, msgExec, []byte("t1"), []byte(edge.p.newMsgID()), []byte(action))
		if !ok {
			return contract.Result{}, false
		}
		var res contract.Result
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		return res, true
	}
	for _, budget := range []string{"0", "-250", `"soon"`} {
		res, ok := exec("spent "+budget, budget)
		if !ok || res.Success || res.Code != contract.CodeUnavailable {
			t.Fatalf("exec with budget %q = %+v (answered %v), want unavailable", budget, res, ok)
		}
	}
	if res, ok := exec("in time", "5000"); !ok || !res.Success {
		t.Fatalf("exec with budget 5000 = %+v (answered %v), want success", res, ok)
	}
	if f := alice.Expect("msg"); f["text"] != "in time" {
		t.Fatalf("alice got %v, want only the msg sent within its budget", f)
	}
	if res, ok := exec("no budget"); !ok || !res.Success {
		t.Fatalf("exec without a budget = %+v (answered %v), want success", res, ok)
	}
	if f := alice.Expect("msg"); f["text"] != "no budget" {
		t.Fatalf("alice got %v, want the msg of the call without a budget", f)
	}
}

// TestClusterForwardedActionDecodedOffTheReader: the home decodes a
// forwarded action on a goroutine of its own, not on the goroutine that
// reads the room's channel: a gateway's send of megabytes held up every
// join, leave and action of the room behind it for as long as its
// decoding took. With one action's decoding held, execHere, the channel's
// handler, returns, and the action forwarded after it is executed first.
func TestClusterForwardedActionDecodedOffTheReader(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{in}, DefaultRoom)
	alice := in.joinWith(t, "alice", "alice", "hermes")
	cl := in.p.cluster
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cl.decode = func(data []byte, v any) error {
		if bytes.Contains(data, []byte(`"held"`)) {
			once.Do(func() { close(held) })
			<-release
		}
		return json.Unmarshal(data, v)
	}
	returned := make(chan struct{})
	go func() {
		cl.execHere(forwardedSend("01JHELD", "held"))
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(testTimeout):
		close(release)
		t.Fatalf("execHere still runs after %v with the action's decoding held: it decodes on the room channel's reader", testTimeout)
	}
	select {
	case <-held:
	case <-time.After(testTimeout):
		t.Fatalf("the forwarded action's decoding did not start within %v", testTimeout)
	}
	cl.execHere(forwardedSend("01JNEXT", "next"))
	if m := alice.Expect("msg"); m["text"] != "next" {
		t.Fatalf("alice got %v, want the msg forwarded after the held one", m)
	}
	close(release)
	if m := alice.Expect("msg"); m["text"] != "held" {
		t.Fatalf("alice got %v, want the held msg once released", m)
	}
}

// TestClusterForwardCancelledBeforeItRunsRunsNot: a forwarded send its
// forwarder cancelled (the relay revoked its gateway) while the home
// decoded it is not executed: the member never gets it.
func TestClusterForwardCancelledBeforeItRunsRunsNot(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{in}, DefaultRoom)
	alice := in.joinWith(t, "alice", "alice", "hermes")
	cl := in.p.cluster
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cl.decode = func(data []byte, v any) error {
		if bytes.Contains(data, []byte(`"held"`)) {
			once.Do(func() { close(held) })
			<-release
		}
		return json.Unmarshal(data, v)
	}
	cl.execHere(forwardedSend("01JHELD", "held"))
	select {
	case <-held:
	case <-time.After(testTimeout):
		t.Fatalf("the forwarded action's decoding did not start within %v", testTimeout)
	}
	cl.node.Dispatch(clustertest.Encode(msgCancel, "i9", []byte("01JHELD")))
	close(release)
	waitFor(t, "the cancelled send's answer", func() bool {
		v, _, _ := cl.execs.Get(context.Background(), "01JHELD")
		return len(v) > 0 && v[0] == '{'
	})
	cl.execHere(forwardedSend("01JNEXT", "next"))
	if m := alice.Expect("msg"); m["text"] != "next" {
		t.Fatalf("alice got %v, want only the msg forwarded after the cancelled one", m)
	}
}

// failedClaims are claims whose first Claim tells asked and fails once
// fail closes.
type failedClaims struct {
	store.Claims
	asked chan<- struct{}
	fail  <-chan struct{}
	once  *sync.Once
}

func (c failedClaims) Claim(ctx context.Context, key string, until time.Time) (bool, error) {
	failed := false
	c.once.Do(func() {
		close(c.asked)
		<-c.fail
		failed = true
	})
	if failed {
		return false, errors.New("store down")
	}
	return c.Claims.Claim(ctx, key, until)
}

// claimsFailed is a store whose first claim fails.
type claimsFailed struct {
	store.Store
	claims failedClaims
}

func (s claimsFailed) Claims() store.Claims { s.claims.Claims = s.Store.Claims(); return s.claims }

// TestClusterForwardCancelledWhileItsClaimFailsRunsNot: a forwarded send
// its forwarder cancelled while the home's claim of it was failing is not
// executed by a copy arriving later: the cancel is not forgotten with the
// failed claim.
func TestClusterForwardCancelledWhileItsClaimFailsRunsNot(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	asked, fail := make(chan struct{}), make(chan struct{})
	in := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Store = claimsFailed{d.Store, failedClaims{asked: asked, fail: fail, once: new(sync.Once)}}
	})
	homeOf(t, []*instance{in}, DefaultRoom)
	alice := in.joinWith(t, "alice", "alice", "hermes")
	cl := in.p.cluster
	cl.execHere(forwardedSend("01JFAIL", "cancelled"))
	select {
	case <-asked:
	case <-time.After(testTimeout):
		t.Fatalf("the home did not claim the forwarded send within %v", testTimeout)
	}
	cl.node.Dispatch(clustertest.Encode(msgCancel, "i9", []byte("01JFAIL")))
	close(fail)
	waitFor(t, "the failed claim let go", func() bool {
		return !goroutineIn("nexscope.(*fleet).claim(")()
	})
	cl.execHere(forwardedSend("01JFAIL", "cancelled")) // a copy
	cl.execHere(forwardedSend("01JNEXT", "next"))
	if m := alice.Expect("msg"); m["text"] != "next" {
		t.Fatalf("alice got %v, want only the msg forwarded after the cancelled one", m)
	}
}

// TestClusterForwardedActionSentTwiceExecutesOnce: a forwarded send whose
// PUBLISH reaches the home twice (go-redis sends it again when the reply
// to the first was lost) is executed once: the member gets one msg. The
// send after it, published once, is read by the home after both copies.
func TestClusterForwardedActionSentTwiceExecutesOnce(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := home.joinWith(t, "alice", "alice", "hermes")
	send := func(text string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if res := edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: text}); !res.Success {
			t.Fatalf("send %q through the edge: %+v", text, res)
		}
	}
	twice := func(_ string, msg []byte) bool { return clustertest.Type(msg) == msgExec }
	edge.again.Store(&twice)
	send("once")
	edge.again.Store(nil)
	send("after")
	waitFor(t, "the home done with the sends", func() bool { return !goroutineIn("nexscope.(*fleet).execHere")() })
	alice.SendJSON(map[string]any{"type": "ping"})
	got := map[any]int{}
	for m := alice.Next(); m["type"] != "pong"; m = alice.Next() {
		got[m["text"]]++
	}
	if got["once"] != 1 || got["after"] != 1 || len(got) != 2 {
		t.Fatalf("alice got the msgs %v, want once and after, once each", got)
	}
}

// forwardedSend is a forwarded send of text to the default room named exec,
// as its home's channel delivers it.
func forwardedSend(exec, text string) cluster.Msg {
	action := `{"nexscope_budget_ms":5000,"op":"send","chat_id":"default","content":"` + text + `"}`
	return cluster.Msg{Type: msgExec, From: "i9", Fields: [][]byte{[]byte("t1"), []byte(exec), []byte(action)}}
}

// TestClusterForwardedActionCopyPastAMinuteExecutesOnce: a forwarded
// send's copy that reaches the home over a minute after the first, within
// the store's resend window (go-redis may send a PUBLISH again that late:
// each of its sends may first dial a new primary for 25 s), is not
// executed again: the home remembers it for that window, not a minute.
func TestClusterForwardedActionCopyPastAMinuteExecutesOnce(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	clk := &jumpClock{Clock: clock.System}
	in := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i0", clusterLeaseTTL, func(d *platform.Deps) { d.Clock = clk })
	homeOf(t, []*instance{in}, DefaultRoom)
	alice := in.joinWith(t, "alice", "alice", "hermes")
	cl := in.p.cluster
	cl.execHere(forwardedSend("01JEXEC", "once"))
	if m := alice.Expect("msg"); m["text"] != "once" {
		t.Fatalf("alice got %v, want the msg once", m)
	}
	clk.jump(time.Minute + time.Second)
	cl.execHere(forwardedSend("01JEXEC", "once"))
	waitFor(t, "the home done with the copy", func() bool { return !goroutineIn("nexscope.(*fleet).execHere")() })
	alice.SendJSON(map[string]any{"type": "ping"})
	for m := alice.Next(); m["type"] != "pong"; m = alice.Next() {
		t.Fatalf("alice got %v after the copy, want nothing before her pong", m)
	}
}

// TestClusterForwardBetweenHomesReachesTheNext: a send forwarded while no
// instance holds the room's lease (its home shut down; the forwarding
// instance does not bid) is answered by the instance that becomes the home
// next, within a beat, not when the forwarder's deadline passes.
func TestClusterForwardBetweenHomesReachesTheNext(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	first := startInstance(t, srv, cfg, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{first}, DefaultRoom)
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	forwarded := make(chan struct{})
	var once sync.Once
	seen := func(_ string, msg []byte) bool {
		if clustertest.Type(msg) == msgExec {
			once.Do(func() { close(forwarded) })
		}
		return false
	}
	edge.lose.Store(&seen)
	first.stop() // its lease released: no home
	results := make(chan contract.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	}()
	select {
	case <-forwarded:
	case <-time.After(testTimeout):
		t.Fatal("the edge never forwarded the send")
	}
	next := startInstance(t, srv, cfg, "i2", clusterLeaseTTL)
	homeOf(t, []*instance{next}, DefaultRoom)
	select {
	case res := <-results:
		if res.Success || !strings.Contains(res.Error, "not online") {
			t.Fatalf("send = %+v, want the new home's answer: nobody online", res)
		}
	case <-time.After(testTimeout):
		t.Fatal("the send forwarded between homes is not answered")
	}
}

// TestClusterForwardedActionCopyAtTheNextHomeExecutesNot: a copy of a
// forwarded send (its forwarder sends it again every beat until answered)
// that reaches the room's next home after the first home executed it is
// not executed again there: the claim on it is the store's.
func TestClusterForwardedActionCopyAtTheNextHomeExecutesNot(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	first := startInstance(t, srv, cfg, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{first}, DefaultRoom)
	alice := first.joinWith(t, "alice", "alice", "hermes")
	first.p.cluster.execHere(forwardedSend("01JEXEC", "once"))
	if m := alice.Expect("msg"); m["text"] != "once" {
		t.Fatalf("alice got %v, want the msg once", m)
	}
	first.stop()
	next := startInstance(t, srv, cfg, "i1", clusterLeaseTTL)
	homeOf(t, []*instance{next}, DefaultRoom)
	bob := next.joinWith(t, "bob", "bob", "hermes")
	next.p.cluster.execHere(forwardedSend("01JEXEC", "once"))
	waitFor(t, "the next home done with the copy", func() bool { return !goroutineIn("nexscope.(*fleet).execHere")() })
	bob.SendJSON(map[string]any{"type": "ping"})
	for m := bob.Next(); m["type"] != "pong"; m = bob.Next() {
		t.Fatalf("bob got %v, want nothing before his pong: the send ran at the first home", m)
	}
}

// TestClusterForwardGivenUpRunsNotAtALaterHome: a send its forwarder gave
// up on (the relay revoked its gateway) before any home took it is not
// executed by a copy that reaches the room's next home later (go-redis
// sends a PUBLISH again up to its resend window): the cancel went to the
// room's channel while no home read it, so the forwarder's claim is what
// stops it. Made before the answer, that claim tells the gateway the send
// did not run: a plain failure, not ambiguous (which hermes-wire retries
// only for a draft seal), so the gateway may send it again.
func TestClusterForwardGivenUpRunsNotAtALaterHome(t *testing.T) {
	givenUpRunsNotAtALaterHome(t, false, func(*platform.Deps) {})
}

// TestClusterForwardGivenUpWhileTheStoreFailsRunsNotAtALaterHome is
// TestClusterForwardGivenUpRunsNotAtALaterHome with the forwarder's claim
// failing at first (the store down, back a moment later): the answer is
// ambiguous (a home may take a copy before the claim), and the claim is
// made once the store is back, at the next beat.
func TestClusterForwardGivenUpWhileTheStoreFailsRunsNotAtALaterHome(t *testing.T) {
	failing := make(chan struct{})
	close(failing)
	givenUpRunsNotAtALaterHome(t, true, func(d *platform.Deps) {
		d.Store = claimsFailed{d.Store, failedClaims{asked: make(chan struct{}), fail: failing, once: new(sync.Once)}}
	})
}

// givenUpRunsNotAtALaterHome is TestClusterForwardGivenUpRunsNotAtALaterHome
// with the forwarder's deps adjusted by with, its answer ambiguous or not.
func givenUpRunsNotAtALaterHome(t *testing.T, ambiguous bool, with func(*platform.Deps)) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
		with(d)
	})
	calls := make(chan []byte, 1)
	lost := func(_ string, msg []byte) bool { // no home reads the room: every copy is lost
		if clustertest.Type(msg) == msgExec {
			select {
			case calls <- bytes.Clone(msg):
			default:
			}
		}
		return true
	}
	edge.lose.Store(&lost)
	ctx, revoke := context.WithCancel(context.Background())
	results := make(chan contract.Result, 1)
	go func() {
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "revoked"})
	}()
	var call []byte
	select {
	case call = <-calls:
	case <-time.After(testTimeout):
		t.Fatal("the edge never forwarded the send")
	}
	revoke()
	select {
	case res := <-results:
		if res.Success || res.Code != contract.CodeUnavailable || res.Ambiguous != ambiguous {
			t.Fatalf("send = %+v after its gateway was revoked, want unavailable, ambiguous %v", res, ambiguous)
		}
	case <-time.After(testTimeout):
		t.Fatal("the revoked send was not answered")
	}
	waitFor(t, "the edge's claim of the send made", func() bool {
		cl := edge.p.cluster
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return len(cl.givenUp) == 0
	})
	next := startInstance(t, srv, cfg, "i2", clusterLeaseTTL)
	homeOf(t, []*instance{next}, DefaultRoom)
	alice := next.joinWith(t, "alice", "alice", "hermes")
	next.p.cluster.node.Dispatch(call) // the copy go-redis sent again
	waitFor(t, "the next home done with the copy", func() bool { return !goroutineIn("nexscope.(*fleet).execHere")() })
	alice.SendJSON(map[string]any{"type": "ping"})
	for m := alice.Next(); m["type"] != "pong"; m = alice.Next() {
		t.Fatalf("alice got %v, want nothing before her pong: the gateway was told the send failed", m)
	}
}

// TestClusterForwardGivenUpAnsweredWhileTheStoreStalls: a send its
// forwarder gave up on (the relay revoked its gateway) is answered at once
// while the store does not answer (here: CLIENT PAUSE, under a read timeout
// past it): the claim that keeps a late copy from running is not awaited,
// so the gateway's outbound op ends with its deadline, not the store's.
func TestClusterForwardGivenUpAnsweredWhileTheStoreStalls(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), RedisPrefix: "nexscope-cluster-test:",
		RedisReplicaTimeout: time.Minute}) // and so a read timeout past the test's wait
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Store = st
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	forwarded := make(chan struct{}, 1)
	lost := func(_ string, msg []byte) bool { // no home reads the room
		if clustertest.Type(msg) == msgExec {
			select {
			case forwarded <- struct{}{}:
			default:
			}
		}
		return true
	}
	edge.lose.Store(&lost)
	sendCtx, revoke := context.WithCancel(context.Background())
	results := make(chan contract.Result, 1)
	go func() {
		results <- edge.p.Execute(sendCtx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "revoked"})
	}()
	select {
	case <-forwarded:
	case <-time.After(testTimeout):
		t.Fatal("the edge never forwarded the send")
	}
	admin := srv.Client(t)
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "120000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(context.Background(), "CLIENT", "UNPAUSE")
	revoke()
	select {
	case res := <-results:
		if res.Success || res.Code != contract.CodeUnavailable {
			t.Fatalf("send = %+v after its gateway was revoked, want unavailable", res)
		}
	case <-time.After(testTimeout):
		t.Fatal("the revoked send was not answered while the store stalled")
	}
}

// TestClusterOwnForwardReadAsHomeExecutesNot: a copy of an instance's own
// forwarded send (sent again every beat) that it reads from the room's
// channel once it became the room's home is not executed: its forward
// gives up unavailable then, so the gateway is not told unavailable for a
// send that ran.
func TestClusterOwnForwardReadAsHomeExecutesNot(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	in := startInstance(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{in}, DefaultRoom)
	alice := in.joinWith(t, "alice", "alice", "hermes")
	own := forwardedSend("01JOWN", "own")
	own.From = "i0"
	in.p.cluster.execHere(own)
	waitFor(t, "the home done with its own copy", func() bool { return !goroutineIn("nexscope.(*fleet).execHere")() })
	alice.SendJSON(map[string]any{"type": "ping"})
	for m := alice.Next(); m["type"] != "pong"; m = alice.Next() {
		t.Fatalf("alice got %v, want nothing before her pong: the instance ran its own forward", m)
	}
}

// countingClaims counts the claims taken through it.
type countingClaims struct {
	store.Claims
	n *atomic.Int32
}

func (c countingClaims) Claim(ctx context.Context, key string, expires time.Time) (bool, error) {
	c.n.Add(1)
	return c.Claims.Claim(ctx, key, expires)
}

// claimsCounted is a store whose claims count in n.
type claimsCounted struct {
	store.Store
	n *atomic.Int32
}

func (s claimsCounted) Claims() store.Claims { return countingClaims{s.Store.Claims(), s.n} }

// TestClusterForwardedActionCopyCostsNoStoreCall: a copy of a forwarded
// send that reaches the home after it claimed the send is dropped before
// the store is asked again (and before it is decoded).
func TestClusterForwardedActionCopyCostsNoStoreCall(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var claims atomic.Int32
	in := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Store = claimsCounted{d.Store, &claims}
	})
	homeOf(t, []*instance{in}, DefaultRoom)
	alice := in.joinWith(t, "alice", "alice", "hermes")
	cl := in.p.cluster
	cl.execHere(forwardedSend("01JCOPY", "once"))
	if m := alice.Expect("msg"); m["text"] != "once" {
		t.Fatalf("alice got %v, want the msg once", m)
	}
	cl.execHere(forwardedSend("01JCOPY", "once"))
	waitFor(t, "the home done with the copy", func() bool { return !goroutineIn("nexscope.(*fleet).execHere")() })
	if n := claims.Load(); n != 1 {
		t.Fatalf("the home claimed the send %d times in the store, want once: the copy asked it again", n)
	}
}

// heldLock starts two instances with media and a room whose lock bob's file
// to alice (on the edge) holds at the home, so that a send_media the edge forwards waits there.
func heldLock(t *testing.T) (home, edge *instance, url string) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	stores := map[string]*media.Store{}
	withMedia := func(name string) func(*platform.Deps) {
		return func(d *platform.Deps) {
			s, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test"})
			if err != nil {
				t.Fatal(err)
			}
			stores[name], d.Media = s, s
		}
	}
	ins := []*instance{
		startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, withMedia("i0")),
		startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, withMedia("i1")),
	}
	home = homeOf(t, ins, DefaultRoom)
	edge = others(ins, home)[0]
	info, err := stores[home.name].Put("t1", mediatest.Content(5, 1000), "application/pdf", "spec.pdf")
	if err != nil {
		t.Fatal(err)
	}
	alice := edge.joinWith(t, "alice", "alice", "hermes")
	bob := home.joinWith(t, "bob", "alice", "bob", "hermes")
	alice.ExpectPresence("alice", "bob", "hermes")
	bob.SendJSON(fileStart("f1", "bob", []string{"alice"}, 3))
	if f := alice.Expect("file-start"); f["msgId"] != "f1" {
		t.Fatalf("alice got %v, want bob's file-start", f)
	}
	return home, edge, stores[home.name].URL(info.ID)
}

// TestClusterForwardCancelledEndsAtTheHome: a forwarded send_media waiting
// at the home for the room's lock ends there once its caller gave up (the
// relay revoked its gateway): not up to 30 s later, when the lock may
// have come free and the file gone out for a gateway told it failed.
func TestClusterForwardCancelledEndsAtTheHome(t *testing.T) {
	home, edge, url := heldLock(t)
	gaveUp := make(chan struct{})
	var once sync.Once
	answer := func(_ string, msg []byte) bool {
		if bytes.Contains(msg, []byte("another file transfer holds the room")) {
			once.Do(func() { close(gaveUp) })
		}
		return false
	}
	home.lose.Store(&answer)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	results := make(chan contract.Result, 1)
	go func() {
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: DefaultRoom,
			MediaKind: "document", SourceURL: url, Metadata: contract.Metadata{UserID: "alice"}})
	}()
	waitFor(t, "the home running the forwarded send_media", func() bool {
		cl := home.p.cluster
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return len(cl.running) > 0
	})
	waitFor(t, "the edge told the home took its send_media", func() bool {
		cl := edge.p.cluster
		cl.mu.Lock()
		defer cl.mu.Unlock()
		for _, f := range cl.forwards {
			return !f.since.IsZero()
		}
		return false
	})
	cancel() // the relay revokes the gateway
	if res := <-results; res.Success || !res.Ambiguous {
		t.Fatalf("send_media = %+v, want a failure, ambiguous: its caller gave up once the home took it", res)
	}
	bound := 3 * home.p.cluster.node.Beat()
	select {
	case <-gaveUp:
	case <-time.After(bound):
		t.Fatalf("the home's send_media did not give up within %v of its caller", bound)
	}
}

// TestClusterForwardGivenUpWithItsTakenLostIsAmbiguous: a forwarded
// send_media running at the home (waiting for the room's lock) whose
// every word that the home took it was lost (pub/sub dropped msgTaken) is
// answered ambiguous once its caller gives up: the forwarder cannot tell
// a home that took it, its word lost, from none, and the action may have
// run. Before, it was answered a plain failure, which a gateway may send
// again.
func TestClusterForwardGivenUpWithItsTakenLostIsAmbiguous(t *testing.T) {
	home, edge, url := heldLock(t)
	loseTaken := func(_ string, msg []byte) bool { return clustertest.Type(msg) == msgTaken }
	home.lose.Store(&loseTaken)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	results := make(chan contract.Result, 1)
	go func() {
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: DefaultRoom,
			MediaKind: "document", SourceURL: url, Metadata: contract.Metadata{UserID: "alice"}})
	}()
	waitFor(t, "the home running the forwarded send_media", func() bool {
		cl := home.p.cluster
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return len(cl.running) > 0
	})
	cancel() // the relay revokes the gateway
	if res := <-results; res.Success || !res.Ambiguous {
		t.Fatalf("send_media = %+v, want a failure, ambiguous: the home took it, its word lost", res)
	}
}

// TestClusterForwardCancelLostEndsAtTheHome: a forwarded send_media
// waiting at the home for the room's lock ends there once its caller gave
// up though the forwarder's cancel was lost (pub/sub dropped it): the
// home's next word that it runs the action is answered with the cancel
// again, so the action does not run to the end of its time.
func TestClusterForwardCancelLostEndsAtTheHome(t *testing.T) {
	home, edge, url := heldLock(t)
	gaveUp := make(chan struct{})
	var once sync.Once
	answer := func(_ string, msg []byte) bool {
		if bytes.Contains(msg, []byte("another file transfer holds the room")) {
			once.Do(func() { close(gaveUp) })
		}
		return false
	}
	home.lose.Store(&answer)
	var lost atomic.Bool
	loseFirstCancel := func(_ string, msg []byte) bool {
		return clustertest.Type(msg) == msgCancel && lost.CompareAndSwap(false, true)
	}
	edge.lose.Store(&loseFirstCancel)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	results := make(chan contract.Result, 1)
	go func() {
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: DefaultRoom,
			MediaKind: "document", SourceURL: url, Metadata: contract.Metadata{UserID: "alice"}})
	}()
	waitFor(t, "the home running the forwarded send_media", func() bool {
		cl := home.p.cluster
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return len(cl.running) > 0
	})
	cancel() // the relay revokes the gateway
	if res := <-results; res.Success {
		t.Fatalf("send_media = %+v, want a failure: its caller gave up", res)
	}
	bound := 4 * home.p.cluster.node.Beat()
	select {
	case <-gaveUp:
	case <-time.After(bound):
		t.Fatalf("the home's send_media did not give up within %v of its caller, its cancel lost (lost: %v)", bound, lost.Load())
	}
	if !lost.Load() {
		t.Fatal("the forwarder's cancel was never sent")
	}
}

// TestClusterForwardTakenIsNotSentAgain: a forwarded send_media waiting at
// the home for the room's lock is sent once, not again every beat: the
// home tells the forwarder it took it.
func TestClusterForwardTakenIsNotSentAgain(t *testing.T) {
	home, edge, url := heldLock(t)
	var copies atomic.Int32
	count := func(_ string, msg []byte) bool {
		if clustertest.Type(msg) == msgExec {
			copies.Add(1)
		}
		return false
	}
	edge.lose.Store(&count)
	ctx, cancel := context.WithTimeout(context.Background(), 4*home.p.cluster.node.Beat())
	defer cancel()
	res := edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: DefaultRoom,
		MediaKind: "document", SourceURL: url, Metadata: contract.Metadata{UserID: "alice"}})
	if res.Success {
		t.Fatalf("send_media = %+v, want a failure: the room's lock was held past its deadline", res)
	}
	if n := copies.Load(); n != 1 {
		t.Fatalf("the edge published the forwarded send_media %d times over 4 beats, want once: the home took it", n)
	}
}

// TestClusterForwardTakenByAKilledHomeEnds: a forwarded send_media the home
// took and then died with (killed: it says nothing more) is answered
// unavailable within a few beats, not at the forwarder's deadline.
func TestClusterForwardTakenByAKilledHomeEnds(t *testing.T) {
	home, edge, url := heldLock(t)
	killed := func(string, []byte) bool { return true }
	go func() {
		waitFor(t, "the home to take the forwarded send_media", func() bool {
			cl := edge.p.cluster
			cl.mu.Lock()
			defer cl.mu.Unlock()
			for _, f := range cl.forwards {
				if f.home != "" {
					return true
				}
			}
			return false
		})
		home.lose.Store(&killed)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	start := time.Now()
	res := edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: DefaultRoom,
		MediaKind: "document", SourceURL: url, Metadata: contract.Metadata{UserID: "alice"}})
	if res.Success || res.Code != contract.CodeUnavailable || !strings.Contains(res.Error, "gone") || !res.Ambiguous {
		t.Fatalf("send_media = %+v, want unavailable, ambiguous: the home that took it is gone", res)
	}
	if took, bound := time.Since(start), (cluster.LostBeats+3)*home.p.cluster.node.Beat(); took > bound {
		t.Fatalf("send_media answered after %v, want within %v of the home's death", took, bound)
	}
}

// TestClusterForwardTakenByAHomeGoneUnheardEnds: a forwarded send whose
// home took it and went away before its forwarder heard of it (its
// msgTaken and its answer lost with it) is answered unavailable by the
// next home, which finds it claimed, at the forwarder's next copy: not
// left unanswered until the forwarder's deadline.
func TestClusterForwardTakenByAHomeGoneUnheardEnds(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	first := startInstance(t, srv, cfg, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{first}, DefaultRoom)
	alice := first.joinWith(t, "alice", "alice", "hermes")
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	silent := func(string, []byte) bool { return true }
	first.lose.Store(&silent) // what it says from now on is lost, as if killed
	results := make(chan contract.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	}()
	if m := alice.Expect("msg"); m["text"] != "hi" {
		t.Fatalf("alice got %v, want the forwarded send", m)
	}
	alice.DiscardInBackground() // her close is read: the stop does not wait for it
	first.stop()
	next := startInstance(t, srv, cfg, "i2", clusterLeaseTTL)
	homeOf(t, []*instance{next}, DefaultRoom)
	select {
	case res := <-results:
		if res.Success || res.Code != contract.CodeUnavailable || !strings.Contains(res.Error, "outcome is unknown") || !res.Ambiguous {
			t.Fatalf("send = %+v, want unavailable, ambiguous: the home that took it is gone, its outcome unknown", res)
		}
	case <-time.After(testTimeout):
		t.Fatal("the send taken by a home gone unheard is not answered")
	}
}

// takenClaims are claims another instance took every one of.
type takenClaims struct {
	store.Claims
	asked chan string
}

func (c takenClaims) Claim(_ context.Context, key string, _ time.Time) (bool, error) {
	select {
	case c.asked <- key:
	default:
	}
	return false, nil
}

// claimsTaken is a store whose claims another instance took.
type claimsTaken struct {
	store.Store
	asked chan string
}

func (s claimsTaken) Claims() store.Claims { return takenClaims{s.Store.Claims(), s.asked} }

// execCall is the request name and exec of a forwarded action's call
// (msgExec) as published: fields from, request, tenant, exec, action.
func execCall(t *testing.T, msg []byte) (req, exec []byte) {
	t.Helper()
	var fields [][]byte
	for rest := msg[1:]; len(rest) > 0; {
		n, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < n {
			t.Fatalf("malformed call %q", msg)
		}
		fields, rest = append(fields, rest[k:k+int(n)]), rest[k+int(n):]
	}
	if len(fields) != 5 {
		t.Fatalf("call %q has %d fields, want 5", msg, len(fields))
	}
	return fields[1], fields[3]
}

// TestClusterForwardTakenByALiveFormerHomeGetsItsAnswer: a forwarded send
// that a former home took (its msgTaken lost, so the forwarder asked
// again) and still runs is answered by that home, not `unavailable` by
// the home that found it taken (which tells the forwarder so at each
// copy): the outcome is known to the one running it, and the gateway
// would send again what was sent.
func TestClusterForwardTakenByALiveFormerHomeGetsItsAnswer(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	asked := make(chan string, 1)
	home := startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Store = claimsTaken{d.Store, asked}
	})
	homeOf(t, []*instance{home}, DefaultRoom)
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	var once sync.Once
	loseFirst := func(_ string, msg []byte) bool { // the home's first word is lost too: it tells again at the next copy
		lost := false
		if clustertest.Type(msg) == msgClaimed {
			once.Do(func() { lost = true })
		}
		return lost
	}
	home.lose.Store(&loseFirst)
	calls := make(chan []byte, 8)
	record := func(_ string, msg []byte) bool {
		if clustertest.Type(msg) == msgExec {
			select {
			case calls <- msg:
			default:
			}
		}
		return false
	}
	edge.lose.Store(&record)
	results := make(chan contract.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	}()
	var call []byte
	select {
	case call = <-calls:
	case <-time.After(testTimeout):
		t.Fatal("the edge forwarded no send")
	}
	req, exec := execCall(t, call)
	select {
	case <-asked:
	case <-time.After(testTimeout):
		t.Fatal("the home never claimed the forwarded send")
	}
	waitFor(t, "the home's word at the forwarder", func() bool {
		cl := edge.p.cluster
		cl.mu.Lock()
		defer cl.mu.Unlock()
		f := cl.forwards[string(exec)]
		return len(results) > 0 || f != nil && !f.since.IsZero()
	})
	if len(results) > 0 {
		t.Fatalf("send = %+v, want the answer of the former home still running it", <-results)
	}
	// The former home, alive, tells it took the send, and answers.
	edge.p.cluster.node.Dispatch(clustertest.Encode(msgTaken, "i9", exec))
	raw, _ := json.Marshal(contract.Result{Success: true, MessageID: "m1"})
	edge.p.cluster.node.Dispatch(clustertest.Encode(0, "i9", req, raw))
	select {
	case res := <-results:
		if !res.Success || res.MessageID != "m1" {
			t.Fatalf("send = %+v, want the former home's answer", res)
		}
	case <-time.After(testTimeout):
		t.Fatal("the send is not answered")
	}
}

// heldClaims are claims an instance (holder) took every one of, recording
// itself as their holder as a home does.
type heldClaims struct {
	store.Claims
	holders store.Capabilities
	holder  string
}

func (c heldClaims) Claim(ctx context.Context, key string, until time.Time) (bool, error) {
	return false, c.holders.Put(ctx, "nexscope:holder:"+strings.TrimPrefix(key, "nexscope:exec:"), []byte(c.holder), until)
}

// claimsHeld is a store whose claims an instance (holder: a former home,
// or an earlier run of this one) took.
type claimsHeld struct {
	store.Store
	holder string
}

func (s claimsHeld) Claims() store.Claims {
	return heldClaims{s.Store.Claims(), s.Capabilities(), s.holder}
}

// TestClusterForwardTakenAndAnsweredByAFormerHomeUnheardGetsItsAnswer: a
// forwarded send that a former home took and answered, its msgTaken and
// its answer both lost, is asked of that home (named by the claim's
// record) and gets its answer: not `unavailable`, its outcome unknown,
// three beats later, over a send that was made.
func TestClusterForwardTakenAndAnsweredByAFormerHomeUnheardGetsItsAnswer(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	home := startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Store = claimsHeld{d.Store, "i9"}
	})
	homeOf(t, []*instance{home}, DefaultRoom)
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	asked := make(chan []byte, 8) // copies sent to the former home
	record := func(channel string, msg []byte) bool {
		if clustertest.Type(msg) == msgExec && channel == cluster.Inbox("i9") {
			select {
			case asked <- msg:
			default:
			}
		}
		return false
	}
	edge.lose.Store(&record)
	results := make(chan contract.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	}()
	var call []byte
	select {
	case call = <-asked:
	case res := <-results:
		t.Fatalf("send = %+v, want the former home asked for its answer", res)
	case <-time.After(testTimeout):
		t.Fatal("the former home that took the send is never asked for its answer")
	}
	req, _ := execCall(t, call)
	raw, _ := json.Marshal(contract.Result{Success: true, MessageID: "m1"})
	edge.p.cluster.node.Dispatch(clustertest.Encode(0, "i9", req, raw)) // its answer to the copy
	select {
	case res := <-results:
		if !res.Success || res.MessageID != "m1" {
			t.Fatalf("send = %+v, want the former home's answer", res)
		}
	case <-time.After(testTimeout):
		t.Fatal("the send is not answered")
	}
}

// TestClusterForwardHeldByARestartedInstanceEnds: a forwarded send whose
// claim names an instance that is alive but no longer knows the action (it
// restarted under its name since it took it) is answered unavailable, its
// outcome unknown, as soon as that instance is asked: not at the
// forwarder's deadline, which nothing would answer before.
func TestClusterForwardHeldByARestartedInstanceEnds(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	home := startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Store = claimsHeld{d.Store, "i9"} // claimed by i9 before it restarted
	})
	homeOf(t, []*instance{home}, DefaultRoom)
	neverHome := func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done()
			return nil
		}
	}
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, neverHome)
	restarted := startInstanceWith(t, srv, cfg, "i9", clusterLeaseTTL, neverHome)
	// i9 is alive: the edge hears from it every beat (as the relay's
	// beats make it heard), so it never counts gone.
	alive, stopAlive := context.WithCancel(context.Background())
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		clock.Every(alive, clock.System, restarted.p.cluster.node.Beat()/2, func(context.Context) {
			restarted.p.cluster.node.Send(cluster.Inbox("i1"), '~') // a type no one handles
		})
	}()
	defer func() { stopAlive(); <-beating }()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	start := time.Now()
	res := edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	if res.Success || res.Code != contract.CodeUnavailable || !strings.Contains(res.Error, "outcome is unknown") || !res.Ambiguous {
		t.Fatalf("send = %+v, want unavailable, ambiguous: its holder no longer knows it, its outcome unknown", res)
	}
	if took, bound := time.Since(start), (cluster.LostBeats+1)*edge.p.cluster.node.Beat(); took > bound {
		t.Fatalf("send answered after %v, want within %v: the restarted holder says at once that it does not know it", took, bound)
	}
}

// TestClusterForwardTakenByARestartedHomeEnds: a forwarded send the home
// took (its msgTaken heard) and then lost by restarting under its name, as
// the room's home again, is answered unavailable, its outcome unknown, as
// soon as the forwarder asks that home for its answer: the home finds the
// send claimed by its earlier run and says so; the forwarder does not wait
// for its deadline.
func TestClusterForwardTakenByARestartedHomeEnds(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	home := startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Store = claimsHeld{d.Store, "i0"} // claimed by its run before the restart
	})
	homeOf(t, []*instance{home}, DefaultRoom)
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	var first atomic.Bool
	takenBefore := func(channel string, msg []byte) bool { // the copy the earlier run took
		if clustertest.Type(msg) != msgExec || !first.CompareAndSwap(false, true) {
			return false
		}
		_, exec := execCall(t, msg)
		edge.p.cluster.node.Dispatch(clustertest.Encode(msgTaken, "i0", exec)) // its word, before the restart
		return true
	}
	edge.lose.Store(&takenBefore)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	start := time.Now()
	res := edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	if res.Success || res.Code != contract.CodeUnavailable || !strings.Contains(res.Error, "outcome is unknown") || !res.Ambiguous {
		t.Fatalf("send = %+v, want unavailable, ambiguous: the home that took it restarted, its outcome unknown", res)
	}
	if took, bound := time.Since(start), (cluster.LostBeats+1)*edge.p.cluster.node.Beat(); took > bound {
		t.Fatalf("send answered after %v, want within %v: the restarted home says at once that another run took it", took, bound)
	}
}

// TestClusterForwardUnknownToAnotherKeepsAsking: the word of an instance
// that does not know a forwarded send counts only from the one that took
// it: from another (a former home still reading the room's channel), the
// forwarder keeps sending copies until a home takes it, and one taken
// waits on until its taker (not another) says it does not know it.
func TestClusterForwardUnknownToAnotherKeepsAsking(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	edge := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	calls := make(chan []byte, 8)
	lost := func(_ string, msg []byte) bool { // no home reads the room
		if clustertest.Type(msg) == msgExec {
			select {
			case calls <- bytes.Clone(msg):
			default:
			}
		}
		return true
	}
	edge.lose.Store(&lost)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	results := make(chan contract.Result, 1)
	go func() {
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	}()
	var exec []byte
	select {
	case call := <-calls:
		_, exec = execCall(t, call)
	case <-time.After(testTimeout):
		t.Fatal("the edge never forwarded the send")
	}
	cl := edge.p.cluster
	cl.node.Dispatch(clustertest.Encode(msgUnknown, "i9", exec))
	for range 2 {
		select {
		case <-calls:
		case <-time.After(3 * cl.node.Beat()):
			t.Fatal("the edge stopped sending copies of its send at the word of an instance that never took it")
		}
	}
	// Taken by i0 since: i9's words still end nothing, i0's does.
	cl.node.Dispatch(clustertest.Encode(msgTaken, "i0", exec))
	cl.node.Dispatch(clustertest.Encode(msgUnknown, "i9", exec))
	cl.node.Dispatch(clustertest.Encode(msgClaimed, "i9", exec))
	cl.mu.Lock()
	f := cl.forwards[string(exec)]
	ended := f == nil || f.forgot
	cl.mu.Unlock()
	if ended {
		t.Fatal("the word of an instance that never took the send ended its forward, taken by another")
	}
	cl.node.Dispatch(clustertest.Encode(msgUnknown, "i0", exec))
	if res := <-results; !strings.Contains(res.Error, "no longer knows") || !res.Ambiguous {
		t.Fatalf("send = %+v, want unavailable, ambiguous: the instance that took it no longer knows it", res)
	}
}

// holdersHeld is a store whose writes of a claim's holder record wait
// for held to close.
type holdersHeld struct {
	store.Store
	held <-chan struct{}
}

func (s holdersHeld) Capabilities() store.Capabilities {
	return heldHolders{s.Store.Capabilities(), s.held}
}

type heldHolders struct {
	store.Capabilities
	held <-chan struct{}
}

func (c heldHolders) Put(ctx context.Context, key string, value []byte, until time.Time) error {
	if strings.HasPrefix(key, "nexscope:holder:") {
		select {
		case <-c.held:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.Capabilities.Put(ctx, key, value, until)
}

// TestClusterForwardRunsBeforeItsHolderIsRecorded: a forwarded send the
// home claimed is executed at once, not after a second store write (its
// holder record, under redis_min_replicas a wait for the replicas more),
// and the record, once written, names the home.
func TestClusterForwardRunsBeforeItsHolderIsRecorded(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	held := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(held) }) }
	in := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Store = holdersHeld{d.Store, held}
	})
	t.Cleanup(release) // before the instance's shutdown, which waits for the write
	homeOf(t, []*instance{in}, DefaultRoom)
	alice := in.joinWith(t, "alice", "alice", "hermes")
	cl := in.p.cluster
	cl.execHere(forwardedSend("01JREC", "hi"))
	if m := alice.Expect("msg"); m["text"] != "hi" {
		t.Fatalf("alice got %v, want the forwarded send", m)
	}
	release()
	waitFor(t, "the claim's holder record naming the home", func() bool {
		v, _, _ := cl.holders.Get(context.Background(), "nexscope:holder:01JREC")
		return string(v) == "i0"
	})
}

// TestClusterClaimHolderForeignValueIsNotKept: a claim's holder record
// holding a foreign value of a megabyte (Redis written by another program)
// names no holder, and costs the home no megabyte per action remembered.
func TestClusterClaimHolderForeignValueIsNotKept(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	home := startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Store = claimsTaken{d.Store, make(chan string, 1)}
	})
	cl := home.p.cluster
	ctx := context.Background()
	if err := cl.holders.Put(ctx, "nexscope:holder:01JBIG", bytes.Repeat([]byte("x"), 1<<20), time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if took, held := cl.claim("01JBIG"); took || len(held) != 1 {
		t.Fatalf("claim = %v, %d bytes held, want taken elsewhere by no instance named", took, len(held))
	}
	if v, _, _ := cl.execs.Get(ctx, "01JBIG"); len(v) != 1 {
		t.Fatalf("the home remembers %d bytes of the claim, want 1", len(v))
	}
}

// TestClusterForwardAnsweredOverAFullOutboxArrives: the result of a
// forwarded send that finds the home's outbox full (Redis slow to take a
// burst) waits for room, not lost: the home tells the forwarder no more
// that it runs the send, so the forwarder, hearing nothing, would wait its
// whole deadline and answer `unavailable` over a send that was made.
func TestClusterForwardAnsweredOverAFullOutboxArrives(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	home := startInstance(t, srv, cfg, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	alice := home.joinWith(t, "alice", "alice", "hermes")
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	held := make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(held) }) }) // before the home stops: it publishes what is queued
	hold := func(string, []byte) bool { <-held; return false }
	home.lose.Store(&hold) // the home's publisher waits on Redis
	for home.p.cluster.node.Send("elsewhere", 'Z') {
	}
	results := make(chan contract.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	}()
	if m := alice.Expect("msg"); m["text"] != "hi" {
		t.Fatalf("alice got %v, want the forwarded send", m)
	}
	waitFor(t, "the home done with the send, or waiting for room to answer it", func() bool {
		return !goroutineIn("nexscope.(*fleet).execHere")() || goroutineIn("nexscope.(*fleet).execHere", "SendWait")()
	})
	release.Do(func() { close(held) })
	select {
	case res := <-results:
		if !res.Success {
			t.Fatalf("send = %+v, want the home's answer: it was sent", res)
		}
	case <-time.After(testTimeout):
		t.Fatal("the send is not answered")
	}
}

// TestClusterForwardAnswerWaitsNoLongerThanTheForwarder: a home whose
// outbox stays full (Redis down) waits for room to answer a forwarded
// action until the forwarder's deadline from the receipt (the budget the
// forward carries), not the longest deadline from the action's end: the
// forwarder has given up by then, and a shutdown waits for that goroutine.
func TestClusterForwardAnswerWaitsNoLongerThanTheForwarder(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	clk := newFakeClock()
	home := startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, func(d *platform.Deps) { d.Clock = clk })
	homeOf(t, []*instance{home}, DefaultRoom)
	alice := home.joinWith(t, "alice", "alice", "hermes")
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	held := make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(held) }) }) // before the home stops: it publishes what is queued
	holding := make(chan struct{})
	var entered sync.Once
	hold := func(string, []byte) bool { entered.Do(func() { close(holding) }); <-held; return false }
	home.lose.Store(&hold) // the home's publisher waits on Redis
	for home.p.cluster.node.Send("elsewhere", 'Z') {
	}
	select { // the publisher took a batch out of the outbox: fill it again
	case <-holding:
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the home's publisher to wait on Redis", testTimeout)
	}
	for home.p.cluster.node.Send("elsewhere", 'Z') {
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout) // the budget forwarded: under testTimeout
	defer cancel()
	results := make(chan contract.Result, 1)
	go func() {
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	}()
	if m := alice.Expect("msg"); m["text"] != "hi" {
		t.Fatalf("alice got %v, want the forwarded send", m)
	}
	waitFor(t, "the home waiting for room to answer the send", goroutineIn("nexscope.(*fleet).execHere", "SendWait"))
	clk.Advance(testTimeout)
	waitFor(t, "the home done waiting, at the forwarder's deadline", func() bool {
		return !goroutineIn("nexscope.(*fleet).execHere")()
	})
	cancel()
	<-results
}

// TestClusterForwardAnswerLostIsAnsweredAgain: a forwarded send whose
// answer pub/sub lost, while its home stays alive, is answered within a
// few beats (the forwarder asks again once the home's msgTaken stopped,
// and the home answers the copy with the result it kept), not left
// waiting until the forwarder's deadline.
func TestClusterForwardAnswerLostIsAnsweredAgain(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	home := startInstance(t, srv, cfg, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	alice := home.joinWith(t, "alice", "alice", "hermes")
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	var once sync.Once
	loseFirst := func(_ string, msg []byte) bool {
		lost := false
		if clustertest.Type(msg) == 0 { // a Call's result
			once.Do(func() { lost = true })
		}
		return lost
	}
	home.lose.Store(&loseFirst)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	start := time.Now()
	res := edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	if !res.Success {
		t.Fatalf("send = %+v, want its success: the home executed it", res)
	}
	if took, bound := time.Since(start), (cluster.LostBeats+3)*home.p.cluster.node.Beat(); took > bound {
		t.Fatalf("send answered after %v, want within %v: its home lives and kept the answer", took, bound)
	}
	if m := alice.Expect("msg"); m["text"] != "hi" {
		t.Fatalf("alice got %v, want the forwarded send", m)
	}
}

// TestClusterForwardAnswerLostIsAskedForBeforeTheHomeCountsGone: the
// forwarder of a send whose answer pub/sub lost asks its home again before
// it would count that home gone, also when its checks (one a beat) run
// late: its home's msgTaken came a fifth of a beat after the forward, and
// the forwarder's third check ran a third of a beat late (a busy
// instance). Asked only from two beats of silence on, the second check
// came too early and the third found the home silent for three:
// unavailable, "outcome unknown", for a send made. The forwarder runs on
// a fake clock, each check at the instant the test moves it to.
func TestClusterForwardAnswerLostIsAskedForBeforeTheHomeCountsGone(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	home := startInstance(t, srv, cfg, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	alice := home.joinWith(t, "alice", "alice", "hermes")
	clk := newFakeClock()
	edge := startInstanceOn(t, srv, cfg, "i1", clusterLeaseTTL, clk, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	beat := edge.p.cluster.node.Beat()
	decoding, decode := make(chan struct{}), make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(decode) }) })
	var entered sync.Once
	home.p.cluster.decode = func(data []byte, v any) error {
		entered.Do(func() { close(decoding) })
		<-decode // the home's msgTaken comes late
		return json.Unmarshal(data, v)
	}
	var once sync.Once
	loseFirst := func(_ string, msg []byte) bool {
		lost := false
		if clustertest.Type(msg) == 0 { // a Call's result
			once.Do(func() { lost = true })
		}
		return lost
	}
	home.lose.Store(&loseFirst)
	var askedAgain atomic.Bool
	flushed := make(chan struct{}, 1)
	watch := func(channel string, msg []byte) bool {
		switch {
		case channel == cluster.Inbox(home.name) && bytes.Contains(msg, []byte(budgetKey)):
			askedAgain.Store(true)
		case channel == "elsewhere":
			flushed <- struct{}{}
		}
		return false
	}
	edge.lose.Store(&watch)
	asking := goroutineIn("[select", "cluster.(*Node).CallAgain")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	results := make(chan contract.Result, 1)
	go func() {
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	}()
	waitFor(t, "the forwarder waiting for the send's answer, its next check a beat on", asking)
	select {
	case <-decoding:
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the home to decode the send", testTimeout)
	}
	clk.Advance(beat / 5)
	release.Do(func() { close(decode) })
	if m := alice.Expect("msg"); m["text"] != "hi" {
		t.Fatalf("alice got %v, want the forwarded send", m)
	}
	waitFor(t, "the forwarder told the home took the send", func() bool {
		fl := edge.p.cluster
		fl.mu.Lock()
		defer fl.mu.Unlock()
		for _, f := range fl.forwards {
			if f.home == home.name {
				return true
			}
		}
		return false
	})
	// Its checks: a beat after the forward, and a beat after that.
	for _, d := range []time.Duration{beat - beat/5, beat} {
		clk.Advance(d)
		waitFor(t, "the forwarder's check done", func() bool { return asking() || !goroutineIn("cluster.(*Node).CallAgain")() })
	}
	for !edge.p.cluster.node.Send("elsewhere", 'Z') {
	}
	select { // what the checks sent is published
	case <-flushed:
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the forwarder's outbox to be published", testTimeout)
	}
	if !askedAgain.Load() { // not asked again: its third check, a third of a beat late
		clk.Advance(beat + beat/3)
	}
	select {
	case res := <-results:
		if !res.Success {
			t.Fatalf("send = %+v, want its success: the home executed it, lives and kept the answer", res)
		}
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the send's answer", testTimeout)
	}
}

// TestClusterForwardAnswerLostAfterTheRoomMovedIsAnsweredAgain: a
// forwarded send whose answer pub/sub lost, its home losing the room just
// after while that instance lives, is answered by that instance: the
// forwarder asks it again in its inbox, not on the room's channel, which
// it no longer reads (was: unavailable, "outcome unknown", for a send
// made).
func TestClusterForwardAnswerLostAfterTheRoomMovedIsAnsweredAgain(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	tenure := make(chan context.CancelFunc, 1)
	home := startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, run func(context.Context) error) error {
			hctx, cancel := context.WithCancel(ctx)
			defer cancel()
			tenure <- cancel
			_ = run(hctx)
			<-ctx.Done() // the room's home no more
			return nil
		}
	})
	homeOf(t, []*instance{home}, DefaultRoom)
	resign := <-tenure
	alice := home.joinWith(t, "alice", "alice", "hermes")
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	var once sync.Once
	loseFirst := func(_ string, msg []byte) bool {
		lost := false
		if clustertest.Type(msg) == 0 { // a Call's result
			once.Do(func() {
				lost = true
				resign() // the room's lease lost: it moves on
			})
		}
		return lost
	}
	home.lose.Store(&loseFirst)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res := edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	if !res.Success {
		t.Fatalf("send = %+v, want its success: the former home executed it and lives", res)
	}
	if m := alice.Expect("msg"); m["text"] != "hi" {
		t.Fatalf("alice got %v, want the forwarded send", m)
	}
}

// TestClusterForwardedActionEndsWithTheHomesShutdown: a forwarded
// send_media the home runs (its source still downloading) ends when the
// home shuts down, not at the forwarder's deadline: Run waits for it.
func TestClusterForwardedActionEndsWithTheHomesShutdown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	asked := make(chan struct{}, 1)
	source := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		<-req.Context().Done() // a source that never answers
	}))
	t.Cleanup(source.Close)
	home := startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		s, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test", AllowPrivateURLs: true})
		if err != nil {
			t.Fatal(err)
		}
		d.Media = s
	})
	homeOf(t, []*instance{home}, DefaultRoom)
	alice := home.joinWith(t, "alice", "alice", "hermes")
	alice.DiscardInBackground()
	edge := startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: DefaultRoom,
			MediaKind: "document", SourceURL: source.URL + "/spec.pdf"})
	}()
	select {
	case <-asked:
	case <-time.After(testTimeout):
		t.Fatal("the home never asked the source for the forwarded send_media")
	}
	start := time.Now()
	home.stop()
	if took := time.Since(start); took > 3*home.p.cluster.node.Beat() {
		t.Fatalf("the home's Run returned %v after its shutdown began, want within 3 beats: the forwarded send_media it ran held it", took)
	}
}

// TestClusterForwardCopiesRacingALostLeaseSayNotUnknown: two copies of a
// forwarded send read together (go-redis sent its PUBLISH again) both
// decode; the first claims and runs it, the room's lease is lost, then the
// second finds the room no longer homed here. It says nothing: the
// forwarder, told msgUnknown by the instance that took the send, would
// answer "outcome unknown" for an action it still runs or answers.
func TestClusterForwardCopiesRacingALostLeaseSayNotUnknown(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	var loseLease atomic.Pointer[context.CancelFunc]
	home := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, run func(context.Context) error) error {
			hctx, cancel := context.WithCancel(ctx)
			defer cancel()
			loseLease.Store(&cancel)
			return run(hctx)
		}
	})
	homeOf(t, []*instance{home}, DefaultRoom)
	alice := home.joinWith(t, "alice", "alice", "hermes")
	unknown, flushed := make(chan struct{}, 1), make(chan struct{})
	told := func(channel string, msg []byte) bool {
		switch {
		case channel == cluster.Inbox("i9") && clustertest.Type(msg) == msgUnknown:
			select {
			case unknown <- struct{}{}:
			default:
			}
		case channel == cluster.Inbox("i9-flushed"):
			close(flushed)
		}
		return false
	}
	home.lose.Store(&told)
	cl := home.p.cluster
	holding := make(chan chan struct{}, 2)
	cl.decode = func(data []byte, v any) error {
		release := make(chan struct{})
		holding <- release
		<-release
		return json.Unmarshal(data, v)
	}
	cl.execHere(forwardedSend("01JTWICE", "twice"))
	cl.execHere(forwardedSend("01JTWICE", "twice")) // read before the first claimed it
	var copies [2]chan struct{}
	for i := range copies {
		select {
		case copies[i] = <-holding:
		case <-time.After(testTimeout):
			t.Fatalf("copy %d of the send not decoding within %v: the second must pass the first's check", i+1, testTimeout)
		}
	}
	close(copies[0])
	if m := alice.Expect("msg"); m["text"] != "twice" {
		t.Fatalf("alice got %v, want the send", m)
	}
	(*loseLease.Load())()
	waitFor(t, "the room's lease lost", func() bool { return !home.p.room(DefaultRoom).homeHeld() })
	close(copies[1])
	waitFor(t, "the home done with the copies", func() bool { return !goroutineIn("nexscope.(*fleet).execHere")() })
	// The outbox is published in order: what the copies sent is out once
	// a message queued after them is.
	cl.node.Send(cluster.Inbox("i9-flushed"), msgCancel, []byte("01JTWICE"))
	select {
	case <-flushed:
	case <-time.After(testTimeout):
		t.Fatalf("the home's outbox not published within %v", testTimeout)
	}
	select {
	case <-unknown:
		t.Fatal("the instance that took the send told its forwarder it does not know it (msgUnknown): its gateway is told 'outcome unknown' for a send that ran")
	default:
	}
}

// TestClusterForwardsGivenUpWhileTheStoreStallsClaimedOneAtATime: the
// claims of forwards given up on while the store does not answer (each
// claim stalled) end with the answer's bound (ClaimTimeout), and
// are tried again by one goroutine, one at a time, not one goroutine each
// retrying every beat; and the instance's stop waits neither for a
// stalled claim nor for the next beat.
func TestClusterForwardsGivenUpWhileTheStoreStallsClaimedOneAtATime(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	stalled := &stalledClaims{release: make(chan struct{})}
	ttl := 6 * testTimeout // a beat (a third) longer than the test waits for the stop
	edge := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}, ClaimTimeout: time.Millisecond}, "i1", ttl, func(d *platform.Deps) {
		stalled.Claims = d.Store.Claims()
		d.Store = stalledStore{d.Store, stalled}
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	forwarded := make(chan struct{}, 1)
	lost := func(_ string, msg []byte) bool { // no home reads the room
		if clustertest.Type(msg) == msgExec {
			select {
			case forwarded <- struct{}{}:
			default:
			}
		}
		return true
	}
	edge.lose.Store(&lost)
	for i := range 3 {
		ctx, revoke := context.WithCancel(context.Background())
		results := make(chan contract.Result, 1)
		go func() {
			results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "revoked"})
		}()
		select {
		case <-forwarded:
		case <-time.After(testTimeout):
			t.Fatalf("the edge never forwarded send %d", i)
		}
		revoke()
		select {
		case res := <-results:
			if !res.Ambiguous {
				t.Fatalf("revoked send %d = %+v while the store stalled, want ambiguous", i, res)
			}
		case <-time.After(testTimeout):
			t.Fatalf("revoked send %d not answered", i)
		}
	}
	if n := goroutinesIn("(*fleet).forwardExec.func") + goroutinesIn("(*fleet).claimGivenUp"); n != 1 {
		t.Errorf("%d goroutines claim the 3 forwards given up on, want 1", n)
	}
	if n := stalled.asked.Load(); n != 0 {
		t.Errorf("%d claims still asked of the stalled store once the sends were answered, want none before the next beat", n)
	}
	stopped := make(chan struct{})
	go func() {
		edge.stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(testTimeout):
		close(stalled.release)
		<-stopped
		t.Fatalf("the edge did not stop within %v while a given-up forward's claim stalled", testTimeout)
	}
}

// goroutinesIn counts the goroutines whose stack contains sub.
func goroutinesIn(sub string) int {
	buf := make([]byte, 1<<20)
	n := 0
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, sub) {
			n++
		}
	}
	return n
}

// stalledClaims are claims that never answer (a store stalled) until
// release is closed, then fail, or their context ends; asked counts those
// stalled now.
type stalledClaims struct {
	store.Claims
	release chan struct{}
	asked   atomic.Int32
}

func (c *stalledClaims) Claim(ctx context.Context, _ string, _ time.Time) (bool, error) {
	c.asked.Add(1)
	defer c.asked.Add(-1)
	select {
	case <-c.release:
	case <-ctx.Done():
	}
	return false, errors.New("store stalled")
}

// stalledStore is a store whose claims are stalled.
type stalledStore struct {
	store.Store
	claims *stalledClaims
}

func (s stalledStore) Claims() store.Claims { return s.claims }

// TestClusterGivenUpForwardPastItsWindowAsksNoStore: a forward given up on
// whose window ended (no copy may come any more) is forgotten without a
// claim: one asked of a stalled store would hold the claims of every other
// given up behind it, each until the store answered.
func TestClusterGivenUpForwardPastItsWindowAsksNoStore(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	stalled := &stalledClaims{release: make(chan struct{})}
	edge := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		stalled.Claims = d.Store.Claims()
		d.Store = stalledStore{d.Store, stalled}
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	cl := edge.p.cluster
	cl.mu.Lock() // as forwardExec gives one up, its window ended since
	cl.givenUp["01JPAST"] = cl.p.deps.Clock.Now().Add(-time.Millisecond)
	cl.claiming = true
	cl.wg.Go(cl.claimGivenUp)
	cl.mu.Unlock()
	waitFor(t, "the forward given up on past its window forgotten, no claim asked of the stalled store", func() bool {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return !cl.claiming
	})
}

// TestClusterForwardGivenUpPastTheCapLogged: a forward given up on while
// maxLeft others wait for their claim (the store failing that long) is
// answered unavailable as any other, but not claimed: that is logged, for
// the operator to see that a late copy of it may run.
func TestClusterForwardGivenUpPastTheCapLogged(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	edge := startInstanceWith(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Store = downClaimsStore{d.Store, &downClaims{}}
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	cl := edge.p.cluster
	cl.mu.Lock() // as many as the store failing may leave waiting; no loop claims them
	later := cl.p.deps.Clock.Now().Add(time.Hour)
	for i := range maxLeft {
		cl.givenUp[strconv.Itoa(i)] = later
	}
	cl.claiming = true
	cl.mu.Unlock()
	forwarded := make(chan struct{}, 1)
	lost := func(_ string, msg []byte) bool { // no home reads the room
		if clustertest.Type(msg) == msgExec {
			select {
			case forwarded <- struct{}{}:
			default:
			}
		}
		return true
	}
	edge.lose.Store(&lost)
	ctx, revoke := context.WithCancel(context.Background())
	results := make(chan contract.Result, 1)
	go func() {
		results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "revoked"})
	}()
	select {
	case <-forwarded:
	case <-time.After(testTimeout):
		t.Fatal("the edge never forwarded the send")
	}
	revoke()
	select {
	case r := <-results:
		if r.Success || r.Code != contract.CodeUnavailable {
			t.Fatalf("the revoked send answered %+v, want unavailable", r)
		}
	case <-time.After(testTimeout):
		t.Fatal("the revoked send not answered")
	}
	if !strings.Contains(edge.logs.String(), "nexscope forward given up on not claimed") {
		t.Fatalf("a forward given up on past the %d waiting not logged", maxLeft)
	}
}

// TestClusterForwardsGivenUpOftenWhileTheStoreFailsArePaced: forwards
// given up on one after another while the store fails every claim are
// each claimed once at once, then again one pass a beat (on the injected
// clock), each once a pass: not a pass again at every give-up, each
// retrying all those waiting, which asked a failing store back to back as
// often as give-ups came; nor is a new give-up's first claim delayed
// until the pass after a failed one.
func TestClusterForwardsGivenUpOftenWhileTheStoreFailsArePaced(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	clk := newFakeClock()
	claims := &downClaims{}
	edge := startInstanceOn(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "i1", clusterLeaseTTL, clk, func(d *platform.Deps) {
		d.Store = downClaimsStore{d.Store, claims}
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	forwarded := make(chan struct{}, 1)
	lost := func(_ string, msg []byte) bool { // no home reads the room
		if clustertest.Type(msg) == msgExec {
			select {
			case forwarded <- struct{}{}:
			default:
			}
		}
		return true
	}
	edge.lose.Store(&lost)
	giveUp := func(i int) {
		ctx, revoke := context.WithCancel(context.Background())
		results := make(chan contract.Result, 1)
		go func() {
			results <- edge.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "revoked"})
		}()
		select {
		case <-forwarded:
		case <-time.After(testTimeout):
			t.Fatalf("the edge never forwarded send %d", i)
		}
		revoke()
		select {
		case <-results:
		case <-time.After(testTimeout):
			t.Fatalf("revoked send %d not answered", i)
		}
	}
	const more = 5
	for i := range 1 + more {
		giveUp(i)
	}
	if n := claims.asked.Load(); n != 1+more {
		t.Fatalf("%d claims asked of the failing store by %d give-ups within a beat, want one each", n, 1+more)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := clk.WaitSleepers(ctx, 1); err != nil {
		t.Fatal("the claims' goroutine never paused for a beat")
	}
	clk.Advance(edge.p.cluster.node.Beat())
	want := int32(2 * (1 + more)) // each at its give-up, then once again
	waitFor(t, "the given-up forwards' claims asked again a beat later", func() bool { return claims.asked.Load() >= want })
	if err := clk.WaitSleepers(ctx, 1); err != nil {
		t.Fatal("the claims' goroutine never paused again")
	}
	if n := claims.asked.Load(); n != want {
		t.Fatalf("%d claims asked of the failing store by a beat on, want %d", n, want)
	}
}

// downClaims are claims that fail at once (the store down); asked counts
// them.
type downClaims struct {
	store.Claims
	asked atomic.Int32
}

func (c *downClaims) Claim(context.Context, string, time.Time) (bool, error) {
	c.asked.Add(1)
	return false, errors.New("store down")
}

// downClaimsStore is a store whose claims fail.
type downClaimsStore struct {
	store.Store
	claims *downClaims
}

func (s downClaimsStore) Claims() store.Claims { return s.claims }
