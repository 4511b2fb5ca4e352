package nexscope

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/media"
	"connector/media/mediatest"
	"connector/platform"
	"connector/platform/platformtest"
)

// A gateway's send_media that waits for the room's file-transfer lock is
// declined when the room is bound to another tenant meanwhile: the
// authorization Execute checked no longer holds, and the file must not reach
// the members of a room its tenant lost.
func TestSendMediaDeclinedWhenRoomRebindsWhileWaiting(t *testing.T) {
	tr := newRelay(t, boundConfig())
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test"})
	if err != nil {
		t.Fatal(err)
	}
	tr.p.deps.Media = store
	tr.sink = platformtest.NewSink(64)
	t.Cleanup(tr.run(t, tr.sink))
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.Expect("presence")
	info, err := store.Put("t1", mediatest.Content(7, 1000), "application/pdf", "t1-secret.pdf")
	if err != nil {
		t.Fatal(err)
	}

	alice.SendJSON(fileStart("F1", "alice", []string{"bob"}, 10))
	bob.Expect("file-start") // alice holds the room's lock
	results := make(chan contract.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		results <- tr.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: "lab",
			MediaKind: "document", SourceURL: store.URL(info.ID), Metadata: contract.Metadata{UserID: "bob"}})
	}()
	waitFor(t, "send_media waiting for the room's lock", func() bool {
		return strings.Contains(tr.logs.String(), "waiting for the room's file-transfer lock")
	})
	if err := tr.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	bob.ExpectPresence("alice", "bob", "hermes") // t2's bot
	alice.SendBinary(make([]byte, 10))
	alice.SendJSON(fileEnd("F1", "alice"))
	if typ, b := bob.Read(); len(b) != 10 || typ.String() != "MessageBinary" {
		t.Fatalf("bob got %s, want alice's chunk", b)
	}
	bob.Expect("file-end")
	got, _ := json.Marshal(<-results)
	want, _ := json.Marshal(contract.Declined("nexscope"))
	if string(got) != string(want) {
		t.Fatalf("send_media after the rebind = %s, want %s", got, want)
	}
	bob.SendJSON(map[string]any{"type": "ping"})
	if f := bob.Next(); f["type"] != "pong" {
		t.Fatalf("bob got %v, want nothing from t1's bot", f)
	}
}

// A gateway's send_media of t1 as first created (platform.WithCreation)
// that check 8 approved and that then waits for the room's file-transfer
// lock is declined when t1 is deleted and created again under its id
// meanwhile: the room is the new t1's, and the earlier t1's file must not
// reach it. Before, only a forwarded action was held to its creation, and
// the earlier t1's file went out as the new t1's bot.
func TestSendMediaOfAnEarlierTenantWhileWaiting(t *testing.T) {
	tr := newRelay(t, boundConfig())
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test"})
	if err != nil {
		t.Fatal(err)
	}
	tr.p.deps.Media = store
	tr.sink = platformtest.NewSink(64)
	t.Cleanup(tr.run(t, tr.sink))
	first := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tr.setTenants(map[string]time.Time{"t1": first})
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.Expect("presence")
	info, err := store.Put("t1", mediatest.Content(7, 1000), "application/pdf", "earlier.pdf")
	if err != nil {
		t.Fatal(err)
	}

	alice.SendJSON(fileStart("F1", "alice", []string{"bob"}, 10))
	bob.Expect("file-start") // alice holds the room's lock
	results := make(chan contract.Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(platform.WithCreation(context.Background(), first), testTimeout)
		defer cancel()
		results <- tr.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: "lab",
			MediaKind: "document", SourceURL: store.URL(info.ID), Metadata: contract.Metadata{UserID: "bob"}})
	}()
	waitFor(t, "send_media waiting for the room's lock", func() bool {
		return strings.Contains(tr.logs.String(), "waiting for the room's file-transfer lock")
	})
	tr.setTenants(map[string]time.Time{"t1": first.Add(time.Minute)}) // deleted and created again
	alice.SendBinary(make([]byte, 10))
	alice.SendJSON(fileEnd("F1", "alice"))
	if typ, b := bob.Read(); len(b) != 10 || typ.String() != "MessageBinary" {
		t.Fatalf("bob got %s, want alice's chunk", b)
	}
	bob.Expect("file-end")
	var res contract.Result
	select {
	case res = <-results:
	case <-time.After(testTimeout):
		t.Fatal("the send_media never answered")
	}
	if res != contract.Declined(platformName) {
		t.Fatalf("the earlier t1's send_media = %+v, want declined", res)
	}
	bob.SendJSON(map[string]any{"type": "ping"})
	if f := bob.Next(); f["type"] != "pong" {
		t.Fatalf("bob got %v: the earlier t1's file reached the new t1's room", f)
	}
}

