package nexscope

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/clock"
	"connector/internal/cluster"
	"connector/internal/cluster/clustertest"
	"connector/internal/redistest"
	"connector/internal/wsconn"
	"connector/platform"
	"connector/platform/platformtest"
	"connector/store"
)

// The room lease's TTL in the cluster tests (a beat is a third of it):
// short where a test waits for a takeover, longer where a home that a busy
// machine starves of CPU must not lose its lease mid-test.
const (
	clusterLeaseTTL = 3 * time.Second
	takeoverTTL     = 1500 * time.Millisecond
)

// instance is one connector instance of a cluster test: a Platform on its
// own listener and its own connection to the shared redis-server.
type instance struct {
	*testRelay
	name string
	st   store.Store
	stop func()
	// lose, when set, loses the messages this instance publishes for which
	// it returns true, as pub/sub may.
	lose atomic.Pointer[func(channel string, msg []byte) bool]
	// again, when set, publishes twice the messages for which it returns
	// true, as go-redis sends a PUBLISH again after a lost reply.
	again atomic.Pointer[func(channel string, msg []byte) bool]
}

// lossyPubSub is an instance's pub/sub, which loses what in.lose says.
type lossyPubSub struct {
	store.PubSub
	in *instance
}

func (p lossyPubSub) Publish(ctx context.Context, channel string, msg []byte) error {
	if lose := p.in.lose.Load(); lose != nil && (*lose)(channel, msg) {
		return nil
	}
	if again := p.in.again.Load(); again != nil && (*again)(channel, msg) {
		if err := p.PubSub.Publish(ctx, channel, msg); err != nil {
			return err
		}
	}
	return p.PubSub.Publish(ctx, channel, msg)
}

// startInstances starts n instances sharing srv, each running Run.
func startInstances(t testing.TB, srv *redistest.Server, cfg Config, n int, ttl time.Duration) []*instance {
	t.Helper()
	out := make([]*instance, n)
	for i := range out {
		out[i] = startInstance(t, srv, cfg, fmt.Sprintf("i%d", i), ttl)
	}
	return out
}

func startInstance(t testing.TB, srv *redistest.Server, cfg Config, name string, ttl time.Duration) *instance {
	t.Helper()
	return startInstanceWith(t, srv, cfg, name, ttl, nil)
}

// startInstanceWith is startInstance with deps adjusted by with (nil: as
// they are).
func startInstanceWith(t testing.TB, srv *redistest.Server, cfg Config, name string, ttl time.Duration, with func(*platform.Deps)) *instance {
	t.Helper()
	return startInstanceOn(t, srv, cfg, name, ttl, nil, with)
}

