package nexscope

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/platform/platformtest"
)

func TestHandshakeRefusals(t *testing.T) {
	tr := startRelay(t, Config{Rooms: []Room{{Name: "small", MaxUsers: 1}}})
	tr.join(t, "", "bob").DiscardInBackground() // alive: answers the name probe
	tr.join(t, "small", "solo")

	cases := []struct {
		name, path, query string
		errCode           ErrorCode // "" = no error frame
		close             Close
	}{
		{"missing token", "/ws", "name=alice&v=1", "", CloseUnauthorized},
		{"wrong token", "/ws", "name=alice&token=nope&v=1", "", CloseUnauthorized},
		{"token prefix", "/ws", "name=alice&token=" + testToken[:5], "", CloseUnauthorized},
		{"wrong token, unknown room", "/ws/nosuch", "name=alice&token=x", "", CloseUnauthorized},
		{"future version", "/ws", "name=alice&token=" + testToken + "&v=2", CodeVersionMismatch, CloseVersionMismatch},
		{"non-numeric version", "/ws", "name=alice&token=" + testToken + "&v=one", CodeVersionMismatch, CloseVersionMismatch},
		{"missing name", "/ws", "token=" + testToken, CodeInvalidName, CloseInvalidName},
		{"name with space", "/ws", "name=a%20b&token=" + testToken, CodeInvalidName, CloseInvalidName},
		{"name too long", "/ws", "name=" + strings.Repeat("a", 33) + "&token=" + testToken, CodeInvalidName, CloseInvalidName},
		{"non-ascii name", "/ws", "name=%C3%BC&token=" + testToken, CodeInvalidName, CloseInvalidName},
		{"name taken", "/ws", "name=bob&token=" + testToken, CodeNameTaken, CloseNameTaken},
		{"room full", "/ws/small", "name=other&token=" + testToken, CodeRoomFull, CloseRoomFull},
		{"unknown room", "/ws/nosuch", "name=alice&token=" + testToken, CodeUnknownRoom, CloseUnknownRoom},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tr.dialURL(t, tc.path, tc.query, nil)
			if tc.errCode != "" {
				expectError(c, tc.errCode)
			}
			expectClose(c, tc.close)
		})
	}
}

func TestHandshakeAccepts(t *testing.T) {
	tr := startRelay(t, Config{})
	// v missing means 1; v=1 explicit; the longest legal name.
	for _, q := range []string{"name=a_b-C9", "name=x&v=1", "name=" + strings.Repeat("z", 32) + "&v=01"} {
		c := tr.dialURL(t, "/ws", q+"&token="+testToken, nil)
		c.Expect("presence")
	}
}

func TestNameTakenMessage(t *testing.T) {
	tr := startRelay(t, Config{})
	tr.join(t, "", "bob").DiscardInBackground()
	c := tr.dialURL(t, "/ws", "name=bob&token="+testToken, nil)
	e := expectError(c, CodeNameTaken)
	if e["message"] != `username "bob" already in room` {
		t.Fatalf("message = %q", e["message"])
	}
}

func TestPresenceJoinLeaveCrash(t *testing.T) {
	tr := startRelay(t, Config{})
	alice := tr.join(t, "", "alice")
	bob := tr.join(t, "", "bob")
	alice.ExpectPresence("alice", "bob")

	carol := tr.join(t, "", "carol")
	alice.ExpectPresence("alice", "bob", "carol")
	bob.ExpectPresence("alice", "bob", "carol")

	// Explicit close.
	_ = bob.WS.Close(websocket.StatusNormalClosure, "bye")
	alice.ExpectPresence("alice", "carol")
	carol.ExpectPresence("alice", "carol")

	// Crash: the TCP connection drops without a close frame.
	_ = carol.WS.CloseNow()
	alice.ExpectPresence("alice")

	// The name is free again.
	tr.join(t, "", "bob")
	alice.ExpectPresence("alice", "bob")
}

func TestPresenceIsSortedAndRoomsAreSeparate(t *testing.T) {
	tr := startRelay(t, Config{Rooms: []Room{{Name: "ops"}}})
	zed := tr.join(t, "", "zed")
	tr.join(t, "", "Amy")
	zed.ExpectPresence("Amy", "zed") // byte order: uppercase first
	ops := tr.join(t, "ops", "zed")  // same name, other room
	tr.join(t, "ops", "bo")
	ops.ExpectPresence("bo", "zed")
}

func TestShutdownClosesMembersGoingAway(t *testing.T) {
	tr := newRelay(t, Config{})
	stop := tr.run(t, platformtest.NewSink(1))
	c := tr.join(t, "", "alice")
	// Keep reading while Run shuts down, as a live client does, so the
	// close handshake completes.
	ended := make(chan error, 1)
	go func() {
		_, _, err := c.WS.Read(context.Background())
		ended <- err
	}()
	stop()
	select {
	case err := <-ended:
		if !endedWith(err, CloseGoingAway) {
			t.Fatalf("alice ended with %v, want %v", err, CloseGoingAway)
		}
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for shutdown to close alice", testTimeout)
	}
	if tr.p.Status().Ready {
		t.Fatal("ready after Run returned")
	}
	// New connections are refused once Run has returned.
	_, resp, err := websocket.Dial(context.Background(), tr.url+"/ws?name=bob&token="+testToken, nil)
	if err == nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("dial after shutdown: err %v, resp %v; want HTTP 503", err, resp)
	}
}

