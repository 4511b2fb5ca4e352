package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connector/contract"
)

// upgradeOutcome counts how the connector answered the upgrade flood.
type upgradeOutcome struct {
	attempted     atomic.Int64
	switched      atomic.Int64 // 101, then (with a bad token) a close frame
	unauthorized  atomic.Int64 // 401 over plain HTTP
	otherStatus   atomic.Int64
	closedAtOnce  atomic.Int64 // closed without an answer (the listener's bounds)
	dialFailed    atomic.Int64
	closedByPeer  atomic.Int64 // upgraded sockets the connector closed before -linger
	lingerExpired atomic.Int64 // upgraded sockets still open when -linger passed
}

// runUpgradeFlood reproduces issue 22's unauthenticated upgrade flood:
// -workers loops, all from 127.0.0.1, each sending GET /relay upgrades as
// fast as the connector answers them (at most -rate a second over all
// loops, when set), with no Authorization header (-auth none) or a token
// no gateway signed (-auth bad). An upgraded socket is
// held, never answering the connector's close frame, until the connector
// closes it or -linger passes, while the loop goes on; at most -open
// attack sockets are open at once. The flood lasts -hold. Meanwhile a
// gateway dials from 127.0.0.2 every 500 ms, and the connector is sampled
// every 250 ms (the peak kept).
func runUpgradeFlood(o options, w io.Writer) error {
	child, err := startChild(o)
	if err != nil {
		return err
	}
	defer child.stop()
	fmt.Fprintf(w, "connector pid %d on %s (metrics %s), open-file limit %s\n", child.pid(), child.addr, child.metricsURL, child.fileLimit())
	rate := "as fast as answered"
	if o.Rate > 0 {
		rate = fmt.Sprintf("at most %d/s", o.Rate)
	}
	fmt.Fprintf(w, "flood: %d workers from 127.0.0.1, %s, -auth %s, upgraded sockets held up to %s, at most %d open, for %s\n",
		o.Workers, rate, o.Auth, o.Linger, o.Open, o.Hold)
	tbl := &table{w: w}
	tbl.header()
	tbl.row("baseline", child.sample(), "", "")

	ctx, cancel := context.WithTimeout(context.Background(), o.Hold)
	defer cancel()
	peak := startPeakSampler(child)
	probes := startProbes(ctx, child)
	var out upgradeOutcome
	var holders sync.WaitGroup
	open := make(chan struct{}, o.Open)
	var workers sync.WaitGroup
	request := upgradeRequest(o.Auth)
	pace := pacer(ctx, o.Rate)
	start := time.Now()
	for range o.Workers {
		workers.Go(func() {
			for ctx.Err() == nil {
				select {
				case <-pace:
				case <-ctx.Done():
					return
				}
				select {
				case open <- struct{}{}:
				case <-ctx.Done():
					return
				}
				c := floodOnce(child.addr, request, &out)
				if c == nil {
					<-open
					continue
				}
				holders.Go(func() {
					holdUpgraded(c, o.Linger, &out)
					<-open
				})
			}
		})
	}
	workers.Wait()
	elapsed := time.Since(start)
	under := peak.stop()
	latencies, failures := probes.stop()
	tbl.row("peak", under, fmt.Sprintf("%d upgrades in %s", out.attempted.Load(), elapsed.Round(100*time.Millisecond)), probeSummary(latencies, failures))
	holders.Wait()
	tbl.row("attack ended", child.sample(), "", probeGateway(child))
	time.Sleep(o.Settle)
	tbl.row(fmt.Sprintf("after %s", o.Settle), child.sample(), "", probeGateway(child))

	fmt.Fprintf(w, "upgrades: %d sent (%.0f/s): %d answered 101 (%d closed by the connector within %s, %d held until then), %d answered 401, %d other status, %d closed without an answer, %d dials failed\n",
		out.attempted.Load(), float64(out.attempted.Load())/elapsed.Seconds(), out.switched.Load(),
		out.closedByPeer.Load(), o.Linger, out.lingerExpired.Load(), out.unauthorized.Load(),
		out.otherStatus.Load(), out.closedAtOnce.Load(), out.dialFailed.Load())
	if child.exited() {
		return errors.New("the connector exited during the attack; see its log above")
	}
	return nil
}

// pacer returns a channel that lets rate sends a second through, until ctx
// ends, released every 10 ms; a closed channel (no bound) when rate is 0.
func pacer(ctx context.Context, rate int) <-chan struct{} {
	pace := make(chan struct{})
	if rate == 0 {
		close(pace)
		return pace
	}
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		start, sent := time.Now(), 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for due := int(time.Since(start).Seconds() * float64(rate)); sent < due; sent++ {
				select {
				case pace <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return pace
}

// upgradeRequest is the flood's request: a WebSocket upgrade of /relay
// with no Authorization header, or with a token signed by no gateway's
// secret.
func upgradeRequest(auth string) string {
	req := "GET /relay HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	if auth == authBad {
		req += "Authorization: Bearer " + contract.MintToken(gatewayID, "not-the-secret", time.Now().Unix()+300) + "\r\n"
	}
	return req + "\r\n"
}

// floodOnce sends one upgrade and reads the answer's status line. It
// returns the socket when the connector switched protocols (the caller
// holds it), else nil with the socket closed.
func floodOnce(addr, request string, out *upgradeOutcome) net.Conn {
	out.attempted.Add(1)
	c, err := attackDialer.Dial("tcp", addr)
	if err != nil {
		out.dialFailed.Add(1)
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		out.closedAtOnce.Add(1)
		_ = c.Close()
		return nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	switch {
	case err != nil:
		out.closedAtOnce.Add(1)
	case resp.StatusCode == http.StatusSwitchingProtocols:
		out.switched.Add(1)
		return c
	case resp.StatusCode == http.StatusUnauthorized:
		out.unauthorized.Add(1)
	default:
		out.otherStatus.Add(1)
	}
	_ = c.Close()
	return nil
}

// holdUpgraded keeps an upgraded socket, answering nothing, until the
// connector closes it or linger passes.
func holdUpgraded(c net.Conn, linger time.Duration, out *upgradeOutcome) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(linger))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		out.lingerExpired.Add(1)
		return
	}
	out.closedByPeer.Add(1)
}

// probes dials the gateway probe every 500 ms until its context ends.
type probes struct {
	mu        sync.Mutex
	latencies []time.Duration
	failures  []string
	done      chan struct{}
}

func startProbes(ctx context.Context, c *child) *probes {
	p := &probes{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			d, err := dialProbe(c)
			p.mu.Lock()
			if err != nil {
				p.failures = append(p.failures, err.Error())
			} else {
				p.latencies = append(p.latencies, d)
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *probes) stop() ([]time.Duration, []string) {
	<-p.done
	return p.latencies, p.failures
}

// probeSummary gives the probes' count, median and maximum dial time, and
// the first failure.
func probeSummary(latencies []time.Duration, failures []string) string {
	s := fmt.Sprintf("%d of %d dials ok", len(latencies), len(latencies)+len(failures))
	if len(latencies) > 0 {
		slices.Sort(latencies)
		s += fmt.Sprintf(", median %s, max %s", latencies[len(latencies)/2].Round(100*time.Microsecond),
			latencies[len(latencies)-1].Round(100*time.Microsecond))
	}
	if len(failures) > 0 {
		s += "; first failure: " + failures[0]
	}
	return s
}
