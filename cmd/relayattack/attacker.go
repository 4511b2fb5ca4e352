package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/relay/relaytest"
)

// roleAttacker is roleEnv's value for the attacker process.
const roleAttacker = "attacker"

// Bounds on one connection's steps in the attacker.
const (
	dialTimeout  = 30 * time.Second
	probeTimeout = 3 * time.Second
)

// attackerMain is the attacking gateway: it runs o.Mode against o.URL and
// prints what happened, ending with a "result key=value…" line.
func attackerMain(args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions("relayattack attacker", args, stderr)
	if err == nil && o.URL == "" {
		err = errors.New("the attacker needs -url")
	}
	if err == nil && !strings.HasPrefix(o.URL, "ws://127.0.0.1:") {
		err = fmt.Errorf("refusing to attack %s: loopback only", o.URL)
	}
	if err != nil {
		fmt.Fprintf(stderr, "relayattack attacker: %v\n", err)
		return 2
	}
	secret := os.Getenv(secretEnv)
	switch o.Mode {
	case modeBurst:
		err = burst(&o, secret, stdout)
	case modeLogFlood:
		err = logFlood(&o, secret, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "relayattack attacker: %v\n", err)
		return 1
	}
	return 0
}

// dial opens one connection as the attack gateway.
func dial(ctx context.Context, url, secret string) (*websocket.Conn, error) {
	h := http.Header{"Authorization": {"Bearer " + relaytest.Token(gatewayID, secret, time.Now())}}
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(contract.MaxFrameBytes)
	return ws, nil
}

// burstConn is one connection of the burst and how it ended.
type burstConn struct {
	ws     *websocket.Conn
	silent bool
	ended  chan struct{} // a reading connection's reader ended
	code   int           // close code received, -1 none
}

// burst dials o.Conns connections of one gateway id with o.Workers at a
// time, holds them for o.Hold, and reports how each ended: the close code
// received, still open, or failed to dial.
func burst(o *options, secret string, out io.Writer) error {
	conns := make([]*burstConn, o.Conns)
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range o.Workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(conns) {
					return
				}
				// Silent connections are spread evenly over the burst.
				silent := float64(i%100) < o.Silent*100
				c, err := dialBurst(o.URL, secret, silent)
				if err != nil {
					failed.Add(1)
					continue
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	fmt.Fprintf(out, "attacker: dialed %d connections (%d failed) in %v; holding them %v\n",
		o.Conns, failed.Load(), time.Since(start).Round(time.Millisecond), o.Hold)
	time.Sleep(o.Hold) // the attack itself: keep the connections open

	var probes sync.WaitGroup
	for _, c := range conns {
		if c != nil {
			probes.Go(c.probe)
		}
	}
	probes.Wait()
	ends := map[string]int{}
	for _, c := range conns {
		switch {
		case c == nil:
			ends["dial failed"]++
		case c.code == -1:
			ends["open"]++
		default:
			ends[fmt.Sprintf("closed %d", c.code)]++
		}
	}
	keys := make([]string, 0, len(ends))
	for k := range ends {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var line strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&line, ", %s: %d", k, ends[k])
	}
	fmt.Fprintf(out, "attacker: after %v: %s\n", o.Hold, strings.TrimPrefix(line.String(), ", "))
	fmt.Fprintf(out, "result open=%d closed_4409=%d dial_failed=%d\n",
		ends["open"], ends[fmt.Sprintf("closed %d", contract.CloseReplaced)], ends["dial failed"])
	for _, c := range conns {
		if c != nil {
			_ = c.ws.CloseNow()
		}
	}
	return nil
}

// dialBurst opens one connection of the burst. A reading one says hello and
// reads until the connection ends; a silent one sends and reads nothing.
func dialBurst(url, secret string, silent bool) (*burstConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	ws, err := dial(ctx, url, secret)
	if err != nil {
		return nil, err
	}
	c := &burstConn{ws: ws, silent: silent, ended: make(chan struct{}), code: -1}
	if silent {
		return c, nil
	}
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type": "hello", "platform": "relay", "botId": ""}`+"\n")); err != nil {
		c.code = int(websocket.CloseStatus(err))
		close(c.ended)
		return c, nil
	}
	go func() {
		defer close(c.ended)
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				c.code = int(websocket.CloseStatus(err))
				return
			}
		}
	}()
	return c, nil
}

