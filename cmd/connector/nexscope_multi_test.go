package main

// nexscope across two connector processes on one real redis-server: what a
// member on the surviving instance sees when the room's home is killed
// with SIGKILL (every msg and file it sent is answered, an incoming file
// ends with transfer_incomplete), and the CPU a file costs when it crosses
// from one instance to the other (docs/nexscope.md, docs/performance.md).

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"connector/internal/redistest"
	"connector/platform/nexscope/nexscopetest"
	"connector/store"
)

// startTwoInstances starts two connector processes (i0, i1) sharing a fresh
// redis-server, with direct streams between them (nexscope.cluster_addr)
// when streamed, and returns their rigs, a store on that Redis to watch the
// leases, and the redis-server.
func startTwoInstances(t *testing.T, streamed bool) ([]*crashRig, store.Store, *redistest.Server) {
	t.Helper()
	rds := redistest.Start(t, redistest.Options{})
	base := newCrashRig(t, connectorBinary(t), true)
	var st store.Store
	base.config, st = onRedis(t, base.config, rds.URL(), func(cfg string) string {
		if streamed {
			return strings.Replace(cfg, "nexscope:\n", "nexscope:\n  cluster_addr: 127.0.0.1:0\n", 1)
		}
		return cfg
	})
	rigs := make([]*crashRig, 2)
	for i := range rigs {
		r := *base
		r.dir = t.TempDir()
		r.env = append(append([]string(nil), base.env...), fmt.Sprintf("CONNECTOR_INSTANCE=i%d", i))
		rigs[i] = &r
		startInstance(t, rigs[i])
	}
	return rigs, st, rds
}

// joinRoom dials name into the default room on r and reads presences until
// one lists want.
func joinRoom(t *testing.T, r *crashRig, name string, want ...string) *nexscopetest.Member {
	t.Helper()
	m := nexscopetest.Dial(t, "ws://"+r.child.addr+"/ws?name="+name+"&v=1&token="+crashNexscopeToken, nil)
	m.Name = name
	for {
		p := m.Expect("presence")
		if fmt.Sprint(nexscopetest.Users(p)) == fmt.Sprint(want) {
			return m
		}
	}
}

// untilClosed reads m's frames until its connection ends: the text frames
// on the way and the close code.
func untilClosed(t *testing.T, m *nexscopetest.Member) (frames []map[string]any, code websocket.StatusCode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), crashWait)
	defer cancel()
	for {
		typ, b, err := m.WS.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("timed out after %v waiting for %s's connection to close", crashWait, m.Name)
			}
			return frames, websocket.CloseStatus(err)
		}
		if typ == websocket.MessageText {
			f, err := nexscopetest.DecodeFrame(b)
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, f)
		}
	}
}

// answered reports whether frames answer msgID: its ack, or an error frame
// naming it with code (any code when code is "").
func answered(frames []map[string]any, msgID, code string) bool {
	for _, f := range frames {
		if f["msgId"] != msgID {
			continue
		}
		if f["type"] == "ack" && code == "" || f["type"] == "error" && (code == "" || f["code"] == code) {
			return true
		}
	}
	return false
}

// frameList lists frames as type/code/msgId.
func frameList(frames []map[string]any) string {
	var out []string
	for _, f := range frames {
		s := fmt.Sprint(f["type"])
		if c, ok := f["code"]; ok {
			s += "/" + fmt.Sprint(c)
		}
		out = append(out, s+"/"+fmt.Sprint(f["msgId"]))
	}
	return strings.Join(out, " ")
}

// TestTwoInstancesNexscopeMsgDuringHomeDeath: alice and bob are on one
// instance, the room's home is the other (carol is there). The home is
// killed with SIGKILL and alice at once sends bob a msg and the bot a msg:
// before the 1012 that closes her, each gets an answer (here the home is
// dead, so an undelivered error naming it). After reconnecting (the room
// now homed on the survivor) the same msgs are delivered. How long the
// 1012 takes is logged, not asserted (docs/nexscope.md holds the figure):
// untilClosed fails when it does not come within crashWait.
func TestTwoInstancesNexscopeMsgDuringHomeDeath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and redis-server")
	}
	inBothModes(t, msgDuringHomeDeath)
}

// inBothModes runs test with member frames on Redis pub/sub, then on
// direct streams.
func inBothModes(t *testing.T, test func(t *testing.T, streamed bool)) {
	t.Run("pubsub", func(t *testing.T) { test(t, false) })
	t.Run("streams", func(t *testing.T) { test(t, true) })
}

