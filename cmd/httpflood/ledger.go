package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"connector/relay/relaytest"
)

// Names of the ledger attack's nexscope side: the generated config binds
// the default room to the attacked tenant with the bot below.
const (
	nexscopeToken = "attack-nexscope-token"
	nexscopeBot   = "hermes"
)

// runLedger reproduces issue 11's ledger attack: -readers gateway
// connections that read every inbound and never acknowledge one, while a
// -members nexscope members send -messages messages of -message-bytes to
// the bot.
// It samples the connector throughout (the peak RSS is kept), closes the
// readers, lets a well-behaved gateway acknowledge whatever is still
// buffered, and samples memory until -settle has passed.
func runLedger(o options, w io.Writer) error {
	child, err := startChild(o)
	if err != nil {
		return err
	}
	defer child.stop()
	fmt.Fprintf(w, "connector pid %d on %s (metrics %s)\n", child.pid(), child.addr, child.metricsURL)
	tbl := &memTable{w: w}
	tbl.header()
	tbl.row("baseline", child.sample(), "")

	ctx, cancel := context.WithTimeout(context.Background(), o.Hold)
	defer cancel()
	readers := make([]*reader, 0, o.Readers)
	for range o.Readers {
		r, err := dialReader(ctx, child)
		if err != nil {
			return fmt.Errorf("reader gateway: %w", err)
		}
		readers = append(readers, r)
	}

	peak := startPeakSampler(child)
	sent, delivered, floodErr := floodNexscope(ctx, child.addr, o.Members, o.Messages, o.MessageBytes)
	under := peak.stop()
	got := awaitInbound(readers, int64(delivered), 10*time.Second)
	tbl.row("flood done", child.sample(), fmt.Sprintf("%d sent, %d delivered to the bot; readers got %d inbound", sent, delivered, got))
	tbl.row("peak", under, "highest RSS sampled every 250 ms while flooding")
	if floodErr != nil {
		fmt.Fprintf(w, "flood ended early: %v\n", floodErr)
	}

	for _, r := range readers {
		r.close()
	}
	tbl.row("readers closed", waitSettled(child, 5*time.Second), "")

	acked, err := drain(child, 60*time.Second)
	status := fmt.Sprintf("a gateway acknowledged %d buffered inbound", acked)
	if err != nil {
		status += ": " + err.Error()
	}
	tbl.row("drained", child.sample(), status)

	start := time.Now()
	for elapsed := 15 * time.Second; elapsed <= o.Settle; elapsed += 15 * time.Second {
		time.Sleep(time.Until(start.Add(elapsed)))
		tbl.row(fmt.Sprintf("+%s idle", elapsed), child.sample(), "")
	}
	if child.exited() {
		return errors.New("the connector exited during the attack; see its log above")
	}
	return nil
}

// memTable prints the ledger attack's samples.
type memTable struct{ w io.Writer }

func (t *memTable) header() {
	fmt.Fprintf(t.w, "%-15s %5s %10s %8s %8s %8s %9s %8s  %s\n",
		"phase", "fds", "goroutines", "rss_mb", "anon_mb", "file_mb", "heap_mb", "buffered", "")
}

func (t *memTable) row(phase string, s sample, note string) {
	fmt.Fprintf(t.w, "%-15s %5d %10d %8.1f %8.1f %8.1f %9.1f %8d  %s\n", phase, s.FDs, s.Goroutines,
		float64(s.RSSKiB)/1024, float64(s.AnonKiB)/1024, float64(s.FileKiB)/1024, float64(s.HeapInuse)/(1<<20), s.Buffered, note)
}

// reader is a gateway connection that reads every frame and acknowledges
// nothing.
type reader struct {
	c       *relaytest.Client
	inbound atomic.Int64
	done    chan struct{}
}

func dialReader(ctx context.Context, child *child) (*reader, error) {
	c, err := relaytest.Dial(ctx, "ws://"+child.addr+"/relay", relaytest.Token(gatewayID, child.secret, time.Now()))
	if err != nil {
		return nil, err
	}
	if _, err := c.Hello(ctx, "relay", ""); err != nil {
		_ = c.CloseNow()
		return nil, err
	}
	r := &reader{c: c, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			f, err := c.Next(context.Background())
			if err != nil {
				return
			}
			if f.Type == "inbound" {
				r.inbound.Add(1)
			}
		}
	}()
	return r, nil
}