// startInstanceOn is startInstanceWith whose node and deps run on clk (nil:
// the system's).
func startInstanceOn(t testing.TB, srv *redistest.Server, cfg Config, name string, ttl time.Duration, clk clock.Clock, with func(*platform.Deps)) *instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), RedisPrefix: "nexscope-cluster-test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cfg.Token = testToken
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("instance", name)
	in := &instance{name: name, st: st}
	node, err := cluster.New(cluster.Config{Instance: name, PubSub: lossyPubSub{st.PubSub(), in}, LeaseTTL: ttl, ResendWindow: store.ResendWindow(st), Log: log, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	deps := platform.Deps{
		Log:     log,
		Clock:   clk,
		Cluster: node,
		Store:   st,
		Exclusive: func(ctx context.Context, lease string, run func(context.Context) error) error {
			return store.RunExclusive(ctx, clock.System, st.Leases(), lease, name, ttl, run)
		},
	}
	if with != nil {
		with(&deps)
	}
	p, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for pattern, h := range p.Routes() {
		mux.Handle(pattern, h)
	}
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	tr := &testRelay{p: p, srv: hs, logs: logs, url: "ws" + strings.TrimPrefix(hs.URL, "http"),
		sink: platformtest.NewSink(64)}
	in.testRelay = tr
	in.stop = sync.OnceFunc(tr.run(t, tr.sink)) // a test may stop it before its cleanup does
	t.Cleanup(func() {
		in.stop()
		if t.Failed() {
			t.Logf("instance %s log:\n%s", name, tail(logs.String(), 40))
		}
	})
	return in
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// homeOf waits until one of ins hosts room and returns it.
func homeOf(t testing.TB, ins []*instance, room string) *instance {
	t.Helper()
	var home *instance
	waitFor(t, "a home for room "+room, func() bool {
		for _, in := range ins {
			if in.p.rooms[room].home.Load() {
				home = in
				return true
			}
		}
		return false
	})
	return home
}

// others returns ins without skip.
func others(ins []*instance, skip *instance) []*instance {
	var out []*instance
	for _, in := range ins {
		if in != skip {
			out = append(out, in)
		}
	}
	return out
}

// joinWith connects name and reads presences until one lists want exactly.
func (in *instance) joinWith(t testing.TB, name string, want ...string) *client {
	t.Helper()
	c := in.dialURL(t, "/ws", "name="+name+"&token="+testToken+"&v=1", nil)
	c.Name = name
	c.ExpectPresence(want...)
	return c
}

// TestClusterRoomAcrossInstances runs one room over three instances on a
// real redis-server, with every member on a different instance: presence,
// msg and ack, the bridge to the bot and the gateway's reply, the file lock
// and a file's chunks in order through the flow control, and a leave.
func TestClusterRoomAcrossInstances(t *testing.T) { clusterRoomAcrossInstances(t, "") }

// TestClusterRoomAcrossInstancesStreamed is TestClusterRoomAcrossInstances
// with direct streams between the instances (cluster_addr): what an
// instance sends another's inbox goes over TCP, not pub/sub.
func TestClusterRoomAcrossInstancesStreamed(t *testing.T) {
	clusterRoomAcrossInstances(t, "127.0.0.1:0")
}

func clusterRoomAcrossInstances(t *testing.T, clusterAddr string) {
	srv := redistest.Start(t, redistest.Options{})
	// A send window of 64 KiB makes a 1 MiB file run on credits both ways.
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}, SendQueueBytes: 64 << 10, ClusterAddr: clusterAddr}
	ins := startInstances(t, srv, cfg, 3, clusterLeaseTTL)
	if clusterAddr != "" {
		// Pub/sub loses every member frame: they must take the streams.
		lose := func(channel string, msg []byte) bool {
			t := clustertest.Type(msg)
			return strings.HasPrefix(channel, cluster.Inbox("")) && (t == msgIn || t == msgOut || t == msgJoined)
		}
		for _, in := range ins {
			in.lose.Store(&lose)
		}
	}
	home := homeOf(t, ins, DefaultRoom)
	edges := others(ins, home)

	// Presence across instances: two members on edges, one at the home.
	alice := edges[0].joinWith(t, "alice", "alice", "hermes")
	bob := edges[1].joinWith(t, "bob", "alice", "bob", "hermes")
	alice.ExpectPresence("alice", "bob", "hermes")
	carol := home.joinWith(t, "carol", "alice", "bob", "carol", "hermes")
	alice.ExpectPresence("alice", "bob", "carol", "hermes")
	bob.ExpectPresence("alice", "bob", "carol", "hermes")

	// msg and ack from one edge to another, and to the home.
	alice.SendJSON(msg("m1", "alice", []string{"bob", "carol", "zed"}, "hello across instances"))
	for _, c := range []*client{bob, carol} {
		if m := c.Expect("msg"); m["msgId"] != "m1" || m["text"] != "hello across instances" || m["ts"] == nil {
			t.Fatalf("%s got %v", c.Name, m)
		}
	}
	ack := alice.Expect("ack")
	if fmt.Sprint(ack["delivered"], ack["offline"]) != "[bob carol] [zed]" {
		t.Fatalf("ack %v", ack)
	}

	// A msg to the bot from an edge is bridged by the home.
	bob.SendJSON(msg("m2", "bob", []string{"hermes"}, "question for the agent"))
	d := home.sink.Next(t)
	if d.Tenant != "t1" || d.Event == nil || d.Event.Text != "question for the agent" || d.Event.Source.UserID.Value != "bob" {
		t.Fatalf("delivery %+v", d)
	}
	if ack := bob.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[hermes]" {
		t.Fatalf("ack to bob %v", ack)
	}
	// The gateway answers through an instance that is not the home.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	res := edges[0].p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "the answer", ReplyTo: "m2"})
	if !res.Success || res.MessageID == "" {
		t.Fatalf("send through an edge: %+v", res)
	}
	if m := bob.Expect("msg"); m["text"] != "the answer" || fmt.Sprint(m["to"]) != "[bob]" || m["from"] != "hermes" {
		t.Fatalf("bot reply %v", m)
	}

	// The file lock is the room's: alice (edge 0) holds it, carol (home) is
	// refused; the chunks reach bob (edge 1) in order.
	const size, chunkSize = 1 << 20, 16 << 10
	alice.SendJSON(fileStart("f1", "alice", []string{"bob"}, size))
	if m := bob.Expect("file-start"); m["msgId"] != "f1" {
		t.Fatalf("bob got %v", m)
	}
	carol.SendJSON(fileStart("f2", "carol", []string{"bob"}, 10))
	expectError(carol, CodeTransferBusy)
	got := make(chan []byte, 1)
	go func() { // bob reads while alice sends: the window is smaller than the file
		var all bytes.Buffer
		for all.Len() < size {
			typ, b, err := bob.WS.Read(context.Background())
			if err != nil || typ != websocket.MessageBinary {
				break
			}
			all.Write(b)
		}
		got <- all.Bytes()
	}()
	src := newChunkSource(size, chunkSize)
	var want bytes.Buffer
	for b := src.Next(); b != nil; b = src.Next() {
		want.Write(b)
		alice.SendBinary(b)
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want.Bytes()) {
			t.Fatalf("bob got %d bytes that differ from the %d sent (order or content)", len(b), want.Len())
		}
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for bob's chunks", testTimeout)
	}
	alice.SendJSON(fileEnd("f1", "alice"))
	bob.Expect("file-end")
	if ack := alice.Expect("ack"); ack["msgId"] != "f1" || fmt.Sprint(ack["delivered"]) != "[bob]" {
		t.Fatalf("file ack %v", ack)
	}
	// The lock is free again, for a member of another instance.
	carol.SendJSON(fileStart("f3", "carol", []string{"alice"}, 0))
	alice.Expect("file-start")
	carol.SendJSON(fileEnd("f3", "carol"))
	alice.Expect("file-end")
	carol.Expect("ack")

	// A member that leaves on its edge leaves the room everywhere.
	_ = alice.WS.Close(websocket.StatusNormalClosure, "")
	bob.ExpectPresence("bob", "carol", "hermes")
	carol.ExpectPresence("bob", "carol", "hermes")
}

// TestClusterHomeLost: when the room's home stops (here: its connection to
// Redis is cut, as a crash would), its members elsewhere are closed with
// 1012 within a few beats, another instance hosts the room, and members who
// reconnect meet again there. Before the close, what the home left
// unanswered is answered by the members' own instances: the file in flight
// is undelivered for its sender and incomplete for its recipient, and a msg
// sent after the home stopped is undelivered.
func TestClusterHomeLost(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	ins := startInstances(t, srv, cfg, 3, takeoverTTL)
	home := homeOf(t, ins, DefaultRoom)
	edges := others(ins, home)
	alice := edges[0].joinWith(t, "alice", "alice", "hermes")
	bob := edges[1].joinWith(t, "bob", "alice", "bob", "hermes")
	alice.ExpectPresence("alice", "bob", "hermes")
	alice.SendJSON(fileStart("f1", "alice", []string{"bob"}, 100))
	bob.Expect("file-start")

	_ = home.st.Close() // the home is cut off: no beats, no lease renewal
	lost := time.Now()
	alice.SendJSON(msg("m1", "alice", []string{"bob"}, "sent after the home was cut off"))
	for _, id := range []string{"f1", "m1"} {
		if e := alice.Expect("error"); e["code"] != string(CodeUndelivered) || e["msgId"] != id {
			t.Fatalf("alice got %v, want undelivered for %s", e, id)
		}
	}
	if e := bob.Expect("error"); e["code"] != string(CodeTransferIncomplete) || e["msgId"] != "f1" {
		t.Fatalf("bob got %v, want transfer_incomplete for f1", e)
	}
	expectClose(alice, CloseRoomMoved)
	expectClose(bob, CloseRoomMoved)
	t.Logf("members closed %v after their home was cut off (beat %v)", time.Since(lost).Round(time.Millisecond), takeoverTTL/3)

	next := homeOf(t, edges, DefaultRoom)
	t.Logf("room homed on %s %v after the old home was cut off", next.name, time.Since(lost).Round(time.Millisecond))
	alice = edges[0].joinWith(t, "alice", "alice", "hermes")
	bob = edges[1].joinWith(t, "bob", "alice", "bob", "hermes")
	alice.ExpectPresence("alice", "bob", "hermes")
	// The lock went with the old home: a new transfer starts at once.
	bob.SendJSON(fileStart("f2", "bob", []string{"alice"}, 0))
	alice.Expect("file-start")
}