// A member that held the bot's name before its room was bound keeps it
// (package doc): it still gets the room's broadcasts like any member, and
// when it leaves, the bot stays in the presence list.
func TestMemberHoldingTheBotsNameAfterBind(t *testing.T) {
	tr := startRelay(t, boundConfig())
	alice := tr.join(t, "plain", "alice")
	hermes := tr.join(t, "plain", "hermes")
	alice.ExpectPresence("alice", "hermes")
	if err := tr.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "plain", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	alice.ExpectPresence("alice", "hermes")
	hermes.ExpectPresence("alice", "hermes")
	alice.SendJSON(msg("m1", "alice", []string{}, "hello all"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[hermes]" {
		t.Fatalf("broadcast ack %v, want the member hermes delivered", ack)
	}
	if m := hermes.Expect("msg"); m["msgId"] != "m1" {
		t.Fatalf("hermes got %v", m)
	}
	_ = hermes.WS.CloseNow()
	alice.ExpectPresence("alice", "hermes") // the bot now
}

// A file to the bot belongs to the tenant bound at its file-start: its
// re-host is stored under that tenant. When the room is bound to another
// tenant before the file-end, no tenant gets the file: the new one must not
// get a URL into the old one's store (nor the file, addressed to the old
// one's bot), and the old one lost the room. The re-host is discarded at
// the rebind, the members still get the file, and the sender's ack lists the
// bot offline, so the loss is not silent.
func TestFileToBotAcrossRebindIsNotBridged(t *testing.T) {
	tr := newRelay(t, boundConfig())
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test"})
	if err != nil {
		t.Fatal(err)
	}
	tr.p.deps.Media = store
	tr.sink = platformtest.NewSink(64)
	t.Cleanup(tr.run(t, tr.sink))
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.Expect("presence")

	alice.SendJSON(fileStart("F1", "alice", []string{"hermes", "bob"}, 10))
	bob.Expect("file-start")
	alice.SendBinary([]byte("0123"))
	if _, b := bob.Read(); string(b) != "0123" {
		t.Fatalf("bob got %q, want alice's first chunk", b)
	}
	if err := tr.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	bob.ExpectPresence("alice", "bob", "hermes") // t2's bot
	alice.Expect("presence")
	if t1 := store.Stats().Bytes; t1 != 0 {
		t.Fatalf("t1's store holds %d bytes of the re-host after the rebind", t1)
	}
	alice.SendBinary([]byte("456789"))
	alice.SendJSON(fileEnd("F1", "alice"))
	if _, b := bob.Read(); string(b) != "456789" {
		t.Fatalf("bob got %q, want alice's second chunk", b)
	}
	bob.Expect("file-end")
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[bob]" || fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("ack %v, want bob delivered and the bot offline", ack)
	}
	if t1 := store.Stats().Bytes; t1 != 0 {
		t.Fatalf("t1's store holds %d bytes of a file its room lost", t1)
	}
	// The next delivery is the next message to t2's bot, not the file.
	alice.SendJSON(msg("after", "alice", []string{"hermes"}, "still there?"))
	alice.Expect("ack")
	if d := tr.sink.Next(t); d.Tenant != "t2" || d.Event == nil || d.Event.MessageID != "after" || len(d.Event.MediaURLs) != 0 {
		t.Fatalf("delivery to %s %+v, want t2's msg after", d.Tenant, d.Event)
	}
}

// A gateway's send_media whose context ends while its chunks wait for a
// recipient that reads nothing returns then (unavailable), and the room's
// lock is released at once with transfer_incomplete to the recipient: it
// does not hold the lock until the recipient reads or TransferTimeout.
func TestSendMediaEndsWithItsContextWhileHeldBack(t *testing.T) {
	const window, size = 64 << 10, 24 << 20
	cfg := boundConfig()
	cfg.SendQueueBytes = window
	tr := newRelay(t, cfg)
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test"})
	if err != nil {
		t.Fatal(err)
	}
	tr.p.deps.Media = store
	tr.sink = platformtest.NewSink(64)
	t.Cleanup(tr.run(t, tr.sink))
	bob := tr.join(t, "lab", "bob") // reads nothing more until the end
	info, err := store.Put("t1", mediatest.Content(7, size), "application/octet-stream", "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make(chan contract.Result, 1)
	go func() {
		results <- tr.p.Execute(ctx, "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: "lab",
			MediaKind: "document", SourceURL: store.URL(info.ID), Metadata: contract.Metadata{UserID: "bob"}})
	}()
	r := tr.p.rooms["lab"]
	// Held back for good: bob's socket takes no more (his writer waits in a
	// write) and send_media waits for room in his window.
	waitFor(t, "send_media held back by bob's full window and socket", func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		return strings.Contains(stacks, "wsconn.(*Queue).WaitSpace") && strings.Contains(stacks, "poll.(*pollDesc).waitWrite")
	})
	cancel()
	select {
	case res := <-results:
		if res.Success || res.Code != contract.CodeUnavailable {
			t.Fatalf("send_media after its context ended = %+v, want unavailable", res)
		}
	case <-time.After(testTimeout):
		t.Fatalf("send_media still running %v after its context ended", testTimeout)
	}
	r.mu.Lock()
	held := r.transfer != nil
	r.mu.Unlock()
	if held {
		t.Fatal("the room's lock is still held after send_media returned")
	}
	for { // bob reads on: what was queued for him, then the abort
		typ, b := bob.Read()
		if typ.String() != "MessageText" {
			continue
		}
		if f, _ := decodeFrame(b); f["type"] == "error" {
			if f["code"] != string(CodeTransferIncomplete) {
				t.Fatalf("bob got %v, want transfer_incomplete", f)
			}
			return
		}
	}
}