func msgDuringHomeDeath(t *testing.T, streamed bool) {
	rigs, st, _ := startTwoInstances(t, streamed)
	homeName, _ := waitLeaseHolder(t, st, nexscopeRoomLease, "")
	home := instanceIndex(homeName)
	edge := rigs[1-home]
	alice := joinRoom(t, edge, "alice", "alice", "hermes")
	bob := joinRoom(t, edge, "bob", "alice", "bob", "hermes")
	_ = alice.Expect("presence")
	carol := joinRoom(t, rigs[home], "carol", "alice", "bob", "carol", "hermes")
	carol.DiscardInBackground()
	for _, m := range []*nexscopetest.Member{alice, bob} {
		for !nexscopetest.ContainsUser(m.Expect("presence"), "carol") {
		}
	}

	killed := time.Now()
	stopInstance(t, rigs[home])
	alice.SendText(`{"type":"msg","msgId":"m1","from":"alice","to":["bob"],"role":"user","threadId":"t","text":"sent after the home died"}`)
	alice.SendText(`{"type":"msg","msgId":"m2","from":"alice","to":["hermes"],"role":"user","threadId":"t","text":"@hermes sent after the home died"}`)
	frames, code := untilClosed(t, alice)
	took := time.Since(killed)
	if code != websocket.StatusServiceRestart {
		t.Fatalf("alice closed with %v after the home was killed, want 1012 (frames %v)", code, frames)
	}
	for _, id := range []string{"m1", "m2"} {
		if !answered(frames, id, "") {
			t.Fatalf("msg %s sent after the home died got neither an ack nor an error before the 1012; alice got %v", id, frames)
		}
	}
	bobFrames, _ := untilClosed(t, bob)
	for _, f := range bobFrames {
		if f["type"] == "msg" && f["msgId"] == "m1" && answered(frames, "m1", "undelivered") {
			t.Fatalf("bob got m1, which alice was told is undelivered")
		}
	}
	t.Logf("home %s killed: alice's two msgs answered (%s) and 1012 after %v (lease_ttl %v)", homeName, frameList(frames), took.Round(time.Millisecond), multiLeaseTTL)

	// The room moves to the survivor: the msgs go through again.
	waitLeaseHolder(t, st, nexscopeRoomLease, homeName)
	alice = joinRoom(t, edge, "alice", "alice", "hermes")
	bob = joinRoom(t, edge, "bob", "alice", "bob", "hermes")
	alice.SendText(`{"type":"msg","msgId":"m1","from":"alice","to":["bob"],"role":"user","threadId":"t","text":"again"}`)
	if m := bob.Expect("msg"); m["msgId"] != "m1" {
		t.Fatalf("bob got %v", m)
	}
	for {
		f := alice.Next()
		if f["type"] == "ack" {
			if f["msgId"] != "m1" || fmt.Sprint(f["delivered"]) != "[bob]" {
				t.Fatalf("ack %v", f)
			}
			break
		}
	}
}

// TestTwoInstancesNexscopeFileDuringHomeDeath: alice on one instance sends
// a file to bob (same instance) and carol (at the room's home). Halfway the
// home is killed with SIGKILL: bob gets transfer_incomplete naming the file
// and alice an error naming it, each before the 1012 that closes them,
// which comes from the home's loss, not the 60 s transfer timeout
// (untilClosed waits crashWait, 30 s). How long it takes is logged, not
// asserted (docs/nexscope.md holds the figure).
func TestTwoInstancesNexscopeFileDuringHomeDeath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and redis-server")
	}
	inBothModes(t, fileDuringHomeDeath)
}

func fileDuringHomeDeath(t *testing.T, streamed bool) {
	rigs, st, _ := startTwoInstances(t, streamed)
	homeName, _ := waitLeaseHolder(t, st, nexscopeRoomLease, "")
	home := instanceIndex(homeName)
	edge := rigs[1-home]
	alice := joinRoom(t, edge, "alice", "alice", "hermes")
	bob := joinRoom(t, edge, "bob", "alice", "bob", "hermes")
	_ = alice.Expect("presence")
	carol := joinRoom(t, rigs[home], "carol", "alice", "bob", "carol", "hermes")
	carol.DiscardInBackground()
	for _, m := range []*nexscopetest.Member{alice, bob} {
		for !nexscopetest.ContainsUser(m.Expect("presence"), "carol") {
		}
	}

	const size, chunk = 8 << 20, 64 << 10
	alice.SendJSON(nexscopetest.FileStart("f1", "alice", []string{"bob", "carol"}, size))
	if f := bob.Expect("file-start"); f["msgId"] != "f1" {
		t.Fatalf("bob got %v", f)
	}
	src := nexscopetest.NewChunkSource(size, chunk)
	for range size / chunk / 2 {
		alice.SendBinary(src.Next())
	}
	killed := time.Now()
	stopInstance(t, rigs[home])
	// alice goes on streaming as a client does; her writes may block once
	// the relay stops reading, and fail once it closes her.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), crashWait)
		defer cancel()
		for b := src.Next(); b != nil; b = src.Next() {
			if alice.WS.Write(ctx, websocket.MessageBinary, b) != nil {
				return
			}
		}
	}()

	bobFrames, bobCode := untilClosed(t, bob)
	bobTook := time.Since(killed)
	aliceFrames, aliceCode := untilClosed(t, alice)
	aliceTook := time.Since(killed)
	if !answered(bobFrames, "f1", "transfer_incomplete") {
		t.Fatalf("bob's partial file f1 ended without transfer_incomplete: %v, close %v", bobFrames, bobCode)
	}
	if !answered(aliceFrames, "f1", "") {
		t.Fatalf("alice's file f1 got neither an ack nor an error: %v, close %v", aliceFrames, aliceCode)
	}
	if bobCode != websocket.StatusServiceRestart || aliceCode != websocket.StatusServiceRestart {
		t.Fatalf("closes %v (bob) and %v (alice), want 1012", bobCode, aliceCode)
	}
	t.Logf("home %s killed halfway through an 8 MiB file: bob got %s and 1012 after %v, alice %s and 1012 after %v (lease_ttl %v)",
		homeName, frameList(bobFrames), bobTook.Round(time.Millisecond), frameList(aliceFrames), aliceTook.Round(time.Millisecond), multiLeaseTTL)
}