// TestClusterLostFrameCloses: a frame from the home that skips a sequence
// number (pub/sub dropped one) closes the member with 1011 instead of
// letting it see frames missing or out of order.
func TestClusterLostFrameCloses(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice")
	bob := home.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	edge.p.cluster.mu.Lock()
	var conn string
	for c := range edge.p.cluster.edges {
		conn = c
	}
	edge.p.cluster.mu.Unlock()

	// The next frame alice's edge expects is number 3 (two presences).
	forged := clustertest.Encode(msgOut, home.name, []byte(conn), []byte("4"), []byte("0"), []byte(`{"type":"msg"}`))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := home.st.PubSub().Publish(ctx, cluster.Inbox(edge.name), forged); err != nil {
		t.Fatal(err)
	}
	expectClose(alice, CloseFramesLost)
	bob.ExpectPresence("bob")
}

// TestClusterLostLastFrameClosesAtTheNextBeat: a frame from the home lost
// with no frame after it to show the gap is seen at the home's next beat,
// which names the last frame it sent: the member is closed with 1011 rather
// than left without the msg.
func TestClusterLostLastFrameClosesAtTheNextBeat(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice")
	bob := home.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	lost := make(chan struct{})
	lose := func(channel string, msg []byte) bool {
		if channel != cluster.Inbox(edge.name) || clustertest.Type(msg) != msgOut || !bytes.Contains(msg, []byte(`"msgId":"m1"`)) {
			return false
		}
		close(lost)
		return true
	}
	home.lose.Store(&lose)
	bob.SendJSON(msg("m1", "bob", []string{"alice"}, "lost on the way"))
	select {
	case <-lost:
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the msg's frame to be lost", testTimeout)
	}
	expectClose(alice, CloseFramesLost)
	bob.Expect("ack")
	bob.ExpectPresence("bob")
}

// TestClusterGhostOnAnotherInstance: a name held by a connection on another
// instance than the home that does not answer the probe ping (its network
// dropped) is replaced by the reconnecting client, as on one instance; a
// holder that answers keeps it.
func TestClusterGhostOnAnotherInstance(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	bob := edge.joinWith(t, "bob", "bob")
	bob.DiscardInBackground() // bob reads, so it answers pings

	ghost := edge.dialURL(t, "/ws", "name=alice&token="+testToken+"&v=1", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool { return false }, // its network is gone
	})
	ghost.Name = "alice (ghost)"
	ghost.ExpectPresence("alice", "bob")
	ended := make(chan error, 1)
	go func() {
		for {
			if _, _, err := ghost.WS.Read(context.Background()); err != nil {
				ended <- err
				return
			}
		}
	}()

	// The name is the room's, not the instance's: bob answers the probe,
	// so a second bob through the home is refused.
	dup := home.dialURL(t, "/ws", "name=bob&token="+testToken+"&v=1", nil)
	dup.Name = "bob (second)"
	expectError(dup, CodeNameTaken)
	expectClose(dup, CloseNameTaken)

	// alice reconnects through the home: the ghost on the edge is probed
	// there, does not answer within nameProbeTimeout and is replaced.
	again := home.dialURL(t, "/ws", "name=alice&token="+testToken+"&v=1", nil)
	again.Name = "alice"
	again.ExpectPresence("alice", "bob")
	select {
	case err := <-ended:
		if !endedWith(err, CloseGhostReplaced) {
			t.Fatalf("ghost ended with %v, want %v", err, CloseGhostReplaced)
		}
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the ghost's close", testTimeout)
	}
}

// TestClusterKickedRemoteMemberGetsItsClose: a remote member the home
// closes (here with 4010, as a ghost replaced) gets that close on its edge
// though the goroutine closing it is held between the member's leave and
// the close of its queue (a loaded machine). The home forgot it as it
// left, its queue closed with nothing for the edge, and its next beat,
// without the member, had the edge close it with 1011.
func TestClusterKickedRemoteMemberGetsItsClose(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice")
	var kicked *member
	home.p.cluster.mu.Lock()
	for _, m := range home.p.cluster.remotes {
		kicked = m
	}
	home.p.cluster.mu.Unlock()
	done := func(c <-chan struct{}) func() bool {
		return func() bool {
			select {
			case <-c:
				return true
			default:
				return false
			}
		}
	}
	// member.kick, held between its leave and its queue's close.
	kicked.leave()
	waitFor(t, "the kicked member's reader to end", done(kicked.remote.in.q.Done()))
	waitFor(t, "runRemote to end the member's queue or wait for it", func() bool {
		return done(kicked.q.Done())() || goroutineIn("(*member).runRemote", "[chan receive]")()
	})
	kicked.q.Close(CloseGhostReplaced, false)
	expectClose(alice, CloseGhostReplaced)
}