// The room's lock is never held across disk I/O (docs/locks.md): a file to
// the bot whose re-host waits for a slow media store does not stall the
// other members of its room, and it is re-hosted once the store answers.
func TestRehostOnASlowDiskDoesNotStallTheRoom(t *testing.T) {
	tr, store, dir := relayWithMedia(t)
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.Expect("presence")

	release := slowDisk(t, store, dir)
	alice.SendJSON(fileStart("F1", "alice", []string{"hermes"}, 4))
	waitFor(t, "alice's re-host waiting for the store", stacksHold("media.(*Store).Begin"))
	expectNotStalled(bob, alice)

	release()
	alice.SendBinary([]byte("0123"))
	alice.SendJSON(fileEnd("F1", "alice"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[hermes]" {
		t.Fatalf("ack %v, want the bot delivered", ack)
	}
	if d := tr.sink.Next(t); d.Tenant != "t1" || d.Event == nil || len(d.Event.MediaURLs) != 1 {
		t.Fatalf("delivery to %s %+v, want t1's re-hosted file", d.Tenant, d.Event)
	}
}

// Nor is the room's lock held while a re-host is discarded (its file
// removed): a rebind during a file to the bot, on a slow disk, does not
// stall the room's members either.
func TestRehostDiscardOnASlowDiskDoesNotStallTheRoom(t *testing.T) {
	tr, store, dir := relayWithMedia(t)
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.Expect("presence")
	alice.SendJSON(fileStart("F1", "alice", []string{"hermes"}, 4))
	alice.SendBinary([]byte("01"))
	waitFor(t, "the re-host holding alice's first chunk", func() bool {
		return store.Stats().Bytes == 2
	})

	release := slowDisk(t, store, dir)
	bound := make(chan error, 1)
	go func() { bound <- tr.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t2"}}) }()
	waitFor(t, "the rebind discarding the re-host on the slow disk", stacksHold("media.(*Upload).Abort"))
	bob.Expect("presence") // t2's bot
	alice.Expect("presence")
	expectNotStalled(bob, alice)

	release()
	if err := <-bound; err != nil {
		t.Fatal(err)
	}
	if t1 := store.Stats().Bytes; t1 != 10 { // the slow disk's object
		t.Fatalf("t1's store holds %d bytes, want the re-host discarded", t1)
	}
}

// relayWithMedia is a relay bound as boundConfig with a media store in dir,
// run with a sink.
func relayWithMedia(t *testing.T) (tr *testRelay, store *media.Store, dir string) {
	tr = newRelay(t, boundConfig())
	dir = t.TempDir()
	store, err := media.New(media.Config{Dir: dir, PublicURL: "http://connector.test"})
	if err != nil {
		t.Fatal(err)
	}
	tr.p.deps.Media = store
	tr.sink = platformtest.NewSink(64)
	t.Cleanup(tr.run(t, tr.sink))
	return tr, store, dir
}

// slowDisk makes store, in dir, wait until release as a slow disk would: a
// read of an object of t1 (10 bytes) whose file is a fifo opens it under
// the store's lock, so every call taking that lock (Begin, an Abort's
// removal) waits until the fifo gets a writer.
func slowDisk(t *testing.T, store *media.Store, dir string) (release func()) {
	info, err := store.Put("t1", mediatest.Content(7, 10), "application/pdf", "other.pdf")
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, info.ID+".media")
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		obj, err := store.Open("t1", info.ID)
		if err == nil {
			err = obj.Close()
		}
		opened <- err
	}()
	waitFor(t, "the store's Open waiting for the fifo under the store's lock", stacksHold("media.(*Store).Open", "os.Open"))
	return func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // the disk answers
		if err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		if err := <-opened; err != nil {
			t.Fatal(err)
		}
	}
}

