package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/relay/relaytest"
	"connector/session"
)

// roleFleet is roleEnv's value for the gateway process.
const roleFleet = "fleet"

// dialTimeout bounds one gateway's dial and handshake.
const dialTimeout = 30 * time.Second

// fleetMain is the gateway process. Its flags name the gateways; then it
// answers commands, one per stdin line, until stdin ends:
//
//	connect                  dial every gateway, hello, read and ack inbound
//	                         -> "connected <ns> <failed>"
//	report                   latencies read since the last report
//	                         -> "stats <stats fields>"
//	received                 inbound read since the last report or samples,
//	                         without taking them -> "received <n> <errors>"
//	samples                  the latencies (ns) of the inbound read since the
//	                         last report, taken -> "samples <errors> <ns>..."
//	close                    close every gateway -> "closed"
//	echo-connect URLS N      open N echo connections, connection i to the
//	                         one of the comma-separated URLS gateway
//	                         first+i dials -> "echo-connected <ns>"
//	echo-run SIZE RATE NS WINDOW
//	                         run the echo baseline over them
//	                         -> "echo <stats fields>"
//
// A failed command answers "error <text>".
func fleetMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var f fleet
	fs := flag.NewFlagSet("relaybench fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.url, "url", "", "relay URL; several comma-separated spread the gateways over them, round-robin")
	fs.StringVar(&f.prefix, "prefix", "", "gateway id prefix")
	fs.StringVar(&f.platform, "platform", "", "platform to hello")
	fs.IntVar(&f.gateways, "gateways", 0, "gateways")
	fs.IntVar(&f.first, "first", 0, "index of the first gateway (gateway i is <prefix><first+i>)")
	fs.IntVar(&f.layout.tenants, "tenants", 0, "tenants of the gateways, round-robin (0: gateway i dials URL i mod n)")
	fs.BoolVar(&f.layout.affinity, "affinity", false, "every gateway of a tenant dials the same URL")
	fs.IntVar(&f.workers, "workers", 8, "gateways dialing at once")
	sources := fs.Int("sources", 0, "loopback source addresses to dial from, round-robin (0: the system's choice)")
	firstSource := fs.Int("source-first", 1, "the first source address is 127.0.0.<source-first>")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	f.clients = sourceClients(*firstSource, *sources)
	f.echo.clients, f.echo.first, f.echo.layout = f.clients, f.first, f.layout
	f.secret = os.Getenv(secretEnv)
	if err := raiseFileLimit(f.gateways); err != nil {
		fmt.Fprintf(stderr, "relaybench fleet: %v\n", err)
		return 1
	}
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		fmt.Fprintln(stdout, f.handle(strings.Fields(in.Text())))
	}
	f.closeAll()
	f.echo.close()
	return 0
}

// handle runs one command and returns its answer line.
func (f *fleet) handle(cmd []string) string {
	if len(cmd) == 0 {
		return "error empty command"
	}
	switch cmd[0] {
	case "connect":
		start := time.Now()
		failed, err := f.connect()
		if err != nil {
			return "error " + err.Error()
		}
		return fmt.Sprintf("connected %d %d", time.Since(start), failed)
	case "report":
		return "stats " + f.rec.take().fields()
	case "received":
		n, errs := f.rec.count()
		return fmt.Sprintf("received %d %d", n, errs)
	case "samples":
		lat, errs := f.rec.takeSamples()
		return "samples " + samplesFields(errs, lat)
	case "echo-connect":
		start := time.Now()
		if err := f.echo.connectCommand(cmd[1:]); err != nil {
			return "error " + err.Error()
		}
		return fmt.Sprintf("echo-connected %d", time.Since(start))
	case "echo-run":
		s, err := f.echo.runCommand(cmd[1:])
		if err != nil {
			return "error " + err.Error()
		}
		return "echo " + s.fields()
	case "close":
		f.closeAll()
		return "closed"
	}
	return fmt.Sprintf("error unknown command %q", cmd[0])
}

// fleet is the child's set of gateway connections.
type fleet struct {
	url, prefix, secret, platform string
	gateways, first, workers      int
	layout                        layout

	clients []*http.Client // connection i dials through clients[i mod len]
	rec     recorder
	echo    echoClients
	conns   []*websocket.Conn
	closing atomic.Bool
	readers sync.WaitGroup
}

// connect dials every gateway; it returns how many failed, and an error if
// all did.
func (f *fleet) connect() (failed int, err error) {
	conns := make([]*websocket.Conn, f.gateways)
	urls := strings.Split(f.url, ",")
	var next, fails atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range f.workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(conns) {
					return
				}
				g := f.first + i
				url := urls[f.layout.connectorOf(g, len(urls))]
				ws, err := dialGateway(f.clients[i%len(f.clients)], url, fmt.Sprintf("%s%d", f.prefix, g), f.secret, f.platform)
				if err != nil {
					fails.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				conns[i] = ws
				// Read at once, as the gateway does: a connection
				// nobody reads answers no ping, and the connector
				// closes it (1011 ping timeout) long before thousands
				// more have dialed.
				f.readers.Go(func() { f.read(ws) })
			}
		})
	}
	wg.Wait()
	for _, ws := range conns {
		if ws != nil {
			f.conns = append(f.conns, ws)
		}
	}
	if len(f.conns) == 0 {
		return int(fails.Load()), fmt.Errorf("no gateway connected: %v", firstErr.Load())
	}
	return int(fails.Load()), nil
}