// FuzzClusterHandle feeds arbitrary messages to an instance's cluster
// handler, as if another instance (or a corrupted Redis) had sent them:
// nothing may panic or hang, and Run still ends cleanly.
func FuzzClusterHandle(f *testing.F) {
	enc := func(typ byte, fields ...string) []byte {
		b := make([][]byte, len(fields))
		for i, s := range fields {
			b[i] = []byte(s)
		}
		return clustertest.Encode(typ, "i9", b...)
	}
	f.Add(enc(msgJoin, DefaultRoom, "alice", "1"))
	f.Add(enc(msgIn, "1", "1", "0", `{"type":"msg","msgId":"m","from":"alice","to":[],"text":"x"}`))
	f.Add(enc(msgIn, "1", "2", "1", "chunk"))
	f.Add(enc(msgOut, "1", "1", "0", `{}`))
	f.Add(enc(msgClose, "1", "4010", "x", "1"))
	f.Add(enc(msgLeave, "1"))
	f.Add(enc(msgWritten, "1", "99999999999"))
	f.Add(enc(msgConsumed, "1", "-5"))
	f.Add(enc(msgEdgeBeat, "1:3:9,2:x:,,3"))
	f.Add(enc(msgHomeBeat, ""))
	f.Add(enc(msgExec, "r1", "t1", "e1", `{"nexscope_budget_ms":30000,"op":"send","chat_id":"default","content":"hi"}`))
	f.Add(enc(msgExec, "r1", "t1", "e1", `{"op":"send","chat_id":"default","content":"hi"}`))
	f.Add(enc(msgProbe, "r2", "7"))
	f.Add(bytes.Join([][]byte{enc(msgCancel, "e1"), enc(msgExec, "r1", "t1", "e1", `{"op":"send","chat_id":"default","content":"hi"}`)}, []byte{0x1e}))
	f.Add(bytes.Join([][]byte{enc(msgClaimed, "e2"), enc(msgHeldBy, "e2", "i8"), enc(msgTaken, "e2")}, []byte{0x1e}))
	f.Add(enc(0, "1", "1"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		st := store.NewMemory(nil)
		defer st.Close()
		node, err := cluster.New(cluster.Config{Instance: "i0", PubSub: st.PubSub(), LeaseTTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer node.Close()
		p, err := New(Config{Token: testToken, Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, platform.Deps{
			Log:       slog.New(slog.DiscardHandler),
			Cluster:   node,
			Exclusive: func(ctx context.Context, _ string, run func(context.Context) error) error { return run(ctx) },
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx, encodingSink(t)) }()
		waitFor(t, "the room homed", func() bool { return p.rooms[DefaultRoom].home.Load() })
		for _, m := range bytes.Split(msg, []byte{0x1e}) {
			node.Dispatch(m)
		}
		cancel()
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Fatalf("Run did not end within %v after the messages", testTimeout)
		}
	})
}

// BenchmarkClusterMsgAck measures msg -> ack round trips when the sender,
// the recipient and the room's home are three instances on one
// redis-server: the msg crosses pub/sub to the home, the ack back, and the
// copy to the recipient's instance. The recipient reads in the background.
func BenchmarkClusterMsgAck(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	ins := make([]*instance, 3)
	for i := range ins {
		ins[i] = startInstance(b, srv, Config{}, fmt.Sprintf("i%d", i), clusterLeaseTTL)
	}
	home := homeOf(b, ins, DefaultRoom)
	edges := others(ins, home)
	var got atomic.Int64
	rcpt := edges[1].joinWith(b, "rcpt", "rcpt")
	drainInBackground(rcpt, &got)
	sender := edges[0].joinWith(b, "sender", "rcpt", "sender")
	frame := []byte(`{"type":"msg","msgId":"01HQX5C9ABCDEFGHJKMNPQRSTV","from":"sender","to":["rcpt"],` +
		`"role":"userAgent","threadId":"t","text":"please refactor auth.ts, write tests first","hopCount":0,"attachments":[]}`)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := sender.WS.Write(ctx, websocket.MessageText, frame); err != nil {
			b.Fatal(err)
		}
		for {
			_, resp, err := sender.WS.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if bytes.HasPrefix(resp, []byte(`{"type":"ack`)) {
				break
			}
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkClusterFile streams a file from a member on one instance to a
// member on another through the room's home on a third (every chunk crosses
// between instances twice, under the send-window credits): on pub/sub, and
// on direct streams.
func BenchmarkClusterFile(b *testing.B) {
	b.Run("pubsub", func(b *testing.B) { benchClusterFile(b, "") })
	b.Run("streams", func(b *testing.B) { benchClusterFile(b, "127.0.0.1:0") })
}

func benchClusterFile(b *testing.B, clusterAddr string) {
	srv := redistest.Start(b, redistest.Options{})
	ins := make([]*instance, 3)
	for i := range ins {
		ins[i] = startInstance(b, srv, Config{ClusterAddr: clusterAddr}, fmt.Sprintf("i%d", i), clusterLeaseTTL)
	}
	home := homeOf(b, ins, DefaultRoom)
	edges := others(ins, home)
	rcpt := edges[1].joinWith(b, "rcpt", "rcpt")
	sender := edges[0].joinWith(b, "sender", "rcpt", "sender")
	ends := make(chan struct{}, 1)
	go func() {
		for {
			typ, rd, err := rcpt.WS.Reader(context.Background())
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				_, _ = io.Copy(io.Discard, rd)
				continue
			}
			if msg, _ := io.ReadAll(rd); isFileEnd(msg) {
				ends <- struct{}{}
			}
		}
	}()
	const size = 8 << 20
	src := newChunkSource(size, 64<<10)
	var chunks [][]byte
	for c := src.Next(); c != nil; c = src.Next() {
		chunks = append(chunks, slices.Clone(c))
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := range b.N {
		id := "f" + strconv.Itoa(i)
		sender.SendJSON(fileStart(id, "sender", []string{"rcpt"}, size))
		for _, c := range chunks {
			if err := sender.WS.Write(context.Background(), websocket.MessageBinary, c); err != nil {
				b.Fatal(err)
			}
		}
		sender.SendJSON(fileEnd(id, "sender"))
		sender.Expect("ack")
		<-ends
	}
}

// TestClusterLostMsgIsAnswered: a msg lost on its way from the member's
// instance to the room's home is seen missing at the edge's next beat; the
// home closes the member with 1011, and the member's instance answers the
// msg undelivered before that close, so it is never lost silently.
func TestClusterLostMsgIsAnswered(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice")
	bob := home.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	lost := make(chan struct{})
	lose := func(channel string, msg []byte) bool {
		if channel != cluster.Inbox(home.name) || clustertest.Type(msg) != msgIn || !bytes.Contains(msg, []byte(`"msgId":"m1"`)) {
			return false
		}
		close(lost)
		return true
	}
	edge.lose.Store(&lose)
	alice.SendJSON(msg("m1", "alice", []string{"bob"}, "lost on the way"))
	select {
	case <-lost:
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the msg's frame to be lost", testTimeout)
	}
	if e := alice.Expect("error"); e["code"] != string(CodeUndelivered) || e["msgId"] != "m1" {
		t.Fatalf("alice got %v, want undelivered for m1", e)
	}
	expectClose(alice, CloseFramesLost)
	bob.ExpectPresence("bob")
}

// TestClusterMessagesFromAFormerHomeAreDropped: a member's frames and its
// close count only from the home that took its join. A former home of the
// room (one that woke from a pause past its lease, still believing it was
// home) closing the member with 1012, or sending it a frame with the number
// the member's link expects next, changes nothing: the member stays and
// gets the home's next frame.
func TestClusterMessagesFromAFormerHomeAreDropped(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice")
	bob := home.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	edge.p.cluster.mu.Lock()
	var conn string
	for c := range edge.p.cluster.edges {
		conn = c
	}
	edge.p.cluster.mu.Unlock()

	// The next frame alice's edge expects is number 3 (two presences).
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, forged := range [][]byte{
		clustertest.Encode(msgOut, "i9", []byte(conn), []byte("3"), []byte("0"),
			[]byte(`{"type":"msg","msgId":"stale","from":"bob","to":["alice"],"text":"from a former home"}`)),
		clustertest.Encode(msgClose, "i9", []byte(conn), []byte(strconv.Itoa(int(CloseRoomMoved.Code))), []byte(CloseRoomMoved.Reason), []byte("0")),
	} {
		if err := home.st.PubSub().Publish(ctx, cluster.Inbox(edge.name), forged); err != nil {
			t.Fatal(err)
		}
	}
	bob.SendJSON(msg("m1", "bob", []string{"alice"}, "from the home"))
	if m := alice.Expect("msg"); m["msgId"] != "m1" {
		t.Fatalf("alice got %v, want m1 from the room's home", m)
	}
	bob.Expect("ack")
}

// formerHome starts two instances sharing a room bound to t1: i0 its home,
// with bob joined there, and i1. Their leases are long, so i1 does not
// take the room over and no renewal or tenure timer fires during a test;
// jump(ttl) on the returned clock makes i0 a home that woke from a pause
// past its lease (its clock is past its tenure; the tenure's timer, which
// resigns the room, has not fired yet).
func formerHome(t *testing.T) (former, edge *instance, paused *jumpClock, bob *client) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Backend: store.BackendRedis, RedisURL: srv.URL(), RedisPrefix: "nexscope-cluster-test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	leasing := func(name string, clk clock.Clock) func(*platform.Deps) {
		return func(d *platform.Deps) {
			d.Exclusive = func(ctx context.Context, lease string, run func(context.Context) error) error {
				return store.RunExclusive(ctx, clk, st.Leases(), lease, name, formerHomeTTL, run)
			}
		}
	}
	paused = &jumpClock{Clock: clock.System}
	former = startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, leasing("i0", paused))
	homeOf(t, []*instance{former}, DefaultRoom)
	edge = startInstanceWith(t, srv, cfg, "i1", clusterLeaseTTL, leasing("i1", clock.System))
	bob = former.joinWith(t, "bob", "bob", "hermes")
	return former, edge, paused, bob
}

// formerHomeTTL is the room leases' TTL in formerHome.
const formerHomeTTL = 2 * time.Minute

// TestClusterFormerHomeExecutesNoAction: a room's home that woke from a
// pause past its lease neither executes a gateway's send forwarded to it
// nor one a gateway gives it directly: no member gets the bot's msg, and
// without a home holding the lease the send is unavailable.
func TestClusterFormerHomeExecutesNoAction(t *testing.T) {
	former, edge, paused, bob := formerHome(t)
	send := func(in *instance, text string) contract.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 3*former.p.cluster.node.Beat())
		defer cancel()
		return in.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: text})
	}
	if res := send(edge, "while home"); !res.Success {
		t.Fatalf("send through the edge while i0 holds the lease: %+v", res)
	}
	if m := bob.Expect("msg"); m["text"] != "while home" {
		t.Fatalf("bob got %v", m)
	}

	paused.jump(formerHomeTTL)
	for _, in := range []*instance{edge, former} {
		if res := send(in, "after the pause through "+in.name); res.Success || res.Code != contract.CodeUnavailable {
			t.Fatalf("send through %s after i0's lease lapsed: %+v, want unavailable", in.name, res)
		}
	}
	bob.SendJSON(map[string]any{"type": "ping"})
	if m := bob.Next(); m["type"] != "pong" {
		t.Fatalf("bob got %v, want only the pong (the former home sent nothing)", m)
	}
}

