package nexscope

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A client that stops answering WebSocket pings is closed with 4010 at the
// tick after its second missed pong, and leaves the room.
func TestHeartbeatTimeout4010(t *testing.T) {
	tr := startRelay(t, Config{})
	pings := make(chan struct{}, 8)
	mute := tr.joinOpts(t, "", "mute", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			pings <- struct{}{}
			return false // swallow: no pong
		},
	})

	// Reading is what processes pings on the client, so read in the
	// background; the frames it gets are checked at the end.
	ended := make(chan error, 1)
	go func() {
		for {
			if _, _, err := mute.WS.Read(context.Background()); err != nil {
				ended <- err
				return
			}
		}
	}()
	awaitPing := func() {
		t.Helper()
		select {
		case <-pings:
		case <-time.After(testTimeout):
			t.Fatal("no ping reached the client")
		}
	}
	tr.advance(t, DefaultHeartbeatInterval) // ping 1
	awaitPing()
	tr.advance(t, DefaultHeartbeatInterval) // miss 1, ping 2
	awaitPing()
	select {
	case err := <-ended:
		t.Fatalf("closed after one miss: %v", err)
	default:
	}
	tr.advance(t, DefaultHeartbeatInterval) // miss 2: terminate
	select {
	case err := <-ended:
		if !endedWith(err, CloseHeartbeatTimeout) {
			t.Fatalf("mute ended with %v, want %v", err, CloseHeartbeatTimeout)
		}
	case <-time.After(testTimeout):
		t.Fatalf("timed out after %v waiting for the relay to close a member that missed two pongs", testTimeout)
	}
	// A member that joins now sees it gone.
	tr.join(t, "", "watcher")
	if tr.member("mute") != nil {
		t.Fatal("mute still in the room")
	}
	if !strings.Contains(tr.logs.String(), "heartbeat_timeout") {
		t.Fatal("heartbeat timeout not logged")
	}
}

// A client whose library answers pings stays connected across many ticks.
func TestHeartbeatAnsweredKeepsConnection(t *testing.T) {
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
		for {
			_, b, err := alice.WS.Read(context.Background())
			if err != nil {
				close(frames)
				return
			}
			frames <- b
		}
	}()
	for range 5 {
		tr.advance(t, DefaultHeartbeatInterval)
		select {
		case <-pings:
		case <-time.After(testTimeout):
			t.Fatal("no ping")
		}
		// The pong was written before this ping frame, so by the time the
		// relay answers the app ping it has read the pong.
		alice.SendText(`{"type":"ping"}`)
		select {
		case b, ok := <-frames:
			if !ok {
				t.Fatal("connection closed although every ping was answered")
			}
			if m, err := decodeFrame(b); err != nil || m["type"] != "pong" {
				t.Fatalf("got %s", b)
			}
		case <-time.After(testTimeout):
			t.Fatal("no pong")
		}
	}
}

// A sender whose reader waits for room in a slow recipient's queue
// (backpressure) does not read its socket, so it cannot take the pongs of
// the heartbeat; it is alive all the same (it is sending), and with a
// transfer_timeout of several heartbeat intervals it is not closed with
// 4010 while its chunks wait. The clock moves only while alice's reader is
// held back, as it is nearly all the time in a real slow transfer, and
// alice answers the ping only at the end: in a real one its pong waits
// unread behind the sockets' buffers of chunks, here whatever their size.
func TestHeartbeatSparesBackpressuredSender(t *testing.T) {
	const window = 4096
	tr := startRelay(t, Config{SendQueueBytes: window, TransferTimeout: time.Hour, WriteTimeout: time.Hour})
	tr.join(t, "", "bob") // never reads again
	recipient := tr.member("bob")
	// bob, the slow recipient, reads nothing, so the relay's pings cannot
	// even reach it: its own heartbeat is not under test and would close it
	// (which frees alice) at a tick in random order with alice's.
	recipient.alive.Stop()
	pings, answer := make(chan struct{}, 8), make(chan struct{})
	defer close(answer)
	alice := tr.joinOpts(t, "", "alice", &websocket.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			pings <- struct{}{}
			<-answer
			return true
		},
	})
	alice.DiscardInBackground()
	sender := tr.member("alice")
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
	held := func() bool { return sender.alive.Held() && recipient.q.Queued() >= window }
	waitFor(t, "alice's reader held back by bob's full window", held)

	tr.clock.Advance(DefaultHeartbeatInterval) // ping 1
	select {
	case <-pings:
	case <-time.After(testTimeout):
		t.Fatal("no ping reached alice")
	}
	for range 2 { // its pong waits unread behind the chunks
		waitFor(t, "alice's reader held back again", held)
		tr.clock.Advance(DefaultHeartbeatInterval)
	}
	if sender.left.Load() || tr.member("alice") != sender {
		t.Fatalf("a sender held back by backpressure left the room:\n%s", tr.logs.String())
	}
	if strings.Contains(tr.logs.String(), "heartbeat_timeout") {
		t.Fatalf("a heartbeat timed out:\n%s", tr.logs.String())
	}
}