// stacksHold reports whether the goroutines' stacks contain every one of
// subs.
func stacksHold(subs ...string) func() bool {
	return func() bool {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, s := range subs {
			if !strings.Contains(stacks, s) {
				return false
			}
		}
		return true
	}
}

// expectNotStalled checks that from's msg reaches to and is acked.
func expectNotStalled(from, to *client) {
	from.T.Helper()
	from.SendJSON(msg("m1", from.Name, []string{to.Name}, "not stalled"))
	if m := to.Expect("msg"); m["msgId"] != "m1" {
		from.T.Fatalf("%s got %v, want %s's msg", to.Name, m, from.Name)
	}
	if ack := from.Expect("ack"); fmt.Sprint(ack["delivered"]) != "["+to.Name+"]" {
		from.T.Fatalf("%s's ack %v, want %s delivered", from.Name, ack, to.Name)
	}
}

// A room bound to a tenant deleted and created again under its id within
// one apply of the registry (SetTenants gives the new creation, Bind the
// same bindings) forgets what the bridge remembered for the earlier
// tenant: the earlier tenant's open prompt is not answered to the new one,
// and a send without reply_to does not answer the earlier one's inbound.
func TestTenantCreatedAgainForgetsBridgeMemory(t *testing.T) {
	tr := startRelay(t, boundConfig())
	first := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	bindings := []platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}
	tr.setTenants(map[string]time.Time{"t1": first})
	if err := tr.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.ExpectPresence("alice", "bob", "hermes")
	var a contract.Action
	if err := json.Unmarshal([]byte(`{"op":"prompt","chat_id":"lab","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"old.1","metadata":{"user_id":"alice"},
		"options":[{"id":"once","label":"Approve the earlier t1's deploy"},{"id":"deny","label":"Deny"}]}`), &a); err != nil {
		t.Fatal(err)
	}
	if res := tr.p.Execute(context.Background(), "t1", &a); !res.Success {
		t.Fatalf("prompt = %+v", res)
	}
	alice.Expect("msg")
	bob.SendJSON(msg("m1", "bob", []string{"hermes"}, "for the earlier t1"))
	bob.Expect("ack")
	if d := tr.sink.Next(t); d.Tenant != "t1" {
		t.Fatalf("delivery to %s, want t1", d.Tenant)
	}

	tr.setTenants(map[string]time.Time{"t1": first.Add(time.Hour)}) // deleted and created again
	if err := tr.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	if res := tr.p.Execute(context.Background(), "t1", &contract.Action{Op: contract.OpSend, ChatID: "lab", Content: "hi"}); !res.Success {
		t.Fatalf("send = %+v", res)
	}
	if m := alice.Expect("msg"); fmt.Sprint(m["to"]) != "[]" {
		t.Fatalf("the new t1's send %v, want a broadcast, not a reply to bob's message to the earlier t1", m)
	}
	alice.SendJSON(msg("m2", "alice", []string{"hermes"}, "/once"))
	alice.Expect("ack")
	d := tr.sink.Next(t)
	if d.Tenant != "t1" || d.Event == nil || d.Event.PromptResponse != nil || d.Event.Text != "/once" {
		t.Fatalf("delivery to %s: %+v, want a plain command, not an answer to the earlier t1's prompt", d.Tenant, d.Event)
	}
}

// A room's tenant deleted and created again under its id, as the vault
// knows it before the apply reaches nexscope (the relay, told first,
// serves the new tenant's gateways in that window), is the new creation
// at once: the earlier tenant's open prompt is not answered to the new
// one, and the new one's send does not answer the earlier one's inbound.
func TestTenantCreatedAgainIsForgottenBeforeSetTenants(t *testing.T) {
	tr := startRelay(t, boundConfig())
	first := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tr.setTenants(map[string]time.Time{"t1": first})
	if err := tr.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.ExpectPresence("alice", "bob", "hermes")
	var a contract.Action
	if err := json.Unmarshal([]byte(`{"op":"prompt","chat_id":"lab","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"old.1","metadata":{"user_id":"alice"},
		"options":[{"id":"once","label":"Approve the earlier t1's deploy"},{"id":"deny","label":"Deny"}]}`), &a); err != nil {
		t.Fatal(err)
	}
	if res := tr.p.Execute(context.Background(), "t1", &a); !res.Success {
		t.Fatalf("prompt = %+v", res)
	}
	alice.Expect("msg")
	bob.SendJSON(msg("m1", "bob", []string{"hermes"}, "for the earlier t1"))
	bob.Expect("ack")
	tr.sink.Next(t)

	tr.recreate(map[string]time.Time{"t1": first.Add(time.Hour)}) // deleted and created again; SetTenants not yet
	if res := tr.p.Execute(context.Background(), "t1", &contract.Action{Op: contract.OpSend, ChatID: "lab", Content: "hi"}); !res.Success {
		t.Fatalf("send = %+v", res)
	}
	if m := bob.Expect("msg"); fmt.Sprint(m["to"]) != "[]" {
		t.Fatalf("the new t1's send %v, want a broadcast, not a reply to bob's message to the earlier t1", m)
	}
	alice.Expect("msg")
	alice.SendJSON(msg("m2", "alice", []string{"hermes"}, "/once"))
	alice.Expect("ack")
	if d := tr.sink.Next(t); d.Event == nil || d.Event.PromptResponse != nil || d.Event.Text != "/once" {
		t.Fatalf("delivery %+v, want a plain command, not an answer to the earlier t1's prompt", d.Event)
	}
}