// TestClusterFormerHomeTakesNoJoin: a room's home that woke from a pause
// past its lease takes no member any more, neither one of its own sockets
// nor one another instance asks it to take: without a home holding the
// lease both are refused with 1013, and bob sees no one join.
func TestClusterFormerHomeTakesNoJoin(t *testing.T) {
	former, edge, paused, bob := formerHome(t)
	paused.jump(formerHomeTTL)
	done := make(chan struct{})
	for i, in := range []*instance{edge, former} {
		c := in.dialURL(t, "/ws", fmt.Sprintf("name=carol%d&token=%s&v=1", i, testToken), nil)
		go func() {
			defer func() { done <- struct{}{} }()
			// The edge refuses only after joinBeats beats and a ghost probe's
			// bound (about 13 s here): the deadline adds them to testTimeout.
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout+nameProbeTimeout+joinBeats*clusterLeaseTTL)
			defer cancel()
			_, _, err := c.WS.Read(ctx)
			if !endedWith(err, CloseNoHome) {
				t.Errorf("carol%d joining through %s after i0's lease lapsed: %v, want closed %v", i, in.name, err, CloseNoHome)
			}
		}()
	}
	<-done
	<-done
	bob.SendJSON(map[string]any{"type": "ping"})
	if m := bob.Next(); m["type"] != "pong" {
		t.Fatalf("bob got %v, want only the pong (no one joined)", m)
	}
}

