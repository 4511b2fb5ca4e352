package wsconn

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/internal/clock"
)

// Keepalive pings one WebSocket on a clock: a tick every interval, less a
// random jitter of up to a tenth of it so that connections accepted
// together do not ping together. A tick that finds the previous ping still
// unanswered is a miss; the misses-th consecutive miss calls timedOut. It
// holds one timer and no goroutine while it waits; each ping's round trip
// runs on a goroutine of its own (coder/websocket's Ping waits for its
// pong), which ends with the pong or the socket.
//
// A pong is read only by the socket's reader. Its owner marks the reader
// held back (Hold) while it does not read because it waits to pass on what
// the peer just sent (backpressure): the peer is alive then although its
// pong waits unread, so neither a tick nor Probe counts it as silent.
//
// Its zero value is unusable until Init, and does not tick until Start. Its
// lock is a leaf.
type Keepalive struct {
	mu       sync.Mutex
	ws       *websocket.Conn
	clk      clock.Clock
	interval time.Duration
	misses   int
	timedOut func()
	timer    clock.Timer
	awaiting bool // the last ping has no pong yet
	missed   int
	stopped  bool
	pings    sync.WaitGroup

	holding   atomic.Bool   // the reader is held back now
	holds     atomic.Uint64 // Hold(true) calls so far
	tickHolds uint64        // holds at the last tick
}

// Init binds k to ws and clk: ticks every interval once started, timedOut
// called at the misses-th consecutive miss. Probe works from now on.
func (k *Keepalive) Init(ws *websocket.Conn, clk clock.Clock, interval time.Duration, misses int, timedOut func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ws, k.clk, k.interval, k.misses, k.timedOut = ws, clk, interval, misses, timedOut
}

// Start arms the first tick, unless Stop came first.
func (k *Keepalive) Start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopped && k.timer == nil {
		k.timer = k.clk.AfterFunc(k.next(), k.tick)
	}
}

// next is the delay to the next tick: interval less up to a tenth.
func (k *Keepalive) next() time.Duration {
	if j := int64(k.interval / 10); j > 0 {
		return k.interval - time.Duration(rand.Int64N(j+1))
	}
	return k.interval
}

func (k *Keepalive) tick() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	held := k.heldSince(k.tickHolds)
	k.tickHolds = k.holds.Load()
	switch {
	case !k.awaiting:
		k.missed = 0
	case held:
		// Alive, its reader held back behind the pong: no miss, and no
		// new ping while the last one waits to be read.
		k.missed = 0
		k.timer.Reset(k.next())
		k.mu.Unlock()
		return
	default:
		k.missed++
	}
	if k.missed >= k.misses {
		k.stopped = true
		k.mu.Unlock()
		k.timedOut()
		return
	}
	k.awaiting = true
	k.pingLocked()
	k.timer.Reset(k.next())
	k.mu.Unlock()
}

// Hold marks the socket's reader held back (true: it waits to pass on a
// frame the peer just sent, and reads nothing meanwhile) or reading again
// (false). A peer whose reader is held back now, or was since the last tick
// (or since a probe began), counts as alive although its pong is late.
func (k *Keepalive) Hold(held bool) {
	if held {
		k.holds.Add(1)
	}
	k.holding.Store(held)
}

// Held reports whether the reader is held back now (Hold).
func (k *Keepalive) Held() bool { return k.holding.Load() }

// heldSince reports whether the reader is held back now or was since holds
// read mark.
func (k *Keepalive) heldSince(mark uint64) bool {
	return k.holding.Load() || k.holds.Load() != mark
}

// pingLocked sends a ping from a goroutine Wait waits for; the channel gets
// Ping's result, nil once the pong arrived (which also answers the tick's
// ping: the peer is alive). The ping is never cancelled
// early (coder/websocket drops a socket whose write context ends
// mid-write): it lives until its pong or the socket's end. k.mu must be
// held.
func (k *Keepalive) pingLocked() <-chan error {
	result := make(chan error, 1)
	k.pings.Add(1)
	go func() {
		defer k.pings.Done()
		err := k.ws.Ping(context.Background())
		if err == nil {
			k.mu.Lock()
			k.awaiting = false
			k.mu.Unlock()
		}
		result <- err
	}()
	return result
}

// Probe sends a ping now and reports whether its pong arrives within
// timeout on the clock, or the reader is (or was meanwhile) held back
// (Hold); false once stopped.
func (k *Keepalive) Probe(timeout time.Duration) bool {
	mark := k.holds.Load()
	k.mu.Lock()
	if k.stopped || k.ws == nil {
		k.mu.Unlock()
		return false
	}
	if k.holding.Load() {
		k.mu.Unlock()
		return true
	}
	// Armed before the ping goes out: a peer that has the ping knows the
	// deadline runs.
	expired := make(chan struct{})
	deadline := k.clk.AfterFunc(timeout, func() { close(expired) })
	defer deadline.Stop()
	result := k.pingLocked()
	k.mu.Unlock()
	select {
	case err := <-result:
		return err == nil
	case <-expired:
		return k.heldSince(mark)
	}
}

// Stop ends the ticks; pings under way finish with their pong or socket.
func (k *Keepalive) Stop() {
	k.mu.Lock()
	k.stopped = true
	if k.timer != nil {
		k.timer.Stop()
	}
	k.mu.Unlock()
}

// Wait stops k and waits for its pings to finish; call it once the socket
// is closed, so that none waits for a pong that cannot come.
func (k *Keepalive) Wait() {
	k.Stop()
	k.pings.Wait()
}