// A member's file to the bot, started while the room's tenant was the
// earlier t1, that ends once t1 was deleted and created again (as the
// vault knows it before the apply reaches nexscope) is delivered as routed
// under the earlier t1's creation, which the relay drops: the new t1 never
// gets the earlier one's file.
func TestFileToBotRoutedUnderItsCreation(t *testing.T) {
	tr := startRelay(t, boundConfig())
	first := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tr.setTenants(map[string]time.Time{"t1": first})
	if err := tr.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	alice := tr.join(t, "lab", "alice")
	bob := tr.join(t, "lab", "bob")
	alice.Expect("presence")
	alice.SendJSON(fileStart("F1", "alice", []string{"hermes", "bob"}, 5))
	bob.Expect("file-start") // routed
	alice.SendBinary([]byte("01234"))
	tr.recreate(map[string]time.Time{"t1": first.Add(time.Hour)}) // deleted and created again; SetTenants not yet
	alice.SendJSON(fileEnd("F1", "alice"))
	alice.Expect("ack")
	if d := tr.sink.Next(t); !d.Created.Equal(first) {
		t.Fatalf("the file delivered as routed under t1's creation %v, want %v (the earlier t1's, bound at its file-start)", d.Created, first)
	}
}

// The bot's file transfer (send_media) under way when the room's tenure
// here ends (a shutdown, as a lost lease) is aborted as a member's is: a
// recipient gets transfer_incomplete before its close, and the gateway a
// failure, not a success for a file nobody got whole.
func TestBotFileAbortedWhenTheRoomResigns(t *testing.T) {
	tr := newRelay(t, Config{Rooms: []Room{{Name: "lab", Tenant: "t1"}}, SendQueueBytes: 64 << 10})
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test", MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	tr.p.deps.Media = store
	stop := tr.run(t, platformtest.NewSink(64))
	alice := tr.join(t, "lab", "alice")
	info, err := store.Put("t1", mediatest.Content(7, 32<<20), "application/pdf", "big.pdf")
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan contract.Result, 1)
	go func() {
		results <- tr.p.Execute(context.Background(), "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: "lab",
			MediaKind: "document", SourceURL: store.URL(info.ID), Metadata: contract.Metadata{UserID: "alice"}})
	}()
	// alice does not read: the transfer waits for room in her queue.
	waitFor(t, "send_media waiting for room in alice's queue", stacksHold("nexscope.(*Platform).sendMedia", "wsconn.(*Queue).WaitSpace"))
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	waitFor(t, "the shutdown begun", func() bool { return !tr.p.Status().Ready })
	for {
		typ, b := alice.Read()
		if typ == websocket.MessageBinary || strings.Contains(string(b), `"presence"`) || strings.Contains(string(b), `"file-start"`) {
			continue
		}
		if !strings.Contains(string(b), `"transfer_incomplete"`) {
			t.Fatalf("alice got %s, want transfer_incomplete for the bot's file", b)
		}
		break
	}
	expectClose(alice, CloseGoingAway)
	if res := <-results; res.Success {
		t.Fatalf("send_media = %+v, want a failure: alice never got the whole file", res)
	}
	<-stopped
}