// A client whose network dropped without a close reconnects under its name:
// the old connection does not answer the relay's probe ping within
// nameProbeTimeout, so it is closed with 4010 and the newcomer is admitted
// at once instead of getting name_taken until the heartbeat notices.
func TestGhostReplacedByReconnect(t *testing.T) {
	tr := startRelay(t, Config{})
	bob := tr.join(t, "", "bob")
	pings := make(chan struct{}, 8)
	ghost := tr.joinOpts(t, "", "alice", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			pings <- struct{}{}
			return false // its network is gone: no pong
		},
	})
	bob.ExpectPresence("alice", "bob")
	ended := make(chan error, 1)
	go func() {
		for {
			if _, _, err := ghost.WS.Read(context.Background()); err != nil {
				ended <- err
				return
			}
		}
	}()

	again := tr.dialURL(t, "/ws", "name=alice&token="+testToken+"&v=1", nil)
	again.Name = "alice"
	select {
	case <-pings:
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the probe ping on the old connection", testTimeout)
	}
	tr.clock.Advance(nameProbeTimeout - time.Millisecond)
	select {
	case err := <-ended:
		t.Fatalf("ghost closed before the probe timed out: %v", err)
	default:
	}
	tr.clock.Advance(time.Millisecond)
	again.ExpectPresence("alice", "bob")
	select {
	case err := <-ended:
		if !endedWith(err, CloseGhostReplaced) {
			t.Fatalf("ghost ended with %v, want %v", err, CloseGhostReplaced)
		}
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the ghost's close", testTimeout)
	}
	bob.ExpectPresence("bob")
	bob.ExpectPresence("alice", "bob")
	if !strings.Contains(tr.logs.String(), "ghost") {
		t.Fatal("replacement not logged")
	}
	// The newcomer is a full member.
	again.SendJSON(msg("m1", "alice", []string{"bob"}, "back"))
	again.Expect("ack")
	bob.Expect("msg")
}

// A holder that answers the probe ping keeps its name; the newcomer gets
// name_taken (4009) without any clock advance.
func TestLiveHolderKeepsName(t *testing.T) {
	tr := startRelay(t, Config{})
	pings := make(chan struct{}, 8)
	alice := tr.joinOpts(t, "", "alice", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			pings <- struct{}{}
			return true
		},
	})
	frames := make(chan []byte, 8)
	go func() {
		defer close(frames)
		for {
			_, b, err := alice.WS.Read(context.Background())
			if err != nil {
				return
			}
			frames <- b
		}
	}()
	c := tr.dialURL(t, "/ws", "name=alice&token="+testToken, nil)
	expectError(c, CodeNameTaken)
	expectClose(c, CloseNameTaken)
	select {
	case <-pings:
	default:
		t.Fatal("the holder was not probed")
	}
	alice.SendText(`{"type":"ping"}`)
	select {
	case b, ok := <-frames:
		if !ok {
			t.Fatal("the live holder was disconnected")
		}
		if m, err := decodeFrame(b); err != nil || m["type"] != "pong" {
			t.Fatalf("holder got %s", b)
		}
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the holder's pong", testTimeout)
	}
}

// A holder whose reader waits for room in a slow recipient's queue (its
// file chunks are held back) cannot read the pong of a probe, but it is
// demonstrably alive: a newcomer asking for its name gets name_taken, and
// the holder is not replaced as a ghost.
func TestBackpressuredHolderKeepsName(t *testing.T) {
	const window = 4096
	tr := startRelay(t, Config{SendQueueBytes: window})
	tr.join(t, "", "bob") // never reads again
	pings := make(chan struct{}, 8)
	alice := tr.joinOpts(t, "", "alice", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			pings <- struct{}{}
			return true
		},
	})
	alice.DiscardInBackground()
	r := tr.p.room(DefaultRoom)
	r.mu.Lock()
	holder := r.members["alice"]
	r.mu.Unlock()
	const size = 96 << 20 // far more than the sockets' buffers, under max_file
	alice.SendJSON(fileStart("F1", "alice", []string{"bob"}, size))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		chunk := make([]byte, 64<<10)
		for sent := 0; sent < size; sent += len(chunk) {
			if alice.WS.Write(ctx, websocket.MessageBinary, chunk) != nil {
				return
			}
		}
	}()
	waitFor(t, "alice's reader held back by bob's full window", holder.alive.Held)

	c := tr.dialURL(t, "/ws", "name=alice&token="+testToken, nil)
	c.Name = "alice"
	answered := make(chan map[string]any, 1)
	go func() { answered <- c.Next() }()
	var got map[string]any
	select {
	case got = <-answered:
	case <-pings: // the relay probes alice: let the probe time out
		waitFor(t, "alice's reader held back again", holder.alive.Held)
		tr.clock.Advance(nameProbeTimeout)
		got = <-answered
	}
	if got["type"] != "error" || got["code"] != string(CodeNameTaken) {
		t.Fatalf("newcomer got %v, want name_taken: the backpressured holder was replaced", got)
	}
}