// layout says which of several connectors each gateway dials.
type layout struct {
	// tenants is how many tenants the gateways are spread over,
	// round-robin (gateway g is tenant g mod tenants's); 0 leaves them
	// out: gateway g dials connector g mod n.
	tenants int
	// affinity puts every gateway of a tenant on one connector (tenant t
	// on t mod n); otherwise tenant t's kth gateway dials connector
	// (t+k) mod n, so each tenant is spread over all of them.
	affinity bool
}

// connectorOf is the connector (of n) gateway g dials.
func (l layout) connectorOf(g, n int) int {
	switch {
	case l.tenants <= 0:
		return g % n
	case l.affinity:
		return (g % l.tenants) % n
	}
	return (g%l.tenants + g/l.tenants) % n
}

// dialGateway connects as gateway id the way the Hermes gateway does: a
// fresh upgrade token, then hello, then the descriptor.
func dialGateway(client *http.Client, url, id, secret, platform string) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	h := http.Header{"Authorization": {"Bearer " + relaytest.Token(id, secret, time.Now())}}
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: client, HTTPHeader: h})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", id, err)
	}
	ws.SetReadLimit(contract.MaxFrameBytes)
	hello := session.AppendJSONString([]byte(`{"type": "hello", "platform": `), platform)
	hello = append(hello, `, "botId": ""}`+"\n"...)
	if err := ws.Write(ctx, websocket.MessageText, hello); err != nil {
		_ = ws.CloseNow()
		return nil, fmt.Errorf("hello %s: %w", id, err)
	}
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			_ = ws.CloseNow()
			return nil, fmt.Errorf("descriptor for %s: %w", id, err)
		}
		if bytes.Contains(msg, []byte(`"type":"descriptor"`)) {
			return ws, nil
		}
	}
}

// sourceClients returns one HTTP client per loopback source address
// 127.0.0.first..first+n-1, or the default client for n < 1. Each dials a
// new socket per WebSocket (a hijacked connection is never pooled).
func sourceClients(first, n int) []*http.Client {
	if n < 1 {
		return []*http.Client{http.DefaultClient}
	}
	clients := make([]*http.Client, n)
	for i := range clients {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(first+i))}}
		clients[i] = &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	return clients
}

// gatewayFrame is the part of a connector frame the fleet decodes when
// inboundBufferID cannot read it in place.
type gatewayFrame struct {
	Type     string `json:"type"`
	BufferID string `json:"bufferId"`
}

// inboundHead starts every inbound frame the connector writes with a
// bufferId (contract.AppendInboundEvent).
const inboundHead = `{"type":"` + contract.TypeInbound + `","bufferId":"`

// inboundBufferID reports whether line is an inbound frame and returns its
// bufferId ("" when it has none). The connector's own spelling is read in
// place, as the echo client only scans its message for the stamp: decoding
// each whole frame by reflection cost this process about 12 µs per event
// that the echo run's client does not spend, on the cores the connector
// is measured on. Any other spelling takes the general decode.
func inboundBufferID(line []byte) (string, bool) {
	if rest, ok := bytes.CutPrefix(line, []byte(inboundHead)); ok {
		if id, _, ok := bytes.Cut(rest, []byte{'"'}); ok && bytes.IndexByte(id, '\\') < 0 {
			return string(id), true
		}
	}
	var fr gatewayFrame
	if json.Unmarshal(line, &fr) != nil || fr.Type != contract.TypeInbound {
		return "", false
	}
	return fr.BufferID, true
}

// read records each inbound's latency and acknowledges it, one frame per
// message as the gateway writes, until the connection ends.
func (f *fleet) read(ws *websocket.Conn) {
	ctx := context.Background()
	var ack []byte
	for {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			if !f.closing.Load() {
				f.rec.fail()
			}
			return
		}
		now := time.Now()
		contract.SplitLines(msg, func(line []byte) {
			id, ok := inboundBufferID(line)
			if !ok {
				return
			}
			if at, ok := parseStamp(line); ok {
				f.rec.add(now.Sub(at), len(line))
			}
			if id == "" {
				return
			}
			ack = session.AppendJSONString(append(ack[:0], `{"type": "inbound_ack", "bufferId": `...), id)
			ack = append(ack, "}\n"...)
			if err := ws.Write(ctx, websocket.MessageText, ack); err != nil && !f.closing.Load() {
				f.rec.fail()
			}
		})
	}
}

func (f *fleet) closeAll() {
	f.closing.Store(true)
	var wg sync.WaitGroup
	for _, ws := range f.conns {
		wg.Go(func() { _ = ws.Close(websocket.StatusNormalClosure, "") })
	}
	wg.Wait()
	f.readers.Wait()
	f.conns = nil
	f.closing.Store(false)
}