// A room bound (in the YAML) to a tenant that is not configured any more
// (an API tenant deleted) bridges nothing, and the sender's ack lists the
// bot offline: the relay would drop the message as an unknown tenant's.
func TestRoomOfADeletedTenantListsTheBotOffline(t *testing.T) {
	tr := startRelay(t, boundConfig())
	tr.setTenants(map[string]time.Time{"t2": {}}) // t1 deleted
	alice := tr.join(t, "lab", "alice")
	alice.SendJSON(msg("m1", "alice", []string{"hermes"}, "hello"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("ack %v, want hermes offline", ack)
	}
	tr.setTenants(map[string]time.Time{"t1": {}, "t2": {}}) // t1 configured again
	alice.SendJSON(msg("m2", "alice", []string{"hermes"}, "hello again"))
	if ack := alice.Expect("ack"); fmt.Sprint(ack["delivered"]) != "[hermes]" {
		t.Fatalf("ack %v, want hermes delivered", ack)
	}
	if d := tr.sink.Next(t); d.Event == nil || d.Event.MessageID != "m2" {
		t.Fatalf("delivery %+v, want m2 only", d.Event)
	}
}

// gateSink refuses its first delivery once release is closed, telling
// entered when it has it; it passes the others to deliveries.
type gateSink struct {
	entered, release chan struct{}
	deliveries       chan platform.Delivery
	calls            atomic.Int32
}

func (s *gateSink) Deliver(_ context.Context, d platform.Delivery) error {
	if s.calls.Add(1) == 1 {
		close(s.entered)
		<-s.release
		return errors.New("refused")
	}
	s.deliveries <- d
	return nil
}

// A delivery the sink refuses after the room's tenant was created again
// meanwhile does not undo into the new tenant's memory: the earlier
// tenant's prompt it answered stays closed for the new tenant.
func TestRefusedDeliveryAcrossRecreationRestoresNothing(t *testing.T) {
	tr := newRelay(t, boundConfig())
	sink := &gateSink{entered: make(chan struct{}), release: make(chan struct{}), deliveries: make(chan platform.Delivery, 4)}
	t.Cleanup(tr.run(t, sink))
	first := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	bindings := []platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}
	tr.setTenants(map[string]time.Time{"t1": first})
	if err := tr.p.Bind(bindings); err != nil {
		t.Fatal(err)
	}
	alice := tr.join(t, "lab", "alice")
	var a contract.Action
	if err := json.Unmarshal([]byte(`{"op":"prompt","chat_id":"lab","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"old.1","metadata":{"user_id":"alice"},
		"options":[{"id":"once","label":"Approve"},{"id":"deny","label":"Deny"}]}`), &a); err != nil {
		t.Fatal(err)
	}
	if res := tr.p.Execute(context.Background(), "t1", &a); !res.Success {
		t.Fatalf("prompt = %+v", res)
	}
	alice.Expect("msg")
	alice.SendJSON(msg("m1", "alice", []string{"hermes"}, "/once"))
	<-sink.entered // the earlier t1's prompt answered, its delivery under way
	tr.setTenants(map[string]time.Time{"t1": first.Add(time.Hour)})
	close(sink.release)
	if ack := alice.Expect("ack"); fmt.Sprint(ack["offline"]) != "[hermes]" {
		t.Fatalf("ack %v, want hermes offline", ack)
	}
	alice.SendJSON(msg("m2", "alice", []string{"hermes"}, "/once"))
	alice.Expect("ack")
	if d := <-sink.deliveries; d.Event == nil || d.Event.PromptResponse != nil {
		t.Fatalf("the new t1 got %+v, want a plain command, not an answer to the earlier t1's prompt", d.Event)
	}
}

// A room bound to a stored tenant keeps what the bridge remembered when the
// YAML declares that tenant (its creation reads zero: the same tenant, as
// the relay keeps its state) and when the stored tenant shows again (the
// YAML's declaration dropped, or a SIGHUP reload whose Bind failed and was
// rolled back): the open prompt is still answered. A room bound while the
// tenant was declared keeps its memory when the stored tenant shows.
// Another creation after that forgets it.
func TestTenantDeclaredInTheYAMLKeepsBridgeMemory(t *testing.T) {
	tr := startRelay(t, boundConfig())
	first := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	bindings := []platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}
	apply := func(created time.Time) {
		t.Helper()
		tr.setTenants(map[string]time.Time{"t1": created})
		if err := tr.p.Bind(bindings); err != nil {
			t.Fatal(err)
		}
	}
	prompt := func(id string) {
		t.Helper()
		var a contract.Action
		if err := json.Unmarshal([]byte(`{"op":"prompt","chat_id":"lab","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"`+id+`","metadata":{"user_id":"alice"},"options":[{"id":"once","label":"Approve"},{"id":"deny","label":"Deny"}]}`), &a); err != nil {
			t.Fatal(err)
		}
		if res := tr.p.Execute(context.Background(), "t1", &a); !res.Success {
			t.Fatalf("prompt = %+v", res)
		}
	}
	apply(first)
	alice := tr.join(t, "lab", "alice")
	prompt("p1")
	alice.Expect("msg")

	apply(time.Time{}) // declared in the YAML now
	apply(first)       // and stored again (declaration dropped, or a failed reload rolled back)
	alice.SendJSON(msg("m1", "alice", []string{"hermes"}, "/once"))
	alice.Expect("ack")
	if d := tr.sink.Next(t); d.Event == nil || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "p1" {
		t.Fatalf("delivery %+v, want the answer to p1: the same tenant's prompt", d.Event)
	}

	apply(time.Time{})
	tr.setTenants(map[string]time.Time{}) // a reload that drops the room's binding meanwhile
	if err := tr.p.Bind(nil); err != nil {
		t.Fatal(err)
	}
	alice.ExpectPresence("alice")
	apply(time.Time{}) // bound again while declared: it knows no creation
	alice.ExpectPresence("alice", "hermes")
	prompt("p2")
	alice.Expect("msg")
	apply(first) // stored: the same tenant
	alice.SendJSON(msg("m2", "alice", []string{"hermes"}, "/once"))
	alice.Expect("ack")
	if d := tr.sink.Next(t); d.Event == nil || d.Event.PromptResponse == nil || d.Event.PromptResponse.PromptID != "p2" {
		t.Fatalf("delivery %+v, want the answer to p2: the declared tenant's prompt", d.Event)
	}

	prompt("p3")
	alice.Expect("msg")
	apply(time.Time{})
	apply(first.Add(time.Hour)) // created again while the YAML declared it
	alice.SendJSON(msg("m3", "alice", []string{"hermes"}, "/once"))
	alice.Expect("ack")
	if d := tr.sink.Next(t); d.Event == nil || d.Event.PromptResponse != nil || d.Event.Text != "/once" {
		t.Fatalf("delivery %+v, want a plain command, not an answer to the earlier t1's prompt", d.Event)
	}
}