// TestClusterGhostReplacedThroughAnEdge: a client reconnecting through an
// instance that is not the room's home, to take back its name from a ghost
// (here on the home), waits for the home's probe of the ghost (up to
// nameProbeTimeout): it is admitted, not refused with 1013 because the
// decision took longer than the edge's join timeout (6 beats, 3 s at this
// lease TTL), which left the home with a member nobody held.
func TestClusterGhostReplacedThroughAnEdge(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{}, 2, takeoverTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	ghost := home.dialURL(t, "/ws", "name=alice&token="+testToken+"&v=1", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool { return false }, // its network is gone
	})
	ghost.Name = "alice (ghost)"
	ghost.ExpectPresence("alice")
	ended := make(chan error, 1)
	go func() {
		for {
			if _, _, err := ghost.WS.Read(context.Background()); err != nil {
				ended <- err
				return
			}
		}
	}()

	again := edge.joinWith(t, "alice", "alice")
	select {
	case err := <-ended:
		if !endedWith(err, CloseGhostReplaced) {
			t.Fatalf("ghost ended with %v, want %v", err, CloseGhostReplaced)
		}
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the ghost's close", testTimeout)
	}
	bob := home.joinWith(t, "bob", "alice", "bob")
	again.ExpectPresence("alice", "bob")
	bob.SendJSON(msg("m1", "bob", []string{"alice"}, "back?"))
	if m := again.Expect("msg"); m["msgId"] != "m1" {
		t.Fatalf("alice got %v, want m1", m)
	}
}

