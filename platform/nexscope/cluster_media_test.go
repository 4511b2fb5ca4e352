package nexscope

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/cluster"
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

// TestClusterForwardedExecBudget: the exec call's budget field at a real
// home (redis-server, two instances). A budget already spent when the
// action was forwarded (0, negative, or a field that is no number) is
// answered unavailable and the action is not executed: send and prompt do
// not wait on their context, so the home would otherwise send a msg the
// gateway was told failed (Call may still publish with its context done).
// A call without the field (an earlier release's instance, during a
// rolling deploy) is executed with the 30 s of before.
func TestClusterForwardedExecBudget(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	ins := startInstances(t, srv, cfg, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := home.joinWith(t, "alice", "alice", "hermes")
	exec := func(content string, budget ...string) (contract.Result, bool) {
		t.Helper()
		action, err := json.Marshal(&contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: content})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		fields := [][]byte{[]byte("t1"), action}
		for _, b := range budget {
			fields = append(fields, []byte(b))
		}
		raw, ok := edge.p.cluster.node.Call(ctx, roomPrefix+DefaultRoom, msgExec, fields...)
		if !ok {
			return contract.Result{}, false
		}
		var res contract.Result
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		return res, true
	}
	for _, budget := range []string{"0", "-250", "soon"} {
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
		t.Fatalf("exec without a budget field = %+v (answered %v), want success", res, ok)
	}
	if f := alice.Expect("msg"); f["text"] != "no budget" {
		t.Fatalf("alice got %v, want the msg of the call without a budget", f)
	}
}

// TestClusterForwardedExecBudgetInTheAction: the budget as a forwarder
// sends it, in the action's JSON (budgetKey): one spent is answered
// unavailable without executing the action, one left is executed.
func TestClusterForwardedExecBudgetInTheAction(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	ins := startInstances(t, srv, cfg, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := home.joinWith(t, "alice", "alice", "hermes")
	for _, c := range []struct {
		budget string
		ok     bool
	}{{"0", false}, {`"soon"`, false}, {"5000", true}} {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		action := `{"` + budgetKey + `":` + c.budget + `,"op":"send","chat_id":"default","content":` + strconv.Quote("budget "+c.budget) + `}`
		raw, answered := edge.p.cluster.node.Call(ctx, roomPrefix+DefaultRoom, msgExec, []byte("t1"), []byte(action))
		cancel()
		var res contract.Result
		if !answered || json.Unmarshal(raw, &res) != nil || res.Success != c.ok || !c.ok && res.Code != contract.CodeUnavailable {
			t.Fatalf("exec with budget %s = %+v (answered %v), want success %v", c.budget, res, answered, c.ok)
		}
	}
	if f := alice.Expect("msg"); f["text"] != "budget 5000" {
		t.Fatalf("alice got %v, want only the msg sent within its budget", f)
	}
}

// TestClusterForwardToAnEarlierReleaseHome: during a rolling deploy an
// upgraded instance forwards a gateway's send to a room homed on an
// instance of the earlier release, whose exec call takes exactly two
// fields (tenant, action) and drops any other message of its type. The
// home answers it (here, as that release does, with the action it
// decoded), so the send succeeds instead of waiting out its deadline.
func TestClusterForwardToAnEarlierReleaseHome(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st := openStore(t, srv)
	old, err := cluster.New(cluster.Config{Instance: "old", PubSub: st.PubSub(), LeaseTTL: clusterLeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.Close)
	got := make(chan contract.Action, 1)
	old.HandleCall(msgExec, 2, func(req cluster.Msg) { // the earlier release's handler
		var a contract.Action
		if json.Unmarshal(req.Fields[1], &a) != nil || string(req.Fields[0]) != "t1" {
			return
		}
		got <- a
		raw, _ := json.Marshal(contract.Result{Success: true})
		old.Reply(req, raw)
	})
	homed := make(chan struct{})
	go func() {
		_ = store.RunExclusive(ctx, clock.System, st.Leases(), leasePrefix+DefaultRoom, "old", clusterLeaseTTL, func(hctx context.Context) error {
			unsub, err := old.Subscribe(hctx, roomPrefix+DefaultRoom)
			if err != nil {
				t.Error(err)
				return nil
			}
			defer unsub()
			close(homed)
			<-hctx.Done()
			return nil
		})
	}()
	<-homed
	edge := startInstance(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, "new", clusterLeaseTTL)
	sendCtx, sendCancel := context.WithTimeout(context.Background(), testTimeout)
	defer sendCancel()
	res := edge.p.Execute(sendCtx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hi"})
	if !res.Success {
		t.Fatalf("send forwarded to the earlier release's home = %+v, want success", res)
	}
	if a := <-got; a.Op != contract.OpSend || string(a.ChatID) != DefaultRoom || a.Content != "hi" {
		t.Fatalf("the earlier release's home decoded %+v", a)
	}
}