// hookMetrics runs onDrop (once) when reason is first counted as a drop;
// it counts nothing.
type hookMetrics struct {
	platform.NopMetrics
	reason string
	onDrop func()
	once   atomic.Bool
}

func (h *hookMetrics) Dropped(_, reason string) {
	if reason == h.reason && !h.once.Swap(true) {
		h.onDrop()
	}
}

// A prompt whose tenant is deleted and created again under its id while
// the prompt is being sent does not open for the new tenant: the earlier
// tenant's options are not answered to the new one. The re-creation is
// forced into the op: the prompt's frame overflows its recipient's send
// queue, and the slow consumer's kick, which runs once the room's lock is
// released, counts a drop whose hook re-creates the tenant.
func TestPromptTenantCreatedAgainWhileSent(t *testing.T) {
	tr := newRelay(t, Config{Rooms: []Room{{Name: "lab", Tenant: "t1"}}, SendQueueBytes: 1, MaxPayload: 4096, MaxText: 8192})
	first := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tr.setTenants(map[string]time.Time{"t1": first})
	tr.p.deps.Metrics = &hookMetrics{reason: "slow_consumer", onDrop: func() {
		tr.setTenants(map[string]time.Time{"t1": first.Add(time.Hour)}) // deleted and created again
	}}
	sink := platformtest.NewSink(64)
	t.Cleanup(tr.run(t, sink))
	alice := tr.join(t, "lab", "alice")
	tr.join(t, "lab", "slow")
	alice.ExpectPresence("alice", "hermes", "slow")
	var a contract.Action
	if err := json.Unmarshal([]byte(`{"op":"prompt","chat_id":"lab","content":"`+strings.Repeat("x", 5000)+`",
		"prompt_kind":"approval","prompt_id":"old.1","metadata":{"user_id":"slow"},
		"options":[{"id":"once","label":"Approve the earlier t1's deploy"},{"id":"deny","label":"Deny"}]}`), &a); err != nil {
		t.Fatal(err)
	}
	if res := tr.p.Execute(context.Background(), "t1", &a); !res.Success {
		t.Fatalf("prompt = %+v", res)
	}
	alice.ExpectPresence("alice", "hermes") // slow kicked: the re-creation ran
	alice.SendJSON(msg("m1", "alice", []string{"hermes"}, "/once"))
	alice.Expect("ack")
	d := sink.Next(t)
	if d.Tenant != "t1" || d.Event == nil || d.Event.PromptResponse != nil || d.Event.Text != "/once" {
		t.Fatalf("delivery to %s: %+v, want a plain command, not an answer to the earlier t1's prompt", d.Tenant, d.Event)
	}
}