// TestClusterMemberTheHomeDroppedIsClosed: a member its home removed
// while its edge still holds it (the home took the edge's beat for stale,
// or the edge for gone, and a remote member's removal tells the edge
// nothing) is closed with 1011 once the edge's next beat lists it, and a
// msg it had sent is answered undelivered: it is not left forwarding
// frames the home drops, never answered. The edge keeps hearing from the
// home meanwhile (a member of a room homed on the edge is on the home), so
// it never takes the home for gone.
func TestClusterMemberTheHomeDroppedIsClosed(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	home := startInstance(t, srv, Config{}, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	edge := startInstance(t, srv, Config{Rooms: []Room{{Name: "r2"}}}, "i1", clusterLeaseTTL)
	waitFor(t, "i1 the home of r2", func() bool { return edge.p.room("r2").home.Load() })
	if err := home.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "r2", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	dave := home.dialURL(t, "/ws/r2", "name=dave&token="+testToken+"&v=1", nil)
	dave.Name = "dave"
	dave.ExpectPresence("dave") // homed on i1: i0 beats to i1 for dave
	dave.DiscardInBackground()

	carol := home.joinWith(t, "carol", "carol")
	alice := edge.joinWith(t, "alice", "alice", "carol")
	carol.ExpectPresence("alice", "carol")
	var dropped *member
	home.p.cluster.mu.Lock()
	for key, m := range home.p.cluster.remotes {
		if strings.HasPrefix(key, edge.name+"/") {
			dropped = m
		}
	}
	home.p.cluster.mu.Unlock()
	dropped.kick(wsconn.Drop) // as a stale beat or the edge taken for gone do
	carol.ExpectPresence("carol")

	alice.SendJSON(msg("m1", "alice", []string{"carol"}, "anyone?"))
	// m1 is answered undelivered, unless the close came before it was
	// forwarded (then it is not forwarded at all).
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for {
		_, b, err := alice.WS.Read(ctx)
		if err != nil {
			if !endedWith(err, CloseFramesLost) {
				t.Fatalf("alice ended with %v, want %v", err, CloseFramesLost)
			}
			break
		}
		if !strings.Contains(string(b), `"code":"undelivered"`) || !strings.Contains(string(b), `"msgId":"m1"`) {
			t.Fatalf("alice got %s, want only undelivered for m1 before the close", b)
		}
	}
}

// TestClusterMemberFramesSentTwiceAreTakenOnce: a member's frame whose
// PUBLISH arrives twice (go-redis sends it again when the reply to the
// first was lost), either way between its edge and its home, is taken
// once: the member is not closed with 1011 as if frames were lost, and
// nobody gets the msg twice.
func TestClusterMemberFramesSentTwiceAreTakenOnce(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := home.joinWith(t, "alice", "alice")
	bob := edge.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	twice := func(_ string, msg []byte) bool { t := clustertest.Type(msg); return t == msgIn || t == msgOut }
	edge.again.Store(&twice)
	home.again.Store(&twice)
	bob.SendJSON(msg("m1", "bob", []string{"alice"}, "to alice"))
	if a := bob.Expect("ack"); a["msgId"] != "m1" {
		t.Fatalf("bob got %v, want the ack of m1", a)
	}
	alice.SendJSON(msg("m2", "alice", []string{"bob"}, "to bob"))
	if m := bob.Expect("msg"); m["msgId"] != "m2" {
		t.Fatalf("bob got %v, want m2", m)
	}
	for _, c := range []*client{alice, bob} {
		c.SendJSON(map[string]any{"type": "ping"})
	}
	if m := alice.Expect("msg"); m["msgId"] != "m1" {
		t.Fatalf("alice got %v, want m1", m)
	}
	for _, c := range []*client{alice, bob} {
		for m := c.Next(); m["type"] != "pong"; m = c.Next() {
			if m["type"] != "ack" {
				t.Fatalf("%s got %v before its pong, want nothing more", c.Name, m)
			}
		}
	}
}

// TestClusterJoinAfterItsLeaveJoinsNobody: a remote member's join that
// reaches the room's home after its leave (the edge sent it again, or
// go-redis its PUBLISH, as the socket left) joins nobody: no ghost of the
// member takes its name until the edge's next beat.
func TestClusterJoinAfterItsLeaveJoinsNobody(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{}, 1, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	alice := home.joinWith(t, "alice", "alice")
	cl := home.p.cluster
	cl.node.Dispatch(clustertest.Encode(msgLeave, "i9", []byte("7")))
	cl.node.Dispatch(clustertest.Encode(msgJoin, "i9", []byte(DefaultRoom), []byte("carol"), []byte("7")))
	cl.mu.Lock()
	ghost := cl.joining["i9/7"] || cl.remotes["i9/7"] != nil
	cl.mu.Unlock()
	if ghost {
		t.Fatal("the join that came after its leave is taken: carol's ghost joins")
	}
	alice.SendJSON(map[string]any{"type": "ping"})
	if m := alice.Next(); m["type"] != "pong" {
		t.Fatalf("alice got %v, want her pong and no presence listing carol", m)
	}
}

// TestClusterEdgeRestartedUnderItsNameJoins: an edge restarted under its
// fixed name (store.instance) numbers its sockets afresh, not from 1 again:
// its new socket's join is not taken for a socket of its earlier run that
// the home remembers leaving (leaveHere) and ignored until the edge gives
// up with 1013.
func TestClusterEdgeRestartedUnderItsNameJoins(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	home := startInstance(t, srv, Config{}, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	for conn := range 4 { // the earlier run's first sockets left as they joined
		home.p.cluster.node.Dispatch(clustertest.Encode(msgLeave, "i1", []byte(strconv.Itoa(conn+1))))
	}
	edge := startInstanceWith(t, srv, Config{}, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	edge.joinWith(t, "bob", "bob")
}

// TestClusterEdgeBeatSentAgainLateRemovesNoOne: an edge's beat that
// reaches the home again late (go-redis sends a PUBLISH again when its
// reply was lost, up to its resend window later) does not remove the
// members that joined through that edge after it was first sent: the home
// takes a beat older than one it took as stale.
func TestClusterEdgeBeatSentAgainLateRemovesNoOne(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	home := startInstance(t, srv, Config{}, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	edge := startInstanceWith(t, srv, Config{}, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	bob := edge.joinWith(t, "bob", "bob")
	beats := make(chan []byte, 64)
	record := func(channel string, msg []byte) bool {
		if channel == cluster.Inbox(home.name) && clustertest.Type(msg) == msgEdgeBeat {
			select {
			case beats <- msg:
			default:
			}
		}
		return false
	}
	edge.lose.Store(&record)
	next := func() []byte {
		t.Helper()
		select {
		case msg := <-beats:
			return msg
		case <-time.After(testTimeout):
			t.Fatal("no beat from the edge")
			return nil
		}
	}
	stale := next() // lists bob alone
	carol := edge.joinWith(t, "carol", "bob", "carol")
	bob.ExpectPresence("bob", "carol")
	for range 3 { // carol joined over a beat ago
		next()
	}
	home.p.cluster.node.Dispatch(stale)
	bob.SendJSON(map[string]any{"type": "ping"})
	if m := bob.Next(); m["type"] != "pong" {
		t.Fatalf("bob got %v, want his pong: the beat sent again late removed carol", m)
	}
	carol.SendJSON(map[string]any{"type": "ping"})
	if m := carol.Next(); m["type"] != "pong" {
		t.Fatalf("carol got %v, want her pong", m)
	}
}

// TestClusterEdgeRestartedWithItsClockSetBackIsHeard: an edge restarted
// under its fixed name (store.instance) with its clock set back numbers
// its beats below its earlier run's: the home takes them all the same,
// not ignores them as beats sent again late for the store's resend window
// (minutes), so a leave lost on the way is repaired at the edge's next
// beats.
func TestClusterEdgeRestartedWithItsClockSetBackIsHeard(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	home := startInstance(t, srv, Config{}, "i0", clusterLeaseTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	alice := home.joinWith(t, "alice", "alice")
	// The earlier run's last beat, its clock an hour ahead of the new one's.
	earlier := appendBeat(nil, "", 0, time.Now().Add(time.Hour).UnixMilli())
	home.p.cluster.node.Dispatch(clustertest.Encode(msgEdgeBeat, "i1", earlier))
	edge := startInstanceWith(t, srv, Config{}, "i1", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	bob := edge.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	edge.joinWith(t, "carol", "alice", "bob", "carol") // the edge keeps beating to the home
	alice.ExpectPresence("alice", "bob", "carol")
	noLeave := func(_ string, msg []byte) bool { return clustertest.Type(msg) == msgLeave }
	edge.lose.Store(&noLeave)
	_ = bob.WS.Close(websocket.StatusNormalClosure, "")
	alice.ExpectPresence("alice", "carol") // bob's leave lost: the edge's next beats remove him
}

// TestClusterBeatsDoNotWaitForTheRelays: the node's beat, whose relay part
// waits on the store (a slow Redis), held up does not hold up nexscope's
// beats: its members' edges keep hearing from the home, which they would
// otherwise count gone after three beats (closing the members with 1012).
func TestClusterBeatsDoNotWaitForTheRelays(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom}}}
	home := startInstance(t, srv, cfg, "i0", takeoverTTL)
	homeOf(t, []*instance{home}, DefaultRoom)
	edge := startInstanceWith(t, srv, cfg, "i1", takeoverTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, _ func(context.Context) error) error {
			<-ctx.Done() // never the home
			return nil
		}
	})
	alice := edge.joinWith(t, "alice", "alice")
	bob := home.joinWith(t, "bob", "alice", "bob")
	alice.ExpectPresence("alice", "bob")
	release, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stop := home.p.cluster.node.OnBeat(func() { // the relay's part, waiting on a slow store
		once.Do(func() { close(held) })
		<-release
	})
	t.Cleanup(func() { close(release); stop() })
	waitFor(t, "the home's node beat to be held", func() bool {
		select {
		case <-held:
			return true
		default:
			return false
		}
	})
	var beats atomic.Int32
	count := func(_ string, msg []byte) bool {
		if clustertest.Type(msg) == msgHomeBeat {
			beats.Add(1)
		}
		return false
	}
	home.lose.Store(&count)
	waitFor(t, "the home to beat to alice's edge while its node's beat is held", func() bool {
		return beats.Load() > cluster.LostBeats+1
	})
	alice.SendJSON(msg("m1", "alice", []string{"bob"}, "hi"))
	if m := bob.Expect("msg"); m["text"] != "hi" {
		t.Fatalf("bob got %v, want alice's msg", m)
	}
	if a := alice.Expect("ack"); a["msgId"] != "m1" {
		t.Fatalf("alice got %v, want the ack of m1", a)
	}
}

// TestClusterHomeAgainForgetsItsEarlierTenure: what the bridge remembered
// goes with the home's tenure (docs/nexscope.md, "When the home dies"): an
// instance that is the room's home again addresses a gateway's send by
// nothing its earlier tenure saw (alice's message there made her the
// room's last inbound; the send would go to her alone, not carol).
func TestClusterHomeAgainForgetsItsEarlierTenure(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}
	tenures := make(chan context.CancelFunc, 4)
	in := startInstanceWith(t, srv, cfg, "i0", clusterLeaseTTL, func(d *platform.Deps) {
		d.Exclusive = func(ctx context.Context, _ string, run func(context.Context) error) error {
			for ctx.Err() == nil { // a tenure the test ends, then the next
				hctx, cancel := context.WithCancel(ctx)
				tenures <- cancel
				_ = run(hctx)
				cancel()
			}
			return nil
		}
	})
	homeOf(t, []*instance{in}, DefaultRoom)
	alice := in.joinWith(t, "alice", "alice", "hermes")
	alice.SendJSON(msg("a1", "alice", []string{"hermes"}, "hi bot"))
	if a := alice.Expect("ack"); a["msgId"] != "a1" {
		t.Fatalf("alice got %v, want the ack of a1", a)
	}
	if d := in.sink.Next(t); d.Event == nil || d.Event.MessageID != "a1" {
		t.Fatalf("delivery %+v, want alice's a1", d)
	}
	(<-tenures)() // the lease lost: the room resigns, and the next tenure begins
	expectClose(alice, CloseRoomMoved)
	<-tenures
	homeOf(t, []*instance{in}, DefaultRoom)
	alice = in.joinWith(t, "alice", "alice", "hermes")
	carol := in.joinWith(t, "carol", "alice", "carol", "hermes")
	alice.ExpectPresence("alice", "carol", "hermes")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if res := in.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSend, ChatID: DefaultRoom, Content: "hello"}); !res.Success {
		t.Fatalf("send = %+v", res)
	}
	if m := carol.Expect("msg"); m["text"] != "hello" {
		t.Fatalf("carol got %v, want the send to everyone online", m)
	}
}