// TestTwoInstancesNexscopeFileCPU streams a file between two members, on
// one instance and across two, checks it arrives whole, and logs the CPU
// time each process spent on it (utime + stime from /proc, redis-server's
// from INFO). NEXSCOPE_FILE_MIB sets the size (default 8; the figures in
// docs/performance.md are for 100).
func TestTwoInstancesNexscopeFileCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the connector binary and redis-server")
	}
	mib := int64(8)
	if s := os.Getenv("NEXSCOPE_FILE_MIB"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n > 100 {
			t.Fatalf("NEXSCOPE_FILE_MIB=%q: want 1..100", s)
		}
		mib = n
	}
	inBothModes(t, func(t *testing.T, streamed bool) { fileCPU(t, streamed, mib) })
}

func fileCPU(t *testing.T, streamed bool, mib int64) {
	size := mib << 20
	rigs, st, rds := startTwoInstances(t, streamed)
	homeName, _ := waitLeaseHolder(t, st, nexscopeRoomLease, "")
	home := instanceIndex(homeName)
	edge := 1 - home
	rc := rds.Client(t)

	run := func(label string, from, to int, id string) {
		t.Helper()
		peer := joinRoom(t, rigs[to], "bob", "bob", "hermes")
		sender := joinRoom(t, rigs[from], "alice", "alice", "bob", "hermes")
		_ = peer.Expect("presence")
		got := nexscopetest.ReceiveFile(peer)
		before := [3]float64{procCPU(t, rigs[home]), procCPU(t, rigs[edge]), redisCPU(t, rc)}
		start := time.Now()
		nexscopetest.SendFile(sender, id, []string{"bob"}, size, 64<<10)
		r := <-got
		if r.Err != nil || r.Bytes != size || r.SHA256 != nexscopetest.SHA256Of(size, 64<<10) {
			t.Fatalf("%s: bob got %d of %d bytes (err %v)", label, r.Bytes, size, r.Err)
		}
		if a := sender.Expect("ack"); a["msgId"] != id || fmt.Sprint(a["delivered"]) != "[bob]" {
			t.Fatalf("%s: ack %v", label, a)
		}
		took := time.Since(start)
		after := [3]float64{procCPU(t, rigs[home]), procCPU(t, rigs[edge]), redisCPU(t, rc)}
		per := float64(100<<20) / float64(size)
		homeCPU, edgeCPU, redis := (after[0]-before[0])*per, (after[1]-before[1])*per, (after[2]-before[2])*per
		t.Logf("%s: %d MiB in %v; CPU-seconds per 100 MiB: home %.2f, other instance %.2f, redis-server %.2f, total %.2f",
			label, mib, took.Round(time.Millisecond), homeCPU, edgeCPU, redis, homeCPU+edgeCPU+redis)
		_ = sender.WS.Close(websocket.StatusNormalClosure, "")
		_ = peer.WS.Close(websocket.StatusNormalClosure, "")
		waitRoomEmpty(t, rigs[home])
	}
	run("one instance (both members at the home)", home, home, "f1")
	run("two instances (sender elsewhere, recipient at the home)", edge, home, "f2")
	run("two instances (sender at the home, recipient elsewhere)", home, edge, "f3")
}

// waitRoomEmpty waits until a fresh member of the default room on r sees
// only itself and the bot: the previous members have left everywhere.
func waitRoomEmpty(t *testing.T, r *crashRig) {
	t.Helper()
	deadline := time.Now().Add(crashWait)
	for {
		m := nexscopetest.Dial(t, "ws://"+r.child.addr+"/ws?name=probe&v=1&token="+crashNexscopeToken, nil)
		m.Name = "probe"
		users := nexscopetest.Users(m.Expect("presence"))
		_ = m.WS.Close(websocket.StatusNormalClosure, "")
		if fmt.Sprint(users) == "[hermes probe]" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for the room to empty (presence %v)", crashWait, users)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's room
	}
}

// procCPU is the CPU time r's connector process has used so far, in
// seconds (utime + stime from /proc/<pid>/stat, at USER_HZ 100).
func procCPU(t *testing.T, r *crashRig) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.child.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name (which may hold spaces): state is the
	// first, utime the 12th and stime the 13th.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	ut, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (ut + stime) / 100
}

// redisCPU is redis-server's CPU time so far (INFO cpu), in seconds.
func redisCPU(t *testing.T, rc *redis.Client) float64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}