// probe settles how c ended: a reading connection's reader has the answer
// if it ended; a silent one reads now, finding the close frame the relay
// sent if it was closed, or nothing within probeTimeout if it is open.
func (c *burstConn) probe() {
	if !c.silent {
		select {
		case <-c.ended:
		default:
			c.code = -1 // still reading: open
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	for {
		_, _, err := c.ws.Read(ctx)
		if err == nil {
			continue
		}
		if ctx.Err() == nil {
			c.code = int(websocket.CloseStatus(err))
		}
		return
	}
}

// floodKinds are the frames of the log flood by -frame kind. The invalid
// ones are skipped by the relay and not answered; "hello" and "idle" are
// valid but repeated without end, and answered. Kind "mix" sends the
// invalid ones round-robin.
var floodKinds = map[string][]byte{
	"malformed": []byte("x\n"),
	"unknown":   []byte(`{"type":"nope"}` + "\n"),
	"outbound":  []byte(`{"type":"outbound"}` + "\n"),
	"interrupt": []byte(`{"type":"interrupt"}` + "\n"),
	"ack":       []byte(`{"type":"inbound_ack","bufferId":"none"}` + "\n"),
	"hello":     []byte(`{"type":"hello","platform":"relay"}` + "\n"),
	"idle":      []byte(`{"type":"going_idle"}` + "\n"),
}

// mixKinds are the kinds -frame mix sends.
var mixKinds = []string{"malformed", "unknown", "outbound", "interrupt", "ack"}

// floodFrames returns the frames -frame kind sends, in order.
func floodFrames(kind string) [][]byte {
	if kind != frameMix {
		return [][]byte{floodKinds[kind]}
	}
	out := make([][]byte, len(mixKinds))
	for i, k := range mixKinds {
		out[i] = floodKinds[k]
	}
	return out
}

// floodMessageBytes is the size of each message of the flood.
const floodMessageBytes = 64 << 10

// logFlood says hello, sends o.Bytes of flood frames, then an outbound
// whose result proves the relay handled every frame before it. It reads
// everything the relay answers meanwhile, as a gateway does.
func logFlood(o *options, secret string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout+attackerGrace/2)
	defer cancel()
	ws, err := dial(ctx, o.URL, secret)
	if err != nil {
		return err
	}
	defer ws.CloseNow()
	probed := make(chan error, 1)
	go func() { probed <- readUntil(ctx, ws, `"requestId":"probe"`) }()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type": "hello", "platform": "relay", "botId": ""}`+"\n")); err != nil {
		return err
	}
	kinds := floodFrames(o.Frame)
	frames, sent := 0, 0
	var msg []byte
	for sent < o.Bytes {
		msg = msg[:0]
		for len(msg) < floodMessageBytes && sent+len(msg) < o.Bytes {
			msg = append(msg, kinds[frames%len(kinds)]...)
			frames++
		}
		if err := ws.Write(ctx, websocket.MessageText, msg); err != nil {
			return fmt.Errorf("after %d bytes: %w", sent, err)
		}
		sent += len(msg)
	}
	probe := `{"type": "outbound", "requestId": "probe", "action": {"op": "no_such_op"}}` + "\n"
	if err := ws.Write(ctx, websocket.MessageText, []byte(probe)); err != nil {
		return err
	}
	if err := <-probed; err != nil {
		return err
	}
	fmt.Fprintf(out, "attacker: sent %d %s frames in %d bytes\n", frames, o.Frame, sent)
	fmt.Fprintf(out, "result frames=%d bytes=%d\n", frames, sent)
	return ws.Close(websocket.StatusNormalClosure, "")
}

// readUntil reads messages until one contains want.
func readUntil(ctx context.Context, ws *websocket.Conn, want string) error {
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", want, err)
		}
		if bytes.Contains(msg, []byte(want)) {
			return nil
		}
	}
}