// A room bound to a tenant floods its home over pub/sub within the
// tenant's share of the outbox (a quarter of it), not the share of no
// tenant: with the edge's publishing held and a member of a room of t1
// sending until its edge waits for room, the edge's outbox still says yes
// to t1's and t2's relay frames (Roomy), and a message of no tenant (a
// beat, a room of none's frame) is still queued. Before, the room's frames
// went as no tenant's and took the bulk share of no tenant, shared by
// every room.
func TestClusterTenantRoomFloodTakesItsTenantsShare(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	alice := edge.joinWith(t, "alice", "alice", "hermes")
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the instances stop: their nodes publish what is queued
	hold := func(string, []byte) bool { <-release; return false }
	edge.lose.Store(&hold)
	parked := func() bool { // alice's edge waits in SendWait for room
		buf := make([]byte, 4<<20)
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "cluster.(*Node).SendWait(") && strings.Contains(g, "[select") {
				return true
			}
		}
		return false
	}
	for sent := 0; !parked(); sent += 64 {
		if sent > 2*cluster.OutboxSize {
			t.Fatalf("alice sent %d frames and her edge never waited for room in its outbox", sent)
		}
		for range 64 {
			alice.SendJSON(map[string]any{"type": "ping"})
		}
	}
	node := edge.p.cluster.node
	for _, tenant := range []string{"t1", "t2"} {
		if !node.Roomy(tenant) {
			t.Fatalf("the edge's outbox has no room for %s's relay frames after t1's room flooded it", tenant)
		}
	}
	if !node.Send("elsewhere", 'z') {
		t.Fatal("a message of no tenant refused after t1's room flooded the outbox")
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	if !node.SendWait(ctx, "", "elsewhere", 'z') {
		t.Fatal("a room of no tenant's frame waited for room after t1's room flooded the outbox: the flood took the bulk share of no tenant")
	}
	open()
}

// A join of a room bound to a tenant goes to its home within the tenant's
// share of the outbox, as the room's frames do: with the edge's publishing
// held and the bulk share of no tenant full (rooms of none flooding), bob's
// join of t1's room is queued, and his edge waits for the home's answer.
// Before, the join went as no tenant's and waited behind the floods of
// every room of none.
func TestClusterJoinOfATenantRoomTakesItsTenantsShare(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ins := startInstances(t, srv, Config{Rooms: []Room{{Name: DefaultRoom, Tenant: "t1"}}}, 2, clusterLeaseTTL)
	home := homeOf(t, ins, DefaultRoom)
	edge := others(ins, home)[0]
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the instances stop: their nodes publish what is queued
	hold := func(string, []byte) bool { <-release; return false }
	edge.lose.Store(&hold)
	// selecting reports whether a goroutine waits in a select of fn (for
	// joinRemote: in a select of its own, or of SendWait's queueing bob's join).
	selecting := func(fn string) bool {
		buf := make([]byte, 4<<20)
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if lines := strings.SplitN(g, "\n", 3); len(lines) == 3 && strings.Contains(lines[0], "[select") && strings.Contains(lines[1], fn) {
				return true
			}
		}
		return false
	}
	ctx, cancel := context.WithCancel(t.Context())
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for edge.p.cluster.node.SendWait(ctx, "", "elsewhere", 'z') { // rooms of no tenant flooding
		}
	}()
	t.Cleanup(func() { cancel(); <-flooded })
	deadline := time.Now().Add(testTimeout)
	for !selecting("cluster.(*Node).queueWait(") {
		if time.Now().After(deadline) {
			t.Fatal("the flood of no tenant never waited for room in the edge's outbox")
		}
		runtime.Gosched()
	}
	_ = edge.dialURL(t, "/ws", "name=bob&token="+testToken+"&v=1", nil)
	for !selecting("nexscope.(*fleet).joinRemote(") {
		if time.Now().After(deadline) {
			t.Fatal("bob's edge never waited for the home's answer to his join: it waits to queue it, behind the rooms of no tenant")
		}
		runtime.Gosched()
	}
	open()
}