// The bot's file transfer (send_media) whose every recipient leaves
// before its file-end fails with unavailable, as one to nobody online
// does: no member got the file whole (a member's ack lists them offline).
func TestBotFileWhoseRecipientsAllLeftFails(t *testing.T) {
	tr := newRelay(t, Config{Rooms: []Room{{Name: "lab", Tenant: "t1"}}, SendQueueBytes: 64 << 10})
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test", MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	tr.p.deps.Media = store
	t.Cleanup(tr.run(t, platformtest.NewSink(64)))
	alice := tr.join(t, "lab", "alice")
	info, err := store.Put("t1", mediatest.Content(7, 32<<20), "application/pdf", "big.pdf")
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan contract.Result, 1)
	go func() {
		results <- tr.p.Execute(context.Background(), "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: "lab",
			MediaKind: "document", SourceURL: store.URL(info.ID), Metadata: contract.Metadata{UserID: "alice"}})
	}()
	// alice does not read: the transfer waits for room in her queue.
	waitFor(t, "send_media waiting for room in alice's queue", stacksHold("nexscope.(*Platform).sendMedia", "wsconn.(*Queue).WaitSpace"))
	alice.WS.CloseNow()
	select {
	case res := <-results:
		if res.Success || res.Code != contract.CodeUnavailable {
			t.Fatalf("send_media = %+v, want unavailable: its only recipient left before the file ended", res)
		}
	case <-time.After(testTimeout):
		t.Fatalf("send_media still running %v after its recipient left", testTimeout)
	}
}

// The bot's file transfer (send_media) under way when its room is bound
// to another tenant is aborted: the rest of the earlier tenant's file must
// not reach the members of a room that tenant lost (as one still waiting
// for the lock is declined). The recipient gets transfer_incomplete, the
// gateway a failure.
func TestBotFileAbortedWhenTheRoomRebinds(t *testing.T) {
	tr := newRelay(t, Config{Rooms: []Room{{Name: "lab", Tenant: "t1"}}, SendQueueBytes: 64 << 10})
	store, err := media.New(media.Config{Dir: t.TempDir(), PublicURL: "http://connector.test", MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	tr.p.deps.Media = store
	t.Cleanup(tr.run(t, platformtest.NewSink(64)))
	alice := tr.join(t, "lab", "alice")
	info, err := store.Put("t1", mediatest.Content(7, 32<<20), "application/pdf", "t1-secret.pdf")
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan contract.Result, 1)
	go func() {
		results <- tr.p.Execute(context.Background(), "t1", &contract.Action{Op: contract.OpSendMedia, ChatID: "lab",
			MediaKind: "document", SourceURL: store.URL(info.ID), Metadata: contract.Metadata{UserID: "alice"}})
	}()
	// alice does not read: the transfer waits for room in her queue.
	waitFor(t, "send_media waiting for room in alice's queue", stacksHold("nexscope.(*Platform).sendMedia", "wsconn.(*Queue).WaitSpace"))
	if err := tr.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t2"}}); err != nil {
		t.Fatal(err)
	}
	for {
		typ, b := alice.Read()
		if typ == websocket.MessageBinary || strings.Contains(string(b), `"presence"`) || strings.Contains(string(b), `"file-start"`) {
			continue
		}
		if !strings.Contains(string(b), `"transfer_incomplete"`) {
			t.Fatalf("alice got %s, want transfer_incomplete for t1's file after the room was bound to t2", b)
		}
		break
	}
	if res := <-results; res.Success {
		t.Fatalf("send_media = %+v, want a failure: the room was bound to another tenant before the file ended", res)
	}
}

// A member's answer to the earlier tenant's open prompt, the first thing
// the room sees after the vault knows the tenant's new creation (the apply
// not yet at nexscope), reaches the new tenant as a plain message.
func TestTenantCreatedAgainAnswersNoEarlierPrompt(t *testing.T) {
	tr := startRelay(t, boundConfig())
	first := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tr.setTenants(map[string]time.Time{"t1": first})
	if err := tr.p.Bind([]platform.Binding{{Kind: platform.BindRoom, ID: "lab", Tenant: "t1"}}); err != nil {
		t.Fatal(err)
	}
	alice := tr.join(t, "lab", "alice")
	var a contract.Action
	if err := json.Unmarshal([]byte(`{"op":"prompt","chat_id":"lab","content":"Deploy?","prompt_kind":"approval",
		"prompt_id":"old.1","metadata":{"user_id":"alice"},
		"options":[{"id":"once","label":"Approve"},{"id":"deny","label":"Deny"}]}`), &a); err != nil {
		t.Fatal(err)
	}
	if res := tr.p.Execute(context.Background(), "t1", &a); !res.Success {
		t.Fatalf("prompt = %+v", res)
	}
	alice.Expect("msg")
	tr.recreate(map[string]time.Time{"t1": first.Add(time.Hour)}) // deleted and created again; SetTenants not yet
	alice.SendJSON(msg("m1", "alice", []string{"hermes"}, "/once"))
	alice.Expect("ack")
	if d := tr.sink.Next(t); d.Event == nil || d.Event.PromptResponse != nil || d.Event.Text != "/once" {
		t.Fatalf("delivery %+v, want a plain command, not an answer to the earlier t1's prompt", d.Event)
	}
}
