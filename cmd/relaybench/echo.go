package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/contract"
	"connector/internal/wsconn"
)

// echoHandler is the bare-transport baseline: a coder/websocket server that
// writes every message back as it came, with the relay's settings
// (compression off, the contract's frame limit), one goroutine per
// connection.
func echoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ws.SetReadLimit(contract.MaxFrameBytes)
		ctx := r.Context()
		for {
			typ, msg, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if err := ws.Write(ctx, typ, msg); err != nil {
				return
			}
		}
	})
}

// echoClients are the fleet's connections to the echo server.
type echoClients struct {
	clients  []*http.Client // connection i dials through clients[i mod len]
	first    int            // connection i is the fleet's (first+i)th: layout picks its URL
	layout   layout
	conns    []*websocket.Conn
	readers  sync.WaitGroup
	rec      recorder
	received atomic.Int64
	progress chan struct{}
	closing  atomic.Bool
}

// connectCommand parses "URLS N" and opens N connections.
func (e *echoClients) connectCommand(args []string) error {
	if len(args) != 2 {
		return errors.New("echo-connect: want URLS N")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return fmt.Errorf("echo-connect: %w", err)
	}
	return e.connect(strings.Split(args[0], ","), n)
}

// connect opens n connections, one at a time, connection i to the server
// gateway first+i would dial.
func (e *echoClients) connect(urls []string, n int) error {
	e.progress = make(chan struct{}, 1)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		url := urls[e.layout.connectorOf(e.first+i, len(urls))]
		ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: e.clients[i%len(e.clients)]})
		cancel()
		if err != nil {
			return fmt.Errorf("echo dial %d: %w", i, err)
		}
		ws.SetReadLimit(contract.MaxFrameBytes)
		e.conns = append(e.conns, ws)
		e.readers.Go(func() { e.read(ws) })
	}
	return nil
}

// read records each echoed message's round trip.
func (e *echoClients) read(ws *websocket.Conn) {
	for {
		_, msg, err := ws.Read(context.Background())
		if err != nil {
			if !e.closing.Load() {
				e.rec.fail()
			}
			return
		}
		if at, ok := parseStamp(msg); ok {
			e.rec.add(time.Since(at), len(msg))
		}
		e.received.Add(1)
		wsconn.Signal(e.progress)
	}
}

// runCommand parses "SIZE RATE NS WINDOW" and runs the load.
func (e *echoClients) runCommand(args []string) (stats, error) {
	if len(args) != 4 {
		return stats{}, errors.New("echo-run: want SIZE RATE NS WINDOW")
	}
	size, err1 := strconv.Atoi(args[0])
	rate, err2 := strconv.ParseFloat(args[1], 64)
	ns, err3 := strconv.ParseInt(args[2], 10, 64)
	window, err4 := strconv.Atoi(args[3])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return stats{}, fmt.Errorf("echo-run: %w", err)
	}
	return e.run(size, pacer{Rate: rate, Duration: time.Duration(ns), Window: window})
}

// run sends messages of size bytes round-robin over the connections, paced
// like the connector run; each message's latency is its round trip.
func (e *echoClients) run(size int, p pacer) (stats, error) {
	if len(e.conns) == 0 {
		return stats{}, errors.New("echo-run: no echo connections")
	}
	e.rec.take()
	e.received.Store(0)
	var sent atomic.Int64
	p.InFlight = func() int64 { return sent.Load() - e.received.Load() }
	p.Progress = e.progress
	pad := make([]byte, size)
	for i := range pad {
		pad[i] = 'x'
	}
	var msg []byte
	ctx := context.Background()
	start := time.Now()
	n, failed, err := p.run(ctx, func(seq int, at time.Time) error {
		msg = append(appendStamp(msg[:0], at), ' ')
		if len(msg) < size {
			msg = append(msg, pad[:size-len(msg)]...)
		}
		sent.Add(1)
		// No deadline, as the gateways' acks have none: a cancellable
		// context costs coder/websocket a timer registration per write
		// that the connector run's client does not pay.
		err := e.conns[seq%len(e.conns)].Write(ctx, websocket.MessageText, msg)
		if err != nil {
			sent.Add(-1)
		}
		return err
	})
	if err != nil {
		return stats{}, err
	}
	drain(func() bool { return e.received.Load() >= int64(n-failed) }, e.progress, 10*time.Second)
	s := e.rec.take()
	s.Sent, s.Elapsed = n, time.Since(start)
	s.Errors += failed
	return s, nil
}

func (e *echoClients) close() {
	e.closing.Store(true)
	for _, ws := range e.conns {
		_ = ws.Close(websocket.StatusNormalClosure, "")
	}
	e.readers.Wait()
	e.conns = nil
	e.closing.Store(false)
}

// drain waits, up to limit, until done reports true, re-checking whenever
// progress is signalled. It reports whether done came true.
func drain(done func() bool, progress <-chan struct{}, limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for !done() {
		select {
		case <-progress:
		case <-deadline.C:
			return done()
		}
	}
	return true
}
