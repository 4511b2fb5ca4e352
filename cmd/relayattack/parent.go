package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"connector/relay"
)

// Names of the one tenant and gateway the attack runs as.
const (
	tenantID  = "attack-tenant"
	gatewayID = "attack-gw"
)

// secretEnv passes the gateway secret to the attacker process.
const secretEnv = "RELAYATTACK_SECRET"

// attackerGrace is how long the attacker may run past what its options ask
// (dialing, probing) before it is killed; settleWait bounds the wait for
// the connector to return to its baseline after the attacker is gone.
const (
	attackerGrace = 2 * time.Minute
	settleWait    = 30 * time.Second
)

func parentMain(args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions("relayattack", args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "relayattack: %v\n", err)
		}
		return 2
	}
	if err := attack(&o, stdout); err != nil {
		fmt.Fprintf(stderr, "relayattack: %v\n", err)
		return 1
	}
	return 0
}

// attack runs one mode against a fresh in-process relay.
func attack(o *options, out io.Writer) error {
	var logBytes countingWriter
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return err
	}
	t, err := startTarget(o, slog.New(slog.NewJSONHandler(&logBytes, &slog.HandlerOptions{Level: level})))
	if err != nil {
		return err
	}
	defer t.close()
	base := t.sample()
	fmt.Fprintf(out, "before:  %s\n", base)

	child, err := t.startAttacker(o)
	if err != nil {
		return err
	}
	if o.Mode == modeBurst {
		start := time.Now()
		tick := time.NewTicker(time.Second)
	watch:
		for {
			select {
			case <-child.done:
				break watch
			case <-tick.C:
				fmt.Fprintf(out, "t=%-4s   %s\n", time.Since(start).Round(time.Second), t.sample())
			}
		}
		tick.Stop()
	}
	result, err := child.wait()
	io.WriteString(out, result)
	if err != nil {
		return err
	}
	after, took := t.settle(base)
	fmt.Fprintf(out, "after:   %s (%v after the attacker exited)\n", after, took.Round(time.Millisecond))
	n, lines := logBytes.counts()
	if o.Mode == modeBurst {
		fmt.Fprintf(out, "log:     %d bytes in %d lines for %d connections: %.2f bytes, %.4f lines per connection\n",
			n, lines, o.Conns, float64(n)/float64(o.Conns), float64(lines)/float64(o.Conns))
		return nil
	}
	frames, ok := resultField(result, "frames")
	if !ok || frames == 0 {
		return errors.New("the attacker reported no frames sent")
	}
	fmt.Fprintf(out, "log:     %d bytes in %d lines for %d frames: %.2f bytes, %.4f lines per frame\n",
		n, lines, frames, float64(n)/float64(frames), float64(lines)/float64(frames))
	fmt.Fprintf(out, "metrics: %d frames counted as ignored\n", t.metrics.ignored.Load())
	return nil
}

// target is the in-process relay under attack.
type target struct {
	relay   *relay.Server
	http    *http.Server
	url     string
	secret  string
	metrics *connGauge
}