// awaitInbound waits until the readers got want inbound between them, or
// timeout passed, and returns how many they got.
func awaitInbound(readers []*reader, want int64, timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	for {
		var got int64
		for _, r := range readers {
			got += r.inbound.Load()
		}
		if got >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *reader) close() {
	_ = r.c.CloseNow()
	<-r.done
}

// floodNexscope has members members join the default room and send n
// messages of size bytes of text to the bot between them, each member one
// at a time, awaiting each ack (the bot acks once the delivery is stored).
// Every message has its own threadId, so its own session, and the
// connector spreads them over the gateway connections. It returns how many
// were sent and how many acks list the bot as having received them.
func floodNexscope(ctx context.Context, addr string, members, n, size int) (sent, delivered int, err error) {
	text := strings.Repeat("x", size)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for m := range members {
		wg.Go(func() {
			s, d, e := floodAsMember(ctx, addr, fmt.Sprintf("flooder-%d", m), text, m, members, n)
			mu.Lock()
			defer mu.Unlock()
			sent, delivered = sent+s, delivered+d
			if err == nil {
				err = e
			}
		})
	}
	wg.Wait()
	return sent, delivered, err
}

// floodAsMember sends messages first, first+step, ... below n as the
// member name.
func floodAsMember(ctx context.Context, addr, name, text string, first, step, n int) (sent, delivered int, err error) {
	q := url.Values{"name": {name}, "token": {nexscopeToken}, "v": {"1"}}
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws?"+q.Encode(), nil)
	if err != nil {
		return 0, 0, fmt.Errorf("nexscope dial: %w", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	for i := first; i < n; i += step {
		id := fmt.Sprintf("flood-%d", i)
		msg, _ := json.Marshal(map[string]any{"type": "msg", "msgId": id, "from": name,
			"to": []string{nexscopeBot}, "threadId": id, "text": text})
		if err := ws.Write(ctx, websocket.MessageText, msg); err != nil {
			return sent, delivered, fmt.Errorf("nexscope write: %w", err)
		}
		sent++
		ok, err := awaitAck(ctx, ws, id)
		if err != nil {
			return sent, delivered, err
		}
		if ok {
			delivered++
		}
	}
	return sent, delivered, ws.Close(websocket.StatusNormalClosure, "")
}

// awaitAck reads until the ack of msgID and reports whether it lists the
// bot as delivered.
func awaitAck(ctx context.Context, ws *websocket.Conn, msgID string) (bool, error) {
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return false, fmt.Errorf("nexscope: waiting for the ack of %s: %w", msgID, err)
		}
		var f struct {
			Type      string   `json:"type"`
			MsgID     string   `json:"msgId"`
			Delivered []string `json:"delivered"`
			Code      string   `json:"code"`
		}
		if json.Unmarshal(data, &f) != nil {
			continue
		}
		switch {
		case f.Type == "error":
			return false, fmt.Errorf("nexscope refused %s: %s", msgID, f.Code)
		case f.Type == "ack" && f.MsgID == msgID:
			for _, d := range f.Delivered {
				if d == nexscopeBot {
					return true, nil
				}
			}
			return false, nil
		}
	}
}

// drain connects a gateway that acknowledges every inbound it gets, until
// the connector reports nothing buffered or timeout passes.
func drain(child *child, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := relaytest.Dial(ctx, "ws://"+child.addr+"/relay", relaytest.Token(gatewayID, child.secret, time.Now()))
	if err != nil {
		return 0, err
	}
	defer c.CloseNow()
	if _, err := c.Hello(ctx, "relay", ""); err != nil {
		return 0, err
	}
	var mu sync.Mutex
	acked := 0
	go func() {
		for {
			f, err := c.Next(ctx, "inbound")
			if err != nil {
				return
			}
			if c.Ack(ctx, f.BufferID) == nil {
				mu.Lock()
				acked++
				mu.Unlock()
			}
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return acked }
	for {
		if s := child.sample(); s.Buffered == 0 {
			return count(), nil
		}
		select {
		case <-ctx.Done():
			return count(), fmt.Errorf("timed out after %s waiting for the buffer to empty", timeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// peakSampler samples the connector every 250 ms until stopped and keeps
// the sample with the highest RSS, with the most fds and goroutines any
// sample had.
type peakSampler struct {
	stopc chan struct{}
	done  chan sample
}

func startPeakSampler(child *child) *peakSampler {
	p := &peakSampler{stopc: make(chan struct{}), done: make(chan sample, 1)}
	go func() {
		var peak sample
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			s := child.sample()
			fds, goroutines := max(peak.FDs, s.FDs), max(peak.Goroutines, s.Goroutines)
			if s.RSSKiB > peak.RSSKiB {
				peak = s
			}
			peak.FDs, peak.Goroutines = fds, goroutines
			select {
			case <-p.stopc:
				p.done <- peak
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peakSampler) stop() sample {
	close(p.stopc)
	return <-p.done
}

// waitSettled samples the connector after d, the time its closes take.
func waitSettled(child *child, d time.Duration) sample {
	time.Sleep(d)
	return child.sample()
}