func startTarget(o *options, log *slog.Logger) (*target, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	t := &target{secret: hex.EncodeToString(b[:]), metrics: &connGauge{}}
	srv, err := relay.New(relay.Config{
		Tenants:            []relay.Tenant{{ID: tenantID, Gateways: []relay.Gateway{{ID: gatewayID, Secrets: []string{t.secret}}}}},
		Log:                log,
		Metrics:            t.metrics,
		MaxConnsPerGateway: o.Limit,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/relay", srv)
	t.relay, t.http, t.url = srv, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, "ws://"+ln.Addr().String()+"/relay"
	go func() { _ = t.http.Serve(ln) }()
	return t, nil
}

func (t *target) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = t.relay.Shutdown(ctx)
	_ = t.http.Shutdown(ctx)
}

// sample is one reading of the connector's resources.
type sample struct {
	conns, maxConns int64
	fds, goroutines int
}

func (s sample) String() string {
	return fmt.Sprintf("gateway connections %5d (most at once %5d)  open fds %5d  goroutines %5d",
		s.conns, s.maxConns, s.fds, s.goroutines)
}

func (t *target) sample() sample {
	return sample{conns: t.metrics.live.Load(), maxConns: t.metrics.max.Load(), fds: openFDs(), goroutines: runtime.NumGoroutine()}
}

// settle waits, up to settleWait, for the relay to serve no connection and
// for goroutines and fds to return to base, and returns the last reading.
func (t *target) settle(base sample) (sample, time.Duration) {
	start := time.Now()
	for {
		s := t.sample()
		if (s.conns == 0 && s.goroutines <= base.goroutines && s.fds <= base.fds) || time.Since(start) > settleWait {
			return s, time.Since(start)
		}
		time.Sleep(50 * time.Millisecond) // polling: goroutines ending signal nothing
	}
}

// openFDs counts this process's open file descriptors (-1 if unknown).
func openFDs() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries) - 1 // ReadDir's own descriptor
}

// attacker is the running attacker process.
type attacker struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (t *target) startAttacker(o *options) (*attacker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	a := &attacker{done: make(chan struct{})}
	a.cmd = exec.Command(exe, o.args(t.url)...)
	a.cmd.Env = append(os.Environ(), roleEnv+"="+roleAttacker, secretEnv+"="+t.secret)
	a.cmd.Stdout, a.cmd.Stderr = &a.out, os.Stderr
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start attacker: %w", err)
	}
	go func() {
		timer := time.AfterFunc(o.Hold+attackerGrace, func() { _ = a.cmd.Process.Kill() })
		a.err = a.cmd.Wait()
		timer.Stop()
		close(a.done)
	}()
	return a, nil
}

// wait returns the attacker's output once it exited.
func (a *attacker) wait() (string, error) {
	<-a.done
	if a.err != nil {
		return a.out.String(), fmt.Errorf("attacker: %w", a.err)
	}
	return a.out.String(), nil
}

// resultField reads "key=<int>" from the attacker's "result" line.
func resultField(out, key string) (int, bool) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "result" {
			continue
		}
		for _, f := range fields[1:] {
			if v, ok := strings.CutPrefix(f, key+"="); ok {
				n, err := strconv.Atoi(v)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// connGauge implements relay.Metrics: the gateway connections the relay
// serves, the most it served at once, and the frames it ignored.
type connGauge struct {
	live, max, ignored atomic.Int64
}

// ConnOpened implements relay.Metrics.
func (g *connGauge) ConnOpened(string) {
	n := g.live.Add(1)
	for m := g.max.Load(); n > m && !g.max.CompareAndSwap(m, n); m = g.max.Load() {
	}
}

// ConnClosed implements relay.Metrics.
func (g *connGauge) ConnClosed(string) { g.live.Add(-1) }

// Refused implements relay.Metrics.
func (g *connGauge) Refused(string) {}

// FrameIgnored implements relay.Metrics.
func (g *connGauge) FrameIgnored(string, string) { g.ignored.Add(1) }

// Inbound implements relay.Metrics.
func (g *connGauge) Inbound(string, string, string) {}

// Delivered implements relay.Metrics.
func (g *connGauge) Delivered(string, time.Duration) {}

// Outbound implements relay.Metrics.
func (g *connGauge) Outbound(string, string, string, time.Duration) {}

// Buffered implements relay.Metrics.
func (g *connGauge) Buffered(string, int) {}

// countingWriter counts the bytes and lines written to it and discards them.
type countingWriter struct {
	bytes, lines atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.bytes.Add(int64(len(p)))
	w.lines.Add(int64(bytes.Count(p, []byte("\n"))))
	return len(p), nil
}

func (w *countingWriter) counts() (bytes, lines int64) { return w.bytes.Load(), w.lines.Load() }
